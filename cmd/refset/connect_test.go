package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// postgresDrivers are the --driver values: lib/pq (the default) and pgx.
var postgresDrivers = []string{postgres.DriverLibPQ, postgres.DriverPgx}

// TestConnectTimeout: on a PostgreSQL server that accepts the connection and never
// answers, a command gives up after the connect timeout when the DSN sets none, on
// either driver: exit 2, saying the server did not answer in time and how to wait
// longer.
func TestConnectTimeout(t *testing.T) {
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	connectTimeout = time.Second
	for _, driver := range postgresDrivers {
		t.Run(driver, func(t *testing.T) {
			addr, _ := pgtest.SilentServer(t)
			args := []string{"status", "--driver", driver, "--db", "postgres://refset@" + addr + "/x?sslmode=disable"}
			var stdout, stderr bytes.Buffer
			code := make(chan int, 1)
			start := time.Now()
			go func() { code <- run(t.Context(), args, &stdout, &stderr) }()
			select {
			case c := <-code:
				require.Equal(t, exitError, c, stderr.String())
				require.Contains(t, stderr.String(), "refset status: no answer from the server within 1s")
				require.Contains(t, stderr.String(), "set connect_timeout in the DSN to wait longer")
				require.Less(t, time.Since(start), 5*time.Second)
			case <-time.After(15 * time.Second):
				t.Fatal("refset status still waits for the silent server, long after the connect timeout")
			}
		})
	}
}

// TestWithConnectTimeout: the connect timeout goes into a DSN of either form that
// sets none, and a DSN's own (or $PGCONNECT_TIMEOUT) is kept.
func TestWithConnectTimeout(t *testing.T) {
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	connectTimeout = 1500 * time.Millisecond // whole seconds, rounded up
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u@db/app", "postgres://u@db/app?connect_timeout=2"},
		{"postgresql://u:pw@db:5432/app?sslmode=disable", "postgresql://u:pw@db:5432/app?sslmode=disable&connect_timeout=2"},
		{"postgres://u@db1:5432,db2:5433/app?target_session_attrs=read-write&", "postgres://u@db1:5432,db2:5433/app?target_session_attrs=read-write&connect_timeout=2"},
		{"postgres://u@db/app?connect_timeout=30", ""},
		{"postgres://u@db1:5432,db2:5433/app?connect_timeout=30", ""},
		{"host=db dbname=app", "host=db dbname=app connect_timeout=2"},
		{"host=db connect_timeout = 30", ""},
		{"host=db connect_timeout=0", ""}, // wait for ever, as the DSN says
		// The keyword inside a value is none.
		{"host=db password='a connect_timeout=9'", "host=db password='a connect_timeout=9' connect_timeout=2"},
		{`host=db password='it\'s connect_timeout=9'`, `host=db password='it\'s connect_timeout=9' connect_timeout=2`},
		{`host=db password=a\ connect_timeout=9`, `host=db password=a\ connect_timeout=9 connect_timeout=2`},
	} {
		got, set := withConnectTimeout(tc.dsn)
		if tc.want == "" {
			require.False(t, set, tc.dsn)
			require.Equal(t, tc.dsn, got)
			continue
		}
		require.True(t, set, tc.dsn)
		require.Equal(t, tc.want, got)
		if strings.HasPrefix(got, "postgres") {
			u, err := url.Parse(got)
			require.NoError(t, err)
			require.Equal(t, "2", u.Query().Get("connect_timeout"))
		}
	}
	t.Setenv("PGCONNECT_TIMEOUT", "30")
	got, set := withConnectTimeout("postgres://u@db/app")
	require.False(t, set, "$PGCONNECT_TIMEOUT is the DSN's timeout")
	require.Equal(t, "postgres://u@db/app", got)
}

// TestInterrupt: an interrupt (Ctrl-C) ends a command that waits for a server
// which accepted its connection and never answers, on either driver, though the
// DSN's connect_timeout would have it wait a minute: exit 2, "interrupted".
func TestInterrupt(t *testing.T) {
	bin := buildCLI(t)
	for _, driver := range postgresDrivers {
		t.Run(driver, func(t *testing.T) {
			addr, accepted := pgtest.SilentServer(t)
			var stderr bytes.Buffer
			cmd := exec.CommandContext(t.Context(), bin, "status", "--driver", driver,
				"--db", "postgres://refset@"+addr+"/x?sslmode=disable&connect_timeout=60")
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			select {
			case <-accepted:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatal("refset status never connected")
			}
			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			code, took := wait(t, cmd, 10*time.Second)
			require.Equal(t, exitError, code, stderr.String())
			require.Less(t, took, 5*time.Second)
			require.Contains(t, stderr.String(), "refset status: interrupted")
		})
	}
}

// TestSecondInterruptKills: the first interrupt cancels a command's context, and a
// second one ends the process at once, though the command is stuck where its
// context does not reach. The test runs itself as that command (stuck below).
func TestSecondInterruptKills(t *testing.T) {
	if os.Getenv("REFSET_TEST_STUCK") != "" {
		ctx, stop := interruptible()
		defer stop()
		fmt.Println("running")
		<-ctx.Done()
		fmt.Println("interrupted")
		select {} // stuck, whatever the context says
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSecondInterruptKills$")
	cmd.Env = append(os.Environ(), "REFSET_TEST_STUCK=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(out)
	next := func(want string) {
		t.Helper()
		require.True(t, lines.Scan(), "the command ended before it said %q", want)
		require.Equal(t, want, lines.Text())
	}
	next("running")
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	next("interrupted")
	// Interrupted again, until it ends: the context's stop, which follows the first
	// interrupt on a goroutine of its own, may not have run yet.
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
				_ = cmd.Process.Signal(os.Interrupt)
			}
		}
	}()
	_, took := wait(t, cmd, 10*time.Second)
	close(done)
	require.Less(t, took, 2*time.Second, "a second interrupt ends it at once")
	status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled() && status.Signal() == syscall.SIGINT, "killed by the second interrupt: %v", cmd.ProcessState)
}

// wait waits up to limit for the started cmd to end, and returns its exit code
// (-1 when a signal ended it) and how long it took.
func wait(t *testing.T, cmd *exec.Cmd, limit time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), time.Since(start)
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("refset still runs %s after the interrupt", limit)
		return 0, 0
	}
}
