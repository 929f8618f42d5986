package store_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/require"
)

// newStoreBackend is a database NewStore is tried on. This package's tests link
// go-sqlite3 alone (TestHostileOpen says modernc is not linked), so they open their
// databases with store.Open rather than internal/test/testdb.
type newStoreBackend struct {
	name     string
	postgres bool
	open     func(t *testing.T) refset.Database
}

func newStoreBackends() []newStoreBackend {
	pg := func(driverName string, pooled bool) func(t *testing.T) refset.Database {
		return func(t *testing.T) refset.Database {
			var dsn string
			if pooled {
				dsn, _ = pgtest.NewPooled(t)
			} else {
				dsn, _ = pgtest.New(t)
			}
			db, err := store.Open(t.Context(), dsn, postgres.Options{Driver: driverName, Unprepared: pooled})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return db
		}
	}
	return []newStoreBackend{
		{"sqlite", false, func(t *testing.T) refset.Database {
			db, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlite.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return db
		}},
		{"postgres", true, pg(postgres.DriverLibPQ, false)},
		{"pgx", true, pg(postgres.DriverPgx, false)},
		{"pgbouncer", true, pg(postgres.DriverPgx, true)},
	}
}

// eachNewStoreBackend runs fn as a parallel subtest on each backend.
func eachNewStoreBackend(t *testing.T, fn func(t *testing.T, b newStoreBackend)) {
	eachNewStoreBackendOf(t, func(newStoreBackend) bool { return true }, fn)
}

// eachNewStoreBackendOf is eachNewStoreBackend on the backends of which is true.
func eachNewStoreBackendOf(t *testing.T, of func(newStoreBackend) bool, fn func(t *testing.T, b newStoreBackend)) {
	for _, b := range slices.DeleteFunc(newStoreBackends(), func(b newStoreBackend) bool { return !of(b) }) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// everything is all NewStore could change in db: its tables and indexes, refset's
// record of its sets and of their versions.
func everything(tb testing.TB, db refset.Database, pg bool) []string {
	tb.Helper()
	if !pg {
		out := sqliteSchema(tb, db)
		if len(rows(tb, db, `SELECT name FROM sqlite_master WHERE name = 'refset_schema_version'`)) > 0 {
			out = append(out, rows(tb, db, `SELECT component || ' ' || version FROM refset_schema_version ORDER BY 1`)...)
		}
		return out
	}
	out := rows(tb, db, `SELECT c.relkind::text || ' ' || c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace ORDER BY 1`)
	has := func(table string) bool {
		return len(rows(tb, db, `SELECT relname::text FROM pg_class WHERE relname = $1
AND relnamespace = current_schema()::regnamespace`, table)) > 0
	}
	if has("refset_sets") {
		out = append(out, rows(tb, db, `SELECT table_name || ' ' || id_column || ' ' || holds_table || ' ' || queue_table
FROM refset_sets ORDER BY 1`)...)
	}
	if has("refset_schema_version") {
		out = append(out, rows(tb, db, `SELECT component || ' ' || version FROM refset_schema_version ORDER BY 1`)...)
	}
	return out
}

// idObject is an object whose ID has type ID, in column id.
type idObject[ID comparable] struct {
	Key ID    `db:"id"`
	N   int64 `db:"n"`
}

func (o idObject[ID]) ID() ID { return o.Key }

// Named types, which the ID check judges by what they are underneath.
type (
	blockID string
	height  int64
)

// scannedID values and scans itself: NewStore cannot know what it holds, so it
// takes it on any column.
type scannedID struct{ n int64 }

func (i scannedID) Value() (driver.Value, error) { return i.n, nil }

func (i *scannedID) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		i.n = v
		return nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		i.n = n
		return err
	case []byte:
		n, err := strconv.ParseInt(string(v), 10, 64)
		i.n = n
		return err
	}
	return fmt.Errorf("scannedID: cannot scan %T", src)
}

// idCase is a set of ID type ID on a table whose key column has type column, in
// one dialect; refused says whether NewStore must refuse it.
type idCase struct {
	name     string
	postgres bool
	column   string // "" on SQLite: declared without a type
	goType   string // the ID type as a message writes it
	refused  bool
	// build builds the set's store and, if that works, adds an object held by a
	// holder and reads it back.
	build func(ctx context.Context, t *testing.T, db refset.Database) error
}

func idCaseOf[ID comparable](name string, pg bool, column string, id ID, refused bool) idCase {
	return idCase{name: name, postgres: pg, column: column, goType: fmt.Sprintf("%T", id), refused: refused,
		build: func(ctx context.Context, t *testing.T, db refset.Database) error {
			s, err := store.NewStore[idObject[ID], ID](ctx, db, store.Config{Table: "objs"})
			if err != nil {
				return err
			}
			set := refset.New(s)
			tok, err := set.Add(ctx, idObject[ID]{Key: id, N: 7}, set.Hold("keeper", 0))
			require.NoError(t, err, "a set NewStore takes stores its objects")
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			require.Equal(t, idObject[ID]{Key: id, N: 7}, *lease.Value(), "the ID reads back as it was added")
			return nil
		}}
}

func idCases() []idCase {
	const sq, pg = false, true
	return []idCase{
		// SQLite, by affinity.
		idCaseOf("TEXT, string", sq, "TEXT", "a", false),
		idCaseOf("TEXT, named string", sq, "TEXT", blockID("a"), false),
		idCaseOf("VARCHAR(64), string", sq, "VARCHAR(64)", "a", false),
		idCaseOf("CHARACTER(36), string", sq, "CHARACTER(36)", "a", false),
		idCaseOf("CLOB, string", sq, "CLOB", "a", false),
		idCaseOf("INTEGER, int64", sq, "INTEGER", int64(42), false),
		idCaseOf("INTEGER, int", sq, "INTEGER", 42, false),
		idCaseOf("INTEGER, int32", sq, "INTEGER", int32(42), false),
		idCaseOf("INTEGER, uint32", sq, "INTEGER", uint32(42), false),
		idCaseOf("INTEGER, named int64", sq, "INTEGER", height(42), false),
		idCaseOf("INT, int64", sq, "INT", int64(42), false),
		idCaseOf("BIGINT, int64", sq, "BIGINT", int64(42), false),
		idCaseOf("SMALLINT, int16", sq, "SMALLINT", int16(42), false),
		idCaseOf("BLOB, string", sq, "BLOB", "a", false),
		idCaseOf("BLOB, int64", sq, "BLOB", int64(42), false),
		idCaseOf("no type, string", sq, "", "a", false),
		idCaseOf("no type, int64", sq, "", int64(42), false),
		idCaseOf("UUID (NUMERIC affinity), string", sq, "UUID", "0b7e5c4e-8f6a-4b8e-9f3e-1c2d3e4f5a6b", false),
		idCaseOf("NUMERIC, int64", sq, "NUMERIC", int64(42), false),
		idCaseOf("INTEGER, a Valuer and Scanner", sq, "INTEGER", scannedID{42}, false),
		idCaseOf("INTEGER COLLATE NOCASE, int64", sq, "INTEGER COLLATE NOCASE", int64(42), false),
		idCaseOf("TEXT COLLATE NOCASE, string", sq, "TEXT COLLATE NOCASE", "a", false),
		idCaseOf("TEXT COLLATE RTRIM, int64", sq, "TEXT COLLATE RTRIM", int64(42), true),
		idCaseOf("TEXT, a Valuer and Scanner", sq, "TEXT", scannedID{42}, false),
		idCaseOf("INTEGER, string", sq, "INTEGER", "a", true),
		idCaseOf("INTEGER, named string", sq, "INTEGER", blockID("a"), true),
		idCaseOf("BIGINT, string", sq, "BIGINT", "a", true),
		idCaseOf("TEXT, int64", sq, "TEXT", int64(42), true),
		idCaseOf("VARCHAR(64), int32", sq, "VARCHAR(64)", int32(42), true),
		idCaseOf("TEXT, named int64", sq, "TEXT", height(42), true),
		idCaseOf("TEXT, [4]byte", sq, "TEXT", [4]byte{1, 2, 3, 4}, true),
		idCaseOf("REAL, string", sq, "REAL", "a", true),
		idCaseOf("DOUBLE, int64", sq, "DOUBLE", int64(42), true),

		// PostgreSQL, by type.
		idCaseOf("text, string", pg, "text", "a", false),
		idCaseOf("text, named string", pg, "text", blockID("a"), false),
		idCaseOf("varchar(64), string", pg, "varchar(64)", "a", false),
		idCaseOf("char(4), string", pg, "char(4)", "abcd", false),
		idCaseOf("uuid, string", pg, "uuid", "0b7e5c4e-8f6a-4b8e-9f3e-1c2d3e4f5a6b", false),
		idCaseOf("bigint, int64", pg, "bigint", int64(42), false),
		idCaseOf("bigint, int", pg, "bigint", 42, false),
		idCaseOf("bigint, named int64", pg, "bigint", height(42), false),
		idCaseOf("integer, int32", pg, "integer", int32(42), false),
		idCaseOf("integer, int64", pg, "integer", int64(42), false),
		idCaseOf("smallint, int16", pg, "smallint", int16(42), false),
		idCaseOf("serial, int64", pg, "serial", int64(42), false),
		idCaseOf("numeric(20,0), int64", pg, "numeric(20,0)", int64(42), false),
		idCaseOf("bigint, a Valuer and Scanner", pg, "bigint", scannedID{42}, false),
		idCaseOf("a domain over text, string", pg, "objkey", "a", false),
		idCaseOf("bigint, string", pg, "bigint", "a", true),
		idCaseOf("bigint, named string", pg, "bigint", blockID("a"), true),
		idCaseOf("integer, string", pg, "integer", "a", true),
		idCaseOf("text, int64", pg, "text", int64(42), true),
		idCaseOf("varchar(64), int32", pg, "varchar(64)", int32(42), true),
		idCaseOf("uuid, int64", pg, "uuid", int64(42), true),
		idCaseOf("bytea, string", pg, "bytea", "a", true),
		idCaseOf("boolean, string", pg, "boolean", "a", true),
		idCaseOf("inet, string", pg, "inet", "10.0.0.1", true),
		idCaseOf("jsonb, string", pg, "jsonb", "{}", true),
		idCaseOf("int4range, string", pg, "int4range", "[1,2)", true),
		idCaseOf("interval day to second, int64", pg, "interval day to second", int64(42), true),
		idCaseOf("time, string", pg, "time", "01:02:03", true),
	}
}

// NewStore takes every ID type that can hold the key column's values, and such a
// set adds, holds and reads its objects back; it refuses, with refset.ErrSchema
// naming the column, its SQL type and the ID type, one that cannot (a string on an
// integer key, an integer on a text one, ...), before it creates or records
// anything: no holds table, no review queue, no record of the set.
func TestNewStoreIDType(t *testing.T) {
	eachNewStoreBackend(t, func(t *testing.T, b newStoreBackend) {
		for _, c := range idCases() {
			if c.postgres != b.postgres {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				ctx := t.Context()
				db := b.open(t)
				_, err := db.Driver().Pool().ExecContext(ctx, `CREATE DOMAIN objkey AS text`)
				if !b.postgres {
					err = nil
				}
				require.NoError(t, err)
				_, err = db.Driver().Pool().ExecContext(ctx, fmt.Sprintf(`CREATE TABLE objs (id %s PRIMARY KEY, n BIGINT NOT NULL)`, c.column))
				require.NoError(t, err)
				before := everything(t, db, b.postgres)
				err = c.build(ctx, t, db)
				if !c.refused {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
				require.Equal(t, before, everything(t, db, b.postgres), "a refused NewStore changes nothing")
				require.ErrorIs(t, err, refset.ErrSchema)
				require.ErrorContains(t, err, `"id"`, "the error names the column")
				require.ErrorContains(t, err, c.goType, "the error names the ID type")
				if b.postgres {
					require.ErrorContains(t, err, c.column[:3], "the error names the column's type")
				} else {
					require.ErrorContains(t, err, c.column, "the error names the column's type")
				}
			})
		}
	})
}

// A set made with one ID type is not reopened with an ID type its key cannot hold:
// NewStore refuses it, its record is left as it was, and the set made before still
// opens and works.
func TestNewStoreIDTypeOfASetMadeBefore(t *testing.T) {
	eachNewStoreBackend(t, func(t *testing.T, b newStoreBackend) {
		ctx := t.Context()
		db := b.open(t)
		_, err := db.Driver().Pool().ExecContext(ctx, `CREATE TABLE objs (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)`)
		require.NoError(t, err)
		require.NoError(t, idCaseOf("made", b.postgres, "BIGINT", int64(1), false).build(ctx, t, db))
		before := everything(t, db, b.postgres)
		_, err = store.NewStore[idObject[string], string](ctx, db, store.Config{Table: "objs"})
		require.ErrorIs(t, err, refset.ErrSchema)
		require.ErrorContains(t, err, "string")
		require.Equal(t, before, everything(t, db, b.postgres), "a refused NewStore changes nothing")
		require.NoError(t, idCaseOf("again", b.postgres, "BIGINT", int64(2), false).build(ctx, t, db),
			"the set made before still opens")
	})
}

// A second NewStore for a set refset recorded before does not move the set to
// another holds table: the holds in the recorded one would be left to nobody, and
// clean-up, which finds a set's holds through the record, would collect what they
// hold. A HoldsTable naming another table is refused with refset.ErrInvalidConfig
// naming the recorded one, and changes nothing; HoldsTable "" means the recorded
// one, as schema.Set's does, so it builds the store on the set's holds; the recorded
// name itself builds it too. Through it all, the set's holds keep their objects from
// clean-up.
func TestNewStoreRecordedHoldsTable(t *testing.T) {
	cases := []struct {
		name     string
		made     string // the HoldsTable the set was made with
		again    string // the HoldsTable of the second NewStore
		refused  bool
		recorded string // the holds table the set's record names throughout
	}{
		{"a custom table, then another", "items_custody", "items_elsewhere", true, "items_custody"},
		{"a custom table, then the default name", "items_custody", "items_holds", true, "items_custody"},
		{"the default, then a custom table", "", "items_custody", true, "items_holds"},
		{"the default named, then a custom table", "items_holds", "items_custody", true, "items_holds"},
		{"a custom table, then HoldsTable empty", "items_custody", "", false, "items_custody"},
		{"a custom table, then the same", "items_custody", "items_custody", false, "items_custody"},
		{"the default, then the default named", "", "items_holds", false, "items_holds"},
	}
	eachNewStoreBackend(t, func(t *testing.T, b newStoreBackend) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := t.Context()
				db := b.open(t)
				_, err := db.Driver().Pool().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
				require.NoError(t, err)
				s, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items", HoldsTable: c.made})
				require.NoError(t, err)
				items := refset.New(s)
				_, err = items.Add(ctx, item{Key: "held", N: 1}, items.Hold("keeper", 0))
				require.NoError(t, err)
				record := func() []string {
					return rows(t, db, `SELECT holds_table FROM refset_sets WHERE table_name = 'items'`)
				}
				require.Equal(t, []string{c.recorded}, record())

				before := everything(t, db, b.postgres)
				s2, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items", HoldsTable: c.again})
				require.Equal(t, []string{c.recorded}, record(), "the set's record still names its holds table")
				if c.refused {
					require.Error(t, err)
					require.Equal(t, before, everything(t, db, b.postgres), "a refused NewStore changes nothing")
					require.ErrorIs(t, err, refset.ErrInvalidConfig)
					require.ErrorContains(t, err, c.recorded, "the error names the recorded holds table")
					require.ErrorContains(t, err, c.again, "the error names the HoldsTable given")
				} else {
					require.NoError(t, err)
					require.Equal(t, before, everything(t, db, b.postgres), "nothing to create: the set's tables are there")
					// The store holds in the set's holds table.
					items2 := refset.New(s2)
					_, err = items2.Add(ctx, item{Key: "held too", N: 2}, items2.Hold("keeper", 0))
					require.NoError(t, err)
					require.Equal(t, []string{"held", "held too"},
						rows(t, db, fmt.Sprintf(`SELECT object_id FROM %s ORDER BY 1`, c.recorded)))
				}

				// The set's holds are still its own: clean-up collects an object
				// nobody holds and keeps the held ones, and a store built again (on
				// the recorded holds table, HoldsTable "") releases the hold, after
				// which clean-up collects the object it kept.
				again, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
				require.NoError(t, err)
				set := refset.New(again)
				_, err = set.Add(ctx, item{Key: "loose", N: 3})
				require.NoError(t, err)
				col, err := store.NewCollector(ctx, db, cleanupConfig("items"))
				require.NoError(t, err)
				collect := func() []string {
					time.Sleep(50 * time.Millisecond) // past the grace
					_, err := col.Collect(ctx)
					require.NoError(t, err)
					return rows(t, db, `SELECT id FROM items ORDER BY 1`)
				}
				kept := []string{"held"}
				if !c.refused {
					kept = append(kept, "held too")
				}
				require.Equal(t, kept, collect(), "held objects are kept, the loose one collected")
				_, err = set.Upgrade(ctx, "held", set.Unhold("keeper"))
				require.NoError(t, err, "the hold is found where the set's record says")
				require.Equal(t, kept[1:], append([]string{}, collect()...), "the object released is collected")
			})
		}
	})
}

// cleanupConfig is clean-up of the set on table, with a grace a test outlasts.
func cleanupConfig(table string) cleanup.Config {
	return cleanup.Config{Table: table, Grace: time.Millisecond}
}
