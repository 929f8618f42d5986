package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The examples are what a user copies into a module of their own, where refset's
// internal packages cannot be imported: no package under examples/, in its tests
// either, imports github.com/refsetdb/refset/internal/..., but examples/internal
// itself (the example programs' shared fixture, whose tests use refset's harness).
// Custody's component, examples/custody/tokens, imports no internal package at all.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	const module = "github.com/refsetdb/refset"
	out, err := exec.CommandContext(t.Context(), "go", "list",
		"-f", `{{.ImportPath}}|{{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"/examples/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	listed := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, "|")
		listed[pkg] = strings.Fields(imports)
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
