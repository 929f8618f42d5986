package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// connection is what the flags and the command say of the database to open.
type connection struct {
	dsn, driver, replica string
	unprepared           bool
	// readOnly opens a SQLite file read-only, for a command that only reads: it
	// leaves the file as it found it, byte for byte.
	readOnly bool
	// lockless lets a read-only open of a SQLite file in WAL mode read it without
	// locks when SQLite cannot create the -shm file it needs beside it (see
	// openSQLite): for a command that reads for a moment, not for ui, which reads
	// for as long as it serves.
	lockless bool
	// notices is where open says what it chose that the user should know.
	notices io.Writer
}

// open opens the database c.dsn names, a SQLite file or a PostgreSQL database
// (store.DSNDialect tells them apart by the DSN's form).
func open(ctx context.Context, c connection) (refset.Database, error) {
	dialect, err := store.DSNDialect(c.dsn)
	if err != nil {
		return nil, err
	}
	if dialect == (sqlite.Options{}).Dialect() {
		return openSQLite(ctx, c)
	}
	return openPostgres(ctx, c)
}

// openPostgres opens the PostgreSQL database, and its replica, with the connect
// timeout that every connection of the tool's gets (withConnectTimeout).
func openPostgres(ctx context.Context, c connection) (refset.Database, error) {
	dsn, defaulted := withConnectTimeout(c.dsn)
	opts := postgres.Options{Driver: c.driver, MaxConns: 4, Unprepared: c.unprepared}
	if c.replica != "" {
		opts.ReplicaDSN, _ = withConnectTimeout(c.replica)
	}
	db, err := store.Open(ctx, dsn, opts)
	if err != nil && defaulted && ctx.Err() == nil && timedOut(err) {
		return nil, fmt.Errorf("no answer from the server within %s, the connect_timeout refset gives a DSN that sets none "+
			"(set connect_timeout in the DSN to wait longer): %w", connectTimeout, err)
	}
	return db, err
}

// connectTimeout is how long a connection to PostgreSQL may take to be made, when
// the DSN sets no connect_timeout. A variable for the tests.
var connectTimeout = 10 * time.Second

// withConnectTimeout is dsn with connect_timeout set to connectTimeout, and true,
// unless dsn sets one or $PGCONNECT_TIMEOUT does (both drivers read it): without,
// a connection to a server that accepts it and never answers waits until the
// command is interrupted. It bounds every connection the pool makes, not only the
// first. A URL gets it as a parameter, a key=value DSN as one more pair.
func withConnectTimeout(dsn string) (string, bool) {
	dsn = strings.TrimSpace(dsn)
	if os.Getenv("PGCONNECT_TIMEOUT") != "" || setsConnectTimeout(dsn) {
		return dsn, false
	}
	// In whole seconds, as connect_timeout takes it.
	set := "connect_timeout=" + strconv.Itoa(max(1, int(math.Ceil(connectTimeout.Seconds()))))
	if !isURL(dsn) {
		return dsn + " " + set, true
	}
	switch {
	case strings.HasSuffix(dsn, "?"), strings.HasSuffix(dsn, "&"):
		return dsn + set, true
	case strings.Contains(dsn, "?"): // a '?' can only begin the query in a URL
		return dsn + "&" + set, true
	}
	return dsn + "?" + set, true
}

// isURL reports whether dsn is a PostgreSQL URL, not a key=value DSN.
func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// setsConnectTimeout reports whether dsn sets connect_timeout itself. A URL that
// does not parse is left to the driver to refuse, as though it did.
func setsConnectTimeout(dsn string) bool {
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		return err != nil || u.Query().Has("connect_timeout")
	}
	for _, k := range keywords(dsn) {
		if k == "connect_timeout" {
			return true
		}
	}
	return false
}

// keywords are the keywords of a libpq key=value DSN, in order: pairs keyword =
// value apart by white space, a value in single quotes or not, a backslash escaping
// the character after it in either (password='it\'s' host=db).
func keywords(dsn string) []string {
	const space = " \t\n\r\f\v"
	var keys []string
	s := dsn
	for {
		key, rest, ok := strings.Cut(strings.TrimLeft(s, space), "=")
		if !ok {
			return keys // a DSN without a pair left is the driver's to refuse
		}
		keys = append(keys, strings.TrimSpace(key))
		s = strings.TrimLeft(rest, space)
		// Skip the value.
		quoted := strings.HasPrefix(s, "'")
		i := 0
		if quoted {
			i = 1
		}
	value:
		for ; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\\':
				i++
			case quoted && c == '\'':
				i++
				break value
			case !quoted && strings.IndexByte(space, c) >= 0:
				break value
			}
		}
		s = s[min(i, len(s)):]
	}
}

// timedOut reports whether err says a server did not answer in time: lib/pq's
// socket deadline, pgx's context deadline.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// openSQLite opens the SQLite file c.dsn names, once it is sure it is a SQLite
// database: read-only for a command that only reads (sqlite.Options.ReadOnly: the
// file is never created, nor switched to WAL), as the program would for one that
// writes.
//
// A file in WAL mode is read with locks and the -shm file SQLite keeps beside it,
// which it creates if it is not there. In a directory the user may not write it
// cannot, and the read-only open fails: then, if no -wal file is there either (no
// connection has the database open in WAL mode, and everything committed is in the
// file itself), a command that reads for a moment reads the file without locks
// (sqlite.Options.Immutable), and says so. That is safe while no program starts to
// write the file, which a writer could only do from a user with the rights this one
// lacks; it is not done for ui, which reads for as long as it serves.
func openSQLite(ctx context.Context, c connection) (refset.Database, error) {
	for _, f := range []struct {
		name string
		set  bool
	}{{"--driver", c.driver != ""}, {"--replica", c.replica != ""}, {"--unprepared", c.unprepared}} {
		if f.set {
			return nil, fmt.Errorf("%w: %s is for PostgreSQL, and %q names a SQLite file", refset.ErrInvalidConfig, f.name, c.dsn)
		}
	}
	// The file is the one store.Open would open, whichever form names it.
	path, err := sqlite.FilePath(c.dsn)
	if err != nil {
		return nil, err
	}
	if err := isSQLiteFile(path); err != nil {
		return nil, err
	}
	opts := sqlite.Options{Readers: 2, ReadOnly: c.readOnly}
	db, err := store.Open(ctx, c.dsn, opts)
	if err != nil && c.readOnly && c.lockless && sqliteCode(err) == sqlite3.SQLITE_READONLY_DIRECTORY && !exists(path+"-wal") {
		opts.Immutable = true
		if db, err = store.Open(ctx, c.dsn, opts); err == nil && c.notices != nil {
			fmt.Fprintf(c.notices, "refset: note: reading %s without locks: it is in WAL mode, and its directory is read-only, "+
				"so SQLite cannot create %s-shm to read it with locks; no -wal file is there, so the file holds all that was "+
				"committed, but a program that starts writing it meanwhile may make this report wrong\n", path, path)
		}
	}
	return db, err
}

// sqliteHeader starts every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

// isSQLiteFile refuses, naming it, a path that is no SQLite database: SQLite would
// create a missing file, take an empty one for an empty database (and write one in
// it), and refuse another only at the first statement that reads it.
func isSQLiteFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: SQLite database %s: %w", refset.ErrInvalidConfig, path, err)
	}
	defer f.Close()
	header := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, header)
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return fmt.Errorf("%w: %s is empty, not a SQLite database", refset.ErrInvalidConfig, path)
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: SQLite database %s: %w", refset.ErrInvalidConfig, path, err)
	case string(header[:n]) != sqliteHeader:
		return fmt.Errorf("%w: %s is not a SQLite database (it does not begin with SQLite's header)", refset.ErrInvalidConfig, path)
	}
	return nil
}

// exists reports whether a file is at path; one that cannot be told counts as there.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// sqliteCode is the SQLite result code err carries, extended, or 0.
func sqliteCode(err error) int {
	var e *sqlitedriver.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// explain says what a command's error means where the store's words leave it
// unsaid: an interrupt, and a SQLite file a command cannot use because it, or its
// directory, is read-only (SQLITE_READONLY, which store/sqlite reports as
// refset.ErrInvalidConfig).
func explain(ctx context.Context, err error, cmd *command, c connection) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	code := sqliteCode(err)
	if code&0xff != sqlite3.SQLITE_READONLY {
		return err
	}
	path, _ := sqlite.FilePath(c.dsn)
	switch {
	case cmd.writes:
		return fmt.Errorf("the SQLite file %s, or its directory, is read-only, and %s writes to them "+
			"(the directory holds SQLite's -wal and -shm files): %w", path, cmd.name, err)
	case code == sqlite3.SQLITE_READONLY_DIRECTORY:
		// A command that reads, refused the -shm file (see openSQLite).
		why := ""
		if cmd.serves {
			why = "; ui, which reads for as long as it serves, does not read a file without locks, as the other commands that read may"
		}
		return fmt.Errorf("the directory of the SQLite file %s is read-only, and SQLite must create %s-shm there to read a file "+
			"in WAL mode%s; copy the file, with its -wal file if there is one, to a directory you may write: %w", path, path, why, err)
	}
	return fmt.Errorf("reading the SQLite file %s needs a write to it or beside it (an interrupted transaction to roll "+
		"back, a -wal file to recover), and it or its directory is read-only: %w", path, err)
}
