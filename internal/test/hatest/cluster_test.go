package hatest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
)

// defaultState is scripts/hacluster.sh's state file when REFSET_HA_STATE is unset.
const defaultState = "/tmp/refset-ha.state"

// commandTimeout bounds one command of the script: each waits at most two minutes
// for writes or for the nodes to settle.
const commandTimeout = 5 * time.Minute

// cluster runs scripts/hacluster.sh's commands on the cluster of REFSET_HA_STATE.
type cluster struct {
	script string // the absolute path of scripts/hacluster.sh
}

// haCluster finds scripts/hacluster.sh and the state file of a running cluster.
// Without the state file, which only the script's start writes, it skips tb, or
// fails it under CI.
func haCluster(tb testing.TB) *cluster {
	tb.Helper()
	state := os.Getenv("REFSET_HA_STATE")
	if state == "" {
		state = defaultState
	}
	if _, err := os.Stat(state); err != nil {
		pgtest.GiveUp(tb, "hatest: no state file of scripts/hacluster.sh ("+err.Error()+
			"): the failover tests switch over and kill the cluster that script started")
	}
	return &cluster{script: filepath.Join(repoRoot(tb), "scripts", "hacluster.sh")}
}

// moduleLine is the go.mod line that marks refset's own module root.
var moduleLine = regexp.MustCompile(`(?m)^module\s+github\.com/refsetdb/refset\s*$`)

// repoRoot returns the root of refset's repository: the nearest directory, from
// the package's own (where go test runs it) up, whose go.mod is refset's and that
// holds the script. Walking up, rather than a fixed "../..", survives the package
// moving and go test -C.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatalf("hatest: %v", err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && moduleLine.Match(mod) {
			if _, err := os.Stat(filepath.Join(dir, "scripts", "hacluster.sh")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatalf("hatest: no directory above the test's holds refset's go.mod and scripts/hacluster.sh")
		}
		dir = parent
	}
}

// run runs `scripts/hacluster.sh COMMAND` (the environment, REFSET_HA_STATE
// included, passes on) and logs what it printed: the seconds until writes commit
// again, the nodes' states. A command that fails fails tb.
func (c *cluster) run(tb testing.TB, command string) {
	tb.Helper()
	// Not tb's context: a restart run by a cleanup must work after the test ended.
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", c.script, command)
	// The script starts servers that outlive it; they close its descriptors, but
	// never let a stray one hold the output pipe open for ever.
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	tb.Logf("scripts/hacluster.sh %s (%.1fs):\n%s", command, time.Since(start).Seconds(),
		strings.TrimRight(string(out), "\n"))
	if err != nil {
		tb.Fatalf("scripts/hacluster.sh %s: %v", command, err)
	}
}
