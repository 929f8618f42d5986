package otelrefset_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/refsetdb/refset/otelrefset"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// A store opened with an Observer from New reports its work to the meter's
// provider; here a manual reader, where a program would have an exporter.
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)
	obs, err := otelrefset.New(provider.Meter("github.com/refsetdb/refset"))
	if err != nil {
		panic(err)
	}

	dir, _ := os.MkdirTemp("", "otelrefset")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "example.db"), sqlite.Options{Options: store.Options{Observer: obs}})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Writer().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	setStore, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	if err != nil {
		panic(err)
	}
	set := refset.New(setStore)
	if _, err := set.AddAll(ctx, []item{{Key: "a"}, {Key: "b"}}); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			fmt.Println(m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output: refset.adds 2
}
