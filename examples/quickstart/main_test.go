package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The quick start's invariants hold on SQLite.
func TestRun(t *testing.T) {
	require.NoError(t, run(t.Context(), "", "", 200))
}
