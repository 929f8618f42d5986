package otelrefset_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/otelrefset"
	"github.com/refsetdb/refset/refset"
)

// The zero Observer works: it records into the global MeterProvider, as
// OpenTelemetry's instrumentation libraries do without a meter of their own. A nil
// one records nothing and does not panic, and WatchQueue refuses a nil Observer or a
// Collector that no Install made with ErrInvalidConfig.
func TestZeroObserver(t *testing.T) {
	r := sdkmetric.NewManualReader()
	saved := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)))
	t.Cleanup(func() { otel.SetMeterProvider(saved) })

	var zero otelrefset.Observer
	zero.Added(context.Background(), 3)
	zero.Conflicted(context.Background(), nil)
	got := metrics(t, r)
	require.Contains(t, got, "refset.adds")
	assert.Equal(t, map[string]int64{"": 3}, sums(t, got["refset.adds"]))
	assert.Equal(t, map[string]int64{"": 1}, sums(t, got["refset.conflicts"]))

	var none *otelrefset.Observer
	var obs refset.Observer = none
	assert.NotPanics(t, func() {
		obs.Added(context.Background(), 1)
		obs.HandedOver(context.Background(), 0, nil)
		obs.Retried(context.Background(), nil)
		obs.Conflicted(context.Background(), nil)
		obs.Collected(context.Background(), 1, 1, 1, 0)
		obs.ReadFellBack(context.Background(), "get", "missing")
	})

	for name, watch := range map[string]func() error{
		"nil Observer":     func() error { return none.WatchQueue(&cleanup.Collector{}) },
		"nil Collector":    func() error { return zero.WatchQueue(nil) },
		"unmade Collector": func() error { return zero.WatchQueue(&cleanup.Collector{}) },
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = watch() })
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
		})
	}
}

// New refuses a nil meter with ErrInvalidConfig, as WatchQueue refuses a nil
// Observer. Before, it panicked: "runtime error: invalid memory address or nil
// pointer dereference" in make's first instrument.
func TestNewRefusesANilMeter(t *testing.T) {
	for name, meter := range map[string]metric.Meter{
		"nil":         nil,
		"nil pointer": (*noopMeter)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			var o *otelrefset.Observer
			var err error
			require.NotPanics(t, func() { o, err = otelrefset.New(meter) })
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			assert.Nil(t, o)
		})
	}
}

// noopMeter is a meter whose nil pointer is a nil meter.
type noopMeter struct{ noop.Meter }
