package cleanup_test

import (
	"context"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Collector that Install or Inspect did not make (the zero value, or nil, as a zero
// blockmanager.Manager's Collector is) has no database: each method fails with
// ErrInvalidConfig naming the calls that make one, or returns nothing, and none
// panics.
func TestUnmadeCollector(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*cleanup.Collector{"zero": {}, "nil": nil} {
		for method, call := range map[string]func() error{
			"Collect": func() error { _, err := c.Collect(ctx); return err },
			"Sweep":   func() error { _, _, err := c.Sweep(ctx); return err },
			"Check":   func() error { _, err := c.Check(ctx); return err },
			"Why":     func() error { _, err := c.Why(ctx, "a"); return err },
			"WhyAll":  func() error { _, err := c.WhyAll(ctx, "a"); return err },
			"Queue":   func() error { _, _, err := c.Queue(ctx); return err },
			"QueueCounts": func() error {
				_, _, err := c.QueueCounts(ctx, cleanup.StatusOptions{})
				return err
			},
			"Run": func() error { return c.Run(ctx, time.Second, nil) },
		} {
			t.Run(name+"/"+method, func(t *testing.T) {
				var err error
				require.NotPanics(t, func() { err = call() })
				require.ErrorIs(t, err, refset.ErrInvalidConfig)
				assert.Contains(t, err.Error(), "cleanup.Install")
			})
		}
		t.Run(name+"/Table", func(t *testing.T) { assert.Empty(t, c.Table()) })
		t.Run(name+"/References", func(t *testing.T) { assert.Empty(t, c.References()) })
	}
}
