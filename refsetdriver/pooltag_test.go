package refsetdriver_test

import (
	"testing"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// taggedDB is a database whose driver names a pool (refsetdriver.PoolTagged).
type taggedDB struct {
	refsetdriver.Database
	tag refsetdriver.PoolTag
}

func (d taggedDB) Driver() refsetdriver.Driver { return taggedDriver{d.Database.Driver(), d.tag} }

type taggedDriver struct {
	refsetdriver.Driver
	tag refsetdriver.PoolTag
}

func (d taggedDriver) PoolTag() refsetdriver.PoolTag { return d.tag }

// TestUnitsOnStack: the functions of units of work run by RunUnitFuncOf are counted
// by their pool's tag on their goroutine only, nested or not, whatever the tag's
// bits; an untagged database's units are counted under no tag.
func TestUnitsOnStack(t *testing.T) {
	plain := testdb.SQLite.Open(t, testdb.Options{})
	for _, tag := range []refsetdriver.PoolTag{refsetdriver.NewPoolTag(), 1, 2, 5, 1 << 40, 1<<63 | 6} {
		db := taggedDB{plain, tag}
		var inner, other, untagged, inGoroutine int
		require.NoError(t, refsetdriver.RunUnitFuncOf(db, func() error {
			return refsetdriver.RunUnitFuncOf(plain, func() error {
				return refsetdriver.RunUnitFuncOf(db, func() error {
					inner = refsetdriver.UnitsOnStack(tag)
					other = refsetdriver.UnitsOnStack(tag ^ 1)
					untagged = refsetdriver.UnitsOnStack(0)
					done := make(chan int)
					go func() { done <- refsetdriver.UnitsOnStack(tag) }()
					inGoroutine = <-done
					return nil
				})
			})
		}))
		assert.Equal(t, 2, inner, "tag %#x: both units of the pool", tag)
		assert.Zero(t, other, "tag %#x: another pool's", tag)
		assert.Zero(t, untagged, "tag %#x: no tag", tag)
		assert.Zero(t, inGoroutine, "tag %#x: a goroutine the function started", tag)
		assert.Zero(t, refsetdriver.UnitsOnStack(tag), "tag %#x: no function runs", tag)
	}
}
