package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
