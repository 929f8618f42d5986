package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// refset ui serves the console on loopback, refuses any other address without a
// token, counts up to --cap rows of a table (refusing a cap that is not positive
// before it connects, as status does), and never shows a DSN's password.
func TestUI(t *testing.T) {
	bin := buildCLI(t)
	db, dbArgs := backend{Backend: testdb.SQLite}.open(t)
	prepare(t, backend{Backend: testdb.SQLite, past: sqliteNow + ` - 3600000`, future: sqliteNow + ` + 3600000`}, db)
	const password = "pw-never-shown"
	runCases(t, bin, []cliCase{
		{name: "ui -h", args: []string{"ui", "-h"}, stdout: []string{"Usage: refset ui", "-addr", "-token",
			"-cap int", "the rows each count reads at most in a table; past them it is the database's estimate (default 10000)"}},
		{name: "a negative cap", args: append([]string{"ui", "--addr", "127.0.0.1:0", "--cap", "-1"}, dbArgs...), code: exitError,
			stderr: []string{"refset ui: invalid configuration: --cap must be positive", "Usage: refset ui"}},
		{name: "a cap of 0", args: append([]string{"ui", "--addr", "127.0.0.1:0", "--cap", "0"}, dbArgs...), code: exitError,
			stderr: []string{"--cap must be positive"}},
		{name: "a cap refused before it connects", args: []string{"ui", "--addr", "127.0.0.1:0", "--cap", "-1", "--db",
			"postgres://refset:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, code: exitError,
			stderr: []string{"--cap must be positive"}},
		{name: "every interface without a token", args: append([]string{"ui", "--addr", "0.0.0.0:0"}, dbArgs...), code: exitError,
			stderr: []string{`"0.0.0.0:0" is not a loopback address: give a token`}},
		{name: "another host without a token", args: append([]string{"ui", "--addr", ":0"}, dbArgs...), code: exitError,
			stderr: []string{"is not a loopback address"}},
		{name: "refused before it connects", args: []string{"ui", "--addr", "0.0.0.0:0", "--db",
			"postgres://refset:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, code: exitError,
			stderr: []string{"is not a loopback address"}},
		{name: "sampling too often", args: append([]string{"ui", "--addr", "127.0.0.1:0", "--sample-every", "1ms"}, dbArgs...), code: exitError,
			stderr: []string{"--sample-every 1ms is below 1s"}},
		{name: "a password refused", args: []string{"ui", "--addr", "127.0.0.1:0", "--db",
			"postgres://refset:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, code: exitError,
			stderr: []string{"database unavailable"}},
	})
	_, stderr, _ := runCLI(t, bin, "ui", "--addr", "127.0.0.1:0", "--db", "postgres://refset:"+password+"@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	require.NotContains(t, stderr, password)

	// The typed errors behind the refusals.
	for name, args := range map[string][]string{"an address": {"--addr", "0.0.0.0:0"}, "a cap": {"--cap", "-1"}} {
		fs := flag.NewFlagSet("ui", flag.ContinueOnError)
		uiCommand(fs)
		require.NoError(t, fs.Parse(args), name)
		require.ErrorIs(t, uiCheck(fs), refset.ErrInvalidConfig, name)
	}

	t.Run("serves", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			extra []string
			token string
			caps  []string // what the sets page says of the counts' cap, and counts past it
		}{
			{"loopback", nil, "", []string{"at most 10,000 rows of a table"}},
			{"any address with a token", []string{"--addr", "0.0.0.0:0", "--token", "tok"}, "tok", []string{"at most 10,000 rows of a table"}},
			// blocks has 7 objects, and the SQLite file no statistics.
			{"a cap of 2", []string{"--cap", "2"}, "", []string{"at most 2 rows of a table", `data-n="2" data-accuracy="more than"`}},
		} {
			t.Run(c.name, func(t *testing.T) {
				args := append([]string{"ui", "--addr", "127.0.0.1:0"}, c.extra...)
				base, stop := startUI(t, bin, append(args, dbArgs...)...)
				base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base, nil)
				require.NoError(t, err)
				if c.token != "" {
					req.Header.Set("Authorization", "Bearer "+c.token)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				require.Contains(t, string(body), `data-table="tokens"`)
				for _, want := range c.caps {
					require.Contains(t, string(body), want)
				}
				require.Equal(t, 0, stop(), "interrupted, it stops cleanly")
			})
		}
	})
}

// startUI starts the binary and returns the address it serves, read from its first
// line, and a function that interrupts it and returns its exit code.
func startUI(t *testing.T, bin string, args ...string) (string, func() int) {
	t.Helper()
	base, cmd, stderr := startUIProcess(t, bin, args...)
	return base, func() int {
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		require.NoError(t, err, "stderr: %s", stderr.String())
		return 0
	}
}

// startUIProcess starts the binary and returns the address it serves, read from its
// first line, the process, and its stderr (the process's to write until it ends).
func startUIProcess(t *testing.T, bin string, args ...string) (string, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Wait() // stderr is the process's until it ends
		t.Fatalf("refset ui printed no address: %v; stderr: %s", err, stderr.String())
	}
	_, rest, ok := strings.Cut(line, "serving ")
	require.True(t, ok, line)
	base, _, _ := strings.Cut(rest, " ")
	return base, cmd, &stderr
}
