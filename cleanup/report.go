package cleanup

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// This file is the reports on one set, which change nothing: Check, Why, WhyAll and
// Queue. Their reads are the dialect's (refsetdriver.CleanupDialect's reports); what
// they make of them is here. Queue reads the database's reader; the others read where
// onReplica says.

// onReplica runs report, a read of what changes (holds, references, the queue), on
// the database's replica once the replica shows every write the primary had
// committed when the report began, so a report sees the caller's own writes as it
// would on the primary; on the primary when there is no replica, when the replica
// does not catch up within its wait (postgres.Options.ReplicaWait), or when it
// fails. A report that finds no such object (refset.ErrNotFound) on a replica that
// caught up has its answer.
func onReplica[T any](ctx context.Context, db refset.Database, report func(q refset.Querier) (T, error)) (T, error) {
	return refsetdriver.ReadReplicaFirst(ctx, db, "report", true, report)
}

// Report is what Check found.
type Report struct {
	// Leaked counts objects reachable from no root and no queued object: garbage
	// Collect would never delete. Sweep repairs it.
	Leaked int64
	// Dangling counts reference rows whose object does not exist (possible only
	// where foreign keys were not enforced, such as a SQLite connection opened
	// without them).
	Dangling int64
	// Samples are a few of the offending IDs or rows, as text.
	Samples []string
	// Unindexed are the CREATE INDEX statements of referencing columns without an
	// index: Check answers all the same (reading such a table whole), but Install and
	// Collect refuse until they exist.
	Unindexed []string
	// UndeclaredParts describes the keys to the set declared ON DELETE CASCADE from
	// tables that no Config.Parts names: probably holders declared CASCADE by
	// mistake, whose objects clean-up deletes under them (see Config.Parts).
	UndeclaredParts []string
}

// OK reports a healthy set: nothing leaked or dangling. (Unindexed and
// UndeclaredParts are warnings about the schema, not about the data.)
func (r Report) OK() bool { return r.Leaked == 0 && r.Dangling == 0 }

// Check scans the set and its references, as the catalog has them now (a table that
// references the set counts though it was added after Install). Its cost follows the
// size of the set: it is an audit, not part of collection. It reads the database's replica when it has
// one that shows every write committed before Check began, the primary otherwise
// (see onReplica). Errors: refset.ErrSchema, ErrUnavailable, ErrTimeout, ErrClosed,
// the context's error.
func (c *Collector) Check(ctx context.Context) (_ Report, err error) {
	if err := c.made("check"); err != nil {
		return Report{}, err
	}
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	r, err := onReplica(ctx, c.db, func(q refset.Querier) (Report, error) { return c.check(ctx, q) })
	if err = c.readError(err); err != nil {
		return r, fmt.Errorf("refset/cleanup: check %s: %w", c.current().Table, err)
	}
	return r, nil
}

// Holder is a row that keeps an object alive.
type Holder struct {
	Table  string // the referencing table
	Column string // its referencing column
	Key    string // the row's primary key, as "col=value, ..."
}

func (h Holder) String() string { return fmt.Sprintf("%s.%s (%s)", h.Table, h.Column, h.Key) }

// Why lists the rows that keep the object with that ID alive (up to whyLimit per
// referencing table; WhyAll lists them all), in every table that references the set
// as the catalog has it now, one without an index (Unindexed) or added since Install
// included. None means it is garbage: Collect will
// delete it once it is due. It reads where Check does. ErrNotFound if there is no
// such object; otherwise the errors of Check.
//
// The id must be of a Go type the set's ID column takes, judged by the column's type
// as the catalog has it now, the way store.NewStore judges a set's ID type
// (refsetdriver.SchemaSQL.CheckIDType): a string type for a text key, an integer
// type for an integer key, and so on. Any other is refused with
// refset.ErrInvalidID, naming the type given and what the column takes, before any
// statement carries it: the databases compare loosely (SQLite would compare the int
// 42 with a text key and find nothing, an ErrNotFound that says nothing of the
// object "obj-42"). The rule is NewStore's, with a way out for text:
//   - the width and sign of an integer do not count: an int, int32 or uint64 is
//     taken for a key of int64 IDs, as a float32 for float64 ones; named types are
//     judged by their underlying type (type BlockID string is a string), pointers by
//     what they point to;
//   - a type implementing driver.Valuer, or whose pointer implements sql.Scanner,
//     is taken whatever the column: what it sends is its own affair (a uuid type
//     sends text);
//   - nil, or a nil pointer, is refused: it names no object;
//   - a TextID is taken whatever the key: it is an ID as text, as an operator types
//     one, which Why reads as a value of the key's type (see TextID). Any other
//     string, a plain string too, is judged as its type: a string is no ID of a set
//     of integer IDs ("obj-42", or "42", is refused there), as NewStore refuses such
//     a set.
//
// An id the driver then cannot send as the column's value (a struct, a map; on pgx,
// a value of a type taken that the column's type does not encode) is
// refset.ErrInvalidID too, naming its type, as is a TextID the key's type cannot
// read.
func (c *Collector) Why(ctx context.Context, id any) ([]Holder, error) {
	return c.why(ctx, id, whyLimit)
}

// WhyAll is Why without its limit: every row that keeps the object alive, for an
// operator who must find them all before removing them. Its cost follows the number
// of such rows. It reads where Check does. Errors: those of Why.
func (c *Collector) WhyAll(ctx context.Context, id any) ([]Holder, error) {
	return c.why(ctx, id, 0)
}

// WhyUpTo is Why listing up to perTable rows per referencing table (all of them
// when perTable is 0 or less, as WhyAll), for a page that shows a bounded list: ask
// for one more than it shows, and a table with more rows than it shows says the
// list was cut there. Errors: those of Why.
func (c *Collector) WhyUpTo(ctx context.Context, id any, perTable int) ([]Holder, error) {
	return c.why(ctx, id, max(0, perTable))
}

// Queue reads the set's review queue on the database's reader, as QueueCounts does
// with Status's default cap: depth is its entries, counted exactly up to
// DefaultCountCap and, past it, the database's estimate from its statistics, or
// DefaultCountCap when it has none (the queue has more); overdue is the entries due
// now, which the next Collect reviews, counted exactly whatever the queue's size.
// Overdue that stays above zero between passes says clean-up lags. It reads no more
// of the queue than DefaultCountCap entries and those due: cheap enough for a metrics
// gauge (otelrefset's WatchQueue) on a queue of millions. QueueCounts says which
// depth is exact. Errors: those of QueueCounts.
func (c *Collector) Queue(ctx context.Context) (depth, overdue int64, err error) {
	queued, due, err := c.QueueCounts(ctx, StatusOptions{})
	return queued.N, due.N, err
}

// QueueCounts counts the set's review queue on the database's reader, with the SQL
// Status counts a set's queue with, in one statement (SQLite's reads first whether
// the database has statistics): queued is its entries, exact up to opts' cap and
// the database's estimate past it (see StatusOptions), or every entry with
// opts.Exact, which reads the queue whole; overdue is the entries due now, counted
// exactly over the range of the queue's index whatever the cap. Errors:
// refset.ErrInvalidConfig for a negative Cap; refset.ErrSchema when the queue is
// gone; the read errors of Check.
func (c *Collector) QueueCounts(ctx context.Context, opts StatusOptions) (queued, overdue Count, err error) {
	if err := c.made("queue"); err != nil {
		return Count{}, Count{}, err
	}
	if err := opts.check("queue"); err != nil {
		return Count{}, Count{}, err
	}
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	p, q := c.current(), refsetdriver.ReaderFor(ctx, c.db)
	reg := refsetdriver.Registered{Table: p.Table, IDColumn: p.IDColumn, Holds: p.Holds, Queue: p.Queue}
	counter, err := c.dialect.Counter(ctx, q, []refsetdriver.Registered{reg}, opts.cap(), refsetdriver.QueueCounts)
	var sets []refsetdriver.SetState
	if err == nil {
		_, sets, err = counter.Read(ctx, q)
	}
	if err = c.readError(err); err != nil {
		return Count{}, Count{}, fmt.Errorf("refset/cleanup: queue of %s: %w", p.Table, err)
	}
	return sets[0].Queued, sets[0].Overdue, nil
}

// checkSamples is how many leaked objects Check names.
const checkSamples = 5

// check counts, on q, the objects reachable from no root and no queued object, and
// the reference rows whose object does not exist, with a few samples of each.
func (c *Collector) check(ctx context.Context, q refset.Querier) (Report, error) {
	var r Report
	p, err := c.catalog(ctx, q, &r)
	if err != nil {
		return r, err
	}
	d := c.dialect
	leaked, ids, err := d.Leaked(ctx, q, p, checkSamples)
	if err != nil {
		return r, err
	}
	r.Leaked = leaked
	for _, id := range ids {
		r.Samples = append(r.Samples, "leaked "+id)
	}
	for _, ref := range p.References {
		n, sample, err := d.Dangling(ctx, q, p, ref)
		if err != nil {
			return r, err
		}
		r.Dangling += n
		if sample != "" {
			r.Samples = append(r.Samples, fmt.Sprintf("dangling %s -> %s", ref, sample))
		}
	}
	return r, nil
}

// whyLimit is how many rows per referencing table Why lists.
const whyLimit = 5

// why lists up to limit rows (0: all of them) per referencing table that reference
// id.
func (c *Collector) why(ctx context.Context, id any, limit int) (_ []Holder, err error) {
	if err := c.made("why"); err != nil {
		return nil, err
	}
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	d := c.dialect
	var refused error // judgeID's: an answer, not a failed read to try again on the primary
	hs, err := onReplica(ctx, c.db, func(q refset.Querier) ([]Holder, error) {
		p, err := c.catalog(ctx, q, nil)
		if err != nil {
			return nil, err
		}
		var arg any
		if arg, refused, err = c.judgeID(ctx, q, p, id); refused != nil || err != nil {
			return nil, err
		}
		found, err := d.HasObject(ctx, q, p, arg)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("no object %s in %s: %w", sentinel.ID(arg), p.Table, refset.ErrNotFound)
		}
		var hs []Holder
		for _, r := range p.References {
			keys, err := d.Holders(ctx, q, p, r, arg, limit)
			if err != nil {
				return nil, err
			}
			for _, k := range keys {
				hs = append(hs, Holder{Table: r.Table.String(), Column: r.Column, Key: k})
			}
		}
		return hs, nil
	})
	if err = cmp.Or(refused, c.idError(c.readError(err), id)); err != nil {
		return nil, fmt.Errorf("refset/cleanup: why %s: %w", sentinel.ID(id), err)
	}
	return hs, nil
}

// idError types an error a read with the caller's id as its argument returned and
// that no sentinel matches: the driver could not send id (a Go type it does not
// take, or one the ID column's type does not), before the database saw the
// statement. It is refset.ErrInvalidID, naming id's type; so is the database's
// refusal of a TextID it could not read as the key's type (see dataException).
func (c *Collector) idError(err error, id any) error {
	if text, ok := id.(TextID); ok && dataException(err) {
		return fmt.Errorf("%w: the ID %s, given as text, is not a value of the ID column %s.%s: %w", refset.ErrInvalidID, sentinel.QuotedID(string(text)), c.current().Table, c.current().IDColumn, err)
	}
	if err == nil || refset.IsSentinel(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: an ID of type %T is not a value of the ID column %s.%s: %w", refset.ErrInvalidID, id, c.current().Table, c.current().IDColumn, err)
}

// idKinds are the Go types judgeID tries on a key that refused an ID, to say which it
// takes.
var idKinds = []struct {
	what string
	t    reflect.Type
}{
	{"a string type", reflect.TypeFor[string]()},
	{"an integer type", reflect.TypeFor[int64]()},
	{"a float type", reflect.TypeFor[float64]()},
	{"a bool", reflect.TypeFor[bool]()},
	{"time.Time", reflect.TypeFor[time.Time]()},
	{"a byte array ([32]byte, ...)", reflect.TypeFor[[32]byte]()},
}

// judgeID judges id, an ID a caller gave a report, by the set's ID column as the
// catalog has it on q, as store.NewStore judges a set's ID type (see Why), and
// returns arg, the value the report's statements send for it: refused is
// refset.ErrInvalidID, saying id's type and the types the column takes, when it is
// nil or of a type the column does not take, or a TextID SQLite's column cannot
// read (see TextID); err is a failed read of the catalog.
func (c *Collector) judgeID(ctx context.Context, q refset.Querier, p *refsetdriver.Plan, id any) (arg any, refused, err error) {
	if v := reflect.ValueOf(id); !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: a nil ID (%T) names no object of %s; nothing was sent", refset.ErrInvalidID, id, p.Table), nil
	}
	text, isText := id.(TextID)
	cols, err := c.dialect.Columns(ctx, q, p.Table)
	if err != nil {
		return nil, nil, err
	}
	i := slices.IndexFunc(cols, func(col refsetdriver.Column) bool { return col.Name == p.IDColumn })
	if i < 0 {
		i = slices.IndexFunc(cols, func(col refsetdriver.Column) bool { return strings.EqualFold(col.Name, p.IDColumn) })
	}
	if i < 0 {
		return nil, nil, fmt.Errorf("table %s has no column %q: %w", p.Table, p.IDColumn, refset.ErrSchema)
	}
	typ, schema := cmp.Or(cols[i].KeyType, cols[i].Type), c.dialect.SchemaSQL()
	if isText {
		return c.readText(ctx, q, p, text, cols[i].Type, typ)
	}
	if schema.CheckIDType(p.Table, p.IDColumn, typ, reflect.TypeOf(id)) == nil {
		return refset.Arg(id), nil, nil
	}
	var takes []string
	for _, k := range idKinds {
		if schema.CheckIDType(p.Table, p.IDColumn, typ, k.t) == nil {
			takes = append(takes, k.what)
		}
	}
	takes = append(takes, "a type implementing driver.Valuer")
	return nil, fmt.Errorf("%w: an ID of type %T, where the ID column %q of %s, of SQL type %s, takes %s (or a cleanup.TextID: an ID as text); nothing was sent",
		refset.ErrInvalidID, id, p.IDColumn, p.Table, typ, strings.Join(takes, " or ")), nil
}

// catalog is the collector's plan with the references the catalog has now, read on q,
// for a report: a key added since Install counts, and one without an index too (its
// CREATE INDEX goes to r.Unindexed, with the undeclared cascading keys to
// r.UndeclaredParts, when r is not nil). The collector's own plan is left as it is.
func (c *Collector) catalog(ctx context.Context, q refset.Querier, r *Report) (*refsetdriver.Plan, error) {
	p := c.replan()
	var unindexed *UnindexedError
	if err := describe(ctx, q, c.dialect, p); err != nil && !errors.As(err, &unindexed) {
		return nil, err
	}
	parts, err := c.readParts(ctx, q, p)
	if err != nil || r == nil {
		return p, err
	}
	if unindexed != nil {
		r.Unindexed = unindexed.Indexes
	}
	r.UndeclaredParts = undeclaredParts(p, parts)
	return p, nil
}

// Field is one column of an object's row, as Object reads it.
type Field struct {
	Column string
	Value  string // the value as text: bytes that are not UTF-8 as hex, cut at fieldMax
	Null   bool
}

// fieldMax is how much of a value Object keeps: enough to recognize it.
const fieldMax = 256

// Object reads the row of the object with that ID, its columns in the table's order.
// It reads where Check does. ErrNotFound if there is no such object;
// refset.ErrInvalidID for an id Why refuses; otherwise the errors of Check.
func (c *Collector) Object(ctx context.Context, id any) (_ []Field, err error) {
	if err := c.made("object"); err != nil {
		return nil, err
	}
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	p := c.current()
	var refused error // as in why
	fields, err := onReplica(ctx, c.db, func(q refset.Querier) ([]Field, error) {
		arg, judged, err := c.judgeID(ctx, q, p, id)
		if refused = judged; refused != nil || err != nil {
			return nil, err
		}
		rows, err := q.QueryContext(ctx, c.dialect.Rebind(fmt.Sprintf(`SELECT * FROM %s WHERE "%s" = ?`, p.Table.Quoted(), p.IDColumn)), arg)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("no object %s in %s: %w", sentinel.ID(arg), p.Table, refset.ErrNotFound)
		}
		cols, err := rows.Columns()
		if err != nil {
			return nil, err
		}
		values := make([]any, len(cols))
		dest := make([]any, len(cols))
		for i := range values {
			dest[i] = &values[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		fields := make([]Field, len(cols))
		for i, v := range values {
			fields[i] = Field{Column: cols[i], Value: fieldText(v), Null: v == nil}
		}
		return fields, rows.Err()
	})
	if err = cmp.Or(refused, c.idError(c.readError(err), id)); err != nil {
		return nil, fmt.Errorf("refset/cleanup: object %s: %w", sentinel.ID(id), err)
	}
	return fields, nil
}

// fieldText is a column's value as text, cut at fieldMax bytes.
func fieldText(v any) string {
	var s string
	switch v := v.(type) {
	case nil:
		return ""
	case []byte:
		if utf8.Valid(v) {
			s = string(v)
		} else {
			s = "\\x" + hex.EncodeToString(v[:min(len(v), fieldMax/2)])
		}
	case time.Time:
		s = v.Format(time.RFC3339Nano)
	default:
		s = fmt.Sprint(v)
	}
	if len(s) > fieldMax {
		s = strings.ToValidUTF8(s[:fieldMax], "") + "…"
	}
	return s
}
