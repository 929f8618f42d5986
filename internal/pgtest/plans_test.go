package pgtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// PlanFaults finds JIT, sequential scans of the big tables and scans that discard
// more than maxDiscarded rows of one over all their loops, and nothing else.
func TestPlanFaults(t *testing.T) {
	big := map[string]bool{"blocks": true}
	for _, c := range []struct {
		name, tree, jit string
		want            string // a fault containing this; "" for none
	}{
		{"index lookup", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Actual Loops": 1}`, "", ""},
		{"JIT", `{"Node Type": "Result"}`, `{"Functions": 1}`, "JIT-compiled"},
		{"seq scan of a big table", `{"Node Type": "Limit", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "blocks"}]}`, "", "sequential scan of blocks"},
		{"seq scan of a small table", `{"Node Type": "Seq Scan", "Relation Name": "chain_heads"}`, "", ""},
		{"index read whole", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Actual Loops": 1, "Rows Removed by Filter": 20000}`, "", "read 20000 rows it discarded"},
		{"discards per loop add up", `{"Node Type": "Nested Loop", "Plans": [{"Node Type": "Index Scan", "Relation Name": "blocks", "Actual Loops": 200, "Rows Removed by Filter": 100}]}`, "", "read 20000 rows"},
		{"a few discarded", `{"Node Type": "Index Scan", "Relation Name": "blocks", "Actual Loops": 10, "Rows Removed by Filter": 10}`, "", ""},
		{"discards of a small table", `{"Node Type": "Index Scan", "Relation Name": "chain_heads", "Actual Loops": 1, "Rows Removed by Filter": 50000}`, "", ""},
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
