package refsetdriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/sqlident"
)

// Querier runs SQL: *sql.DB, *sql.Tx, *sql.Conn and their sqlx counterparts are all
// Queriers (refset.Querier is this type).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Tx is a transaction as the code inside it sees it (refset.Tx is this type): it
// runs statements and cannot end the transaction.
type Tx interface {
	Querier
}

// DatabaseTx is a write transaction a Database began. refset commits it or rolls it
// back; the code it runs inside the transaction sees only a Tx. A Commit that lost
// its connection may learn the outcome from a server (see NotCommitted).
type DatabaseTx interface {
	Querier
	Commit() error
	Rollback() error
}

// Database is a store's database (refset.Database is this type): where its sets live
// and units of work run.
type Database interface {
	// Begin opens a write transaction.
	Begin(ctx context.Context) (DatabaseTx, error)

	// Reader is where reads outside a transaction go.
	Reader() Querier

	// TranslateError maps a driver error to the refset sentinels (wrapping both), and
	// returns any other error unchanged. query is the statement that failed, or ""
	// when unknown; some drivers need it to tell a missing parent from a held one.
	TranslateError(err error, query string) error

	// Driver is the database's dialect and capabilities; nil for a database that is
	// not ready (the zero value of a store's DB).
	Driver() Driver

	// Close closes what the database owns (its pools, or the statements refset
	// prepared on a caller's pools); later calls fail with refset.ErrClosed. It is
	// here so that a program that opened the database of either store through one
	// call (store.Open) can close it without knowing which.
	Close() error
}

// Driver is one dialect bound to one database: everything refset's packages ask of
// a database beyond running statements. Besides these methods a Driver may implement
// the optional interfaces listed in the package doc.
type Driver interface {
	// CleanupDialect is clean-up's SQL in the database (refsetdriver/cleanup.go).
	CleanupDialect

	// Name names the dialect ("sqlite", "postgres"): the folder a component keeps
	// its per-dialect SQL files in (blockmanager/sql/<name>). Code asks the driver
	// for what differs; it never compares this name.
	Name() string

	// Rebind rewrites a query's ? placeholders to the dialect's, leaving any ? in a
	// literal, a quoted name or a comment as it is.
	Rebind(query string) string

	// Pool is the pool the database begins its write transactions on, where a store
	// prepares its writing statements.
	Pool() *sql.DB

	// Unprepared reports that statements must run unprepared (a connection pooler
	// that keeps no prepared statements).
	Unprepared() bool

	// ExternalMigrations reports that the schema is migrated by someone else (a DBA):
	// stores run no DDL and check the schema's versions instead.
	ExternalMigrations() bool

	// Logger is where refset logs what it does in the database; never nil (one that
	// drops everything when the database was opened without one).
	Logger() *slog.Logger

	// SlowStatement is the duration past which a statement is logged; 0: none is.
	SlowStatement() time.Duration

	// Observer is told what refset does in the database, for metrics; never nil.
	Observer() Observer

	// RetryUnavailable is how long a unit of work that failed with ErrUnavailable,
	// and certainly did not commit, is run again (store.Options.RetryUnavailable);
	// 0: never.
	RetryUnavailable() time.Duration

	// Columns reads a table's columns from the catalog; none if it does not exist.
	Columns(ctx context.Context, q Querier, table sqlident.Ident) ([]Column, error)

	// Statements writes the SQL of a set's table.
	Statements(t SetTable) Statements

	// SchemaSQL is the dialect's part of refset's schema: its migrations and every
	// statement on refset's own tables.
	SchemaSQL() SchemaSQL

	// A component's own holds, written in its own statements (custody's locks): the
	// holds tables keep expires_at by the database's clock (Clock().Now).

	// Expiry is the SQL expression of the expires_at of a hold that expires ms
	// milliseconds after the statement writes it, by the database's clock read then
	// (not when the transaction began); ms is an SQL expression of an integer (a
	// literal or a placeholder).
	Expiry(ms string) string

	// What a component's own statements, on its own tables, ask of the dialect
	// (blockmanager's): fragments that let it write one statement for every
	// database, with ? placeholders that Rebind numbers, and what kind of database
	// it is. TxLocks and BulkWrites add what only some databases have.

	// ColumnIn is the condition that column is one of a list of strings, bound at
	// its one ? as StringList encodes it: the statement's text is the same however
	// long the list, and binds one value. (On SQLite a list of parameters, compiled
	// and bound one by one, cost more than the rest of blockmanager's look-ups
	// together; pgx prepares and caches each statement text it runs.)
	ColumnIn(column string) string

	// StringList encodes a list of strings as the one argument of ColumnIn, or of
	// one of the lists of BulkWrites.Unnest.
	StringList(values []string) any

	// InProcess reports that the database runs in the client's process, on the
	// goroutines that call it (SQLite): a read split across connections spreads the
	// database's work over more of the client's cores, where a server's work is on
	// other cores already.
	InProcess() bool
}

// TxLocks is a Driver whose database runs write transactions side by side, and
// gives them locks, held until the transaction ends, to order themselves by
// (PostgreSQL). A database whose Driver lacks it runs one write transaction at a
// time (SQLite's one writer), which orders them already: a component takes no lock
// there.
type TxLocks interface {
	// TxLock is an SQL expression that takes the lock named by the string bound at
	// its one ?, until the transaction ends: shared with the other shared holders,
	// or exclusive.
	TxLock(shared bool) string

	// KeyShare is the locking clause, to end a SELECT with, that keeps the rows it
	// reads of the table aliased alias from being deleted, or their key changed,
	// until the transaction ends: the lock a foreign key's check takes on the row it
	// references, which clean-up's FOR UPDATE waits for and no other reader or
	// referrer does.
	KeyShare(alias string) string
}

// BulkWrites is a Driver whose one statement writes any number of rows, given as
// lists of strings bound one argument each (StringList), to several tables: a WITH
// clause may insert (PostgreSQL). One round trip and one statement text then write
// them, whatever their number. A database whose Driver lacks it takes multi-row
// inserts, a statement a table, and has no round trip to save.
type BulkWrites interface {
	// Unnest is a table expression of the n lists bound at its n ?, side by side:
	// its i-th row holds the i-th string of each.
	Unnest(n int) string
}

// Of is db's Driver, or an error matching refset.ErrInvalidConfig when db is nil or
// has none.
func Of(db Database) (Driver, error) {
	if db != nil {
		if d := db.Driver(); d != nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("refset: %w: %T is not a database opened by store.Open, or the Open or New of store/sqlite or store/postgres", sentinel.ErrInvalidConfig, db)
}

// Observer is told what refset did, for metrics (refset.Observer is this type; its
// doc is the user's). Its methods run on the caller's goroutine, inside no
// transaction, and must return quickly.
type Observer interface {
	// Added is n objects stored by a committed Add or AddAll, or by their Tx forms
	// when the call returned nil (the caller's transaction may still roll back).
	Added(ctx context.Context, n int)
	// HandedOver is every Complete and CompleteTx that ran its commands, with how
	// long they took and their result. One refused before running anything (a
	// consumed or invalid token) is not a hand-over and is not told.
	HandedOver(ctx context.Context, took time.Duration, err error)
	// Retried is each run of a unit of work that InTx (or RetryConflicts) runs
	// again: because the database aborted it (cause matches ErrConflict), or, with
	// store.Options.RetryUnavailable, because the database went away before it
	// committed (cause matches ErrUnavailable).
	Retried(ctx context.Context, cause error)
	// Conflicted is a conflict that outlasted the retries: the caller gets err.
	Conflicted(ctx context.Context, err error)
	// Collected is what a clean-up Collect committed: objects deleted, expired holds
	// removed, the batch transactions it ran, and how long it took. It is told of
	// every Collect that returned nil, and of one that returned an error (its context
	// ended, a later batch failed) after some of its batches committed, with theirs:
	// the totals it is told add up to what clean-up deleted (SetStatus.Collected).
	// A Collect that committed nothing and failed is not told.
	Collected(ctx context.Context, deleted, holdsExpired int64, batches int, took time.Duration)
	// ReadFellBack is a read outside a transaction that went to the database's replica
	// (a hot standby, postgres.Options.Replica) and was then made on the primary.
	// read names it ("get", "has", "branch", "report"); reason says why: "missing"
	// (the replica had no such row: not replicated yet, or not stored at all),
	// "behind" (a report's replica had not replayed what the primary committed before
	// the report began, within Options.ReplicaWait), or "failed" (the replica returned
	// an error).
	ReadFellBack(ctx context.Context, read, reason string)
}

// NoObserver is an Observer that does nothing (refset.NoObserver is this type).
type NoObserver struct{}

func (NoObserver) Added(context.Context, int)                                  {}
func (NoObserver) HandedOver(context.Context, time.Duration, error)            {}
func (NoObserver) Retried(context.Context, error)                              {}
func (NoObserver) Conflicted(context.Context, error)                           {}
func (NoObserver) Collected(context.Context, int64, int64, int, time.Duration) {}
func (NoObserver) ReadFellBack(context.Context, string, string)                {}

// Binding is what ties a dialect to one database, the same for every store: the
// pool and the options that change what the Driver does. A store's driver embeds it
// beside its dialect.
type Binding struct {
	pool     *sql.DB
	settings Settings
	prepared *Prepared
}

// Settings are the options of a database that every store has.
type Settings struct {
	Unprepared, ExternalMigrations bool
	Logger                         *slog.Logger // nil: none
	SlowStatement                  time.Duration
	Observer                       Observer // nil: none
	RetryUnavailable               time.Duration
}

// Bind returns the Binding of a database whose write transactions and prepared
// statements are on pool.
func Bind(pool *sql.DB, s Settings) Binding {
	s.Logger = dblog.Or(s.Logger)
	if s.Observer == nil {
		s.Observer = NoObserver{}
	}
	return Binding{pool: pool, settings: s, prepared: &Prepared{}}
}

// Prepared is the database's register of what stores prepared on its pools, which
// its Close closes (see PreparedOf).
func (b Binding) Prepared() *Prepared { return b.prepared }

func (b Binding) Pool() *sql.DB                { return b.pool }
func (b Binding) Unprepared() bool             { return b.settings.Unprepared }
func (b Binding) ExternalMigrations() bool     { return b.settings.ExternalMigrations }
func (b Binding) Logger() *slog.Logger         { return b.settings.Logger }
func (b Binding) SlowStatement() time.Duration { return b.settings.SlowStatement }
func (b Binding) Observer() Observer           { return b.settings.Observer }
func (b Binding) RetryUnavailable() time.Duration {
	return max(b.settings.RetryUnavailable, 0)
}

// Prepared is what stores prepared on a database's pools (a set's statements), closed
// when the database is: on pools the caller owns, which stay open after Close, it
// would stay prepared otherwise, on the server and in the pool. A nil *Prepared keeps
// nothing. It is safe for concurrent use.
type Prepared struct {
	mu      sync.Mutex
	closed  bool
	closers []func() error
}

// PreparedOf is d's register of prepared statements (a Driver that embeds a Binding
// has one), or nil.
func PreparedOf(d Driver) *Prepared {
	if p, ok := d.(interface{ Prepared() *Prepared }); ok {
		return p.Prepared()
	}
	return nil
}

// Add has Close run closer, or runs it now when the database is closed already (a
// store prepared its statements as the database closed), returning its error.
func (p *Prepared) Add(closer func() error) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if !p.closed {
		p.closers = append(p.closers, closer)
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	return closer()
}

// Close runs every closer Add registered, once; a closer added after runs at once.
func (p *Prepared) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	closers := p.closers
	p.closers, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, c := range closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}
