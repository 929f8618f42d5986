package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/require"
)

// Harness is what a store gives the suite.
type Harness struct {
	// Open returns a new, empty database owned by the test (closed by its cleanup),
	// opened with the store package's Open (a *sqlite.DB or a *postgres.DB): the suite
	// builds its stores with that package's NewStore.
	Open func(tb testing.TB) refset.Database
	// Reopen returns a second, independent handle on the same database as db, as
	// another process would have (closed by the test's cleanup).
	Reopen func(tb testing.TB, db refset.Database) refset.Database
	// Types are the dialect's column types.
	Types Types
	// SkipCancels, when set, is why the tests that end a context while a statement
	// runs (lib/pq then sends the server a cancel request) are skipped: PgBouncer
	// before 1.19.1 may crash on a cancel request lib/pq sends (pgbouncer#801).
	SkipCancels string
}

// OpenOn is a Harness's Open on a fresh database of backend b, opened with opts.
func OpenOn(b testdb.Backend, opts testdb.Options) func(tb testing.TB) refset.Database {
	return func(tb testing.TB) refset.Database {
		tb.Helper()
		return b.Open(tb, opts)
	}
}

// ReopenOn is a Harness's Reopen of a database OpenOn opened, with opts.
func ReopenOn(opts testdb.Options) func(tb testing.TB, db refset.Database) refset.Database {
	return func(tb testing.TB, db refset.Database) refset.Database {
		tb.Helper()
		return testdb.PlaceOf(tb, db).Open(tb, opts)
	}
}

// cancelling marks fn as a test that ends contexts while statements run, skipped
// when the harness says cancel requests must not be sent.
func cancelling(fn func(t *testing.T, h Harness)) func(t *testing.T, h Harness) {
	return func(t *testing.T, h Harness) {
		if h.SkipCancels != "" {
			t.Skip(h.SkipCancels)
		}
		fn(t, h)
	}
}

// Types are column types of a dialect.
type Types struct {
	Text, Int, Bytes, Time, Bool, Float string
}

// env is one test's database.
type env struct {
	h  Harness
	db refset.Database
}

func newEnv(tb testing.TB, h Harness) *env {
	tb.Helper()
	return &env{h: h, db: h.Open(tb)}
}

// newBlocksEnv is the start of most tests: a fresh env with the blocks set on it,
// and the test's context.
func newBlocksEnv(t *testing.T, h Harness) (*env, *refset.RefSet[block, string], context.Context) {
	t.Helper()
	e := newEnv(t, h)
	return e, e.blocks(t), t.Context()
}

// sql rewrites a statement written with ? placeholders and {Text}-style type names
// into the dialect's.
func (e *env) sql(q string) string {
	q = strings.NewReplacer("{Text}", e.h.Types.Text, "{Int}", e.h.Types.Int, "{Bytes}", e.h.Types.Bytes,
		"{Time}", e.h.Types.Time, "{Bool}", e.h.Types.Bool, "{Float}", e.h.Types.Float).Replace(q)
	return e.db.Driver().Rebind(q)
}

// exec runs plain SQL in its own transaction and returns the translated error.
func (e *env) exec(ctx context.Context, q string, args ...any) error {
	return refset.InTx(ctx, e.db, func(tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, e.sql(q), args...)
		return err
	})
}

// mustExec runs plain SQL, the test's own change behind refset's back, and, on a
// database with a replica, waits until the replica shows it: the test's next step,
// a read that may go to the replica, must see the change however far replay lags.
func (e *env) mustExec(tb testing.TB, q string, args ...any) {
	tb.Helper()
	require.NoError(tb, e.exec(context.Background(), q, args...), q)
	e.waitReplica(tb)
}

// waitReplica waits until the database's replica, if it has one, has replayed what
// the primary committed so far.
func (e *env) waitReplica(tb testing.TB) {
	tb.Helper()
	r, ok := e.db.Driver().(refsetdriver.Replicated)
	if !ok || r.Replica() == nil {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for {
		caught, err := r.ReplicaCaughtUp(tb.Context())
		require.NoError(tb, err)
		if caught {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("the replica did not replay the test's change within a minute")
		}
	}
}

func (e *env) count(tb testing.TB, table string, where string, args ...any) int {
	tb.Helper()
	q := "SELECT COUNT(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	require.NoError(tb, e.db.Reader().QueryRowContext(context.Background(), e.sql(q), args...).Scan(&n), q)
	return n
}

// block is the suite's main object: a chained block, as in the RFC.
type block struct {
	Hash    string  `db:"id"`
	Prev    *string `db:"prev"`
	Height  int64   `db:"height"`
	Payload []byte  `db:"payload"`
}

func (b block) ID() string { return b.Hash }

// blocksSchema is the RFC's example: blocks chained by a self-reference, and two
// components' reference tables.
const blocksSchema = `
CREATE TABLE blocks (
    id      {Text} NOT NULL PRIMARY KEY,
    prev    {Text} REFERENCES blocks (id) ON DELETE RESTRICT,
    height  {Int} NOT NULL,
    payload {Bytes}
);
CREATE TABLE pending (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
CREATE TABLE heads   (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
`

// blocks creates the RFC tables and returns a set on them.
func (e *env) blocks(tb testing.TB) *refset.RefSet[block, string] {
	tb.Helper()
	e.createBlocks(tb)
	return refset.New[block, string](openStore[block, string](tb, e, "blocks"))
}

// createBlocks creates the RFC tables only: refset's own tables are not there yet.
func (e *env) createBlocks(tb testing.TB) {
	tb.Helper()
	for _, stmt := range strings.Split(blocksSchema, ";") {
		if strings.TrimSpace(stmt) != "" {
			e.mustExec(tb, stmt)
		}
	}
}

// openStore builds the store of a set on table, as newStore does.
func openStore[T refset.Identifiable[ID], ID comparable](tb testing.TB, e *env, table string) refset.SetStore[T, ID] {
	tb.Helper()
	s, err := newStore[T, ID](tb.Context(), e.db, sqlstore.Config{Table: table})
	require.NoError(tb, err)
	return s
}

// newStore builds a store with the public constructor of db's store package, the
// way users do: NewStore prepares the store's statements (unless the database was
// opened unprepared), and a store built any other way would leave the prepared paths
// untested.
func newStore[T refset.Identifiable[ID], ID comparable](ctx context.Context, db refset.Database, cfg sqlstore.Config) (refset.SetStore[T, ID], error) {
	switch db := db.(type) {
	case *sqlite.DB:
		return sqlite.NewStore[T, ID](ctx, db, sqlite.Config(cfg))
	case *postgres.DB:
		return postgres.NewStore[T, ID](ctx, db, postgres.Config(cfg))
	}
	return nil, fmt.Errorf("conformance: no store package opens a %T", db)
}

func mkBlock(hash string, prev string, height int64) block {
	b := block{Hash: hash, Height: height, Payload: []byte("payload of " + hash)}
	if prev != "" {
		b.Prev = &prev
	}
	return b
}
