package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/require"
)

// files are the names of the files in dir.
func files(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(tb, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Every DSN or option a caller gets wrong fails store.Open with the sentinel that
// says what is wrong, and creates no file: malformed and foreign DSNs, a store whose
// options are not given, a driver not linked into this binary (this package's tests
// link go-sqlite3 alone), file: URLs carrying SQLite parameters that would undo
// refset's (its journal mode, foreign keys, busy timeout, IMMEDIATE transactions,
// a shared cache, read-only mode), contradictory options, and paths that are no
// database file.
func TestHostileOpen(t *testing.T) {
	cases := []struct {
		name   string
		dsn    func(dir string) string
		opts   []store.Opener
		want   error
		saying string
	}{
		{"empty", func(string) string { return "" }, nil, refset.ErrInvalidConfig, "empty DSN"},
		{"blank", func(string) string { return " \n\t" }, nil, refset.ErrInvalidConfig, "empty DSN"},
		{"another scheme", func(string) string { return "mysql://u:secret@h/db" }, nil, refset.ErrInvalidConfig, `scheme "mysql"`},
		{"a driver's DSN", func(string) string { return "sqlserver:secret@h" }, nil, refset.ErrInvalidConfig, `scheme "sqlserver"`},
		{"PostgreSQL without its options", func(string) string { return "host=nowhere dbname=x" },
			[]store.Opener{sqlite.Options{}}, refset.ErrInvalidConfig, "no postgres.Options"},
		{"SQLite without its options", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{postgres.Options{}}, refset.ErrInvalidConfig, "no sqlite.Options"},
		{"no options", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{}, refset.ErrInvalidConfig, "no sqlite.Options"},
		{"a nil opener", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{}, nil}, refset.ErrInvalidConfig, "nil Opener"},
		{"two SQLite options", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{}, sqlite.Options{Readers: 2}}, refset.ErrInvalidConfig, "two options"},
		{"driver not linked", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{Driver: sqlite.DriverModernc}}, refset.ErrInvalidConfig, "store/sqlite/modernc"},
		{"unknown driver", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{Driver: "pgx"}}, refset.ErrInvalidConfig, `driver "pgx"`},
		{"Synchronous OFF", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{Synchronous: "OFF"}}, refset.ErrInvalidConfig, "Synchronous"},
		{"Immutable without ReadOnly", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{Immutable: true}}, refset.ErrInvalidConfig, "Immutable"},
		{"negative BusyTimeout", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{BusyTimeout: -1}}, refset.ErrInvalidConfig, "BusyTimeout"},
		{"ReadOnly on a missing file", func(d string) string { return filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{ReadOnly: true}}, refset.ErrUnavailable, "unable to open"},
		{"a missing directory", func(d string) string { return filepath.Join(d, "no", "x.db") },
			[]store.Opener{sqlite.Options{}}, refset.ErrUnavailable, "unable to open"},
		{"a memory database", func(string) string { return "file::memory:" },
			[]store.Opener{sqlite.Options{}}, refset.ErrInvalidConfig, "database file is needed"},
		{"a file: URL of another host", func(d string) string { return "file://host" + filepath.Join(d, "x.db") },
			[]store.Opener{sqlite.Options{}}, refset.ErrInvalidConfig, "local file"},
		{"a malformed file: URL", func(d string) string { return "file:" + filepath.Join(d, "x%zz.db") },
			[]store.Opener{sqlite.Options{}}, refset.ErrInvalidConfig, "escape"},
		{"a NUL in the name", func(d string) string { return filepath.Join(d, "x\x00.db") },
			[]store.Opener{sqlite.Options{}}, refset.ErrInvalidConfig, "NUL"},
	}
	for _, p := range []string{"_journal_mode=DELETE", "journal_mode=DELETE", "_foreign_keys=off", "foreign_keys=off",
		"_busy_timeout=-1", "_txlock=deferred", "cache=shared", "mode=ro", "mode=memory", "immutable=1", ""} {
		cases = append(cases, struct {
			name   string
			dsn    func(dir string) string
			opts   []store.Opener
			want   error
			saying string
		}{"file: URL with ?" + p, func(d string) string { return "file:" + filepath.Join(d, "x.db") + "?" + p },
			[]store.Opener{sqlite.Options{}}, refset.ErrInvalidConfig, "names the file alone"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := store.Open(t.Context(), c.dsn(dir), c.opts...)
			if err == nil {
				db.Close()
			}
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, c.saying)
			require.NotContains(t, err.Error(), "secret", "the error never quotes a DSN's password")
			require.Empty(t, files(t, dir), "a refused Open creates no file")
		})
	}
}

// A path that names something other than a SQLite database fails Open with
// refset.ErrUnavailable saying why, and leaves it as it was.
func TestHostileOpenNotADatabase(t *testing.T) {
	junk := []byte(strings.Repeat("not a database ", 100))
	cases := []struct {
		name   string
		make   func(tb testing.TB, path string)
		opts   sqlite.Options
		saying string
	}{
		{"a directory", func(tb testing.TB, p string) { require.NoError(tb, os.Mkdir(p, 0o755)) }, sqlite.Options{}, "directory"},
		{"another file", func(tb testing.TB, p string) { require.NoError(tb, os.WriteFile(p, junk, 0o644)) }, sqlite.Options{}, "not a database"},
		{"another file, read-only", func(tb testing.TB, p string) { require.NoError(tb, os.WriteFile(p, junk, 0o644)) }, sqlite.Options{ReadOnly: true}, "not a database"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.db")
			c.make(t, path)
			db, err := store.Open(t.Context(), path, c.opts)
			if err == nil {
				db.Close()
			}
			require.ErrorIs(t, err, refset.ErrUnavailable)
			require.ErrorContains(t, err, c.saying)
			require.Equal(t, []string{"x.db"}, files(t, dir), "no -wal, -shm or journal file left")
			if fi, _ := os.Stat(path); !fi.IsDir() {
				got, err := os.ReadFile(path)
				require.NoError(t, err)
				require.Equal(t, junk, got, "the file is left as it was")
			}
		})
	}
}

// Spaces and newlines around a DSN are not part of it, for store.Open as for
// DSNDialect: a path read from a file or the environment with a newline after it
// opens the database at the path, not a new empty file named with the newline.
func TestHostileOpenTrimsDSN(t *testing.T) {
	for _, pad := range []struct{ name, before, after string }{
		{"trailing newline", "", "\n"},
		{"trailing space", "", " "},
		{"leading space", "  ", ""},
		{"both", "\t", "\r\n"},
	} {
		t.Run(pad.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			path := filepath.Join(dir, "app.db")
			db, err := store.Open(ctx, path, sqlite.Options{})
			require.NoError(t, err)
			_, err = db.Driver().Pool().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL)`)
			require.NoError(t, err)
			require.NoError(t, db.Close())

			db, err = store.Open(ctx, pad.before+path+pad.after, sqlite.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
			require.NoError(t, err, "the padded DSN opens the database at the path")
			for _, f := range files(t, dir) {
				require.True(t, strings.HasPrefix(f, "app.db"), "no file but app.db and its -wal and -shm: %q", f)
			}
		})
	}
}

// sqliteSchema is everything NewStore could change in a SQLite database: its
// catalog, and refset's record of its sets.
func sqliteSchema(tb testing.TB, db refset.Database) []string {
	tb.Helper()
	catalog := rows(tb, db, `SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY 1`)
	if len(rows(tb, db, `SELECT name FROM sqlite_master WHERE name = 'refset_sets'`)) == 0 {
		return catalog
	}
	return append(catalog, rows(tb, db, `SELECT table_name || ' ' || id_column || ' ' || holds_table || ' ' || queue_table
FROM refset_sets ORDER BY 1`)...)
}

// rows are the one-column rows of query on db's pool.
func rows(tb testing.TB, db refset.Database, query string, args ...any) []string {
	tb.Helper()
	rs, err := db.Driver().Pool().QueryContext(tb.Context(), query, args...)
	require.NoError(tb, err)
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		require.NoError(tb, rs.Scan(&s))
		out = append(out, s)
	}
	require.NoError(tb, rs.Err())
	return out
}

type badTagItem struct {
	Key string `db:"id"`
	X   string `db:"no_such_column"`
}

func (i badTagItem) ID() string { return i.Key }

type untaggedItem struct{ Key string }

func (i untaggedItem) ID() string { return i.Key }

// Every Config and T a caller gets wrong fails NewStore with the sentinel that says
// what, and changes nothing in the database: no table, index or record of a set,
// and the record of a set NewStore made before is left as it was. Among them a
// HoldsTable that is the object table, its review queue, or a table of the
// caller's: on a set made before, refset's migrations have nothing to run, so it
// must be refused before the set's record is rewritten to name it.
func TestHostileNewStore(t *testing.T) {
	newStore := func(cfg store.Config) func(context.Context, refset.Database) error {
		return func(ctx context.Context, db refset.Database) error {
			_, err := store.NewStore[item, string](ctx, db, cfg)
			return err
		}
	}
	cases := []struct {
		name   string
		call   func(context.Context, refset.Database) error
		want   error
		saying string
	}{
		{"a missing table", newStore(store.Config{Table: "nope"}), refset.ErrSchema, "does not exist"},
		{"a view", newStore(store.Config{Table: "items_view"}), refset.ErrSchema, "primary key"},
		{"no primary key", newStore(store.Config{Table: "nokey"}), refset.ErrSchema, "primary key"},
		{"a composite key", newStore(store.Config{Table: "pairs"}), refset.ErrSchema, "one-column primary key (has 2)"},
		{"IDColumn not the key", newStore(store.Config{Table: "items", IDColumn: "n"}), refset.ErrSchema, "primary key"},
		{"a name needing quotes", newStore(store.Config{Table: "odd name"}), refset.ErrInvalidIdentifier, "odd name"},
		{"a quoted name", newStore(store.Config{Table: `"odd name"`}), refset.ErrInvalidIdentifier, "odd name"},
		{"an injection", newStore(store.Config{Table: "items; DROP TABLE pairs"}), refset.ErrInvalidIdentifier, "DROP"},
		{"a schema-qualified name", newStore(store.Config{Table: "main.items"}), refset.ErrInvalidIdentifier, "schema-qualified"},
		{"no table", newStore(store.Config{}), refset.ErrInvalidIdentifier, `""`},
		{"a bad HoldsTable name", newStore(store.Config{Table: "items", HoldsTable: "a b"}), refset.ErrInvalidIdentifier, "HoldsTable"},
		{"HoldsTable is the table", newStore(store.Config{Table: "items", HoldsTable: "items"}), refset.ErrInvalidConfig, "object table"},
		{"HoldsTable is the table, in capitals", newStore(store.Config{Table: "items", HoldsTable: "ITEMS"}), refset.ErrInvalidConfig, "object table"},
		{"HoldsTable is the review queue", newStore(store.Config{Table: "items", HoldsTable: "items_review"}), refset.ErrInvalidConfig, "review queue"},
		{"HoldsTable is another table", newStore(store.Config{Table: "items", HoldsTable: "pairs"}), refset.ErrSchema, `no column "holder"`},
		{"HoldsTable is refset's", newStore(store.Config{Table: "items", HoldsTable: "refset_sets"}), refset.ErrSchema, "holder"},
		{"a tag with no column", func(ctx context.Context, db refset.Database) error {
			_, err := store.NewStore[badTagItem, string](ctx, db, store.Config{Table: "items"})
			return err
		}, refset.ErrSchema, "no_such_column"},
		{"no tags", func(ctx context.Context, db refset.Database) error {
			_, err := store.NewStore[untaggedItem, string](ctx, db, store.Config{Table: "items"})
			return err
		}, refset.ErrSchema, "db:"},
		{"a NOT NULL column unmapped", newStore(store.Config{Table: "strict"}), refset.ErrSchema, `db:"must"`},
		{"a context already ended", func(ctx context.Context, db refset.Database) error {
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			return newStore(store.Config{Table: "items"})(ctx, db)
		}, context.Canceled, "canceled"},
	}
	for _, made := range []bool{false, true} {
		name := "a new set"
		if made {
			name = "a set made before"
		}
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx := t.Context()
					db, err := store.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlite.Options{})
					require.NoError(t, err)
					t.Cleanup(func() { db.Close() })
					_, err = db.Driver().Pool().ExecContext(ctx, `
CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 0);
CREATE VIEW items_view AS SELECT id, n FROM items;
CREATE TABLE nokey (id TEXT, n INTEGER);
CREATE TABLE pairs (id TEXT, n INTEGER, PRIMARY KEY (id, n));
CREATE TABLE "odd name" (id TEXT PRIMARY KEY);
CREATE TABLE strict (id TEXT PRIMARY KEY, n INTEGER, must TEXT NOT NULL)`)
					require.NoError(t, err)
					if made {
						_, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
						require.NoError(t, err)
					}
					before := sqliteSchema(t, db)
					err = c.call(ctx, db)
					require.Error(t, err)
					require.Equal(t, before, sqliteSchema(t, db), "a refused NewStore changes nothing")
					require.ErrorIs(t, err, c.want)
					require.ErrorContains(t, err, c.saying)
					if made {
						s, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
						require.NoError(t, err, "the set made before still opens")
						_, err = refset.New(s).Add(ctx, item{Key: "a", N: 1})
						require.NoError(t, err)
					}
				})
			}
		})
	}
}

// NewStore and Open on a closed database fail with refset.ErrClosed, and NewStore on
// something that is no database of a store with refset.ErrInvalidConfig.
func TestHostileNewStoreClosed(t *testing.T) {
	ctx := t.Context()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlite.Options{})
	require.NoError(t, err)
	_, err = db.Driver().Pool().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items", HoldsTable: "items"})
	require.ErrorIs(t, err, refset.ErrClosed, "a closed database is said before the configuration")
	for _, bad := range []refset.Database{nil, &sqlite.DB{}, &postgres.DB{}} {
		_, err = store.NewStore[item, string](ctx, bad, store.Config{Table: "items"})
		require.ErrorIs(t, err, refset.ErrInvalidConfig, "%T", bad)
	}
}

// On PostgreSQL too, a HoldsTable that cannot be the set's holds table is refused
// before NewStore changes anything, on a set made before: its record still names
// its own holds table.
func TestHostileNewStoreHoldsPostgres(t *testing.T) {
	ctx := t.Context()
	db, err := store.Open(ctx, pgtest.DSN(t), postgres.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Driver().Pool().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0);
CREATE TABLE other (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.NoError(t, err)
	record := func() []string {
		return rows(t, db, `SELECT holds_table FROM refset_sets WHERE table_name LIKE '%items'`)
	}
	before := record()
	require.Len(t, before, 1)
	for _, c := range []struct {
		holds string
		want  error
	}{{"items", refset.ErrInvalidConfig}, {"items_review", refset.ErrInvalidConfig}, {"other", refset.ErrSchema}} {
		_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items", HoldsTable: c.holds})
		require.Error(t, err)
		require.Equal(t, before, record(), "HoldsTable %s: the set's record is left as it was", c.holds)
		require.ErrorIs(t, err, c.want, c.holds)
	}
}
