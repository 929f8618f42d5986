package testdb

import (
	"context"
	"maps"
	"sync"

	"github.com/refsetdb/refset/refset"
)

// Fallbacks is an Observer that counts the reads a database with a replica sent to
// the primary (ReadFellBack), as "read/reason", for the tests of a Standby backend.
type Fallbacks struct {
	refset.NoObserver
	mu  sync.Mutex
	got map[string]int
}

func (f *Fallbacks) ReadFellBack(_ context.Context, read, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.got == nil {
		f.got = map[string]int{}
	}
	f.got[read+"/"+reason]++
}

// Take returns the counts so far and starts again from none.
func (f *Fallbacks) Take() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	got := maps.Clone(f.got)
	f.got = nil
	if got == nil {
		got = map[string]int{}
	}
	return got
}
