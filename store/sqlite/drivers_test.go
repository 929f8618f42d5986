package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDriverChoice: Options.Driver picks the driver both pools dial with, through
// Open and store.Open alike; empty is go-sqlite3 where cgo built it and
// modernc.org/sqlite where it did not, and a driver this build cannot run, or does
// not know, is refused with refset.ErrInvalidConfig that says what to set.
func TestDriverChoice(t *testing.T) {
	ctx := t.Context()
	defaultDriver := DriverModernc
	if mattnLinked() {
		defaultDriver = DriverMattn
	}
	cases := []struct {
		name, driver string
		want         string // the driver both pools dial with; "": refused
		wantInError  string
	}{
		{"default", "", defaultDriver, ""},
		{"modernc", DriverModernc, DriverModernc, ""},
		{"mattn", DriverMattn, map[bool]string{true: DriverMattn}[mattnLinked()], "CGO_ENABLED=0"},
		{"unknown", "sqlite4", "", `want "sqlite3" or "sqlite"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Driver: tc.driver}
			for _, open := range []struct {
				name string
				fn   func(path string) (refset.Database, error)
			}{
				{"Open", func(path string) (refset.Database, error) { return Open(ctx, path, opts) }},
				{"store.Open", func(path string) (refset.Database, error) { return store.Open(ctx, "file:"+path, opts) }},
			} {
				path := filepath.Join(t.TempDir(), "x.db")
				got, err := open.fn(path)
				if tc.want == "" {
					require.ErrorIs(t, err, refset.ErrInvalidConfig, open.name)
					assert.Contains(t, err.Error(), tc.wantInError, open.name)
					assert.NoFileExists(t, path, "a refused Open creates no file")
					continue
				}
				require.NoError(t, err, open.name)
				db := got.(*DB)
				for _, pool := range []string{"writer", "readers"} {
					p := db.Writer()
					if pool == "readers" {
						p = db.Readers()
					}
					d, err := driverOf(p.Driver())
					require.NoError(t, err)
					assert.Equal(t, tc.want, d.Name, "%s: the %s' driver", open.name, pool)
				}
				require.NoError(t, db.Close())
			}
		})
	}
}

// TestErrorsMapAlikeOnBothDrivers: each failure a statement meets on a real file
// carries the same SQLite result code on both drivers, and TranslateError maps it to
// the same sentinel, keeping the driver's own error reachable.
func TestErrorsMapAlikeOnBothDrivers(t *testing.T) {
	const schema = `
CREATE TABLE parent (id INTEGER PRIMARY KEY, u TEXT UNIQUE, n INTEGER NOT NULL DEFAULT 0 CHECK (n >= 0));
CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER NOT NULL REFERENCES parent (id));
CREATE TABLE guarded (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent (id) ON DELETE RESTRICT);
CREATE TABLE typed (x INTEGER) STRICT;
INSERT INTO parent (id, u) VALUES (1, 'a'), (2, 'b');
INSERT INTO child VALUES (1, 1);
INSERT INTO guarded VALUES (1, 2);`
	cases := []struct {
		name  string
		setup string // run first, on the writer
		query string
		code  int
		want  error
	}{
		{"primary key", "", `INSERT INTO parent (id, u) VALUES (1, 'z')`, codeConstraintPrimaryKey, refset.ErrDuplicate},
		{"unique", "", `INSERT INTO parent (id, u) VALUES (3, 'a')`, codeConstraintUnique, refset.ErrDuplicate},
		{"missing parent", "", `INSERT INTO child VALUES (2, 99)`, codeConstraintForeignKey, refset.ErrNotFound},
		{"referenced parent", "", `DELETE FROM parent WHERE id = 1`, codeConstraintForeignKey, refset.ErrReferenced},
		{"restricted parent", "", `DELETE FROM parent WHERE id = 2`, codeConstraintTrigger, refset.ErrReferenced},
		{"not null", "", `INSERT INTO child (id) VALUES (5)`, codeConstraintNotNull, refset.ErrConstraint},
		{"check", "", `UPDATE parent SET n = -1 WHERE id = 1`, codeConstraint | 1<<8, refset.ErrConstraint},
		{"strict type", "", `INSERT INTO typed VALUES ('abc')`, codeConstraintDataType, refset.ErrStatement},
		{"mismatch", "", `INSERT INTO parent (id, u) VALUES ('x', 'q')`, codeMismatch, refset.ErrStatement},
		{"no such table", "", `SELECT * FROM missing`, codeError, refset.ErrSchema},
		{"syntax", "", `SELEC 1`, codeError, refset.ErrStatement},
		{"full", `PRAGMA max_page_count = 1`, `INSERT INTO parent (id, u) VALUES (10, zeroblob(100000))`, codeFull, refset.ErrUnavailable},
	}
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				db := openDB(t, Options{Driver: driverName})
				_, err := db.Writer().ExecContext(ctx, schema)
				require.NoError(t, err)
				if tc.setup != "" {
					_, err = db.Writer().ExecContext(ctx, tc.setup)
					require.NoError(t, err)
				}
				_, raw := db.Writer().ExecContext(ctx, tc.query)
				require.Error(t, raw)
				code, _, ok := resultCode(raw)
				require.True(t, ok, "a driver's error: %T %v", raw, raw)
				assert.Equal(t, tc.code, code, "SQLite's result code: %v", raw)

				err = db.TranslateError(raw, tc.query)
				require.ErrorIs(t, err, tc.want)
				require.ErrorIs(t, err, raw, "the driver's error stays reachable")
			})
		}

		t.Run("busy", func(t *testing.T) {
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "x.db")
			db := openAt(t, path, Options{Driver: driverName, BusyTimeout: 20 * time.Millisecond})
			_, err := db.Writer().ExecContext(ctx, schema)
			require.NoError(t, err)
			other := openAt(t, path, Options{Driver: driverName})
			holder, err := other.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { holder.Rollback() })
			_, err = holder.ExecContext(ctx, `INSERT INTO parent (id, u) VALUES (7, 'theirs')`)
			require.NoError(t, err)

			const query = `INSERT INTO parent (id, u) VALUES (8, 'mine')`
			_, raw := db.Writer().ExecContext(ctx, query)
			code, _, ok := resultCode(raw)
			require.True(t, ok, "a driver's error: %T %v", raw, raw)
			assert.Equal(t, codeBusy, code&0xff, "SQLite's result code: %v", raw)
			require.ErrorIs(t, db.TranslateError(raw, query), refset.ErrConflict)
		})

		t.Run("interrupted", func(t *testing.T) {
			// A statement running when its context ends stops, and says why: each
			// driver interrupts it in its own way (go-sqlite3 with SQLITE_INTERRUPT,
			// modernc.org/sqlite with the context's error).
			db := openDB(t, Options{Driver: driverName})
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			const forever = `WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c`
			err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				var n int
				return tx.QueryRowContext(ctx, forever).Scan(&n)
			})
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
	})
}

// TestNoCgoDefault: without cgo, the pure-Go driver is what Open dials, and works:
// the test that scripts/test.sh runs with CGO_ENABLED=0 to prove a program built so
// runs on SQLite. With cgo it checks that go-sqlite3 stays the default.
func TestNoCgoDefault(t *testing.T) {
	db := openDB(t, Options{})
	d, err := driverOf(db.Writer().Driver())
	require.NoError(t, err)
	if mattnLinked() {
		require.Equal(t, DriverMattn, d.Name)
		return
	}
	require.Equal(t, DriverModernc, d.Name)
	var version string
	require.NoError(t, db.Readers().QueryRowContext(t.Context(), `SELECT sqlite_version()`).Scan(&version))
	assert.True(t, strings.HasPrefix(version, "3."), version)
	assert.False(t, errors.Is(err, refset.ErrInvalidConfig))
}

// A multi-row insert binds at most 512 parameters on modernc.org/sqlite, whose
// binding costs n²/2 steps for n of them, and up to the default on go-sqlite3; either
// way AddAll of more rows than one statement takes stores every one of them.
func TestMultiRowInsertsOnEachDriver(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx := t.Context()
		db, set := itemsDB(t, Options{Driver: driverName})
		d, err := refsetdriver.Of(db)
		require.NoError(t, err)
		want := 0
		if driverName == DriverModernc {
			want = 512
		}
		assert.Equal(t, want, d.Statements(refsetdriver.SetTable{Columns: []string{"id", "n"}}).MaxInsertParams)

		items := make([]item, 1000) // 2 columns: 4 statements of 256 rows on modernc
		for i := range items {
			items[i] = item{Key: fmt.Sprintf("i%04d", i), N: int64(i)}
		}
		_, err = set.AddAll(ctx, items)
		require.NoError(t, err)
		var n, sum int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*), sum(n) FROM items`).Scan(&n, &sum))
		assert.Equal(t, 1000, n)
		assert.Equal(t, 999*1000/2, sum, "every row with its own values")
	})
}
