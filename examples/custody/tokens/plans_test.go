package tokens

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/refsettest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walletSize is the wallet of the plan guards: what an owner holds in service.
const walletSize = 100_000

// custodyTables are the tables that grow with the tokens: no hot path may read one
// whole.
var custodyTables = []string{"tokens", "token_owners", "token_locks", "token_history"}

// Payments from a wallet of 100,000 tokens keep their plans whatever the statistics
// say: before the tables were ever analyzed, once they are, and after the wallet grew
// past what ANALYZE saw. Every statement the payments run on the server, the ones
// inside custody's functions and the triggers' included, is logged with its plan by
// auto_explain (refsettest.PlanGuard); none may be JIT-compiled (20 – 25 ms a call,
// more than the payment itself: PostgreSQL compiles per execution, so a cached plan
// estimated above jit_above_cost pays it on every call), and none may read a custody
// table whole (a sequential or bitmap scan) or read far more of one than its rows
// need (refsettest.AssertPlans).
func TestPaymentPlansOnLargeWallet(t *testing.T) {
	t.Parallel() // a schema and a session of its own; it waits on the server mostly
	ctx := t.Context()
	log, db, plain := refsettest.PlanGuard(t)
	v := openVault(t, db, Config{})
	// Statistics come only from the test's ANALYZE, not from autovacuum behind its back.
	for _, table := range custodyTables {
		_, err := plain.ExecContext(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`)
		require.NoError(t, err)
	}
	grow := func() {
		t.Helper()
		explaining(t, db.Pool().DB, false)
		defer explaining(t, db.Pool().DB, true)
		for range walletSize / 10_000 {
			toks := make([]Token, 10_000)
			for i := range toks {
				toks[i] = gbp("whale", 1+int64(i%5))
			}
			_, err := v.Issue(ctx, newTx(), toks...)
			require.NoError(t, err)
		}
	}
	grow()

	for _, phase := range []struct {
		name   string
		before func()
	}{
		{"never analyzed", func() {}},
		{"analyzed", func() {
			_, err := plain.ExecContext(ctx, `ANALYZE tokens; ANALYZE token_owners; ANALYZE token_locks; ANALYZE token_history`)
			require.NoError(t, err)
		}},
		{"grown past its statistics", grow},
	} {
		t.Run(phase.name, func(t *testing.T) {
			phase.before()
			logged := log.PlansOf(t, func() {
				for range 6 { // more than the plan cache's five custom plans
					_, _, err := v.Pay(ctx, newTx(), "whale", gbp("minnow", 7))
					require.NoError(t, err)
					tx := newTx()
					locked, err := v.Select(ctx, tx, "whale", 7, Filter{Identifier: "GBP"}, time.Minute)
					require.NoError(t, err)
					_, _, err = v.Spend(ctx, tx, WithChange(locked, "whale", gbp("minnow", 7)))
					require.NoError(t, err)
				}
			})
			var claims int
			bitmap := map[string]string{}
			for _, p := range logged {
				if strings.Contains(p.Query, "SKIP LOCKED") {
					claims++
				}
				for _, n := range p.Nodes() {
					if n.Type == "Bitmap Heap Scan" {
						bitmap[p.Query] = n.Relation
					}
				}
			}
			assert.GreaterOrEqual(t, claims, 12, "auto_explain logged no claim: the guard sees nothing (%d plans)", len(logged))
			refsettest.AssertPlans(t, phase.name, logged, custodyTables...)
			assert.Empty(t, bitmap, "bitmap scans, which read every page the index names")
			assert.Empty(t, log.Unparsed(), "auto_explain messages that did not parse")
		})
	}
	audit(t, v)
}

// explaining starts (on) or stops auto_explain's logging on the one session of a
// refsettest.PlanGuard's database: a load's plans are noise, and logging every row's
// statements would make it slow.
func explaining(t *testing.T, pool *sql.DB, on bool) {
	t.Helper()
	setting := "-1"
	if on {
		setting = "0"
	}
	_, err := pool.ExecContext(t.Context(), `SET auto_explain.log_min_duration = `+setting)
	require.NoError(t, err)
}
