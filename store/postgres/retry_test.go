package postgres

import (
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Under SERIALIZABLE, concurrent units of work that each read the whole ledger and
// append the next sequence number conflict (write skew): Postgres aborts all but one
// with SQLSTATE 40001. InTx runs the aborted ones again, so every unit commits, each
// exactly once, and the sequence has no gaps and no duplicates.
func TestInTxRetriesSerializationFailures(t *testing.T) {
	forEachDriver(t, testInTxRetriesSerializationFailures)
}

func testInTxRetriesSerializationFailures(t *testing.T, driver string) {
	dsn := pgtest.DSN(t)
	logs := newLogRecorder()
	db, err := Open(t.Context(), dsn, Options{Isolation: sql.LevelSerializable, MaxConns: 8, Driver: driver, Options: store.Options{Logger: logs.logger()}})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := t.Context()
	_, err = db.Pool.ExecContext(ctx, `CREATE TABLE ledger (seq bigint NOT NULL, writer int NOT NULL)`)
	require.NoError(t, err)

	const writers, units = 4, 10
	var attempts, conflicts atomic.Int64
	// In each round every writer's first attempt reads, then waits until all have
	// read before it writes, so the round's transactions certainly overlap.
	rounds := make([]sync.WaitGroup, units)
	for r := range rounds {
		rounds[r].Add(writers)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*units)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range units {
				first := true
				errs <- refset.InTx(ctx, db, func(tx refset.Tx) error {
					attempts.Add(1)
					var next int64
					if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM ledger`).Scan(&next); err != nil {
						return err
					}
					if first {
						first = false
						rounds[r].Done()
						rounds[r].Wait()
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO ledger (seq, writer) VALUES ($1, $2)`, next, w)
					return err
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			conflicts.Add(1)
			t.Errorf("unit of work failed: %v", err)
		}
	}
	var rows, distinct, top int64
	require.NoError(t, db.Pool.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT seq), COALESCE(MAX(seq), 0) FROM ledger`).Scan(&rows, &distinct, &top))
	assert.Equal(t, int64(writers*units), rows, "every unit committed once")
	assert.Equal(t, rows, distinct, "no sequence number twice")
	assert.Equal(t, rows, top, "no gaps")
	assert.Greater(t, attempts.Load(), rows, "the workload produced conflicts, so retries were exercised")
	retries := logs.find("refset: transaction aborted by the database; retrying")
	assert.Len(t, retries, int(attempts.Load()-rows), "every retry is logged")
	for _, r := range retries {
		assert.Contains(t, r["cause"], "40001", "with its cause")
	}
	t.Logf("%d units, %d attempts", rows, attempts.Load())
}
