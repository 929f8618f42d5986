package refsetdriver_test

import (
	"testing"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutsideItsUnit: only the goroutine running a unit's function (RunUnitFunc),
// with a context that carries no unit, is outside its unit; deep in the function's
// calls too, and not in a goroutine the function starts.
func TestOutsideItsUnit(t *testing.T) {
	ctx := t.Context()
	db := testdb.SQLite.Open(t, testdb.Options{})
	raw, err := db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Rollback() })
	unitCtx, end := refsetdriver.WithUnit(ctx, db, raw)
	t.Cleanup(func() { end(false) })
	endedCtx, endIt := refsetdriver.WithUnit(ctx, db, raw)
	endIt(false) // a unit that ended: its context joins nothing

	assert.False(t, refsetdriver.OutsideItsUnit(ctx), "no unit's function runs")
	var deep func(n int) bool
	deep = func(n int) bool { // deeper than one look at the stack takes
		if n == 0 {
			return refsetdriver.OutsideItsUnit(ctx)
		}
		return deep(n - 1)
	}
	var inside, withUnit, withEnded, deeper, inGoroutine bool
	require.NoError(t, refsetdriver.RunUnitFunc(func() error {
		inside = refsetdriver.OutsideItsUnit(ctx)
		withUnit = refsetdriver.OutsideItsUnit(unitCtx)
		withEnded = refsetdriver.OutsideItsUnit(endedCtx)
		deeper = deep(200)
		done := make(chan bool)
		go func() { done <- refsetdriver.OutsideItsUnit(ctx) }()
		inGoroutine = <-done
		return nil
	}))
	assert.True(t, inside, "the unit's goroutine, with a context that carries no unit")
	assert.False(t, withUnit, "the unit's own context")
	assert.True(t, withEnded, "a context whose unit ended")
	assert.True(t, deeper, "far below the unit's function")
	assert.False(t, inGoroutine, "a goroutine the function started")
}
