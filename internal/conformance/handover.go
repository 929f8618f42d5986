package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completer and controller are the RFC's two components: the completer keeps a
// pending row for the blocks it holds, the controller a heads row.
func (e *env) releasePending() refset.Command[string] {
	return refset.Exec[string](e.sql(`DELETE FROM pending WHERE block_id = ?`), 1)
}

func (e *env) acquireHead() refset.Command[string] {
	return refset.Exec[string](e.sql(`INSERT INTO heads (block_id) VALUES (?)`), 1)
}

func testHandOver(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)

	t.Run("commits both", func(t *testing.T) {
		tok, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
		require.NoError(t, err)
		require.Equal(t, 1, e.count(t, "pending", "block_id = ?", "a"))
		rel, err := tok.Release(e.releasePending())
		require.NoError(t, err)
		acq, err := rel.Acquire(e.acquireHead())
		require.NoError(t, err)
		got, err := acq.Complete(ctx)
		require.NoError(t, err)
		assert.Equal(t, "a", got.ID())
		assert.Equal(t, 0, e.count(t, "pending", "block_id = ?", "a"))
		assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", "a"))
	})

	t.Run("a failing acquire commits neither and the token stays usable", func(t *testing.T) {
		tok, err := set.Add(ctx, mkBlock("b", "", 0), e.insertPending())
		require.NoError(t, err)
		// The controller already has a head row for b: its insert fails.
		e.mustExec(t, `INSERT INTO heads (block_id) VALUES (?)`, "b")
		rel, err := tok.Release(e.releasePending())
		require.NoError(t, err)
		acq, err := rel.Acquire(e.acquireHead())
		require.NoError(t, err)
		_, err = acq.Complete(ctx)
		require.ErrorIs(t, err, refset.ErrDuplicate)
		assert.Equal(t, 1, e.count(t, "pending", "block_id = ?", "b"), "the release was rolled back")

		// Fix the cause; the same token completes.
		e.mustExec(t, `DELETE FROM heads WHERE block_id = ?`, "b")
		got, err := acq.Complete(ctx)
		require.NoError(t, err)
		assert.Equal(t, "b", got.ID())
		assert.Equal(t, 0, e.count(t, "pending", "block_id = ?", "b"))
		assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", "b"))
	})

	t.Run("a release of what was not held fails the hand-over", func(t *testing.T) {
		tok, err := set.Add(ctx, mkBlock("c", "", 0))
		require.NoError(t, err)
		rel, err := tok.Release(e.releasePending())
		require.NoError(t, err)
		acq, err := rel.Acquire(e.acquireHead())
		require.NoError(t, err)
		_, err = acq.Complete(ctx)
		require.ErrorIs(t, err, refset.ErrNotFound)
		assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", "c"))
	})
}

func (e *env) insertPending() refset.Command[string] {
	return refset.Exec[string](e.sql(`INSERT INTO pending (block_id) VALUES (?)`), 1)
}

func testTokenSingleUse(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	var releases, acquires atomic.Int64
	countRelease := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { releases.Add(1); return nil })
	countAcquire := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { acquires.Add(1); return nil })

	tok, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)
	rel, err := tok.Release(countRelease)
	require.NoError(t, err)
	_, err = tok.Release(countRelease)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a second Release")
	_, err = set.Get(ctx, tok)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a Get through a released token")

	acq, err := rel.Acquire(countAcquire)
	require.NoError(t, err)
	_, err = rel.Acquire(countAcquire)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a second Acquire")

	next, err := acq.Complete(ctx)
	require.NoError(t, err)
	_, err = acq.Complete(ctx)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a second Complete")
	tx, err := e.db.Begin(ctx)
	require.NoError(t, err)
	_, err = acq.CompleteTx(ctx, tx)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a CompleteTx after Complete")
	require.NoError(t, tx.Rollback())
	assert.Equal(t, int64(1), releases.Load(), "the release command ran once")
	assert.Equal(t, int64(1), acquires.Load(), "the acquire command ran once")

	// The token Complete returned is a fresh one.
	lease, err := set.Get(ctx, next)
	require.NoError(t, err)
	assert.Equal(t, "a", lease.Value().Hash)

	// Nil tokens and nil commands are refused, not dereferenced.
	var none *refset.RefToken[string]
	_, err = none.Release()
	require.ErrorIs(t, err, refset.ErrInvalidToken)
	_, err = set.Get(ctx, none)
	require.ErrorIs(t, err, refset.ErrInvalidToken)
	_, err = next.Release(nil)
	require.ErrorIs(t, err, refset.ErrInvalidCommand)
	_, err = next.Release()
	require.NoError(t, err, "a refused Release leaves the token usable")
}

// Two goroutines completing the same Acquired at once: exactly one runs the commands.
func testConcurrentComplete(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	for round := range 20 {
		id := string(rune('a' + round))
		tok, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
		require.NoError(t, err)
		rel, err := tok.Release(e.releasePending())
		require.NoError(t, err)
		acq, err := rel.Acquire(e.acquireHead())
		require.NoError(t, err)
		var wg sync.WaitGroup
		var wins, consumed atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := acq.Complete(ctx)
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, refset.ErrTokenConsumed):
					consumed.Add(1)
				default:
					t.Errorf("complete: %v", err)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, int64(1), wins.Load())
		assert.Equal(t, int64(3), consumed.Load())
		assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", id))
	}
}

func testRefusesDeletingHeld(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("held", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("head", "", 0), e.acquireHead())
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("parent", "", 0))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("child", "parent", 1), set.Hold("keeper", 0))
	require.NoError(t, err)

	for _, id := range []string{"held", "head", "parent"} {
		err := e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, id)
		require.ErrorIs(t, err, refset.ErrReferenced, id)
		assert.Equal(t, 1, e.count(t, "blocks", "id = ?", id), "%s is still there", id)
	}
	// With every reference gone, the database lets it go.
	require.NoError(t, e.exec(ctx, `DELETE FROM blocks_holds WHERE object_id = ?`, "held"))
	require.NoError(t, e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, "held"))
}

func testReferenceToMissing(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	err := e.exec(ctx, `INSERT INTO heads (block_id) VALUES (?)`, "ghost")
	require.ErrorIs(t, err, refset.ErrNotFound)
	_, err = set.Add(ctx, mkBlock("orphan", "ghost", 1))
	require.ErrorIs(t, err, refset.ErrNotFound, "a block whose predecessor is missing")
	assert.Equal(t, 0, e.count(t, "blocks", ""))

	// A hold taken through a token whose object has since gone is refused too.
	tok, err := set.Add(ctx, mkBlock("brief", "", 0))
	require.NoError(t, err)
	e.mustExec(t, `DELETE FROM blocks WHERE id = ?`, "brief")
	rel, err := tok.Release()
	require.NoError(t, err)
	acq, err := rel.Acquire(set.Hold("late", 0))
	require.NoError(t, err)
	_, err = acq.Complete(ctx)
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Equal(t, 0, e.count(t, "blocks_holds", ""))
}

func testHolds(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0), set.Hold("completer", 0))
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ? AND object_id = ? AND expires_at IS NULL", "completer", "a"))

	// The hold moves from one holder to another atomically, with an expiry.
	rel, err := tok.Release(set.Unhold("completer"))
	require.NoError(t, err)
	acq, err := rel.Acquire(set.Hold("controller", time.Hour))
	require.NoError(t, err)
	tok, err = acq.Complete(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, e.count(t, "blocks_holds", "holder = ?", "completer"))
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ? AND expires_at IS NOT NULL", "controller"))

	// Unholding what one does not hold stops the hand-over and changes nothing.
	rel, err = tok.Release(set.Unhold("completer"))
	require.NoError(t, err)
	acq, err = rel.Acquire(set.Hold("third", 0))
	require.NoError(t, err)
	_, err = acq.Complete(ctx)
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Equal(t, 0, e.count(t, "blocks_holds", "holder = ?", "third"))

	// Bad holds are refused.
	_, err = set.Upgrade(ctx, "a", set.Hold("", 0))
	require.ErrorIs(t, err, refset.ErrInvalidCommand)
	_, err = set.Upgrade(ctx, "a", set.Hold("x", -time.Second))
	require.ErrorIs(t, err, refset.ErrInvalidCommand)

	// Holding again renews; two holders hold independently.
	_, err = set.Upgrade(ctx, "a", set.Hold("controller", 0), set.Hold("auditor", 0))
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ? AND expires_at IS NULL", "controller"))
	assert.Equal(t, 2, e.count(t, "blocks_holds", "object_id = ?", "a"))
}

func testCancelledContext(t *testing.T, h Harness) {
	e := newEnv(t, h)
	set := e.blocks(t)
	tok, err := set.Add(t.Context(), mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = set.Add(cancelled, mkBlock("b", "", 0))
	require.ErrorIs(t, err, context.Canceled)
	_, err = set.Upgrade(cancelled, "a")
	require.Error(t, err)
	_, err = set.Get(cancelled, tok)
	require.Error(t, err)

	rel, err := tok.Release(e.releasePending())
	require.NoError(t, err)
	acq, err := rel.Acquire(e.acquireHead())
	require.NoError(t, err)
	_, err = acq.Complete(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, e.count(t, "blocks", ""))
	assert.Equal(t, 1, e.count(t, "pending", ""))
	assert.Equal(t, 0, e.count(t, "heads", ""))

	// A context that ends while the hand-over's commands run rolls all of it back.
	tok2, err := set.Add(t.Context(), mkBlock("c", "", 0), e.insertPending())
	require.NoError(t, err)
	rel2, err := tok2.Release(e.releasePending())
	require.NoError(t, err)
	acq2, err := rel2.Acquire(e.acquireHead(), refset.CommandFunc[string](func(ctx context.Context, _ refset.Tx, _ string) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	require.NoError(t, err)
	slow, stop := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	_, err = acq2.Complete(slow)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, e.count(t, "pending", "block_id = ?", "c"))
	assert.Equal(t, 0, e.count(t, "heads", ""))

	// And the first hand-over still completes with a live context.
	_, err = acq.Complete(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 0, e.count(t, "pending", "block_id = ?", "a"))
	assert.Equal(t, 1, e.count(t, "heads", ""))
}
