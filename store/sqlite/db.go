package sqlite

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
)

// Options tune Open. The zero value is a safe default.
type Options struct {
	// Readers is the size of the read-only connection pool. Zero means
	// max(4, GOMAXPROCS).
	Readers int

	// BusyTimeout is how long a connection waits for a lock held by another process
	// before failing with refset.ErrConflict. Zero means 5 seconds.
	BusyTimeout time.Duration

	// Synchronous is SQLite's synchronous setting: "FULL" (the default: a committed
	// transaction survives a power loss) or "NORMAL" (faster; in WAL mode a power loss
	// may drop the last transactions, an application crash cannot).
	Synchronous string
}

// DB is a SQLite database opened for refset. It implements refset.Database, so
// several sets and the caller's own SQL can share one unit of work (refset.InTx).
type DB struct {
	// Writer is the one connection that writes. Begin your own write transactions
	// here (or through Begin) so they queue behind refset's.
	Writer *sqlx.DB
	// Readers is the pool of read-only connections.
	Readers *sqlx.DB

	closed atomic.Bool
}

// Open opens (creating if needed) the SQLite database file at path.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("refset/sqlite: open %q: %w: a database file is needed (write-ahead logging and the separate reader pool need one; use a temporary directory for throwaway databases)", path, refset.ErrInvalidConfig)
	}
	busy := opts.BusyTimeout
	if busy == 0 {
		busy = 5 * time.Second
	}
	sync := opts.Synchronous
	switch sync {
	case "":
		sync = "FULL"
	case "FULL", "NORMAL":
	default:
		return nil, fmt.Errorf("refset/sqlite: Synchronous %q: %w: want FULL or NORMAL", sync, refset.ErrInvalidConfig)
	}
	readers := opts.Readers
	if readers <= 0 {
		readers = max(4, runtime.GOMAXPROCS(0))
	}

	file := "file:" + (&url.URL{Path: path}).EscapedPath()
	common := url.Values{}
	common.Set("_foreign_keys", "on")
	common.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))

	w := url.Values{}
	for k, v := range common {
		w[k] = v
	}
	w.Set("_journal_mode", "WAL")
	w.Set("_synchronous", sync)
	w.Set("_txlock", "immediate")
	writer, err := sqlx.Open("sqlite3", file+"?"+w.Encode())
	if err != nil {
		return nil, fmt.Errorf("refset/sqlite: open %s: %w", path, openError(err))
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	// The writer connects first: it is what switches the file to WAL.
	if err := writer.PingContext(ctx); err != nil {
		writer.Close()
		return nil, fmt.Errorf("refset/sqlite: open %s: %w", path, openError(err))
	}

	r := url.Values{}
	for k, v := range common {
		r[k] = v
	}
	r.Set("_query_only", "true")
	reader, err := sqlx.Open("sqlite3", file+"?"+r.Encode())
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("refset/sqlite: open %s: %w", path, openError(err))
	}
	reader.SetMaxOpenConns(readers)
	reader.SetMaxIdleConns(readers)
	if err := reader.PingContext(ctx); err != nil {
		writer.Close()
		reader.Close()
		return nil, fmt.Errorf("refset/sqlite: open %s: %w", path, openError(err))
	}
	return &DB{Writer: writer, Readers: reader}, nil
}

// openError is why opening failed, as a sentinel: a file that cannot be opened or
// read as a database is ErrUnavailable, anything else ErrInvalidConfig.
func openError(err error) error {
	if err = (&DB{}).TranslateError(err, ""); sqlstore.Translated(err) && !errors.Is(err, refset.ErrStatement) {
		return err
	}
	return fmt.Errorf("%w: %w", refset.ErrInvalidConfig, err)
}

// Begin opens a write transaction on the writer connection; it waits for the
// writer if another transaction has it.
func (db *DB) Begin(ctx context.Context) (refset.DatabaseTx, error) {
	if db.closed.Load() {
		return nil, fmt.Errorf("refset/sqlite: begin: %w", refset.ErrClosed)
	}
	tx, err := db.Writer.BeginTxx(ctx, nil)
	if err != nil {
		return nil, db.TranslateError(err, "BEGIN")
	}
	return sqlstore.NewTx(tx, db), nil
}

// Reader is the read-only pool.
func (db *DB) Reader() refset.Querier { return db.Readers }

// Close closes both pools. Later calls fail with refset.ErrClosed.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	return errors.Join(db.Readers.Close(), db.Writer.Close())
}
