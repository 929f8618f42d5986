package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
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

// unitFunc is the function of a unit of work run by refset.InTx, told which run of
// it this is.
type unitFunc func(ctx context.Context, tx refset.Tx, run int32) error

// pairInGroup runs a, then b while a's first run holds the writer, so that b joins
// a's group (a's first run returns only once b waits for the writer). It returns each
// unit's error and runs.
func pairInGroup(ctx context.Context, t *testing.T, db *DB, a, b unitFunc) (aErr, bErr error, aRuns, bRuns int32) {
	t.Helper()
	aIn := make(chan struct{})
	var aN, bN atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		aErr = safeInTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			run := aN.Add(1)
			if run == 1 {
				defer func() {
					close(aIn)
					waitFor(ctx, t, func() bool { return engine.Stats(db.storeEngine).Waiting == 1 })
				}()
			}
			return a(ctx, tx, run)
		})
	})
	wg.Go(func() {
		<-aIn
		bErr = safeInTx(ctx, db, func(ctx context.Context, tx refset.Tx) error { return b(ctx, tx, bN.Add(1)) })
	})
	wg.Wait()
	return aErr, bErr, aN.Load(), bN.Load()
}

// safeInTx is refset.InTx, with a panic of fn returned as an error.
func safeInTx(ctx context.Context, db *DB, fn func(ctx context.Context, tx refset.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return refset.InTx(ctx, db, fn)
}

// execs runs queries in order, returning the first error; ignoring errors when
// ignore.
func execs(ctx context.Context, tx refset.Tx, ignore bool, queries ...string) error {
	for _, q := range queries {
		if _, err := tx.ExecContext(ctx, q); err != nil && !ignore {
			return err
		}
	}
	return nil
}

// hostileSetup are the rows and objects each case of TestHostileUnitInGroup starts
// with: an item p that the note np refers to, a pledge pp of p (checked at COMMIT),
// a unit row dup, and a table whose insert rolls back the whole transaction.
var hostileSetup = []string{
	`INSERT INTO items (id) VALUES ('p')`,
	`INSERT INTO notes (id, item) VALUES ('np', 'p')`,
	`INSERT INTO pledges (id, item) VALUES ('pp', 'p')`,
	`INSERT INTO units (id) VALUES ('dup')`,
	`CREATE TABLE boom (x)`,
	`CREATE TABLE checked (x INTEGER CHECK (x > 0))`,
	`CREATE TRIGGER boom_rolls_back BEFORE INSERT ON boom BEGIN SELECT RAISE(ROLLBACK, 'boom'); END`,
}

// A hostile unit of work in a group, first or second: whatever it does, the other
// unit is told committed exactly when its row is there, and never gets an error the
// hostile one caused but ErrConflict (which InTx runs again); the hostile unit's error
// is typed, and its row is there exactly when it is told committed; nothing dangles;
// the writer is usable afterwards, with foreign keys enforced.
func TestHostileUnitInGroup(t *testing.T) {
	type hostileCase struct {
		name string
		// fn is the hostile unit's function, after it wrote its row.
		fn func(ctx context.Context, tx refset.Tx) error
		// want is what the hostile unit must fail with (nil: it may commit).
		want error
	}
	cases := []hostileCase{
		{"returns nil after a failed statement", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, true, `INSERT INTO units (id) VALUES ('dup')`)
		}, nil},
		{"returns a wrapped context.Canceled", func(context.Context, refset.Tx) error {
			return fmt.Errorf("odd: %w", context.Canceled)
		}, context.Canceled},
		{"panics", func(context.Context, refset.Tx) error { panic("hostile") }, nil},
		{"foreign_keys off, dangling note", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA foreign_keys = OFF`, `INSERT INTO notes (id, item) VALUES ('dangles', 'no such item')`)
		}, refset.ErrInvalidCommand},
		{"foreign_keys off, deletes a referenced item", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA foreign_keys = OFF`, `DELETE FROM items WHERE id = 'p'`)
		}, refset.ErrInvalidCommand},
		{"defer_foreign_keys, deletes a referenced item", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA defer_foreign_keys = ON`, `DELETE FROM items WHERE id = 'p'`)
		}, refset.ErrConstraint},
		{"defer_foreign_keys, then rolls back", func(ctx context.Context, tx refset.Tx) error {
			_ = execs(ctx, tx, false, `PRAGMA defer_foreign_keys = ON`)
			return errors.New("rolls back")
		}, nil},
		{"deletes a pledged item", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `DELETE FROM notes WHERE id = 'np'`, `DELETE FROM items WHERE id = 'p'`)
		}, refset.ErrConstraint},
		{"journal_mode", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA journal_mode = DELETE`)
		}, refset.ErrInvalidCommand},
		{"query_only", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA query_only = ON`)
		}, refset.ErrInvalidCommand},
		{"ignore_check_constraints", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA ignore_check_constraints = ON`)
		}, refset.ErrInvalidCommand},
		{"locking_mode", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA main.locking_mode = EXCLUSIVE`)
		}, refset.ErrInvalidCommand},
		{"busy_timeout", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA busy_timeout(0)`)
		}, refset.ErrInvalidCommand},
		{"query_only, quoted, after another statement", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `SELECT 1; /* c */ pragma "QUERY_ONLY"=true`)
		}, refset.ErrInvalidCommand},
		{"reads pragmas", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `PRAGMA foreign_keys`, `PRAGMA main.query_only`, `PRAGMA table_info(items)`,
				`PRAGMA foreign_key_check`, `PRAGMA user_version = 7`, `SELECT * FROM pragma_table_info('items')`)
		}, errMustCommit},
		{"shadows a table with a temporary one", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `CREATE TEMP TABLE units (id TEXT PRIMARY KEY)`)
		}, refset.ErrInvalidCommand},
		{"shadows a table with a temporary view", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `CREATE VIEW temp.checked AS SELECT 1 AS x`)
		}, refset.ErrInvalidCommand},
		{"adds a temporary trigger to a table", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `CREATE TEMPORARY TRIGGER IF NOT EXISTS hides AFTER INSERT ON main.units BEGIN DELETE FROM units WHERE id = new.id; END`)
		}, refset.ErrInvalidCommand},
		{"leaves a savepoint open", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `SAVEPOINT mine`, `INSERT INTO units (id) VALUES ('in-mine')`)
		}, nil},
		{"releases a savepoint it did not open", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, true, `RELEASE mine`, `ROLLBACK TO mine`)
		}, nil},
		{"ends the transaction in other words", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, true, `END`, `END TRANSACTION`, `/* c */ COMMIT`, "-- c\nROLLBACK", `SELECT 1; END`, `ROLLBACK TRANSACTION`)
		}, refset.ErrInvalidCommand},
		{"rolls the transaction back with OR ROLLBACK, ignores it", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, true, `INSERT OR ROLLBACK INTO units (id) VALUES ('dup')`)
		}, nil},
		{"rolls the transaction back with RAISE(ROLLBACK), ignores it", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, true, `INSERT INTO boom (x) VALUES (1)`)
		}, nil},
		{"rolls the transaction back, writes on", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, true, `INSERT INTO boom (x) VALUES (1)`, `INSERT INTO units (id) VALUES ('after-boom')`)
		}, nil},
		{"leaves rows open", func(ctx context.Context, tx refset.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT id FROM units`)
			if err != nil {
				return err
			}
			rows.Next()
			return nil
		}, nil},
		{"DDL", func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `CREATE TABLE hostile (x)`, `INSERT INTO hostile VALUES (1)`)
		}, nil},
		{"DDL, then fails", func(ctx context.Context, tx refset.Tx) error {
			_ = execs(ctx, tx, false, `CREATE TABLE hostile (x)`, `DROP TABLE boom`)
			return errors.New("fails")
		}, nil},
	}
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, c := range cases {
			for _, hostileFirst := range []bool{false, true} {
				// deferred: the pledges' key is checked at COMMIT, and the units
				// run each alone; otherwise they share a group.
				for _, deferred := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/first=%v/deferred=%v", c.name, hostileFirst, deferred), func(t *testing.T) {
						open := groupDB
						if deferred {
							open = deferredGroupDB
						}
						ctx, db, _ := open(t, Options{Driver: driverName}, time.Minute)
						require.NoError(t, execs(ctx, db.Writer(), false, hostileSetup...))
						good := func(ctx context.Context, tx refset.Tx, run int32) error {
							return execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('good')`)
						}
						hostile := func(ctx context.Context, tx refset.Tx, run int32) error {
							if err := execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('hostile')`); err != nil {
								return err
							}
							return c.fn(ctx, tx)
						}
						var goodErr, hostileErr error
						if hostileFirst {
							hostileErr, goodErr, _, _ = pairInGroup(ctx, t, db, hostile, good)
						} else {
							goodErr, hostileErr, _, _ = pairInGroup(ctx, t, db, good, hostile)
						}
						want := c.want
						if c.name == "deletes a pledged item" && !deferred {
							want = refset.ErrReferenced // at once
						}
						checkHostileOutcome(ctx, t, db, goodErr, hostileErr, want)
					})
				}
			}
		}
	})
}

// errMustCommit is the want of a case of TestHostileUnitInGroup whose unit commits.
var errMustCommit = errors.New("must commit")

// checkHostileOutcome checks TestHostileUnitInGroup's outcome.
func checkHostileOutcome(ctx context.Context, t *testing.T, db *DB, goodErr, hostileErr, want error) {
	t.Helper()
	has := func(id string) bool {
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM units WHERE id = ?`, id).Scan(&n))
		return n == 1
	}
	assert.NoError(t, goodErr, "the well-behaved unit")
	assert.True(t, has("good"), "the well-behaved unit's row")
	if want == errMustCommit {
		assert.NoError(t, hostileErr, "the other unit")
	} else if want != nil {
		assert.ErrorIs(t, hostileErr, want)
	}
	if hostileErr != nil && !strings.HasPrefix(hostileErr.Error(), "panicked") {
		assert.True(t, refset.IsSentinel(hostileErr) || errors.Is(hostileErr, context.Canceled) || errors.Is(hostileErr, context.DeadlineExceeded) || strings.Contains(hostileErr.Error(), "rolls back") || strings.Contains(hostileErr.Error(), "fails"),
			"the hostile unit's error is typed: %v", hostileErr)
	}
	assert.Equal(t, hostileErr == nil, has("hostile"), "the hostile unit told %v", hostileErr)
	assert.True(t, has("dup"), "what was there stays")

	// The writer is usable, enforcing foreign keys at once.
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		return execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('after')`)
	}), "a unit after")
	assert.True(t, has("after"))
	err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		return execs(ctx, tx, false, `INSERT INTO notes (id, item) VALUES ('later', 'no such item')`)
	})
	assert.ErrorIs(t, err, refset.ErrNotFound, "foreign keys enforced after")
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		return execs(ctx, tx, false, `INSERT INTO checked (x) VALUES (-1)`)
	})
	assert.ErrorIs(t, err, refset.ErrConstraint, "CHECK constraints enforced after")
	var busy int
	require.NoError(t, db.Writer().QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy))
	assert.Equal(t, 5000, busy, "the writer waits for locks")
	var mode string
	require.NoError(t, db.Writer().QueryRowContext(ctx, `PRAGMA locking_mode`).Scan(&mode))
	assert.Equal(t, "normal", mode, "the writer's locking mode")
	var fk, defer_ int
	require.NoError(t, db.Writer().QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk))
	require.NoError(t, db.Writer().QueryRowContext(ctx, `PRAGMA defer_foreign_keys`).Scan(&defer_))
	assert.Equal(t, 1, fk, "the writer enforces foreign keys")
	assert.Zero(t, defer_, "the writer checks foreign keys at once")
	rows, err := db.Readers().QueryContext(ctx, `PRAGMA foreign_key_check`)
	require.NoError(t, err)
	assert.False(t, rows.Next(), "a reference dangles")
	require.NoError(t, rows.Close())
}

// settingPragma finds a PRAGMA that sets the connection in any statement of a query,
// however written, and nothing else.
func TestSettingPragma(t *testing.T) {
	for q, want := range map[string]string{
		`PRAGMA query_only = ON`:                                   "query_only",
		`pragma main.Query_Only=1`:                                 "query_only",
		`PRAGMA "main"."query_only" = 1`:                           "query_only",
		`PRAGMA [busy_timeout](0)`:                                 "busy_timeout",
		"SELECT ';'; -- x\n /* y */ PRAGMA locking_mode=EXCLUSIVE": "locking_mode",
		`PRAGMA "ignore_check""constraints" = 1`:                   "",
		`PRAGMA query_only`:                                        "",
		`PRAGMA main.query_only;`:                                  "",
		`PRAGMA table_info(items)`:                                 "",
		`PRAGMA user_version = 3`:                                  "",
		`PRAGMA defer_foreign_keys = ON`:                           "",
		`SELECT 'PRAGMA query_only = 1'`:                           "",
		`/* PRAGMA query_only = 1 */ SELECT 1`:                     "",
		`SELECT * FROM pragma_query_only`:                          "",
		`INSERT INTO pragma (query_only) VALUES (1)`:               "",
		`PRAGMA`: "",
	} {
		assert.Equal(t, want, settingPragma(q), q)
	}
}

// A unit of work's context ending at each stage of a group (before it joins, while it
// waits for the writer, while it runs, while it waits for the group's commit) ends
// that unit alone: it is told the context's error exactly when nothing of it
// committed, and the other unit of the group commits on its first run.
func TestGroupCommitContextStages(t *testing.T) {
	has := func(ctx context.Context, t *testing.T, db *DB, id string) bool {
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM units WHERE id = ?`, id).Scan(&n))
		return n == 1
	}
	insert := func(id string) unitFunc {
		return func(ctx context.Context, tx refset.Tx, _ int32) error {
			return execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('`+id+`')`)
		}
	}
	eachDriver(t, func(t *testing.T, driverName string) {
		t.Run("a's ends while it waits for the group's commit", func(t *testing.T) {
			for try := range 10 {
				ctx, db, _ := groupDB(t, Options{Driver: driverName}, time.Minute)
				aCtx, aCancel := context.WithCancel(ctx)
				defer aCancel()
				aErr, bErr := groupOfTwo(ctx, t, db, func(hold func()) error {
					return refset.InTx(aCtx, db, func(ctx context.Context, tx refset.Tx) error {
						if err := insert("a")(ctx, tx, 0); err != nil {
							return err
						}
						hold()
						return nil
					})
				}, func() error {
					return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
						aCancel() // a is kept by now, waiting for the commit b's end makes
						time.Sleep(time.Duration(try) * time.Millisecond)
						return insert("b")(ctx, tx, 0)
					})
				})
				require.NoError(t, bErr)
				assert.True(t, has(ctx, t, db, "b"))
				assert.Equal(t, aErr == nil, has(ctx, t, db, "a"), "try %d: a told %v", try, aErr)
				if aErr != nil {
					assert.ErrorIs(t, aErr, context.Canceled)
				}
			}
		})
		t.Run("b's ends while it waits for the writer", func(t *testing.T) {
			ctx, db, _ := groupDB(t, Options{Driver: driverName}, time.Minute)
			bCtx, bCancel := context.WithCancel(ctx)
			defer bCancel()
			var aErr, bErr error
			var aRuns atomic.Int32
			bOut := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				aErr = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					if aRuns.Add(1) == 1 {
						wg.Go(func() {
							defer close(bOut)
							bErr = refset.InTx(bCtx, db, func(ctx context.Context, tx refset.Tx) error { return insert("b")(ctx, tx, 0) }) //unitctx:outside b is another goroutine's unit, meant to join a's group
						})
						waitFor(ctx, t, func() bool { return engine.Stats(db.storeEngine).Waiting == 1 })
						bCancel()
						<-bOut // b left the line before a ends
					}
					return insert("a")(ctx, tx, 0)
				})
			})
			wg.Wait()
			require.NoError(t, aErr)
			assert.EqualValues(t, 1, aRuns.Load())
			require.ErrorIs(t, bErr, context.Canceled)
			assert.True(t, has(ctx, t, db, "a"))
			assert.False(t, has(ctx, t, db, "b"))
		})
		t.Run("before it joins", func(t *testing.T) {
			ctx, db, _ := groupDB(t, Options{Driver: driverName}, time.Minute)
			done, cancel := context.WithCancel(ctx)
			cancel()
			err := refset.InTx(done, db, func(ctx context.Context, tx refset.Tx) error { return insert("x")(ctx, tx, 0) })
			require.ErrorIs(t, err, context.Canceled)
			assert.False(t, has(ctx, t, db, "x"))
		})
	})
}

// chainInGroup runs units in order, each begun while the one before holds the
// writer (the one before returns from its first run only once the next waits for
// the writer), so that they join one group where the group may grow. It returns each
// unit's error.
func chainInGroup(ctx context.Context, t *testing.T, db *DB, units ...unitFunc) (errs []error, runs []int32) {
	t.Helper()
	errs, runs = make([]error, len(units)), make([]int32, len(units))
	next := make([]chan struct{}, len(units)+1)
	for i := range next {
		next[i] = make(chan struct{})
	}
	close(next[0])
	began := make([]atomic.Bool, len(units)+1)
	var wg sync.WaitGroup
	for i, u := range units {
		wg.Go(func() {
			<-next[i]
			var n atomic.Int32
			defer func() { runs[i] = n.Load() }()
			errs[i] = safeInTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				run := n.Add(1)
				began[i].Store(true)
				if run == 1 && i+1 < len(units) {
					defer func() {
						close(next[i+1])
						// The next unit waits for the writer, or got it: this one
						// ended before its return (group commit made it run alone).
						waitFor(ctx, t, func() bool { return engine.Stats(db.storeEngine).Waiting == 1 || began[i+1].Load() })
					}()
				}
				return u(ctx, tx, run)
			})
		})
	}
	wg.Wait()
	return errs, runs
}

// unitRuns is a unit of work that runs queries, stopping at the first that fails.
func unitRuns(queries ...string) unitFunc {
	return func(ctx context.Context, tx refset.Tx, _ int32) error { return execs(ctx, tx, false, queries...) }
}

// Foreign keys are enforced per unit of work: a unit that leaves a deferred foreign
// key violated when it ends fails, even when a later unit of its group would make the
// reference good before the shared COMMIT (run alone, before that unit, it fails).
// The key is deferred by its declaration, by PRAGMA defer_foreign_keys in the unit
// (first in its group or not), or by a unit's DDL in the group. Every other unit
// commits. The violating unit fails, or, if it was rolled back to run again alone
// and the later unit committed before it ran again, commits then, alone, rightly.
func TestDeferredViolationNotMaskedByAnotherUnit(t *testing.T) {
	const vows = `CREATE TABLE vows (id TEXT PRIMARY KEY, item TEXT REFERENCES items (id) DEFERRABLE INITIALLY DEFERRED)`
	cases := []struct {
		name     string
		deferred bool     // the schema's pledges are deferred (deferredGroupDB)
		setup    []string // run before the units
		units    []unitFunc
		bad      int // the unit that fails; the others commit
	}{
		{"pledges an item a later unit adds", true, nil, []unitFunc{
			unitRuns(`INSERT INTO units (id) VALUES ('a')`, `INSERT INTO pledges (id, item) VALUES ('a', 'later')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `INSERT INTO items (id) VALUES ('later')`),
		}, 0},
		{"deletes a pledged item a later unit adds again", true, []string{`INSERT INTO items (id) VALUES ('p')`, `INSERT INTO pledges (id, item) VALUES ('pp', 'p')`}, []unitFunc{
			unitRuns(`INSERT INTO units (id) VALUES ('a')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `DELETE FROM items WHERE id = 'p'`),
			unitRuns(`INSERT INTO units (id) VALUES ('c')`, `INSERT OR IGNORE INTO items (id) VALUES ('p')`),
		}, 1},
		{"defer_foreign_keys first, a note of an item a later unit adds", false, nil, []unitFunc{
			unitRuns(`PRAGMA defer_foreign_keys = ON`, `INSERT INTO units (id) VALUES ('a')`, `INSERT INTO notes (id, item) VALUES ('a', 'later')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `INSERT INTO items (id) VALUES ('later')`),
		}, 0},
		{"defer_foreign_keys in a group, a note of an item a later unit adds", false, nil, []unitFunc{
			unitRuns(`INSERT INTO units (id) VALUES ('a')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `pragma main."DEFER_FOREIGN_KEYS"=1`, `INSERT INTO notes (id, item) VALUES ('b', 'later')`),
			unitRuns(`INSERT INTO units (id) VALUES ('c')`, `INSERT INTO items (id) VALUES ('later')`),
		}, 1},
		{"a temporary table's deferred key", false, []string{`CREATE TEMP TABLE tparent (id TEXT PRIMARY KEY)`,
			`CREATE TEMP TABLE tchild (id TEXT PRIMARY KEY, p TEXT REFERENCES tparent (id) DEFERRABLE INITIALLY DEFERRED)`}, []unitFunc{
			unitRuns(`INSERT INTO units (id) VALUES ('a')`, `INSERT INTO tchild (id, p) VALUES ('a', 'later')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `INSERT INTO tparent (id) VALUES ('later')`),
		}, 0},
		{"declares a deferred key first, a vow of an item a later unit adds", false, nil, []unitFunc{
			unitRuns(`INSERT INTO units (id) VALUES ('a')`, vows, `INSERT INTO vows (id, item) VALUES ('a', 'later')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `INSERT INTO items (id) VALUES ('later')`),
		}, 0},
		{"declares a deferred key in a group, a vow of an item a later unit adds", false, nil, []unitFunc{
			unitRuns(`INSERT INTO units (id) VALUES ('a')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, vows, `INSERT INTO vows (id, item) VALUES ('b', 'later')`),
			unitRuns(`INSERT INTO units (id) VALUES ('c')`, `INSERT INTO items (id) VALUES ('later')`),
		}, 1},
	}
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				open := groupDB
				if c.deferred {
					open = deferredGroupDB
				}
				ctx, db, _ := open(t, Options{Driver: driverName}, time.Minute)
				require.NoError(t, execs(ctx, db.Writer(), false, c.setup...))
				errs, runs := chainInGroup(ctx, t, db, c.units...)
				t.Logf("errors %v, runs %v", errs, runs)
				ids := unitIDs(t, db)
				for i, err := range errs {
					id := string(rune('a' + i))
					if i == c.bad {
						if err != nil || runs[i] == 1 {
							assert.ErrorIs(t, err, refset.ErrConstraint, "%s ended with a reference dangling", id)
						}
					} else {
						assert.NoError(t, err, id)
					}
					assert.Equal(t, err == nil, slices.Contains(ids, id), "%s told %v", id, err)
				}
				rows, err := db.Readers().QueryContext(ctx, `PRAGMA foreign_key_check`)
				require.NoError(t, err)
				assert.False(t, rows.Next(), "a reference dangles")
				require.NoError(t, rows.Close())
			})
		}
	})
}

// A unit alone (no other waits for the writer) pays no query of group commit's, and
// a database with no deferred key still shares commits: after a unit's DDL that
// declares none, too.
func TestGroupCommitSharedWithoutDeferredKeys(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx, db, _ := groupDB(t, Options{Driver: driverName}, time.Minute)
		before := engine.Stats(db.storeEngine)
		errs, _ := chainInGroup(ctx, t, db,
			unitRuns(`INSERT INTO units (id) VALUES ('a')`),
			unitRuns(`INSERT INTO units (id) VALUES ('b')`, `CREATE TABLE plain (x REFERENCES items (id) DEFERRABLE INITIALLY IMMEDIATE)`),
			unitRuns(`INSERT INTO units (id) VALUES ('c')`))
		for _, err := range errs {
			require.NoError(t, err)
		}
		stats := engine.Stats(db.storeEngine)
		assert.Equal(t, [2]int64{1, 3}, [2]int64{stats.Commits - before.Commits, stats.Units - before.Units}, "one group of three units")
	})
}

// refuseCommits makes the writer's connection refuse each COMMIT (SQLite turns it
// into a ROLLBACK) while refuse returns true, by a commit hook, on either driver.
func refuseCommits(t *testing.T, db *DB, refuse func() bool) {
	t.Helper()
	conn, err := db.Writer().Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.Raw(func(dc any) error {
		m := reflect.ValueOf(dc).MethodByName("RegisterCommitHook")
		require.True(t, m.IsValid(), "%T has no commit hook", dc)
		fnType := m.Type().In(0)
		hook := reflect.MakeFunc(fnType, func([]reflect.Value) []reflect.Value {
			r := reflect.New(fnType.Out(0)).Elem()
			if refuse() {
				r.SetInt(1)
			}
			return []reflect.Value{r}
		})
		m.Call([]reflect.Value{hook})
		return nil
	}))
}

// A group's COMMIT that fails fails every unit of it, typed, with nothing of it in
// the database; refused once, the units run again and commit.
func TestGroupCommitFailsEveryUnit(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, always := range []bool{false, true} {
			t.Run(fmt.Sprintf("always=%v", always), func(t *testing.T) {
				ctx, db, _ := groupDB(t, Options{Driver: driverName}, time.Minute)
				var refused atomic.Int32
				refuseCommits(t, db, func() bool { return always || refused.Add(1) == 1 })
				insert := func(id string) unitFunc {
					return func(ctx context.Context, tx refset.Tx, _ int32) error {
						return execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('`+id+`')`)
					}
				}
				aErr, bErr, aRuns, bRuns := pairInGroup(ctx, t, db, insert("a"), insert("b"))
				t.Logf("a: %v in %d runs; b: %v in %d runs", aErr, aRuns, bErr, bRuns)
				ids := unitIDs(t, db)
				for id, err := range map[string]error{"a": aErr, "b": bErr} {
					assert.Equal(t, err == nil, slices.Contains(ids, id), "%s told %v", id, err)
					if always {
						assert.True(t, refset.IsSentinel(err), "%s: %v", id, err)
					} else {
						assert.NoError(t, err, id)
					}
				}
			})
		}
	})
}

// A temporary table may not stand in for a table of the main schema, on pools Open
// made and on a caller's one pool (New without readers, whose one connection the unit
// holds while the name is looked up): created so, or renamed so. A scratch table of
// another name is fine, and so is a temporary index on it.
func TestTemporaryTableMayNotHide(t *testing.T) {
	eachPool(t, func(t *testing.T, _, _ string, db *DB) {
		ctx := t.Context()
		for q, want := range map[string]error{
			`CREATE TEMP TABLE units (id TEXT)`:                                                                         refset.ErrInvalidCommand,
			`CREATE TABLE IF NOT EXISTS "temp"."Units" (id TEXT)`:                                                       refset.ErrInvalidCommand,
			`CREATE TEMP TABLE scratch (x); ALTER TABLE scratch RENAME TO items`:                                        refset.ErrInvalidCommand,
			`CREATE TEMP VIEW v AS SELECT 1`:                                                                            refset.ErrInvalidCommand,
			`CREATE TEMP TABLE scratch (x); CREATE INDEX temp.scratch_x ON scratch (x); INSERT INTO scratch VALUES (1)`: nil,
		} {
			err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, q)
				return err
			})
			if want == nil {
				assert.NoError(t, err, q)
			} else {
				assert.ErrorIs(t, err, want, q)
			}
		}
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('kept')`)
			return err
		}))
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM main.units`).Scan(&n))
		assert.Equal(t, 1, n, "the unit's row went to the file")
	})
}

// A unit of work's context ends its read in a group: SQLite's interrupt rolls back
// the whole transaction only for a write, so a query need not run to its end, holding
// the units before it (waiting for their commit, whatever their own contexts) and the
// writer.
func TestGroupCommitQueryHonoursContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx, db, _ := groupDB(t, Options{Driver: driverName}, time.Minute)
		// long: a query that takes a second alone, ten times b's deadline.
		const long = `WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < ?) SELECT count(*) FROM r`
		rows := 10_000
		var alone time.Duration
		for alone < time.Second {
			rows *= 2
			start := time.Now()
			_, err := db.Readers().ExecContext(ctx, long, rows)
			require.NoError(t, err)
			alone = time.Since(start)
		}
		var took time.Duration
		aErr, bErr, _, _ := pairInGroup(ctx, t, db, func(ctx context.Context, tx refset.Tx, _ int32) error {
			return execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('a')`)
		}, func(ctx context.Context, tx refset.Tx, run int32) error {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			var n int
			err := tx.QueryRowContext(short, long, rows).Scan(&n)
			took = time.Since(start)
			return err
		})
		require.NoError(t, aErr)
		require.ErrorIs(t, bErr, context.DeadlineExceeded)
		assert.Less(t, took, alone/2, "b's query ended with its context (alone it takes %v)", alone)
		// The interrupted read left the shared transaction standing: a's row is in
		// the file, and the writer goes on.
		assert.Equal(t, []string{"a"}, unitIDs(t, db), "a committed, b did not")
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			return execs(ctx, tx, false, `INSERT INTO units (id) VALUES ('after')`)
		}))
		assert.Equal(t, []string{"a", "after"}, unitIDs(t, db))
	})
}

// A PRAGMA that sets the writer's connection is refused however a unit of work sends
// it (ExecContext, QueryContext, QueryRowContext, an Exec command), with group commit
// and without, and changes nothing: the next unit writes.
func TestConnectionPragmaRefusedEveryWay(t *testing.T) {
	const q = `PRAGMA query_only = ON`
	ways := map[string]func(ctx context.Context, db *DB, set *refset.RefSet[item, string]) error{
		"ExecContext": func(ctx context.Context, db *DB, _ *refset.RefSet[item, string]) error {
			return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error { _, err := tx.ExecContext(ctx, q); return err })
		},
		"QueryContext": func(ctx context.Context, db *DB, _ *refset.RefSet[item, string]) error {
			return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				rows, err := tx.QueryContext(ctx, q)
				if err == nil {
					rows.Close()
				}
				return err
			})
		},
		"QueryRowContext": func(ctx context.Context, db *DB, _ *refset.RefSet[item, string]) error {
			return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				var v any
				err := tx.QueryRowContext(ctx, q+` -- row`).Scan(&v)
				if errors.Is(err, sql.ErrNoRows) {
					return nil
				}
				return err
			})
		},
		"an Exec command": func(ctx context.Context, _ *DB, set *refset.RefSet[item, string]) error {
			_, err := set.Add(ctx, item{Key: "x"}, refset.Exec[string](q, 0))
			return err
		},
	}
	eachWriterMode(t, func(t *testing.T, opts Options) {
		for name, way := range ways {
			t.Run(name, func(t *testing.T) {
				ctx := t.Context()
				db, set := itemsDB(t, opts)
				require.ErrorIs(t, way(ctx, db, set), refset.ErrInvalidCommand)
				require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('next')`)
					return err
				}), "the next unit writes")
			})
		}
	})
}

// classify tells reads from writes, and what must run alone or changes the schema;
// when in doubt, a write.
func TestClassify(t *testing.T) {
	for q, want := range map[string]engine.Statement{
		`SELECT count(*) FROM units`:          engine.StatementReads,
		` /* c */ -- c` + "\n" + `(select 1)`: engine.StatementReads,
		`WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT * FROM r`: engine.StatementReads,
		`VALUES (1)`:               engine.StatementReads,
		`SELECT ';' FROM units`:    engine.StatementReads,
		`SELECT 1;`:                engine.StatementReads,
		`PRAGMA table_info(items)`: engine.StatementReads,
		`PRAGMA foreign_key_check`: engine.StatementReads,
		`PRAGMA main.user_version`: engine.StatementReads,
		`WITH x AS (SELECT 1) INSERT INTO units (id) SELECT 'a' FROM x`:                  engine.StatementWrites,
		`WITH x AS (SELECT 1) DELETE FROM units RETURNING id`:                            engine.StatementWrites,
		`INSERT INTO units (id) VALUES ('a') RETURNING id`:                               engine.StatementWrites,
		`SELECT 1; DELETE FROM units`:                                                    engine.StatementWrites,
		`PRAGMA user_version = 3`:                                                        engine.StatementWrites,
		`PRAGMA user_version(3)`:                                                         engine.StatementWrites,
		`PRAGMA optimize`:                                                                engine.StatementWrites,
		`PRAGMA incremental_vacuum(10)`:                                                  engine.StatementWrites,
		`EXPLAIN SELECT 1`:                                                               engine.StatementWrites,
		`CREATE TABLE t (x REFERENCES items (id))`:                                       engine.StatementSchema,
		`CREATE TABLE t (x REFERENCES items (id) NOT DEFERRABLE INITIALLY DEFERRED)`:     engine.StatementSchema,
		`INSERT INTO units (id) VALUES ('a'); DROP TABLE boom`:                           engine.StatementSchema,
		`CREATE TABLE t (x REFERENCES items (id) DEFERRABLE INITIALLY DEFERRED)`:         engine.StatementAlone,
		`ALTER TABLE t ADD COLUMN y REFERENCES items (id) deferrable initially deferred`: engine.StatementAlone,
		`SELECT 1; CREATE TABLE t (x REFERENCES items DEFERRABLE INITIALLY DEFERRED)`:    engine.StatementAlone,
		`PRAGMA defer_foreign_keys = ON`:                                                 engine.StatementAlone,
		`SELECT 1; pragma main."DEFER_FOREIGN_KEYS"(1)`:                                  engine.StatementAlone,
		`PRAGMA defer_foreign_keys`:                                                      engine.StatementReads,
	} {
		assert.Equal(t, want, classify(q), q)
	}
}
