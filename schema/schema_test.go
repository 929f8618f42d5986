package schema

import (
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// files is a dialect's migrations read from its store's folder, for tests that look at
// the files alone (its statements are never called).
type files struct {
	SQL
	d   string
	dir string
}

func (f files) Name() string      { return f.d }
func (f files) Migrations() fs.FS { return os.DirFS(f.dir) }

// Both dialects ship the same versions, in order, numbered from 1 without gaps: a
// version recorded by one process must mean the same tables to every other.
func TestMigrationsAreSequentialAndParallel(t *testing.T) {
	dialects := []files{{d: "sqlite", dir: "../store/sqlite/sql/schema"}, {d: "postgres", dir: "../store/postgres/sql/schema"}}
	for _, kind := range []string{"core", "set"} {
		t.Run(kind, func(t *testing.T) {
			var versions [][]int
			for _, d := range dialects {
				ms, err := Migrations(d, kind)
				require.NoError(t, err)
				require.NotEmpty(t, ms)
				var vs []int
				for i, m := range ms {
					assert.Equal(t, i+1, m.Version, "%s %s", d.d, m.Name)
					assert.NotEmpty(t, m.SQL)
					assert.NotContains(t, m.Name, downSuffix, "a down migration read as an up one")
					vs = append(vs, m.Version)
				}
				// Every up migration has its down one, so MigrateDown can go to 0.
				downs, err := dialectFiles(d, kind, true)
				require.NoError(t, err)
				var dvs []int
				for _, m := range downs {
					assert.NotEmpty(t, m.SQL)
					dvs = append(dvs, m.Version)
				}
				assert.Equal(t, vs, dvs, "%s %s down migrations", d.d, kind)
				versions = append(versions, vs)
			}
			assert.Equal(t, versions[0], versions[1])
		})
	}
	_, err := Migrations(files{d: "mysql", dir: "../store/mysql/sql/schema"}, "core")
	require.Error(t, err)
}
