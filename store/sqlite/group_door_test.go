package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unitIDs are the ids of the units table, in order.
func unitIDs(tb testing.TB, db *DB) []string {
	tb.Helper()
	var ids []string
	require.NoError(tb, db.Readers().SelectContext(tb.Context(), &ids, `SELECT id FROM units ORDER BY id`))
	return ids
}

// The statements a caller can run on what Begin hands out, by any of its methods,
// all go through the unit: once the unit rolled back, none runs, not even in the
// transaction that goes on with the group's other units. (Before, *sqlx.Tx's
// promoted methods, Exec, Query, PrepareContext, sqlx's Get..., ran on the shared
// transaction unguarded, and what they wrote committed with the next unit.)
func TestGroupCommitUnitHasOneDoor(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		db, _ := itemsDB(t, Options{Driver: driverName, groupMaxAge: time.Minute})
		insert := func(tx interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
		}, id string) {
			_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES (?)`, id)
			require.NoError(t, err)
		}
		waiting := func(n int64) {
			waitFor(ctx, t, func() bool { return engine.Stats(db.storeEngine).Waiting == n })
		}
		a, err := db.Begin(ctx)
		require.NoError(t, err)
		insert(a, "a")
		var wg sync.WaitGroup
		begun := make(chan any, 2)
		wg.Go(func() { b, err := db.Begin(ctx); assert.NoError(t, err); begun <- b })
		waiting(1)
		wg.Go(func() { c, err := db.Begin(ctx); assert.NoError(t, err); begun <- c })
		waiting(2)
		var aErr error
		wg.Go(func() { aErr = a.Commit() }) // waits for the group's commit
		b := (<-begun).(interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
			Rollback() error
		})
		insert(b, "b")
		require.NoError(t, b.Rollback()) // b alone is undone; c gets the transaction

		// b, ended, tries every other way its value offers to run a statement.
		const q = `INSERT INTO units (id) VALUES ('b-after-rollback')`
		if x, ok := b.(interface {
			Exec(string, ...any) (sql.Result, error)
		}); ok {
			_, _ = x.Exec(q)
		}
		if x, ok := b.(interface {
			Query(string, ...any) (*sql.Rows, error)
		}); ok {
			if rows, err := x.Query(q + ` RETURNING id`); err == nil {
				for rows.Next() {
				}
				rows.Close()
			}
		}
		if x, ok := b.(interface {
			PrepareContext(context.Context, string) (*sql.Stmt, error)
		}); ok {
			if st, err := x.PrepareContext(ctx, q); err == nil {
				_, _ = st.ExecContext(ctx)
			}
		}
		if x, ok := b.(interface {
			Get(any, string, ...any) error
		}); ok {
			var id string
			_ = x.Get(&id, q+` RETURNING id`)
		}

		c := (<-begun).(interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
			Commit() error
		})
		insert(c, "c")
		require.NoError(t, c.Commit())
		wg.Wait()
		require.NoError(t, aErr)
		assert.Equal(t, []string{"a", "c"}, unitIDs(t, db), "b, rolled back, left nothing")
	})
}

// A unit that joined a group and runs prepared statements (as clean-up's batch
// deletes a chain, a link at a time) is busy: it is not evicted, however long the
// statements take in all. (Before, a prepared statement did not go through the unit,
// which looked idle and was rolled back.)
func TestGroupCommitKeepsUnitBusyWithPreparedStatements(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		// Far above the gaps between two statements of a busy loop on a loaded machine
		// under the race detector (up to 80 ms seen).
		const evict = 250 * time.Millisecond
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		db, set := itemsDB(t, Options{Driver: driverName, groupMaxAge: time.Minute, groupEvict: evict})
		busyUnitKept(ctx, t, db, set, func(ctx context.Context, tx refset.Tx) error {
			p := prepare(tx)
			for start := time.Now(); time.Since(start) < 4*evict; {
				if _, err := p.ExecContext(ctx, `UPDATE items SET n = n + 1 WHERE id = ?`, "no such item"); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// A unit of work waiting for the writer's connection gives up when its context ends,
// with group commit as without: the connection may be held by reads, on a database
// whose reads and writes share one pool (New with no readers). (Before, a group's
// first unit waited for the connection whatever its context, and every other unit
// queued behind it.)
func TestGroupCommitBeginHonoursContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, noGroup := range []bool{false, true} {
			t.Run(fmt.Sprintf("NoGroupCommit=%v", noGroup), func(t *testing.T) {
				ctx := t.Context()
				pool, err := sql.Open(driverName, "file:"+filepath.Join(t.TempDir(), "x.db")+goodWriter)
				require.NoError(t, err)
				pool.SetMaxOpenConns(1)
				t.Cleanup(func() { pool.Close() })
				db, err := New(ctx, pool, nil, Options{NoGroupCommit: noGroup})
				require.NoError(t, err)
				rows, err := db.Reader().QueryContext(ctx, `SELECT 1 UNION ALL SELECT 2`) // holds the one connection
				require.NoError(t, err)
				defer rows.Close()
				require.True(t, rows.Next())
				free := time.AfterFunc(10*time.Second, func() { rows.Close() }) // never hang the test
				defer free.Stop()

				short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				start := time.Now()
				err = refset.InTx(short, db, func(context.Context, refset.Tx) error { return nil })
				waited := time.Since(start)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Less(t, waited, 2*time.Second, "gave up when its context ended")

				// The writer is free again once the read ends: the next unit runs.
				require.NoError(t, rows.Close())
				require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `CREATE TABLE t (x)`)
					return err
				}))
			})
		}
	})
}

// Each unit of work is told it committed exactly when its rows are in the database,
// when SQLite rolls back a group's transaction under it: a group's first unit, which
// runs without a savepoint, has a write cut short by the statement's context (SQLite
// then rolls back the whole transaction), ignores its error and returns nil, while
// a second unit waits for the writer. (Before, the second unit's SAVEPOINT opened a
// new transaction, its RELEASE committed its row there, and the group's COMMIT
// failed: it was told it failed, with its row in the database; and a statement the
// first unit sent after the rollback committed on its own.)
func TestGroupCommitToldCommittedExactly(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		db, _ := itemsDB(t, Options{Driver: driverName, groupMaxAge: time.Minute})
		count := func(like string) int {
			var n int
			require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM units WHERE id LIKE ?`, like).Scan(&n))
			return n
		}
		const tries, rows = 20, 20_000
		interrupted := 0
		for try := range tries {
			var aErr, bErr error
			var aWrote int // the rows of a's last run's statements that succeeded
			var bRuns int
			var wg sync.WaitGroup
			wg.Go(func() {
				aErr = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					deadline := 3 * time.Millisecond
					if try%10 == 9 { // and now and then one that writes
						deadline = time.Minute
					}
					short, stop := context.WithTimeout(ctx, deadline)
					defer stop()
					_, err := tx.ExecContext(short, fmt.Sprintf(`INSERT INTO units (id) WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < %d) SELECT 'a%d-' || i FROM r`, rows, try))
					aWrote = 0
					if err == nil {
						aWrote = rows
					}
					// Sent after SQLite rolled the transaction back, this would commit
					// on its own.
					if _, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO units (id) VALUES ('a%d-after')`, try)); err == nil {
						aWrote++
					}
					return nil // the statements' errors ignored
				})
			})
			wg.Go(func() {
				time.Sleep(2 * time.Millisecond)
				bErr = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					bRuns++
					_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES (?)`, fmt.Sprintf("b%d", try))
					return err
				})
			})
			wg.Wait()
			a, b := count(fmt.Sprintf("a%d-%%", try)), count(fmt.Sprintf("b%d", try))
			if aWrote < rows {
				interrupted++
			}
			if aErr != nil {
				assert.Zero(t, a, "try %d: a told %v, %d rows of it there", try, aErr, a)
			} else {
				// modernc.org/sqlite may report a statement that ran to its end as
				// failed, when its context ended as it finished: its rows stand.
				assert.True(t, a == aWrote || aWrote < rows && a == aWrote+rows,
					"try %d: a told it committed (its statements wrote %d rows), %d rows of it there", try, aWrote, a)
			}
			assert.Equal(t, bErr == nil, b == 1, "try %d: b told %v (in %d runs), its row there %d times", try, bErr, bRuns, b)
		}
		t.Logf("a's statement was cut short in %d tries of %d", interrupted, tries)
	})
}

// A unit whose context ended before its Commit rolls back, and Commit says so, as
// database/sql's Tx.Commit does. (Before, Commit raced the context's own rollback,
// and mostly won: the unit committed.)
func TestGroupCommitEndedContextRollsBack(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx := t.Context()
		db, _ := itemsDB(t, Options{Driver: driverName})
		for try := range 50 {
			unitCtx, cancel := context.WithCancel(ctx)
			tx, err := db.Begin(unitCtx)
			require.NoError(t, err)
			_, err = tx.ExecContext(unitCtx, `INSERT INTO units (id) VALUES (?)`, fmt.Sprint(try))
			require.NoError(t, err)
			cancel()
			require.ErrorIs(t, tx.Commit(), context.Canceled, "try %d", try)
		}
		assert.Empty(t, unitIDs(t, db), "no unit committed")
	})
}
