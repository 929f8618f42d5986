package cleanupsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// Fragments are the pieces of SQL in which the dialects' reports differ: a store's
// clean-up dialect has them all.
type Fragments interface {
	// Rebind writes the dialect's placeholders into a statement written with ?.
	Rebind(query string) string
	// SchemaSQL finds refset's own tables.
	SchemaSQL() refsetdriver.SchemaSQL
	// Clock is the database's clock as refset's tables keep time.
	Clock() refsetdriver.Clock
	// Reach is a WITH RECURSIVE clause defining reach(id): every object reachable
	// from a root (and, when withQueue, from a queued object) along the edges.
	Reach(p *refsetdriver.Plan, withQueue bool) string
	// Enqueue queues rows, VALUES or a SELECT (with a WHERE clause) of an object's
	// ID and the time to review it, for review.
	Enqueue(p *refsetdriver.Plan, rows string) string
	// Text renders the SQL expression expr as a literal in text, NULL included.
	Text(expr string) string
	// RowAddress is the expression naming a row of any table (Postgres ctid, SQLite
	// rowid), for tables without a primary key.
	RowAddress() string
	// InsertTriggerSQL reads the text of the trigger an earlier Install made for p's
	// new objects (a row of one text column, none when there is no such trigger),
	// with its arguments.
	InsertTriggerSQL(p *refsetdriver.Plan) (query string, args []any)
	// InstalledGraceIn reads the grace period from that text, in any form an Install
	// of this or an older version wrote it (see GraceIn).
	InstalledGraceIn(text string) (time.Duration, bool)
	// Estimator reads from the catalog, on q, how the database estimates a table's
	// rows from its statistics (see Counter).
	Estimator(ctx context.Context, q refset.Querier) (Estimate, error)
}

// Reports are the report methods of refsetdriver.CleanupDialect, written with the
// fragments of F, a store's clean-up dialect (whose zero value they use): the dialect
// embeds Reports[itself].
type Reports[F Fragments] struct{}

func (Reports[F]) fragments() F {
	var f F
	return f
}

// EnqueueUnreachable: see refsetdriver.CleanupDialect. Not a report, but written
// alike with the same fragments. ORDER BY: queue entries are locked in one order.
func (r Reports[F]) EnqueueUnreachable(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan) (int64, error) {
	f := r.fragments()
	return Exec(ctx, tx, f.Reach(p, false)+" "+f.Enqueue(p, fmt.Sprintf(
		`SELECT o."%[1]s", %[3]s FROM %[2]s o WHERE NOT EXISTS (SELECT 1 FROM reach WHERE reach.id = o."%[1]s") ORDER BY 1`,
		p.IDColumn, p.Table.Quoted(), f.Clock().Now)))
}

// InstalledGrace: see refsetdriver.CleanupDialect. Not a report either: it reads
// the insert trigger's text.
func (r Reports[F]) InstalledGrace(ctx context.Context, q refset.Querier, p *refsetdriver.Plan) (time.Duration, bool, error) {
	text, ok, err := r.insertTrigger(ctx, q, p)
	if !ok || err != nil {
		return 0, false, err
	}
	grace, ok := r.fragments().InstalledGraceIn(text)
	return grace, ok, nil
}

// InstalledParts: see refsetdriver.CleanupDialect. The part tables are in the insert
// trigger's text (refsetdriver.PartsComment).
func (r Reports[F]) InstalledParts(ctx context.Context, q refset.Querier, p *refsetdriver.Plan) ([]string, error) {
	text, _, err := r.insertTrigger(ctx, q, p)
	return refsetdriver.PartsIn(text), err
}

// insertTrigger is the text of the trigger an earlier Install made for p's new
// objects; ok is false when there is none.
func (r Reports[F]) insertTrigger(ctx context.Context, q refset.Querier, p *refsetdriver.Plan) (text string, ok bool, err error) {
	query, args := r.fragments().InsertTriggerSQL(p)
	err = q.QueryRowContext(ctx, query, args...).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return text, err == nil, err
}

// Leaked: see refsetdriver.CleanupDialect.
func (r Reports[F]) Leaked(ctx context.Context, q refset.Querier, p *refsetdriver.Plan, samples int) (n int64, ids []string, err error) {
	f := r.fragments()
	id := fmt.Sprintf(`o."%s"`, p.IDColumn)
	ids, err = Rows(ctx, q, f.Reach(p, true)+fmt.Sprintf(`
		SELECT %s, count(*) OVER () FROM %s o
		WHERE NOT EXISTS (SELECT 1 FROM reach WHERE reach.id = %s) LIMIT %d`, f.Text(id), p.Table.Quoted(), id, samples), nil,
		func(rows *sql.Rows, sample *string) error { return rows.Scan(sample, &n) })
	return n, ids, err
}

// Dangling: see refsetdriver.CleanupDialect.
func (r Reports[F]) Dangling(ctx context.Context, q refset.Querier, p *refsetdriver.Plan, ref refsetdriver.Reference) (n int64, sample string, err error) {
	f := r.fragments()
	col := fmt.Sprintf(`r."%s"`, ref.Column)
	var least sql.NullString
	err = q.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*), min(%s) FROM %s r
		WHERE %s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM %s o WHERE o."%s" = %s)`,
		f.Text(col), ref.Table.Quoted(), col, p.Table.Quoted(), p.IDColumn, col)).Scan(&n, &least)
	return n, least.String, err
}

// HasObject: see refsetdriver.CleanupDialect.
func (r Reports[F]) HasObject(ctx context.Context, q refset.Querier, p *refsetdriver.Plan, id any) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, r.fragments().Rebind(fmt.Sprintf(`SELECT 1 FROM %s WHERE "%s" = ?`, p.Table.Quoted(), p.IDColumn)), id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Holders: see refsetdriver.CleanupDialect.
func (r Reports[F]) Holders(ctx context.Context, q refset.Querier, _ *refsetdriver.Plan, ref refsetdriver.Reference, id any, limit int) ([]string, error) {
	f := r.fragments()
	var parts []string
	for _, k := range ref.Key {
		parts = append(parts, fmt.Sprintf(`'%s=' || %s`, k, f.Text(`"`+k+`"`)))
	}
	if len(parts) == 0 {
		parts = []string{`'row=' || ` + f.Text(f.RowAddress())}
	}
	query := fmt.Sprintf(`SELECT %s FROM %s WHERE "%s" = ?`, strings.Join(parts, ` || ', ' || `), ref.Table.Quoted(), ref.Column)
	if limit > 0 {
		query += fmt.Sprintf(` LIMIT %d`, limit)
	}
	return Column[string](ctx, q, f.Rebind(query), id)
}

// Now: see refsetdriver.CleanupDialect.
func (r Reports[F]) Now(ctx context.Context, q refset.Querier) (time.Time, error) {
	ck := r.fragments().Clock()
	dst, now := ck.Scan()
	if err := q.QueryRowContext(ctx, `SELECT `+ck.Now).Scan(dst); err != nil {
		return time.Time{}, err
	}
	return now(), nil
}

// setsTable is where every store registers its set: its absence says no store was
// built on the database.
var setsTable = sqlident.Ident{Name: "refset_sets"}

// Sets: see refsetdriver.CleanupDialect.
func (r Reports[F]) Sets(ctx context.Context, q refset.Querier) ([]string, error) {
	found, err := r.fragments().SchemaSQL().TableExists(ctx, q, setsTable)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: no refset tables (refset_sets) in this database: no store was built on it", refset.ErrNotFound)
	}
	return Column[string](ctx, q, `SELECT table_name FROM refset_sets ORDER BY table_name`)
}

// Versions: see refsetdriver.CleanupDialect.
func (r Reports[F]) Versions(ctx context.Context, q refset.Querier) ([]refsetdriver.Version, error) {
	return Rows(ctx, q, `SELECT component, version FROM refset_schema_version ORDER BY component`, nil,
		func(rows *sql.Rows, v *refsetdriver.Version) error { return rows.Scan(&v.Component, &v.Version) })
}

// Rows is every row query returns, each read into a T by scan.
func Rows[T any](ctx context.Context, q refset.Querier, query string, args []any, scan func(rows *sql.Rows, v *T) error) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var list []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			rows.Close()
			return nil, err
		}
		list = append(list, v)
	}
	return list, errors.Join(rows.Err(), rows.Close())
}

// Exec runs query on tx and returns the number of rows it affected.
func Exec(ctx context.Context, tx refset.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// OneByOne deletes the objects of ids one at a time with del, once the database
// refused to delete them together (ErrReferenced: a foreign key Install did not find,
// added since), and returns those del refused: one object with an unknown holder must
// not keep the rest of the batch, and the queue behind it, from being collected.
func OneByOne[ID any](ids []ID, del func(id ID) (int64, error)) (deleted int64, refused []ID, err error) {
	for _, id := range ids {
		n, err := del(id)
		switch {
		case errors.Is(err, refset.ErrReferenced):
			refused = append(refused, id)
		case err != nil:
			return deleted, refused, err
		}
		deleted += n
	}
	return deleted, refused, nil
}

// Args are a statement's arguments: first, then after unless it is nil (a first page
// has no lower bound).
func Args(first, after any) []any {
	if after == nil {
		return []any{first}
	}
	return []any{first, after}
}

// Column is the one column of every row query returns.
func Column[T any](ctx context.Context, q refset.Querier, query string, args ...any) ([]T, error) {
	return Rows(ctx, q, query, args, func(rows *sql.Rows, v *T) error { return rows.Scan(v) })
}

// CheckReference sets r.Table to the referencing table a catalog named table
// (schema-qualified if qualified), and checks that it, r.Column and r.Key are names
// refset can write into its SQL.
func CheckReference(r *refsetdriver.Reference, table string, qualified bool) error {
	var err error
	if r.Table, err = sqlident.Parse(table, qualified); err != nil {
		return fmt.Errorf("referencing table %s: %w", table, err)
	}
	if _, err := sqlident.Parse(r.Column, false); err != nil {
		return fmt.Errorf("referencing column %s.%s: %w", table, r.Column, err)
	}
	for _, k := range r.Key {
		if _, err := sqlident.Parse(k, false); err != nil {
			return fmt.Errorf("key column %s.%s: %w", table, k, err)
		}
	}
	return nil
}

// Unreferenced is the condition that no reference of the plan points at the object
// of the table aliased o.
func Unreferenced(p *refsetdriver.Plan, o string) string {
	var conds []string
	for _, r := range p.References {
		conds = append(conds, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s r WHERE r."%s" = %s."%s")`,
			r.Table.Quoted(), r.Column, o, p.IDColumn))
	}
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// Seeds are where a reach query (Fragments.Reach) starts: the objects the roots
// reference and, when withQueue, the queued ones, as one SELECT of their IDs.
func Seeds(p *refsetdriver.Plan, withQueue bool) string {
	var seeds []string
	for _, r := range p.Roots() {
		seeds = append(seeds, fmt.Sprintf(`SELECT "%s" FROM %s WHERE "%s" IS NOT NULL`, r.Column, r.Table.Quoted(), r.Column))
	}
	if withQueue {
		seeds = append(seeds, fmt.Sprintf(`SELECT object_id FROM %s`, p.Queue.Quoted()))
	}
	if len(seeds) == 0 {
		seeds = append(seeds, fmt.Sprintf(`SELECT "%s" FROM %s WHERE false`, p.IDColumn, p.Table.Quoted()))
	}
	return strings.Join(seeds, " UNION ")
}

// GraceIn reads the grace period that an insert trigger's text, written with
// GraceExpr(before, after, ...), applies: the first whole number of milliseconds
// between before and after.
func GraceIn(text, before, after string) (time.Duration, bool) {
	for rest := text; ; {
		_, tail, ok := strings.Cut(rest, before)
		if !ok {
			return 0, false
		}
		rest = tail
		end := strings.IndexFunc(tail, func(r rune) bool { return r < '0' || r > '9' })
		if end <= 0 || !strings.HasPrefix(tail[end:], after) {
			continue
		}
		ms, err := strconv.ParseInt(tail[:end], 10, 64)
		if err != nil {
			continue
		}
		return time.Duration(ms) * time.Millisecond, true
	}
}

// GraceExpr writes grace, in whole milliseconds, between before and after, as
// GraceIn reads it.
func GraceExpr(before, after string, grace time.Duration) string {
	return before + strconv.FormatInt(grace.Milliseconds(), 10) + after
}
