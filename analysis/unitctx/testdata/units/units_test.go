package units

import (
	"context"
	"testing"

	"github.com/refsetdb/refset/refset"
)

// A test's unit is checked as any: t.Context() is not the unit's.
func TestInsideUnit(t *testing.T) {
	var db refset.Database
	_ = refset.InTx(t.Context(), db, func(c context.Context, tx refset.Tx) error {
		_, err := set.Add(t.Context(), item{"a"}) // want `made with context t.Context\(\) inside`
		return err
	})
}
