package refsettest

import (
	"context"
	"os/exec"
	"testing"

	"github.com/refsetdb/refset/internal/test/child"
)

// Main is the whole of a TestMain for a package whose tests start processes of
// their own: several replicas of a service on one database, a writer killed in the
// middle of a commit. In a process that [Process] started, it runs the role the
// process was started as with its argument, and exits with the code the role
// returns (2, saying so on standard error, for a role roles does not name); in any
// other, it runs the package's tests and benchmarks and exits with their code.
//
//	func TestMain(m *testing.M) {
//		refsettest.Main(m, map[string]func(arg string) int{"replica": runReplica})
//	}
func Main(m *testing.M, roles map[string]func(arg string) int) {
	child.Main(m, roles)
}

// Process returns the command that runs this test binary again as role, handing it
// arg (JSON, say: a DSN and what to do), for the package's TestMain to run with
// [Main]. The process inherits the test's environment and is killed when ctx is done
// first, as with [exec.CommandContext]; it runs none of the package's tests. Start it
// and Wait for it as any command; what it prints to standard output is its report.
//
// The package's TestMain must call Main. In a binary whose TestMain does not (the
// package has none, or it runs m.Run itself), the process fails: it exits 2, saying
// on standard error that TestMain must call refsettest.Main, rather than run no
// test, print PASS and exit 0 as if its role had done its work. (It is started
// with -test.parallel=0, a flag Main never reads and m.Run refuses.)
func Process(ctx context.Context, role, arg string) *exec.Cmd {
	return child.CommandFor(ctx, "refsettest.Main", role, arg)
}
