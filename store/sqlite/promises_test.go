package sqlite

import (
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
)

func TestPromisesConformance(t *testing.T) {
	conformance.RunPromises(t, harness)
}
