package pgtest

import "testing"

// EnvHADSN names the environment variable holding the multi-host DSN of the
// throwaway high-availability cluster of scripts/hacluster.sh (a pg_auto_failover
// monitor and three nodes), which scripts/test.sh starts when its run includes
// internal/test/hatest.
const EnvHADSN = "REFSET_TEST_HA_DSN"

// HADSN returns the DSN in EnvHADSN. Without it, it skips tb, or fails it under
// CI, where the failover tests would otherwise pass untried.
func HADSN(tb testing.TB) string {
	tb.Helper()
	return envDSN(tb, EnvHADSN, "run make test, or start the cluster with eval \"$(scripts/hacluster.sh start)\"")
}
