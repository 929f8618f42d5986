package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

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
