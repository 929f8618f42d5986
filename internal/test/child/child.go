package child

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The environment of a process Command started: the role it runs and that role's
// argument.
const (
	roleVar = "REFSET_TEST_CHILD_ROLE"
	argVar  = "REFSET_TEST_CHILD_ARG"
)

// Main is the whole of a TestMain. In a process that [Command] started, it runs the
// role the process was started as, with its argument, and exits with the code the
// role returns; a role that roles does not name ends the process with code 2, the
// role's name and the roles there are said on standard error. In any other process
// it runs the package's tests and benchmarks (m.Run) and exits with their code.
func Main(m *testing.M, roles map[string]func(arg string) int) {
	role, isChild := os.LookupEnv(roleVar)
	if !isChild {
		os.Exit(m.Run())
	}
	run, ok := roles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "child: this test binary has no role %q; its roles: %s\n",
			role, strings.Join(slices.Sorted(maps.Keys(roles)), ", "))
		os.Exit(2)
	}
	os.Exit(run(os.Getenv(argVar)))
}

// Command returns the command that runs this test binary again as role, given arg;
// ctx ends the process (it is killed) when it is done first, as with
// [exec.CommandContext]. The child inherits this process's environment.
func Command(ctx context.Context, role, arg string) *exec.Cmd {
	// The flags run no test and no benchmark: a binary whose TestMain does not call
	// Main then exits at once, rather than running the package's tests again and
	// starting children of its own.
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), roleVar+"="+role, argVar+"="+arg)
	return cmd
}
