package conformance

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openPoolOfOne opens a fresh database of h on a caller's pool of one connection
// (testdb.Options.PoolOfOne), closed when tb ends.
func openPoolOfOne(tb testing.TB, h harness) refset.Database {
	tb.Helper()
	return h.Open(tb, testdb.Options{PoolOfOne: true})
}

// testPlainCallsJoinTheUnit checks InTx's promise that a unit of work is never a
// trap: every call of refset made with the context InTx gives its function (or a
// Command gets) joins the unit (writes under a savepoint, reads on its transaction),
// or, if it commits on its own, fails at once with ErrInUnitOfWork; nothing commits
// outside the unit, and nothing waits on the unit's own connection. It runs on the
// harness's usual pool and on a caller's pool of one connection, where every
// documented call must work outside a unit too. A wait on itself would end in the
// deadline: the test then fails instead of hanging.
func testPlainCallsJoinTheUnit(t *testing.T, h harness) {
	for _, pool := range []struct {
		name string
		open func(testing.TB) refset.Database
	}{
		{"pool", func(tb testing.TB) refset.Database { return h.open(tb) }},
		{"pool of one", func(tb testing.TB) refset.Database { return openPoolOfOne(tb, h) }},
	} {
		t.Run(pool.name, func(t *testing.T) {
			e := &env{h: h, db: pool.open(t)}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			blocks := e.chain(t)
			e.mustExec(t, `CREATE TABLE batches (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
			batches := refset.New[intObj, int64](openStore[intObj, int64](t, e, "batches"))
			cfg := cleanup.Config{Table: "blocks", Grace: time.Hour}
			c, err := cleanup.Install(ctx, e.db, cfg)
			require.NoError(t, err)
			addPending := refset.Exec[string](e.sql(`INSERT INTO pending (block_id) VALUES (?)`), 1)

			// Outside any unit, every documented call works, on a pool of one too.
			root, err := blocks.Add(ctx, mkBlock("root", "", 0), e.acquireHead())
			require.NoError(t, err)
			_, err = blocks.Get(ctx, root)
			require.NoError(t, err)
			_, err = blocks.Load(ctx, "root")
			require.NoError(t, err)
			held, err := blocks.Upgrade(ctx, "root", blocks.Hold("h", 0))
			require.NoError(t, err)
			_, err = handOverOf(t, held, blocks.Unhold("h"), addPending).Complete(ctx)
			require.NoError(t, err)
			_, err = batches.AddAll(ctx, []intObj{{Num: 100, Name: "outside"}})
			require.NoError(t, err)
			_, err = c.Collect(ctx)
			require.NoError(t, err)
			_, _, err = c.Sweep(ctx)
			require.NoError(t, err)
			_, err = c.Check(ctx)
			require.NoError(t, err)
			_, err = c.Why(ctx, "root")
			require.NoError(t, err)
			_, _, err = c.Queue(ctx)
			require.NoError(t, err)
			_, err = cleanup.Inspect(ctx, e.db, cfg)
			require.NoError(t, err)
			_, err = cleanup.Status(ctx, e.db)
			require.NoError(t, err)

			tables := []string{"blocks", "batches", "pending", "heads", "blocks_holds"}
			counts := func() map[string]int {
				n := make(map[string]int, len(tables))
				for _, table := range tables {
					n[table] = e.count(t, table, "")
				}
				return n
			}
			before := counts()

			errRollback := errors.New("roll the unit back")
			var unitCtx context.Context
			var fromUnit refset.Lease[block] // kept alive past the unit
			unit := func(commit bool) error {
				return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
					unitCtx = ctx
					a, err := blocks.Add(ctx, mkBlock("a", "root", 1), blocks.Hold("node", 0))
					require.NoError(t, err, "Add in the unit")
					// Reads run on the unit's transaction: they see its own rows.
					fromUnit, err = blocks.Get(ctx, a)
					require.NoError(t, err, "Get in the unit")
					assert.Equal(t, int64(1), fromUnit.Value().Height)
					loaded, err := blocks.Load(ctx, "a")
					require.NoError(t, err, "Load in the unit")
					assert.Same(t, fromUnit.Value(), loaded.Value(), "Load and Get of one ID in one unit share an instance")
					_, err = blocks.Upgrade(ctx, "a")
					require.NoError(t, err, "Upgrade in the unit")
					up, err := blocks.Upgrade(ctx, "a", addPending)
					require.NoError(t, err, "Upgrade with a command in the unit")
					_, err = batches.AddAll(ctx, []intObj{{Num: 1, Name: "one"}, {Num: 2, Name: "two"}})
					require.NoError(t, err, "AddAll in the unit")
					// A Command's context carries the unit: a call in it joins too.
					_, err = blocks.Add(ctx, mkBlock("b", "a", 2), refset.CommandFunc[string](func(ctx context.Context, _ refset.Tx, _ string) error {
						_, err := blocks.Load(ctx, "a")
						return err
					}))
					require.NoError(t, err, "Add whose command loads an object of the unit")
					_, err = handOverOf(t, up, blocks.Unhold("node"), e.acquireHead()).Complete(ctx)
					require.NoError(t, err, "Complete in the unit")
					// A nested InTx is a savepoint of the unit: its failure undoes only itself.
					inner := errors.New("inner unit fails")
					err = refset.InTx(ctx, e.db, func(ctx context.Context, _ refset.Tx) error {
						if _, err := blocks.Add(ctx, mkBlock("c", "a", 2)); err != nil {
							return err
						}
						return inner
					})
					require.ErrorIs(t, err, inner)
					// A unit is one goroutine's: a call made with its context while another
					// runs in it fails at once, changing nothing.
					var second error
					_, err = blocks.Add(ctx, mkBlock("d", "a", 2), refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
						done := make(chan error)
						go func() {
							//unitctx:outside the enclosing unit's context, while the unit runs this Add
							_, err := blocks.Add(ctx, mkBlock("e", "a", 2))
							done <- err
						}()
						second = <-done
						return nil
					}))
					require.NoError(t, err, "the first call")
					assert.ErrorIs(t, second, refset.ErrInvalidTx, "a second call at once in one unit")
					var n int
					require.NoError(t, refset.Reader(ctx, e.db).QueryRowContext(ctx,
						`SELECT COUNT(*) FROM blocks WHERE id IN (?, ?, ?)`, "a", "b", "c").Scan(&n))
					assert.Equal(t, 2, n, "the unit sees a and b, not c, which its nested unit rolled back")
					holders, err := c.Why(ctx, "a")
					require.NoError(t, err, "Why in the unit")
					assert.NotEmpty(t, holders, "Why reads the unit's own references to a")
					// What commits on its own cannot join: it fails at once.
					_, err = c.Collect(ctx)
					assert.ErrorIs(t, err, refset.ErrInUnitOfWork, "Collect in the unit")
					_, _, err = c.Sweep(ctx)
					assert.ErrorIs(t, err, refset.ErrInUnitOfWork, "Sweep in the unit")
					_, err = cleanup.Install(ctx, e.db, cfg)
					assert.ErrorIs(t, err, refset.ErrInUnitOfWork, "Install in the unit")
					_, err = store.NewStore[intObj, int64](ctx, e.db, store.Config{Table: "batches"})
					assert.ErrorIs(t, err, refset.ErrInUnitOfWork, "NewStore in the unit")
					if !commit {
						return errRollback
					}
					return nil
				})
			}

			require.ErrorIs(t, unit(false), errRollback)
			assert.Equal(t, before, counts(), "nothing a call made in the rolled-back unit committed")
			// What the unit read was its own: the rolled-back object is not shared.
			_, err = blocks.Load(ctx, "a")
			assert.ErrorIs(t, err, refset.ErrNotFound, "a Load after the rollback finds no object")
			runtime.KeepAlive(fromUnit)
			// Once InTx returns, its context carries the unit no more.
			_, err = blocks.Add(unitCtx, mkBlock("late", "root", 1), addPending)
			require.NoError(t, err, "Add with the context of an ended unit")
			assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "late"))

			require.NoError(t, unit(true))
			assert.Equal(t, 1, e.count(t, "blocks", "id IN (?, ?)", "a", "b")/2, "a and b committed")
			assert.Equal(t, 0, e.count(t, "blocks", "id IN (?, ?)", "c", "e"))
			assert.Equal(t, before["batches"]+2, e.count(t, "batches", ""))
			assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", "a"))
			assert.Equal(t, 0, e.count(t, "blocks_holds", "holder = ?", "node"))
			// Once the unit committed, what it read is the shared instance.
			shared, err := blocks.Load(ctx, "a")
			require.NoError(t, err)
			assert.Same(t, fromUnit.Value(), shared.Value(), "the unit's instance is shared after its commit")
		})
	}
}

// testReadsInCallersTx checks GetTx and LoadTx: they read in the caller's own
// transaction, see its writes, take no second connection (the database is a pool of
// one), and never share an instance the transaction may roll back.
func testReadsInCallersTx(t *testing.T, h harness) {
	e := &env{h: h, db: openPoolOfOne(t, h)}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	set := e.blocks(t)
	a, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)

	tx, err := e.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	b, err := set.AddTx(ctx, tx, mkBlock("b", "a", 1))
	require.NoError(t, err)
	got, err := set.GetTx(ctx, tx, b)
	require.NoError(t, err, "GetTx sees the transaction's own object")
	assert.Equal(t, "b", got.Value().Hash)
	loaded, err := set.LoadTx(ctx, tx, "b")
	require.NoError(t, err, "LoadTx sees the transaction's own object")
	assert.Equal(t, int64(1), loaded.Value().Height)
	old, err := set.LoadTx(ctx, tx, "a")
	require.NoError(t, err, "LoadTx reads a committed object")
	_, err = set.LoadTx(ctx, tx, "nothing")
	assert.ErrorIs(t, err, refset.ErrNotFound)
	require.NoError(t, tx.Rollback())

	// b was the transaction's alone: after the rollback no Load finds it.
	_, err = set.Load(ctx, "b")
	assert.ErrorIs(t, err, refset.ErrNotFound, "an instance read in a rolled-back transaction is not shared")
	runtime.KeepAlive(got)
	runtime.KeepAlive(loaded)
	again, err := set.Get(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, old.Value().Hash, again.Value().Hash)

	_, err = set.GetTx(ctx, nil, a)
	assert.ErrorIs(t, err, refset.ErrInvalidTx)
	_, err = set.LoadTx(ctx, nil, "a")
	assert.ErrorIs(t, err, refset.ErrInvalidTx)
}
