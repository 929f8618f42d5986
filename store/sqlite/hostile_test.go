package sqlite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// busyTimeout is the busy_timeout, in milliseconds, of db's writer and of one of its
// readers.
func busyTimeout(tb testing.TB, db *DB) (writer, reader int64) {
	tb.Helper()
	require.NoError(tb, db.Writer().QueryRowContext(tb.Context(), "PRAGMA busy_timeout").Scan(&writer))
	require.NoError(tb, db.Readers().QueryRowContext(tb.Context(), "PRAGMA busy_timeout").Scan(&reader))
	return writer, reader
}

// requireNoFile fails tb if dir holds a file: a refused Open creates none.
func requireNoFile(tb testing.TB, dir string) {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(tb, err)
	require.Empty(tb, ents, "a refused Open creates no file")
}

// BusyTimeout is how long a connection waits for a lock: every positive duration
// makes the connections wait (SQLite counts whole milliseconds, and reads 0 or a
// negative number as "never wait"), however small or large, and a negative one is
// refused, creating no file.
func TestHostileBusyTimeout(t *testing.T) {
	cases := []struct {
		name string
		busy time.Duration
		want int64 // busy_timeout in ms; 0: Open refuses
	}{
		{"zero is 5s", 0, 5000},
		{"a millisecond", time.Millisecond, 1},
		{"under a millisecond rounds up", 500 * time.Microsecond, 1},
		{"a nanosecond rounds up", time.Nanosecond, 1},
		{"a fraction rounds up", 1500 * time.Microsecond, 2},
		{"past a C int is the most SQLite takes", 1000 * time.Hour, 1<<31 - 1},
		{"the largest duration", time.Duration(1<<63 - 1), 1<<31 - 1},
		{"negative", -time.Second, 0},
		{"a negative nanosecond", -time.Nanosecond, 0},
	}
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "x.db")
				db, err := Open(t.Context(), path, Options{Driver: driverName, BusyTimeout: c.busy})
				if c.want == 0 {
					require.ErrorIs(t, err, refset.ErrInvalidConfig)
					require.ErrorContains(t, err, "BusyTimeout")
					requireNoFile(t, dir)
					return
				}
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
				w, r := busyTimeout(t, db)
				require.Equal(t, c.want, w, "the writer's busy_timeout")
				require.Equal(t, c.want, r, "the readers' busy_timeout")
			})
		}
	})
}

// A file name is the file opened: one with a NUL byte, which SQLite would read up to
// the NUL and so open (and create) another file, is refused, as a path and as a
// file: URL, and FilePath refuses it alike.
func TestHostileNULInPath(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, form := range []struct{ name, prefix, nul string }{
			{"path", "", "\x00"},
			{"file: URL", "file:", "%00"},
		} {
			t.Run(form.name, func(t *testing.T) {
				dir := t.TempDir()
				dsn := form.prefix + filepath.Join(dir, "a") + form.nul + "b.db"
				_, err := FilePath(dsn)
				require.ErrorIs(t, err, refset.ErrInvalidConfig)
				db, err := Open(t.Context(), dsn, Options{Driver: driverName})
				if err == nil {
					db.Close()
				}
				require.ErrorIs(t, err, refset.ErrInvalidConfig)
				require.ErrorContains(t, err, "NUL")
				requireNoFile(t, dir)
			})
		}
	})
}
