package otelrefset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
)

// Observer is a refset.Observer that records into OpenTelemetry instruments. Give it
// to a store's Options.Observer; it is safe for concurrent use.
type Observer struct {
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
}

var _ refset.Observer = (*Observer)(nil)

// The result attribute of refset.handovers, made once: the hot path allocates none.
var (
	resultOK    = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ok")))
	resultError = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "error")))
)

// New makes refset's instruments on meter. Its error is the meter's, for an
// instrument it refused.
func New(meter metric.Meter) (*Observer, error) {
	o := &Observer{meter: meter}
	var err, e error
	o.adds, e = meter.Int64Counter("refset.adds", metric.WithUnit("{object}"),
		metric.WithDescription("Objects stored by committed Add and AddAll calls."))
	err = errors.Join(err, e)
	o.handovers, e = meter.Int64Counter("refset.handovers", metric.WithUnit("{handover}"),
		metric.WithDescription("Complete and CompleteTx calls that ran their commands, by result (ok, error)."))
	err = errors.Join(err, e)
	o.handoverS, e = meter.Float64Histogram("refset.handover.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a hand-over's commands took, retries included."))
	err = errors.Join(err, e)
	o.retries, e = meter.Int64Counter("refset.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Transactions the database aborted that refset ran again, by cause."))
	err = errors.Join(err, e)
	o.conflicts, e = meter.Int64Counter("refset.conflicts", metric.WithUnit("{conflict}"),
		metric.WithDescription("Conflicts that outlasted the retries and reached the caller."))
	err = errors.Join(err, e)
	o.collected, e = meter.Int64Counter("refset.collected", metric.WithUnit("{object}"),
		metric.WithDescription("Objects clean-up deleted."))
	err = errors.Join(err, e)
	o.expired, e = meter.Int64Counter("refset.holds.expired", metric.WithUnit("{hold}"),
		metric.WithDescription("Expired holds clean-up removed."))
	err = errors.Join(err, e)
	o.batches, e = meter.Int64Histogram("refset.collect.batches", metric.WithUnit("{batch}"),
		metric.WithDescription("Batch transactions per successful Collect."))
	err = errors.Join(err, e)
	o.fallbacks, e = meter.Int64Counter("refset.replica.fallbacks", metric.WithUnit("{read}"),
		metric.WithDescription("Reads meant for the replica (a hot standby) that the primary answered, by read and reason (missing, behind, failed)."))
	err = errors.Join(err, e)
	o.queueDepth, e = meter.Int64ObservableGauge("refset.queue.depth", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries in a set's review queue."))
	err = errors.Join(err, e)
	o.overdue, e = meter.Int64ObservableGauge("refset.queue.overdue", metric.WithUnit("{entry}"),
		metric.WithDescription("Review queue entries due now: what the next Collect reviews."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("refset/otel: new: %w", err)
	}
	return o, nil
}

// Added counts n objects in refset.adds.
func (o *Observer) Added(ctx context.Context, n int) { o.adds.Add(ctx, int64(n)) }

// HandedOver counts a hand-over in refset.handovers and records its latency.
func (o *Observer) HandedOver(ctx context.Context, took time.Duration, err error) {
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
	o.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("cause", causeOf(cause))))
}

// Conflicted counts a lasting conflict in refset.conflicts.
func (o *Observer) Conflicted(ctx context.Context, _ error) { o.conflicts.Add(ctx, 1) }

// Collected counts what a Collect did.
func (o *Observer) Collected(ctx context.Context, deleted, holdsExpired int64, batches int, _ time.Duration) {
	o.collected.Add(ctx, deleted)
	o.expired.Add(ctx, holdsExpired)
	o.batches.Record(ctx, int64(batches))
}

// ReadFellBack counts a read the replica could not answer in
// refset.replica.fallbacks, with attributes read and reason.
func (o *Observer) ReadFellBack(ctx context.Context, read, reason string) {
	o.fallbacks.Add(ctx, 1, metric.WithAttributes(attribute.String("read", read), attribute.String("reason", reason)))
}

// WatchQueue reports c's review queue in the gauges refset.queue.depth and
// refset.queue.overdue, with attribute table, each time the meter's reader collects:
// one read of the queue (Collector.Queue) per collection. A failed read reports
// nothing for that table and returns its error to the SDK, which reports it to
// OpenTelemetry's error handler. Call it once per collector.
func (o *Observer) WatchQueue(c *cleanup.Collector) error {
	table := metric.WithAttributeSet(attribute.NewSet(attribute.String("table", c.Table())))
	_, err := o.meter.RegisterCallback(func(ctx context.Context, m metric.Observer) error {
		depth, overdue, err := c.Queue(ctx)
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
	return nil
}
