package schema

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Both dialects ship the same versions, in order, numbered from 1 without gaps: a
// version recorded by one process must mean the same tables to every other.
func TestMigrationsAreSequentialAndParallel(t *testing.T) {
	for _, kind := range []string{"core", "set"} {
		t.Run(kind, func(t *testing.T) {
			var versions [][]int
			for _, d := range []Dialect{SQLite, Postgres} {
				ms, err := Migrations(d, kind)
				require.NoError(t, err)
				require.NotEmpty(t, ms)
				var vs []int
				for i, m := range ms {
					assert.Equal(t, i+1, m.Version, "%s %s", d, m.Name)
					assert.NotEmpty(t, m.SQL)
					vs = append(vs, m.Version)
				}
				versions = append(versions, vs)
			}
			assert.Equal(t, versions[0], versions[1])
		})
	}
	_, err := Migrations("mysql", "core")
	require.Error(t, err)
}

func TestRebind(t *testing.T) {
	assert.Equal(t, "a = $1 AND b = $2", Postgres.Rebind("a = ? AND b = ?"))
	assert.Equal(t, "a = ? AND b = ?", SQLite.Rebind("a = ? AND b = ?"))
}
