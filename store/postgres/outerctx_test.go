package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hangGuard bounds every wait of these tests: a call that waits for its own unit of
// work would otherwise wait for ever. It is no measure of promptness.
const hangGuard = 30 * time.Second

// outerEnv is a database with a set of blocks in it, "stored" among them, and a
// table of marks that units of work write.
type outerEnv struct {
	db     *DB
	blocks *refset.RefSet[block, string]
	stored *refset.RefToken[string]
}

// newOuterEnv makes db's tables and set, and stores "stored", holding no lease on it:
// a Get or Load of it reads the database.
func newOuterEnv(tb testing.TB, db *DB) *outerEnv {
	tb.Helper()
	ctx := tb.Context()
	_, err := db.Pool().ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS blocks (id text PRIMARY KEY, height bigint NOT NULL);
		CREATE TABLE IF NOT EXISTS marks (name text PRIMARY KEY)`)
	require.NoError(tb, err)
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(tb, err)
	e := &outerEnv{db: db, blocks: refset.New(setStore)}
	e.stored, err = e.blocks.Add(ctx, block{Hash: "stored", Height: 1}, e.blocks.Hold("keeper", 0))
	require.NoError(tb, err)
	return e
}

// has reports whether the table holds a row whose column col is v.
func (e *outerEnv) has(tb testing.TB, table, col, v string) bool {
	tb.Helper()
	var n int
	require.NoError(tb, e.db.Pool().QueryRowContext(tb.Context(), `SELECT count(*) FROM `+table+` WHERE `+col+` = $1`, v).Scan(&n))
	return n > 0
}

// outerCalls are calls of refset made with a context that carries no unit of work:
// each reads or writes on its own, writing (if at all) the block or mark named name.
var outerCalls = []struct {
	name string
	call func(ctx context.Context, e *outerEnv, name string) error
}{
	{"Get", func(ctx context.Context, e *outerEnv, _ string) error {
		_, err := e.blocks.Get(ctx, e.stored)
		return err
	}},
	{"Load", func(ctx context.Context, e *outerEnv, _ string) error {
		_, err := e.blocks.Load(ctx, "stored")
		return err
	}},
	{"Add", func(ctx context.Context, e *outerEnv, name string) error {
		_, err := e.blocks.Add(ctx, block{Hash: name, Height: 2}, e.blocks.Hold("keeper", 0))
		return err
	}},
	{"InTx", func(ctx context.Context, e *outerEnv, name string) error {
		return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO marks (name) VALUES (?)`, name)
			return err
		})
	}},
	{"Reader", func(ctx context.Context, e *outerEnv, _ string) error {
		rows, err := refset.Reader(ctx, e.db).QueryContext(ctx, `SELECT id FROM blocks`)
		if err != nil {
			return err
		}
		return rows.Close()
	}},
}

// onePools make a pool of one connection on a DSN through a driver: Open's, and a
// caller's given to New.
var onePools = []struct {
	name string
	open func(t *testing.T, driver, dsn string) *DB
}{
	{"Options.MaxConns", func(t *testing.T, driver, dsn string) *DB {
		return openWith(t, dsn, Options{Driver: driver, MaxConns: 1})
	}},
	{"caller's pool", func(t *testing.T, driver, dsn string) *DB {
		return newOnCallersPool(t, callersPool(t, driver, dsn))
	}},
}

// TestOuterContextCallRefusedWhenItsUnitHoldsThePool: inside a unit of work that
// holds the pool's only connection, a call made with a context that carries no unit
// would wait for that connection, which the unit frees only once its function
// returns: it fails at once with ErrInUnitOfWork, naming the fix, and writes nothing,
// and the unit, whose function then returns nil, commits.
func TestOuterContextCallRefusedWhenItsUnitHoldsThePool(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		for _, pool := range onePools {
			t.Run(pool.name, func(t *testing.T) {
				e := newOuterEnv(t, pool.open(t, driver, pgtest.DSN(t)))
				for _, c := range outerCalls {
					t.Run(c.name, func(t *testing.T) {
						outer, cancel := context.WithTimeout(t.Context(), hangGuard)
						defer cancel()
						unitMark, outerName := "unit "+c.name, "outer "+c.name
						require.NoError(t, refset.InTx(outer, e.db, func(ctx context.Context, tx refset.Tx) error {
							_, err := tx.ExecContext(ctx, `INSERT INTO marks (name) VALUES (?)`, unitMark)
							require.NoError(t, err)
							err = c.call(outer, e, outerName) //unitctx:outside the call under test
							require.ErrorIs(t, err, refset.ErrInUnitOfWork)
							assert.Contains(t, err.Error(), "pass the context InTx gave its function")
							return nil
						}), "the unit commits after the refused call")
						assert.True(t, e.has(t, "marks", "name", unitMark), "the unit's own write committed")
						assert.False(t, e.has(t, "marks", "name", outerName), "the refused call wrote nothing")
						assert.False(t, e.has(t, "blocks", "id", outerName), "the refused call wrote nothing")
					})
				}
			})
		}
	})
}

// TestOuterContextCallRefusedWhenNestedUnitsHoldThePool: units nested with the
// outer context on one goroutine, as many as the pool has connections, hold them
// all: a call with a context that carries none is refused. So is one on another DB
// made on the same pool, whose units hold the same connections.
func TestOuterContextCallRefusedWhenNestedUnitsHoldThePool(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		e := newOuterEnv(t, openWith(t, pgtest.DSN(t), Options{Driver: driver, MaxConns: 2}))
		same, err := New(t.Context(), e.db.Pool().DB, Options{})
		require.NoError(t, err)
		t.Cleanup(func() { same.Close() })
		outer, cancel := context.WithTimeout(t.Context(), hangGuard)
		defer cancel()
		require.NoError(t, refset.InTx(outer, e.db, func(context.Context, refset.Tx) error {
			return refset.InTx(outer, same, func(context.Context, refset.Tx) error { //unitctx:outside a second connection
				_, err := e.blocks.Load(outer, "stored") //unitctx:outside the call under test
				require.ErrorIs(t, err, refset.ErrInUnitOfWork)
				_, err = e.blocks.Add(outer, block{Hash: "nested", Height: 2}) //unitctx:outside the call under test
				require.ErrorIs(t, err, refset.ErrInUnitOfWork)
				return nil
			})
		}))
		assert.False(t, e.has(t, "blocks", "id", "nested"), "the refused Add wrote nothing")
	})
}

// TestOuterContextCallWaitsForOthers: a call made with a context that carries no unit
// is not refused when the pool can give it a connection that is not its own units':
// with a connection to spare it runs and commits apart from the unit, standing when
// the unit rolls back, as documented; on a pool of one that another goroutine holds
// for a while, it waits for it and then runs, though it is made inside a unit of work
// (of another database).
func TestOuterContextCallWaitsForOthers(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		t.Run("a connection to spare", func(t *testing.T) {
			e := newOuterEnv(t, openWith(t, pgtest.DSN(t), Options{Driver: driver, MaxConns: 2}))
			outer, cancel := context.WithTimeout(t.Context(), hangGuard)
			defer cancel()
			rolledBack := assert.AnError
			err := refset.InTx(outer, e.db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO marks (name) VALUES ('unit')`)
				require.NoError(t, err)
				for _, c := range outerCalls {
					require.NoError(t, c.call(outer, e, "apart "+c.name), c.name) //unitctx:outside the call under test
				}
				return rolledBack
			})
			require.ErrorIs(t, err, rolledBack)
			assert.False(t, e.has(t, "marks", "name", "unit"), "the unit rolled back")
			assert.True(t, e.has(t, "blocks", "id", "apart Add"), "the outer Add committed apart")
			assert.True(t, e.has(t, "marks", "name", "apart InTx"), "the outer InTx committed apart")
		})
		t.Run("another goroutine's connection", func(t *testing.T) {
			e := newOuterEnv(t, openWith(t, pgtest.DSN(t), Options{Driver: driver, MaxConns: 1}))
			other := openWith(t, pgtest.DSN(t), Options{Driver: driver, MaxConns: 1})
			outer, cancel := context.WithTimeout(t.Context(), hangGuard)
			defer cancel()
			held, freed := make(chan struct{}), make(chan error, 1)
			go func() {
				// Holds the pool's one connection in a unit of its own until the call
				// below waits for it.
				freed <- refset.InTx(outer, e.db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO marks (name) VALUES ('holder')`)
					waits := e.db.Pool().Stats().WaitCount
					close(held)
					for err == nil && e.db.Pool().Stats().WaitCount == waits {
						err = ctxerr.Sleep(ctx, time.Millisecond)
					}
					return err
				})
			}()
			require.NoError(t, refset.InTx(outer, other, func(ctx context.Context, tx refset.Tx) error {
				<-held
				_, err := e.blocks.Load(outer, "stored") //unitctx:outside the call under test
				require.NoError(t, err, "the call waited for the other goroutine's connection")
				_, err = e.blocks.Add(outer, block{Hash: "waited", Height: 2}) //unitctx:outside the call under test
				return err
			}))
			require.NoError(t, <-freed)
			assert.True(t, e.has(t, "blocks", "id", "waited"))
			assert.True(t, e.has(t, "marks", "name", "holder"))
		})
	})
}
