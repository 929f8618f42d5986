package blockmanager

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/require"
)

// database opens a fresh database of one kind for a test; the same DSN or path
// reopened is how a test restarts a node.
type database struct {
	name string
	// open returns a new database and where it lives.
	open func(tb testing.TB) (refset.Database, string)
	// reopen opens another handle on it, as a restarted process would.
	reopen func(tb testing.TB, where string) refset.Database
}

var databases = []database{
	{
		name: "sqlite",
		open: func(tb testing.TB) (refset.Database, string) {
			path := filepath.Join(tb.TempDir(), "chain.db")
			return openSQLite(tb, path), path
		},
		reopen: func(tb testing.TB, path string) refset.Database { return openSQLite(tb, path) },
	},
	{
		name: "postgres",
		open: func(tb testing.TB) (refset.Database, string) {
			dsn := pgtest.DSN(tb)
			return openPostgres(tb, dsn, postgres.DriverLibPQ), dsn
		},
		reopen: func(tb testing.TB, dsn string) refset.Database { return openPostgres(tb, dsn, postgres.DriverLibPQ) },
	},
	{
		// pgx encodes arguments its own way (arrays above all): the manager's
		// statements run through both drivers.
		name: "pgx",
		open: func(tb testing.TB) (refset.Database, string) {
			dsn := pgtest.DSN(tb)
			return openPostgres(tb, dsn, postgres.DriverPgx), dsn
		},
		reopen: func(tb testing.TB, dsn string) refset.Database { return openPostgres(tb, dsn, postgres.DriverPgx) },
	},
	{
		// Through PgBouncer in transaction mode (pooledOptions).
		name: "pgbouncer",
		open: func(tb testing.TB) (refset.Database, string) {
			dsn := pgtest.Pooled(tb)
			return openPooled(tb, dsn), dsn
		},
		reopen: func(tb testing.TB, dsn string) refset.Database { return openPooled(tb, dsn) },
	},
}

func openSQLite(tb testing.TB, path string) refset.Database {
	tb.Helper()
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(tb testing.TB, dsn, driver string) refset.Database {
	tb.Helper()
	return openPostgresWith(tb, dsn, postgres.Options{Driver: driver})
}

// pooledOptions open a database through PgBouncer in transaction mode: unprepared,
// as a pooler needs, and with pgx (lib/pq's cancel requests may crash the
// harness's PgBouncer 1.18).
var pooledOptions = postgres.Options{Unprepared: true, Driver: postgres.DriverPgx}

func openPooled(tb testing.TB, dsn string) refset.Database {
	tb.Helper()
	return openPostgresWith(tb, dsn, pooledOptions)
}

func openPostgresWith(tb testing.TB, dsn string, opts postgres.Options) refset.Database {
	tb.Helper()
	db, err := postgres.Open(context.Background(), dsn, opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}

// eachDB runs fn as a parallel subtest per database, with a fresh manager.
func eachDB(t *testing.T, cfg Config, fn func(t *testing.T, m *Manager)) {
	t.Helper()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, _ := d.open(t)
			fn(t, openManager(t, db, cfg))
		})
	}
}

func openManager(tb testing.TB, db refset.Database, cfg Config) *Manager {
	tb.Helper()
	if cfg.PageSize == 0 {
		cfg.PageSize = 7 // small pages: every walk spans several
	}
	m, err := Open(context.Background(), db, cfg)
	require.NoError(tb, err)
	m.pagePart = 2 // and every page that spans 4 heights or more is read in two parts
	return m
}

// chain makes n blocks numbered from `from`, each named prefix + number, following
// prev (NullBlockID for a chain from genesis). Each carries a batch and a transaction
// named after it.
func chain(prefix string, prev string, from int64, n int) []Block {
	out := make([]Block, n)
	for i := range n {
		num := from + int64(i)
		id := fmt.Sprintf("%s%04d", prefix, num)
		out[i] = Block{
			HeaderSignature: id, PreviousBlockID: prev, BlockNum: num,
			BatchIDs: IDs{"batch-" + id}, TransactionIDs: IDs{"txn-" + id}, Payload: []byte(id),
		}
		prev = id
	}
	return out
}

func ids(blocks []*Block) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		if b != nil {
			out[i] = b.HeaderSignature
		}
	}
	return out
}

// collect makes every queued block due and collects.
func collect(tb testing.TB, m *Manager) {
	tb.Helper()
	ctx := context.Background()
	past := "now() - interval '1 second'"
	if _, ok := m.db.(*sqlite.DB); ok {
		past = "0"
	}
	require.NoError(tb, refset.InTx(ctx, m.db, func(tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE blocks_review SET review_after = "+past)
		return err
	}))
	_, err := m.Collector().Collect(ctx)
	require.NoError(tb, err)
}

func count(tb testing.TB, m *Manager, q string, args ...any) int {
	tb.Helper()
	var n int
	require.NoError(tb, m.db.Reader().QueryRowContext(context.Background(), m.sql(q), args...).Scan(&n), q)
	return n
}

// lockedBuffer collects a child process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
