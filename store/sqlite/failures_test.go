package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInducedFailures: the failures a SQLite file meets (another process holding the
// write lock past the busy timeout, a file that is not a database, a directory that
// is gone) are the sentinels the docs promise, and a failed call changed nothing.
func TestInducedFailures(t *testing.T) {
	ctx := t.Context()

	t.Run("another process holds the write lock", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "busy.db")
		db, err := Open(ctx, path, Options{BusyTimeout: 50 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		_, err = db.Writer().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY)`)
		require.NoError(t, err)

		// A second handle on the file, as another process would have, takes the
		// write lock and keeps it.
		other := openFile(t, path)
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
		_, err := Open(ctx, path, Options{})
		require.ErrorIs(t, err, refset.ErrUnavailable)
	})

	t.Run("a directory that does not exist", func(t *testing.T) {
		_, err := Open(ctx, filepath.Join(t.TempDir(), "gone", "x.db"), Options{})
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
		_, err := Open(cancelled, filepath.Join(t.TempDir(), "x.db"), Options{})
		require.ErrorIs(t, err, context.Canceled)
	})
}

// TestTranslateCodes: every go-sqlite3 error maps to a sentinel by its code, for the
// codes no test here can stage (a full disk, an I/O error).
func TestTranslateCodes(t *testing.T) {
	cases := []struct {
		code sqlite3.ErrNo
		ext  sqlite3.ErrNoExtended
		want error
	}{
		{sqlite3.ErrBusy, 0, refset.ErrConflict},
		{sqlite3.ErrLocked, 0, refset.ErrConflict},
		{sqlite3.ErrIoErr, 0, refset.ErrUnavailable},
		{sqlite3.ErrFull, 0, refset.ErrUnavailable},
		{sqlite3.ErrCantOpen, 0, refset.ErrUnavailable},
		{sqlite3.ErrCorrupt, 0, refset.ErrUnavailable},
		{sqlite3.ErrInterrupt, 0, context.Canceled},
		{sqlite3.ErrConstraint, sqlite3.ErrConstraintUnique, refset.ErrDuplicate},
		{sqlite3.ErrConstraint, sqlite3.ErrConstraintNotNull, refset.ErrConstraint},
		{sqlite3.ErrConstraint, errConstraintDataType, refset.ErrStatement}, // a STRICT table's type, as Postgres's 22P02
		{sqlite3.ErrMismatch, 0, refset.ErrStatement},
		{sqlite3.ErrError, 0, refset.ErrStatement},
	}
	db := &DB{}
	for _, tc := range cases {
		t.Run(tc.code.Error(), func(t *testing.T) {
			driverErr := sqlite3.Error{Code: tc.code, ExtendedCode: tc.ext}
			err := db.TranslateError(driverErr, "")
			require.ErrorIs(t, err, tc.want)
			var se sqlite3.Error
			require.True(t, errors.As(err, &se), "the driver's error stays reachable")
		})
	}
}
