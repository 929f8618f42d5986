package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// planObj is an object of the set the plan guards load: a chain (prev is an edge, as
// in a block manager) with a payload.
type planObj struct {
	Key  string  `db:"id"`
	Prev *string `db:"prev"`
	N    int64   `db:"n"`
}

func (o planObj) ID() string { return o.Key }

// On large, skewed data (120,000 objects, most of them held by one holder, each
// referenced by a root row) every statement refset runs on a set's hot paths, Add
// with a command, Add with a hold, Upgrade and Get, a hand-over that unholds,
// releasing references, collecting garbage and expiring holds, and everything they
// fire (clean-up's triggers, the foreign keys' checks), is planned without JIT and
// reads by key: before the tables have statistics, once ANALYZE gave them some, and
// after they grew fivefold past them (autovacuum is off on these tables so the
// statistics stay stale). The same long-lived sessions run all three phases, so
// plans cached in one (prepared statements, trigger functions) meet the next.
func TestHotPathPlansOnLargeData(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 600,000 objects")
	}
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	log := &pgtest.PlanLog{}
	pool := pgtest.ExplainedPool(t, dsn, log, 1)
	db, err := New(ctx, pool, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = pool.ExecContext(ctx, `
		CREATE TABLE objs (id text PRIMARY KEY, prev text REFERENCES objs (id), n bigint NOT NULL);
		CREATE INDEX objs_prev ON objs (prev);
		CREATE TABLE roots (object_id text PRIMARY KEY REFERENCES objs (id))`)
	require.NoError(t, err)
	setStore, err := store.NewStore[planObj, string](ctx, db, store.Config{Table: "objs"})
	require.NoError(t, err)
	set := refset.New(setStore)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "objs", Grace: time.Hour, BatchSize: 100})
	require.NoError(t, err)
	big := map[string]bool{"objs": true, "roots": true, "objs_holds": true, "objs_review": true}
	for table := range big {
		_, err := pool.ExecContext(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`)
		require.NoError(t, err)
	}

	// load adds n objects numbered from first, each referenced by a root row, and all
	// but every tenth held by "whale": the skew a wallet or a chain's holder makes.
	load := func(first, n int) {
		t.Helper()
		// On the pool's one session, as an application's bulk load would run, but not
		// explained: 600,000 foreign-key checks would be as many plans.
		conn, err := pool.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(ctx, `SET auto_explain.log_min_duration = -1`)
		require.NoError(t, err)
		defer func() {
			_, err := conn.ExecContext(ctx, `SET auto_explain.log_min_duration = 0`)
			require.NoError(t, err)
		}()
		for _, q := range []string{
			`INSERT INTO objs (id, n) SELECT 'bulk-' || i, i FROM generate_series($1::int, $2::int) i`,
			`INSERT INTO roots (object_id) SELECT 'bulk-' || i FROM generate_series($1::int, $2::int) i`,
			`INSERT INTO objs_holds (holder, object_id)
				SELECT 'whale', 'bulk-' || i FROM generate_series($1::int, $2::int) i WHERE i % 10 <> 0`,
		} {
			_, err := conn.ExecContext(ctx, q, first, first+n-1)
			require.NoError(t, err)
		}
	}

	ids := 0
	newObj := func() planObj {
		ids++
		return planObj{Key: fmt.Sprintf("hot-%d", ids), N: int64(ids)}
	}
	root := refset.Exec[string](`INSERT INTO roots (object_id) VALUES ($1)`, 1)
	unroot := refset.Exec[string](`DELETE FROM roots WHERE object_id = $1`, 1)
	// workload runs each hot path more times than the plan cache's five custom plans.
	workload := func() {
		t.Helper()
		for range 8 {
			rooted, err := set.Add(ctx, newObj(), root)
			require.NoError(t, err)
			held, err := set.Add(ctx, newObj(), set.Hold("whale", 0))
			require.NoError(t, err)
			_, err = set.Add(ctx, newObj(), set.Hold("lease", time.Millisecond))
			require.NoError(t, err)

			// A Get that misses: a token of an object this set has not read.
			tok, err := set.Upgrade(ctx, fmt.Sprintf("bulk-%d", 1+ids))
			require.NoError(t, err)
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			require.NotNil(t, lease.Value())

			for tok, cmd := range map[*refset.RefToken[string]]refset.Command[string]{held: set.Unhold("whale"), rooted: unroot} {
				rel, err := tok.Release(cmd)
				require.NoError(t, err)
				acq, err := rel.Acquire()
				require.NoError(t, err)
				_, err = acq.Complete(ctx)
				require.NoError(t, err)
			}

			// What the two releases queued is due now: collect it, and the expired hold.
			_, err = pool.ExecContext(ctx, `UPDATE objs_review SET review_after = now() - interval '1 second'
				WHERE object_id IN ($1, $2)`, rooted.ID(), held.ID())
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond)
			_, err = c.Collect(ctx)
			require.NoError(t, err)
		}
	}

	check := func(phase string) {
		t.Helper()
		pgtest.ReportFaults(t, phase, log.PlansOf(t, workload), big)
	}

	load(1, 120_000)
	check("before ANALYZE")
	for table := range big {
		_, err := pool.ExecContext(ctx, `ANALYZE `+table)
		require.NoError(t, err)
	}
	check("after ANALYZE")
	load(120_001, 480_000)
	check("grown fivefold past the statistics")
	require.Empty(t, log.Unparsed(), "auto_explain messages that did not parse")
}
