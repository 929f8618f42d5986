package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The demonstration's checks (conservation, the expired lock taken over) pass.
func TestRun(t *testing.T) {
	ok, err := run(t.Context(), "", 3, 100)
	require.NoError(t, err)
	require.True(t, ok)
}
