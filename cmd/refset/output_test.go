package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

var errNoSpace = errors.New("no space left on device")

func (failingWriter) Write([]byte) (int, error) { return 0, errNoSpace }

// TestOutputWriteErrors: a command whose output cannot be written fails, exit 2,
// saying so, whichever print meets the failure: help, a report in text or JSON
// (check's findings too), what a command that changed the database did, ui's
// address.
func TestOutputWriteErrors(t *testing.T) {
	b := backends()[0] // SQLite
	db, dbArgs := b.open(t)
	prepare(t, b, db)
	for _, args := range [][]string{
		{"-h"}, {"status", "-h"}, {"migrate", "-h"},
		{"status"}, {"status", "--json"},
		{"why", "h", "--table", "blocks"}, {"why", "x", "--table", "blocks"}, {"why", "y", "--table", "blocks"}, {"why", "--json", "g", "--table", "blocks"},
		{"check", "--table", "blocks"}, {"check", "--table", "tokens"}, {"check", "--json", "--table", "blocks"},
		{"holds", "ls", "--table", "blocks"}, {"holds", "ls", "--json", "--table", "blocks"},
		{"migrate", "status"}, {"migrate", "status", "--json"}, {"migrate", "sql"},
		{"ui", "--addr", "127.0.0.1:0"},
		{"holds", "rm", "--expired", "--table", "blocks"}, {"collect", "--table", "blocks"}, {"sweep", "--table", "blocks"},
		{"migrate", "up"}, {"migrate", "down", "--component", "set:tokens", "--target", "0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(t.Context(), append(args, dbArgs...), failingWriter{}, &stderr)
			require.Equal(t, exitError, code, stderr.String())
			require.Contains(t, stderr.String(), "refset: writing the output: no space left on device")
		})
	}

	// The binary, its output a full device.
	bin := buildCLI(t)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	require.NoError(t, err)
	defer full.Close()
	for _, args := range [][]string{{"why", "h", "--table", "blocks"}, {"check", "--table", "blocks"}} {
		t.Run("/dev/full/"+strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := runCLIWith(t, func(c *exec.Cmd) { c.Stdout = full }, bin, append(args, dbArgs...)...)
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stderr, "refset: writing the output: write /dev/stdout: no space left on device")
		})
	}
}
