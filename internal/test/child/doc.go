// Package child runs a test binary again as a child process in a role: a collector
// beside the test's own writers, a node the test kills at random moments, a replica
// of a service with a pool of its own, a writer killed while its units of work commit.
// A process of its own is what these tests need: its connections, its memory and its
// death are not the test's.
//
// A package whose tests start children names its roles in its TestMain, which is
// [Main] alone:
//
//	func TestMain(m *testing.M) {
//		child.Main(m, map[string]func(arg string) int{"collector": collector})
//	}
//
// and a test starts one with [Command], which returns an [os/exec.Cmd] to give
// standard input and output to, start, kill and wait for as any other:
//
//	cmd := child.Command(t.Context(), "collector", dsn)
//
// A role is a function of one string, a DSN, a path, or JSON the caller marshalled,
// and returns the process's exit code. It runs in place of the tests, with no
// testing.T: it reports on standard output and standard error, as a program does.
//
// The environment tells a child its role and argument, in variables that only this
// package names. A binary whose TestMain does not call Main (it has none, or runs
// m.Run itself) would run no test in the child and pass; the child is started with
// -test.parallel=0, which Main never reads and m.Run refuses, so it fails instead,
// exiting 2 and saying TestMain must call Main. The package imports none of
// refset's, so every package's tests may use it.
package child
