package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
)

// All of this store's clean-up SQL is here. See package cleanup for the design.

// cleanupDialect is this store's refsetdriver.CleanupDialect: the SQL in this file
// (PL/pgSQL trigger functions, batches locked FOR UPDATE SKIP LOCKED), and what
// cleanupsql.Reports writes for both dialects alike from its fragments (Text,
// RowAddress, Reach, Clock, InsertTriggerSQL, InstalledGraceIn, Estimator).
type cleanupDialect struct {
	cleanupsql.Reports[cleanupDialect]
}

const idTypeSQL = `
SELECT format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`

// referencesSQL lists the one-column foreign keys to the set's ID column, whether an
// index leads with the referencing column, the referencing table's primary key, and
// whether the key is NO ACTION and not deferrable (its check on a delete first looks
// for another row with the deleted key, a probe RESTRICT does not make; a deferrable
// key cannot be RESTRICT).
// A key with ON DELETE CASCADE makes its rows part of the object, not holders of it,
// so it is left out.
const referencesSQL = `
SELECT n.nspname, r.relname, a.attname, c.conrelid = c.confrelid,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.conrelid AND i.indkey[0] = c.conkey[1]),
       COALESCE((SELECT array_agg(ka.attname::text ORDER BY k.ord)
                 FROM pg_index pk
                 CROSS JOIN LATERAL unnest(pk.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute ka ON ka.attrelid = pk.indrelid AND ka.attnum = k.attnum
                 WHERE pk.indrelid = c.conrelid AND pk.indisprimary), '{}'),
       c.confdeltype = 'a' AND NOT c.condeferrable
FROM pg_constraint c
JOIN pg_class r ON r.oid = c.conrelid
JOIN pg_namespace n ON n.oid = r.relnamespace
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1]
WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) AND cardinality(c.conkey) = 1 AND fa.attname = $2
  AND c.confdeltype <> 'c'
ORDER BY n.nspname, r.relname, a.attname`

// unfollowedSQL lists the foreign keys to the set's table that would refuse an
// object's deletion but do not reference its ID column alone (a key to a UNIQUE
// column, a composite key), each described for an error message.
const unfollowedSQL = `
SELECT format('constraint %I on %s (%s) referencing (%s)', c.conname, c.conrelid::regclass,
       (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum),
       (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) FROM unnest(c.confkey) WITH ORDINALITY k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum))
FROM pg_constraint c
WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) AND c.confdeltype IN ('a', 'r')
  AND NOT (cardinality(c.confkey) = 1 AND c.confkey[1] =
           (SELECT attnum FROM pg_attribute WHERE attrelid = c.confrelid AND attname = $2))
ORDER BY 1`

func (cleanupDialect) Describe(ctx context.Context, q refset.Querier, table sqlident.Ident, idColumn string) (string, []refsetdriver.Reference, error) {
	var idType string
	if err := q.QueryRowContext(ctx, idTypeSQL, table.Quoted(), idColumn).Scan(&idType); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil, fmt.Errorf("table %s has no column %q: %w", table, idColumn, refset.ErrSchema)
		}
		return "", nil, err
	}
	if err := sqlident.CheckType(idType); err != nil {
		return "", nil, err
	}
	unfollowed, err := cleanupsql.Column[string](ctx, q, unfollowedSQL, table.Quoted(), idColumn)
	if err != nil {
		return "", nil, err
	}
	if len(unfollowed) > 0 {
		return "", nil, refsetdriver.UnfollowedKeys(table, idColumn, unfollowed)
	}
	type ref struct {
		refsetdriver.Reference
		nsp, rel string
	}
	found, err := cleanupsql.Rows(ctx, q, referencesSQL, []any{table.Quoted(), idColumn}, func(rows *sql.Rows, r *ref) error {
		return rows.Scan(&r.nsp, &r.rel, &r.Column, &r.Self, &r.Indexed, pq.Array(&r.Key), &r.NoAction)
	})
	if err != nil {
		return "", nil, err
	}
	var refs []refsetdriver.Reference
	for _, r := range found {
		if err := cleanupsql.CheckReference(&r.Reference, r.nsp+"."+r.rel, true); err != nil {
			return "", nil, err
		}
		refs = append(refs, r.Reference)
	}
	return idType, refs, nil
}

// Enqueue is the upsert every trigger and the sweep use: a second signal for a queued
// object postpones its review to the later time and bumps the version, never drops
// it.
func (cleanupDialect) Enqueue(p *refsetdriver.Plan, rows string) string {
	return fmt.Sprintf(`INSERT INTO %s AS q (object_id, review_after)
	%s
	ON CONFLICT (object_id) DO UPDATE
	SET review_after = GREATEST(q.review_after, EXCLUDED.review_after), version = q.version + 1`, p.Queue.Quoted(), rows)
}

// enqueueAny is a trigger's body: it queues what `SELECT cols FROM rows` yields (rows:
// a transition table and the condition of what to queue; ordered, so that statements
// lock queue entries in one order), once a probe of rows has found something to queue.
// Most statements queue nothing (a custody payment deletes the holds of the tokens it
// deletes, and holds the tokens it creates), and the probe, a plain SELECT, is what
// they then cost: the upsert would open the queue and its indexes, and set up its
// conflict handling, for no row (server CPU of a one-statement custody payment 442 µs
// without the probe, 418 µs with it, paired).
//
// No signal is lost between the two snapshots: an object the probe passes over is
// either still referenced by a row of this transaction (a new object, which no other
// transaction can reference yet; a reference an update left in place), which only
// this transaction can change, and a later statement of it fires its own trigger; or
// gone (no object is deleted while a reference to it exists, and one created again
// is queued by its own trigger). When the probe finds something, the upsert reads
// the rows again and queues what it finds, as it did alone.
func enqueueAny(p *refsetdriver.Plan, cols, rows string) string {
	return fmt.Sprintf(`IF EXISTS (SELECT FROM %s) THEN
		%s;
	END IF`, rows, cleanupDialect{}.Enqueue(p, fmt.Sprintf(`SELECT %s FROM %s ORDER BY 1`, cols, rows)))
}

// qualifySQL finds the schema of the table a name resolves to in this session.
const qualifySQL = `
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`

func (cleanupDialect) Qualify(ctx context.Context, q refset.Querier, name sqlident.Ident) (sqlident.Ident, error) {
	if name.Schema != "" {
		return name, nil
	}
	var nsp string
	if err := q.QueryRowContext(ctx, qualifySQL, name.Quoted()).Scan(&nsp); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return name, fmt.Errorf("no table %s on the search path: %w", name, refset.ErrSchema)
		}
		return name, err
	}
	q2, err := sqlident.Parse(nsp+"."+name.Name, true)
	if err != nil {
		return name, fmt.Errorf("schema of %s: %w", name, err)
	}
	return q2, nil
}

// graceBefore and graceAfter surround the grace period, in milliseconds, in the body
// of the trigger function that queues new objects, where InstalledGrace reads it back.
// The grace starts when the trigger runs, after its statement wrote the objects
// (clock_timestamp()), not when the transaction began: a long transaction must not
// eat into the time a holder has to reference what it wrote. Triggers an older
// version installed started it at now(), graceBeforeOld, which InstalledGrace still
// reads; the next Install replaces them.
const (
	graceBefore    = "clock_timestamp() + "
	graceBeforeOld = "now() + "
	graceAfter     = " * interval '1 millisecond'"
)

// triggerSourceSQL reads the body of the function an existing trigger runs.
const triggerSourceSQL = `
SELECT f.prosrc FROM pg_trigger t JOIN pg_proc f ON f.oid = t.tgfoid
WHERE t.tgrelid = to_regclass($1) AND t.tgname = $2`

// InsertTriggerSQL reads the body of the function of p's insert trigger.
func (cleanupDialect) InsertTriggerSQL(p *refsetdriver.Plan) (string, []any) {
	return triggerSourceSQL, []any{p.Table.Quoted(), p.Name("new") + "_insert"}
}

// InstalledGraceIn reads the grace period from the body of the insert trigger's
// function, started at clock_timestamp() or, by an older version, at now().
func (cleanupDialect) InstalledGraceIn(body string) (time.Duration, bool) {
	if grace, ok := cleanupsql.GraceIn(body, graceBefore, graceAfter); ok {
		return grace, true
	}
	return cleanupsql.GraceIn(body, graceBeforeOld, graceAfter)
}

// EnqueueExisting: see refsetdriver.CleanupDialect. A page is a range of the ID
// column's index; its last ID travels as text and is cast back to the ID type, as
// lockedBatch's IDs do, so one code path serves every ID type.
func (cleanupDialect) EnqueueExisting(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, after any, limit int) (any, int64, error) {
	from := "true"
	if after != nil {
		from = fmt.Sprintf(`o."%s" > $2::text::%s`, p.IDColumn, p.IDType)
	}
	// Index probes whatever the statistics say: taken before the queue filled, they
	// would have the planner read the whole queue for every page.
	if _, err := tx.ExecContext(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		return nil, 0, err
	}
	// The page's last ID, by its type's order (not every type has max: bytea, uuid).
	var last sql.NullString
	err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT id::text FROM (SELECT o."%s" AS id FROM %s o WHERE %s ORDER BY 1 LIMIT $1) page
		ORDER BY page.id DESC LIMIT 1`, p.IDColumn, p.Table.Quoted(), from), cleanupsql.Args(limit, after)...).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !last.Valid) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	n, err := cleanupsql.Exec(ctx, tx, fmt.Sprintf(`INSERT INTO %[1]s (object_id, review_after)
		SELECT o."%[2]s", %[3]s FROM %[4]s o WHERE %[5]s AND o."%[2]s" <= $1::text::%[6]s
		AND NOT EXISTS (SELECT 1 FROM %[1]s q WHERE q.object_id = o."%[2]s")
		ORDER BY 1
		ON CONFLICT (object_id) DO NOTHING`, p.Queue.Quoted(), p.IDColumn, cleanupsql.GraceExpr(graceBefore, graceAfter, p.Grace),
		p.Table.Quoted(), from, p.IDType), cleanupsql.Args(last.String, after)...)
	return last.String, n, err
}

// partsSQL describes the foreign keys to the set's table ($1) declared ON DELETE
// CASCADE, but the holds table's ($2).
const partsSQL = `
SELECT n.nspname, r.relname, format('constraint %I on %s (%s)', c.conname, c.conrelid::regclass,
       (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum))
FROM pg_constraint c
JOIN pg_class r ON r.oid = c.conrelid
JOIN pg_namespace n ON n.oid = r.relnamespace
WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) AND c.confdeltype = 'c'
  AND c.conrelid IS DISTINCT FROM to_regclass($2)
ORDER BY 3`

func (cleanupDialect) Parts(ctx context.Context, q refset.Querier, table, holds sqlident.Ident) ([]refsetdriver.Part, error) {
	return cleanupsql.Rows(ctx, q, partsSQL, []any{table.Quoted(), holds.Quoted()}, func(rows *sql.Rows, p *refsetdriver.Part) error {
		return rows.Scan(&p.Table.Schema, &p.Table.Name, &p.Key)
	})
}

// triggerFunctionSQL finds the function an existing trigger runs.
const triggerFunctionSQL = `
SELECT n.nspname, f.proname
FROM pg_trigger t JOIN pg_proc f ON f.oid = t.tgfoid JOIN pg_namespace n ON n.oid = f.pronamespace
WHERE t.tgrelid = to_regclass($1) AND t.tgname = $2`

// Install creates a statement-level trigger per reference (sorted keys, so concurrent
// statements queue objects in one order and do not deadlock) and one on the object
// table for new objects.
//
// The triggers run at the end of the statement, so they see all it did, and they queue
// only what may be garbage then: an object whose reference went but that the same
// statement deleted is gone already, and a new object that the same statement also
// referenced (a token created with its owner's hold) is live; when that reference goes,
// its own trigger queues the object. A statement that moves references, such as a
// custody spend, then costs the queue nothing, and clean-up later reviews nothing for
// it. Each check is an index probe: Install refuses a referencing column that no index
// leads with.
//
// Every table and function the triggers name is schema-qualified (the plan's names
// are, see refsetdriver.CleanupDialect.Qualify): a trigger runs with the search path of the
// session that fires it, and one that named "blocks_review" would fail every write of
// a session whose search path finds no such table (another service, psql, a
// migration tool).
//
// Installing again (every collector process does, as it starts) replaces the bodies
// of the trigger functions, which locks no table, and creates only the triggers that
// are missing. It drops only the triggers of a reference the plan no longer has (a
// referencing table renamed, its column renamed or dropped, its key dropped: see
// dropStale), whose function would otherwise fail every delete from a table whose
// column it names no more; a table without such a trigger is not locked. DROP TRIGGER
// locks its table ACCESS EXCLUSIVE, against every reader too, for the rest of the
// short transaction, as the ALTER TABLE that made the trigger stale did just before;
// a trigger it keeps is never dropped and made again. CREATE TRIGGER takes SHARE ROW
// EXCLUSIVE, which lets reads through.
//
// The trigger for new objects probes the referencing tables (it queues only what no
// reference holds); when a table or column it names has gone since, it queues every
// new object instead of failing the insert (guardedInsert), until the collector
// installs again. An existing trigger keeps the function it runs, wherever
// an earlier Install put it (before names were qualified, the object table's trigger
// function went to the installing session's current schema): its body is what is
// replaced, so an old install is brought up to date in place.
func (cleanupDialect) Install(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan) error {
	type trig struct {
		table             sqlident.Ident
		name, event, with string
		fn                sqlident.Ident // where a new trigger's function goes
		decl, body        string
	}
	var triggers []trig
	trigger := func(name string, table sqlident.Ident, event, transition, body string) {
		triggers = append(triggers, trig{table: table, name: name + "_" + strings.ToLower(event), event: event,
			with: transition, fn: sqlident.Ident{Schema: table.Schema, Name: name}, body: body})
	}
	// exists: the object that column col of the old reference row o pointed at is
	// still there. Written as a scalar subquery, which the planner runs as an index
	// probe per row, never as a join: a trigger's plan is kept for the session, made
	// for whatever number of rows its first statement changed, and a hash join that
	// suited a bulk delete would read the whole object table for every one-row delete
	// after it.
	exists := func(col string) string {
		return fmt.Sprintf(`(SELECT true FROM %s x WHERE x."%s" = o.%s) IS NOT NULL`, p.Table.Quoted(), p.IDColumn, col)
	}
	for _, r := range p.References {
		name := p.Name(r.Table.String(), r.Column)
		col := `"` + r.Column + `"`
		old := fmt.Sprintf(`DISTINCT o.%s, now()`, col) // the objects old rows referenced, due now
		trigger(name+"d", r.Table, "DELETE", "OLD TABLE AS old_rows", enqueueAny(p, old,
			fmt.Sprintf(`old_rows o WHERE o.%[1]s IS NOT NULL AND %[2]s`, col, exists(col))))
		// An update queues the old object only where the reference changed; without a
		// primary key to pair old and new rows, every old object is queued.
		changed := "true"
		if len(r.Key) > 0 {
			var on []string
			for _, k := range r.Key {
				on = append(on, fmt.Sprintf(`n."%s" = o."%s"`, k, k))
			}
			changed = fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM new_rows n WHERE %s AND n.%s IS NOT DISTINCT FROM o.%s)`,
				strings.Join(on, " AND "), col, col)
		}
		trigger(name+"u", r.Table, "UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows", enqueueAny(p, old,
			fmt.Sprintf(`old_rows o WHERE o.%[1]s IS NOT NULL AND %[2]s AND %[3]s`, col, changed, exists(col))))
	}
	newCols := fmt.Sprintf(`n."%s", %s`, p.IDColumn, cleanupsql.GraceExpr(graceBefore, graceAfter, p.Grace))
	if len(p.References) == 0 {
		trigger(p.Name("new"), p.Table, "INSERT", "NEW TABLE AS new_rows", refsetdriver.PartsComment(p.Parts)+"\n\t"+
			enqueueAny(p, newCols, `new_rows n WHERE true`))
	} else {
		trigger(p.Name("new"), p.Table, "INSERT", "NEW TABLE AS new_rows", refsetdriver.PartsComment(p.Parts)+"\n\t"+
			guardedInsert(p, newCols))
		triggers[len(triggers)-1].decl = "DECLARE\n\tprobed boolean;\n"
	}
	wanted := map[[3]string]bool{}
	for _, t := range triggers {
		wanted[[3]string{t.table.Schema, t.table.Name, t.name}] = true
	}
	if err := dropStale(ctx, tx, p, wanted); err != nil {
		return err
	}
	for _, t := range triggers {
		fn, exists, err := triggerFunction(ctx, tx, t.table, t.name)
		if err != nil {
			return err
		}
		if !exists {
			fn = t.fn
		}
		// A trigger function's plans are made at its first call in a session and kept:
		// made while a table was empty they would scan it, and go on scanning it for
		// every statement once it holds millions of rows. With sequential scans off, the
		// plans look objects and references up through their indexes (Install refuses
		// a reference without one), at a cost that follows the rows changed.
		//
		// JIT is off for the same reason: a plan made for a bulk statement (100,000
		// rows in its transition table) costs more than jit_above_cost, and the
		// session's every later one-row statement would then JIT-compile it again,
		// milliseconds per call for a few index probes (TestHotPathPlansOnLargeData).
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off AS $refset$
%sBEGIN
	%s;
	RETURN NULL;
END
$refset$`, fn.Quoted(), t.decl, t.body)); err != nil {
			return err
		}
		if exists {
			continue
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(
			`CREATE TRIGGER "%s" AFTER %s ON %s REFERENCING %s FOR EACH STATEMENT EXECUTE FUNCTION %s()`,
			t.name, t.event, t.table.Quoted(), t.with, fn.Quoted())); err != nil {
			return err
		}
	}
	return nil
}

// guardedInsert is the body of the insert trigger of a set that has references: it
// queues the new objects that no reference row points at (cols of new_rows n), as
// enqueueAny does, but its probe of the referencing tables cannot fail the insert. A
// referencing table dropped or renamed, or a column of one renamed, since the last
// Install (the collector installs again at its next pass) makes the probe fail to
// plan: the trigger then queues every new object of the statement, which is what the
// probe only spares the queue (a new object queued though referenced is reviewed and
// kept). The probe runs in a block of its own, a subtransaction that writes nothing
// (so it takes no transaction ID); the upsert runs outside it.
func guardedInsert(p *refsetdriver.Plan, cols string) string {
	upsert := func(where string) string {
		return cleanupDialect{}.Enqueue(p, fmt.Sprintf(`SELECT %s FROM new_rows n WHERE %s ORDER BY 1`, cols, where))
	}
	return fmt.Sprintf(`BEGIN
		probed := EXISTS (SELECT FROM new_rows n WHERE %[1]s);
	EXCEPTION WHEN undefined_table OR undefined_column OR undefined_function OR invalid_schema_name THEN
		probed := NULL; -- a table or column the probe names is gone
	END;
	IF probed IS NULL THEN
		%[2]s;
	ELSIF probed THEN
		%[3]s;
	END IF`, unprobed(p, "n"), upsert("true"), upsert(unprobed(p, "n")))
}

// staleSQL lists the triggers on any table whose function queues into the set's
// review queue ($1 starts the upsert Enqueue writes) under a name of refset's, with
// the function each runs and whether another trigger runs it too. A trigger cloned
// onto a partition goes with its parent's.
const staleSQL = `
SELECT tn.nspname, c.relname, t.tgname, fn.nspname, f.proname,
       EXISTS (SELECT 1 FROM pg_trigger o WHERE o.tgfoid = t.tgfoid AND o.oid <> t.oid)
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace tn ON tn.oid = c.relnamespace
JOIN pg_proc f ON f.oid = t.tgfoid JOIN pg_namespace fn ON fn.oid = f.pronamespace
WHERE NOT t.tgisinternal AND t.tgparentid = 0 AND starts_with(t.tgname, 'refset_rv_')
  AND strpos(f.prosrc, $1) > 0
ORDER BY 1, 2, 3`

// dropStale drops the triggers an earlier Install made for p's set that p does not
// want (wanted: schema, table and name of each trigger it makes), and the functions
// they ran that refset made (named as Name names them) and no other trigger runs: the
// triggers of a reference that went (a referencing table renamed, its column renamed
// or dropped, its key dropped). Left in place, the trigger of a renamed or dropped
// column would fail every delete from its table.
func dropStale(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, wanted map[[3]string]bool) error {
	type found struct {
		table    sqlident.Ident
		name     string
		fn       sqlident.Ident
		fnShared bool
	}
	all, err := cleanupsql.Rows(ctx, tx, staleSQL, []any{`INSERT INTO ` + p.Queue.Quoted() + ` AS q `}, func(rows *sql.Rows, f *found) error {
		return rows.Scan(&f.table.Schema, &f.table.Name, &f.name, &f.fn.Schema, &f.fn.Name, &f.fnShared)
	})
	if err != nil {
		return err
	}
	for _, f := range all {
		if wanted[[3]string{f.table.Schema, f.table.Name, f.name}] {
			continue
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DROP TRIGGER %s ON %s`, quoteName(f.name), f.table.Quoted())); err != nil {
			return err
		}
		if f.fnShared || !strings.HasPrefix(f.fn.Name, "refset_rv_") {
			continue
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DROP FUNCTION %s()`, f.fn.Quoted())); err != nil {
			return err
		}
	}
	return nil
}

// quoteName is name as a delimited identifier.
func quoteName(name string) string { return sqlident.Ident{Name: name}.Quoted() }

// triggerFunction is the function the trigger name on table runs, if it exists.
func triggerFunction(ctx context.Context, tx refset.Tx, table sqlident.Ident, name string) (sqlident.Ident, bool, error) {
	var nsp, fn string
	err := tx.QueryRowContext(ctx, triggerFunctionSQL, table.Quoted(), name).Scan(&nsp, &fn)
	if errors.Is(err, sql.ErrNoRows) {
		return sqlident.Ident{}, false, nil
	}
	if err != nil {
		return sqlident.Ident{}, false, err
	}
	id, err := sqlident.Parse(nsp+"."+fn, true)
	if err != nil {
		return sqlident.Ident{}, false, fmt.Errorf("function of trigger %s on %s: %w", name, table, err)
	}
	return id, true, nil
}

// ExpireHolds deletes up to limit expired holds, the longest expired first. The
// order is what keeps it on the expiry index: without statistics (or with stale
// ones) the planner guesses a third of the holds expired and reads the table from
// the start for the first limit of them, a cost that grows with the holds that never
// expire (TestHotPathPlansOnLargeData); in expiry order the index gives them first.
func (cleanupDialect) ExpireHolds(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, limit int) (int64, error) {
	return cleanupsql.Exec(ctx, tx, fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY (ARRAY (
		SELECT ctid FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED))`, p.Holds.Quoted()), limit)
}

// unprobed is the condition that no reference row points at o, checked by an index
// probe per referencing table and row (see exists in Install for why not a join).
func unprobed(p *refsetdriver.Plan, o string) string {
	var conds []string
	for _, r := range p.References {
		conds = append(conds, fmt.Sprintf(`(SELECT true FROM %s r WHERE r."%s" = %s."%s" LIMIT 1) IS NULL`,
			r.Table.Quoted(), r.Column, o, p.IDColumn))
	}
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// keysSQL is the fingerprint of the foreign keys to the set's table: the triggers
// PostgreSQL makes on a referenced table for each key to it (their constraint, and
// the function of its ON DELETE and ON UPDATE actions), read through pg_trigger's
// index on the table. Adding a key to the table (ALTER TABLE ADD FOREIGN KEY, CREATE
// TABLE ... REFERENCES) takes SHARE ROW EXCLUSIVE on it, which a batch's delete
// (ROW EXCLUSIVE) holds off until the batch ends: a statement of the batch after its
// delete sees every key added before.
const keysSQL = `
SELECT coalesce(string_agg(tgconstraint::text || ':' || tgfoid::text, ',' ORDER BY tgconstraint, tgfoid), '')
FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgconstraint <> 0`

// Keys: see refsetdriver.CleanupDialect.
func (cleanupDialect) Keys(ctx context.Context, q refset.Querier, p *refsetdriver.Plan) (string, error) {
	var keys string
	err := q.QueryRowContext(ctx, keysSQL, p.Table.Quoted()).Scan(&keys)
	return keys, err
}

// checkKeys fails a batch that deleted objects with refsetdriver.ErrStalePlan when
// the keys to the set are not p's any more: the batch's transaction then rolls back,
// since a key the plan does not know may have let it delete what the key's rows
// referenced (ON DELETE SET NULL or SET DEFAULT refuses nothing). One catalog read
// per batch that deleted anything, none for one that did not.
func checkKeys(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, b refsetdriver.Batch) (refsetdriver.Batch, error) {
	if b.Deleted == 0 {
		return b, nil
	}
	keys, err := cleanupDialect{}.Keys(ctx, tx, p)
	if err != nil {
		return b, err
	}
	if keys != p.Keys {
		return b, fmt.Errorf("collecting %s: %w", p.Table, refsetdriver.ErrStalePlan)
	}
	return b, nil
}

// CollectBatch reviews a batch in one statement (fastBatchSQL). If a reference to an
// object of the batch commits between that statement's snapshot and its delete, the
// foreign key refuses the delete: the statement is undone to a savepoint and the batch
// is reviewed again the careful way (lockedBatch), which locks the objects first.
//
// Deferred constraints are checked at each statement's end, not at COMMIT: a
// reference Install did not find then refuses the delete, which lockedBatch handles,
// instead of failing the batch's COMMIT again and again.
//
// A batch that deleted objects then reads the keys to the set (checkKeys) and fails
// with refsetdriver.ErrStalePlan, rolling back, if they are not the plan's: a key
// added since, ON DELETE SET NULL or SET DEFAULT, would have let it delete objects the
// key's rows referenced. Under REPEATABLE READ or SERIALIZABLE (postgres.Options
// Isolation) that read sees the transaction's snapshot, taken before the delete's
// lock: a key committed in between is not seen there.
func (cleanupDialect) CollectBatch(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, limit int) (refsetdriver.Batch, error) {
	// One round trip: without arguments both drivers send these as one simple query.
	// With sequential scans off, every lookup of the batch is an index probe whatever
	// the statistics say when it is planned: a queue or holds table that was nearly
	// empty then may hold millions of rows now, and a plan that read it whole would
	// read it again for every object of a chain.
	if _, err := tx.ExecContext(ctx, `SET CONSTRAINTS ALL IMMEDIATE; SET LOCAL enable_seqscan = off; SAVEPOINT refset_collect`); err != nil {
		return refsetdriver.Batch{}, err
	}
	var b refsetdriver.Batch
	err := translateError(tx.QueryRowContext(ctx, fastBatchSQL(p), limit).Scan(&b.Reviewed, &b.Deleted), "")
	if err == nil {
		// The savepoint is left to COMMIT to release: one round trip fewer.
		return checkKeys(ctx, tx, p, b)
	}
	if !errors.Is(err, refset.ErrReferenced) {
		return b, err
	}
	if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT refset_collect`); err != nil {
		return refsetdriver.Batch{}, err
	}
	b, err = lockedBatch(ctx, tx, p, limit)
	if err != nil {
		return b, err
	}
	return checkKeys(ctx, tx, p, b)
}

// fastBatchSQL claims due entries, deletes the unreferenced objects among them,
// follows the edges from them to what they alone kept alive (see freedSQL), deletes
// that too, and dequeues the claimed entries, in one statement that reads how many it
// reviewed and deleted; $1 bounds both the entries it claims and the objects it
// deletes. The claimed entries are locked by it, so no one else changes them, and
// they are deleted by their row address (a TID scan, whatever the size of the queue).
// The dequeue runs though nothing reads it: a data-modifying WITH always runs to
// completion. The triggers a deletion fires run at the statement's end, after the
// dequeue, so what they queue (the predecessor of the last block deleted) stays
// queued.
//
// Everything the statement decides, it decides on its one snapshot; the foreign keys
// check every delete again against what has committed since. A reference that
// committed after the snapshot, or is being inserted now (its KEY SHARE lock makes
// the delete wait for it), makes the database refuse the statement, and CollectBatch
// reviews the batch again the careful way.
func fastBatchSQL(p *refsetdriver.Plan) string {
	deleted := fmt.Sprintf(`DELETE FROM %s o USING claimed c WHERE o."%s" = c.object_id AND %s`,
		p.Table.Quoted(), p.IDColumn, cleanupsql.Unreferenced(p, "o"))
	var freed string
	if len(p.Edges()) > 0 {
		freed = freedSQL(p) + ","
		deleted = fmt.Sprintf(`DELETE FROM %s o WHERE o."%s" = ANY (ARRAY (SELECT id FROM freed LIMIT $1))`,
			p.Table.Quoted(), p.IDColumn)
	}
	return fmt.Sprintf(`WITH RECURSIVE claimed AS (
			SELECT ctid AS at, object_id FROM %[1]s WHERE review_after <= now()
			ORDER BY review_after LIMIT $1 FOR UPDATE SKIP LOCKED),
		%[2]s
		deleted AS (%[3]s RETURNING 1),
		dequeued AS (
			DELETE FROM %[1]s q WHERE q.ctid = ANY (ARRAY (SELECT at FROM claimed)) RETURNING 1)
		SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM deleted)`,
		p.Queue.Quoted(), freed, deleted)
}

// freedSQL defines freed(id, e0, e1, ...): the claimed objects nothing references,
// then, along the edges (a block's predecessor), each object that only an object of
// freed referenced: deleting an abandoned chain frees its next block, and that block
// the one before it, so a chain goes in one statement instead of one batch per block,
// at a cost per block like that of any other garbage. The rows come out level by
// level (a block before its predecessor), so the first $1 of them, which
// fastBatchSQL deletes, never leave a block's successor behind (were it otherwise,
// the foreign key would refuse the statement, and the batch would be reviewed the
// careful way); the last block's predecessor is queued by the trigger and reviewed by
// the next batch.
//
// An object is followed only when, on the statement's snapshot, no root references
// it, no other object does (an object reached from two freed objects, the fork point
// of two abandoned branches, is left to the queue, where it is reviewed once both are
// gone), and its queue entry, if any, is not waiting for a later time: a new block
// keeps its grace period, and an object another batch postponed stays postponed.
// UNION ends the walk on a cycle.
func freedSQL(p *refsetdriver.Plan) string {
	edges := p.Edges()
	cols := []string{"id"}
	selectO, selectX := []string{fmt.Sprintf(`o."%s"`, p.IDColumn)}, []string{fmt.Sprintf(`x."%s"`, p.IDColumn)}
	var parents []string
	for i, e := range edges {
		cols = append(cols, fmt.Sprintf("e%d", i))
		selectO = append(selectO, fmt.Sprintf(`o."%s"`, e.Column))
		selectX = append(selectX, fmt.Sprintf(`x."%s"`, e.Column))
		parents = append(parents, fmt.Sprintf("f.e%d", i))
	}
	q := fmt.Sprintf(`freed (%s) AS (
			SELECT %s FROM %s o WHERE o."%s" = ANY (ARRAY (SELECT object_id FROM claimed)) AND %s`,
		strings.Join(cols, ", "), strings.Join(selectO, ", "), p.Table.Quoted(), p.IDColumn, cleanupsql.Unreferenced(p, "o"))
	var conds []string
	for _, r := range p.Roots() {
		conds = append(conds, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s r WHERE r."%s" = x."%s")`, r.Table.Quoted(), r.Column, p.IDColumn))
	}
	for _, e := range edges {
		conds = append(conds, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %[1]s r WHERE r."%[2]s" = x."%[3]s" AND r."%[3]s" <> f.id)`,
			p.Table.Quoted(), e.Column, p.IDColumn))
	}
	conds = append(conds, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s q WHERE q.object_id = x."%s" AND q.review_after > now())`,
		p.Queue.Quoted(), p.IDColumn))
	parent := parents[0]
	if len(parents) > 1 {
		parent = "ANY (ARRAY[" + strings.Join(parents, ", ") + "])"
	}
	return q + fmt.Sprintf(`
		UNION
			SELECT %s FROM freed f JOIN %s x ON x."%s" = %s
			WHERE %s)`, strings.Join(selectX, ", "), p.Table.Quoted(), p.IDColumn, parent, strings.Join(conds, " AND "))
}

// lockedBatch claims due entries, locks their objects, and deletes the unreferenced
// ones. IDs travel as text and are cast back to the ID type, so one code path serves
// every ID type.
func lockedBatch(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, limit int) (b refsetdriver.Batch, err error) {
	ids, versions, err := claim(ctx, tx, p, limit)
	if err != nil || len(ids) == 0 {
		return b, err
	}
	b.Reviewed = int64(len(ids))
	idArray := fmt.Sprintf(`$1::text[]::%s[]`, p.IDType)

	// Lock the objects that still exist. A row another transaction holds a lock on
	// (a reference being inserted takes KEY SHARE on it) is skipped and postponed.
	// Once locked, no new reference to it can commit until this transaction ends.
	type row struct {
		id     string
		locked bool
	}
	rows, err := cleanupsql.Rows(ctx, tx, fmt.Sprintf(`WITH locked AS (
		SELECT "%[2]s" AS id FROM %[1]s WHERE "%[2]s" = ANY (%[3]s) FOR UPDATE SKIP LOCKED)
		SELECT o."%[2]s"::text, l.id IS NOT NULL FROM %[1]s o LEFT JOIN locked l ON l.id = o."%[2]s"
		WHERE o."%[2]s" = ANY (%[3]s)`, p.Table.Quoted(), p.IDColumn, idArray), []any{pq.Array(ids)},
		func(rows *sql.Rows, r *row) error { return rows.Scan(&r.id, &r.locked) })
	if err != nil {
		return b, err
	}
	var locked, busy []string
	for _, r := range rows {
		if r.locked {
			locked = append(locked, r.id)
		} else {
			busy = append(busy, r.id)
		}
	}

	// A new statement sees every reference committed before the locks were taken.
	var refused []string
	if len(locked) > 0 {
		if b.Deleted, refused, err = deleteUnreferenced(ctx, tx, p, locked); err != nil {
			return b, err
		}
	}

	// Dequeue what was reviewed, unless it was queued again meanwhile (its version
	// moved: a deletion in this batch may have queued its predecessor) or must wait
	// ($3, never NULL: <> ALL of a NULL array would dequeue nothing).
	wait := append(append([]string{}, busy...), refused...)
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s q USING unnest($1::text[], $2::bigint[]) AS c(id, v)
		WHERE q.object_id = c.id::%s AND q.version = c.v AND c.id <> ALL ($3::text[])`, p.Queue.Quoted(), p.IDType),
		pq.Array(ids), pq.Array(versions), pq.Array(wait)); err != nil {
		return b, err
	}
	b.Postponed, b.Refused = int64(len(busy)), int64(len(refused))
	if err := postpone(ctx, tx, p, busy, p.RetryDelay); err != nil {
		return b, err
	}
	return b, postpone(ctx, tx, p, refused, p.Grace)
}

// deleteUnreferenced deletes the objects of ids that no known reference points at,
// in one statement. If the database refuses that, it deletes them one by one
// instead (cleanupsql.OneByOne), each under a savepoint, and returns those it refused.
func deleteUnreferenced(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, ids []string) (deleted int64, refused []string, err error) {
	del := fmt.Sprintf(`DELETE FROM %s o WHERE o."%s" = ANY ($1::text[]::%s[]) AND %s`,
		p.Table.Quoted(), p.IDColumn, p.IDType, cleanupsql.Unreferenced(p, "o"))
	deleted, err = execUnder(ctx, tx, "refset_delete", del, pq.Array(ids))
	if !errors.Is(err, refset.ErrReferenced) {
		return deleted, nil, err
	}
	return cleanupsql.OneByOne(ids, func(id string) (int64, error) {
		return execUnder(ctx, tx, "refset_delete", del, pq.Array([]string{id}))
	})
}

// execUnder runs one statement under a savepoint, so that its failure leaves the
// transaction usable, and returns the rows it affected.
func execUnder(ctx context.Context, tx refset.Tx, savepoint, query string, args ...any) (int64, error) {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT `+savepoint); err != nil {
		return 0, err
	}
	n, err := cleanupsql.Exec(ctx, tx, query, args...)
	if err != nil {
		if _, rbErr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT `+savepoint); rbErr != nil {
			return 0, errors.Join(err, rbErr)
		}
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT `+savepoint); err != nil {
		return 0, err
	}
	return n, nil
}

// postpone moves the reviews of ids delay ahead.
func postpone(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, ids []string, delay time.Duration) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET review_after = clock_timestamp() + $2 * interval '1 millisecond'
		WHERE object_id = ANY ($1::text[]::%s[])`, p.Queue.Quoted(), p.IDType), pq.Array(ids), delay.Milliseconds())
	return err
}

// claim takes up to limit due entries; entries another collector holds are skipped.
func claim(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, limit int) ([]string, []int64, error) {
	type entry struct {
		id      string
		version int64
	}
	entries, err := cleanupsql.Rows(ctx, tx, fmt.Sprintf(`SELECT object_id::text, version FROM %s
		WHERE review_after <= now() ORDER BY review_after LIMIT $1 FOR UPDATE SKIP LOCKED`, p.Queue.Quoted()), []any{limit},
		func(rows *sql.Rows, e *entry) error { return rows.Scan(&e.id, &e.version) })
	ids, versions := make([]string, len(entries)), make([]int64, len(entries))
	for i, e := range entries {
		ids[i], versions[i] = e.id, e.version
	}
	return ids, versions, err
}

// Reach is a recursive query of every object reachable from the roots (and, when
// withQueue, from queued objects) along the edges.
func (cleanupDialect) Reach(p *refsetdriver.Plan, withQueue bool) string {
	q := `WITH RECURSIVE reach(id) AS (` + cleanupsql.Seeds(p, withQueue)
	if edges := p.Edges(); len(edges) > 0 {
		var next []string
		for _, e := range edges {
			next = append(next, fmt.Sprintf(`(o."%s")`, e.Column))
		}
		q += fmt.Sprintf(` UNION SELECT x.id FROM reach JOIN %s o ON o."%s" = reach.id
			CROSS JOIN LATERAL (VALUES %s) AS x(id) WHERE x.id IS NOT NULL`, p.Table.Quoted(), p.IDColumn, strings.Join(next, ", "))
	}
	return q + `)`
}

// Text renders a value as an SQL literal in text, NULL included, for reports.
func (cleanupDialect) Text(expr string) string { return "quote_nullable((" + expr + ")::text)" }

// SchemaError: a table, column, schema, function or other object the collector's
// SQL names does not exist.
func (cleanupDialect) SchemaError(err error) bool {
	return errors.Is(translateError(err, ""), refset.ErrSchema)
}

// estimateSQL is the planner's estimate of a table's rows: those its last ANALYZE
// (or VACUUM) counted per page, times the pages the table has now (the size of its
// file, read without reading the table); NULL for a table never analyzed. The
// relation's name is the argument.
const estimateSQL = `(SELECT CASE WHEN c.reltuples >= 0 AND c.relpages > 0
	THEN (c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8))::bigint END
	FROM pg_class c WHERE c.oid = to_regclass(?))`

// Estimator: the planner's estimate, which pg_class has on a standby too.
func (cleanupDialect) Estimator(context.Context, refset.Querier) (cleanupsql.Estimate, error) {
	return func(table sqlident.Ident) (string, []any) { return estimateSQL, []any{table.Quoted()} }, nil
}
