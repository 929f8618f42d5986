package main

import (
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/stretchr/testify/require"
)

// The quick start's invariants hold on either database, named by its one -db flag
// (go run ./examples/quickstart [-db DSN]), through one code path.
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   func(testing.TB) string // the -db flag
	}{
		{"sqlite/default", func(testing.TB) string { return "" }},
		{"sqlite/path", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "chain.db") }},
		{"postgres", pgtest.DSN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, run(t.Context(), tc.db(t), 200))
		})
	}
}
