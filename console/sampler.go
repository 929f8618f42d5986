package console

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/refsetdb/refset/cleanup"
)

// sample is what the sampler read at one time: each set's counts.
type sample struct {
	At   time.Time // the database's clock
	Sets map[string]setSample
}

type setSample struct {
	Objects, Queued, Overdue cleanup.Count
	Collected                int64 // the set's count of objects collected so far
}

// sampler keeps the latest samples, oldest first, up to max of them.
type sampler struct {
	mu      sync.Mutex
	max     int
	samples []sample
	lastErr string
}

func newSampler(max int) *sampler { return &sampler{max: max} }

// run takes a sample at once and then every interval, until ctx ends: one statement
// each (cleanup.Counter), which reads no table whole. A failed sample is logged (once
// per change of error) and skipped: the chart shows the gap.
func (s *sampler) run(ctx context.Context, counter *cleanup.Counter, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.take(ctx, counter, interval, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take takes one sample. It gives it until the next is due: a database that does not
// answer fails the sample, rather than holding the sampler (and Close) until it does.
// A sample cut short because the sampler stopped is no failure, and leaves the last
// error as it was.
func (s *sampler) take(ctx context.Context, counter *cleanup.Counter, interval time.Duration, log *slog.Logger) {
	sampleCtx, cancel := context.WithTimeout(ctx, interval)
	defer cancel()
	st, err := counter.Counts(sampleCtx)
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if err.Error() != s.lastErr {
			log.Warn("refset console: sampling failed", "error", err)
		}
		s.lastErr = err.Error()
		return
	}
	s.lastErr = ""
	smp := sample{At: st.Now, Sets: make(map[string]setSample, len(st.Sets))}
	for _, set := range st.Sets {
		smp.Sets[set.Table] = setSample{Objects: set.Objects, Queued: set.Queued, Overdue: set.Overdue, Collected: set.Collected}
	}
	s.samples = append(s.samples, smp)
	if over := len(s.samples) - s.max; over > 0 {
		s.samples = append(s.samples[:0], s.samples[over:]...)
	}
}

// list returns a copy of the samples and the last error, if the last sample failed.
func (s *sampler) list() ([]sample, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...), s.lastErr
}
