package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/refsetdriver"
)

// Engine is a store's database as refset's packages see it: it implements
// refsetdriver.Database with the Reader and TranslateError of the store's DB.
type Engine struct {
	c      Config
	closed atomic.Bool
	group  *grouper // nil: each unit of work has a transaction of its own
}

// Config is what a store gives its Engine.
type Config struct {
	Name   string                // the store's package ("refset/sqlite"), for error messages
	DB     refsetdriver.Database // the store's DB, which embeds the Engine
	Driver refsetdriver.Driver
	// Statements caches the statements of Exec commands on the pool writes begin
	// on; nil: none.
	Statements *stmtcache.Cache
	// Begin begins a write transaction on the database's pools, and returns the
	// context it commits with (Tx.Commit's): ctx, or one that carries what the
	// store's BEGIN read for its commit (PostgreSQL's commit ticket on lib/pq).
	Begin func(ctx context.Context) (context.Context, *sqlx.Tx, error)
	// Release closes the pools the database owns; nil: it owns none.
	Release func() error
	// Tx is what the store adds to the transactions Begin begins: a check of each
	// statement's arguments, its own commit (see sqlstore.TxOptions).
	Tx sqlstore.TxOptions
	// Group, if not nil, makes units of work share transactions begun with Begin
	// (group commit, see the package doc); nil: each has one of its own.
	Group *Group
	// WriterBusy, if not nil, says that the database writes through one connection
	// (SQLite's writer) and reports whether it is in use: a Begin then waits for it.
	// Begin refuses one that would wait for its own unit of work (refuseOwnWriter).
	WriterBusy func() bool
	// OwnUnitsHoldPool, if not nil, reports whether a connection taken now from the
	// pool that Begin and the database's Reader take theirs from would wait for one
	// that only units of work on the calling goroutine could free (PostgreSQL's: the
	// pool has none free and may open no more, and such units hold every one of
	// them). Begin, and a read through ReaderOutside, then fail at once
	// (RefuseOwnPool). It is asked before every Begin: it must cost next to nothing
	// when a connection is free.
	OwnUnitsHoldPool func() bool
}

// New returns the Engine of a store's database.
func New(c Config) *Engine {
	e := &Engine{c: c}
	if c.Group != nil {
		e.group = newGrouper(e, *c.Group)
	}
	return e
}

// Driver is the database's driver; nil for a database that was not opened (the zero
// value of a store's DB).
func (e *Engine) Driver() refsetdriver.Driver {
	if e == nil {
		return nil
	}
	return e.c.Driver
}

// Begin opens a write transaction; on SQLite it waits for the writer if another
// transaction has it.
func (e *Engine) Begin(ctx context.Context) (refsetdriver.DatabaseTx, error) {
	if e == nil {
		return nil, NotOpened("begin")
	}
	if e.closed.Load() {
		return nil, fmt.Errorf("%s: begin: %w", e.c.Name, sentinel.ErrClosed)
	}
	if _, ok := refsetdriver.UnitTx(ctx, e.c.DB); ok {
		// Whatever reaches here did not join the unit: a transaction of its own would
		// wait for the connection the unit holds, or commit outside it.
		return nil, fmt.Errorf("%s: begin: %w: a transaction of its own would wait for the unit's connection or commit outside the unit; use the call's *Tx form with the unit's tx, or call it outside InTx", e.c.Name, sentinel.ErrInUnitOfWork)
	}
	if err := e.refuseOwnWriter(ctx); err != nil {
		return nil, err
	}
	watch := e.watchWait(ctx)
	// Exec commands' statements that ran unprepared are prepared now, while this
	// goroutine holds no connection (on SQLite's one writer connection, a
	// transaction would hold it).
	e.c.Statements.Prepare(ctx)
	if e.group != nil {
		tx, err := e.group.begin(ctx)
		stopWatching(watch)
		if err != nil {
			return nil, e.c.DB.TranslateError(err, "BEGIN")
		}
		return tx, nil
	}
	txCtx, tx, err := e.c.Begin(ctx)
	stopWatching(watch)
	if err != nil {
		return nil, e.c.DB.TranslateError(err, "BEGIN")
	}
	return sqlstore.NewTx(txCtx, tx, e.c.DB, e.c.Statements, e.c.Tx), nil
}

// watchWait logs a warning if Begin still waits for a connection once the
// slow-statement threshold has passed (none when it is off), and returns the function
// that stops the watch. A wait is for a full pool, or SQLite's one writer, which
// another transaction holds; one that never ends is most often a call made inside a
// unit of work with a context that does not carry the unit, waiting for the unit's own
// connection: the warning says so, where the call would otherwise wait in silence
// until its context ends (for ever with context.Background()).
//
// It returns the watch's timer (nil when the threshold is off), for stopWatching: a
// timer rather than a function that stops it, one allocation less on every Begin.
func (e *Engine) watchWait(ctx context.Context) *time.Timer {
	threshold := e.c.Driver.SlowStatement()
	if threshold <= 0 {
		return nil
	}
	start := time.Now()
	return time.AfterFunc(threshold, func() {
		dblog.Or(e.c.Driver.Logger()).LogAttrs(ctx, slog.LevelWarn, e.c.Name+": waiting for a connection to begin a transaction",
			slog.Duration("waited", time.Since(start).Round(time.Millisecond)),
			slog.String("hint", "every connection is in use (on SQLite, its one writer). A call made inside refset.InTx must use the context InTx gave its function, which joins the unit; with another it waits for the unit's own connection"))
	})
}

// stopWatching stops a watch of watchWait.
func stopWatching(watch *time.Timer) {
	if watch != nil {
		watch.Stop()
	}
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool { return e != nil && e.closed.Load() }

// Close closes what the database owns: its pools, or, for pools the caller owns, the
// statements refset prepared on them (Exec commands', and the sets' stores'). Later
// calls of refset on the database fail with
// refset.ErrClosed, on the caller's pools too, which stay open for the caller's own
// use (the pool accessors still return them; Reader does not). A Get or Load of an
// object that a live lease holds is served from memory, as ever, without asking the
// database. Closing again does nothing; closing a database that was not opened fails
// as its other calls do (NotOpened).
func (e *Engine) Close() error {
	if e == nil {
		return NotOpened("close")
	}
	if e.closed.Swap(true) {
		return nil
	}
	// The caller's pools live on: free the statements refset prepared on them, the
	// Exec commands' and the sets'.
	err := errors.Join(e.c.Statements.Close(), refsetdriver.PreparedOf(e.c.Driver).Close())
	if e.c.Release != nil {
		err = errors.Join(err, e.c.Release())
	}
	return err
}

// TranslateError is what a store's DB.TranslateError does: an error of a closed
// database is ErrClosed, and any other driver error is translate's, the dialect's
// mapping to the sentinels. nil, and an error that carries a sentinel already, pass
// as they are. e may be nil (a DB that was not opened).
func TranslateError(e *Engine, err error, query string, translate func(err error, query string) error) error {
	if err != nil && !sqlstore.Translated(err) {
		switch {
		case e.Closed():
			return fmt.Errorf("%s: %w: %w", e.c.Name, sentinel.ErrClosed, err)
		case poolClosed(err):
			return fmt.Errorf("%s: %w: the pool the database was made on was closed before the database (close the database first): %w", e.c.Name, sentinel.ErrClosed, err)
		}
	}
	return translate(err, query)
}

// poolClosedMessage is database/sql's error for a call on a closed pool, which it
// does not export.
const poolClosedMessage = "sql: database is closed"

// poolClosed reports whether err is, or wraps, database/sql's error for a call on a
// closed pool: a caller's pool, closed while the database made on it was in use.
func poolClosed(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == poolClosedMessage {
			return true
		}
	}
	return false
}

// Opened is what a store's Open returned, as the refset.Database an Opener's OpenDSN
// returns: on an error, a nil interface rather than one holding a nil *DB.
func Opened[DB refsetdriver.Database](db DB, err error) (refsetdriver.Database, error) {
	if err != nil {
		return nil, err
	}
	return db, nil
}

// NotOpened is the error of op on a store's DB that no constructor made: the zero
// value, or a literal (&sqlite.DB{}, &postgres.DB{}), which has no pools and no
// driver. It says which calls make one, since nothing else can.
func NotOpened(op string) error {
	return fmt.Errorf("refset: %s: %w: the database was not opened; make it with store.Open, or the Open or New of store/sqlite or store/postgres", op, sentinel.ErrInvalidConfig)
}

// Unopened is the pool a store's DB that was not opened hands out for its pools
// (Writer, Readers, Pool, Reader): every call on it fails with NotOpened's error
// instead of a nil pointer's panic. driverName is the sqlx driver name, which picks
// sqlx's placeholders.
func Unopened(driverName string) *sqlx.DB {
	return failingPool(driverName, NotOpened("connect"))
}

// Reading is what a store's DB hands out as its Reader, the pool refset reads on
// outside a unit of work: pool, or, once the database is closed, a pool on which every
// call fails with refset.ErrClosed. A pool that Open made is closed with the database
// and refuses by itself; a pool the caller gave New stays open, and refset's reads
// must not go on using it when Close has promised that its calls fail. driverName is
// the sqlx driver name, as for Unopened.
func (e *Engine) Reading(pool *sqlx.DB, driverName string) *sqlx.DB {
	if e.Closed() {
		return failingPool(driverName, fmt.Errorf("%s: %w", e.c.Name, sentinel.ErrClosed))
	}
	return pool
}

// failingPool is a pool that connects to nothing: every call on it fails with err.
// There is one per driver name and error message, made on first use, since a pool
// runs a goroutine of its own; errors of the same message are alike (a sentinel's
// wrapping, written by this package).
func failingPool(driverName string, err error) *sqlx.DB {
	key := driverName + "\x00" + err.Error()
	failingMu.Lock()
	defer failingMu.Unlock()
	if db, ok := failing[key]; ok {
		return db
	}
	db := sqlx.NewDb(sql.OpenDB(failingConnector{err}), driverName)
	failing[key] = db
	return db
}

var (
	failingMu sync.Mutex
	failing   = map[string]*sqlx.DB{}
)

// failingConnector is the connector of failingPool's pools: it connects to nothing.
type failingConnector struct{ err error }

func (c failingConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }

func (c failingConnector) Driver() driver.Driver { return failingDriver(c) }

// failingDriver is failingConnector's driver, which database/sql asks for by name only
// through sql.Open, never for an OpenDB pool.
type failingDriver struct{ err error }

func (d failingDriver) Open(string) (driver.Conn, error) { return nil, d.err }
