package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadEvents(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      []event
		done      bool
		err       string
	}{
		{name: "empty"},
		{name: "a kill and its restart, then done",
			log: "kill 100.5 109.25 ok\nrestart 120 124 ok\n\ndone\n",
			want: []event{{kind: "kill", start: time.Unix(100, 5e8), end: time.Unix(109, 25e7), ok: true},
				{kind: "restart", start: time.Unix(120, 0), end: time.Unix(124, 0), ok: true}},
			done: true},
		{name: "a failed switchover", log: "switchover 1 2 failed\n",
			want: []event{{kind: "switchover", start: time.Unix(1, 0), end: time.Unix(2, 0)}}},
		{name: "an unknown event", log: "reboot 1 2 ok\n", err: "unknown event"},
		{name: "a field missing", log: "kill 1 2\n", err: "want KIND START END STATUS"},
		{name: "not a time", log: "kill soon 2 ok\n", err: "invalid syntax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.log")
			require.NoError(t, os.WriteFile(path, []byte(tc.log), 0o600))
			events, done, err := readEvents(path)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.done, done)
			require.Len(t, events, len(tc.want))
			for i, e := range events {
				assert.Equal(t, tc.want[i].kind, e.kind)
				assert.Equal(t, tc.want[i].ok, e.ok)
				assert.WithinDuration(t, tc.want[i].start, e.start, time.Microsecond)
				assert.WithinDuration(t, tc.want[i].end, e.end, time.Microsecond)
			}
		})
	}
}

// TestRecoveries: an event's outage is the longest time without a successful write
// from its start to the next event's, or on to the next write when the clients had
// not recovered when the script saw the event through; its unknown and failed
// operations are those that ended in that window.
func TestRecoveries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ops := func(acks ...float64) []op {
		var out []op
		for _, a := range acks {
			out = append(out, op{Outcome: acked, End: at(a)})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		ops       []op
		events    []event
		outages   []float64
		recovered []bool
		unknown   []int
	}{
		{name: "writes stop at the kill and resume after the script returns",
			ops:     append(ops(1, 2, 9.5, 10), op{Outcome: unknown, End: at(3)}, op{Outcome: failed, End: at(4)}),
			events:  []event{{kind: "kill", start: at(2.5), end: at(9), ok: true}},
			outages: []float64{7}, recovered: []bool{true}, unknown: []int{1}},
		{name: "counted from the event's start, when writes had stopped before it",
			ops:     ops(1, 5, 6),
			events:  []event{{kind: "switchover", start: at(3), end: at(4), ok: true}},
			outages: []float64{2}, recovered: []bool{true}, unknown: []int{0}},
		{name: "each event's window ends where the next begins",
			ops: ops(1, 4, 5, 12, 13),
			events: []event{{kind: "kill", start: at(2), end: at(3.5), ok: true},
				{kind: "restart", start: at(6), end: at(11), ok: true}},
			outages: []float64{2, 6}, recovered: []bool{true, true}, unknown: []int{0, 0}},
		{name: "writes back only after the next event began: the kill's outage runs on",
			ops: ops(1, 2, 16, 17),
			events: []event{{kind: "kill", start: at(3), end: at(10), ok: true},
				{kind: "restart", start: at(10), end: at(12), ok: true}},
			outages: []float64{13, 6}, recovered: []bool{true, true}, unknown: []int{0, 0}},
		{name: "no write after the event: down until the soak's end",
			ops:     ops(1, 2),
			events:  []event{{kind: "kill", start: at(3), end: at(5), ok: true}},
			outages: []float64{17}, recovered: []bool{false}, unknown: []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := recoveries(tc.events, tc.ops, t0, at(20))
			require.Len(t, got, len(tc.events))
			for i, r := range got {
				assert.InDelta(t, tc.outages[i], r.outage.Seconds(), 1e-6, "event %d's outage", i)
				assert.Equal(t, tc.recovered[i], r.recovered, "event %d recovered", i)
				assert.Equal(t, tc.unknown[i], r.unknown, "event %d's unknown commits", i)
			}
		})
	}
}

// TestChecksSeeWhatIsWrong runs a short soak on one PostgreSQL server (no
// failover), on each driver: every check must pass. Then it breaks, one at a time,
// what each check guards (an operation's record or the rows it left) and requires
// the checks to say so, which proves they can fail; what can be put back is,
// and the checks pass again.
func TestChecksSeeWhatIsWrong(t *testing.T) {
	for _, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
		t.Run(driver, func(t *testing.T) {
			dsn, schema := pgtest.New(t)
			ctx := t.Context()
			cfg := config{dsn: dsn, schema: schema, driver: driver, clients: 4, duration: 2 * time.Second,
				pause: time.Millisecond, opTimeout: 30 * time.Second}
			w, err := setUp(ctx, cfg, nil)
			require.NoError(t, err)
			t.Cleanup(w.close)
			ops := w.run(ctx, cfg)
			kinds := map[string]int{}
			for _, o := range ops {
				if o.Outcome == acked {
					kinds[o.Kind]++
				}
			}
			for _, k := range []string{"receive", "pay", "select", "spend"} {
				require.Positive(t, kinds[k], "acknowledged %s operations", k)
			}
			clean := func(t *testing.T, ops []op) {
				t.Helper()
				v, err := w.verify(ctx, cfg, ops)
				require.NoError(t, err)
				assert.Zero(t, v.ackedLost, "acknowledged lost: %v", v.lost)
				assert.Zero(t, v.failedPresent, "failed yet present: %v", v.present)
				assert.True(t, v.audit.Balanced(), "%+v", v.audit)
				assert.Empty(t, v.chain)
				assert.Empty(t, v.books)
				assert.Zero(t, v.leaked+v.dangling)
			}
			clean(t, ops)

			exec := func(t *testing.T, query string, args ...any) {
				t.Helper()
				_, err := w.db.Pool().ExecContext(ctx, query, args...)
				require.NoError(t, err, query)
			}
			first := func(t *testing.T, kind string) int {
				for i, o := range ops {
					if o.Kind == kind && o.Outcome == acked {
						return i
					}
				}
				t.Fatalf("no acknowledged %s", kind)
				return -1
			}
			var tip string
			require.NoError(t, w.db.Pool().QueryRowContext(ctx, `SELECT header_signature FROM blocks b
				WHERE previous_block_ref IS NOT NULL AND header_signature <> (SELECT chain_head FROM chain_heads)
				AND NOT EXISTS (SELECT 1 FROM blocks c WHERE c.previous_block_ref = b.header_signature) LIMIT 1`).Scan(&tip))
			for _, tc := range []struct {
				name         string
				ops          func(*testing.T, []op) []op // the record as the soak would have it
				break_, mend string                      // SQL that breaks what a check guards, and puts it back
				want         func(*verdict) bool
			}{
				{name: "an acknowledged operation that is not there",
					ops: func(_ *testing.T, o []op) []op {
						return append(o, op{ID: "receive:nowhere", Kind: "receive", Key: "nowhere", Outcome: acked})
					},
					want: func(v *verdict) bool { return v.ackedLost == 1 }},
				{name: "a failed payment that is there",
					ops:  func(t *testing.T, o []op) []op { o[first(t, "pay")].Outcome = failed; return o },
					want: func(v *verdict) bool { return v.failedPresent == 1 }},
				{name: "a failed spend that is there",
					ops:  func(t *testing.T, o []op) []op { o[first(t, "spend")].Outcome = failed; return o },
					want: func(v *verdict) bool { return v.failedPresent == 1 }},
				{name: "a hand-over half done: a block neither pending nor linked",
					break_: `UPDATE blocks SET previous_block_ref = NULL WHERE header_signature = '` + tip + `'`,
					mend:   `UPDATE blocks SET previous_block_ref = previous_block_id WHERE header_signature = '` + tip + `'`,
					want:   func(v *verdict) bool { return hasProblem(v.chain, "neither pending nor linked") }},
				{name: "a head fork choice would not pick",
					break_: `UPDATE chain_heads SET chain_head = 'genesis'`,
					mend:   `UPDATE chain_heads SET chain_head = (SELECT header_signature FROM blocks WHERE header_signature <> 'genesis' AND previous_block_ref IS NOT NULL ORDER BY block_num DESC, header_signature LIMIT 1)`,
					want:   func(v *verdict) bool { return hasProblem(v.chain, "fork choice says") }},
				{name: "value created out of nothing",
					break_: `INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount) VALUES ('forged', 'alice', 'fiat', 'GBP', 'bank', 'notary', 5);
						INSERT INTO token_owners (token_id) VALUES ('forged')`,
					mend: `DELETE FROM token_owners WHERE token_id = 'forged'; DELETE FROM tokens WHERE id = 'forged'`,
					want: func(v *verdict) bool { return v.audit.Unconserved == 1 && !v.audit.Balanced() }},
				{name: "a tip missing from the fork cache (last: its hold is not put back)",
					break_: `DELETE FROM blocks_holds WHERE object_id = '` + tip + `'`,
					want:   func(v *verdict) bool { return hasProblem(v.chain, "not in the fork cache") }},
			} {
				t.Run(tc.name, func(t *testing.T) {
					broken := append([]op(nil), ops...)
					if tc.ops != nil {
						broken = tc.ops(t, broken)
					}
					if tc.break_ != "" {
						exec(t, tc.break_)
					}
					v, err := w.verify(ctx, cfg, broken)
					require.NoError(t, err)
					require.True(t, tc.want(v), "the checks missed it: %+v", v)
					if tc.mend != "" {
						exec(t, tc.mend)
					}
					if tc.break_ == "" || tc.mend != "" {
						clean(t, ops)
					}
				})
			}
		})
	}
}

func hasProblem(problems []string, part string) bool {
	for _, p := range problems {
		if strings.Contains(p, part) {
			return true
		}
	}
	return false
}
