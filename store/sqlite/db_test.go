package sqlite

import (
	"context"
	"database/sql"
	"errors"
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

// TestReadOnly: a database opened ReadOnly reads the file as it is, in either journal
// mode, and changes nothing of it: not its bytes, not its journal mode (Open
// otherwise switches it to WAL), and every write, through the writer or a unit of
// work, fails with refset.ErrInvalidConfig saying the database is read-only. A
// missing file is not created, and one that is no database fails Open.
func TestReadOnly(t *testing.T) { eachDriver(t, testReadOnly) }

func testReadOnly(t *testing.T, driverName string) {
	ctx := t.Context()
	// files are a file in each journal mode, as a program left it.
	files := map[string]string{}
	for _, mode := range []string{"delete", "wal"} {
		path := filepath.Join(t.TempDir(), mode+".db")
		pool, err := sql.Open(driverName, "file:"+path+"?_journal_mode="+mode)
		require.NoError(t, err)
		_, err = pool.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY); INSERT INTO items VALUES ('a')`)
		require.NoError(t, err)
		require.NoError(t, pool.Close())
		files[mode] = path
	}
	opts := Options{Driver: driverName, ReadOnly: true}

	for mode, path := range files {
		t.Run(mode, func(t *testing.T) {
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			stat, err := os.Stat(path)
			require.NoError(t, err)
			// A change within the same clock tick would keep the modification time.
			time.Sleep(10 * time.Millisecond)

			db := openAt(t, path, opts)
			for _, q := range []refset.Querier{db.Writer(), db.Readers()} {
				var id, journal string
				require.NoError(t, q.QueryRowContext(ctx, `SELECT id FROM items`).Scan(&id))
				require.Equal(t, "a", id)
				require.NoError(t, q.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal))
				require.Equal(t, mode, journal, "the file's journal mode is left as it is")
			}
			_, err = db.Writer().ExecContext(ctx, `INSERT INTO items VALUES ('b')`)
			err = db.TranslateError(err, "")
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			require.ErrorContains(t, err, "the database is read-only")
			err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `DELETE FROM items`)
				return err
			})
			require.ErrorIs(t, err, refset.ErrInvalidConfig, "a unit of work reads, but does not write")
			require.NoError(t, db.Close())

			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, before, after, "the file is unchanged, byte for byte")
			stat2, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, stat.ModTime(), stat2.ModTime())
		})
	}

	t.Run("immutable", func(t *testing.T) {
		db := openAt(t, files["wal"], Options{Driver: driverName, ReadOnly: true, Immutable: true})
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&n))
		require.Equal(t, 1, n)
		_, err := Open(ctx, files["wal"], Options{Driver: driverName, Immutable: true})
		require.ErrorIs(t, err, refset.ErrInvalidConfig, "Immutable is for a file opened ReadOnly")
	})

	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.db")
		_, err := Open(ctx, missing, opts)
		require.ErrorIs(t, err, refset.ErrUnavailable)
		require.NoFileExists(t, missing, "a file opened read-only is never created")
	})

	t.Run("not a database", func(t *testing.T) {
		text := filepath.Join(t.TempDir(), "notes.txt")
		require.NoError(t, os.WriteFile(text, []byte("these are not the pages of a SQLite database, not at all"), 0o644))
		_, err := Open(ctx, text, opts)
		require.ErrorIs(t, err, refset.ErrUnavailable)
		require.ErrorContains(t, err, "not a database")
	})
}

// TestInducedFailures: the failures a SQLite file meets (another process holding the
// write lock past the busy timeout, a file that is not a database, a directory that
// is gone) are the sentinels the docs promise, and a failed call changed nothing.
func TestInducedFailures(t *testing.T) { eachDriver(t, testInducedFailures) }

func testInducedFailures(t *testing.T, driverName string) {
	ctx := t.Context()

	t.Run("another process holds the write lock", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "busy.db")
		db, err := Open(ctx, path, Options{BusyTimeout: 50 * time.Millisecond, Driver: driverName})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		_, err = db.Writer().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY)`)
		require.NoError(t, err)

		// A second handle on the file, as another process would have, takes the
		// write lock and keeps it.
		other := openAt(t, path, Options{Driver: driverName})
		holder, err := other.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { holder.Rollback() })
		_, err = holder.ExecContext(ctx, `INSERT INTO items VALUES ('theirs')`)
		require.NoError(t, err)

		err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO items VALUES ('mine')`)
			return err
		})
		require.ErrorIs(t, err, refset.ErrConflict, "retried, then reported as a conflict")
		require.NoError(t, holder.Rollback())
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&n))
		assert.Zero(t, n, "nothing was written")
	})

	t.Run("a file that is not a database", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "not.db")
		require.NoError(t, os.WriteFile(path, []byte("this is not a SQLite database, and it is long enough to have a header of its own....."), 0o600))
		_, err := Open(ctx, path, Options{Driver: driverName})
		require.ErrorIs(t, err, refset.ErrUnavailable)
	})

	t.Run("a directory that does not exist", func(t *testing.T) {
		_, err := Open(ctx, filepath.Join(t.TempDir(), "gone", "x.db"), Options{Driver: driverName})
		require.ErrorIs(t, err, refset.ErrUnavailable)
	})

	t.Run("bad options", func(t *testing.T) {
		_, err := Open(ctx, ":memory:", Options{})
		require.ErrorIs(t, err, refset.ErrInvalidConfig)
		_, err = Open(ctx, filepath.Join(t.TempDir(), "x.db"), Options{Synchronous: "OFF"})
		require.ErrorIs(t, err, refset.ErrInvalidConfig)
	})

	t.Run("cancelled context", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := Open(cancelled, filepath.Join(t.TempDir(), "x.db"), Options{Driver: driverName})
		require.ErrorIs(t, err, context.Canceled)
	})
}

func mkdirFor(path string) error {
	return os.MkdirAll(filepath.Dir(path), 0o755)
}

// TestTranslateCodes: every SQLite result code maps to a sentinel, for the codes no
// test can stage on a real file (an I/O error, memory running out); both drivers'
// errors reach this one switch with SQLite's own codes (TestErrorsMapAlikeOnBothDrivers).
func TestTranslateCodes(t *testing.T) {
	cases := []struct {
		name string
		code int
		want error
	}{
		{"busy", codeBusy, refset.ErrConflict},
		{"locked", codeLocked, refset.ErrConflict},
		{"busy snapshot", codeBusy | 2<<8, refset.ErrConflict},
		{"I/O error", codeIOErr, refset.ErrUnavailable},
		{"I/O error writing", codeIOErr | 3<<8, refset.ErrUnavailable},
		{"full", codeFull, refset.ErrUnavailable},
		{"cannot open", codeCantOpen, refset.ErrUnavailable},
		{"corrupt", codeCorrupt, refset.ErrUnavailable},
		{"no memory", codeNoMem, refset.ErrUnavailable},
		{"protocol", codeProtocol, refset.ErrUnavailable},
		{"not a database", codeNotADB, refset.ErrUnavailable},
		{"read-only", codeReadOnly, refset.ErrInvalidConfig},
		{"read-only directory", codeReadOnly | 6<<8, refset.ErrInvalidConfig},
		{"interrupt", codeInterrupt, context.Canceled},
		{"unique", codeConstraintUnique, refset.ErrDuplicate},
		{"primary key", codeConstraintPrimaryKey, refset.ErrDuplicate},
		{"not null", codeConstraintNotNull, refset.ErrConstraint},
		{"constraint", codeConstraint, refset.ErrConstraint},
		{"datatype", codeConstraintDataType, refset.ErrStatement}, // a STRICT table's type, as Postgres's 22P02
		{"mismatch", codeMismatch, refset.ErrStatement},
		{"error", codeError, refset.ErrStatement},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			driverErr := errors.New("a driver's error")
			err := translateCode(driverErr, tc.code, driverErr.Error(), "")
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, driverErr, "the driver's error stays reachable")
		})
	}
}

// The database clock (nowMillis, by which holds and locks expire and clean-up is
// due) is SQLite's own time in whole milliseconds, exactly: SQLite's strftime writes
// that time's seconds and milliseconds as text, which no floating point touches.
// (Cut rather than rounded, a millisecond came out one low about half the time.)
// A trigger installed with the clock as earlier versions wrote it still tells its
// grace period.
func TestDatabaseClockIsExact(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		db := openDB(t, Options{Driver: driverName})
		exact := `CAST(strftime('%s', 'now') AS INTEGER) * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)`
		off := 0
		for range 2000 {
			var clock, want int64
			require.NoError(t, db.Writer().QueryRowContext(t.Context(), `SELECT `+nowMillis+`, `+exact).Scan(&clock, &want))
			if clock != want {
				off++
			}
		}
		require.Zero(t, off, "of 2000 readings, the clock was off by a millisecond")
	})
	for _, clock := range []string{nowMillis, legacyNowMillis} {
		grace, ok := cleanupDialect{}.InstalledGraceIn(`INSERT INTO q VALUES (NEW."id", ` + clock + ` + 1500)`)
		require.True(t, ok, clock)
		require.Equal(t, 1500*time.Millisecond, grace, clock)
	}
}
