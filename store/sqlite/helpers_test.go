package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// testDrivers are the drivers this build can run: both with cgo, modernc.org/sqlite
// alone without (scripts/test.sh runs this package both ways).
func testDrivers() []string {
	if mattnLinked() {
		return []string{DriverMattn, DriverModernc}
	}
	return []string{DriverModernc}
}

// eachDriver runs fn as a parallel subtest per driver, named by the driver.
func eachDriver(t *testing.T, fn func(t *testing.T, driverName string)) {
	t.Helper()
	for _, d := range testDrivers() {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// eachWriterMode runs fn on each driver, with group commit and without.
func eachWriterMode(t *testing.T, fn func(t *testing.T, opts Options)) {
	t.Helper()
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, noGroup := range []bool{false, true} {
			t.Run(fmt.Sprintf("NoGroupCommit=%v", noGroup), func(t *testing.T) {
				fn(t, Options{Driver: driverName, NoGroupCommit: noGroup})
			})
		}
	})
}

// eachPool runs fn as a subtest per driver and kind of pool, on a database file at
// path that has itemsTables: db is either pools Open made ("callers pool=false") or
// the one pool of one connection a caller gives New ("callers pool=true", callersDB),
// as the tests of units of work on both kinds want. The handle that made the tables
// is closed first; with a caller's pool, a handle Open made stays open beside it.
func eachPool(t *testing.T, fn func(t *testing.T, driverName, path string, db *DB)) {
	t.Helper()
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, callers := range []bool{false, true} {
			t.Run(fmt.Sprintf("callers pool=%v", callers), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "x.db")
				first, _ := itemsAt(t, path, Options{Driver: driverName})
				require.NoError(t, first.Close())
				db := openAt(t, path, Options{Driver: driverName})
				if callers {
					db = callersDB(t, driverName, path, Options{})
				}
				fn(t, driverName, path, db)
			})
		}
	})
}

// openDB opens a new database file in tb's temporary directory with opts, closed
// when tb ends.
func openDB(tb testing.TB, opts Options) *DB {
	tb.Helper()
	return openAt(tb, filepath.Join(tb.TempDir(), "x.db"), opts)
}

// callersDB is what New makes, with opts, of a caller's pool of one connection to
// the database file at path with driverName, closed when t ends.
func callersDB(t *testing.T, driverName, path string, opts Options) *DB {
	t.Helper()
	pool, err := sql.Open(driverName, "file:"+path+goodWriter)
	require.NoError(t, err)
	pool.SetMaxOpenConns(1)
	t.Cleanup(func() { pool.Close() })
	db, err := New(t.Context(), pool, nil, opts)
	require.NoError(t, err)
	return db
}

// openAt opens the database file at path with opts, closed when tb ends.
func openAt(tb testing.TB, path string, opts Options) *DB {
	tb.Helper()
	db, err := Open(tb.Context(), path, opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}

// item is the object of this package's sets (itemsDB).
type item struct {
	Key string `db:"id"`
	N   int64  `db:"n"`
}

func (i item) ID() string { return i.Key }

// itemsTables are the tables itemsDB makes: the set's items; notes that refer to
// items; a log of the units of work that ran; pledges, whose key to items is
// checked at COMMIT; and the holder tables pending and heads, between which items
// are handed over.
var itemsTables = []string{
	`CREATE TABLE IF NOT EXISTS items (id TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 0)`,
	`CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, item TEXT NOT NULL REFERENCES items (id))`,
	`CREATE TABLE IF NOT EXISTS units (id TEXT PRIMARY KEY)`,
	pledgesTable,
	// Clean-up installs on items only where every key to it has an index.
	`CREATE INDEX IF NOT EXISTS notes_item ON notes (item)`,
	`CREATE INDEX IF NOT EXISTS pledges_item ON pledges (item)`,
	`CREATE TABLE IF NOT EXISTS pending (k TEXT PRIMARY KEY REFERENCES items (id))`,
	`CREATE TABLE IF NOT EXISTS heads (k TEXT PRIMARY KEY REFERENCES items (id))`,
}

// pledgesTable's references to items are checked at COMMIT (DEFERRABLE INITIALLY
// DEFERRED): a unit may pledge an item it adds later in the same unit.
const pledgesTable = `CREATE TABLE IF NOT EXISTS pledges (id TEXT PRIMARY KEY,
	item TEXT NOT NULL REFERENCES items (id) DEFERRABLE INITIALLY DEFERRED)`

// itemsDB opens a new database file with opts, with itemsTables, and the set of
// items on it, closed when tb ends.
func itemsDB(tb testing.TB, opts Options) (*DB, *refset.RefSet[item, string]) {
	tb.Helper()
	return itemsAt(tb, filepath.Join(tb.TempDir(), "x.db"), opts)
}

// itemsAt is itemsDB on the database file at path, which may have the tables
// already (another handle on it made them).
func itemsAt(tb testing.TB, path string, opts Options) (*DB, *refset.RefSet[item, string]) {
	tb.Helper()
	db, set, err := openItems(tb.Context(), path, opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db, set
}

// openItems is itemsAt for a process with no test: a child process's role. The
// caller closes the database.
func openItems(ctx context.Context, path string, opts Options) (*DB, *refset.RefSet[item, string], error) {
	db, err := Open(ctx, path, opts)
	if err != nil {
		return nil, nil, err
	}
	for _, q := range itemsTables {
		if _, err := db.Writer().ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	st, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, refset.New(st), nil
}
