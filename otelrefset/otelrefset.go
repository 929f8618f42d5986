package otelrefset

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
)

// Observer is a refset.Observer that records into OpenTelemetry instruments. Give it
// to a store's Options.Observer; it is safe for concurrent use. New makes one on a
// meter of your choice; the zero value makes its instruments, on first use, on the
// global MeterProvider's meter for this package (otel.Meter), as OpenTelemetry's
// instrumentation libraries do by default. A nil *Observer records nothing.
type Observer struct {
	ready sync.Once // the instruments are made
	meter metric.Meter

	adds       metric.Int64Counter
	handovers  metric.Int64Counter
	handoverS  metric.Float64Histogram
	retries    metric.Int64Counter
	conflicts  metric.Int64Counter
	collected  metric.Int64Counter
	expired    metric.Int64Counter
	batches    metric.Int64Histogram
	fallbacks  metric.Int64Counter
	queueDepth metric.Int64ObservableGauge
	overdue    metric.Int64ObservableGauge

	watchMu sync.Mutex
	watched map[string]*atomic.Pointer[cleanup.Collector] // WatchQueue's, by table
}

var _ refset.Observer = (*Observer)(nil)

// scope is the instrumentation scope of the zero Observer's meter.
const scope = "github.com/refsetdb/refset/otelrefset"

// The result attribute of refset.handovers, made once: the hot path allocates none.
var (
	resultOK    = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ok")))
	resultError = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "error")))
)

// New makes refset's instruments on meter. Its error is the meter's, for an
// instrument it refused, or refset.ErrInvalidConfig for a nil meter (use the zero
// Observer for the global MeterProvider's).
func New(meter metric.Meter) (*Observer, error) {
	if meter == nil {
		return nil, fmt.Errorf("refset/otel: new: %w: a nil metric.Meter; pass one of a MeterProvider, or use the zero Observer for the global one", refset.ErrInvalidConfig)
	}
	if v := reflect.ValueOf(meter); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("refset/otel: new: %w: a nil %T", refset.ErrInvalidConfig, meter)
	}
	o := &Observer{}
	var err error
	o.ready.Do(func() { err = o.make(meter) })
	if err != nil {
		return nil, fmt.Errorf("refset/otel: new: %w", err)
	}
	return o, nil
}

// use is o with its instruments made: a zero Observer makes them on the global
// MeterProvider's meter (an instrument it refuses records nothing); nil for a nil o.
func (o *Observer) use() *Observer {
	if o == nil {
		return nil
	}
	o.ready.Do(func() {
		if err := o.make(otel.Meter(scope)); err != nil {
			otel.Handle(fmt.Errorf("refset/otel: %w", err))
		}
	})
	return o
}

// make makes the instruments on meter; one it refuses is a no-op instrument, and the
// error says which.
func (o *Observer) make(meter metric.Meter) error {
	var err error
	counter := func(name, unit, description string) metric.Int64Counter {
		c, e := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
		if err = errors.Join(err, e); c == nil {
			c = noop.Int64Counter{}
		}
		return c
	}
	gauge := func(name, description string) metric.Int64ObservableGauge {
		g, e := meter.Int64ObservableGauge(name, metric.WithUnit("{entry}"), metric.WithDescription(description))
		if err = errors.Join(err, e); g == nil {
			g = noop.Int64ObservableGauge{}
		}
		return g
	}
	o.meter = meter
	o.adds = counter("refset.adds", "{object}", "Objects stored by committed Add and AddAll calls.")
	o.handovers = counter("refset.handovers", "{handover}", "Complete and CompleteTx calls that ran their commands, by result (ok, error).")
	o.retries = counter("refset.retries", "{retry}", "Transactions the database aborted that refset ran again, by cause.")
	o.conflicts = counter("refset.conflicts", "{conflict}", "Conflicts that outlasted the retries and reached the caller.")
	o.collected = counter("refset.collected", "{object}", "Objects clean-up deleted.")
	o.expired = counter("refset.holds.expired", "{hold}", "Expired holds clean-up removed.")
	o.fallbacks = counter("refset.replica.fallbacks", "{read}",
		"Reads meant for the replica (a hot standby) that the primary answered, by read and reason (missing, behind, failed).")
	o.queueDepth = gauge("refset.queue.depth", fmt.Sprintf(
		"Entries in a set's review queue: exact up to %d, the database's estimate past it.", cleanup.DefaultCountCap))
	o.overdue = gauge("refset.queue.overdue", "Review queue entries due now: what the next Collect reviews.")
	var e error
	o.handoverS, e = meter.Float64Histogram("refset.handover.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a hand-over's commands took, retries included."))
	if err = errors.Join(err, e); o.handoverS == nil {
		o.handoverS = noop.Float64Histogram{}
	}
	o.batches, e = meter.Int64Histogram("refset.collect.batches", metric.WithUnit("{batch}"),
		metric.WithDescription("Batch transactions per Collect that committed any."))
	if err = errors.Join(err, e); o.batches == nil {
		o.batches = noop.Int64Histogram{}
	}
	return err
}

// Added counts n objects in refset.adds.
func (o *Observer) Added(ctx context.Context, n int) {
	if o = o.use(); o != nil {
		o.adds.Add(ctx, int64(n))
	}
}

// HandedOver counts a hand-over in refset.handovers and records its latency.
func (o *Observer) HandedOver(ctx context.Context, took time.Duration, err error) {
	if o = o.use(); o == nil {
		return
	}
	result := resultOK
	if err != nil {
		result = resultError
	}
	o.handovers.Add(ctx, 1, result)
	o.handoverS.Record(ctx, took.Seconds(), result)
}

// causes are the sentinels a retry's cause attribute names, most specific first.
var causes = []error{refset.ErrConflict, refset.ErrTimeout, refset.ErrUnavailable}

// causeOf is the text of the first of causes that err matches, or "other".
func causeOf(err error) string {
	for _, c := range causes {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return "other"
}

// Retried counts a retry in refset.retries, with its cause's sentinel text.
func (o *Observer) Retried(ctx context.Context, cause error) {
	if o = o.use(); o == nil {
		return
	}
	o.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("cause", causeOf(cause))))
}

// Conflicted counts a lasting conflict in refset.conflicts.
func (o *Observer) Conflicted(ctx context.Context, _ error) {
	if o = o.use(); o != nil {
		o.conflicts.Add(ctx, 1)
	}
}

// Collected counts what a Collect did.
func (o *Observer) Collected(ctx context.Context, deleted, holdsExpired int64, batches int, _ time.Duration) {
	if o = o.use(); o == nil {
		return
	}
	o.collected.Add(ctx, deleted)
	o.expired.Add(ctx, holdsExpired)
	o.batches.Record(ctx, int64(batches))
}

// ReadFellBack counts a read the replica could not answer in
// refset.replica.fallbacks, with attributes read and reason.
func (o *Observer) ReadFellBack(ctx context.Context, read, reason string) {
	if o = o.use(); o == nil {
		return
	}
	o.fallbacks.Add(ctx, 1, metric.WithAttributes(attribute.String("read", read), attribute.String("reason", reason)))
}

// QueueTimeout bounds each read of a watched queue (see WatchQueue).
const QueueTimeout = 5 * time.Second

// WatchQueue reports c's review queue in the gauges refset.queue.depth and
// refset.queue.overdue, with attribute table, each time the meter's reader collects:
// one read of the queue per collection (Collector.Queue: one statement on
// PostgreSQL, two on SQLite), which reads at most cleanup.DefaultCountCap entries
// and those due, however long the queue. So the depth is exact up to
// cleanup.DefaultCountCap and, past it, the database's estimate from its statistics
// (or cleanup.DefaultCountCap when it has none); the overdue entries are counted
// exactly. A failed read reports nothing for that table and returns its error to
// the SDK, which reports it to OpenTelemetry's error handler.
//
// A read gives up after QueueTimeout, or at the collection's own deadline if that
// comes first: a reader that collects with no deadline (a ManualReader, an exporter
// that scrapes with context.TODO) would otherwise wait for a hung server for ever,
// and the SDK runs a reader's callbacks one at a time, so every later collection of
// every instrument would wait behind it. The table then reports nothing for that
// collection, and the SDK gets the error.
//
// A table has one series: WatchQueue of a collector whose table is watched already
// makes it the one read, in place of the other (a database opened again after a
// restart). Once the collector's database is closed, its table reports nothing and
// no error. Two databases with a table of the same name need an Observer each, on
// meters whose readers tell them apart.
func (o *Observer) WatchQueue(c *cleanup.Collector) error {
	if o = o.use(); o == nil {
		return fmt.Errorf("refset/otel: watch queue: %w: a nil Observer; make one with otelrefset.New", refset.ErrInvalidConfig)
	}
	if c.Table() == "" {
		return fmt.Errorf("refset/otel: watch queue: %w: the Collector was not made by cleanup.Install, cleanup.Inspect or store.NewCollector", refset.ErrInvalidConfig)
	}
	o.watchMu.Lock()
	defer o.watchMu.Unlock()
	if w, ok := o.watched[c.Table()]; ok {
		w.Store(c)
		return nil
	}
	w := new(atomic.Pointer[cleanup.Collector])
	w.Store(c)
	table := metric.WithAttributeSet(attribute.NewSet(attribute.String("table", c.Table())))
	_, err := o.meter.RegisterCallback(func(ctx context.Context, m metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, QueueTimeout)
		defer cancel()
		depth, overdue, err := w.Load().Queue(ctx)
		if errors.Is(err, refset.ErrClosed) {
			return nil // the service closed the database: no queue left to report
		}
		if err != nil {
			return err
		}
		m.ObserveInt64(o.queueDepth, depth, table)
		m.ObserveInt64(o.overdue, overdue, table)
		return nil
	}, o.queueDepth, o.overdue)
	if err != nil {
		return fmt.Errorf("refset/otel: watch queue of %s: %w", c.Table(), err)
	}
	if o.watched == nil {
		o.watched = map[string]*atomic.Pointer[cleanup.Collector]{}
	}
	o.watched[c.Table()] = w
	return nil
}
