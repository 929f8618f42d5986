package testlog

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Records written from many goroutines at once, while the test reads what was
// written, are all kept, whole, and only those at the logger's level and above.
func TestConcurrentRecords(t *testing.T) {
	log, out := New(slog.LevelInfo)
	const writers, each = 8, 100
	var wg sync.WaitGroup
	done := make(chan struct{})
	read := make(chan struct{})
	go func() { // a test that polls the output while the code under test still logs
		defer close(read)
		for {
			select {
			case <-done:
				return
			default:
				_ = out.String()
			}
		}
	}()
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				log.Info("record", "writer", w, "i", i)
				log.Debug("hidden")
			}
		})
	}
	wg.Wait()
	close(done)
	<-read
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != writers*each {
		t.Fatalf("%d lines, want %d", len(lines), writers*each)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var w, i int
		if _, err := fmt.Sscanf(l[strings.Index(l, "writer="):], "writer=%d i=%d", &w, &i); err != nil {
			t.Fatalf("a record torn or mixed with another: %q", l)
		}
		seen[fmt.Sprint(w, i)] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct records, want %d", len(seen), writers*each)
	}
}
