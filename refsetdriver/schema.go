package refsetdriver

import (
	"context"
	"io/fs"
	"reflect"
	"time"

	"github.com/refsetdb/refset/sqlident"
)

// SchemaSQL is a dialect's own part of refset's schema, which package schema runs:
// the migration files, their lock, and every statement on refset's own tables (the
// record of versions, refset_schema_version; the registry of sets, refset_sets; the
// sets' holds tables) but clean-up's count of objects collected (refset_collected,
// CleanupDialect.AddCollected). store/sqlite and store/postgres implement it, each
// statement written once for both in store/internal/refsettables.
type SchemaSQL interface {
	// Name names the dialect, for messages.
	Name() string
	// Migrations holds core/NNNN_name.sql, refset's own tables, and
	// set/NNNN_name.sql, the templates of each set's holds table and review queue.
	Migrations() fs.FS
	// LockMigrations serialises schema changes of the database across processes
	// until tx ends.
	LockMigrations(ctx context.Context, tx Tx) error
	// TableExists looks table up as the statements that use it will (on Postgres an
	// unqualified name through search_path).
	TableExists(ctx context.Context, q Querier, table sqlident.Ident) (bool, error)
	// SameTable reports whether a and b may name one table: as the dialect compares
	// names (SQLite without regard to case), and by their names alone when one of
	// them leaves the schema to the search path.
	SameTable(a, b sqlident.Ident) bool
	// IndexName is the name of the index label of a set's table (its holds table's
	// "holder" index, its review queue's "due"): table + "_" + label where the dialect
	// keeps that whole, otherwise one that it does, apart from every other. legacy is
	// what the dialect made of the long name before (PostgreSQL cut it at 63 bytes),
	// "" where the name is unchanged.
	IndexName(table, label string) (name, legacy string)
	// CheckIDType refuses (refset.ErrSchema) an ID Go type id that cannot hold the
	// values of the set's ID column, named column, of SQL type typ as the dialect's
	// catalog writes it (its Column.KeyType where it has one: a domain's base type, a
	// collation after " COLLATE "); table names the set, for the message.
	CheckIDType(table sqlident.Ident, column, typ string, id reflect.Type) error

	// The record of versions: one version per component ("core", "set:<table>", or
	// the Name of a schema.Component).

	// VersionTable is the statement that creates the record if it is missing. The
	// runner runs it before anything else, and a script for a DBA starts with it.
	VersionTable() string
	// HasVersionTable reports whether the record exists, changing nothing.
	HasVersionTable(ctx context.Context, q Querier) (bool, error)
	// Version is the version recorded for component, 0 if none.
	Version(ctx context.Context, q Querier, component string) (int, error)
	// SetVersion records component at version; at 0 it forgets the component.
	SetVersion(ctx context.Context, tx Tx, component string, version int) error
	// SetVersionScript is SetVersion as a statement with its values written in, for
	// a DBA's script.
	SetVersionScript(component string, version int) string
	// RecordedSets are the components of every set the record holds, in order.
	RecordedSets(ctx context.Context, q Querier) ([]string, error)

	// The registry of sets, where tools (clean-up, the operators' command) find a
	// set's tables from its object table.

	// HasSetTable reports whether the registry exists. It is the table whose absence
	// says refset's core tables are gone (the core migrations must run again).
	HasSetTable(ctx context.Context, q Querier) (bool, error)
	// Register records r, replacing an earlier registration of its table.
	Register(ctx context.Context, tx Tx, r Registered) error
	// RegisterScript is Register as a statement with its values written in, for a
	// DBA's script.
	RegisterScript(r Registered) string
	// Lookup reads the registration of the set on table (written as the set's store
	// was configured), or fails with refset.ErrNotFound if no store was ever built on
	// it.
	Lookup(ctx context.Context, q Querier, table sqlident.Ident) (Registered, error)
	// Unregister removes the registration of the set on table.
	Unregister(ctx context.Context, tx Tx, table sqlident.Ident) error
	// UnregisterScript is Unregister as a statement with its values written in, for
	// a DBA's script.
	UnregisterScript(table sqlident.Ident) string
	// SetTables are the object tables of every registered set, in order, as written
	// in the registry.
	SetTables(ctx context.Context, q Querier) ([]string, error)

	// The holds of a set, for the operators' command. holds is the set's holds table
	// as the registry names it (Lookup).

	// ListHolds reads the database's clock, which expiry follows, and the holds f
	// selects, ordered by object and holder (by expiry with f.Soonest).
	ListHolds(ctx context.Context, q Querier, holds sqlident.Ident, f HoldFilter) (now time.Time, list []Hold, err error)
	// HolderCounts lists the first limit holders of the holds table in order, each with
	// how many holds it has, counted up to most (a holder with more is given as most+1):
	// one descent of the holder index per holder, however many holds there are.
	HolderCounts(ctx context.Context, q Querier, holds sqlident.Ident, limit, most int) ([]HolderCount, error)
	// DeleteExpiredHolds deletes the holds past their expiry by the database's
	// clock, only holder's unless holder is "", and says how many went. Clean-up's
	// triggers queue their objects, as when a collection expires them.
	DeleteExpiredHolds(ctx context.Context, tx Tx, holds sqlident.Ident, holder string) (int64, error)
}

// Registered is a set as its store registered it.
type Registered struct {
	Table    sqlident.Ident
	IDColumn string
	Holds    sqlident.Ident
	Queue    sqlident.Ident
}

// HoldFilter selects holds: past their expiry if Expired, expiring later if
// Expiring (never expiring ones left out), holder's if Holder is not "", and those
// of one object if Object is not nil (its ID, as the set's Arg takes it). Soonest
// orders them by expiry, and Limit (when above 0) keeps the first Limit: with either
// expiry filter, one range of the expiry index, however many holds there are.
type HoldFilter struct {
	Expired  bool
	Expiring bool
	Holder   string
	Object   any
	Soonest  bool
	Limit    int
}

// HolderCount is a holder and how many holds it has (see SchemaSQL.HolderCounts).
type HolderCount struct {
	Holder string
	Holds  int64
}

// Hold is one row of a holds table. ObjectID is the object's ID as text, whatever its
// type; ExpiresAt is zero for a hold kept until unheld; Expired says it is past
// ExpiresAt by the database's clock (the next collection removes it).
type Hold struct {
	Holder    string
	ObjectID  string
	ExpiresAt time.Time
	CreatedAt time.Time
	Expired   bool
}
