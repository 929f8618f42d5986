package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
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

// numericKeyIDs are string IDs and whether a key column of SQLite's NUMERIC affinity
// changes them: stores them as a number other than a 64-bit integer as written, which
// reads back as another string, or as a REAL, which may ("12.5") or may not
// ("1234567.5") read back as written. TestNumericKeyKeepsStringIDs checks this
// against SQLite itself, on each driver.
var numericKeyIDs = []struct {
	id      string
	changed bool
}{
	// Stored as a number that does or may read back otherwise: refused.
	{"0012", true}, {"00", true}, {"+12", true}, {"-0", true},
	{" 12", true}, {"12 ", true}, {"  12 ", true}, {"\t12\n", true}, {"\v12\f\r", true},
	{"12\x00", true}, {"12\x00abc", true}, // the text ends at NUL: "abc" would be lost
	{"1e5", true}, {"1E5", true}, {"1.e5", true}, {"0001e2", true}, {"1.5e3", true}, {"0e0", true},
	{"1.", true}, {".5", true}, {"12.0", true}, {"-.5e-3", true}, {"1234567.5", true},
	{"12.5", true}, {"0.1", true}, // REALs that read back as written, but a REAL may not
	{"1e999", true}, {"-1e999", true}, {"1e-400", true},
	{"9223372036854775808", true}, {"-9223372036854775809", true},
	{"12345678901234567890", true}, {"12345678901234567891", true}, // one REAL: the same object
	// Read back as written: taken. A 64-bit integer as strconv writes it is stored as
	// that INTEGER and reads back the same; everything else stays text.
	{"12", false}, {"-12", false}, {"0", false},
	{"9223372036854775807", false}, {"-9223372036854775808", false},
	{"0x10", false}, {"0X10", false}, {"1e", false}, {"1e+", false}, {".", false}, {"+", false}, {"-", false},
	{"--1", false}, {"+-1", false}, {"1 2", false}, {"12 a", false}, {"1.2.3", false}, {"1e5.5", false},
	{"inf", false}, {"Infinity", false}, {"NaN", false}, {"1_000", false}, {"12abc", false},
	{"\x0012", false}, {"1e\x005", false}, {" ", false}, {"\u00a012", false}, {"١٢", false}, {"１２", false},
	{"0b7e5c4e-8f6a-4b8e-9f3e-1c2d3e4f5a6b", false}, {"2024-01-02", false},
}

// A key of SQLite's NUMERIC affinity (declared UUID, NUMERIC, DECIMAL, BOOLEAN)
// takes a string ID type, but stores a string that reads as a number ("0012", "1e5",
// " 12", 20 digits) as that number: the object would read back under another ID, and
// two IDs would name one object. Each such ID is refused with refset.ErrInvalidID,
// saying to declare the key TEXT, by every call that sends an ID, before it writes
// anything; every other string is kept as written, in the object's table and its
// holds table alike. What SQLite changes is asked of SQLite itself (the expectations
// in numericKeyIDs are checked against it), on each driver. A TEXT key keeps every
// string. A key declared DATE, DATETIME or TIMESTAMP, which the drivers read as a
// time, takes no string ID type.
func TestNumericKeyKeepsStringIDs(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, declared := range []string{"UUID", "NUMERIC", "DECIMAL(20,0)", "BOOLEAN", "TEXT"} {
			t.Run(declared, func(t *testing.T) { testNumericKeyKeepsStringIDs(t, driverName, declared) })
		}
		for _, declared := range []string{"DATE", "datetime", "TIMESTAMP"} {
			t.Run(declared, func(t *testing.T) {
				ctx := t.Context()
				db := openDB(t, Options{Driver: driverName})
				_, err := db.Writer().ExecContext(ctx, fmt.Sprintf(`CREATE TABLE objs (id %s PRIMARY KEY, n INTEGER NOT NULL)`, declared))
				require.NoError(t, err)
				_, err = db.Writer().ExecContext(ctx, `INSERT INTO objs VALUES ('2024-01-02', 0)`)
				require.NoError(t, err)
				var back string
				require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT id FROM objs`).Scan(&back))
				require.NotEqual(t, "2024-01-02", back, "the driver reads the text back as a time")
				_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
				require.ErrorIs(t, err, refset.ErrSchema)
				require.ErrorContains(t, err, "read as a time")
			})
		}
	})
}

func testNumericKeyKeepsStringIDs(t *testing.T, driverName, declared string) {
	ctx := t.Context()
	db := openDB(t, Options{Driver: driverName})
	for _, q := range []string{
		fmt.Sprintf(`CREATE TABLE objs (id %s PRIMARY KEY, n INTEGER NOT NULL)`, declared),
		fmt.Sprintf(`CREATE TABLE probe (x %s)`, declared),
	} {
		_, err := db.Writer().ExecContext(ctx, q)
		require.NoError(t, err)
	}
	st, err := store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
	require.NoError(t, err, "a string ID type is taken on a %s key", declared)
	set := refset.New(st)
	numeric := declared != "TEXT"
	stored := func(query string) []string {
		var got []string
		require.NoError(t, db.Readers().SelectContext(ctx, &got, query))
		return got
	}

	var kept []string
	for i, c := range numericKeyIDs {
		// What SQLite makes of the string in such a column, as a driver reads it back.
		_, err := db.Writer().ExecContext(ctx, `DELETE FROM probe; INSERT INTO probe VALUES (?)`, c.id)
		require.NoError(t, err)
		var typ, back string
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT typeof(x), x FROM probe`).Scan(&typ, &back))
		refused, changed := c.changed && numeric, typ == "real" || back != c.id
		if declared == "BOOLEAN" {
			// go-sqlite3 reads an INTEGER in it as a bool: every number is refused.
			refused, changed = typ != "text", typ != "text"
			require.True(t, refused || !c.changed, "%q", c.id)
		}
		require.Equal(t, refused, changed, "%q is stored in a %s column as the %s %q", c.id, declared, typ, back)

		tok, err := set.Add(ctx, item{Key: c.id, N: int64(i)}, set.Hold("keeper", 0))
		if !refused {
			require.NoError(t, err, "%q is kept as written", c.id)
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			require.Equal(t, item{Key: c.id, N: int64(i)}, *lease.Value(), "%q reads back as added", c.id)
			kept = append(kept, c.id)
			continue
		}
		require.ErrorIs(t, err, refset.ErrInvalidID, "%q", c.id)
		for _, want := range []string{fmt.Sprintf("%q", c.id), `"id"`, declared, "NUMERIC affinity", "declare the column TEXT"} {
			require.ErrorContains(t, err, want, "the error says which ID, which column, why and what to do")
		}
		// Every other call that sends the ID refuses it too, sending nothing.
		_, err = set.AddAll(ctx, []item{{Key: "fine" + strconv.Itoa(i)}, {Key: c.id}})
		require.ErrorIs(t, err, refset.ErrInvalidID, "AddAll %q", c.id)
		_, err = set.Upgrade(ctx, c.id)
		require.ErrorIs(t, err, refset.ErrInvalidID, "Upgrade %q", c.id)
		_, err = set.Upgrade(ctx, c.id, set.Hold("keeper", 0))
		require.ErrorIs(t, err, refset.ErrInvalidID, "Upgrade %q with a command", c.id)
		_, err = set.Load(ctx, c.id)
		require.ErrorIs(t, err, refset.ErrInvalidID, "Load %q", c.id)
		_, err = st.Get(ctx, db.Readers(), c.id)
		require.ErrorIs(t, err, refset.ErrInvalidID, "the store's Get %q", c.id)
		_, err = st.Has(ctx, db.Readers(), c.id)
		require.ErrorIs(t, err, refset.ErrInvalidID, "the store's Has %q", c.id)
		require.ErrorIs(t, st.Hold(ctx, db.Writer(), c.id, "keeper", 0), refset.ErrInvalidID, "the store's Hold %q", c.id)
		require.ErrorIs(t, st.Unhold(ctx, db.Writer(), c.id, "keeper"), refset.ErrInvalidID, "the store's Unhold %q", c.id)
	}
	require.Equal(t, kept, stored(`SELECT id FROM objs ORDER BY n`), "the objects' IDs, each as added, and no other")
	require.ElementsMatch(t, kept, stored(`SELECT object_id FROM objs_holds`), "the holds' IDs, each as added, and no other")
}
