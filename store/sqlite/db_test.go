package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every connection, writer and readers alike, must enforce foreign keys: SQLite
// turns them on per connection, so one pooled connection without them would let a
// referenced object be deleted. Both drivers read Open's parameters alike.
func TestOpenSetsUpEveryConnection(t *testing.T) {
	eachDriver(t, testOpenSetsUpEveryConnection)
}

func testOpenSetsUpEveryConnection(t *testing.T, driverName string) {
	db := openDB(t, Options{Driver: driverName, BusyTimeout: 1234 * time.Millisecond})
	ctx := t.Context()

	pragma := func(q refset.Querier, name string) string {
		t.Helper()
		var v string
		require.NoError(t, q.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v))
		return v
	}
	assert.Equal(t, "1", pragma(db.Writer(), "foreign_keys"))
	assert.Equal(t, "wal", pragma(db.Writer(), "journal_mode"))
	assert.Equal(t, "2", pragma(db.Writer(), "synchronous"), "FULL by default")
	assert.Equal(t, "0", pragma(db.Writer(), "query_only"))
	assert.Equal(t, "1234", pragma(db.Writer(), "busy_timeout"))

	// Hold several reader connections at once, so each is a distinct one.
	var conns []interface{ Close() error }
	for range 4 {
		c, err := db.Readers().Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		assert.Equal(t, "1", pragma(c, "foreign_keys"))
		assert.Equal(t, "1", pragma(c, "query_only"))
		assert.Equal(t, "1234", pragma(c, "busy_timeout"))
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
}

func TestOpenOptions(t *testing.T) { eachDriver(t, testOpenOptions) }

func testOpenOptions(t *testing.T, driverName string) {
	ctx := t.Context()
	tests := []struct {
		name    string
		path    string
		opts    Options
		wantErr bool
	}{
		{"memory is refused", ":memory:", Options{}, true},
		{"empty path is refused", "", Options{}, true},
		{"unknown synchronous", "x.db", Options{Synchronous: "OFF"}, true},
		{"normal synchronous", "y.db", Options{Synchronous: "NORMAL"}, false},
		{"a path with odd characters", "a dir?#%/z.db", Options{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path != "" && path != ":memory:" {
				path = filepath.Join(t.TempDir(), path)
				require.NoError(t, mkdirFor(path))
			}
			tc.opts.Driver = driverName
			db, err := Open(ctx, path, tc.opts)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Writer().ExecContext(ctx, `CREATE TABLE t (x INTEGER)`)
			require.NoError(t, err)
			require.FileExists(t, path)
			if tc.opts.Synchronous == "NORMAL" {
				var v int
				require.NoError(t, db.Writer().QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v))
				assert.Equal(t, 1, v)
			}
		})
	}
}

// A write through the reader pool is refused: writes go through the one writer.
func TestReadersAreReadOnly(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		db := openDB(t, Options{Driver: driverName})
		_, err := db.Readers().ExecContext(context.Background(), `CREATE TABLE t (x INTEGER)`)
		require.Error(t, err)
	})
}

func mkdirFor(path string) error {
	return os.MkdirAll(filepath.Dir(path), 0o755)
}
