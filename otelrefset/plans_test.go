package otelrefset_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/otelrefset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

// On PostgreSQL, with a review queue of 30,000 entries, 30 of them due, and
// statistics, a collection of the queue gauges is one statement that reads no more of
// the queue than DefaultCountCap entries and those due: no sequential scan but one a
// Limit stops, no index read end to end, no JIT (pgtest.PlanFaults). The depth it
// reports is the planner's estimate, the overdue entries exact.
func TestQueueGaugesPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 30,000 objects and queue entries")
	}
	const entries, due = 30_000, 30
	ctx := t.Context()
	log, pool, plain := pgtest.PlanGuard(t, 1)
	conn, err := plain.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	exec := pgtest.Exec(t, conn)
	exec(`CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
	db, err := postgres.New(ctx, pool, postgres.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
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

	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := otelrefset.New(mp.Meter("refset-test"))
	require.NoError(t, err)
	require.NoError(t, obs.WatchQueue(c))
	var m map[string]metricdata.Aggregation
	plans := log.PlansOf(t, func() { m = metrics(t, r) })
	require.Len(t, plans, 1, "one statement a collection")
	pgtest.ReportFaults(t, "queue gauges", plans, map[string]bool{"items": true, "items_review": true})
	require.Empty(t, log.Unparsed())

	table := "table=" + c.Table()
	depth := gauges(t, m["refset.queue.depth"])
	require.Contains(t, depth, table)
	require.InEpsilon(t, entries, depth[table], 0.1, "the planner's estimate")
	require.Equal(t, map[string]int64{table: due}, gauges(t, m["refset.queue.overdue"]), "counted over the index")
}
