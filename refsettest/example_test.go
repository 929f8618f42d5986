package refsettest_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/refsettest/sqlitetest"
	"github.com/refsetdb/refset/store"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // the SQLite driver of these tests
)

// testHandOver is a test of yours, written against testing.TB so this example can
// run it: in your package it is func TestHandOver(t *testing.T) with the same body.
// A block goes from the completer (pending_blocks) to the chain controller
// (chain_heads); a second block nobody takes is collected.
func testHandOver(t testing.TB) {
	ctx := t.Context()
	db := sqlitetest.Open(t) // a file in t.TempDir(), closed when the test ends
	for _, q := range []string{
		`CREATE TABLE blocks (id TEXT PRIMARY KEY, prev TEXT REFERENCES blocks (id))`,
		`CREATE INDEX blocks_prev ON blocks (prev)`,
		`CREATE TABLE pending_blocks (block_id TEXT PRIMARY KEY REFERENCES blocks (id))`,
		`CREATE TABLE chain_heads (block_id TEXT PRIMARY KEY REFERENCES blocks (id))`,
	} {
		if _, err := db.Writer().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	if err != nil {
		t.Fatal(err)
	}
	blocks := refset.New(setStore)
	// A short grace period, so the test can collect what it has just let go.
	collector, err := store.NewCollector(ctx, db, cleanup.Config{Table: "blocks", Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	tok, err := blocks.Add(ctx, block{Hash: "b1"}, refset.Exec[string](`INSERT INTO pending_blocks (block_id) VALUES (?)`, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocks.Add(ctx, block{Hash: "stray"}); err != nil {
		t.Fatal(err)
	}
	refsettest.AssertHeldBy(t, collector, "b1", "pending_blocks.block_id")

	rel, err := tok.Release(refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = ?`, 1))
	if err != nil {
		t.Fatal(err)
	}
	acq, err := rel.Acquire(refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acq.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := collector.Collect(ctx); err != nil {
		t.Fatal(err)
	}

	refsettest.AssertHeldBy(t, collector, "b1", "chain_heads.block_id (block_id='b1')")
	refsettest.AssertGone(t, collector, "stray")
	refsettest.AssertClean(t, collector)
	// A mistake, to show what a failure says: the hand-over moved the reference.
	refsettest.AssertHeldBy(t, collector, "b1", "pending_blocks.block_id")
}

// A test of a hand-over, with a throwaway database and the assertions. The example
// runs it as go test would and prints what it reports: the one failing assertion.
func Example() {
	t := &printingT{}
	t.run(testHandOver)
	// Output:
	// FAIL: refsettest: AssertHeldBy(b1): held by "chain_heads.block_id (block_id='b1')"; want "pending_blocks.block_id"
	// 	missing: "pending_blocks.block_id"
	// 	unexpected: "chain_heads.block_id (block_id='b1')"
}

// printingT is the little of testing.T the example's test uses, printing failures:
// an Example has no *testing.T to give it.
type printingT struct {
	testing.TB // not set: calling anything not defined below panics
	ctx        context.Context
	cancel     context.CancelFunc
	dir        string
	cleanups   []func()
}

// run runs test on a goroutine of its own, so Fatal can end it, then the cleanups.
func (t *printingT) run(test func(testing.TB)) {
	t.ctx, t.cancel = context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		test(t)
	}()
	<-done
	t.cancel()
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

func (t *printingT) Helper()                  {}
func (t *printingT) Context() context.Context { return t.ctx }
func (t *printingT) Cleanup(f func())         { t.cleanups = append(t.cleanups, f) }

func (t *printingT) Errorf(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
}

func (t *printingT) Fatal(args ...any) {
	fmt.Println(append([]any{"FAIL:"}, args...)...)
	runtime.Goexit()
}

func (t *printingT) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

func (t *printingT) TempDir() string {
	if t.dir == "" {
		dir, err := os.MkdirTemp("", "refsettest-example")
		if err != nil {
			t.Fatal(err)
		}
		t.dir = dir
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return t.dir
}
