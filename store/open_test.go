package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/mattn" // go-sqlite3 (cgo)
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type item struct {
	Key string `db:"id"`
	N   int64  `db:"n"`
}

func (i item) ID() string { return i.Key }

// stores are the options every test here gives store.Open: both stores, pgx or lib/pq.
func stores(pgDriver string) []store.Opener {
	return []store.Opener{sqlite.Options{}, postgres.Options{Driver: pgDriver}}
}

// addAndGet is a program's whole use of db, the same whichever database it is: its
// tables, a set, an Add with a holder row, a Get.
func addAndGet(t *testing.T, db refset.Database) *refset.RefSet[item, string] {
	t.Helper()
	ctx := t.Context()
	_, err := db.Driver().Pool().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL);
CREATE TABLE owners (item_id TEXT PRIMARY KEY REFERENCES items (id) ON DELETE RESTRICT)`)
	require.NoError(t, err)
	s, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.NoError(t, err)
	items := refset.New(s)
	tok, err := items.Add(ctx, item{Key: "a", N: 7}, refset.Exec[string](`INSERT INTO owners (item_id) VALUES (?)`, 1))
	require.NoError(t, err)
	lease, err := items.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, item{Key: "a", N: 7}, *lease.Value())
	return items
}

// One call opens either database from its DSN, in every form each store takes, with
// the options of its store (the Postgres driver among them), and one code path then
// stores and reads on it; Close closes it, and a call after Close fails with
// ErrClosed.
func TestOpen(t *testing.T) {
	sqlitePath := func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "items.db") }
	pg := func(form int) func(testing.TB) string {
		return func(tb testing.TB) string {
			asURL, keyValue := pgtest.Forms(tb, pgtest.DSN(tb)) // a schema per test
			return []string{asURL, keyValue}[form]
		}
	}
	const asURL, keyValue = 0, 1
	for _, tc := range []struct {
		name     string
		dsn      func(testing.TB) string
		pgDriver string // postgres.Options.Driver
		want     string // the database's dialect; on Postgres, the pool's driver too
	}{
		{"sqlite/path", sqlitePath, "", "sqlite"},
		{"sqlite/file URL", func(tb testing.TB) string { return "file:" + filepath.ToSlash(sqlitePath(tb)) }, "", "sqlite"},
		{"sqlite/file URL, relative", func(tb testing.TB) string {
			tb.Chdir(tb.TempDir())
			return "file:items.db"
		}, "", "sqlite"},
		{"lib/pq/URL", pg(asURL), "", postgres.DriverLibPQ},
		{"lib/pq/key=value", pg(keyValue), postgres.DriverLibPQ, postgres.DriverLibPQ},
		{"pgx/URL", pg(asURL), postgres.DriverPgx, postgres.DriverPgx},
		{"pgx/key=value", pg(keyValue), postgres.DriverPgx, postgres.DriverPgx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dsn := tc.dsn(t)
			dialect, err := store.DSNDialect(dsn)
			require.NoError(t, err)

			db, err := store.Open(ctx, dsn, stores(tc.pgDriver)...)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			assert.Equal(t, dialect, db.Driver().Name())
			switch db := db.(type) {
			case *sqlite.DB:
				assert.Equal(t, tc.want, "sqlite")
				if path, ok := strings.CutPrefix(dsn, "file:"); ok {
					assert.FileExists(t, filepath.FromSlash(path), "the file the URL names, not one named by the URL")
				}
			case *postgres.DB:
				assert.Equal(t, tc.want, db.Pool().DriverName(), "the driver postgres.Options named")
			default:
				t.Fatalf("store.Open returned a %T", db)
			}

			items := addAndGet(t, db)

			require.NoError(t, db.Close())
			_, err = items.Add(ctx, item{Key: "b", N: 1})
			require.ErrorIs(t, err, refset.ErrClosed)
			_, err = db.Begin(ctx)
			require.ErrorIs(t, err, refset.ErrClosed)
			require.NoError(t, db.Close(), "closing again does nothing")
		})
	}
}

// The form of a DSN names its database; nothing is dialled.
func TestDSNDialect(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"ledger.db", "sqlite"},
		{"/var/lib/app/ledger.db", "sqlite"},
		{"./a=b.db", "sqlite"},
		{`C:\data\ledger.db`, "sqlite"},
		{"file:ledger.db", "sqlite"},
		{"file:///var/lib/app/ledger.db", "sqlite"},
		{"postgres://app@db/ledger?sslmode=disable", "postgres"},
		{"postgresql://app@db/ledger", "postgres"},
		{"host=db dbname=ledger", "postgres"},
		{"  dbname = ledger", "postgres"},
		{"sslmode=disable host=/run/postgresql", "postgres"},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			got, err := store.DSNDialect(tc.dsn)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A DSN Open cannot open fails with ErrInvalidConfig that says what it takes, never
// quotes a password, and creates nothing.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // a DSN misread as a relative path would land here too
	path := filepath.Join(dir, "new.db")
	forms := []string{"a file path or a file: URL", "a postgres:// or postgresql:// URL or a key=value connection string"}
	for _, tc := range []struct {
		name   string
		dsn    string
		stores []store.Opener
		want   []string // in the message
	}{
		{"empty", "", stores(""), forms},
		{"blank", "  \t", stores(""), forms},
		{"another scheme's URL", "mysql://app:s3cret@db/ledger", stores(""), append([]string{`scheme "mysql"`}, forms...)},
		{"another driver's DSN", "sqlserver:app:s3cret@db", stores(""), append([]string{`scheme "sqlserver"`}, forms...)},
		{"a SQLite path, no sqlite.Options", path, []store.Opener{postgres.Options{}}, []string{"SQLite", "sqlite.Options", forms[0]}},
		{"a Postgres URL, no postgres.Options", "postgres://app:s3cret@db/ledger", []store.Opener{sqlite.Options{}}, []string{"PostgreSQL", "postgres.Options", forms[1]}},
		{"key=value, no postgres.Options", "host=db password=s3cret", []store.Opener{sqlite.Options{}}, []string{"postgres.Options"}},
		{"no options", path, nil, []string{"sqlite.Options"}},
		{"two options of one store", path, []store.Opener{sqlite.Options{}, sqlite.Options{Readers: 2}}, []string{"two options for sqlite"}},
		{"a nil Opener", path, []store.Opener{nil, sqlite.Options{}}, []string{"nil Opener"}},
		{"a file: URL with parameters", "file:" + filepath.ToSlash(path) + "?mode=memory", stores(""), []string{"names the file alone", "sqlite.Options"}},
		{"a file: URL of another host", "file://fileserver/" + filepath.ToSlash(path), stores(""), []string{"local file", "fileserver"}},
		{"a file: URL of memory", "file::memory:", stores(""), []string{"a database file is needed"}},
		{"a Postgres driver of neither", "postgres://app@db/ledger", []store.Opener{postgres.Options{Driver: "mysql"}}, []string{`driver "mysql"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := store.Open(t.Context(), tc.dsn, tc.stores...)
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			assert.True(t, db == nil, "a nil interface, not one holding a nil *DB")
			for _, want := range tc.want {
				assert.Contains(t, err.Error(), want)
			}
			assert.NotContains(t, err.Error(), "s3cret")
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing created")
		})
	}
}

// A DB that no constructor made (the zero value, or a literal) cannot be used: every
// call on it, and every constructor given it, fails with ErrInvalidConfig naming the
// calls that make one, and none panics with a nil pointer.
func TestUnopenedDB(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		db    refset.Database
		calls map[string]func() error // the store's own methods
	}{
		{"sqlite", &sqlite.DB{}, map[string]func() error{
			"Writer":  func() error { _, err := (&sqlite.DB{}).Writer().ExecContext(ctx, `SELECT 1`); return err },
			"Readers": func() error { return (&sqlite.DB{}).Readers().QueryRowContext(ctx, `SELECT 1`).Scan(new(int)) },
		}},
		{"postgres", &postgres.DB{}, map[string]func() error{
			"Pool": func() error { return (&postgres.DB{}).Pool().GetContext(ctx, new(int), `SELECT 1`) },
			"Replica": func() error {
				if r := (&postgres.DB{}).Replica(); r != nil {
					return r.PingContext(ctx)
				}
				return nil
			},
			"ReplicaCaughtUp": func() error { _, err := (&postgres.DB{}).ReplicaCaughtUp(ctx); return err },
		}},
	} {
		db := tc.db
		calls := map[string]func() error{
			"Begin":  func() error { _, err := db.Begin(ctx); return err },
			"Close":  db.Close,
			"Reader": func() error { return db.Reader().QueryRowContext(ctx, `SELECT 1`).Scan(new(int)) },
			"InTx":   func() error { return refset.InTx(ctx, db, func(context.Context, refset.Tx) error { return nil }) },
			"NewStore": func() error {
				_, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
				return err
			},
			"NewCollector":        func() error { _, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items"}); return err },
			"cleanup.Inspect":     func() error { _, err := cleanup.Inspect(ctx, db, cleanup.Config{Table: "items"}); return err },
			"cleanup.Status":      func() error { _, err := cleanup.Status(ctx, db); return err },
			"blockmanager.Open":   func() error { _, err := blockmanager.Open(ctx, db, blockmanager.Config{}); return err },
			"TranslateError(nil)": func() error { return db.TranslateError(nil, "") },
		}
		for name, call := range tc.calls {
			calls[name] = call
		}
		for name, call := range calls {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				var err error
				require.NotPanics(t, func() { err = call() })
				if name == "TranslateError(nil)" || name == "Replica" {
					require.NoError(t, err, "nothing to fail")
					return
				}
				require.ErrorIs(t, err, refset.ErrInvalidConfig)
				assert.Contains(t, err.Error(), "store.Open")
			})
		}
		t.Run(tc.name+"/Driver", func(t *testing.T) { assert.Nil(t, db.Driver()) })
	}
}
