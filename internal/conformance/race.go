package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Race bounds: a round takes a few milliseconds, so both outcomes show within tens of
// rounds; the bounds only stop a broken store, or a loaded machine, from running long.
const (
	raceMinRounds = 200
	raceMaxRounds = 3000
	raceMaxTime   = 45 * time.Second
	// raceHeadStart is the most one side waits before it starts, so that each side
	// sometimes starts first, and the two often overlap.
	raceHeadStart = 2 * time.Millisecond
)

// An object nothing references is deleted (by plain SQL, or by a collector) while a
// goroutine takes a reference to it. Each round ends one of two ways: the reference
// is in place and the object present, or the reference was refused
// (refset.ErrNotFound) and the object is gone; never a reference to a missing object,
// never another error. The test runs rounds until it has seen both ways (a race one
// side always wins tests only that side), within the bounds above.
func testReferenceRaceBothWays(t *testing.T, h Harness) {
	deleters := []struct {
		name string
		// start readies e for this way of deleting and returns it: a delete of id that
		// reports an error only if something went wrong (a delete the database refuses
		// because id is referenced is a lost race, not an error).
		start func(t *testing.T, e *env) func(id string) error
	}{
		{"plain DELETE", func(t *testing.T, e *env) func(string) error {
			return func(id string) error {
				err := e.exec(t.Context(), `DELETE FROM blocks WHERE id = ?`, id)
				if errors.Is(err, refset.ErrReferenced) {
					return nil
				}
				return err
			}
		}},
		{"collector", func(t *testing.T, e *env) func(string) error {
			c := e.collector(t, cleanup.Config{})
			t.Cleanup(func() {
				report, err := c.Check(context.Background())
				assert.NoError(t, err)
				assert.Zero(t, report.Dangling)
			})
			return func(string) error {
				_, err := c.Collect(t.Context())
				return err
			}
		}},
	}
	for _, d := range deleters {
		t.Run(d.name, func(t *testing.T) {
			e := newEnv(t, h)
			set := e.chain(t)
			del := d.start(t, e)
			ctx := t.Context()
			var referenced, deleted, rounds int
			deadline := time.Now().Add(raceMaxTime)
			for ; rounds < raceMaxRounds && time.Now().Before(deadline); rounds++ {
				if rounds >= raceMinRounds && referenced > 0 && deleted > 0 {
					break
				}
				id := fmt.Sprintf("r%05d", rounds)
				_, err := set.Add(ctx, mkBlock(id, "", 0))
				require.NoError(t, err)
				e.makeDue(t, id) // for a collector: due at once, not after the grace period

				// Alternate which side may be held back, by a random part of the head start.
				refDelay, delDelay := time.Duration(rand.Int64N(int64(raceHeadStart))), time.Duration(0)
				if rounds%2 == 1 {
					refDelay, delDelay = delDelay, refDelay
				}
				var wg sync.WaitGroup
				var refErr, delErr error
				start := make(chan struct{})
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-start
					time.Sleep(refDelay)
					_, refErr = set.Upgrade(ctx, id, e.acquireHead())
				}()
				go func() {
					defer wg.Done()
					<-start
					time.Sleep(delDelay)
					delErr = del(id)
				}()
				close(start)
				wg.Wait()
				require.NoError(t, delErr, "round %d", rounds)

				present := e.count(t, "blocks", "id = ?", id) == 1
				headed := e.count(t, "heads", "block_id = ?", id) == 1
				switch {
				case refErr == nil:
					require.True(t, present && headed, "round %d: reference taken, yet present=%v headed=%v", rounds, present, headed)
					referenced++
					// Drop the reference and the object, so rounds do not pile up garbage.
					e.mustExec(t, `DELETE FROM heads WHERE block_id = ?`, id)
				case errors.Is(refErr, refset.ErrNotFound):
					require.False(t, present || headed, "round %d: refused, yet present=%v headed=%v", rounds, present, headed)
					deleted++
				default:
					t.Fatalf("round %d: an error of another kind: %v", rounds, refErr)
				}
			}
			t.Logf("%d rounds: the reference won %d, the delete %d", rounds, referenced, deleted)
			assert.Positive(t, referenced, "in %d rounds the reference never won", rounds)
			assert.Positive(t, deleted, "in %d rounds the delete never won", rounds)
		})
	}
}
