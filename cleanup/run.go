package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/refsetdb/refset/refset"
)

// This file is the schedule: Run, a Collect every interval, and when to give up.

// MaxFailedPasses is how many passes in a row may fail before a Run without onPass
// gives up and returns the last error: with no one to tell, a collector that fails
// on and on must stop rather than hide it. The passes are an interval apart, so a
// database that is unreachable for a moment does not stop it.
const MaxFailedPasses = 5

// Run collects every interval until ctx ends, then returns nil. A batch in flight
// when ctx ends rolls back; nothing is left half done.
//
// onPass, if not nil, is called after every pass with its result, for logging and
// metrics (a pass that ctx cut short after some of its batches committed too, with
// those batches' stats and ctx's error, so that no deletion goes untold); it runs
// between passes, never inside a transaction, so a panic in it leaves nothing open
// (and goes on up through Run). With onPass, Run carries on
// through failing passes: the callback sees each, and may cancel ctx. Without it, Run
// returns the error of the MaxFailedPasses-th failed pass in a row.
//
// Either way Run returns at once on an error no retry mends: the database was closed
// (refset.ErrClosed) or the set's tables or columns are gone (refset.ErrSchema, as
// is a key added since Install that clean-up cannot follow). A key added without an
// index fails each pass with ErrUnindexed, naming the CREATE INDEX to run, until it
// exists (see Collect).
func (c *Collector) Run(ctx context.Context, interval time.Duration, onPass func(Stats, error)) error {
	if err := c.made("run"); err != nil {
		return err
	}
	if interval <= 0 {
		return fmt.Errorf("refset/cleanup: run: %w: Run needs a positive interval, not %v", refset.ErrInvalidConfig, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := 0
	for {
		s, err := c.Collect(ctx)
		if ctx.Err() != nil {
			// A pass that ctx cut short still committed its batches: the callback
			// hears of them, with ctx's error, so that its totals add up.
			if onPass != nil && s.Batches > 0 {
				onPass(s, err)
			}
			return nil
		}
		if onPass != nil {
			onPass(s, err)
		}
		switch {
		case err == nil:
			failed = 0
		case errors.Is(err, refset.ErrClosed) || errors.Is(err, refset.ErrSchema):
			c.log.LogAttrs(ctx, slog.LevelError, "refset/cleanup: run stopped", slog.Any("error", err))
			return fmt.Errorf("refset/cleanup: run stopped: %w", err)
		default:
			failed++
			c.log.LogAttrs(ctx, slog.LevelWarn, "refset/cleanup: pass failed",
				slog.Int("failed_in_a_row", failed), slog.Any("error", err))
			if onPass == nil && failed == MaxFailedPasses {
				c.log.LogAttrs(ctx, slog.LevelError, "refset/cleanup: run stopped", slog.Any("error", err))
				return fmt.Errorf("refset/cleanup: run stopped after %d failed passes in a row, the last: %w", failed, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
