// Package driver is the one value per SQL dialect that the code above the stores asks
// for what differs between databases, as river's riverdriver is for river: a store
// package's database carries its Driver, and blockmanager, custody and the stores'
// own constructors build sets and collectors through it, so none of them switches on
// a concrete database type (and a Postgres-only program never links SQLite's C code).
//
// A database carries its Driver in an embedded Handle. Handle's one method is
// unexported, so Of finds the Driver of any store's database while a caller, outside
// this module, can neither reach it nor fake it.
package refsetdriver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
)

// Driver is one dialect bound to one database: the statements and catalog reads of
// its stores (sqlstore.Dialect), the SQL of clean-up (cleanup.Dialect), and where its
// statements are prepared.
type Driver interface {
	sqlstore.Dialect
	cleanup.Dialect

	// Pool is the pool the database begins its write transactions on, where a store
	// prepares its writing statements.
	Pool() *sql.DB

	// Unprepared reports that statements must run unprepared (a connection pooler
	// that keeps no prepared statements).
	Unprepared() bool

	// Name names the dialect ("sqlite", "postgres"): the folder a component keeps
	// its per-dialect SQL files in (blockmanager/sql/<name>). Code asks the driver
	// for what differs; it never compares this name.
	Name() string

	// Rebind rewrites a query's ? placeholders to the dialect's, leaving any ? in a
	// literal, a quoted name or a comment as it is.
	Rebind(query string) string

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

// Binding is what ties a dialect to one database, the same for every store: the
// pool and the options that change what the Driver does. A store's driver embeds it
// beside its dialect.
type Binding struct {
	pool       *sql.DB
	unprepared bool
	external   bool
}

// Bind returns the Binding of a database whose write transactions and prepared
// statements are on pool.
func Bind(pool *sql.DB, unprepared, externalMigrations bool) Binding {
	return Binding{pool: pool, unprepared: unprepared, external: externalMigrations}
}

// Pool is the pool the database begins its write transactions on.
func (b Binding) Pool() *sql.DB { return b.pool }

// Unprepared reports that statements run unprepared.
func (b Binding) Unprepared() bool { return b.unprepared }

// ExternalMigrations reports that stores run no DDL and check the schema instead.
func (b Binding) ExternalMigrations() bool { return b.external }

// Handle carries a database's Driver. A store's database embeds it through an
// unexported alias, so the field stays out of the database's API.
type Handle struct{ d Driver }

// NewHandle returns the Handle of d.
func NewHandle(d Driver) Handle { return Handle{d: d} }

func (h Handle) refsetDriver() Driver { return h.d }

// carrier is a database that embeds a Handle.
type carrier interface{ refsetDriver() Driver }

// Of is the Driver of db, or refset.ErrInvalidConfig when db is not a database of
// one of refset's stores.
func Of(db refset.Database) (Driver, error) {
	if c, ok := db.(carrier); ok && c.refsetDriver() != nil {
		return c.refsetDriver(), nil
	}
	return nil, fmt.Errorf("refset: %w: %T is not a database opened by store/sqlite or store/postgres", refset.ErrInvalidConfig, db)
}

// NewStore is the store of a set of T in db, through db's Driver: what
// sqlite.NewStore and postgres.NewStore return, for code that takes any store's
// database.
func NewStore[T refset.Identifiable[ID], ID comparable](ctx context.Context, db refset.Database, cfg sqlstore.Config) (*sqlstore.Store[T, ID], error) {
	d, err := Of(db)
	if err != nil {
		return nil, err
	}
	s, err := sqlstore.Open[T, ID](ctx, db, d, cfg)
	if err != nil {
		return nil, err
	}
	if !d.Unprepared() {
		if err := s.Prepare(ctx, d.Pool()); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewCollector installs clean-up of cfg's set in db, through db's Driver.
func NewCollector(ctx context.Context, db refset.Database, cfg cleanup.Config) (*cleanup.Collector, error) {
	d, err := Of(db)
	if err != nil {
		return nil, err
	}
	return cleanup.Install(ctx, db, d, cfg)
}
