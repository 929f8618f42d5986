package tokens

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walletSize is the wallet of the plan guards: what an owner holds in service.
const walletSize = 100_000

// Payments from a wallet of 100,000 tokens keep their plans whatever the statistics
// say: before the tables were ever analyzed, once they are, and after the wallet grew
// past what ANALYZE saw. Every statement the payments run on the server, the ones
// inside custody's functions and the triggers' included, is logged with its plan by
// auto_explain (on the test's one connection); none may be JIT-compiled (20 – 25 ms a
// call, more than the payment itself: PostgreSQL compiles per execution, so a cached
// plan estimated above jit_above_cost pays it on every call) and none may read a
// custody table whole (a sequential or bitmap scan).
func TestPaymentPlansOnLargeWallet(t *testing.T) {
	ctx := t.Context()
	plans := &planLog{}
	db := explainedDB(t, plans)
	v := openVault(t, db, Config{})
	pool := db.Pool().DB
	// Statistics come only from the test's ANALYZE, not from autovacuum behind its back.
	for _, table := range []string{"tokens", "token_owners", "token_locks", "token_history"} {
		_, err := pool.ExecContext(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`)
		require.NoError(t, err)
	}
	grow := func() {
		t.Helper()
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
			_, err := pool.ExecContext(ctx, `ANALYZE tokens; ANALYZE token_owners; ANALYZE token_locks; ANALYZE token_history`)
			require.NoError(t, err)
		}},
		{"grown past its statistics", grow},
	} {
		t.Run(phase.name, func(t *testing.T) {
			phase.before()
			plans.start(t, pool)
			for range 6 { // more than the plan cache's five custom plans
				_, _, err := v.Pay(ctx, newTx(), "whale", gbp("minnow", 7))
				require.NoError(t, err)
				tx := newTx()
				locked, err := v.Select(ctx, tx, "whale", 7, Filter{Identifier: "GBP"}, time.Minute)
				require.NoError(t, err)
				_, _, err = v.Spend(ctx, tx, WithChange(locked, "whale", gbp("minnow", 7)))
				require.NoError(t, err)
			}
			logged := plans.stop(t, pool)

			var claims int
			jitted, whole := map[string]float64{}, map[string]string{}
			for _, p := range logged {
				if strings.Contains(p.Query, "SKIP LOCKED") {
					claims++
				}
				if p.JIT != nil {
					jitted[p.Query] = p.Plan.TotalCost
				}
				for _, scan := range p.Plan.scans() {
					if scan.NodeType == "Seq Scan" || scan.NodeType == "Bitmap Heap Scan" {
						whole[p.Query] = scan.NodeType + " on " + scan.Relation
					}
				}
			}
			assert.GreaterOrEqual(t, claims, 12, "auto_explain logged no claim: the guard sees nothing (%d plans)", len(logged))
			assert.Empty(t, jitted, "JIT-compiled on every call (estimated cost by statement; jit_above_cost %s)", plans.jitAbove)
			assert.Empty(t, whole, "statements reading a table whole")
		})
	}
	audit(t, v)
}

// explainedDB is a database of one connection on a fresh schema, whose statements,
// nested ones included, auto_explain logs (in JSON, to plans) while plans is started.
// Loading auto_explain takes a superuser, which the test servers are.
func explainedDB(t *testing.T, plans *planLog) *postgres.DB {
	t.Helper()
	config, err := pgx.ParseConfig(refsettest.PostgresDSN(t))
	require.NoError(t, err)
	config.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { plans.add(n.Message) }
	pool := stdlib.OpenDB(*config, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `LOAD 'auto_explain'`)
		return err
	}))
	pool.SetMaxOpenConns(1)
	t.Cleanup(func() { pool.Close() })
	db, err := postgres.New(t.Context(), pool, postgres.Options{})
	require.NoError(t, err, "auto_explain needs a superuser")
	t.Cleanup(func() { db.Close() })
	return db
}

// planLog collects auto_explain's plans while started.
type planLog struct {
	mu       sync.Mutex
	on       bool
	plans    []explained
	jitAbove string
}

// explained is one statement's plan as auto_explain logs it in JSON.
type explained struct {
	Query string    `json:"Query Text"`
	Plan  planNode  `json:"Plan"`
	JIT   *struct{} `json:"JIT"`
}

type planNode struct {
	NodeType  string  `json:"Node Type"`
	Relation  string  `json:"Relation Name"`
	TotalCost float64 `json:"Total Cost"`
	// ActualRows is what the node returned over all its loops, with
	// auto_explain.log_analyze (claim_test.go counts the rows a claim locked).
	ActualRows float64    `json:"Actual Rows"`
	Plans      []planNode `json:"Plans"`
}

// scans are the node and its descendants.
func (n planNode) scans() []planNode {
	out := []planNode{n}
	for _, c := range n.Plans {
		out = append(out, c.scans()...)
	}
	return out
}

func (l *planLog) add(message string) {
	_, plan, ok := strings.Cut(message, "plan:")
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	var e explained
	if err := json.Unmarshal([]byte(plan), &e); err != nil {
		e.Query = fmt.Sprintf("unreadable plan (%v): %s", err, plan)
		e.JIT = &struct{}{}
	}
	l.plans = append(l.plans, e)
}

// start logs every statement of the pool's one connection from now on.
func (l *planLog) start(t *testing.T, pool *sql.DB) {
	t.Helper()
	_, err := pool.ExecContext(t.Context(), `SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
		SET auto_explain.log_format = json; SET client_min_messages = log`)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRowContext(t.Context(), `SELECT current_setting('jit_above_cost')`).Scan(&l.jitAbove))
	l.mu.Lock()
	l.on, l.plans = true, nil
	l.mu.Unlock()
}

// stop ends the logging and returns the plans logged since start.
func (l *planLog) stop(t *testing.T, pool *sql.DB) []explained {
	t.Helper()
	_, err := pool.ExecContext(t.Context(), `SET auto_explain.log_min_duration = -1; SET client_min_messages = notice`)
	require.NoError(t, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return l.plans
}
