package nodriver_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
)

// A program that links no SQLite driver is told, by Open and store.Open alike, what
// to import, and nothing is created.
func TestNoDriverSaysWhatToImport(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		open func(path string) error
	}{
		{"Open", func(path string) error { _, err := sqlite.Open(ctx, path, sqlite.Options{}); return err }},
		{"Open with a driver named", func(path string) error {
			_, err := sqlite.Open(ctx, path, sqlite.Options{Driver: sqlite.DriverModernc})
			return err
		}},
		{"store.Open", func(path string) error { _, err := store.Open(ctx, path, sqlite.Options{}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			err := tc.open(path)
			if !errors.Is(err, refset.ErrInvalidConfig) {
				t.Fatalf("err = %v, want refset.ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), "github.com/refsetdb/refset/store/sqlite/modernc") {
				t.Errorf("the error does not say what to import: %v", err)
			}
			if made, _ := filepath.Glob(path + "*"); len(made) > 0 {
				t.Errorf("the refused Open created %v", made)
			}
		})
	}
}
