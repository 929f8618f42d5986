package refsetdriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/sqlident"
)

// This file is clean-up's side of a dialect: what package cleanup asks a store for
// (CleanupDialect) and the values they pass (Plan, Reference, Batch, Clock). Package
// cleanup holds the algorithm, its schedule and the reports' logic; all of their SQL is
// the stores'.

// CleanupDialect is the SQL of clean-up in one database, written by a store package
// (store/sqlite, store/postgres); package cleanup finds it through the database's
// Driver. Do not implement it outside a store; it grows with clean-up.
type CleanupDialect interface {
	// Clock is how the dialect keeps time in refset's tables.
	Clock() Clock
	// Qualify names the table the session finds under name with its schema, so that
	// SQL written with it means the same table in every session (a Postgres trigger
	// runs with the search path of whoever fires it). A dialect without schemas
	// returns name.
	Qualify(ctx context.Context, q Querier, name sqlident.Ident) (sqlident.Ident, error)
	// Describe reads the ID column's type and every reference to it from the catalog.
	// A key to the table that refuses deletion but does not reference the ID column
	// alone fails it with UnfollowedKeys.
	Describe(ctx context.Context, q Querier, table sqlident.Ident, idColumn string) (idType string, refs []Reference, err error)
	// Parts lists the foreign keys to the set's table declared ON DELETE CASCADE, but
	// for those of its holds table: Describe leaves them out, since their rows are
	// parts of the object and keep nothing alive. Each names its referencing table as
	// Qualify would.
	Parts(ctx context.Context, q Querier, table, holds sqlident.Ident) ([]Part, error)
	// Install creates or replaces the triggers of p, inside tx. The trigger for new
	// objects carries p.Parts (PartsComment), where InstalledParts reads them back.
	// It drops the triggers (and their functions) an earlier Install made for p's set
	// that p no longer has a reference for: those of a referencing table renamed, of
	// a referencing column renamed, of a key dropped. Where making the triggers
	// changes what Keys reads (SQLite's schema version), it sets p.Keys anew, as Keys
	// reads it in tx once they are made.
	Install(ctx context.Context, tx Tx, p *Plan) error
	// Keys reads the fingerprint of the foreign keys to p's table (p.Keys): a string
	// that changes whenever a key to it is added, dropped or changed. package cleanup
	// reads it before Describe, so that a key added between the two makes the plan
	// stale rather than leaves it unseen.
	Keys(ctx context.Context, q Querier, p *Plan) (string, error)
	// InstalledGrace reads the grace period that the trigger an earlier Install made
	// for p's new objects applies (p as describe completed it: its qualified table and
	// registered queue), or false when there is no such trigger.
	InstalledGrace(ctx context.Context, q Querier, p *Plan) (grace time.Duration, ok bool, err error)
	// InstalledParts reads the part tables the last Install declared (Plan.Parts) from
	// the same trigger; none when there is no such trigger.
	InstalledParts(ctx context.Context, q Querier, p *Plan) ([]string, error)
	// EnqueueExisting queues, for review at p.Grace from now, the objects of p whose ID
	// comes after after (nil: from the first) in ID order, up to limit of them, and
	// not queued already. It returns the last ID it passed, as a value to give back
	// as after (nil once there is none), and how many it queued. Install runs it, a
	// transaction per page, on a set whose insert trigger did not exist before it.
	EnqueueExisting(ctx context.Context, tx Tx, p *Plan, after any, limit int) (last any, queued int64, err error)
	// ExpireHolds deletes up to limit expired holds.
	ExpireHolds(ctx context.Context, tx Tx, p *Plan, limit int) (int64, error)
	// CollectBatch reviews up to limit due queue entries. An object the database
	// refuses to delete (a reference Install did not find) must not fail the batch: it
	// is counted in Batch.Refused and postponed by p.Grace. A batch that deleted
	// objects then reads Keys, in tx, after its deletes took their locks (no key to
	// the table can be added while they are held, and one added before is seen): if
	// they are no longer p.Keys, it fails with ErrStalePlan, and its transaction
	// rolls back, since a key the plan does not know (ON DELETE SET NULL or SET
	// DEFAULT) may have let it delete an object that the key's rows referenced.
	CollectBatch(ctx context.Context, tx Tx, p *Plan, limit int) (Batch, error)
	// EnqueueUnreachable queues, due now, every object no root reaches.
	EnqueueUnreachable(ctx context.Context, tx Tx, p *Plan) (int64, error)
	// SchemaError reports whether err says a table or column is missing: the set's
	// schema changed under the collector, and no retry mends that.
	SchemaError(err error) bool

	// Reports: the reads of package cleanup's Check, Why, WhyAll, Status and Queue.
	// They run on q, the database's reader or its replica, outside any transaction,
	// and compare times as ExpireHolds and CollectBatch do, by the database's clock.

	// Leaked counts the objects of p that no root and no queued object reaches
	// (garbage Collect would never delete), with the IDs of up to samples of them, as
	// text.
	Leaked(ctx context.Context, q Querier, p *Plan, samples int) (n int64, ids []string, err error)
	// Dangling counts the rows of r whose reference names no object of p, with the
	// least such reference as text ("" when there is none).
	Dangling(ctx context.Context, q Querier, p *Plan, r Reference) (n int64, sample string, err error)
	// HasObject reports whether p's table has the object id.
	HasObject(ctx context.Context, q Querier, p *Plan, id any) (bool, error)
	// Holders names up to limit (0: all) rows of r that reference the object id, each
	// by its primary key as "col=value, ...", or, in a table without one, by its row
	// address as "row=...".
	Holders(ctx context.Context, q Querier, p *Plan, r Reference, id any, limit int) ([]string, error)
	// Now reads the database's clock, which expiry and review times follow.
	Now(ctx context.Context, q Querier) (time.Time, error)
	// Sets lists the object table of every registered set, as its store registered
	// it, in order; sentinel.ErrNotFound when the database has no refset tables.
	Sets(ctx context.Context, q Querier) ([]string, error)
	// Counter writes the one statement that reads, with the database's clock, the
	// counts of every set of regs (SetState, in their order): all of them, or, as
	// what says, the review queue's alone. Each count of a table stops at cap+1 rows
	// and, past cap, is the database's estimate of the table's rows from its
	// statistics (Count); cap 0 counts every row, which scans. The counter reads as
	// often as it is asked, with what it read of the catalog when made.
	Counter(ctx context.Context, q Querier, regs []Registered, cap int64, what Counted) (SetCounter, error)
	// AddCollected adds n to the count of objects clean-up deleted from p's set
	// (SetState.Collected), in tx, the transaction that deleted them. A plan whose
	// database's refset tables are too old to keep the count (see CountsCollected)
	// adds nothing.
	AddCollected(ctx context.Context, tx Tx, p *Plan, n int64) error
	// CountsCollected reports whether the database's refset tables keep the count of
	// objects collected (their core schema version has it).
	CountsCollected(ctx context.Context, q Querier) (bool, error)
	// Versions lists the schema version of every component refset's records know,
	// in order.
	Versions(ctx context.Context, q Querier) ([]Version, error)
}

// Reference is one FOREIGN KEY that points at the set's ID column.
type Reference struct {
	Table   sqlident.Ident // the referencing table
	Column  string         // the referencing column
	Self    bool           // the object table referencing itself: an edge, not a root
	Indexed bool           // an index leads with Column, so a review need not scan Table
	Key     []string       // the referencing table's primary key columns, for Why
	// NoAction is a key declared ON DELETE NO ACTION (the default), not deferrable.
	// PostgreSQL checks such a key twice for each object Collect deletes (once that
	// no other row now has the deleted key, once that nothing references it), where
	// RESTRICT checks once: Install logs the hint.
	NoAction bool
}

func (r Reference) String() string { return r.Table.String() + "." + r.Column }

// UnfollowedKeys is the error a CleanupDialect's Describe returns for foreign keys to
// the set's table that Install cannot follow and that would refuse an object's
// deletion (ON DELETE NO ACTION or RESTRICT): each key, as the dialect describes it
// (its name, table and columns), would keep objects alive that Collect could never
// account for. It matches sentinel.ErrSchema.
func UnfollowedKeys(table sqlident.Ident, idColumn string, keys []string) error {
	return fmt.Errorf("%w: %s is referenced by %s; clean-up follows foreign keys of one column to the ID column %q "+
		"(keys ON DELETE CASCADE, SET NULL or SET DEFAULT never refuse a delete and are left alone): "+
		"reference %q instead, or declare the key ON DELETE CASCADE if its rows are parts of the object",
		sentinel.ErrSchema, table, strings.Join(keys, " and "), idColumn, idColumn)
}

// ErrStalePlan is CollectBatch's failure when the foreign keys to the set's table are
// not those of the plan any more (Plan.Keys): a key was added, dropped or changed since
// the plan was made. The batch rolls back, and package cleanup makes a new plan. It
// matches no sentinel: package cleanup does not return it as it is.
var ErrStalePlan = errors.New("the foreign keys to the set's table changed since the plan was made")

// Plan is everything a dialect needs to know about a set to collect it.
type Plan struct {
	Table      sqlident.Ident
	IDColumn   string
	IDType     string
	Holds      sqlident.Ident
	Queue      sqlident.Ident
	References []Reference
	Grace      time.Duration
	RetryDelay time.Duration
	// Keys is the fingerprint of the foreign keys to Table when the plan was made, as
	// CleanupDialect.Keys reads it; a batch that finds it changed fails with
	// ErrStalePlan.
	Keys string

	// Parts are the tables whose keys ON DELETE CASCADE the program declared as parts
	// of its objects (cleanup.Config.Parts, and those an earlier Install declared),
	// qualified as Qualify names them. Install writes them into the trigger for new
	// objects, so that tools that only read know them too.
	Parts []string

	// RegisteredQueue is the queue's name as the set's store registered it, before
	// Qualify: Name derives from it, so the names of an earlier Install's triggers
	// and functions stay those of this one.
	RegisteredQueue string
	// RegisteredTable is the set's table as its store registered it (refset_sets'
	// key), and Collected says whether the database keeps the count of objects
	// collected there (CountsCollected), which AddCollected adds to.
	RegisteredTable string
	Collected       bool
}

// Name is the identifier of a trigger or function Install creates for p: derived from
// the queue and parts, so installing again replaces rather than adds, and short
// enough for Postgres whatever the table names.
func (p *Plan) Name(parts ...string) string {
	h := sha256.Sum256([]byte(p.RegisteredQueue + "\x00" + strings.Join(parts, "\x00")))
	return "refset_rv_" + hex.EncodeToString(h[:6])
}

// Roots are the references that keep objects alive by themselves; Edges lead from an
// object to the objects it keeps alive.
func (p *Plan) Roots() []Reference { return p.filter(false) }

// Edges: see Roots.
func (p *Plan) Edges() []Reference { return p.filter(true) }

func (p *Plan) filter(self bool) []Reference {
	var out []Reference
	for _, r := range p.References {
		if r.Self == self {
			out = append(out, r)
		}
	}
	return out
}

// Part is a foreign key to the set's table declared ON DELETE CASCADE: its rows are
// parts of the object, deleted with it.
type Part struct {
	Table sqlident.Ident // the referencing table, qualified as Qualify names it
	Key   string         // the key described for a message: its name, table and columns
}

// Clone is a copy of p that shares nothing with it that can be changed.
func (p *Plan) Clone() *Plan {
	c := *p
	c.References = append([]Reference(nil), p.References...)
	c.Parts = append([]string(nil), p.Parts...)
	return &c
}

// partsMark starts the comment that carries a plan's declared part tables in the text
// of the trigger for new objects.
const partsMark = "/* refset parts: "

// PartsComment is the comment that carries parts, tables written as sqlident.Ident's
// String (names that sqlident accepts hold no comment's end), in a trigger's text.
func PartsComment(parts []string) string {
	return partsMark + strings.Join(parts, ", ") + " */"
}

// PartsIn reads the part tables that PartsComment wrote into text.
func PartsIn(text string) []string {
	_, rest, ok := strings.Cut(text, partsMark)
	if !ok {
		return nil
	}
	list, _, ok := strings.Cut(rest, " */")
	if !ok || strings.TrimSpace(list) == "" {
		return nil
	}
	return strings.Split(list, ", ")
}

// Batch is what one collection transaction did.
type Batch struct {
	Reviewed  int64 // queue entries claimed
	Deleted   int64 // objects deleted
	Postponed int64 // objects another transaction was referencing; reviewed again later
	// Refused counts objects the database would not delete because of a reference
	// Install did not find (a foreign key added since): they are postponed by a grace
	// period, and the rest of the batch is collected all the same. Install again to
	// follow the new key.
	Refused int64
}

// Clock is how a dialect keeps time in refset's tables: the database's clock as the
// tables store it (Now, an SQL expression), and how to read a stored time (Scan
// returns a destination for rows.Scan and the function that reads it after).
type Clock struct {
	Now  string
	Scan func() (dest any, read func() time.Time)
}

// Counted is which of a set's counts a SetCounter reads.
type Counted uint8

const (
	// EveryCount: all of SetState.
	EveryCount Counted = iota
	// QueueCounts: the review queue's alone (Queued, Overdue, OldestDue), for a
	// gauge of the queue; the statement reads no other table, and the other counts
	// are 0.
	QueueCounts
)

// SetState is a set as a SetCounter counts it.
type SetState struct {
	Objects      Count // rows in the object table
	HoldsLive    Count // holds without expiry or expiring later
	HoldsExpired Count // holds past their expiry that Collect has not removed yet
	Queued       Count // entries in the review queue
	Overdue      Count // entries due now: what the next Collect reviews
	// OldestDue is the earliest review time in the queue (zero when it is empty).
	OldestDue time.Time
	// Collected is how many objects clean-up has deleted from the set, by every
	// collector, since the database's refset tables began to count them (core
	// schema version 2: 0 on older ones until migrated). Each batch adds what it
	// deleted in its own transaction, so the count is exact and survives restarts.
	Collected int64
}

// SetCounter reads the counts of a list of sets in one statement (see
// CleanupDialect.Counter).
type SetCounter interface {
	// Read reads the database's clock and the counts of the sets, in their order.
	Read(ctx context.Context, q Querier) (now time.Time, sets []SetState, err error)
}

// Count is a number of rows as a report read it: exact, or, for a table larger than
// the report counts, the database's estimate or a lower bound.
type Count struct {
	N        int64
	Accuracy Accuracy
}

// Accuracy says what a Count's number is.
type Accuracy uint8

const (
	// Exact: N rows.
	Exact Accuracy = iota
	// Estimated: about N rows, the database's estimate from its statistics (those of
	// its last ANALYZE, scaled by PostgreSQL to the table's size now, as its planner
	// does); more than the rows the report counted.
	Estimated
	// MoreThan: more than N rows; the database keeps no statistics to estimate from
	// (a SQLite database never analyzed, a PostgreSQL table never analyzed).
	MoreThan
)

// String is the count as refset status prints it: "1234", "~1234" (an estimate) or
// ">1234" (more than).
func (c Count) String() string {
	switch c.Accuracy {
	case Estimated:
		return fmt.Sprintf("~%d", c.N)
	case MoreThan:
		return fmt.Sprintf(">%d", c.N)
	}
	return fmt.Sprint(c.N)
}

// Exact reports whether c counts every row.
func (c Count) Exact() bool { return c.Accuracy == Exact }

// Minus is c less n rows that were counted exactly: what remains of the table
// without them, as accurate as c (never below 0).
func (c Count) Minus(n int64) Count { return Count{N: max(c.N-n, 0), Accuracy: c.Accuracy} }

func (a Accuracy) String() string {
	switch a {
	case Exact:
		return "exact"
	case Estimated:
		return "estimate"
	case MoreThan:
		return "more than"
	}
	return fmt.Sprintf("Accuracy(%d)", uint8(a))
}

// Version is a component's schema version as refset's records keep it.
type Version struct {
	Component string
	Version   int
}
