package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The example's own invariant checks pass on a small run.
func TestRun(t *testing.T) {
	ok, err := run(t.Context(), options{peers: 3, blocks: 600, seed: 7, forkTTL: 300 * time.Millisecond, grace: 100 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, ok, "an invariant failed; see the table above")
}
