package testdb

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/mattn"   // go-sqlite3 (cgo)
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// Backend is one way a test reaches a database.
type Backend struct {
	// Name names the backend's subtests.
	Name string
	// Postgres is false for SQLite.
	Postgres bool
	// Driver is the database/sql driver: postgres.DriverLibPQ or
	// postgres.DriverPgx; on SQLite, sqlite.DriverModernc or "" (the store's
	// default, go-sqlite3 where cgo built it).
	Driver string
	// Unprepared opens the database with postgres.Options.Unprepared, as a
	// connection pooler in transaction mode needs.
	Unprepared bool
	// Pooled reaches Postgres through PgBouncer in transaction mode (pgtest.Pooled).
	Pooled bool
	// Standby opens Postgres with a hot standby as its replica (pgtest.NewWithStandby).
	Standby bool
}

// The backends refset's suites run on.
var (
	SQLite = Backend{Name: "sqlite"}
	// SQLitePureGo is SQLite through modernc.org/sqlite, the driver that needs no
	// C compiler.
	SQLitePureGo = Backend{Name: "sqlite-purego", Driver: sqlite.DriverModernc}
	LibPQ        = Backend{Name: "postgres", Postgres: true, Driver: postgres.DriverLibPQ}
	Pgx          = Backend{Name: "pgx", Postgres: true, Driver: postgres.DriverPgx}
	// PgBouncer is pgx, not lib/pq: lib/pq's cancel requests may crash the
	// harness's PgBouncer 1.18 (pgbouncer#801, fixed in 1.19.1).
	PgBouncer = Backend{Name: "pgbouncer", Postgres: true, Driver: postgres.DriverPgx, Unprepared: true, Pooled: true}
	Standby   = Backend{Name: "postgres-standby", Postgres: true, Driver: postgres.DriverLibPQ, Standby: true}
)

// All are the backends most suites run every test on; add Standby where the
// package reads from a replica.
func All() []Backend { return []Backend{SQLite, LibPQ, Pgx, PgBouncer} }

// Each runs fn as a parallel subtest per backend, named by the backend.
func Each(t *testing.T, backends []Backend, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// Place is where a test's database lives: enough to open it again, or to name it
// on a command line.
type Place struct {
	Backend Backend
	// At is the SQLite file's path, or the Postgres DSN (the primary's, with
	// Standby; PgBouncer's, with Pooled).
	At string
	// StandbyAt is the DSN of the same schema on the standby, with Standby.
	StandbyAt string
	// Schema is the Postgres schema the test's tables are in; "" on SQLite.
	Schema string
}

// New makes a fresh, empty database of backend b for tb, removed when tb ends.
func (b Backend) New(tb testing.TB) Place {
	tb.Helper()
	p := Place{Backend: b}
	switch {
	case !b.Postgres:
		p.At = filepath.Join(tb.TempDir(), "refset.db")
	case b.Pooled:
		p.At, p.Schema = pgtest.NewPooled(tb)
	case b.Standby:
		p.At, p.StandbyAt, p.Schema = pgtest.NewWithStandby(tb)
	default:
		p.At, p.Schema = pgtest.New(tb)
	}
	return p
}

// Open opens a fresh database of backend b for tb. See [Backend.New] and
// [Place.Open].
func (b Backend) Open(tb testing.TB, opts Options) refset.Database {
	tb.Helper()
	return b.New(tb).Open(tb, opts)
}

// Options are what a test sets beyond its backend's own options; each store takes
// those it has.
type Options struct {
	Observer refset.Observer
	Logger   *slog.Logger
	// MaxConns is Postgres's pool size; zero is postgres.Open's default.
	MaxConns int
	// CallersPools opens the database on pools the test opened itself, as a user
	// would, through the store's New (see [Pools]); the database's Close leaves them
	// open, and the test closes them when it ends. [PoolsOf] gives them to the test.
	// Place.Open alone takes it.
	CallersPools bool
	// PoolOfOne opens the database on one connection: on Postgres with MaxConns 1,
	// and on SQLite, where Open always makes a writer and readers, on a caller's pool
	// of one (CallersPools) that writes and reads. Place.Open alone takes it.
	PoolOfOne bool
	// ReplicaWait is how long a read on a Standby backend waits for the standby.
	ReplicaWait time.Duration
}

// Open opens the database at p with its store package's Open, and closes it when
// tb ends: a *sqlite.DB or a *postgres.DB. Each call is another handle with its
// own connections, as another process would have.
func (p Place) Open(tb testing.TB, opts Options) refset.Database {
	tb.Helper()
	var db refset.Database
	var pools Pools
	var err error
	if opts.onCallersPools(p.Backend) {
		pools = p.callersPools(tb, opts)
		db, err = p.newOn(pools, opts)
	} else {
		db, err = p.Dial(context.Background(), opts)
	}
	if err != nil {
		tb.Fatalf("testdb: open %s: %v", p.Backend.Name, err)
	}
	return p.remember(tb, db, pools)
}

// AlsoOn opens another database, with the store's New, on the pools the test opened
// for db ([Options.CallersPools]), as a second component of a program given the same
// pools would; it is closed when tb ends.
func AlsoOn(tb testing.TB, db refset.Database, opts Options) refset.Database {
	tb.Helper()
	o := openedAs(tb, db)
	pools := PoolsOf(tb, db)
	other, err := o.place.newOn(pools, opts)
	if err != nil {
		tb.Fatalf("testdb: open %s on the same pools: %v", o.place.Backend.Name, err)
	}
	return o.place.remember(tb, other, pools)
}

// remember keeps how db was opened, until tb ends, when it closes db.
func (p Place) remember(tb testing.TB, db refset.Database, pools Pools) refset.Database {
	places.Store(db, opened{place: p, pools: pools})
	// Registered after pgtest's drop, so it runs before it: no connection is
	// left open when the schema goes.
	tb.Cleanup(func() {
		places.Delete(db)
		_ = db.(interface{ Close() error }).Close()
	})
	return db
}

// Dial opens the database at p as [Place.Open] does, for a process with no test
// of its own (a child process a test starts): the caller closes it.
func (p Place) Dial(ctx context.Context, opts Options) (refset.Database, error) {
	if p.Backend.Postgres {
		return postgres.Open(ctx, p.At, p.PostgresOptions(opts))
	}
	return sqlite.Open(ctx, p.At, sqlite.Options{Driver: p.Backend.Driver, Options: store.Options{Observer: opts.Observer, Logger: opts.Logger}})
}

// Named returns the backend of [All], [Standby] or [SQLitePureGo] called name.
func Named(name string) (Backend, bool) {
	for _, b := range append(All(), Standby, SQLitePureGo) {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// PostgresOptions are the options [Place.Open] opens a Postgres place with, for
// tests that open it in a way of their own.
func (p Place) PostgresOptions(opts Options) postgres.Options {
	return postgres.Options{
		Driver:      p.Backend.Driver,
		Unprepared:  p.Backend.Unprepared,
		ReplicaDSN:  p.StandbyAt,
		MaxConns:    opts.maxConns(),
		ReplicaWait: opts.ReplicaWait,
		Options:     store.Options{Observer: opts.Observer, Logger: opts.Logger},
	}
}

// maxConns is the Postgres pool size opts ask for.
func (o Options) maxConns() int {
	if o.PoolOfOne {
		return 1
	}
	return o.MaxConns
}

// places remembers how Open opened each database, until its test ends.
var places sync.Map // refset.Database -> opened

// opened is how Open opened a database: its place, and the pools the test opened
// for it (none, on the pools its store opened).
type opened struct {
	place Place
	pools Pools
}

// openedAs is how this package opened db.
func openedAs(tb testing.TB, db refset.Database) opened {
	tb.Helper()
	o, ok := places.Load(db)
	if !ok {
		tb.Fatalf("testdb: %T was not opened by testdb, or its test has ended", db)
	}
	return o.(opened)
}

// PlaceOf returns the place db was opened on by this package.
func PlaceOf(tb testing.TB, db refset.Database) Place {
	tb.Helper()
	return openedAs(tb, db).place
}
