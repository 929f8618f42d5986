package postgres

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On pgx a cache miss and an Upgrade's lookup run their query on pgx itself, by its
// text (database/sql's prepared statement would run it by a statement name), one
// query each.
func TestPgxReadsLookupsDirectly(t *testing.T) {
	ctx := t.Context()
	tracer := &argsTracer{}
	db := openTracedPgx(t, tracer, Options{})
	e := newHandOverEnv(t, db)
	_, err := e.set.Add(ctx, block{Hash: "a", Height: 7})
	require.NoError(t, err)

	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	set := refset.New(setStore) // an empty cache
	tracer.queries = nil
	tok, err := set.Upgrade(ctx, "a")
	require.NoError(t, err)
	lease, err := set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, block{Hash: "a", Height: 7}, *lease.Value())
	_, err = set.Upgrade(ctx, "missing")
	require.ErrorIs(t, err, refset.ErrNotFound)

	q := tracer.queries
	require.Len(t, q, 3, "%v", q)
	for _, q := range q {
		// database/sql's statements carry pgx's stdlib result formats before the
		// caller's arguments.
		assert.Equal(t, []any{q.args[0]}, q.args, "%s", q.sql)
	}
	assert.Equal(t, []any{"a", "a", "missing"}, []any{q[0].args[0], q[1].args[0], q[2].args[0]})
	assert.Contains(t, q[1].sql, `"height"`, "Get selects the object")
}

// argsTracer records the statements a pgx connection runs, with their arguments.
type argsTracer struct {
	mu      sync.Mutex
	queries []tracedQuery
}

type tracedQuery struct {
	sql  string
	args []any
}

func (r *argsTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, tracedQuery{data.SQL, data.Args})
	return ctx
}

func (r *argsTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A value pgx's own scan refuses but database/sql converts (a number written as text
// into an int64 field) is read as it was before lookups went to pgx directly: the
// read is made again through database/sql.
func TestPgxLookupConvertsAsDatabaseSQLDoes(t *testing.T) {
	ctx := t.Context()
	db := openWith(t, pgtest.DSN(t), Options{Driver: DriverPgx})
	_, err := db.Pool().ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height text NOT NULL);
		INSERT INTO blocks VALUES ('a', '7')`)
	require.NoError(t, err)
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	obj, err := setStore.Get(ctx, db.Reader(), "a")
	require.NoError(t, err)
	assert.Equal(t, block{Hash: "a", Height: 7}, obj)
}

// A pooled connection the server has ended fails the direct read; the lookup is then
// made through database/sql, which takes another connection, so the caller sees no
// error, as before.
func TestPgxLookupSurvivesAnEndedConnection(t *testing.T) {
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	pool := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(1)
	db, err := New(ctx, pool, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	e := newHandOverEnv(t, db)
	for _, id := range []string{"a", "b"} {
		_, err := e.set.Add(ctx, block{Hash: id, Height: 1})
		require.NoError(t, err)
	}
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	_, err = setStore.Get(ctx, db.Reader(), "a")
	require.NoError(t, err)

	var pid int
	require.NoError(t, db.Pool().GetContext(ctx, &pid, `SELECT pg_backend_pid()`))
	admin := openWith(t, pgtest.DSN(t), Options{})
	var ended bool
	require.NoError(t, admin.Pool().GetContext(ctx, &ended, `SELECT pg_terminate_backend($1)`, pid))
	require.True(t, ended)

	obj, err := setStore.Get(ctx, db.Reader(), "b")
	require.NoError(t, err)
	assert.Equal(t, block{Hash: "b", Height: 1}, obj)
	found, err := setStore.Has(ctx, db.Reader(), "a")
	require.NoError(t, err)
	assert.True(t, found)
}

// Load reads an object by its ID with one statement, where Upgrade and Get send two,
// and with none once it is cached: counted at pgx, under database/sql and refset.
func TestLoadSendsOneStatement(t *testing.T) {
	ctx := t.Context()
	db, tracer := tracedPgx(t, Options{})
	e := newHandOverEnv(t, db)
	for _, id := range []string{"a", "b"} {
		_, err := e.set.Add(ctx, block{Hash: id, Height: 1})
		require.NoError(t, err)
	}
	var keep []refset.Lease[block]
	for _, tc := range []struct {
		name    string
		read    func() (refset.Lease[block], error)
		want    int // statements sent
		wantErr error
	}{
		{"Load, a miss", func() (refset.Lease[block], error) { return e.set.Load(ctx, "a") }, 1, nil},
		{"Load, a hit", func() (refset.Lease[block], error) { return e.set.Load(ctx, "a") }, 0, nil},
		{"Upgrade and Get, a miss", func() (refset.Lease[block], error) {
			tok, err := e.set.Upgrade(ctx, "b")
			if err != nil {
				return refset.Lease[block]{}, err
			}
			return e.set.Get(ctx, tok)
		}, 2, nil},
		{"Load, not stored", func() (refset.Lease[block], error) { return e.set.Load(ctx, "nope") }, 1, refset.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tracer.reset()
			lease, err := tc.read()
			batches, alone := tracer.reset()
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				keep = append(keep, lease)
			}
			assert.Empty(t, batches)
			assert.Len(t, alone, tc.want, "%q", alone)
		})
	}
	runtime.KeepAlive(keep)
}
