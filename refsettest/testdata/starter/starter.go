// Package starter is the test the binaries of refsettest's testdata run: it starts
// a process with refsettest.Process and prints how it ended.
package starter

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/refsetdb/refset/refsettest"
)

// Outcome is how the process ended, printed on a line of its own after Prefix.
type Outcome struct {
	Code           int
	Stdout, Stderr string
}

// Prefix starts the line that holds the Outcome, in JSON.
const Prefix = "OUTCOME "

// Start starts this binary again as a process in the role "replica", waits for it,
// and prints its Outcome.
func Start(t *testing.T) {
	cmd := refsettest.Process(t.Context(), "replica", "{}")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := Outcome{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		out.Code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(Prefix + string(b))
}
