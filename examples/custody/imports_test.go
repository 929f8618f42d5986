package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The examples are what a user copies into a module of their own, where refset's
// internal packages cannot be imported: no package under examples/ imports
// github.com/refsetdb/refset/internal/..., but examples/internal itself (the example
// programs' shared fixture), and custody, the example of a component built on refset,
// not in its tests either (the other examples' tests may use refset's harness).
// Custody's component, examples/custody/tokens, imports no internal package at all.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	const module = "github.com/refsetdb/refset"
	out, err := exec.CommandContext(t.Context(), "go", "list",
		"-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"/examples/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	// Every example's code, and custody's tests too, which a user copies with it; the
	// other examples' tests may use refset's own test harness.
	listed := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, rest, _ := strings.Cut(line, "|")
		imports, testImports, _ := strings.Cut(rest, "|")
		listed[pkg] = strings.Fields(imports)
		if strings.HasPrefix(pkg, module+"/examples/custody") {
			listed[pkg] = append(listed[pkg], strings.Fields(testImports)...)
		}
	}
	for _, pkg := range []string{module + "/examples/custody", module + "/examples/custody/tokens"} {
		require.Contains(t, listed, pkg, "go list did not list custody")
	}
	for pkg, imports := range listed {
		if strings.HasPrefix(pkg, module+"/examples/internal/") {
			continue
		}
		for _, imp := range imports {
			assert.False(t, strings.HasPrefix(imp, module+"/internal/"), "%s imports %s", pkg, imp)
			if strings.HasPrefix(pkg, module+"/examples/custody/tokens") {
				assert.NotContains(t, imp+"/", "/internal/", "%s imports %s", pkg, imp)
			}
		}
	}
}
