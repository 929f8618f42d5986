package dblog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

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
