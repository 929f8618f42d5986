package testdb

import (
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
)

// Passes are what a collector running in the background ([RunCollector]) told its
// Run's callback, pass by pass, for a test to read while it runs.
type Passes struct {
	mu       sync.Mutex
	errs     []error
	followed []string
}

func (p *Passes) add(s cleanup.Stats, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.followed = append(p.followed, s.Followed...)
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// Errors are the errors of the passes that failed so far.
func (p *Passes) Errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

// Followed are the references the passes so far began to follow (Stats.Followed).
func (p *Passes) Followed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.followed...)
}

// RunCollector runs c in the background, a pass every interval, until tb ends, and
// fails tb if Run then returns an error (a Run whose context ends returns nil).
func RunCollector(tb testing.TB, c *cleanup.Collector, every time.Duration) *Passes {
	tb.Helper()
	p := &Passes{}
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(tb.Context(), every, p.add) }()
	// tb.Context ends just before the cleanups run; the database closes after this one.
	tb.Cleanup(func() {
		if err := <-stopped; err != nil {
			tb.Errorf("testdb: the collector's Run: %v", err)
		}
	})
	return p
}
