package otelrefset_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/otelrefset"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

type item struct {
	Key string `db:"id"`
	N   int64  `db:"n"`
}

func (i item) ID() string { return i.Key }

// fixture is one store's database, opened with obs, with a set on table items and
// its collector (one worker, so the batch count is known).
type fixture struct {
	db  refset.Database
	set *refset.RefSet[item, string]
	c   *cleanup.Collector
	// table is the queue gauges' label: Postgres's names the schema.
	table string
}

// open opens a fresh database of b with obs and the fixture on it. The table is made
// on a handle of its own, so obs sees only the test's work.
func open(t *testing.T, b testdb.Backend, obs refset.Observer) fixture {
	t.Helper()
	ctx := t.Context()
	where := b.New(t)
	require.NoError(t, refset.InTx(ctx, where.Open(t, testdb.Options{}), func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
		return err
	}))
	db := where.Open(t, testdb.Options{Observer: obs})
	set, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.NoError(t, err)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items", Grace: time.Millisecond, Workers: 1})
	require.NoError(t, err)
	table := "table=items"
	if where.Schema != "" {
		table = "table=" + where.Schema + ".items"
	}
	return fixture{db: db, set: refset.New(set), c: c, table: table}
}

// newObserver is an Observer on a meter provider of its own, read by the returned
// reader, shut down when the test ends.
func newObserver(t *testing.T) (*otelrefset.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := otelrefset.New(mp.Meter("refset-test"))
	require.NoError(t, err)
	return obs, r
}

// metrics is what r holds now, by instrument name.
func metrics(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sums is a counter's value by its attributes ("" for none, else "key=value").
func sums(t *testing.T, a metricdata.Aggregation) map[string]int64 {
	t.Helper()
	s, ok := a.(metricdata.Sum[int64])
	require.True(t, ok, "want an int64 counter, have %T", a)
	return byLabel(s.DataPoints)
}

func gauges(t *testing.T, a metricdata.Aggregation) map[string]int64 {
	t.Helper()
	g, ok := a.(metricdata.Gauge[int64])
	require.True(t, ok, "want an int64 gauge, have %T", a)
	return byLabel(g.DataPoints)
}

// byLabel adds up the points of each attribute set (a gauge has one a set).
func byLabel(points []metricdata.DataPoint[int64]) map[string]int64 {
	out := map[string]int64{}
	for _, dp := range points {
		out[label(dp.Attributes)] += dp.Value
	}
	return out
}

func label(s attribute.Set) string {
	l := ""
	for _, kv := range s.ToSlice() {
		l += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return l
}

// TestMetricsAfterKnownWork: after three adds, a hand-over that fails once and then
// succeeds, seven retried conflicts (one unit of work that outlasts the retries) and
// a Collect that removes one expired hold and deletes two objects, every instrument
// holds exactly that, on both stores. The retried conflicts are units of work that
// return refset.ErrConflict themselves: InTx retries them as it does the database's,
// and the count is exact where a real race's is not.
func TestMetricsAfterKnownWork(t *testing.T) {
	for _, b := range []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx} {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			obs, r := newObserver(t)
			f := open(t, b, obs)
			require.NoError(t, obs.WatchQueue(f.c))
			set := f.set

			// Three adds: a held object, an unreferenced one, one whose hold expires.
			kept, err := set.Add(ctx, item{Key: "kept", N: 1}, set.Hold("keeper", 0))
			require.NoError(t, err)
			_, err = set.Add(ctx, item{Key: "loose", N: 2})
			require.NoError(t, err)
			_, err = set.Add(ctx, item{Key: "brief", N: 3}, set.Hold("keeper", time.Millisecond))
			require.NoError(t, err)

			// A hand-over that fails once, then succeeds.
			failed := false
			failOnce := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
				if !failed {
					failed = true
					return errors.New("not yet")
				}
				return nil
			})
			rel, err := kept.Release(set.Unhold("keeper"))
			require.NoError(t, err)
			acq, err := rel.Acquire(set.Hold("taker", 0), failOnce)
			require.NoError(t, err)
			_, err = acq.Complete(ctx)
			require.Error(t, err)
			_, err = acq.Complete(ctx)
			require.NoError(t, err)

			// Two retries, then success; five retries, then a lasting conflict.
			runs := 0
			require.NoError(t, refset.InTx(ctx, f.db, func(context.Context, refset.Tx) error {
				if runs++; runs <= 2 {
					return refset.ErrConflict
				}
				return nil
			}))
			err = refset.InTx(ctx, f.db, func(context.Context, refset.Tx) error { return refset.ErrConflict })
			require.ErrorIs(t, err, refset.ErrConflict)

			time.Sleep(30 * time.Millisecond) // past the grace period and the hold's expiry
			m := metrics(t, r)
			assert.Equal(t, map[string]int64{f.table: 3}, gauges(t, m["refset.queue.depth"]), "queue depth before Collect")
			assert.Equal(t, map[string]int64{f.table: 3}, gauges(t, m["refset.queue.overdue"]), "overdue before Collect")

			s, err := f.c.Collect(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(2), s.Deleted, "loose, and brief once its hold expired")

			m = metrics(t, r)
			assert.Equal(t, map[string]int64{"": 3}, sums(t, m["refset.adds"]), "adds")
			assert.Equal(t, map[string]int64{"result=ok": 1, "result=error": 1}, sums(t, m["refset.handovers"]), "hand-overs")
			assert.Equal(t, map[string]int64{"cause=transaction conflict": 7}, sums(t, m["refset.retries"]), "retries")
			assert.Equal(t, map[string]int64{"": 1}, sums(t, m["refset.conflicts"]), "conflicts")
			assert.Equal(t, map[string]int64{"": 2}, sums(t, m["refset.collected"]), "collected")
			assert.Equal(t, map[string]int64{"": 1}, sums(t, m["refset.holds.expired"]), "holds expired")

			lat, ok := m["refset.handover.duration"].(metricdata.Histogram[float64])
			require.True(t, ok, "hand-over duration is a float histogram: %T", m["refset.handover.duration"])
			byResult := map[string]uint64{}
			for _, dp := range lat.DataPoints {
				byResult[label(dp.Attributes)] += dp.Count
				assert.Positive(t, dp.Sum, "a hand-over takes time")
			}
			assert.Equal(t, map[string]uint64{"result=ok": 1, "result=error": 1}, byResult, "hand-over latencies")

			b, ok := m["refset.collect.batches"].(metricdata.Histogram[int64])
			require.True(t, ok, "collect batches is an int histogram: %T", m["refset.collect.batches"])
			require.Len(t, b.DataPoints, 1)
			assert.Equal(t, uint64(1), b.DataPoints[0].Count, "one Collect")
			assert.Equal(t, int64(s.Batches), b.DataPoints[0].Sum, "its batches")
			assert.Equal(t, 2, s.Batches, "one batch did everything, one found nothing")

			assert.Equal(t, map[string]int64{f.table: 0}, gauges(t, m["refset.queue.depth"]), "queue depth after Collect")
			assert.Equal(t, map[string]int64{f.table: 0}, gauges(t, m["refset.queue.overdue"]), "overdue after Collect")
		})
	}
}

// A read that a paused standby cannot answer is counted in refset.replica.fallbacks,
// by read and reason.
func TestReplicaFallbacks(t *testing.T) {
	ctx := t.Context()
	obs, r := newObserver(t)
	db := testdb.Standby.Open(t, testdb.Options{Observer: obs, ReplicaWait: 2 * time.Minute}).(*postgres.DB)
	_, err := db.Pool().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
	require.NoError(t, err)
	setStore, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.NoError(t, err)
	set := refset.New(setStore)
	caughtUp, err := db.ReplicaCaughtUp(ctx) // the table is on the standby
	require.NoError(t, err)
	require.True(t, caughtUp)

	pgtest.PauseReplay(t)
	tok, err := set.Add(ctx, item{Key: "a", N: 1})
	require.NoError(t, err)
	_, err = set.Get(ctx, tok)
	require.NoError(t, err)
	_, err = set.Upgrade(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"read=getreason=missing": 1, "read=hasreason=missing": 1},
		sums(t, metrics(t, r)["refset.replica.fallbacks"]))
}

// On PostgreSQL, with a review queue of 30,000 entries, 30 of them due, and
// statistics, a collection of the queue gauges is one statement that reads no more of
// the queue than DefaultCountCap entries and those due: no sequential scan but one a
// Limit stops, no index read end to end, no JIT (pgtest.PlanFaults). The depth it
// reports is the planner's estimate, the overdue entries exact.
func TestQueueGaugesPlan(t *testing.T) {
	const entries, due = 30_000, 30
	ctx := t.Context()
	log, db, plain := refsettest.PlanGuard(t)
	conn, err := plain.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	exec := pgtest.Exec(t, conn)
	exec(`CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
	_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.NoError(t, err)
	c, err := cleanup.Install(ctx, db, cleanup.Config{Table: "items"})
	require.NoError(t, err)
	// Without triggers: the queue is filled by hand, one entry in a thousand due.
	exec(`SET session_replication_role = replica`)
	exec(`INSERT INTO items (id, n) SELECT 'i-' || i, i FROM generate_series(0, $1::bigint - 1) i`, entries)
	exec(`INSERT INTO items_review (object_id, review_after)
		SELECT 'i-' || i, now() + CASE WHEN i % 1000 = 0 THEN interval '-1 hour' ELSE interval '1 hour' END
		FROM generate_series(0, $1::bigint - 1) i`, entries)
	exec(`RESET session_replication_role`)
	pgtest.AnalyzeSchema(t, conn)

	obs, r := newObserver(t)
	require.NoError(t, obs.WatchQueue(c))
	var m map[string]metricdata.Aggregation
	plans := log.PlansOf(t, func() { m = metrics(t, r) })
	require.Len(t, plans, 1, "one statement a collection")
	refsettest.AssertPlans(t, "queue gauges", plans, "items", "items_review")
	require.Empty(t, log.Unparsed())

	table := "table=" + c.Table()
	depth := gauges(t, m["refset.queue.depth"])
	require.Contains(t, depth, table)
	require.InEpsilon(t, entries, depth[table], 0.1, "the planner's estimate")
	require.Equal(t, map[string]int64{table: due}, gauges(t, m["refset.queue.overdue"]), "counted over the index")
}

// A service that closes its database and opens it again (a restart of its pool, a
// failover) watches the new collector's queue in place of the old one: every
// collection of the meter succeeds, the table keeps one series, and while no open
// database is watched it reports nothing rather than an error at each collection.
func TestWatchQueueAcrossReopen(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		obs, r := newObserver(t)

		where := b.New(t)
		watch := func(n int) refset.Database {
			t.Helper()
			db := where.Open(t, testdb.Options{Observer: obs})
			if n == 1 {
				require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
					return err
				}))
			}
			s, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
			require.NoError(t, err)
			c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items"})
			require.NoError(t, err)
			for i := range n {
				_, err := refset.New(s).Add(ctx, item{Key: string(rune('a'+n)) + string(rune('0'+i)), N: 1})
				require.NoError(t, err)
			}
			require.NoError(t, obs.WatchQueue(c))
			require.NoError(t, obs.WatchQueue(c), "watching twice")
			return db
		}
		depth := func() map[string]int64 {
			t.Helper()
			m := metrics(t, r) // fails on an error of any callback
			if m["refset.queue.depth"] == nil {
				return map[string]int64{}
			}
			return gauges(t, m["refset.queue.depth"])
		}

		first := watch(1)
		table := "table=items"
		if where.Schema != "" {
			table = "table=" + where.Schema + ".items"
		}
		assert.Equal(t, map[string]int64{table: 1}, depth())

		require.NoError(t, first.Close())
		assert.Empty(t, depth(), "a closed database's queue reports nothing")

		watch(2)
		assert.Equal(t, map[string]int64{table: 3}, depth(), "the reopened database's queue, once")
	})
}

// A collection whose reader gives no deadline (a ManualReader, an exporter that
// scrapes with context.TODO) gives up a watched queue on a hung server after
// QueueTimeout, reporting the error; one with a later deadline too. The counters
// still reach the reader, and once the server answers again the queue does. Before,
// the collection waited as long as the server hung: "collection still waiting on the
// hung server after 20s", and the SDK, which runs a reader's callbacks one at a time,
// held every later collection behind it.
func TestWatchQueueOnAHungServer(t *testing.T) {
	for name, deadline := range map[string]time.Duration{"no deadline": 0, "a later deadline": time.Hour} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs, r := newObserver(t)
			freezer, through := refsettest.PostgresFreezer(t, refsettest.PostgresDSN(t))
			db, err := postgres.Open(t.Context(), through, postgres.Options{Options: store.Options{Observer: obs}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
				return err
			}))
			s, err := store.NewStore[item, string](t.Context(), db, store.Config{Table: "items"})
			require.NoError(t, err)
			_, err = refset.New(s).Add(t.Context(), item{Key: "a", N: 1})
			require.NoError(t, err)
			c, err := store.NewCollector(t.Context(), db, cleanup.Config{Table: "items"})
			require.NoError(t, err)
			require.NoError(t, obs.WatchQueue(c))

			freezer.Freeze()
			ctx := context.Background()
			if deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, deadline)
				defer cancel()
			}
			done := make(chan error, 1)
			var rm metricdata.ResourceMetrics
			start := time.Now()
			go func() { done <- r.Collect(ctx, &rm) }()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.DeadlineExceeded, "the queue's read, given up")
				t.Logf("gave up after %v: %v", time.Since(start), err)
				names := map[string]bool{}
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						names[m.Name] = true
					}
				}
				assert.True(t, names["refset.adds"], "the counters are collected all the same")
			case <-time.After(otelrefset.QueueTimeout + 15*time.Second):
				t.Fatalf("collection still waiting on the hung server after %v", time.Since(start))
			}
			freezer.Thaw()
			assert.Equal(t, int64(1), gauges(t, metrics(t, r)["refset.queue.depth"])["table="+c.Table()])
		})
	}
}
