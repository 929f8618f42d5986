package refsettest_test

import (
	"encoding/json"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/refsettest/testdata/starter"
)

// A test binary that starts processes with Process but whose TestMain does not call
// Main (it has none, or one that runs the tests itself) would run none of its tests
// in the process, print PASS and exit 0: the mistake would pass unseen. The process
// must fail instead, exiting 2, and say that TestMain must call refsettest.Main.
func TestProcessWithoutMain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds test binaries")
	}
	for _, pkg := range []string{"notestmain", "runonly"} {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(t.TempDir(), pkg+".test")
			build := osexec.CommandContext(t.Context(), "go", "test", "-c", "-o", bin, "./testdata/"+pkg)
			out, err := build.CombinedOutput()
			require.NoError(t, err, "go test -c: %s", out)

			out, err = osexec.CommandContext(t.Context(), bin, "-test.run=^TestStart$", "-test.v").CombinedOutput()
			require.NoError(t, err, "%s", out)
			var outcome starter.Outcome
			for line := range strings.Lines(string(out)) {
				if rest, ok := strings.CutPrefix(line, starter.Prefix); ok {
					require.NoError(t, json.Unmarshal([]byte(rest), &outcome))
				}
			}
			assert.Equal(t, 2, outcome.Code, "the process's exit code; it printed %q and %q", outcome.Stdout, outcome.Stderr)
			assert.Contains(t, outcome.Stderr, "TestMain must call refsettest.Main")
			assert.Contains(t, outcome.Stderr, `role "replica"`)
			assert.NotContains(t, outcome.Stdout, "PASS")
		})
	}
}
