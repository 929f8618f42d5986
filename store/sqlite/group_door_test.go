package sqlite

import (
	"context"
	"database/sql"
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
	rows, err := db.Readers().QueryContext(tb.Context(), `SELECT id FROM units ORDER BY id`)
	require.NoError(tb, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(tb, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(tb, rows.Err())
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
		db, _ := groupDB(t, filepath.Join(t.TempDir(), "x.db"), Options{Driver: driverName, groupMaxAge: time.Minute})
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
		const evict = 50 * time.Millisecond
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		db, set := groupDB(t, filepath.Join(t.TempDir(), "x.db"), Options{Driver: driverName, groupMaxAge: time.Minute, groupEvict: evict})
		before := engine.Stats(db.storeEngine)
		bRuns := joinGroup(ctx, t, db, set, func(ctx context.Context, tx refset.Tx, _ int32, _ <-chan struct{}) error {
			p := prepare(tx)
			for start := time.Now(); time.Since(start) < 6*evict; {
				if _, err := p.ExecContext(ctx, `UPDATE items SET n = n + 1 WHERE id = ?`, "no such item"); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('b')`)
			return err
		})
		assert.EqualValues(t, 1, bRuns, "b, busy with prepared statements, was not evicted")
		stats := engine.Stats(db.storeEngine)
		assert.EqualValues(t, before.Commits+1, stats.Commits, "a and b committed together")
		assert.EqualValues(t, before.Units+2, stats.Units)
	})
}
