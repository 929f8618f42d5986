package refset

import (
	"context"
	"time"

	"github.com/refsetdb/refset/refsetdriver"
)

// Querier runs SQL. *sql.DB, *sql.Tx, *sql.Conn and their sqlx counterparts are all
// Queriers, so commands and the *Tx methods accept whichever the caller has.
type Querier = refsetdriver.Querier

// Tx is a database transaction as the code that runs inside it sees it: it runs
// statements and cannot end the transaction. Commands, and functions given to InTx,
// get a Tx from refset: it has no Commit or Rollback, it refuses statements that would
// end or begin a transaction (COMMIT, ROLLBACK, END, BEGIN, ... fail with
// ErrInvalidCommand, and the unit of work then rolls back whatever the code did with
// that error), and it translates driver errors to the sentinels. Only refset ends a
// transaction it began.
//
// It writes the database's placeholders, as Exec does: write ? in ExecContext,
// QueryContext and QueryRowContext and the statement runs on PostgreSQL ($1, $2, ...)
// as on SQLite. A ? in a string literal, a quoted name or a comment stays, and so does
// every ? of a statement that has no arguments, or numbers its parameters already
// ($1), or passes one of pgx's options (pgx.NamedArgs, ...) first: there the ? is
// PostgreSQL's jsonb operator (?, ?| and ?&), and a statement that uses one with
// arguments writes $1, $2, ... for them. A statement that ran before runs unchanged.
// Statements of one's own on a pool (db.Reader(), the stores' pools) are sent as they
// are: write the database's placeholders there, or have db.Driver().Rebind(query)
// write them.
//
// The *Tx methods (AddTx, UpgradeTx, CompleteTx, ...) take the caller's own
// transaction as a Tx too: a *sql.Tx or *sqlx.Tx, or the Tx that InTx gave. A
// connection pool (*sql.DB, *sqlx.DB, *sql.Conn) is not a transaction and is refused
// with ErrInvalidTx.
type Tx = refsetdriver.Tx

// Database is the database a set lives in: open one by DSN with store.Open (either
// store), or with store/sqlite or store/postgres. Several sets may share it, and a
// unit of work (InTx) may span all of them. Close closes it; its other methods are
// for refset's own packages and store implementers (package refsetdriver); do not
// implement it.
type Database = refsetdriver.Database

// SetStore persists the objects of one set. Every method runs on the Querier it is
// given, which is a transaction or the database's reader, so the caller decides what
// commits together. Errors are translated to the refset sentinels. Package store's
// NewStore returns one; implement it only for a store of your own, and expect
// methods to be added.
type SetStore[T Identifiable[ID], ID comparable] interface {
	// Persist inserts obj, or fails with ErrDuplicate if its ID is stored.
	Persist(ctx context.Context, q Querier, obj T) error

	// PersistAll inserts objs in as few statements as it can, or fails with
	// ErrDuplicate if any ID is stored (or repeated); q should be a transaction, so
	// that a failure leaves none of them.
	PersistAll(ctx context.Context, q Querier, objs []T) error

	// Get loads the object with that ID, or fails with ErrNotFound.
	Get(ctx context.Context, q Querier, id ID) (T, error)

	// Has reports whether an object with that ID is stored.
	Has(ctx context.Context, q Querier, id ID) (bool, error)

	// Hold records that holder references the object, in the set's holds table, with
	// an expiry ttl ahead by the database's clock (none when ttl is 0). Holding again
	// replaces the expiry. ErrNotFound if the object does not exist.
	Hold(ctx context.Context, q Querier, id ID, holder string, ttl time.Duration) error

	// Unhold removes holder's hold on the object; ErrNotFound if it had none.
	Unhold(ctx context.Context, q Querier, id ID, holder string) error

	// Database is the database the set lives in.
	Database() Database
}
