package tokens

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/mattn" // go-sqlite3 (cgo)
)

// The tests open their databases as a program of one's own would, through refset's
// public packages only (the stores, and refsettest's throwaway PostgreSQL schema), so
// that this package is one to copy from: nothing here needs refset's internal/.

// backend is a way custody's tests reach a database.
type backend struct {
	name       string
	postgres   bool
	driver     string // postgres.DriverLibPQ or postgres.DriverPgx
	unprepared bool   // postgres.Options.Unprepared, as behind a pooler in transaction mode
	pooled     bool   // through the PgBouncer in transaction mode of refsettest.PgBouncerDSN
}

var (
	sqliteDB     = backend{name: "sqlite"}
	libpqDB      = backend{name: "postgres", postgres: true, driver: postgres.DriverLibPQ}
	pgxDB        = backend{name: "pgx", postgres: true, driver: postgres.DriverPgx}
	unpreparedDB = backend{name: "pgx-unprepared", postgres: true, driver: postgres.DriverPgx, unprepared: true}
	// Custody's services run behind a pooler in transaction mode, which lends each
	// transaction, and each statement outside one, any of its server connections:
	// through PgBouncer on both drivers, unprepared as the pooler needs.
	libpqPooledDB = backend{name: "pgbouncer", postgres: true, driver: postgres.DriverLibPQ, unprepared: true, pooled: true}
	pgxPooledDB   = backend{name: "pgbouncer-pgx", postgres: true, driver: postgres.DriverPgx, unprepared: true, pooled: true}
)

// allBackends are the backends most tests run on.
func allBackends() []backend {
	return []backend{sqliteDB, libpqDB, pgxDB, unpreparedDB, libpqPooledDB, pgxPooledDB}
}

// eachBackend runs fn as a parallel subtest per backend, named by the backend.
func eachBackend(t *testing.T, backends []backend, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// place is a fresh database of a backend: a SQLite file, or a PostgreSQL schema.
type place struct {
	backend
	at string // the SQLite file's path, or the schema's DSN
}

// new makes a fresh, empty database of b for tb, removed when tb ends.
func (b backend) new(tb testing.TB) place {
	tb.Helper()
	switch {
	case !b.postgres:
		return place{b, filepath.Join(tb.TempDir(), "custody.db")}
	case b.pooled:
		return place{b, refsettest.PgBouncerDSN(tb)}
	}
	return place{b, refsettest.PostgresDSN(tb)}
}

// open opens a pool on p, of maxConns connections at most on PostgreSQL (0: the
// store's default), closed when tb ends: a *sqlite.DB or a *postgres.DB. Each call is
// another pool, as another process would have.
func (p place) open(tb testing.TB, maxConns int) refset.Database {
	tb.Helper()
	var db interface {
		refset.Database
		Close() error
	}
	var err error
	if p.postgres {
		db, err = postgres.Open(context.Background(), p.at, postgres.Options{Driver: p.driver, MaxConns: maxConns, Unprepared: p.unprepared})
	} else {
		db, err = sqlite.Open(context.Background(), p.at, sqlite.Options{})
	}
	if err != nil {
		tb.Fatalf("open %s: %v", p.name, err)
	}
	places.Store(db, p)
	// Registered after refsettest's drop of the schema, so it runs before it.
	tb.Cleanup(func() {
		places.Delete(db)
		_ = db.Close()
	})
	return db
}

// places remembers the place of each database open opened, until its test ends.
var places sync.Map // refset.Database -> place

// placeOf is the place db was opened on.
func placeOf(tb testing.TB, db refset.Database) place {
	tb.Helper()
	p, ok := places.Load(db)
	if !ok {
		tb.Fatalf("%T was not opened by place.open, or its test has ended", db)
	}
	return p.(place)
}
