package refsettest_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/refsettest/sqlitetest"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

type block struct {
	Hash string  `db:"id"`
	Prev *string `db:"prev"`
}

func (b block) ID() string { return b.Hash }

// tables are a chain of blocks and two components' references, valid SQL on both
// databases.
var tables = []string{
	`CREATE TABLE blocks (id TEXT PRIMARY KEY, prev TEXT REFERENCES blocks (id))`,
	`CREATE INDEX blocks_prev ON blocks (prev)`,
	`CREATE TABLE pending_blocks (block_id TEXT PRIMARY KEY REFERENCES blocks (id))`,
	`CREATE TABLE chain_heads (block_id TEXT PRIMARY KEY REFERENCES blocks (id))`,
}

// grace is short so a test can collect what it just made garbage.
const grace = time.Millisecond

// world is a set of blocks with its collector on one store.
type world struct {
	db        refset.Database
	blocks    *refset.RefSet[block, string]
	collector *cleanup.Collector
	// schema is the Postgres schema the test's tables are in, "" on SQLite.
	schema string
}

// stores opens a fresh world on each store, the Postgres ones through both drivers.
var stores = []struct {
	name string
	open func(t *testing.T) world
}{
	{"sqlite", func(t *testing.T) world { return newWorld(t, sqlitetest.Open(t), "") }},
	{"postgres-libpq", func(t *testing.T) world { return openPostgres(t, postgres.DriverLibPQ) }},
	{"postgres-pgx", func(t *testing.T) world { return openPostgres(t, postgres.DriverPgx) }},
}

func openPostgres(t *testing.T, driver string) world {
	db := refsettest.Postgres(t, postgres.Options{Driver: driver})
	var schema string
	require.NoError(t, db.Pool().GetContext(t.Context(), &schema, `SELECT current_schema()`))
	return newWorld(t, db, schema)
}

// newWorld makes the tables, the set and its collector on db.
func newWorld(t *testing.T, db refset.Database, schema string) world {
	createTables(t, db)
	s, err := store.NewStore[block, string](t.Context(), db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	c, err := store.NewCollector(t.Context(), db, cleanup.Config{Table: "blocks", Grace: grace})
	require.NoError(t, err)
	return world{db: db, blocks: refset.New(s), collector: c, schema: schema}
}

func createTables(t *testing.T, db refset.Database) {
	t.Helper()
	for _, q := range tables {
		exec(t, db, q)
	}
}

// exec runs one statement of the test's own in a transaction. It works in a
// cleanup too, where t.Context() is already cancelled.
func exec(t *testing.T, db refset.Database, query string) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, query)
		return err
	}))
}

// add stores a block (after prev, if not "") with the reference cmds write.
func (w world) add(t *testing.T, id, prev string, cmds ...refset.Command[string]) {
	t.Helper()
	b := block{Hash: id}
	if prev != "" {
		b.Prev = &prev
	}
	_, err := w.blocks.Add(t.Context(), b, cmds...)
	require.NoError(t, err)
}

// collect waits out the grace period and collects what is garbage.
func (w world) collect(t *testing.T) cleanup.Stats {
	t.Helper()
	time.Sleep(5 * grace)
	s, err := w.collector.Collect(t.Context())
	require.NoError(t, err)
	return s
}

// recorder is a testing.TB that keeps what the code under test reports instead of
// failing the real test. Fatal and Skip end the goroutine, as testing's do, so they
// must run on one of recorder's own (see run).
type recorder struct {
	testing.TB
	errors  []string
	fatal   bool
	skipped bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatal(args ...any) { r.stop(&r.fatal, fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) { r.stop(&r.fatal, fmt.Sprintf(format, args...)) }

func (r *recorder) Skip(args ...any) { r.stop(&r.skipped, fmt.Sprint(args...)) }

func (r *recorder) stop(flag *bool, msg string) {
	*flag = true
	r.errors = append(r.errors, msg)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own, so a Fatal or Skip ends
// that goroutine and not the test, and returns the recorder and whether f returned.
func run(t *testing.T, f func(tb testing.TB)) (rec *recorder, returned bool) {
	rec = &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(rec)
		returned = true
	}()
	<-done
	return rec, returned
}
