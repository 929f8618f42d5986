package dblog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type logging struct {
	log  *slog.Logger
	slow time.Duration
}

func (l logging) Logger() *slog.Logger         { return l.log }
func (l logging) SlowStatement() time.Duration { return l.slow }

func TestOf(t *testing.T) {
	var buf bytes.Buffer
	mine := slog.New(slog.NewTextHandler(&buf, nil))

	log, slow := Of(logging{mine, time.Second})
	if log != mine || slow != time.Second {
		t.Fatalf("Of = %v, %v: want the database's logger and threshold", log, slow)
	}
	for _, db := range []any{nil, struct{}{}, logging{nil, time.Second}} {
		log, slow := Of(db)
		if log.Handler() != slog.DiscardHandler || slow != 0 {
			t.Fatalf("Of(%#v): want a logger that drops everything and no threshold", db)
		}
	}
}

func TestSlow(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := context.Background()

	Slow(ctx, log, time.Hour, "SELECT fast", time.Now())
	Slow(ctx, log, 0, "SELECT unmeasured", time.Now().Add(-time.Hour))
	if buf.Len() != 0 {
		t.Fatalf("logged a statement under the threshold, or with none: %s", buf.String())
	}
	Slow(ctx, log, time.Millisecond, "SELECT "+strings.Repeat("x", 1000), time.Now().Add(-time.Second))
	out := buf.String()
	if !strings.Contains(out, "refset: slow statement") || !strings.Contains(out, "...") || len(out) > 600 {
		t.Fatalf("want one record with the statement cut short, got %q", out)
	}
}
