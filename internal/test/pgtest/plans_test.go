package pgtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// PlanFaults finds JIT, sequential scans of the big tables, scans that discard more
// than maxDiscarded rows of one over all their loops, and scans that read more pages
// than their rows and loops need, and nothing else.
func TestPlanFaults(t *testing.T) {
	big := map[string]bool{"blocks": true}
	for _, c := range []struct {
		name, tree, jit string
		want            string // a fault containing this; "" for none
	}{
		{"index lookup", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1}`, "", ""},
		{"JIT", `{"Node Type": "Result"}`, `{"Functions": 1}`, "JIT-compiled"},
		{"seq scan of a big table", `{"Node Type": "Aggregate", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "blocks"}]}`, "", "sequential scan of blocks"},
		{"seq scan a Limit stops", `{"Node Type": "Aggregate", "Plans": [{"Node Type": "Limit", "Plans": [{"Node Type": "Subquery Scan", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "blocks"}]}]}]}`, "", ""},
		{"seq scan filtered under a Limit", `{"Node Type": "Limit", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "blocks", "Filter": "(x = 1)"}]}`, "", "sequential scan of blocks"},
		{"seq scan sorted under a Limit", `{"Node Type": "Limit", "Plans": [{"Node Type": "Sort", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "blocks"}]}]}`, "", "sequential scan of blocks"},
		{"seq scan in a subplan under a Limit", `{"Node Type": "Limit", "Plans": [{"Node Type": "Result", "Plans": [{"Node Type": "Aggregate", "Parent Relationship": "SubPlan", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "blocks"}]}]}]}`, "", "sequential scan of blocks"},
		{"index read end to end", `{"Node Type": "Aggregate", "Plans": [{"Node Type": "Index Only Scan", "Relation Name": "blocks", "Actual Loops": 1, "Actual Rows": 30000}]}`, "", "reads the index whole"},
		{"index range", `{"Node Type": "Aggregate", "Plans": [{"Node Type": "Index Only Scan", "Relation Name": "blocks", "Index Cond": "(x <= now())", "Actual Loops": 1, "Actual Rows": 30}]}`, "", ""},
		{"index first entries", `{"Node Type": "Limit", "Plans": [{"Node Type": "Index Only Scan", "Relation Name": "blocks", "Actual Loops": 1, "Actual Rows": 1}]}`, "", ""},
		{"seq scan of a small table", `{"Node Type": "Seq Scan", "Relation Name": "chain_heads"}`, "", ""},
		{"index read whole", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1, "Rows Removed by Filter": 20000}`, "", "read 20000 rows it discarded"},
		{"discards per loop add up", `{"Node Type": "Nested Loop", "Plans": [{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 200, "Rows Removed by Filter": 100}]}`, "", "read 20000 rows"},
		{"a few discarded", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 10, "Rows Removed by Filter": 10}`, "", ""},
		{"discards of a small table", `{"Node Type": "Index Scan", "Relation Name": "chain_heads", "Actual Loops": 1, "Rows Removed by Filter": 50000}`, "", ""},
		{"index read whole for its second column", `{"Node Type": "Index Only Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1, "Actual Rows": 1, "Shared Hit Blocks": 900, "Shared Read Blocks": 300}`, "", "read 1200 pages for 1 rows in 1 loops"},
		{"pages for the rows returned", `{"Node Type": "Bitmap Heap Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1, "Actual Rows": 10000, "Shared Hit Blocks": 30000}`, "", ""},
		{"an insert's index pages", `{"Node Type": "ModifyTable", "Relation Name": "blocks", "Actual Loops": 1, "Actual Rows": 0, "Shared Hit Blocks": 2000}`, "", ""},
		{"a descent per element of an array", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1, "Actual Rows": 20, "Shared Hit Blocks": 280}`, "", ""},
		{"pages per loop add up", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1000, "Actual Rows": 0, "Shared Hit Blocks": 4000}`, "", ""},
		{"a few pages", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Index Cond": "(id = $1)", "Actual Loops": 1, "Actual Rows": 0, "Shared Hit Blocks": 200}`, "", ""},
		{"pages of a small table", `{"Node Type": "Index Scan", "Relation Name": "chain_heads", "Actual Loops": 1, "Actual Rows": 1, "Shared Hit Blocks": 5000}`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Plan{Query: "SELECT 1", Tree: json.RawMessage(c.tree)}
			if c.jit != "" {
				p.JIT = json.RawMessage(c.jit)
			}
			faults := PlanFaults([]Plan{p}, big)
			if c.want == "" {
				if len(faults) > 0 {
					t.Errorf("faults %q, want none", faults)
				}
				return
			}
			if len(faults) != 1 || !strings.Contains(faults[0], c.want) {
				t.Errorf("faults %q, want one with %q", faults, c.want)
			}
		})
	}
}

// On a real server, the plans auto_explain hands the log carry what PlanFaults reads:
// a key lookup passes, and an index read whole for a condition on its second column
// (what "Rows Removed" does not show: the index rejects the rows itself) is found by
// the pages it read.
func TestPlanFaultsOnServer(t *testing.T) {
	ctx := t.Context()
	log := &PlanLog{}
	pool := ExplainedPool(t, DSN(t), log, 1)
	conn, err := pool.Conn(ctx) // one session: its settings hold for every statement
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		`SET auto_explain.log_min_duration = -1`,
		`CREATE TABLE pairs (a text NOT NULL, b text NOT NULL, PRIMARY KEY (a, b))`,
		`INSERT INTO pairs SELECT 'a' || lpad(i::text, 7, '0'), 'b' || lpad((i % 100000)::text, 6, '0') FROM generate_series(1, 200000) i`,
		`ANALYZE pairs`,
		`SET enable_seqscan = off`, // the plan a stale statistic would choose
		`SET auto_explain.log_min_duration = 0`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	big := map[string]bool{"pairs": true}
	for _, c := range []struct {
		name, query string
		fault       bool
	}{
		{"key lookup", `SELECT count(*) FROM pairs WHERE a = 'a0000042' AND b = 'b000042'`, false},
		{"second column only", `SELECT count(*) FROM pairs WHERE b = 'b000042'`, true},
	} {
		plans := log.PlansOf(t, func() {
			var n int
			if err := conn.QueryRowContext(ctx, c.query).Scan(&n); err != nil {
				t.Fatal(err)
			}
		})
		faults := PlanFaults(plans, big)
		if c.fault != (len(faults) > 0) {
			t.Errorf("%s: faults %q, want fault %v; plans: %s", c.name, faults, c.fault, plans[0].Tree)
		}
		if c.fault && len(faults) > 0 && !strings.Contains(faults[0], "pages") {
			t.Errorf("%s: %q, want the pages it read", c.name, faults[0])
		}
	}
	if bad := log.Unparsed(); len(bad) > 0 {
		t.Errorf("plans that did not parse: %q", bad)
	}
}

// Nodes lists a tree root first, subplans included, with each node's rows summed over
// its loops (EXPLAIN gives them per loop), and a node never run as none.
func TestPlanNodes(t *testing.T) {
	p := Plan{Tree: json.RawMessage(`{"Node Type": "Nested Loop", "Actual Rows": 600, "Actual Loops": 1, "Plans": [
		{"Node Type": "Seq Scan", "Relation Name": "heads", "Actual Rows": 200, "Actual Loops": 1},
		{"Node Type": "Index Scan", "Relation Name": "blocks", "Actual Rows": 3, "Actual Loops": 200},
		{"Node Type": "LockRows", "Parent Relationship": "SubPlan", "Actual Rows": 0, "Actual Loops": 0}]}`)}
	want := []PlanNode{
		{Type: "Nested Loop", Rows: 600},
		{Type: "Seq Scan", Relation: "heads", Rows: 200},
		{Type: "Index Scan", Relation: "blocks", Rows: 600},
		{Type: "LockRows"},
	}
	got := p.Nodes()
	if len(got) != len(want) {
		t.Fatalf("Nodes() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("node %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Names of big tables read as PostgreSQL reads a table's name, and print back in a
// form that reads as the same table.
func TestParseTableName(t *testing.T) {
	for _, c := range []struct {
		in   string
		want tableName
		err  bool
	}{
		{in: "tokens", want: tableName{name: "tokens"}},
		{in: "Tokens", want: tableName{name: "tokens"}},
		{in: `"Tokens"`, want: tableName{name: "Tokens"}},
		{in: `"to""kens"`, want: tableName{name: `to"kens`}},
		{in: `"a.b"`, want: tableName{name: "a.b"}},
		{in: "Ledger.Tokens", want: tableName{schema: "ledger", name: "tokens"}},
		{in: `"Ledger".tokens`, want: tableName{schema: "Ledger", name: "tokens"}},
		{in: "t$1", want: tableName{name: "t$1"}},
		{in: "Été", want: tableName{name: "Été"}}, // only ASCII folds, as in UTF-8
		{in: strings.Repeat("a", 70), want: tableName{name: strings.Repeat("a", 63)}},
		{in: "", err: true},
		{in: "a.b.c", err: true},
		{in: "a.", err: true},
		{in: ".a", err: true},
		{in: "1a", err: true},
		{in: `""`, err: true},
		{in: `"a`, err: true},
		{in: "a b", err: true},
		{in: "a;", err: true},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := parseTableName(c.in)
			if c.err {
				if err == nil {
					t.Fatalf("parseTableName(%q) = %+v, want an error", c.in, got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseTableName(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			}
			if back, err := parseTableName(got.String()); err != nil || back != got {
				t.Errorf("%+v prints as %q, which reads back as %+v, %v", got, got.String(), back, err)
			}
		})
	}
}
