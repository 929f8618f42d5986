package sqlitetest

import (
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/store/sqlite"
)

// Open opens a refset database file in tb.TempDir(), with sqlite.Open's defaults,
// and closes it when tb ends. Register later cleanups (a collector's Run, say) after
// this call so they run before the Close.
func Open(tb testing.TB) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "refset.db"), sqlite.Options{})
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
