package postgres

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logRecorder keeps the records a test's logger writes, as decoded JSON.
type logRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogRecorder() *logRecorder { return &logRecorder{} }

func (r *logRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *logRecorder) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// find is every record whose message is msg.
func (r *logRecorder) find(msg string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.buf.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestLogging: with a logger, refset says what an operator wants to know, with
// structured attributes: slow statements (the caller's and the store's own), a commit
// whose outcome is unknown, clean-up's passes. Retries are checked by
// TestInTxRetriesSerializationFailures.
func TestLogging(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		logs := newLogRecorder()
		db := openWith(t, pgtest.DSN(t), Options{Driver: driver, Options: store.Options{Logger: logs.logger(), SlowStatement: 50 * time.Millisecond}})
		ctx := t.Context()
		_, err := db.Pool.ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
		require.NoError(t, err)

		require.NoError(t, refset.InTx(ctx, db, func(tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_sleep(0.1)`)
			return err
		}))
		slow := logs.find("refset: slow statement")
		require.Len(t, slow, 1)
		assert.Equal(t, "SELECT pg_sleep(0.1)", slow[0]["statement"])
		assert.Equal(t, "WARN", slow[0]["level"])

		store, err := NewStore[block, string](ctx, db, Config{Table: "blocks"})
		require.NoError(t, err)
		set := refset.New(store)
		c, err := NewCollector(ctx, db, cleanup.Config{Table: "blocks", Grace: time.Millisecond})
		require.NoError(t, err)
		_, err = set.Add(ctx, block{Hash: "gone", Height: 1})
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		s, err := c.Collect(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Deleted)
		collected := logs.find("refset/cleanup: collected")
		require.NotEmpty(t, collected)
		last := collected[len(collected)-1]
		assert.EqualValues(t, 1, last["deleted"])
		assert.Equal(t, "blocks", last["table"])

		// The store's own statements are timed too: a lock another session holds
		// makes the insert wait past the threshold.
		locker, err := db.Pool.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = locker.ExecContext(ctx, `LOCK TABLE blocks IN EXCLUSIVE MODE`)
		require.NoError(t, err)
		time.AfterFunc(150*time.Millisecond, func() { _ = locker.Rollback() })
		_, err = set.Add(ctx, block{Hash: "late", Height: 2})
		require.NoError(t, err)
		var storeSlow bool
		for _, r := range logs.find("refset: slow statement") {
			storeSlow = storeSlow || strings.Contains(r["statement"].(string), `INSERT INTO`)
		}
		assert.True(t, storeSlow, "the store's insert was logged as slow")
	})
}

// Without a logger refset logs nothing, not even to slog's default logger.
func TestNoLoggerIsSilent(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{})
	assert.Equal(t, slog.DiscardHandler, db.Driver().Logger().Handler(), "a logger that drops everything")
}
