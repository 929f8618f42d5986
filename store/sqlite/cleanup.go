package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/txview"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
)

// All of this store's clean-up SQL is here. See package cleanup for the design. SQLite
// has one writer at a time, so a collection batch needs no row locks: nothing else
// can reference or delete an object while the batch's write transaction is open.

// cleanupDialect is this store's refsetdriver.CleanupDialect: the SQL in this file
// (triggers of one statement each, batches the one writer needs no locks for), and
// what cleanupsql.Reports writes for both dialects alike from its fragments (Text,
// RowAddress, Reach, Clock, InsertTriggerSQL, InstalledGraceIn, Estimator).
type cleanupDialect struct {
	cleanupsql.Reports[cleanupDialect]
}

// referencesSQL lists the one-column foreign keys to the set's table. A key written
// without a column ("REFERENCES blocks") points at the primary key. A key with ON
// DELETE CASCADE makes its rows part of the object, not holders of it, so it is left
// out.
const referencesSQL = `
SELECT m.name, f."from", f."to"
FROM sqlite_schema m, pragma_foreign_key_list(m.name) f
WHERE m.type = 'table' AND f."table" = ? COLLATE NOCASE
  AND upper(f.on_delete) <> 'CASCADE'
  AND (SELECT count(*) FROM pragma_foreign_key_list(m.name) g WHERE g.id = f.id) = 1
ORDER BY m.name, f."from"`

// unfollowedSQL lists the foreign keys to the set's table (?1) that would refuse an
// object's deletion (ON DELETE NO ACTION or RESTRICT) but do not reference its ID
// column (?2) alone, each described for an error message. A key that names no column
// references the primary key.
const unfollowedSQL = `
SELECT printf('a key on %s (%s) referencing (%s)', m.name, group_concat(f."from", ', '),
              coalesce(nullif(group_concat(coalesce(f."to", ''), ', '), ''), 'its primary key'))
FROM sqlite_schema m, pragma_foreign_key_list(m.name) f
WHERE m.type = 'table' AND f."table" = ?1 COLLATE NOCASE AND upper(f.on_delete) IN ('NO ACTION', 'RESTRICT')
GROUP BY m.name, f.id
HAVING count(*) > 1 OR NOT (coalesce(max(f."to"), '') = '' OR max(f."to") = ?2 COLLATE NOCASE)
ORDER BY m.name, f.id`

const leadingIndexSQL = `
SELECT EXISTS (SELECT 1 FROM pragma_index_list(?1) il, pragma_index_info(il.name) ii
               WHERE ii.seqno = 0 AND ii.name = ?2 COLLATE NOCASE)
    OR EXISTS (SELECT 1 FROM pragma_table_info(?1) t
               WHERE t.name = ?2 COLLATE NOCASE AND t.pk = 1 AND upper(t.type) = 'INTEGER'
                 AND (SELECT count(*) FROM pragma_table_info(?1) WHERE pk > 0) = 1)`

const keyColumnsSQL = `SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk`

// Qualify returns name, without its schema if that is main: SQLite's triggers live in
// the schema of their table and name only tables of it, and refset's stores name the
// tables of main (the only schema they use) unqualified.
func (cleanupDialect) Qualify(_ context.Context, _ refset.Querier, name sqlident.Ident) (sqlident.Ident, error) {
	if strings.EqualFold(name.Schema, "main") {
		name.Schema = ""
	}
	return name, nil
}

func (cleanupDialect) Describe(ctx context.Context, q refset.Querier, table sqlident.Ident, idColumn string) (string, []refsetdriver.Reference, error) {
	cols, err := dialect{}.Columns(ctx, q, table)
	if err != nil {
		return "", nil, err
	}
	id := slices.IndexFunc(cols, func(c refsetdriver.Column) bool { return strings.EqualFold(c.Name, idColumn) })
	if id < 0 {
		return "", nil, fmt.Errorf("table %s has no column %q: %w", table, idColumn, refset.ErrSchema)
	}
	unfollowed, err := cleanupsql.Column[string](ctx, q, unfollowedSQL, table.Name, idColumn)
	if err != nil {
		return "", nil, err
	}
	if len(unfollowed) > 0 {
		return "", nil, refsetdriver.UnfollowedKeys(table, idColumn, unfollowed)
	}
	type fk struct {
		table, from string
		to          sql.NullString
	}
	fks, err := cleanupsql.Rows(ctx, q, referencesSQL, []any{table.Name}, func(rows *sql.Rows, f *fk) error {
		return rows.Scan(&f.table, &f.from, &f.to)
	})
	if err != nil {
		return "", nil, err
	}
	var refs []refsetdriver.Reference
	for _, f := range fks {
		if f.to.Valid && !strings.EqualFold(f.to.String, idColumn) {
			continue
		}
		// The catalog's reads take the names as arguments; CheckReference checks
		// them before any SQL is written with them.
		r := refsetdriver.Reference{Column: f.from, Self: strings.EqualFold(f.table, table.Name)}
		if err := q.QueryRowContext(ctx, leadingIndexSQL, f.table, f.from).Scan(&r.Indexed); err != nil {
			return "", nil, err
		}
		if r.Key, err = cleanupsql.Column[string](ctx, q, keyColumnsSQL, f.table); err != nil {
			return "", nil, err
		}
		if err := cleanupsql.CheckReference(&r, f.table, false); err != nil {
			return "", nil, err
		}
		refs = append(refs, r)
	}
	return cols[id].Type, refs, nil
}

// Enqueue is the upsert every trigger and the sweep use: a second signal for a queued
// object postpones its review to the later time and bumps the version, never drops
// it. A SELECT of rows needs a WHERE clause, or SQLite reads ON CONFLICT as a join's.
func (cleanupDialect) Enqueue(p *refsetdriver.Plan, rows string) string {
	return fmt.Sprintf(`INSERT INTO %s (object_id, review_after) %s
		ON CONFLICT (object_id) DO UPDATE
		SET review_after = max(review_after, excluded.review_after), version = version + 1`, p.Queue.Quoted(), rows)
}

// enqueue queues the object id, due at reviewAfter.
func enqueue(p *refsetdriver.Plan, id, reviewAfter string) string {
	return cleanupDialect{}.Enqueue(p, "VALUES ("+id+", "+reviewAfter+")")
}

// graceBefore comes before the grace period, in milliseconds, in the text of the
// trigger that queues new objects, where InstalledGrace reads it back; graceAfter
// follows it there (the end of enqueue's VALUES).
const (
	graceBefore = nowMillis + " + "
	graceAfter  = ")"
)

// InsertTriggerSQL reads the text of p's insert trigger.
func (cleanupDialect) InsertTriggerSQL(p *refsetdriver.Plan) (string, []any) {
	return `SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = ? AND tbl_name = ? COLLATE NOCASE`,
		[]any{p.Name("new") + "_insert", p.Table.Name}
}

// InstalledGraceIn reads the grace period from the text of the insert trigger, as
// this version writes it or as versions before wrote it (legacyNowMillis).
func (cleanupDialect) InstalledGraceIn(text string) (time.Duration, bool) {
	if grace, ok := cleanupsql.GraceIn(text, graceBefore, graceAfter); ok {
		return grace, true
	}
	return cleanupsql.GraceIn(text, legacyNowMillis+" + ", graceAfter)
}

// EnqueueExisting: see refsetdriver.CleanupDialect. A page is a range of the ID
// column's index; its last ID comes back as SQLite stores it and bounds the next.
func (cleanupDialect) EnqueueExisting(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, after any, limit int) (any, int64, error) {
	from, args := "true", []any{}
	if after != nil {
		from, args = fmt.Sprintf(`"%s" > ?`, p.IDColumn), []any{after}
	}
	var last any
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT max(id) FROM (SELECT "%s" AS id FROM %s WHERE %s ORDER BY 1 LIMIT ?)`,
		p.IDColumn, p.Table.Quoted(), from), append(args, limit)...).Scan(&last); err != nil || last == nil {
		return nil, 0, err
	}
	n, err := cleanupsql.Exec(ctx, tx, fmt.Sprintf(`INSERT INTO %[1]s (object_id, review_after)
		SELECT o."%[2]s", %[3]s FROM %[4]s o WHERE %[5]s AND o."%[2]s" <= ?
		AND NOT EXISTS (SELECT 1 FROM %[1]s q WHERE q.object_id = o."%[2]s")
		ON CONFLICT (object_id) DO NOTHING`, p.Queue.Quoted(), p.IDColumn, cleanupsql.GraceExpr(graceBefore, "", p.Grace),
		p.Table.Quoted(), from), append(args, last)...)
	return last, n, err
}

// partsSQL describes the foreign keys to the set's table (?1) declared ON DELETE
// CASCADE, but the holds table's (?2).
const partsSQL = `
SELECT m.name, printf('a key on %s (%s)', m.name, group_concat(f."from", ', '))
FROM sqlite_schema m, pragma_foreign_key_list(m.name) f
WHERE m.type = 'table' AND f."table" = ?1 COLLATE NOCASE AND upper(f.on_delete) = 'CASCADE'
  AND m.name <> ?2 COLLATE NOCASE
GROUP BY m.name, f.id
ORDER BY m.name, f.id`

func (cleanupDialect) Parts(ctx context.Context, q refset.Querier, table, holds sqlident.Ident) ([]refsetdriver.Part, error) {
	return cleanupsql.Rows(ctx, q, partsSQL, []any{table.Name, holds.Name}, func(rows *sql.Rows, p *refsetdriver.Part) error {
		return rows.Scan(&p.Table.Name, &p.Key)
	})
}

// Install creates a trigger per reference and event, and one on the object table for
// new objects, each replacing the trigger of the same name unless that one is the
// same already: installing again the plan an earlier Install made (each collector
// does as it starts, and again whenever the keys to the set change) changes nothing
// in the schema, so it does not change the schema version that Keys reads, and
// another collector's plan stays current. It drops the triggers of a reference the
// plan no longer has (SQLite moves a table's triggers with it when it is renamed,
// and rewrites them when a column is, so they would queue everything twice, under
// names of what is gone), and sets p.Keys once it is done.
func (cleanupDialect) Install(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan) error {
	type trig struct{ name, create string }
	var triggers []trig
	trigger := func(name, event string, table sqlident.Ident, when, body string) {
		triggers = append(triggers, trig{name, fmt.Sprintf(`CREATE TRIGGER "%s" AFTER %s ON %s FOR EACH ROW WHEN %s BEGIN %s; END`,
			name, event, table.Quoted(), when, body)})
	}
	for _, r := range p.References {
		name := p.Name(r.Table.String(), r.Column)
		old := `OLD."` + r.Column + `"`
		trigger(name+"_delete", "DELETE", r.Table, old+" IS NOT NULL", enqueue(p, old, nowMillis))
		trigger(name+"_update", fmt.Sprintf(`UPDATE OF "%s"`, r.Column), r.Table,
			fmt.Sprintf(`%s IS NOT NULL AND %s IS NOT NEW."%s"`, old, old, r.Column), enqueue(p, old, nowMillis))
	}
	trigger(p.Name("new")+"_insert", "INSERT", p.Table, "true", refsetdriver.PartsComment(p.Parts)+" "+
		enqueue(p, `NEW."`+p.IDColumn+`"`, cleanupsql.GraceExpr(graceBefore, "", p.Grace)))
	type existing struct{ name, text string }
	have, err := cleanupsql.Rows(ctx, tx, installedSQL, []any{`INSERT INTO ` + p.Queue.Quoted() + ` (object_id`},
		func(rows *sql.Rows, e *existing) error { return rows.Scan(&e.name, &e.text) })
	if err != nil {
		return err
	}
	var stmts []string
	for _, e := range have {
		if !slices.ContainsFunc(triggers, func(t trig) bool { return strings.EqualFold(t.name, e.name) }) {
			stmts = append(stmts, fmt.Sprintf(`DROP TRIGGER "%s"`, strings.ReplaceAll(e.name, `"`, `""`)))
		}
	}
	for _, t := range triggers {
		if slices.ContainsFunc(have, func(e existing) bool { return strings.EqualFold(t.name, e.name) && e.text == t.create }) {
			continue
		}
		stmts = append(stmts, fmt.Sprintf(`DROP TRIGGER IF EXISTS "%s"`, t.name), t.create)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	p.Keys, err = cleanupDialect{}.Keys(ctx, tx, p)
	return err
}

// installedSQL lists the triggers, under names of refset's, that queue into the set's
// review queue (?1 starts the upsert Enqueue writes), with their text.
const installedSQL = `
SELECT name, sql FROM sqlite_schema
WHERE type = 'trigger' AND substr(name, 1, 10) = 'refset_rv_' AND instr(sql, ?1) > 0
ORDER BY name`

// Keys is the schema version: SQLite changes it with every change of the schema,
// keys to the set's table included, and a batch holds the write lock for its whole
// transaction, so none can change it while the batch runs. Any other change (an index
// created, another set's triggers installed) makes a collector's next batch that
// deletes objects plan again, which installs nothing when nothing it follows changed.
func (cleanupDialect) Keys(ctx context.Context, q refset.Querier, _ *refsetdriver.Plan) (string, error) {
	var v int64
	err := q.QueryRowContext(ctx, `PRAGMA main.schema_version`).Scan(&v)
	return fmt.Sprint(v), err
}

// checkKeys fails a batch that deleted objects with refsetdriver.ErrStalePlan when
// the schema changed since p was made (a key added, ON DELETE SET NULL perhaps, that
// refused nothing): the batch's transaction rolls back. One read of the schema
// version per batch that deleted anything.
func checkKeys(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, deleted int64) error {
	if deleted == 0 {
		return nil
	}
	keys, err := cleanupDialect{}.Keys(ctx, tx, p)
	if err != nil {
		return err
	}
	if keys != p.Keys {
		return fmt.Errorf("collecting %s: %w", p.Table, refsetdriver.ErrStalePlan)
	}
	return nil
}

func (cleanupDialect) ExpireHolds(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, limit int) (int64, error) {
	return cleanupsql.Exec(ctx, tx, fmt.Sprintf(`DELETE FROM %[1]s WHERE rowid IN (
		SELECT rowid FROM %[1]s WHERE expires_at <= %[2]s LIMIT ?)`, p.Holds.Quoted(), nowMillis), limit)
}

// CollectBatch claims due entries into a temporary table of the writer connection,
// finds what deleting the unreferenced ones among them frees (freedSQL), deletes
// all of it, and dequeues the claimed entries whose version did not move (a deletion
// may have queued a predecessor again) and the entries of the objects it deleted.
// Nothing else can write while the batch holds the database, so what it finds
// unreferenced stays so until it is deleted.
func (cleanupDialect) CollectBatch(ctx context.Context, view refset.Tx, p *refsetdriver.Plan, limit int) (b refsetdriver.Batch, err error) {
	edges := len(p.Edges()) > 0
	setup := []string{`CREATE TEMP TABLE IF NOT EXISTS refset_claim (object_id, version)`, `DELETE FROM temp.refset_claim`}
	if edges {
		setup = append(setup, `CREATE TEMP TABLE IF NOT EXISTS refset_freed (id, depth)`,
			`CREATE INDEX IF NOT EXISTS temp.refset_freed_depth ON refset_freed (depth)`, `DELETE FROM temp.refset_freed`)
	}
	for _, q := range setup {
		if _, err := view.ExecContext(ctx, q); err != nil {
			return b, err
		}
	}
	b.Reviewed, err = cleanupsql.Exec(ctx, view, fmt.Sprintf(`INSERT INTO temp.refset_claim SELECT object_id, version FROM %s
		WHERE review_after <= %s ORDER BY review_after LIMIT ?`, p.Queue.Quoted(), nowMillis), limit)
	if err != nil || b.Reviewed == 0 {
		return b, err
	}
	if edges {
		if _, err := view.ExecContext(ctx, freedSQL(p), limit); err != nil {
			return b, err
		}
	}
	if b.Deleted, b.Refused, err = deleteClaimed(ctx, view, p); err != nil {
		return b, err
	}
	if edges && b.Refused == 0 {
		n, err := deleteFreed(ctx, prepare(view), p)
		b.Deleted += n
		if err != nil {
			return b, err
		}
	}
	if err := checkKeys(ctx, view, p, b.Deleted); err != nil {
		return b, err
	}
	if _, err := view.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE (object_id, version) IN (SELECT object_id, version FROM temp.refset_claim)`,
		p.Queue.Quoted())); err != nil || !edges {
		return b, err
	}
	_, err = view.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %[1]s WHERE object_id IN (SELECT id FROM temp.refset_freed WHERE depth > 0)
		AND NOT EXISTS (SELECT 1 FROM %[2]s o WHERE o."%[3]s" = %[1]s.object_id)`, p.Queue.Quoted(), p.Table.Quoted(), p.IDColumn))
	return b, err
}

// freedSQL fills temp.refset_freed with the claimed objects nothing references (depth
// 0), then, along the edges (a block's predecessor), each object that only an object
// of the level above referenced (depth 1, 2, ...): deleting an abandoned chain frees
// its next block, and that block the one before it, so a chain goes in one batch
// instead of one batch per block. An object is followed only when no root references
// it, no other object does (the fork point of two abandoned branches is left to the
// queue, which reviews it once both are gone), and its queue entry, if any, is not
// waiting for a later time: a new block keeps its grace period. The walk is breadth
// first, and its first ? rows (the batch's bound) are kept: a block is never kept
// without its successor. UNION ends it on a cycle.
//
// Each step reads the next object's columns with a subquery, one recursive SELECT per
// edge, rather than a join: once the tables are analyzed, SQLite would put a Bloom
// filter on a joined object table, built by reading the whole table at every step.
// Every test is an index probe, whatever the statistics say.
func freedSQL(p *refsetdriver.Plan) string {
	edges := p.Edges()
	cols := []string{"id"}
	selectO := []string{fmt.Sprintf(`o."%s"`, p.IDColumn)}
	for i, e := range edges {
		cols = append(cols, fmt.Sprintf("e%d", i))
		selectO = append(selectO, fmt.Sprintf(`o."%s"`, e.Column))
	}
	steps := make([]string, len(edges))
	for i := range edges {
		next := fmt.Sprintf("f.e%d", i)
		selectX := []string{next}
		for _, e := range edges {
			selectX = append(selectX, fmt.Sprintf(`(SELECT x."%s" FROM %s x WHERE x."%s" = %s)`, e.Column, p.Table.Quoted(), p.IDColumn, next))
		}
		conds := []string{next + " IS NOT NULL"}
		for _, r := range p.Roots() {
			conds = append(conds, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s r WHERE r."%s" = %s)`, r.Table.Quoted(), r.Column, next))
		}
		for k, e := range edges {
			// f is the only object that references it through e: counted in the
			// index alone (a test of r's ID would read rows, and SQLite's statistics,
			// which do not count NULLs apart, can make it prefer reading the table).
			conds = append(conds, fmt.Sprintf(`(SELECT count(*) FROM (SELECT 1 FROM %s r WHERE r."%s" = %s LIMIT 2)) = (f.e%d IS %s)`,
				p.Table.Quoted(), e.Column, next, k, next))
		}
		conds = append(conds, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s q WHERE q.object_id = %s AND q.review_after > %s)`,
			p.Queue.Quoted(), next, nowMillis))
		steps[i] = fmt.Sprintf(`SELECT %s, f.depth + 1 FROM freed f WHERE %s`, strings.Join(selectX, ", "), strings.Join(conds, " AND "))
	}
	return fmt.Sprintf(`WITH RECURSIVE freed (%[1]s, depth) AS (
			SELECT %[2]s, 0 FROM %[3]s o WHERE o."%[4]s" IN (SELECT object_id FROM temp.refset_claim) AND %[5]s
			UNION
			%[6]s
			LIMIT ?)
		INSERT INTO temp.refset_freed (id, depth) SELECT id, depth FROM freed`,
		strings.Join(cols, ", "), strings.Join(selectO, ", "), p.Table.Quoted(), p.IDColumn, cleanupsql.Unreferenced(p, "o"),
		strings.Join(steps, "\n\t\t\tUNION\n\t\t\t"))
}

// deleteFreed deletes the objects of temp.refset_freed beyond the claimed ones, a
// level at a time, from the claimed end down: SQLite checks an ON DELETE RESTRICT key
// at each row, so one statement would refuse a block while its successor, later in
// the same statement, still stood. Each level's objects are referenced only by the
// level above, which is gone by then. If the database refuses a level (a key Install
// does not know), the walk stops there: the deletion of the level above queued those
// objects, and the next batch reviews them one by one.
func deleteFreed(ctx context.Context, tx *preparedTx, p *refsetdriver.Plan) (int64, error) {
	defer tx.Close()
	var deepest sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(depth) FROM temp.refset_freed`).Scan(&deepest); err != nil {
		return 0, err
	}
	del := fmt.Sprintf(`DELETE FROM %s WHERE "%s" IN (SELECT id FROM temp.refset_freed WHERE depth = ?)`, p.Table.Quoted(), p.IDColumn)
	var deleted int64
	for depth := int64(1); depth <= deepest.Int64; depth++ {
		n, err := cleanupsql.Exec(ctx, tx, del, depth)
		if errors.Is(err, refset.ErrReferenced) {
			return deleted, nil
		}
		if err != nil {
			return deleted, err
		}
		deleted += n
	}
	return deleted, nil
}

// preparedTx is a batch's transaction whose ExecContext compiles each statement once:
// SQLite compiles a delete from the object table together with every foreign key and
// trigger on it, which costs more than deleting one link of a chain, and a batch
// deletes a chain a link at a time. Everything else, and every statement
// that fails, goes through the view the batch was given, which names the failure with
// refset's errors (and logs it); a failed statement undoes only itself in SQLite, so
// it can run again there.
//
// A compiled statement runs without ctx's cancellation, which go-sqlite3 watches
// with a goroutine of its own per statement, as costly as the statement itself for
// one link. ctx is checked before each: the statements are short, each bounded by the
// batch, so an ended ctx stops the batch at the next one.
type preparedTx struct {
	refset.Tx
	raw   *sqlstore.Tx // the transaction under the view; nil: nothing is prepared
	stmts map[string]*sqlstore.Stmt
}

func prepare(view refset.Tx) *preparedTx {
	raw, _ := txview.Raw(view).(*sqlstore.Tx)
	return &preparedTx{Tx: view, raw: raw, stmts: map[string]*sqlstore.Stmt{}}
}

func (t *preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if stmt := t.stmt(ctx, query); stmt != nil && ctx.Err() == nil {
		if res, err := stmt.ExecContext(context.WithoutCancel(ctx), args...); err == nil {
			return res, nil
		}
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// stmt is query compiled in the transaction, or nil when it cannot be.
func (t *preparedTx) stmt(ctx context.Context, query string) *sqlstore.Stmt {
	if t.raw == nil {
		return nil
	}
	if st, ok := t.stmts[query]; ok {
		return st
	}
	st, err := t.raw.PrepareContext(ctx, query)
	if err != nil {
		st = nil // run through the view, which names the failure
	}
	t.stmts[query] = st
	return st
}

// Close closes the statements compiled so far.
func (t *preparedTx) Close() {
	for _, st := range t.stmts {
		if st != nil {
			_ = st.Close()
		}
	}
}

// deleteClaimed deletes the claimed objects that no known reference points at, in
// one statement. If the database refuses that, it deletes them one by one instead
// (cleanupsql.OneByOne): an object it still refuses is postponed by a grace period
// and unclaimed, so it stays queued. A failed statement undoes only itself in
// SQLite; the transaction goes on.
func deleteClaimed(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan) (deleted, refused int64, err error) {
	del := fmt.Sprintf(`DELETE FROM %[1]s WHERE "%[2]s" IN (SELECT object_id FROM temp.refset_claim) AND %[3]s`,
		p.Table.Quoted(), p.IDColumn, cleanupsql.Unreferenced(p, p.Table.Quoted()))
	deleted, err = cleanupsql.Exec(ctx, tx, del)
	if !errors.Is(err, refset.ErrReferenced) {
		return deleted, 0, err
	}
	ids, err := cleanupsql.Column[any](ctx, tx, `SELECT object_id FROM temp.refset_claim`)
	if err != nil {
		return 0, 0, err
	}
	delOne := fmt.Sprintf(`DELETE FROM %[1]s WHERE "%[2]s" = ? AND %[3]s`, p.Table.Quoted(), p.IDColumn, cleanupsql.Unreferenced(p, p.Table.Quoted()))
	deleted, refusedIDs, err := cleanupsql.OneByOne(ids, func(id any) (int64, error) { return cleanupsql.Exec(ctx, tx, delOne, id) })
	refused = int64(len(refusedIDs))
	if err != nil {
		return deleted, refused, err
	}
	postpone := fmt.Sprintf(`UPDATE %s SET review_after = %s + ? WHERE object_id = ?`, p.Queue.Quoted(), nowMillis)
	for _, id := range refusedIDs {
		if _, err := tx.ExecContext(ctx, postpone, p.Grace.Milliseconds(), id); err != nil {
			return deleted, refused, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM temp.refset_claim WHERE object_id = ?`, id); err != nil {
			return deleted, refused, err
		}
	}
	return deleted, refused, nil
}

// Reach is a recursive query of every object reachable from the roots (and, when
// withQueue, from queued objects) along the edges.
func (cleanupDialect) Reach(p *refsetdriver.Plan, withQueue bool) string {
	q := `WITH RECURSIVE reach(id) AS (` + cleanupsql.Seeds(p, withQueue)
	for _, e := range p.Edges() {
		q += fmt.Sprintf(` UNION SELECT o."%s" FROM reach JOIN %s o ON o."%s" = reach.id WHERE o."%s" IS NOT NULL`,
			e.Column, p.Table.Quoted(), p.IDColumn, e.Column)
	}
	return q + `)`
}

// Text renders a value as an SQL literal in text, NULL included, for reports.
func (cleanupDialect) Text(expr string) string { return "quote(" + expr + ")" }

// SchemaError: a table or column the collector's SQL names does not exist.
func (cleanupDialect) SchemaError(err error) bool {
	return errors.Is(translateError(err, ""), refset.ErrSchema)
}

// Estimator: the rows the last ANALYZE counted (sqlite_stat1's first number, the
// rows of the table or of an index of it), when the database was ever analyzed
// (PRAGMA optimize analyzes the tables that need it); none otherwise. Unlike
// PostgreSQL's, nothing scales it to the table's size now.
func (cleanupDialect) Estimator(ctx context.Context, q refset.Querier) (cleanupsql.Estimate, error) {
	analyzed, err := tableExists(ctx, q, sqlident.Ident{Name: "sqlite_stat1"})
	if err != nil || !analyzed {
		return func(sqlident.Ident) (string, []any) { return "NULL", nil }, err
	}
	return func(table sqlident.Ident) (string, []any) {
		return `(SELECT max(CAST(stat AS INTEGER)) FROM sqlite_stat1 WHERE tbl = ? COLLATE NOCASE)`, []any{table.Name}
	}, nil
}
