package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallOutsideItsUnitIsRefused: a call made inside InTx's function with a
// context that does not carry the unit would wait for the writer the unit holds
// until the context ends (for ever with context.Background()). It fails at once with
// ErrInUnitOfWork, naming the mistake, changes nothing, and leaves the unit usable:
// what the function did with its own context commits.
func TestCallOutsideItsUnitIsRefused(t *testing.T) {
	// Each wrong context ends after wait: a wait that was not refused shows as the
	// context's error, after it.
	const wait = 3 * time.Second
	cases := []struct {
		name string
		// call makes the wrong call inside the unit: outer is the context InTx was
		// given, own the one it gave its function.
		call func(t *testing.T, set *refset.RefSet[item, string], db *DB, outer, own context.Context) error
	}{
		{"InTx's context", func(t *testing.T, set *refset.RefSet[item, string], _ *DB, outer, _ context.Context) error {
			_, err := set.Add(outer, item{Key: "wrong"}) //unitctx:outside the mistake under test
			return err
		}},
		{"a context made from InTx's", func(t *testing.T, set *refset.RefSet[item, string], _ *DB, outer, _ context.Context) error {
			ctx, cancel := context.WithCancel(outer)
			defer cancel()
			_, err := set.Add(ctx, item{Key: "wrong"}) //unitctx:outside the mistake under test
			return err
		}},
		{"a context of its own", func(t *testing.T, set *refset.RefSet[item, string], _ *DB, _, _ context.Context) error {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, err := set.Add(ctx, item{Key: "wrong"}) //unitctx:outside the mistake under test
			return err
		}},
		{"InTx inside InTx with InTx's context", func(t *testing.T, set *refset.RefSet[item, string], db *DB, outer, _ context.Context) error {
			//unitctx:outside the mistake under test
			return refset.InTx(outer, db, func(ctx context.Context, _ refset.Tx) error {
				_, err := set.Add(ctx, item{Key: "wrong"})
				return err
			})
		}},
		{"a Command's call with the unit's outer context", func(t *testing.T, set *refset.RefSet[item, string], _ *DB, outer, own context.Context) error {
			_, err := set.Add(own, item{Key: "cmd"}, refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
				_, err := set.Add(outer, item{Key: "wrong"}) //unitctx:outside the mistake under test
				return err
			}))
			return err
		}},
	}
	eachWriterMode(t, func(t *testing.T, opts Options) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				db, set := itemsDB(t, opts)
				outer, cancel := context.WithTimeout(t.Context(), wait)
				defer cancel()
				var wrong error
				var took time.Duration
				err := refset.InTx(outer, db, func(own context.Context, _ refset.Tx) error {
					if _, err := set.Add(own, item{Key: "right"}); err != nil {
						return err
					}
					start := time.Now()
					wrong = tc.call(t, set, db, outer, own)
					took = time.Since(start)
					return nil // the unit goes on without the refused call
				})
				require.NoError(t, err)
				require.ErrorIs(t, wrong, refset.ErrInUnitOfWork, "took %v", took)
				assert.Less(t, took, wait/3, "refused at once, not after a wait")
				assert.Contains(t, wrong.Error(), "pass the context InTx gave its function")

				ctx := t.Context()
				_, err = set.Load(ctx, "right")
				require.NoError(t, err, "the unit's own work committed")
				for _, id := range []string{"wrong", "cmd"} {
					_, err = set.Load(ctx, id)
					require.ErrorIs(t, err, refset.ErrNotFound, "the refused call changed nothing")
				}
			})
		}
	})
}

// TestWaitForAnotherUnitIsNotRefused: a call with no unit waits for the writer
// while another goroutine's unit holds it, as it should, even when it is made with
// the same context as that unit's InTx (goroutines sharing a request's context), and
// when a goroutine the unit's function started makes it, with InTx's context, and
// the function does not wait for it: that call runs after the unit, on its own.
func TestWaitForAnotherUnitIsNotRefused(t *testing.T) {
	eachWriterMode(t, func(t *testing.T, opts Options) {
		db, set := itemsDB(t, opts)
		ctx := t.Context()

		// Goroutines on one context, each adding in units of its own.
		const goroutines, each = 6, 15
		var wg sync.WaitGroup
		errs := make(chan error, goroutines*each)
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					errs <- refset.InTx(ctx, db, func(own context.Context, _ refset.Tx) error {
						_, err := set.Add(own, item{Key: fmt.Sprintf("g%d-%d", g, i)})
						return err
					})
				}
			})
		}

		// A goroutine started inside a unit, with InTx's context, runs after the unit.
		done := make(chan error, 1)
		err := refset.InTx(ctx, db, func(own context.Context, _ refset.Tx) error {
			go func() {
				_, err := set.Add(ctx, item{Key: "after"}) //unitctx:outside on purpose: work after the unit
				done <- err
			}()
			_, err := set.Add(own, item{Key: "inside"})
			return err
		})
		require.NoError(t, err)
		require.NoError(t, <-done)

		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var n int
		require.NoError(t, db.Writer().QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&n))
		assert.Equal(t, goroutines*each+2, n, "every unit's item, the goroutine's and the unit's own")
	})
}

// A unit of work whose deferred foreign key fails at COMMIT fails alone, with
// ErrConstraint, and leaves nothing: not its rows, not the writer inside its
// transaction (SQLite keeps a transaction open when its COMMIT fails so, and every
// later write would fail), and not the units that shared its group, which commit.
// Each driver, with group commit and without.
func TestDeferredForeignKeyFailsItsUnitAlone(t *testing.T) {
	eachWriterMode(t, func(t *testing.T, opts Options) {
		ctx := t.Context()
		if !opts.NoGroupCommit {
			opts.groupMaxAge = time.Minute // the units below share groups however slow the machine
		}
		db, _ := itemsDB(t, opts)
		count := func(table string) int {
			var n int
			require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n))
			return n
		}

		// pledge runs a unit that pledges item for id and writes its row in units;
		// item must exist by COMMIT.
		pledge := func(ctx context.Context, id, item string) error {
			return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES (?)`, id); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO pledges (id, item) VALUES (?, ?)`, id, item)
				return err
			})
		}
		_, err := db.Writer().ExecContext(ctx, `INSERT INTO items (id) VALUES ('kept')`)
		require.NoError(t, err)

		// Alone.
		err = pledge(ctx, "alone", "no such item")
		require.ErrorIs(t, err, refset.ErrConstraint)
		assert.Zero(t, count("units"), "the failed unit left nothing")
		require.NoError(t, pledge(ctx, "after", "kept"), "the writer is free again")
		assert.Equal(t, 1, count("units"))

		// Among others: eight goroutines at once, one unit in four pledging
		// nothing.
		var wg sync.WaitGroup
		errs := make([]error, 32)
		for g := range 8 {
			wg.Go(func() {
				for i := g; i < len(errs); i += 8 {
					item := "kept"
					if i%4 == 0 {
						item = "no such item"
					}
					errs[i] = pledge(ctx, fmt.Sprintf("u%d", i), item)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if i%4 == 0 {
				assert.ErrorIs(t, err, refset.ErrConstraint, "u%d pledged nothing", i)
			} else {
				assert.NoError(t, err, "u%d pledged what exists", i)
			}
		}
		assert.Equal(t, 1+24, count("units"), "every unit that could commit did, and only those")
		assert.Equal(t, count("units"), count("pledges"))
		rows, err := db.Readers().QueryContext(ctx, `PRAGMA foreign_key_check`)
		require.NoError(t, err)
		assert.False(t, rows.Next(), "a reference dangles")
		require.NoError(t, rows.Close())
	})
}
