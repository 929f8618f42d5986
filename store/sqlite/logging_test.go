package sqlite

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogging: on SQLite too, a slow statement and clean-up's passes reach the
// logger given in Options, with structured attributes.
func TestLogging(t *testing.T) {
	log, out := testlog.New(slog.LevelDebug)
	ctx := t.Context()
	db, set := itemsDB(t, Options{Options: store.Options{Logger: log, SlowStatement: time.Millisecond}})

	// An Exec runs the statement through; a query is timed to its first row.
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT count(*) FROM c`)
		return err
	}))
	assert.Contains(t, out.String(), `msg="refset: slow statement"`)
	assert.Contains(t, out.String(), `statement="WITH RECURSIVE c(x)`)

	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items", Grace: time.Millisecond})
	require.NoError(t, err)
	_, err = set.Add(ctx, item{Key: "gone", N: 1})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	_, err = c.Collect(ctx)
	require.NoError(t, err)
	var collected string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, `msg="refset/cleanup: collected"`) && strings.Contains(line, "deleted=1") {
			collected = line
		}
	}
	assert.Contains(t, collected, "table=items", "the pass is logged with its table and counts")
}

// TestWaitOnOwnUnitIsLogged: a call made by a goroutine that a unit of work's
// function started, with a context that does not carry the unit (InTx's own, not the
// one it gave its function), waits for the writer the unit holds; if the function
// waits for the goroutine, until the context ends. It cannot be told from a wait for
// another goroutine's transaction, so it is not refused (the unit's own goroutine's
// call is: TestCallOutsideItsUnitIsRefused), but it is not silent: once the wait
// passes the slow-statement threshold a warning says what is waited for and why.
func TestWaitOnOwnUnitIsLogged(t *testing.T) {
	log, out := testlog.New(slog.LevelInfo) // slog's default level
	ctx := t.Context()
	db, set := itemsDB(t, Options{Options: store.Options{Logger: log, SlowStatement: 50 * time.Millisecond}})

	outer, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	err := refset.InTx(ctx, db, func(context.Context, refset.Tx) error {
		done := make(chan error)
		go func() {
			_, err := set.Add(outer, item{Key: "a", N: 1}) //unitctx:outside the wrong context, on purpose
			done <- err
		}()
		return <-done
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, out.String(), `msg="refset/sqlite: waiting for a connection to begin a transaction"`)
	assert.Contains(t, out.String(), "must use the context InTx gave its function")
}
