package unitctx_test

import (
	"testing"

	"github.com/refsetdb/refset/analysis/unitctx"
	"golang.org/x/tools/go/analysis/analysistest"
)

// TestAnalyzer runs the analyzer on testdata, a module of a user's program that
// builds on refset's own packages (a replace of the module by this tree), so the
// cases check the analyzer against the real API, InTx's signature and all.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), unitctx.Analyzer, "./...")
}
