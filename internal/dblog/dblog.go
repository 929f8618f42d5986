// Package dblog is where refset's logs go: the *slog.Logger a database was opened
// with (the stores' Options.Logger), or nowhere. refset logs what an operator wants to
// know without being asked: transactions the database aborted and refset retried,
// commits whose outcome is unknown, statements slower than a threshold, clean-up's
// passes. It never logs to slog's default logger: silent unless given one.
package dblog

import (
	"context"
	"log/slog"
	"time"
)

// Threshold is a store's Options.SlowStatement as refset uses it: zero means one
// second, a negative duration none.
func Threshold(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return time.Second
	case d < 0:
		return 0
	}
	return d
}

// discard is the logger of a database that has none.
var discard = slog.New(slog.DiscardHandler)

// Or is log, or a logger that drops everything when log is nil.
func Or(log *slog.Logger) *slog.Logger {
	if log == nil {
		return discard
	}
	return log
}

// maxStatement bounds how much of a statement a log record carries.
const maxStatement = 300

// Slow logs query, which started at start, if it took longer than threshold.
func Slow(ctx context.Context, log *slog.Logger, threshold time.Duration, query string, start time.Time) {
	if threshold <= 0 {
		return
	}
	if took := time.Since(start); took > threshold {
		if len(query) > maxStatement {
			query = query[:maxStatement] + "..."
		}
		log.LogAttrs(ctx, slog.LevelWarn, "refset: slow statement",
			slog.Duration("duration", took), slog.Duration("threshold", threshold), slog.String("statement", query))
	}
}
