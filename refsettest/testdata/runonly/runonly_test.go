// Package runonly is a test binary that uses refsettest.Process and whose TestMain
// parses the flags and runs the tests itself, without refsettest.Main, which
// refsettest's TestProcessWithoutMain builds and runs: the process Process starts
// must fail, saying TestMain must call refsettest.Main.
package runonly

import (
	"flag"
	"os"
	"testing"

	"github.com/refsetdb/refset/refsettest/testdata/starter"
)

func TestMain(m *testing.M) {
	flag.Parse() // as a TestMain with flags of its own does, before m.Run
	os.Exit(m.Run())
}

func TestStart(t *testing.T) { starter.Start(t) }
