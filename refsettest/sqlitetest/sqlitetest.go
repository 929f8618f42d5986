package sqlitetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/refsetdb/refset/store/sqlite"
)

// openTimeout bounds Open: a file that stays locked fails the test instead of
// hanging it.
const openTimeout = 30 * time.Second

// Open opens a refset database file in tb.TempDir(), with sqlite.Open's defaults,
// and closes it when tb ends. Register later cleanups (a collector's Run, say) after
// this call so they run before the Close.
func Open(tb testing.TB) *sqlite.DB {
	tb.Helper()
	// Not tb.Context() itself: a test may open a database from a t.Cleanup, and
	// tb.Context() is cancelled before cleanups run.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), openTimeout)
	defer cancel()
	db, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "refset.db"), sqlite.Options{})
	if err != nil {
		tb.Fatalf("sqlitetest: open a SQLite database: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("sqlitetest: close the SQLite database: %v", err)
		}
	})
	return db
}
