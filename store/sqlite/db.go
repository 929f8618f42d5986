package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
)

// Options tune Open. The zero value is a safe default.
type Options struct {
	// Options are what every store takes: logging, metrics, the statement cache,
	// external migrations.
	store.Options

	// Readers is the size of the read-only connection pool. Zero means
	// max(4, GOMAXPROCS).
	Readers int

	// BusyTimeout is how long a connection waits for a lock held by another process
	// before failing with refset.ErrConflict. Zero means 5 seconds; a negative value
	// is refused (refset.ErrInvalidConfig). SQLite counts it in whole milliseconds, so
	// it is rounded up to one, and it is at most 2³¹-1 ms (about 24.8 days).
	BusyTimeout time.Duration

	// Synchronous is SQLite's synchronous setting: "FULL" (the default: a committed
	// transaction survives a power loss) or "NORMAL" (faster; in WAL mode a power loss
	// may drop the last transactions, an application crash cannot).
	Synchronous string

	// Driver is the database/sql driver Open dials with: DriverMattn
	// (github.com/mattn/go-sqlite3, cgo) or DriverModernc (modernc.org/sqlite, pure
	// Go), each linked by importing its package (see "Drivers" in the package doc).
	// Empty means the one linked, go-sqlite3 if both are and cgo built it.
	Driver string

	// NoGroupCommit gives each unit of work a transaction and a commit (an fsync) of
	// its own, as before group commit: see "Group commit" in the package doc.
	NoGroupCommit bool

	// ReadOnly opens the file for reading only (SQLite's mode=ro), for a program that
	// must leave it as it is, such as a report: the file must exist (Open creates
	// none), its journal mode stays what it is (Open otherwise switches it to WAL),
	// and every write fails with refset.ErrInvalidConfig. Open reads the file once,
	// so that one it cannot read as a database fails Open, not the first call. In WAL
	// mode SQLite still keeps its -wal and -shm files beside the file, creating them
	// if the directory lets it; where it does not, and they are not there, Open fails
	// (refset.ErrInvalidConfig), unless Immutable.
	ReadOnly bool

	// Immutable, with ReadOnly, reads the file without locks and without its -wal
	// and -shm files (SQLite's immutable=1): for a file nothing writes while it is
	// open, on read-only media or in a directory where SQLite cannot create the
	// -shm file it reads a database in WAL mode with. What a -wal file holds is not
	// read, and a file that does change while it is open gives wrong answers or
	// errors of a corrupt database.
	Immutable bool

	// groupMaxAge, for this package's tests, is how long a group may take units
	// (zero: the engine's default): a test that needs two units in one group must not
	// see it close because a loaded machine was slow between them.
	groupMaxAge time.Duration
	// groupEvict, for this package's tests, is how long a unit may stay idle in a
	// group (zero: the engine's default).
	groupEvict time.Duration
}

// Dialect is "sqlite", the Name of this store's Driver: store.Open gives these
// options the DSNs of SQLite, a file path or a file: URL.
func (Options) Dialect() string { return dialectName }

// OpenDSN is Open with these options, as store.Open calls it.
func (o Options) OpenDSN(ctx context.Context, dsn string) (refset.Database, error) {
	return engine.Opened(Open(ctx, dsn, o))
}

var _ store.Opener = Options{}

// DB is a SQLite database opened for refset. It implements refset.Database, so
// several sets and the caller's own SQL can share one unit of work (refset.InTx).
// Open, New and store.Open make one; its fields are unexported because a DB they did
// not make has no pools: every call on one fails with refset.ErrInvalidConfig.
type DB struct {
	writer  *sqlx.DB // the one connection that writes
	readers *sqlx.DB // the read-only connections

	*storeEngine                  // Begin, Close, Driver
	stmts        *stmtcache.Cache // the engine's cache of Exec commands' statements
}

// storeEngine is the engine every store's DB embeds, under a name that keeps the
// field out of the DB's API.
type storeEngine = engine.Engine

// Open opens (creating if needed, unless Options.ReadOnly) the SQLite database file
// at path, a file path or a file: URL naming one ("file:ledger.db",
// "file:///var/lib/app/ledger.db"). A URL carries no parameters
// (refset.ErrInvalidConfig): Open sets the connections' own (write-ahead logging,
// foreign keys, the busy timeout), and Options the rest.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	path, err := FilePath(path)
	if err != nil {
		return nil, err
	}
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("refset/sqlite: open %q: %w: a database file is needed (write-ahead logging and the separate reader pool need one; use a temporary directory for throwaway databases)", path, refset.ErrInvalidConfig)
	}
	busy, err := busyMillis(opts.BusyTimeout)
	if err != nil {
		return nil, fmt.Errorf("refset/sqlite: open %q: %w", path, err)
	}
	sync := opts.Synchronous
	switch sync {
	case "":
		sync = "FULL"
	case "FULL", "NORMAL":
	default:
		return nil, fmt.Errorf("refset/sqlite: Synchronous %q: %w: want FULL or NORMAL", sync, refset.ErrInvalidConfig)
	}
	sd, err := chooseDriver(opts.Driver)
	if err != nil {
		return nil, err
	}
	driverName := sd.Name
	readers := opts.Readers
	if readers <= 0 {
		readers = max(4, runtime.GOMAXPROCS(0))
	}

	if opts.Immutable && !opts.ReadOnly {
		return nil, fmt.Errorf("refset/sqlite: open %q: %w: Immutable is for a file opened ReadOnly", path, refset.ErrInvalidConfig)
	}

	// Every connection enforces foreign keys and waits for locks; the writer also
	// switches the file to WAL and begins its transactions IMMEDIATE. Both drivers
	// read these parameters alike.
	file := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_foreign_keys=on&_busy_timeout=" + strconv.FormatInt(busy, 10)
	writing := "&_journal_mode=WAL&_synchronous=" + sync + "&_txlock=immediate"
	if opts.ReadOnly {
		// SQLite opens the file read-only, so that it creates none and refuses every
		// write, and the writer sets nothing that writes: the journal mode stays the
		// file's, and a transaction begins DEFERRED (IMMEDIATE takes the write lock).
		file += "&mode=ro"
		if opts.Immutable {
			file += "&immutable=1"
		}
		writing = ""
	}
	writer, err := sqlx.Open(driverName, file+writing)
	if err != nil {
		return nil, sentinel.Wrap(msgPrefix, "open "+path, openError(err))
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	// The writer connects first: it is what switches the file to WAL. A file opened
	// read-only is read once, which a connection alone may not do.
	err = writer.PingContext(ctx)
	if err == nil && opts.ReadOnly {
		var version int64
		err = writer.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&version)
	}
	if err != nil {
		writer.Close()
		return nil, sentinel.Wrap(msgPrefix, "open "+path, openError(err))
	}

	reader, err := sqlx.Open(driverName, file+"&_query_only=true")
	if err != nil {
		writer.Close()
		return nil, sentinel.Wrap(msgPrefix, "open "+path, openError(err))
	}
	reader.SetMaxOpenConns(readers)
	reader.SetMaxIdleConns(readers)
	if err := reader.PingContext(ctx); err != nil {
		writer.Close()
		reader.Close()
		return nil, sentinel.Wrap(msgPrefix, "open "+path, openError(err))
	}
	return newDB(writer, reader, true, opts), nil
}

// busyMillis is BusyTimeout as SQLite's busy_timeout takes it, in whole milliseconds
// of a C int: zero is the default, 5 s; a positive duration under a millisecond is
// one (SQLite would read 0 as "never wait"), and one past what an int holds (about
// 24.8 days) is that much, not a number that wraps to a negative one, which SQLite
// also reads as "never wait". A negative duration is refused.
func busyMillis(d time.Duration) (int64, error) {
	switch {
	case d == 0:
		return (5 * time.Second).Milliseconds(), nil
	case d < 0:
		return 0, fmt.Errorf("%w: BusyTimeout %v is negative; want a positive duration, or zero for 5s", refset.ErrInvalidConfig, d)
	case d >= math.MaxInt32*time.Millisecond:
		return math.MaxInt32, nil
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond), nil // rounded up: never 0
}

// FilePath is the file that dsn, a path or a file: URL, names as Open reads it
// (SQLite's URI filenames: an empty or "localhost" authority, the path
// percent-encoded); a path is its own. A DSN Open refuses (a URL with parameters or
// of another host, a name with a NUL byte, which SQLite would cut short to another
// file's) is refused here alike, with refset.ErrInvalidConfig. For a tool that must
// find the file before Open, which creates one that is missing.
func FilePath(dsn string) (string, error) {
	path, err := filePath(dsn)
	if err == nil && strings.ContainsRune(path, 0) {
		// SQLite reads a C string: the file would be the name up to the NUL, another
		// file than the one named.
		return "", fmt.Errorf("refset/sqlite: open %q: %w: a file name holds no NUL byte", dsn, refset.ErrInvalidConfig)
	}
	return path, err
}

// filePath is FilePath but for the NUL bytes it refuses.
func filePath(dsn string) (string, error) {
	if !strings.HasPrefix(dsn, "file:") {
		return dsn, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not the URL again
		}
		return "", fmt.Errorf("refset/sqlite: open %q: %w: %w", dsn, refset.ErrInvalidConfig, err)
	}
	switch {
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", fmt.Errorf("refset/sqlite: open %q: %w: a file: URL here names the file alone; "+
			"Open sets the connections' parameters itself (write-ahead logging, foreign keys, a busy timeout), "+
			"and sqlite.Options the rest (BusyTimeout, Synchronous, Readers)", dsn, refset.ErrInvalidConfig)
	case u.Host != "" && u.Host != "localhost":
		return "", fmt.Errorf("refset/sqlite: open %q: %w: a file: URL names a local file (authority empty or localhost, not %q)", dsn, refset.ErrInvalidConfig, u.Host)
	case u.Opaque != "": // file:ledger.db, relative
		path, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", fmt.Errorf("refset/sqlite: open %q: %w: %w", dsn, refset.ErrInvalidConfig, err)
		}
		return path, nil
	}
	return u.Path, nil
}

// newDB is a database on writer and readers, carrying its driver.
func newDB(writer, readers *sqlx.DB, ownsPools bool, opts Options) *DB {
	stmts := stmtcache.New(writer.DB, stmtcache.Size(opts.StatementCache), nil)
	db := &DB{writer: writer, readers: readers, stmts: stmts}
	var release func() error // the caller's pools stay open
	if ownsPools {
		release = func() error { return errors.Join(readers.Close(), writer.Close()) }
	}
	db.storeEngine = engine.New(engine.Config{
		Name:       "refset/sqlite",
		DB:         db,
		Driver:     newDialectDriver(writer, opts),
		Statements: stmts,
		// The writer's one connection: a transaction waits for it while another
		// has it.
		Begin: func(ctx context.Context) (context.Context, *sqlx.Tx, error) {
			tx, err := writer.BeginTxx(ctx, nil)
			return ctx, tx, err
		},
		Release: release,
		Tx:      sqlstore.TxOptions{Check: statementGuard{inMain: mainSchema(writer, readers)}.check},
		Group:   groupCommit(opts, writer),
		// A transaction begun while a unit of work holds the writer waits for it: on
		// the unit's own goroutine, for ever (engine.Config.WriterBusy).
		WriterBusy: func() bool { return writer.Stats().InUse > 0 },
	})
	return db
}

// mainSchema is statementGuard's inMain on a database of writer and readers: it asks
// the readers, or, when they are the writer (New without readers), whose one
// connection the unit of work asking holds, a connection of its own to the file.
func mainSchema(writer, readers *sqlx.DB) func(name string) (bool, error) {
	const q = `SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE)`
	ask := func(pool *sqlx.DB, name string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var in bool
		err := pool.QueryRowContext(ctx, q, name).Scan(&in)
		return in, err
	}
	if readers.DB != writer.DB {
		return func(name string) (bool, error) { return ask(readers, name) }
	}
	var file string
	fileErr := writer.QueryRowContext(context.Background(), `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file)
	return func(name string) (bool, error) {
		if fileErr != nil {
			return false, fileErr
		}
		probe, err := sqlx.Open(writer.DriverName(), "file:"+(&url.URL{Path: file}).EscapedPath()+"?mode=ro&_busy_timeout=5000")
		if err != nil {
			return false, err
		}
		defer probe.Close()
		return ask(probe, name)
	}
}

// New uses pools the caller opened with github.com/mattn/go-sqlite3 or
// modernc.org/sqlite (both with the same parameters) on one database file: writer for every write, readers (nil: the writer too) for reads outside a
// transaction. refset needs of them what Open sets up, and checks it, refusing with
// refset.ErrInvalidConfig that names what is missing:
//
//   - every connection enforces foreign keys (_foreign_keys=on in the DSN);
//   - the writer is one connection (SetMaxOpenConns(1)) in WAL mode
//     (_journal_mode=WAL) that waits for locks (_busy_timeout=5000) and begins its
//     transactions IMMEDIATE (_txlock=immediate), so concurrent writers queue
//     instead of failing with "database is locked";
//   - the readers are on the same file.
//
// The pools stay the caller's: Close leaves them open (and closes the statements
// refset prepared on them). Close the DB before the pools: on pools closed first,
// refset's calls fail with refset.ErrClosed. Of opts, New uses Logger,
// SlowStatement, Observer, StatementCache and ExternalMigrations; the others set up
// pools Open makes.
func New(ctx context.Context, writer, readers *sql.DB, opts Options) (*DB, error) {
	if writer == nil {
		return nil, fmt.Errorf("refset/sqlite: new: %w: nil writer pool", refset.ErrInvalidConfig)
	}
	if readers == nil {
		readers = writer
	}
	sd, err := driverOf(writer.Driver())
	driverName := sd.Name
	if err != nil {
		return nil, fmt.Errorf("refset/sqlite: new: %w", err)
	}
	if _, err := driverOf(readers.Driver()); err != nil {
		return nil, fmt.Errorf("refset/sqlite: new: %w", err)
	}
	if err := checkPools(ctx, driverName, writer, readers); err != nil {
		return nil, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "new", err))
	}
	return newDB(sqlx.NewDb(writer, driverName), sqlx.NewDb(readers, driverName), false, opts), nil
}

// checkPools checks that writer and readers are set up as refset needs (see New).
// driverName is the writer's driver, which also probes the file.
func checkPools(ctx context.Context, driverName string, writer, readers *sql.DB) error {
	if n := writer.Stats().MaxOpenConnections; n != 1 {
		return fmt.Errorf("%w: the writer pool may open %d connections; call SetMaxOpenConns(1) so writers queue on one connection", refset.ErrInvalidConfig, n)
	}
	pragma := func(p *sql.DB, name string) (string, error) {
		var v string
		if err := p.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
			return "", openError(err)
		}
		return v, nil
	}
	var writerFile string
	for _, c := range []struct {
		pool *sql.DB
		role string
	}{{writer, "writer"}, {readers, "readers"}} {
		fk, err := pragma(c.pool, "foreign_keys")
		if err != nil {
			return err
		}
		if fk != "1" {
			return fmt.Errorf("%w: the %s' connections do not enforce foreign keys; add _foreign_keys=on to the DSN", refset.ErrInvalidConfig, c.role)
		}
		var file string
		if err := c.pool.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
			return openError(err)
		}
		if c.role == "writer" {
			writerFile = file
		} else if file != writerFile {
			return fmt.Errorf("%w: the readers are on %q, the writer on %q", refset.ErrInvalidConfig, file, writerFile)
		}
	}
	if writerFile == "" {
		return fmt.Errorf("%w: the writer is on a memory database; refset needs a file (write-ahead logging and the separate readers need one)", refset.ErrInvalidConfig)
	}
	mode, err := pragma(writer, "journal_mode")
	if err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("%w: the writer's journal mode is %q; add _journal_mode=WAL to the DSN", refset.ErrInvalidConfig, mode)
	}
	busy, err := pragma(writer, "busy_timeout")
	if err != nil {
		return err
	}
	if busy == "0" {
		return fmt.Errorf("%w: the writer does not wait for locks; add _busy_timeout=5000 to the DSN", refset.ErrInvalidConfig)
	}
	return checkImmediate(ctx, driverName, writer, writerFile)
}

// checkImmediate checks that writer begins its transactions IMMEDIATE, which no
// pragma tells: while a transaction of the writer is open, but before it writes, a
// second connection to the file must find the database locked for writing.
func checkImmediate(ctx context.Context, driverName string, writer *sql.DB, file string) error {
	tx, err := writer.BeginTx(ctx, nil)
	if err != nil {
		return openError(err)
	}
	defer tx.Rollback()
	probe, err := sql.Open(driverName, "file:"+(&url.URL{Path: file}).EscapedPath()+"?_busy_timeout=0")
	if err != nil {
		return openError(err)
	}
	defer probe.Close()
	conn, err := probe.Conn(ctx)
	if err != nil {
		return openError(err)
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	if err == nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("%w: the writer begins its transactions DEFERRED; add _txlock=immediate to the DSN, or a transaction that reads and then writes fails at once with \"database is locked\"", refset.ErrInvalidConfig)
	}
	if code, _, ok := resultCode(err); ok && code&0xff == codeBusy {
		return nil
	}
	return openError(err)
}

// openError is why opening failed, as a sentinel: a file that cannot be opened or
// read as a database is ErrUnavailable, anything else ErrInvalidConfig.
func openError(err error) error {
	if err = translateError(err, ""); sqlstore.Translated(err) && !errors.Is(err, refset.ErrStatement) {
		return err
	}
	return sentinel.New("", "", refset.ErrInvalidConfig, err)
}

// Writer is the one connection that writes. Begin your own write transactions here
// (or through Begin) so they queue behind refset's. On a DB that was not opened, every
// call on it fails with refset.ErrInvalidConfig.
func (db *DB) Writer() *sqlx.DB {
	if db.writer == nil {
		return engine.Unopened("sqlite3")
	}
	return db.writer
}

// Readers is the pool of read-only connections (the writer, for New without
// readers). On a DB that was not opened, every call on it fails with
// refset.ErrInvalidConfig.
func (db *DB) Readers() *sqlx.DB {
	if db.readers == nil {
		return engine.Unopened("sqlite3")
	}
	return db.readers
}

// Reader is the read-only pool, Readers (refset.Database), on which refset reads
// outside a unit of work; once the database is closed, every call on it fails with
// refset.ErrClosed, on a caller's pool too, which Readers still returns open.
func (db *DB) Reader() refset.Querier { return db.storeEngine.Reading(db.Readers(), "sqlite3") }
