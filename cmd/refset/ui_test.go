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
// token, and never shows a DSN's password.
func TestUI(t *testing.T) {
	bin := buildCLI(t)
	db, dbArgs := backend{Backend: testdb.SQLite}.open(t)
	prepare(t, backend{Backend: testdb.SQLite, past: sqliteNow + ` - 3600000`, future: sqliteNow + ` + 3600000`}, db)
	const password = "pw-never-shown"
	runCases(t, bin, []cliCase{
		{name: "ui -h", args: []string{"ui", "-h"}, stdout: []string{"Usage: refset ui", "-addr", "-token"}},
		{name: "every interface without a token", args: append([]string{"ui", "--addr", "0.0.0.0:0"}, dbArgs...), code: exitError,
			stderr: []string{`"0.0.0.0:0" is not a loopback address: give a token`}},
		{name: "another host without a token", args: append([]string{"ui", "--addr", ":0"}, dbArgs...), code: exitError,
			stderr: []string{"is not a loopback address"}},
		{name: "refused before it connects", args: []string{"ui", "--addr", "0.0.0.0:0", "--db",
			"postgres://refset:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, code: exitError,
			stderr: []string{"is not a loopback address"}},
		{name: "sampling too often", args: append([]string{"ui", "--addr", "127.0.0.1:0", "--sample-every", "1ms"}, dbArgs...), code: exitError,
			stderr: []string{"SampleEvery 1ms is below 1s"}},
		{name: "a password refused", args: []string{"ui", "--addr", "127.0.0.1:0", "--db",
			"postgres://refset:" + password + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, code: exitError,
			stderr: []string{"database unavailable"}},
	})
	_, stderr, _ := runCLI(t, bin, "ui", "--addr", "127.0.0.1:0", "--db", "postgres://refset:"+password+"@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	require.NotContains(t, stderr, password)

	// The typed error behind the refusal.
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	uiCommand(fs)
	require.NoError(t, fs.Parse([]string{"--addr", "0.0.0.0:0"}))
	require.ErrorIs(t, uiCheck(fs), refset.ErrInvalidConfig)

	t.Run("serves", func(t *testing.T) {
		for name, extra := range map[string][]string{"loopback": nil, "any address with a token": {"--addr", "0.0.0.0:0", "--token", "tok"}} {
			t.Run(name, func(t *testing.T) {
				args := append([]string{"ui", "--addr", "127.0.0.1:0"}, extra...)
				base, stop := startUI(t, bin, append(args, dbArgs...)...)
				base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base, nil)
				require.NoError(t, err)
				if extra != nil {
					req.Header.Set("Authorization", "Bearer tok")
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				require.Contains(t, string(body), `data-table="tokens"`)
				require.Equal(t, 0, stop(), "interrupted, it stops cleanly")
			})
		}
	})
}

// startUI starts the binary and returns the address it serves, read from its first
// line, and a function that interrupts it and returns its exit code.
func startUI(t *testing.T, bin string, args ...string) (string, func() int) {
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
