package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // registers the "postgres" driver
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
)

// Options tune Open. The zero value is a safe default.
type Options struct {
	// MaxConns bounds the connection pool. Zero means 20.
	MaxConns int

	// Isolation is the isolation level of the write transactions refset opens. The
	// zero value is the server's default (READ COMMITTED), under which foreign keys
	// already serialise holds against deletions.
	Isolation sql.IsolationLevel

	// Unprepared makes stores run every statement unprepared, for a connection pooler
	// that does not keep prepared statements across transactions (PgBouncer in
	// transaction mode before 1.21, or without max_prepared_statements). It costs a
	// round trip a statement: lib/pq parses an unprepared statement with arguments in
	// a round trip of its own.
	Unprepared bool
}

// DB is a PostgreSQL database opened for refset. It implements refset.Database, so
// several sets and the caller's own SQL can share one unit of work (refset.InTx).
type DB struct {
	// Pool is the connection pool; use it for your own queries too.
	Pool *sqlx.DB

	isolation  sql.IsolationLevel
	unprepared bool
	closed     atomic.Bool
}

// Open connects to the database named by dsn (a lib/pq connection string or URL).
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	pool, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("refset/postgres: open: %w: %w", refset.ErrInvalidConfig, err)
	}
	conns := opts.MaxConns
	if conns <= 0 {
		conns = 20
	}
	pool.SetMaxOpenConns(conns)
	pool.SetMaxIdleConns(conns)
	pool.SetConnMaxIdleTime(5 * time.Minute)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, ctxerr.Wrap(ctx, fmt.Errorf("refset/postgres: open: %w", openError(err)))
	}
	return &DB{Pool: pool, isolation: opts.Isolation, unprepared: opts.Unprepared}, nil
}

// openError is why the first connection failed: the server's answer or the lost
// connection as a sentinel, and anything else (lib/pq's complaints about the DSN
// itself) as ErrInvalidConfig.
func openError(err error) error {
	if err = translateError(err, ""); sqlstore.Translated(err) {
		return err
	}
	return fmt.Errorf("%w: %w", refset.ErrInvalidConfig, err)
}

// Begin opens a write transaction.
func (db *DB) Begin(ctx context.Context) (refset.DatabaseTx, error) {
	if db.closed.Load() {
		return nil, fmt.Errorf("refset/postgres: begin: %w", refset.ErrClosed)
	}
	tx, err := db.Pool.BeginTxx(ctx, &sql.TxOptions{Isolation: db.isolation})
	if err != nil {
		return nil, db.TranslateError(err, "BEGIN")
	}
	return sqlstore.NewTx(tx, db), nil
}

// Unprepared reports whether Options.Unprepared was set: code with statements of its
// own to prepare should run them unprepared too.
func (db *DB) Unprepared() bool { return db.unprepared }

// Reader is the pool.
func (db *DB) Reader() refset.Querier { return db.Pool }

// Close closes the pool. Later calls fail with refset.ErrClosed.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	return errors.Join(db.Pool.Close())
}
