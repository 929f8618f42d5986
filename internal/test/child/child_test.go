package child_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/child"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	child.Main(m, map[string]func(arg string) int{
		"args": func(string) int { // prints the flags it was started with, one a line
			fmt.Println(strings.Join(os.Args[1:], "\n"))
			return 0
		},
		"echo": func(arg string) int { // prints its argument, as it was given
			fmt.Print(arg)
			return 0
		},
		"exit": func(arg string) int { // exits with the code it is given
			code, err := strconv.Atoi(arg)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 100
			}
			return code
		},
		"json": child.JSON(func(in struct{ Name string }) int { // prints the Name it was given
			fmt.Print(in.Name)
			return 0
		}),
		"sleep": func(string) int { // waits until it is killed
			time.Sleep(time.Hour)
			return 0
		},
	})
}

// exitCode is the code cmd's process exited with, once waited for; err is Wait's.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	return exit.ExitCode()
}

// A role runs with its argument, byte for byte, and instead of the tests: what it
// prints is all the process prints.
func TestRoleRuns(t *testing.T) {
	for _, arg := range []string{"", "plain", "a DSN=with spaces ?x=1&y='2'", `{"json": ["in", "it"]}`, "two\nlines\n"} {
		t.Run(strconv.Quote(arg), func(t *testing.T) {
			cmd := child.Command(t.Context(), "echo", arg)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, stderr.String())
			assert.Equal(t, arg, string(out))
			assert.Empty(t, stderr.String())
		})
	}
}

// The child is started with the flags that run no test and no benchmark, and that
// m.Run refuses, so a binary whose TestMain forgot Main fails rather than run its
// tests (and their children) or pass having run nothing.
func TestChildRunsNoTest(t *testing.T) {
	out, err := child.Command(t.Context(), "args", "").Output()
	require.NoError(t, err)
	assert.Equal(t, "-test.run=^$\n-test.bench=^$\n-test.parallel=0\n", string(out))
}

// The process exits with the code its role returned.
func TestExitCodePassedThrough(t *testing.T) {
	for _, code := range []int{0, 1, 3, 42, 125} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			out, err := child.Command(t.Context(), "exit", strconv.Itoa(code)).CombinedOutput()
			assert.Equal(t, code, exitCode(t, err), "output: %s", out)
			assert.Empty(t, string(out))
		})
	}
}

// A role the binary does not have fails the child, which says which role it was
// asked for and which it has, and runs no test (its output would say PASS or ok).
func TestUnknownRoleFails(t *testing.T) {
	for _, role := range []string{"collector", "", "Echo"} {
		t.Run(strconv.Quote(role), func(t *testing.T) {
			cmd := child.Command(t.Context(), role, "x")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			assert.Equal(t, 2, exitCode(t, cmd.Run()))
			assert.Empty(t, stdout.String())
			assert.Equal(t, fmt.Sprintf("child: this test binary has no role %q; its roles: args, echo, exit, json, sleep\n", role), stderr.String())
		})
	}
}

// The command's context kills the child when it ends first.
func TestContextKillsChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := child.Command(ctx, "sleep", "").Run()
	require.Error(t, err)
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "the context ended the child")
	assert.Equal(t, -1, exitCode(t, err), "killed by a signal: %v", err)
	assert.Less(t, time.Since(start), time.Minute)
}

// A JSON role gets its argument decoded; one that does not decode ends the child
// with code 2, saying what the role takes, before the role runs.
func TestJSONRole(t *testing.T) {
	for _, tc := range []struct {
		name, arg   string
		code        int
		out, stderr string
	}{
		{"decoded", `{"Name":"ann"}`, 0, "ann", ""},
		{"not JSON", `ann`, 2, "", "child: the argument is not the JSON of a struct { Name string }"},
		{"of another shape", `["ann"]`, 2, "", "child: the argument is not the JSON of a struct { Name string }"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := child.Command(t.Context(), "json", tc.arg)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			assert.Equal(t, tc.code, exitCode(t, cmd.Run()))
			assert.Equal(t, tc.out, stdout.String())
			if tc.stderr == "" {
				assert.Empty(t, stderr.String())
			} else {
				assert.Contains(t, stderr.String(), tc.stderr)
			}
		})
	}
}
