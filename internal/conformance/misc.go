package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testBadIdentifiers(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.blocks(t)
	e.mustExec(t, `CREATE TABLE x (id {Int} PRIMARY KEY)`)
	ctx := t.Context()
	for _, cfg := range []sqlstore.Config{
		{Table: "blocks; DROP TABLE x"},
		{Table: `blocks" ; DROP TABLE x; --`},
		{Table: "blocks", IDColumn: "id; DROP TABLE x"},
		{Table: "blocks", HoldsTable: "h; DROP TABLE x"},
		{Table: ""},
		{Table: "a.b.c"},
		{Table: "1blocks"},
		{Table: "blocks", HoldsTable: "schema.h"},
	} {
		t.Run(cfg.Table+"|"+cfg.IDColumn+"|"+cfg.HoldsTable, func(t *testing.T) {
			_, err := newStore[block, string](ctx, e.db, cfg)
			require.ErrorIs(t, err, refset.ErrInvalidIdentifier)
		})
	}
	assert.Equal(t, 0, e.count(t, "x", ""), "table x survived every attempt")
}

func testSchemaMismatch(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.blocks(t)
	e.mustExec(t, `CREATE TABLE nokey (id {Text}, height {Int})`)
	e.mustExec(t, `CREATE TABLE twokeys (id {Text}, prev {Text}, height {Int}, payload {Bytes}, PRIMARY KEY (id, prev))`)
	ctx := t.Context()

	cases := []struct {
		name string
		open func() error
	}{
		{"no such table", func() error {
			_, err := newStore[block, string](ctx, e.db, sqlstore.Config{Table: "nosuch"})
			return err
		}},
		{"no primary key", func() error {
			_, err := newStore[block, string](ctx, e.db, sqlstore.Config{Table: "nokey"})
			return err
		}},
		{"two-column primary key", func() error {
			_, err := newStore[block, string](ctx, e.db, sqlstore.Config{Table: "twokeys"})
			return err
		}},
		{"id column not the key", func() error {
			_, err := newStore[block, string](ctx, e.db, sqlstore.Config{Table: "blocks", IDColumn: "height"})
			return err
		}},
		{"missing column", func() error {
			_, err := newStore[missingColumn, string](ctx, e.db, sqlstore.Config{Table: "blocks"})
			return err
		}},
		{"unsupported field type", func() error {
			_, err := newStore[unsupported, string](ctx, e.db, sqlstore.Config{Table: "blocks"})
			return err
		}},
		{"ID type differs from the key field", func() error {
			_, err := newStore[wrongID, string](ctx, e.db, sqlstore.Config{Table: "blocks"})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.open()
			require.ErrorIs(t, err, refset.ErrSchema)
			t.Log(err)
		})
	}
}

// The mismatch cases' types; embedding block makes them Identifiable.
type missingColumn struct {
	block
	Extra string `db:"extra"`
}

type unsupported struct {
	block
	Ch chan int `db:"ch"`
}

type wrongID struct {
	Num int64 `db:"id"`
}

func (wrongID) ID() string { return "x" }

func testUnitOfWork(t *testing.T, h Harness) {
	e := newEnv(t, h)
	blocks := e.blocks(t)
	e.mustExec(t, `CREATE TABLE batches (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	e.mustExec(t, `CREATE TABLE receipts (block_id {Text} NOT NULL REFERENCES blocks (id), note {Text} NOT NULL)`)
	batches := refset.New[intObj, int64](openStore[intObj, int64](t, e, "batches"))
	ctx := t.Context()
	failure := errors.New("the receipts could not be written")

	// Two sets, a hold and the caller's own SQL: all or nothing.
	unit := func(id string, num int64, fail bool) error {
		return refset.InTx(ctx, e.db, func(tx refset.Tx) error {
			if _, err := blocks.AddTx(ctx, tx, mkBlock(id, "", 0), blocks.Hold("node", 0)); err != nil {
				return err
			}
			if _, err := batches.AddTx(ctx, tx, intObj{Num: num, Name: id}); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO receipts (block_id, note) VALUES (?, ?)`), id, "ok"); err != nil {
				return err
			}
			if fail {
				return failure
			}
			return nil
		})
	}
	require.ErrorIs(t, unit("rolled-back", 1, true), failure)
	for _, table := range []string{"blocks", "batches", "receipts", "blocks_holds"} {
		assert.Equal(t, 0, e.count(t, table, ""), table)
	}
	require.NoError(t, unit("committed", 2, false))
	for _, table := range []string{"blocks", "batches", "receipts", "blocks_holds"} {
		assert.Equal(t, 1, e.count(t, table, ""), table)
	}

	// An Upgrade and a hand-over inside the caller's transaction commit with it.
	require.NoError(t, refset.InTx(ctx, e.db, func(tx refset.Tx) error {
		tok, err := blocks.UpgradeTx(ctx, tx, "committed")
		if err != nil {
			return err
		}
		rel, err := tok.Release(blocks.Unhold("node"))
		if err != nil {
			return err
		}
		acq, err := rel.Acquire(e.acquireHead())
		if err != nil {
			return err
		}
		_, err = acq.CompleteTx(ctx, tx)
		return err
	}))
	assert.Equal(t, 0, e.count(t, "blocks_holds", ""))
	assert.Equal(t, 1, e.count(t, "heads", ""))
}

func testTxFormsKeepCallerTx(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)

	err = refset.InTx(ctx, e.db, func(tx refset.Tx) error {
		// A duplicate inside the caller's transaction fails alone...
		if _, err := set.AddTx(ctx, tx, mkBlock("a", "", 0)); !errors.Is(err, refset.ErrDuplicate) {
			return fmt.Errorf("want ErrDuplicate, got %v", err)
		}
		// ...as does a hand-over whose command fails...
		tok, err := set.UpgradeTx(ctx, tx, "a")
		if err != nil {
			return err
		}
		rel, _ := tok.Release(e.releasePending())
		acq, _ := rel.Acquire(e.acquireHead())
		if _, err := acq.CompleteTx(ctx, tx); !errors.Is(err, refset.ErrNotFound) {
			return fmt.Errorf("want ErrNotFound, got %v", err)
		}
		// ...and the transaction goes on.
		_, err = set.AddTx(ctx, tx, mkBlock("b", "a", 1))
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, 2, e.count(t, "blocks", ""))
	assert.Equal(t, 0, e.count(t, "heads", ""))

	_, err = set.AddTx(ctx, nil, mkBlock("c", "", 0))
	require.ErrorIs(t, err, refset.ErrInvalidTx)
}

// testConcurrentWriters: 32 goroutines adding and handing over at once all succeed;
// on SQLite none sees "database is locked".
func testConcurrentWriters(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	const writers, each = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%02d-%02d", w, i)
				tok, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
				if err == nil {
					var rel *refset.Released[string]
					if rel, err = tok.Release(e.releasePending()); err == nil {
						var acq *refset.Acquired[string]
						if acq, err = rel.Acquire(e.acquireHead()); err == nil {
							_, err = acq.Complete(ctx)
						}
					}
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, writers*each, e.count(t, "heads", ""))
	assert.Equal(t, 0, e.count(t, "pending", ""))
}

// Migrations run once per database, however often and from however many processes
// they are asked for: a version recorded is never applied again. The test component's
// migrations log every run of theirs in a table without a key, so a second run shows.
func testMigrate(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.createBlocks(t)
	ctx := t.Context()
	d, err := schema.SQLOf(e.db)
	require.NoError(t, err)
	logged := fstest.MapFS{
		"0001_log.sql":  {Data: []byte(e.sql(`CREATE TABLE migration_runs (version {Int} NOT NULL); INSERT INTO migration_runs (version) VALUES (1)`))},
		"0002_more.sql": {Data: []byte(`INSERT INTO migration_runs (version) VALUES (2)`)},
	}
	migrate := func(db refset.Database) error {
		if err := schema.Migrate(ctx, db, d); err != nil {
			return err
		}
		if err := schema.MigrateFS(ctx, db, d, "logged", logged); err != nil {
			return err
		}
		_, err := newStore[block, string](ctx, db, sqlstore.Config{Table: "blocks"})
		return err
	}
	// Several handles on a database refset has not seen yet, as several processes would
	// have, migrating and building the same store (which migrates the set) at once; then
	// the same twice more.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := make(chan struct{})
	for range 4 {
		other := h.Reopen(t, e.db)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- migrate(other)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, migrate(e.db))
	require.NoError(t, migrate(e.db))
	assert.Equal(t, []string{"1", "2"}, e.ids(t, "migration_runs", "version"), "each migration ran once")

	versions := map[string]int{"logged": 2}
	for component, kind := range map[string]string{"core": "core", "set:blocks": "set"} {
		ms, err := schema.Migrations(d, kind)
		require.NoError(t, err)
		versions[component] = ms[len(ms)-1].Version
	}
	for component, want := range versions {
		var got int
		require.NoError(t, e.db.Reader().QueryRowContext(ctx, e.sql(`SELECT version FROM refset_schema_version WHERE component = ?`), component).Scan(&got))
		assert.Equal(t, want, got, component)
	}
	var sets int
	require.NoError(t, e.db.Reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM refset_sets`).Scan(&sets))
	assert.Equal(t, 1, sets, "one set registered")
}

func testClosed(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)
	closer, ok := e.db.(interface{ Close() error })
	require.True(t, ok)
	require.NoError(t, closer.Close())
	_, err = set.Add(ctx, mkBlock("b", "", 0))
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = set.Upgrade(ctx, "a")
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = set.Get(ctx, tok)
	require.ErrorIs(t, err, refset.ErrClosed)
}

// A refused foreign key means the same whatever the SQL looks like: deleting a
// referenced block is refset.ErrReferenced, referencing a missing one
// refset.ErrNotFound, however the statement is written and wherever it runs. SQLite
// gives both the same code, so its store must read the statement to tell them apart.
func testForeignKeyErrorsWhateverTheSQL(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("held", "", 0), e.acquireHead())
	require.NoError(t, err)
	// A key without ON DELETE RESTRICT (NO ACTION, the default) fails otherwise than a
	// RESTRICT one on SQLite: as a foreign key (787), not as a trigger (1811).
	e.mustExec(t, `CREATE TABLE receipts (block_id {Text} NOT NULL REFERENCES blocks (id))`)
	_, err = set.Add(ctx, mkBlock("noted", "", 0), refset.Exec[string](e.sql(`INSERT INTO receipts (block_id) VALUES (?)`), 1))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("carrier", "", 0), set.Hold("tester", 0))
	require.NoError(t, err)

	deletes := []string{
		`DELETE FROM blocks WHERE id = ?`,
		`delete from blocks where id = ?`,
		"-- the block is still referenced\nDELETE FROM blocks WHERE id = ?",
		`/* the block is still referenced */ DELETE FROM blocks WHERE id = ?`,
		`WITH doomed AS (SELECT id FROM blocks WHERE id = ?) DELETE FROM blocks WHERE id IN (SELECT id FROM doomed)`,
		`WITH RECURSIVE doomed (id) AS MATERIALIZED (SELECT id FROM blocks WHERE id = ? AND height >= 0) /* ) */
		 DELETE FROM blocks WHERE id IN (SELECT id FROM doomed)`,
	}

	refusals := []struct {
		name  string
		want  error
		arg   string
		forms []string
	}{
		{"delete of a block referenced ON DELETE RESTRICT", refset.ErrReferenced, "held", deletes},
		{"delete of a block referenced by a plain key", refset.ErrReferenced, "noted", deletes},
		{"reference to a missing block", refset.ErrNotFound, "ghost", []string{
			`INSERT INTO heads (block_id) VALUES (?)`,
			`insert into heads (block_id) values (?)`,
			"-- the controller takes it\nINSERT INTO heads (block_id) VALUES (?)",
			`/* the controller takes it */ INSERT INTO heads (block_id) VALUES (?)`,
			`WITH src AS (SELECT CAST(? AS {Text}) AS id) INSERT INTO heads (block_id) SELECT id FROM src`,
			`INSERT INTO heads (block_id) VALUES (?) ON CONFLICT (block_id) DO NOTHING`,
		}},
	}
	// runners are the places a user's statement runs: its own unit of work, a Command
	// of a hand-over that refset runs, and the same hand-over inside a unit of work.
	runners := []struct {
		name string
		run  func(t *testing.T, q string, arg string) error
	}{
		{"InTx", func(t *testing.T, q, arg string) error {
			return refset.InTx(ctx, e.db, func(tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, q, arg)
				return err
			})
		}},
		{"Command via Complete", func(t *testing.T, q, arg string) error {
			_, err := e.handOver(t, set, q, arg).Complete(ctx)
			return err
		}},
		{"Command via CompleteTx in InTx", func(t *testing.T, q, arg string) error {
			acq := e.handOver(t, set, q, arg)
			return refset.InTx(ctx, e.db, func(tx refset.Tx) error {
				_, err := acq.CompleteTx(ctx, tx)
				return err
			})
		}},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			for _, run := range runners {
				for _, q := range r.forms {
					t.Run(run.name+"/"+q, func(t *testing.T) {
						err := run.run(t, e.sql(q), r.arg)
						require.ErrorIs(t, err, r.want)
						assert.Equal(t, 3, e.count(t, "blocks", ""), "nothing was deleted")
						assert.Equal(t, 1, e.count(t, "heads", ""), "nothing was referenced")
						assert.Equal(t, 1, e.count(t, "receipts", ""), "nothing was referenced")
						assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ?", "tester"), "the hand-over was undone")
					})
				}
			}
		})
	}
}

// handOver is a hand-over of carrier whose one command runs q with arg: it drops the
// tester's hold first, so a refusal must undo that too.
func (e *env) handOver(tb testing.TB, set *refset.RefSet[block, string], q, arg string) *refset.Acquired[string] {
	tb.Helper()
	tok, err := set.Upgrade(tb.Context(), "carrier")
	require.NoError(tb, err)
	rel, err := tok.Release(set.Unhold("tester"))
	require.NoError(tb, err)
	acq, err := rel.Acquire(refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, _ string) error {
		_, err := tx.ExecContext(ctx, q, arg)
		return err
	}))
	require.NoError(tb, err)
	return acq
}

// Tables dropped and made again (a test fixture reset, DROP SCHEMA ... CASCADE on
// Postgres) take refset's tables of the set with them, while refset's bookkeeping
// (refset_schema_version, refset_sets) may live elsewhere and stay, recording
// migrations whose tables are gone. A store built on the new tables makes what it
// needs again instead of failing on a missing holds table.
func testTablesDroppedAndMadeAgain(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("before", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)

	for _, table := range []string{"heads", "pending", "blocks_holds", "blocks_review", "blocks"} {
		e.mustExec(t, `DROP TABLE `+table)
	}
	e.createBlocks(t)
	store, err := newStore[block, string](ctx, e.db, sqlstore.Config{Table: "blocks"})
	require.NoError(t, err, "a store on tables made again")
	set = refset.New(store)
	tok, err := set.Add(ctx, mkBlock("after", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)
	_, err = set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "object_id = ?", "after"))
	assert.Equal(t, 0, e.count(t, "blocks_review", ""), "the review queue is there again")
	require.ErrorIs(t, e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, "after"), refset.ErrReferenced,
		"the new holds table references the new blocks table")
}

// A store reads through statements it prepared. A migration that changes what a
// mapped column is (renamed away, and a column of another type added under its name)
// makes Postgres refuse such a statement ("cached plan must not change result type")
// on every connection that prepared it, until it is prepared again; SQLite prepares
// it again by itself. Either way reads go on without the program being restarted.
func testReadsSurviveSchemaChange(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := t.Context()
	e.mustExec(t, `CREATE TABLE named (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	store := openStore[intObj, int64](t, e, "named")
	_, err := refset.New(store).Add(ctx, intObj{Num: 1, Name: "one"})
	require.NoError(t, err)

	steps := []struct {
		migration []string
		want      string
	}{
		{nil, "one"},
		{[]string{`ALTER TABLE named RENAME COLUMN name TO old_name`,
			`ALTER TABLE named ADD COLUMN name {Bytes} NOT NULL DEFAULT ''`}, ""},
	}
	for _, step := range steps {
		for _, m := range step.migration {
			e.mustExec(t, m)
		}
		for range 3 { // enough to reuse a pooled connection's statement
			got, err := store.Get(ctx, e.db.Reader(), 1)
			require.NoError(t, err, "after %q", step.migration)
			assert.Equal(t, intObj{Num: 1, Name: step.want}, got)
			found, err := store.Has(ctx, e.db.Reader(), 1)
			require.NoError(t, err)
			assert.True(t, found)
		}
	}
}
