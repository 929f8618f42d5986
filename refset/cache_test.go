package refset

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type item struct{ n int64 }

func waitEmpty(t *testing.T, c *cache[item, int64]) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.len() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 0, c.len())
}

// A small pointer-free value is the case the runtime's tiny allocator would batch;
// the box keeps each instance freeable on its own.
func TestCacheFreesSmallValues(t *testing.T) {
	c := newCache[item, int64]()
	for i := range int64(10_000) {
		b, err := c.get(t.Context(), i, func(context.Context) (item, error) { return item{n: i}, nil })
		require.NoError(t, err)
		require.Equal(t, i, b.value.n)
	}
	waitEmpty(t, c)
}

// After an instance is freed, the next get loads a new one; the old instance's
// cleanup must not remove the new entry.
func TestCacheReloadAfterFree(t *testing.T) {
	c := newCache[item, int64]()
	loads := 0
	fetch := func(context.Context) (item, error) { loads++; return item{n: 1}, nil }
	b, err := c.get(t.Context(), 1, fetch)
	require.NoError(t, err)
	b = nil
	_ = b
	waitEmpty(t, c)

	b2, err := c.get(t.Context(), 1, fetch)
	require.NoError(t, err)
	runtime.GC()
	runtime.GC()
	assert.Equal(t, 1, c.len(), "the live reload stays cached")
	again, err := c.get(t.Context(), 1, fetch)
	require.NoError(t, err)
	assert.Same(t, b2, again)
	assert.Equal(t, 2, loads)
	runtime.KeepAlive(b2)
}

func TestCacheDoesNotKeepErrors(t *testing.T) {
	c := newCache[item, int64]()
	boom := errors.New("boom")
	_, err := c.get(t.Context(), 1, func(context.Context) (item, error) { return item{}, boom })
	require.ErrorIs(t, err, boom)
	b, err := c.get(t.Context(), 1, func(context.Context) (item, error) { return item{n: 1}, nil })
	require.NoError(t, err)
	assert.Equal(t, int64(1), b.value.n)
}

// A goroutine waiting on another's load does not inherit that goroutine's
// cancellation: it loads again with its own context.
func TestCacheWaiterRetriesAfterLoaderCancelled(t *testing.T) {
	c := newCache[item, int64]()
	loaderCtx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := c.get(loaderCtx, 1, func(ctx context.Context) (item, error) {
			close(started)
			<-ctx.Done()
			return item{}, ctx.Err()
		})
		assert.ErrorIs(t, err, context.Canceled)
	}()
	<-started
	waiterDone := make(chan *box[item])
	go func() {
		b, err := c.get(t.Context(), 1, func(context.Context) (item, error) { return item{n: 7}, nil })
		assert.NoError(t, err)
		waiterDone <- b
	}()
	time.Sleep(20 * time.Millisecond) // let the waiter queue behind the load
	cancel()
	wg.Wait()
	b := <-waiterDone
	require.NotNil(t, b)
	assert.Equal(t, int64(7), b.value.n)
}

func TestArg(t *testing.T) {
	type myBytes [4]byte
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"string", Arg("x"), "x"},
		{"int64", Arg(int64(5)), int64(5)},
		{"[32]byte", Arg([32]byte{1, 31: 2}), append([]byte{1}, append(make([]byte, 30), 2)...)},
		{"named byte array", Arg(myBytes{1, 2, 3, 4}), []byte{1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.got)
		})
	}
}

// A load that panics releases the goroutines waiting on it, and the next get loads
// afresh.
func TestCachePanickingLoadReleasesWaiters(t *testing.T) {
	c := newCache[item, int64]()
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		defer func() { _ = recover() }()
		_, _ = c.get(t.Context(), 1, func(context.Context) (item, error) {
			close(started)
			<-release
			panic("store bug")
		})
	}()
	<-started
	waited := make(chan error)
	go func() {
		_, err := c.get(t.Context(), 1, func(context.Context) (item, error) { return item{n: 2}, nil })
		waited <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the waiter queue behind the load
	close(release)
	err := <-waited
	if err != nil {
		require.ErrorIs(t, err, errLoadPanicked)
	}
	b, err := c.get(t.Context(), 1, func(context.Context) (item, error) { return item{n: 3}, nil })
	require.NoError(t, err)
	assert.Contains(t, []int64{2, 3}, b.value.n)
}
