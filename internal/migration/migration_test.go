package migration

import (
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/refsetdb/refset/refsetdriver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// files is a dialect's migrations read from its store's folder, for tests that look at
// the files alone (its statements are never called).
type files struct {
	refsetdriver.SchemaSQL
	d   string
	dir string
}

func (f files) Name() string      { return f.d }
func (f files) Migrations() fs.FS { return os.DirFS(f.dir) }

// Both dialects ship the same versions, in order, numbered from 1 without gaps: a
// version recorded by one process must mean the same tables to every other.
func TestMigrationsAreSequentialAndParallel(t *testing.T) {
	dialects := []files{{d: "sqlite", dir: "../../store/sqlite/sql/schema"}, {d: "postgres", dir: "../../store/postgres/sql/schema"}}
	for _, kind := range []string{"core", "set"} {
		t.Run(kind, func(t *testing.T) {
			var versions [][]int
			for _, d := range dialects {
				ms, err := Dialect(d, kind, false)
				require.NoError(t, err)
				require.NotEmpty(t, ms)
				var vs []int
				for i, m := range ms {
					assert.Equal(t, i+1, m.Version, "%s %s", d.d, m.Name)
					assert.NotEmpty(t, m.SQL)
					assert.NotContains(t, m.Name, DownSuffix, "a down migration read as an up one")
					vs = append(vs, m.Version)
				}
				// Every up migration has its down one, so a migration can go to 0.
				downs, err := Dialect(d, kind, true)
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
	_, err := Dialect(files{d: "mysql", dir: "../../store/mysql/sql/schema"}, "core", false)
	require.Error(t, err)
}

// A file that is not NNNN_name.sql (NNNN from 1) or NNNN_name.down.sql would never
// run: Read refuses the folder, naming it.
func TestReadRefusesMisnamedFiles(t *testing.T) {
	sql := &fstest.MapFile{Data: []byte(`SELECT 1`)}
	for _, c := range []struct {
		name             string
		fsys             fstest.MapFS
		upErr, downErr   string // in the error; "" for none
		upWant, downWant []int
	}{
		{name: "up and down", fsys: fstest.MapFS{"0001_a.sql": sql, "0002_b.sql": sql, "0001_a.down.sql": sql},
			upWant: []int{1, 2}, downWant: []int{1}},
		{name: "no number", fsys: fstest.MapFS{"a.sql": sql},
			upErr: "bad migration file name a.sql", downErr: "bad migration file name a.sql"},
		{name: "version 0", fsys: fstest.MapFS{"0000_a.sql": sql},
			upErr: "bad migration file name 0000_a.sql", downErr: "bad migration file name 0000_a.sql"},
		{name: "not SQL", fsys: fstest.MapFS{"0001_a.txt": sql},
			upErr: "bad migration file name 0001_a.txt", downErr: "bad migration file name 0001_a.txt"},
		{name: "twice", fsys: fstest.MapFS{"0001_a.sql": sql, "01_b.sql": sql}, upErr: "two migrations of version 1"},
		{name: "only down", fsys: fstest.MapFS{"0001_a.down.sql": sql}, upErr: "no migrations", downWant: []int{1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, down := range []bool{false, true} {
				want, wantErr := c.upWant, c.upErr
				if down {
					want, wantErr = c.downWant, c.downErr
				}
				ms, err := Read(c.fsys, down)
				if wantErr != "" {
					require.ErrorContains(t, err, wantErr, "down %v", down)
					continue
				}
				require.NoError(t, err, "down %v", down)
				var vs []int
				for _, m := range ms {
					vs = append(vs, m.Version)
				}
				assert.Equal(t, want, vs, "down %v", down)
			}
		})
	}
}

// IndexName keeps a name that fits as refset always wrote it, and makes one that
// PostgreSQL would cut short (at 63 bytes) fit, apart from the table's own name and
// from every other index's (which PostgreSQL's cut does not); with no limit (SQLite)
// every name is kept whole.
func TestIndexName(t *testing.T) {
	long := strings.Repeat("t", 56) + "_holds"
	cases := []struct {
		limit        int
		table, label string
		name, legacy string
	}{
		{63, "items_holds", "holder", "items_holds_holder", ""},
		{0, long, "expires", long + "_expires", ""},
		{63, strings.Repeat("t", 52), "expires", strings.Repeat("t", 52) + "_expires", ""}, // 61 bytes: fits
	}
	for _, c := range cases {
		name, legacy := IndexName(c.limit, c.table, c.label)
		if name != c.name || legacy != c.legacy {
			t.Errorf("IndexName(%d, %s, %s) = %q, %q; want %q, %q", c.limit, c.table, c.label, name, legacy, c.name, c.legacy)
		}
	}
	seen := map[string]string{}
	for _, table := range []string{long, strings.Repeat("t", 62), strings.Repeat("t", 63)} {
		for _, label := range []string{"holder", "expires", "due", "block_id_one_idx", "block_id_two_idx"} {
			name, legacy := IndexName(63, table, label)
			if len(name) > 63 || name == table || !strings.HasSuffix(name, "_"+label) {
				t.Errorf("IndexName(%s, %s) = %q: longer than 63 bytes, the table's name, or not ending in the label", table, label, name)
			}
			if legacy != (table + "_" + label)[:63] {
				t.Errorf("IndexName(%s, %s): legacy %q, want PostgreSQL's cut", table, label, legacy)
			}
			if other, ok := seen[name]; ok {
				t.Errorf("IndexName(%s, %s) = %q, as for %s", table, label, name, other)
			}
			seen[name] = table + " " + label
		}
	}
}
