package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// small is a run quick enough for a test.
var small = options{peers: 3, blocks: 600, seed: 7, forkTTL: 300 * time.Millisecond, grace: 100 * time.Millisecond}

// The example's own invariant checks pass on a small run.
func TestRun(t *testing.T) {
	table, ok, err := run(t.Context(), small)
	require.NoError(t, err)
	require.True(t, ok, "an invariant failed:\n%s", table)
	require.Contains(t, table, "integrity check                    ok")
}

// Flags the simulation cannot run with are refused, not a panic or a run whose
// invariants fail for want of blocks, peers or clean-up.
func TestRunRefusesFlagsOutOfRange(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*options)
		want string
	}{
		"negative blocks":    {func(o *options) { o.blocks = -1 }, "-blocks -1"},
		"zero blocks":        {func(o *options) { o.blocks = 0 }, "-blocks 0"},
		"too few blocks":     {func(o *options) { o.blocks = minBlocks - 1 }, "-blocks 49"},
		"zero peers":         {func(o *options) { o.peers = 0 }, "-peers 0"},
		"negative peers":     {func(o *options) { o.peers = -3 }, "-peers -3"},
		"negative receivers": {func(o *options) { o.receivers = -1 }, "-receivers -1"},
		"zero fork-ttl":      {func(o *options) { o.forkTTL = 0 }, "-fork-ttl 0s"},
		"negative fork-ttl":  {func(o *options) { o.forkTTL = -time.Second }, "-fork-ttl -1s"},
		"zero grace":         {func(o *options) { o.grace = 0 }, "-grace 0s"},
	} {
		t.Run(name, func(t *testing.T) {
			o := small
			tc.edit(&o)
			var err error
			require.NotPanics(t, func() { _, _, err = run(t.Context(), o) })
			require.ErrorContains(t, err, tc.want)
		})
	}
	o := small
	o.blocks = minBlocks
	_, ok, err := run(t.Context(), o)
	require.NoError(t, err)
	require.True(t, ok, "the fewest blocks accepted run")
}

// build builds the command into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "blockchain")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// The process exits 2 with a message and the usage on a flag out of range, not a
// panic.
func TestProcessFlagsOutOfRange(t *testing.T) {
	bin := build(t)
	for _, args := range [][]string{{"-blocks", "10"}, {"-blocks", "-1"}, {"-peers", "0"}, {"-grace", "0s"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			require.Equal(t, 2, exit.ExitCode(), "%s", out)
			require.Contains(t, string(out), "blockchain: "+args[0]+" "+args[1]+": want")
			require.Contains(t, string(out), "Usage:")
			require.NotContains(t, string(out), "panic")
		})
	}
}

// postgresSchemas lists the schemas runs of the example made on PostgreSQL. (Not on
// t.Context(), which is done when the clean-up that calls it runs.)
func postgresSchemas(t *testing.T, dsn string) []string {
	ctx := context.Background()
	admin, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 1})
	require.NoError(t, err)
	defer admin.Close()
	rows, err := admin.Pool().QueryContext(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'refset_blockchain_%'`)
	require.NoError(t, err)
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	return names
}

// A run interrupted by Ctrl-C (SIGINT) or SIGTERM, or whose stdout is closed, exits
// without leaving its temporary SQLite file or its PostgreSQL schema behind.
func TestProcessLeavesNothingBehind(t *testing.T) {
	bin := build(t)
	for name, dsn := range map[string]func(testing.TB) string{
		"sqlite":   func(testing.TB) string { return "" },
		"postgres": pgtest.DSN, // skips without a server, fails under CI=true
	} {
		for _, how := range []string{"SIGINT", "SIGTERM", "closed stdout"} {
			t.Run(name+"/"+how, func(t *testing.T) {
				pgDSN := dsn(t)
				var before []string
				if pgDSN != "" {
					before = postgresSchemas(t, pgDSN)
				}
				made := func() []string { // what this run made and has not removed
					if pgDSN == "" {
						return nil
					}
					var mine []string
					for _, s := range postgresSchemas(t, pgDSN) {
						if !slices.Contains(before, s) {
							mine = append(mine, s)
						}
					}
					return mine
				}
				t.Cleanup(func() { // what a failing run left, so that a red test leaves nothing either
					if pgDSN == "" {
						return
					}
					admin, err := postgres.Open(context.Background(), pgDSN, postgres.Options{MaxConns: 1})
					if err != nil {
						return
					}
					defer admin.Close()
					for _, s := range made() {
						admin.Pool().Exec(`DROP SCHEMA ` + s + ` CASCADE`)
					}
				})
				tmp := t.TempDir()
				args := []string{"-db", pgDSN, "-blocks", "200", "-fork-ttl", "30s"} // sleeps 30 s at the end: mid-run when signalled
				if how == "closed stdout" {
					args = []string{"-db", pgDSN, "-blocks", "50", "-fork-ttl", "100ms", "-grace", "100ms"}
				}
				cmd := exec.Command(bin, args...)
				cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if how == "closed stdout" {
					r, w, err := os.Pipe()
					require.NoError(t, err)
					require.NoError(t, r.Close())
					cmd.Stdout = w
					require.NoError(t, cmd.Start())
					require.NoError(t, w.Close())
					err = cmd.Wait()
					require.Error(t, err, "writing to a closed pipe")
				} else {
					require.NoError(t, cmd.Start())
					require.Eventually(t, func() bool { // the database is made
						if pgDSN != "" {
							return len(made()) > 0
						}
						dbs, _ := filepath.Glob(filepath.Join(tmp, "refset-blockchain*", "blockchain.db"))
						return len(dbs) > 0
					}, 30*time.Second, 20*time.Millisecond)
					time.Sleep(time.Second) // the node is at work
					sig := syscall.SIGINT
					if how == "SIGTERM" {
						sig = syscall.SIGTERM
					}
					require.NoError(t, cmd.Process.Signal(sig))
					done := make(chan error, 1)
					go func() { done <- cmd.Wait() }()
					var err error
					select {
					case err = <-done:
					case <-time.After(20 * time.Second):
						cmd.Process.Kill()
						t.Fatal("no exit 20 s after ", how)
					}
					var exit *exec.ExitError
					require.True(t, errors.As(err, &exit), "exit: %v; stderr: %s", err, stderr.String())
					require.Equal(t, 130, exit.ExitCode(), "stderr: %s", stderr.String())
					require.Equal(t, "blockchain: interrupted\n", stderr.String())
				}
				left, err := os.ReadDir(tmp)
				require.NoError(t, err)
				require.Empty(t, left, "the temporary directory is removed")
				require.Empty(t, made(), "the schema is dropped")
			})
		}
	}
}
