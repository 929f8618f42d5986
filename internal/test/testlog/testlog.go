// Package testlog is a logger whose output a test reads: the records a store, a
// collector or a component under test writes from its own goroutines, kept as text
// until the test asks.
package testlog

import (
	"log/slog"
	"strings"
	"sync"
)

// Buffer is a logger's output, safe for the goroutines of the code under test.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is all that was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// New is a text logger of the records at level and above, and the Buffer it writes
// them to.
func New(level slog.Level) (*slog.Logger, *Buffer) {
	out := &Buffer{}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level})), out
}
