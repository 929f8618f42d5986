package pgtest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMissingHACluster checks that HADSN skips without the HA cluster's DSN and
// fails under CI, where internal/hatest would otherwise pass untried. It sets
// environment variables, so it cannot run in parallel.
func TestMissingHACluster(t *testing.T) {
	tests := []struct {
		name, ci string
		wantSkip bool
	}{
		{name: "unset outside CI skips", ci: "", wantSkip: true},
		{name: "unset under CI fails", ci: "true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvHADSN, "")
			requireGivesUp(t, func(tb testing.TB) { HADSN(tb) }, tc.wantSkip, EnvHADSN+" is not set")
		})
	}
	t.Run("set", func(t *testing.T) {
		t.Setenv("CI", "true")
		t.Setenv(EnvHADSN, "host=127.0.0.1,127.0.0.1 port=1,2")
		require.Equal(t, "host=127.0.0.1,127.0.0.1 port=1,2", HADSN(t))
	})
}
