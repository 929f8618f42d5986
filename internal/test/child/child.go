package child

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The environment of a process Command started: the role it runs, that role's
// argument, and the function its TestMain must call to run it, as the package that
// started it names it (for the message of a TestMain that does not).
const (
	roleVar = "REFSET_TEST_CHILD_ROLE"
	argVar  = "REFSET_TEST_CHILD_ARG"
	mainVar = "REFSET_TEST_CHILD_MAIN"
)

// A child whose TestMain does not call Main (a package without a TestMain, or one
// that runs m.Run itself) would run none of the package's tests, print PASS and
// exit 0: a test that started it could not tell the mistake from a role that did
// its work. So a child is started with -test.parallel=0 (see Command), which Main
// never reads but m.Run refuses: it prints that -parallel wants a positive integer,
// calls flag.Usage and exits 2, before any test. This init, which runs in every
// process of a binary that links this package, makes that flag.Usage say what is
// wrong instead of listing the flags.
func init() {
	role, isChild := os.LookupEnv(roleVar)
	if !isChild {
		return
	}
	mainFunc := cmp.Or(os.Getenv(mainVar), "child.Main")
	pkg, _, _ := strings.Cut(mainFunc, ".")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "%s: this test binary was started again as a process in role %q, but its TestMain ran the "+
			"package's tests instead of the role: TestMain must call %s (the package has no TestMain, or its TestMain calls "+
			"m.Run itself; the -test.parallel=0 above is what stops m.Run here)\n", pkg, role, mainFunc)
	}
}

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

// JSON is a role whose argument is the JSON of an In, as a test encodes its
// configuration for a process: run gets it decoded. An argument that does not decode
// ends the process with code 2, the role's In and the error said on standard error.
func JSON[In any](run func(in In) int) func(arg string) int {
	return func(arg string) int {
		var in In
		if err := json.Unmarshal([]byte(arg), &in); err != nil {
			fmt.Fprintf(os.Stderr, "child: the argument is not the JSON of a %T: %v\n", in, err)
			return 2
		}
		return run(in)
	}
}

// Command returns the command that runs this test binary again as role, given arg;
// ctx ends the process (it is killed) when it is done first, as with
// [exec.CommandContext]. The child inherits this process's environment. A binary
// whose TestMain does not call Main fails in the child, exiting 2 and saying
// TestMain must call child.Main.
func Command(ctx context.Context, role, arg string) *exec.Cmd {
	return CommandFor(ctx, "child.Main", role, arg)
}

// CommandFor is [Command] for a package that exports Main under another name:
// mainFunc names it ("refsettest.Main") in the failure of a binary whose TestMain
// does not call it.
func CommandFor(ctx context.Context, mainFunc, role, arg string) *exec.Cmd {
	// The flags run no test and no benchmark, and make m.Run fail at once (see
	// init), so a binary whose TestMain does not call Main neither runs the
	// package's tests again (starting children of its own) nor passes.
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "-test.bench=^$", "-test.parallel=0")
	cmd.Env = append(os.Environ(), roleVar+"="+role, argVar+"="+arg, mainVar+"="+mainFunc)
	return cmd
}
