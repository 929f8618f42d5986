// Package notestmain is a test binary that uses refsettest.Process but has no
// TestMain, which refsettest's TestProcessWithoutMain builds and runs: the process
// Process starts must fail, saying TestMain must call refsettest.Main.
package notestmain

import (
	"testing"

	"github.com/refsetdb/refset/refsettest/testdata/starter"
)

func TestStart(t *testing.T) { starter.Start(t) }
