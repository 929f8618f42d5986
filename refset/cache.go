package refset

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"weak"
)

// box holds the one in-memory instance of an object. The pointer field keeps it out of
// the runtime's tiny-object allocator, where small pointer-free values share a block and
// are freed (and cleaned up) only when their neighbours are.
type box[T any] struct {
	value T
	_     *byte
}

// cache keeps at most one instance per ID while any lease on it is alive, and none
// once all leases are gone: the map holds only weak pointers, and a cleanup registered
// on each instance removes its entry after the garbage collector frees it.
type cache[T any, ID comparable] struct {
	mu      sync.Mutex
	live    map[ID]weak.Pointer[box[T]]
	loading map[ID]*load[T]
}

// load is one database read in flight; goroutines missing on the same ID wait for it
// instead of reading again.
type load[T any] struct {
	done chan struct{}
	box  *box[T]
	err  error
}

type evictKey[T any, ID comparable] struct {
	id  ID
	ptr weak.Pointer[box[T]]
}

func newCache[T any, ID comparable]() *cache[T, ID] {
	return &cache[T, ID]{
		live:    make(map[ID]weak.Pointer[box[T]]),
		loading: make(map[ID]*load[T]),
	}
}

// get returns the live instance of id, or loads it with fetch. The map lock is never
// held while fetch runs.
func (c *cache[T, ID]) get(ctx context.Context, id ID, fetch func(context.Context) (T, error)) (*box[T], error) {
	for {
		c.mu.Lock()
		if b := c.liveBox(id); b != nil {
			c.mu.Unlock()
			return b, nil
		}
		if l, ok := c.loading[id]; ok {
			c.mu.Unlock()
			select {
			case <-l.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			// The loader's own context may have ended while ours has not: try again
			// rather than fail with someone else's cancellation.
			if l.err != nil && isContextError(l.err) && ctx.Err() == nil {
				continue
			}
			return l.box, l.err
		}
		l := &load[T]{done: make(chan struct{})}
		c.loading[id] = l
		c.mu.Unlock()
		return c.load(ctx, id, l, fetch)
	}
}

// getOwn is get for a read inside a unit of work, by fetch on the unit's
// transaction: a live instance if there is one, and on a miss its own read, not
// another goroutine's (which may be waiting for the connection the unit holds: a pool
// of one). The unit may roll back what it read, so the instance it makes is the
// caller's alone until publish, which the unit calls once it commits, shares it
// (unless another instance went live meanwhile); publish is nil for a live instance.
func (c *cache[T, ID]) getOwn(ctx context.Context, id ID, fetch func(context.Context) (T, error)) (b *box[T], publish func(), err error) {
	c.mu.Lock()
	b = c.liveBox(id)
	c.mu.Unlock()
	if b != nil {
		return b, nil, nil
	}
	value, err := fetch(ctx)
	if err != nil {
		return nil, nil, err
	}
	b = &box[T]{value: value}
	return b, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.liveBox(id) == nil {
			c.share(id, b)
		}
	}, nil
}

// liveBox is the live instance of id, or nil. c.mu is held.
func (c *cache[T, ID]) liveBox(id ID) *box[T] {
	if wp, ok := c.live[id]; ok {
		return wp.Value()
	}
	return nil
}

// share makes b the live instance of id. c.mu is held.
func (c *cache[T, ID]) share(id ID, b *box[T]) {
	wp := weak.Make(b)
	c.live[id] = wp
	runtime.AddCleanup(b, c.evict, evictKey[T, ID]{id: id, ptr: wp})
}

// errLoadPanicked is what goroutines waiting on a load see when the load panicked.
var errLoadPanicked = errors.New("refset: loading the object panicked")

// load runs fetch for the goroutine that missed first. If fetch panics, the waiters
// are released with an error before the panic goes on, never left blocked.
func (c *cache[T, ID]) load(ctx context.Context, id ID, l *load[T], fetch func(context.Context) (T, error)) (*box[T], error) {
	finished := false
	defer func() {
		if !finished {
			var zero T
			c.finish(id, l, zero, errLoadPanicked)
		}
	}()
	value, err := fetch(ctx)
	finished = true
	return c.finish(id, l, value, err)
}

func (c *cache[T, ID]) finish(id ID, l *load[T], value T, err error) (*box[T], error) {
	c.mu.Lock()
	delete(c.loading, id)
	if err == nil {
		// A unit of work that read the object on its own transaction may have
		// shared its instance while this read ran (getOwn's publish): that one is
		// live, and leased, so this read returns it rather than make a second.
		if l.box = c.liveBox(id); l.box == nil {
			l.box = &box[T]{value: value}
			c.share(id, l.box)
		}
	}
	l.err = err
	c.mu.Unlock()
	close(l.done)
	return l.box, err
}

// evict runs after an instance was freed. A newer load may have replaced the entry
// meanwhile, so it deletes only its own.
func (c *cache[T, ID]) evict(k evictKey[T, ID]) {
	c.mu.Lock()
	if c.live[k.id] == k.ptr {
		delete(c.live, k.id)
	}
	c.mu.Unlock()
}

func (c *cache[T, ID]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
