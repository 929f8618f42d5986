package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
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

// poolOpener makes a pool on a DSN through a driver, and names it.
type poolOpener struct {
	name string
	open func(t *testing.T, driver, dsn string) *DB
}

// onePools make a pool of one connection on a DSN through a driver: Open's, and a
// caller's given to New.
var onePools = []poolOpener{
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

// newStoreCases are sets NewStore builds: each names its object table, which the
// test creates first, and what NewStore would create for it.
var newStoreCases = []struct {
	name   string
	table  string // created empty before NewStore
	cfg    store.Config
	tables []string // what NewStore creates: they must stay missing when refused
}{
	{"a new set", "fresh", store.Config{Table: "fresh"}, []string{"fresh_holds", "fresh_review"}},
	{"a new set with its HoldsTable", "named", store.Config{Table: "named", HoldsTable: "named_h"}, []string{"named_h", "named_review"}},
	{"a set made before", "", store.Config{Table: "blocks"}, nil},
}

// createBlockTable creates an object table of blocks named name, if not "".
func (e *outerEnv) createBlockTable(tb testing.TB, name string) {
	tb.Helper()
	if name != "" {
		_, err := e.db.Pool().ExecContext(tb.Context(), `CREATE TABLE `+name+` (id text PRIMARY KEY, height bigint NOT NULL)`)
		require.NoError(tb, err)
	}
}

// exists reports whether the database has a table named name.
func (e *outerEnv) exists(tb testing.TB, name string) bool {
	tb.Helper()
	var ok bool
	require.NoError(tb, e.db.Pool().QueryRowContext(tb.Context(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
	return ok
}

// sets is how many sets refset's registry records.
func (e *outerEnv) sets(tb testing.TB) int {
	tb.Helper()
	var n int
	require.NoError(tb, e.db.Pool().QueryRowContext(tb.Context(), `SELECT count(*) FROM refset_sets`).Scan(&n))
	return n
}

// TestNewStoreRefusedWhenItsUnitHoldsThePool: store.NewStore made inside a unit of
// work with a context that does not carry it, on a pool whose one connection the unit
// holds, would wait for that connection in its reads of the catalog and refset's
// registry, its migration and its prepared statements: it fails at once with
// ErrInUnitOfWork and creates nothing, and the unit commits. On a pool of two it
// runs apart from the unit and builds the store.
func TestNewStoreRefusedWhenItsUnitHoldsThePool(t *testing.T) {
	eachOuterEnv(t, func(t *testing.T, e *outerEnv, refused bool) {
		for _, c := range newStoreCases {
			t.Run(c.name, func(t *testing.T) {
				e.createBlockTable(t, c.table)
				sets := e.sets(t)
				outer := guarded(t)
				require.NoError(t, refset.InTx(outer, e.db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO marks (name) VALUES (?)`, "unit NewStore "+c.name)
					require.NoError(t, err)
					s, err := store.NewStore[block, string](outer, e.db, c.cfg) //unitctx:outside the call under test
					if !refused {
						require.NoError(t, err, spare)
						require.NotNil(t, s)
						return nil
					}
					require.ErrorIs(t, err, refset.ErrInUnitOfWork)
					assert.Contains(t, err.Error(), "pass the context InTx gave its function")
					assert.Nil(t, s)
					return nil
				}), "the unit commits after the refused call")
				assert.True(t, e.has(t, "marks", "name", "unit NewStore "+c.name), "the unit's own write committed")
				for _, table := range c.tables {
					assert.Equal(t, !refused, e.exists(t, table), "table %s", table)
				}
				if refused {
					assert.Equal(t, sets, e.sets(t), "the refused NewStore recorded no set")
				}
			})
		}
	})
}

// TestCollectRefusedWhenItsUnitHoldsThePool: clean-up's Collect made inside a unit
// of work with a context that does not carry it, on a pool whose one connection the
// unit holds, would wait for ever (its batches run on workers of its own, whose
// stacks hold no unit): it fails at once with ErrInUnitOfWork and deletes nothing.
// On a pool of two it collects apart from the unit.
func TestCollectRefusedWhenItsUnitHoldsThePool(t *testing.T) {
	eachOuterEnv(t, func(t *testing.T, e *outerEnv, refused bool) {
		c, err := store.NewCollector(t.Context(), e.db, cleanup.Config{Table: "blocks", Grace: time.Nanosecond})
		require.NoError(t, err)
		_, err = e.blocks.Add(t.Context(), block{Hash: "garbage", Height: 2}) // held by nothing
		require.NoError(t, err)
		outer := guarded(t)
		require.NoError(t, refset.InTx(outer, e.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := c.Collect(outer) //unitctx:outside the call under test
			if !refused {
				require.NoError(t, err, spare)
				return nil
			}
			require.ErrorIs(t, err, refset.ErrInUnitOfWork)
			assert.Contains(t, err.Error(), "pass the context InTx gave its function")
			return nil
		}))
		assert.Equal(t, !refused, !e.has(t, "blocks", "id", "garbage"), "collected only where not refused")
	})
}

// TestCommandOfStandAloneCallRefusedWhenItsUnitHoldsThePool: a stand-alone Add,
// Complete or Upgrade runs its commands in a transaction of its own, a unit of work
// like InTx's (its function runs in the frames that name the pool): a call a Command
// makes with a context that does not carry it, on a pool whose one connection that
// transaction holds, fails at once with ErrInUnitOfWork, and the Add, Complete or
// Upgrade fails with the command's error and changes nothing. On a pool of two the
// call runs apart and the Add, Complete or Upgrade commits.
func TestCommandOfStandAloneCallRefusedWhenItsUnitHoldsThePool(t *testing.T) {
	calls := []struct {
		name string
		// run runs cmd in a stand-alone call that writes the block name (an Add) or
		// a hold by name (a Complete), with ctx.
		run func(ctx context.Context, t *testing.T, e *outerEnv, name string, cmd refset.Command[string]) error
		// wrote reports whether the call's write is in the database.
		wrote func(t *testing.T, e *outerEnv, name string) bool
	}{
		{"Add", func(ctx context.Context, _ *testing.T, e *outerEnv, name string, cmd refset.Command[string]) error {
			_, err := e.blocks.Add(ctx, block{Hash: name, Height: 3}, e.blocks.Hold("keeper", 0), cmd)
			return err
		}, func(t *testing.T, e *outerEnv, name string) bool { return e.has(t, "blocks", "id", name) }},
		{"Complete", func(ctx context.Context, t *testing.T, e *outerEnv, name string, cmd refset.Command[string]) error {
			tok, err := e.blocks.Add(ctx, block{Hash: name, Height: 3}, e.blocks.Hold("keeper", 0))
			require.NoError(t, err)
			rel, err := tok.Release(cmd)
			require.NoError(t, err)
			acq, err := rel.Acquire(e.blocks.Hold(name, 0))
			require.NoError(t, err)
			_, err = acq.Complete(ctx)
			return err
		}, func(t *testing.T, e *outerEnv, name string) bool { return e.has(t, "blocks_holds", "holder", name) }},
		{"Upgrade", func(ctx context.Context, _ *testing.T, e *outerEnv, name string, cmd refset.Command[string]) error {
			_, err := e.blocks.Upgrade(ctx, "stored", e.blocks.Hold(name, 0), cmd)
			return err
		}, func(t *testing.T, e *outerEnv, name string) bool { return e.has(t, "blocks_holds", "holder", name) }},
	}
	eachOuterEnv(t, func(t *testing.T, e *outerEnv, refused bool) {
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				outer := guarded(t)
				name := "command of " + c.name
				var inner error
				cmd := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
					_, inner = e.blocks.Load(outer, "stored") //unitctx:outside the call under test
					return inner
				})
				err := c.run(outer, t, e, name, cmd)
				if !refused {
					require.NoError(t, inner, spare)
					require.NoError(t, err)
					assert.True(t, c.wrote(t, e, name), "the call committed")
					return
				}
				require.ErrorIs(t, inner, refset.ErrInUnitOfWork, "the Command's call")
				assert.Contains(t, inner.Error(), "pass the context InTx gave its function")
				require.ErrorIs(t, err, refset.ErrInUnitOfWork, "the %s fails with its command's error", c.name)
				assert.Contains(t, err.Error(), "func ", "the error names the failing command")
				assert.False(t, c.wrote(t, e, name), "the failed %s changed nothing", c.name)
			})
		}
	})
}

// spare names the pool of two connections that eachOuterEnv runs last: a unit of
// work holds one, and a call made inside its function with another context takes the
// other, not refused.
const spare = "a connection to spare"

// eachOuterEnv runs fn as a subtest per driver and pool, on a new outerEnv: the pools
// of onePools, on which refused is true, and spare's.
func eachOuterEnv(t *testing.T, fn func(t *testing.T, e *outerEnv, refused bool)) {
	pools := append(slices.Clip(onePools), poolOpener{spare, func(t *testing.T, driver, dsn string) *DB {
		return openWith(t, dsn, Options{Driver: driver, MaxConns: 2})
	}})
	forEachDriver(t, func(t *testing.T, driver string) {
		for _, pool := range pools {
			t.Run(pool.name, func(t *testing.T) {
				fn(t, newOuterEnv(t, pool.open(t, driver, pgtest.DSN(t))), pool.name != spare)
			})
		}
	})
}

// guarded is the test's context, ended after hangGuard.
func guarded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}
