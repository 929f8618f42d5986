package blockmanager

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run runs plain SQL of the program's own, in its own transaction.
func run(tb testing.TB, m *Manager, q string, args ...any) {
	tb.Helper()
	require.NoError(tb, refset.InTx(tb.Context(), m.db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, m.sql(q), args...)
		return err
	}), q)
}

// TestOwnTablesBeforeOpen: a program's tables that reference blocks, made before an
// Open: per-block data declared CASCADE and named in Config.Parts goes with its block
// and is warned of nowhere; a holder declared RESTRICT keeps its block alive; the
// manager's own part tables are never warned of; a cascading key the program did not
// declare is, at every Open.
func TestOwnTablesBeforeOpen(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		run(t, m, `CREATE TABLE receipts (block_id TEXT NOT NULL REFERENCES blocks (header_signature) ON DELETE CASCADE, receipt TEXT NOT NULL)`)
		run(t, m, `CREATE INDEX receipts_block ON receipts (block_id)`)
		run(t, m, `CREATE TABLE escrow (deal INTEGER PRIMARY KEY, block_id TEXT NOT NULL REFERENCES blocks (header_signature) ON DELETE RESTRICT)`)
		run(t, m, `CREATE INDEX escrow_block ON escrow (block_id)`)

		logger, logs := testlog.New(slog.LevelWarn)
		m = openManager(t, m.db, Config{Parts: []string{"receipts"}, Logger: logger})
		assert.Empty(t, logs.String(), "declared parts are not warned of")

		ctx := t.Context()
		_, err := m.Put(ctx, chain("k", NullBlockID, 0, 1), refset.Exec[string](m.sql(`INSERT INTO escrow (deal, block_id) VALUES (1, ?)`), 1))
		require.NoError(t, err)
		_, err = m.Put(ctx, chain("d", NullBlockID, 0, 1))
		require.NoError(t, err)
		run(t, m, `INSERT INTO receipts (block_id, receipt) VALUES ('k0000', 'r-k'), ('d0000', 'r-d')`)
		collect(t, m)
		assert.Equal(t, 1, count(t, m, `SELECT COUNT(*) FROM blocks WHERE header_signature = 'k0000'`), "escrow holds its block")
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks WHERE header_signature = 'd0000'`), "receipts hold nothing")
		assert.Equal(t, 1, count(t, m, `SELECT COUNT(*) FROM receipts`), "and go with their block")

		run(t, m, `DELETE FROM escrow`)
		collect(t, m)
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks`))

		run(t, m, `CREATE TABLE pins (block_id TEXT NOT NULL REFERENCES blocks (header_signature) ON DELETE CASCADE)`)
		for range 2 {
			openManager(t, m.db, Config{Parts: []string{"receipts"}, Logger: logger})
		}
		assert.Equal(t, 2, strings.Count(logs.String(), "level=WARN"), "the undeclared key, at each Open: %s", logs.String())
		assert.Contains(t, logs.String(), "pins")
		assert.NotContains(t, logs.String(), "block_batches")
	})
}

// TestOwnTableWhileRunning: a holder table made while the manager's collector runs is
// followed without a restart: a block only it holds survives, and goes once its row
// does.
func TestOwnTableWhileRunning(t *testing.T) {
	eachDB(t, Config{Grace: 20 * time.Millisecond}, func(t *testing.T, m *Manager) {
		passes := testdb.RunCollector(t, m.Collector(), 5*time.Millisecond)

		run(t, m, `CREATE TABLE escrow (deal INTEGER PRIMARY KEY, block_id TEXT NOT NULL REFERENCES blocks (header_signature) ON DELETE RESTRICT)`)
		run(t, m, `CREATE INDEX escrow_block ON escrow (block_id)`)
		_, err := m.Put(t.Context(), chain("k", NullBlockID, 0, 3), refset.Exec[string](m.sql(`INSERT INTO escrow (deal, block_id) VALUES (1, ?)`), 1))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(passes.Followed()) > 0 }, 10*time.Second, 5*time.Millisecond, "the collector follows the new table")
		time.Sleep(50 * time.Millisecond) // passes go on, past the grace period
		assert.Equal(t, 3, count(t, m, `SELECT COUNT(*) FROM blocks`), "the chain escrow holds survives")
		why, err := m.Collector().Why(t.Context(), "k0002")
		require.NoError(t, err)
		require.Len(t, why, 1)
		assert.True(t, strings.HasSuffix(why[0].Table, "escrow"), "%v", why)

		run(t, m, `DELETE FROM escrow`)
		require.Eventually(t, func() bool { return count(t, m, `SELECT COUNT(*) FROM blocks`) == 0 }, 10*time.Second, 5*time.Millisecond,
			"the chain goes once its row does")
		assert.Empty(t, passes.Errors())
	})
}
