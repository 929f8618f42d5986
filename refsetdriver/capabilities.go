package refsetdriver

import (
	"cmp"
	"context"
	"database/sql"
	"errors"

	"github.com/refsetdb/refset/internal/sentinel"
)

// Pipeliner is a Driver that runs a unit of work made only of statements (the
// hand-over of refset.Exec commands, or an Add with them) in fewer round trips than
// one per statement: it sends BEGIN with the first statements, and COMMIT with the
// last (pgx's batch).
//
// refset decides what runs (the statements, how each result is checked, how errors
// are translated, retries); the Pipeliner only moves the statements and their
// results.
type Pipeliner interface {
	// RunPipeline runs stmts in one new transaction and commits it, unless result
	// refused an outcome it was told before COMMIT was sent. Statements run in order,
	// and none after a failed one or after a Checked one whose result was refused. A failure to begin or to commit
	// comes back as a *PipelineError, with the driver's error untranslated; a commit
	// whose outcome is unknown (the connection lost once COMMIT was sent) is one to
	// commit.
	RunPipeline(ctx context.Context, stmts []Statement, result ResultFunc) error
}

// SelectivePipeliner is a Pipeliner that runs only some lists of statements in fewer
// round trips (lib/pq's, which writes their arguments into one simple query and so
// takes only arguments it can write): refset asks Pipelines first, and a list it
// refuses runs as any unit of work does.
type SelectivePipeliner interface {
	Pipeliner
	Pipelines(stmts []Statement) bool
}

// Statement is one statement of a pipelined unit of work.
type Statement struct {
	Query string
	Args  []any
	// Checked is set when the statement's result decides whether the unit goes on
	// (a row count to check): no later statement may run before it is seen. The
	// Pipeliner reads its result before sending the next ones, or has the server
	// check it: a statement rewritten to fail, aborting the transaction and so
	// everything after it, when it affects other than Rows rows, whose result is then
	// the count it affected either way (a failure for another count is reported as
	// that count, not as an error).
	Checked bool
	// Rows is the row count a Checked statement must affect.
	Rows int64
}

// ResultFunc is told the outcome of statement i, in order: the rows it affected (-1
// for a statement that is not Checked whose count the Pipeliner did not read), or
// the driver's error. A non-nil return ends the unit: the Pipeliner rolls the
// transaction back and returns that error. Only a Checked statement whose count the
// Pipeliner reads itself is told before the statements after it, and COMMIT, are
// sent: the others may be told once the unit committed (pgx sends a segment's
// statements and its COMMIT in one round trip), so a refusal of theirs must be for a
// failure the statement itself reported, which the server has already rolled back.
type ResultFunc func(i int, rows int64, err error) error

// PipelineError is a failure of a pipelined transaction itself: Query is "BEGIN" or
// "COMMIT".
type PipelineError struct {
	Query string
	Err   error
}

func (e *PipelineError) Error() string { return e.Query + ": " + e.Err.Error() }
func (e *PipelineError) Unwrap() error { return e.Err }

// Inserter is a set's store that can give the statement that inserts an object, so
// that an Add of the object with Exec commands is a unit of statements too: [INSERT,
// the commands...] in one transaction, one round trip on pgx when no result must be
// read before the next statement is sent (see Statement.Checked). An error refuses
// obj before anything is sent, as Persist would (an ID its key would store as another
// value): the Add fails with it.
type Inserter[T any] interface {
	InsertStatement(obj T) (Statement, error)
}

// RowReader is a Driver that reads the one row of a lookup by key (a cache miss, an
// Upgrade's check that the object exists) over its driver's own interface rather
// than through database/sql. On pgx that spares database/sql's statement handle and
// the conversion of every column to a driver.Value and back: the scan writes straight
// into the object's fields.
//
// It is only a faster way to a result database/sql gives too: the store asks the
// RowReader first and, when it declines or fails for any reason but an ended
// context, reads the same row through database/sql, which then succeeds or fails as
// it always did.
type RowReader interface {
	// ReadRow runs query with args on pool, one of the database's pools (its reader
	// or its replica; never a transaction), and calls scan with its first row, if
	// there is one. ran is false when it cannot read on pool (not a pool it knows):
	// nothing was sent. found reports whether a row came; err is the query's, the
	// scan's or the connection's error, untranslated.
	ReadRow(ctx context.Context, pool any, query string, args []any, scan func(Row) error) (ran, found bool, err error)
}

// Row is the row a RowReader found, for the caller's scan.
type Row interface {
	Scan(dest ...any) error
}

// Replicated is a Driver of a database with a hot standby (streaming replication),
// where reads that a lagging copy cannot make wrong go first.
type Replicated interface {
	// Replica is the standby's pool, or nil when the database has none.
	Replica() Querier
	// ReplicaCaughtUp reports whether the replica has replayed everything the
	// primary had committed when it was called, waiting up to the database's
	// ReplicaWait for it.
	ReplicaCaughtUp(ctx context.Context) (bool, error)
}

// ReplicaOf is d's replica, or nil when it has none.
func ReplicaOf(d Driver) Querier {
	if r, ok := d.(Replicated); ok {
		return r.Replica()
	}
	return nil
}

// ReadReplicaFirst runs read, a read outside a transaction, on db's replica when its
// Driver has one (Replicated), and again on db.Reader(), the primary, when the
// replica's answer may be wrong: read failed, or found nothing (ErrNotFound: the
// replica may not have replayed it yet). It then tells the Observer why
// (ReadFellBack, naming the read name: "missing", "failed" or "behind"), unless ctx
// ended, when it returns the replica's answer. A read on the primary that would wait
// for connections units of work on the calling goroutine hold is refused at once
// (PoolReader).
//
// A read that must see what the primary had committed when it began (a report on
// holds and references, which change) sets caughtUp: the replica is read only once
// it has replayed all of it (ReplicaCaughtUp), and its ErrNotFound then stands.
//
// Inside a unit of work on db (ctx carries it: see WithUnit), read runs once, on the
// unit's transaction.
func ReadReplicaFirst[T any](ctx context.Context, db Database, name string, caughtUp bool, read func(q Querier) (T, error)) (T, error) {
	if tx, ok := UnitTx(ctx, db); ok {
		leave, _, err := EnterUnit(ctx, db, name)
		if err != nil {
			var zero T
			return zero, err
		}
		defer leave()
		return read(tx)
	}
	drv := db.Driver()
	r, ok := drv.(Replicated)
	if !ok || r.Replica() == nil {
		return read(readerOutside(db))
	}
	var v T
	ready, err := true, error(nil)
	if caughtUp {
		ready, err = r.ReplicaCaughtUp(ctx)
	}
	reason := "behind"
	if ready && err == nil {
		v, err = read(r.Replica())
		missing := errors.Is(err, sentinel.ErrNotFound)
		if err == nil || missing && caughtUp {
			return v, err
		}
		if missing {
			reason = "missing"
		}
	}
	if err != nil && reason != "missing" {
		reason = "failed"
	}
	if ctx.Err() != nil {
		return v, cmp.Or(err, ctx.Err())
	}
	drv.Observer().ReadFellBack(ctx, name, reason)
	return read(readerOutside(db))
}

// OwnCommits is a Driver whose database runs a statement that commits on its own
// (outside any transaction: a component's one-statement write, such as custody's
// payments) so that it never runs twice and, when the connection is lost once it
// was sent, tells what became of it rather than leave it unknown.
//
// PostgreSQL's runs the statement on one connection of its pool (database/sql runs
// a statement again on another connection only on the pool itself) and, after such
// a loss, waits on a primary until the statement can no longer commit (its server
// session ended), then asks committed, in a transaction on that primary, whether the
// statement's rows are there.
type OwnCommits interface {
	// QueryOwn runs query with args outside any transaction, on the database's pool,
	// and calls row for each row it returns. It returns the statement's error, or
	// the driver's, untranslated; but when the connection was lost once the
	// statement was sent: nil if committed found the statement's rows (the caller
	// then reads its results there: row saw none, or not all), an error marked
	// NotCommitted (with ErrUnavailable: nothing changed) if it did not, or one with
	// ErrCommitUnknown and ErrUnavailable when no primary answered in time (or
	// committed is nil, or the database cannot tell: behind a pooler).
	QueryOwn(ctx context.Context, query string, args []any, row func(*sql.Rows) error, committed CommittedFunc) error
}

// CommittedFunc tells, in tx, a transaction on the primary that began once the lost
// statement could no longer commit, whether that statement committed: whether its
// rows are there. It may read what the caller needs of them.
type CommittedFunc func(ctx context.Context, tx Tx) (bool, error)
