package pgtest

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Plan is one plan auto_explain logged: the statement, its plan tree and, when the
// executor JIT-compiled it, the JIT section.
type Plan struct {
	Query string          `json:"Query Text"`
	Tree  json.RawMessage `json:"Plan"`
	JIT   json.RawMessage `json:"JIT"`

	// catalog is where the plan's tables are, when PlansOf had one to ask (a
	// PlanGuard's log); roots are the partitioned tables of the partitions the
	// plan reads, by partition, read there.
	catalog *sql.DB
	roots   map[tableName]tableName
}

// root is the partitioned table t is a partition of, or t itself.
func (p Plan) root(t tableName) tableName {
	if r, ok := p.roots[t]; ok {
		return r
	}
	return t
}

// PlanNode is one node of a plan tree: what it does, the table it reads or writes
// (if any), and the rows it returned over all its loops.
type PlanNode struct {
	Type     string
	Relation string
	Rows     float64
}

// Nodes are the nodes of p's tree, its root first, subplans included.
func (p Plan) Nodes() []PlanNode {
	var out []PlanNode
	nodes(p.Tree, func(n map[string]any, _ bool) {
		rows, _ := n["Actual Rows"].(float64)
		loops, _ := n["Actual Loops"].(float64)
		relation, _ := n["Relation Name"].(string)
		out = append(out, PlanNode{Type: fmt.Sprint(n["Node Type"]), Relation: relation, Rows: rows * max(loops, 1)})
	})
	return out
}

// PlanLog collects the plans auto_explain sends a session's client as LOG
// messages (see ExplainedPool).
type PlanLog struct {
	mu    sync.Mutex
	plans []Plan
	bad   []string // messages that looked like plans but did not parse

	// catalog, when set, is where PlansOf asks which partitioned table each
	// partition the plans read belongs to: a pool whose own plans are not logged.
	catalog *sql.DB
}

func (l *PlanLog) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	_, text, ok := strings.Cut(n.Message, "plan:\n")
	if n.Severity != "LOG" || !ok {
		return
	}
	var p Plan
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := json.Unmarshal([]byte(text), &p); err != nil {
		l.bad = append(l.bad, n.Message)
		return
	}
	l.plans = append(l.plans, p)
}

// Take returns the plans logged since the last Take.
func (l *PlanLog) Take() []Plan {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.plans
	l.plans = nil
	return out
}

// PlansOf runs workload and returns the plans it logged, failing tb when it logged
// none (a guard that saw no plan checked nothing). With a catalog (PlanGuard's
// log), the plans know the partitioned table of each partition they read.
func (l *PlanLog) PlansOf(tb testing.TB, workload func()) []Plan {
	tb.Helper()
	l.Take()
	workload()
	plans := l.Take()
	if len(plans) == 0 {
		tb.Fatal("auto_explain logged no plan")
	}
	if l.catalog != nil {
		// Not tb.Context() itself: PlansOf may run in a t.Cleanup.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), pingTimeout)
		defer cancel()
		roots, err := partitionRoots(ctx, l.catalog, plans)
		if err != nil {
			tb.Fatalf("pgtest: read the partitioned tables of the partitions the plans read: %v", err)
		}
		for i := range plans {
			plans[i].catalog, plans[i].roots = l.catalog, roots
		}
	}
	return plans
}

// ReportFaults fails tb, each failure prefixed with phase, with each of
// PlanFaults(plans, big), with each name of big that is no table's name, and with
// each that names no table at all: a misspelt name (a case PostgreSQL folds, a
// table of another schema) would otherwise pass while checking nothing. A table of
// big that these plans do not read is no failure, since one list of a program's big
// tables serves all its workloads; but a name no plan reads must name a table of the
// database the plans ran on (PlanGuard's), or, for plans from elsewhere, which
// cannot be asked, it fails. It returns whether there were none.
func ReportFaults(tb testing.TB, phase string, plans []Plan, big map[string]bool) bool {
	tb.Helper()
	tables, bad := parseBig(big)
	for _, b := range bad {
		tb.Errorf("%s: %s", phase, b)
	}
	faults := planFaults(plans, tables)
	for _, f := range faults {
		tb.Errorf("%s: %s", phase, f)
	}
	unknown, err := unknownTables(tb, plans, tables)
	if err != nil {
		tb.Errorf("%s: pgtest: look up the big tables no plan reads: %v", phase, err)
	}
	for _, u := range unknown {
		tb.Errorf("%s: %s", phase, u)
	}
	return len(bad) == 0 && len(faults) == 0 && len(unknown) == 0 && err == nil
}

// unknownTables says which of big no node of plans reads and the plans' catalog
// does not have either (all that no plan reads, when they have no catalog), with
// the tables the plans do read, to show the name the test meant.
func unknownTables(tb testing.TB, plans []Plan, big bigTables) ([]string, error) {
	read := map[string]bool{}   // big's names, as written, that a plan reads
	tables := map[string]bool{} // every table a plan reads
	var catalog *sql.DB
	for _, p := range plans {
		catalog = cmp.Or(catalog, p.catalog)
		nodes(p.Tree, func(n map[string]any, _ bool) {
			if t, ok := nodeTable(n); ok {
				tables[t.String()] = true
				for _, written := range big.matching(t, p.root(t)) {
					read[written] = true
				}
			}
		})
	}
	// Not tb.Context() itself: a test may check plans in a t.Cleanup.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), pingTimeout)
	defer cancel()
	var unknown []string
	for _, written := range slices.Sorted(maps.Keys(big)) {
		if read[written] {
			continue
		}
		why := "is read by no plan"
		if catalog != nil {
			found, err := tableExists(ctx, catalog, big[written])
			if err != nil {
				return unknown, err
			}
			if found {
				continue // a big table of the program that this workload does not read
			}
			why = "names no table of the database, and no plan reads it"
		}
		unknown = append(unknown, fmt.Sprintf("big table %q %s: a misspelt name checks nothing (the plans read %s)",
			written, why, strings.Join(slices.Sorted(maps.Keys(tables)), ", ")))
	}
	return unknown, nil
}

// Unparsed returns the messages that looked like plans but did not parse: a test
// that finds none wrong in what did parse must also see this empty, or it checked
// less than it thinks.
func (l *PlanLog) Unparsed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

// ExplainedPool is a pgx pool on dsn whose every statement, nested ones (a trigger
// function's, a foreign key's check) included, is explained by auto_explain and its
// plan handed to log: what the server really planned and executed, with the JIT
// section when it compiled the statement, and the rows and pages each node read
// (ANALYZE and BUFFERS, without timing, which would cost more than the statements),
// each table with its schema (VERBOSE, for PlanFaults to tell tables of one name
// apart and PlansOf to find a partition's table). auto_explain is loaded per session, which
// needs a superuser, as the test cluster's is. A session stops explaining with
// `SET auto_explain.log_min_duration = -1` (a bulk load's plans would be noise).
func ExplainedPool(tb testing.TB, dsn string, log *PlanLog, conns int) *sql.DB {
	tb.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatalf("pgtest: read the DSN: %v", redact(err))
	}
	cfg.OnNotice = log.notice
	pool := stdlib.OpenDB(*cfg, stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `LOAD 'auto_explain';
			SET auto_explain.log_min_duration = 0;
			SET auto_explain.log_nested_statements = on;
			SET auto_explain.log_analyze = on;
			SET auto_explain.log_buffers = on;
			SET auto_explain.log_timing = off;
			SET auto_explain.log_verbose = on;
			SET auto_explain.log_format = json;
			SET client_min_messages = log`)
		return err
	}))
	pool.SetMaxOpenConns(conns)
	pool.SetMaxIdleConns(conns)
	tb.Cleanup(func() { _ = pool.Close() })
	return pool
}

// PlanGuard opens what a plan guard needs on the schema of dsn: a pool of one
// session whose plans log collects (ExplainedPool), and a plain pool for the test's
// own statements (loads, making rows due), which are no path under test and whose
// plans would be noise. Both close when tb ends.
func PlanGuard(tb testing.TB, dsn string) (log *PlanLog, explained, plain *sql.DB) {
	tb.Helper()
	log = &PlanLog{}
	explained = ExplainedPool(tb, dsn, log, 1)
	plain, err := sql.Open("postgres", dsn)
	if err != nil {
		tb.Fatalf("pgtest: open a plain pool: %v", redact(err))
	}
	tb.Cleanup(func() { _ = plain.Close() })
	log.catalog = plain
	return log, explained, plain
}

// Execer is what Exec runs statements on: an *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Exec returns a function that runs one of a test's own statements (a load, making
// rows due) on e, failing tb with the statement when it fails.
func Exec(tb testing.TB, e Execer) func(query string, args ...any) {
	return func(query string, args ...any) {
		tb.Helper()
		if _, err := e.ExecContext(tb.Context(), query, args...); err != nil {
			tb.Fatalf("%s: %v", query, err)
		}
	}
}

// nodes calls fn for every node of a plan tree, with whether a Limit bounds the rows
// it returns: a Limit above it with nothing between but nodes that pass rows on one
// by one (a Subquery Scan, a Result), so that the node stops once the Limit has its
// rows. A Sort, an Aggregate or a Hash between them reads all the node's rows first;
// a subplan is bounded by its own nodes alone.
func nodes(raw json.RawMessage, fn func(node map[string]any, limited bool)) {
	var root map[string]any
	if json.Unmarshal(raw, &root) != nil {
		return
	}
	var walk func(n map[string]any, limited bool)
	walk = func(n map[string]any, limited bool) {
		fn(n, limited)
		switch n["Node Type"] {
		case "Limit":
			limited = true
		case "Subquery Scan", "Result":
		default:
			limited = false
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				sub := fmt.Sprint(m["Parent Relationship"])
				walk(m, limited && sub != "SubPlan" && sub != "InitPlan")
			}
		}
	}
	walk(root, false)
}

// maxDiscarded is how many rows of a big table a hot path's plan may read and
// discard: far fewer than the test tables hold, far more than any path needs.
const maxDiscarded = 10_000

// A scan of a big table may read, over all its loops, pagesPerLoop pages each time
// it starts and pagesPerRow for each row it returns (a descent of the index, which a
// condition = ANY(array) makes once per element within one loop, the heap page, the
// dead entries a collected table's index still holds, a toasted value: 18 a row
// where clean-up claims blocks on tables grown fivefold past their statistics); a
// scan that reads more, and more than minPagesFault in all, reads
// for rows it does not return in a way "Rows Removed" does not show: an index whose
// condition is on a column after the first is read whole, page by page, and every
// row it rejects is rejected inside the index. (Only scans: an INSERT's ModifyTable
// reads index pages for the rows it writes, and returns none.)
const (
	pagesPerLoop  = 16
	pagesPerRow   = 32
	minPagesFault = 256
)

// scans are the plan nodes that read a table, whose pages PlanFaults counts.
var scans = map[string]bool{"Seq Scan": true, "Index Scan": true, "Index Only Scan": true, "Bitmap Heap Scan": true, "Tid Scan": true}

// PlanFaults lists what is wrong with plans for a hot path: a statement the
// executor JIT-compiled (each call pays the compilation again, milliseconds), a
// sequential scan of one of the big tables (but one that a Limit stops, which reads
// no more rows than it returns, as a count up to a cap does), an index of one read
// from end to end (no index condition and no Limit: a count of the whole table), and
// a scan of one that read more than
// maxDiscarded rows it then discarded (an index read whole for a few rows, a join
// probing a big table once per row of another), or more pages than its rows and
// loops need (see pagesPerRow): the cost of each grows with the table, not the work. Each fault is listed once, with the statement (shortened)
// that has it.
//
// big names the tables as SQL does (see parseTableName): Tokens is tokens, "Tokens"
// keeps its case, ledger.tokens is that schema's only. A partition is big when its
// partitioned table is (see Plan.roots). A name that is no table's name is no table
// here: ReportFaults reports it.
func PlanFaults(plans []Plan, big map[string]bool) []string {
	tables, _ := parseBig(big)
	return planFaults(plans, tables)
}

// planFaults is PlanFaults on the big tables parsed.
func planFaults(plans []Plan, tables bigTables) []string {
	var faults []string
	seen := map[string]bool{}
	add := func(f string) {
		if !seen[f] {
			seen[f] = true
			faults = append(faults, f)
		}
	}
	for _, p := range plans {
		q := strings.Join(strings.Fields(p.Query), " ")
		if len(q) > 160 {
			q = q[:160] + "..."
		}
		if len(p.JIT) > 0 {
			add(fmt.Sprintf("JIT-compiled: %s (JIT %s)", q, p.JIT))
		}
		nodes(p.Tree, func(n map[string]any, limited bool) {
			t, ok := nodeTable(n)
			if !ok || len(tables.matching(t, p.root(t))) == 0 {
				return
			}
			table := t.name
			if root := p.root(t); root != t {
				table += " (a partition of " + root.name + ")"
			}
			_, filtered := n["Filter"]
			_, cond := n["Index Cond"]
			switch n["Node Type"] {
			case "Seq Scan":
				// Under a Limit, and returning every row it reads, it reads no more
				// than the Limit takes (a count that stops at a cap).
				if !limited || filtered {
					add(fmt.Sprintf("sequential scan of %v: %s", table, q))
					return
				}
			case "Index Scan", "Index Only Scan":
				if !limited && !cond {
					add(fmt.Sprintf("%v of %v without an index condition or a Limit reads the index whole: %s", n["Node Type"], table, q))
					return
				}
			}
			// EXPLAIN ANALYZE gives the rows a node returned and discarded per loop,
			// BUFFERS the pages it (and the nodes under it) read over all loops.
			loops, _ := n["Actual Loops"].(float64)
			for _, key := range []string{"Rows Removed by Filter", "Rows Removed by Index Recheck"} {
				if per, _ := n[key].(float64); per*loops > maxDiscarded {
					add(fmt.Sprintf("%v of %v read %.0f rows it discarded (%s): %s", n["Node Type"], table, per*loops, key, q))
				}
			}
			rows, _ := n["Actual Rows"].(float64)
			hit, _ := n["Shared Hit Blocks"].(float64)
			read, _ := n["Shared Read Blocks"].(float64)
			if pages := hit + read; scans[fmt.Sprint(n["Node Type"])] && pages > minPagesFault && pages > pagesPerLoop*loops+pagesPerRow*rows*loops {
				add(fmt.Sprintf("%v of %v read %.0f pages for %.0f rows in %.0f loops: %s", n["Node Type"], table, pages, rows*loops, loops, q))
			}
		})
	}
	return faults
}
