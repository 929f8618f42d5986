package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/test/child"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one thing a unit of work of TestGroupCommitInvariants does, with its id.
type step func(ctx context.Context, tx refset.Tx, set *refset.RefSet[item, string], id string) error

// addItem adds the item id.
func addItem(ctx context.Context, _ refset.Tx, set *refset.RefSet[item, string], id string) error {
	_, err := set.Add(ctx, item{Key: id})
	return err
}

// run runs query, with id for each of its parameters.
func run(query string) step {
	return func(ctx context.Context, tx refset.Tx, _ *refset.RefSet[item, string], id string) error {
		args := make([]any, strings.Count(query, "?"))
		for i := range args {
			args[i] = id
		}
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	}
}

// inTx is a unit of work that takes steps in one refset.InTx, until one fails.
func inTx(steps ...step) func(ctx context.Context, set *refset.RefSet[item, string], id string) error {
	return func(ctx context.Context, set *refset.RefSet[item, string], id string) error {
		return refset.InTx(ctx, set.Database(), func(ctx context.Context, tx refset.Tx) error {
			for _, s := range steps {
				if err := s(ctx, tx, set, id); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

const (
	insertUnit = `INSERT INTO units (id) VALUES (?)`
	insertNote = `INSERT INTO notes (id, item) VALUES (?, ?)`
)

// unitKind is a kind of unit of work raceUnits runs, with its name, and whether it
// means to commit.
type unitKind struct {
	name   string
	commit bool // the unit means to commit
	run    func(ctx context.Context, set *refset.RefSet[item, string], id string) error
}

// unitKinds are the units of work TestGroupCommitInvariants races: those that
// commit, and every way a unit can fail, each of which must undo that unit alone.
var unitKinds = []unitKind{
	{"commits", true, inTx(addItem, run(insertNote), run(insertUnit))},
	{"adds with a command", true, func(ctx context.Context, set *refset.RefSet[item, string], id string) error {
		_, err := set.Add(ctx, item{Key: id}, refset.Exec[string](insertUnit, 1))
		return err
	}},
	{"returns an error after reading what it wrote", false, inTx(run(insertUnit), addItem,
		func(ctx context.Context, _ refset.Tx, set *refset.RefSet[item, string], id string) error {
			if _, err := set.Load(ctx, id); err != nil { // a lease published only on commit
				return err
			}
			return errors.New("the unit's own error")
		})},
	{"panics", false, func(ctx context.Context, set *refset.RefSet[item, string], id string) (err error) {
		defer func() {
			if recover() != nil {
				err = errors.New("panicked")
			}
		}()
		return inTx(addItem, func(context.Context, refset.Tx, *refset.RefSet[item, string], string) error {
			panic("a unit of work panics")
		})(ctx, set, id)
	}},
	{"a command refuses", false, func(ctx context.Context, set *refset.RefSet[item, string], id string) error {
		_, err := set.Add(ctx, item{Key: id},
			refset.Exec[string](insertUnit, 1),
			refset.Exec[string](`DELETE FROM notes WHERE id = ?`, 1)) // no such note: refused
		return err
	}},
	{"violates a foreign key", false, inTx(run(insertUnit), run(`INSERT INTO notes (id, item) VALUES (?, 'no such item')`))},
	{"pledges an item it adds after", true, inTx(run(`INSERT INTO pledges (id, item) VALUES (?, ?)`), addItem, run(insertUnit))},
	// Checked only at the group's COMMIT: the unit is found out there.
	{"violates a deferred foreign key", false, inTx(addItem, run(insertUnit), run(`INSERT INTO pledges (id, item) VALUES (?, 'no such item')`))},
	{"its context ends", false, func(ctx context.Context, set *refset.RefSet[item, string], id string) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		return inTx(addItem, func(context.Context, refset.Tx, *refset.RefSet[item, string], string) error {
			cancel()
			return nil
		}, run(insertUnit))(ctx, set, id)
	}},
	{"tries to end the shared transaction", false, inTx(addItem,
		func(ctx context.Context, tx refset.Tx, _ *refset.RefSet[item, string], _ string) error {
			_, _ = tx.ExecContext(ctx, `RELEASE refset_group_unit`)
			_, _ = tx.ExecContext(ctx, `COMMIT`)
			return nil
		}, run(insertUnit))},
}

// Units of work of every kind race on one file: every unit told it committed is in
// the database whole, every other left nothing, no reference dangles, and units did
// share commits; but none while the schema has a deferred foreign key.
func TestGroupCommitInvariants(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		t.Run(fmt.Sprintf("deferred=%v", deferred), func(t *testing.T) { groupCommitInvariants(t, deferred) })
	}
}

func groupCommitInvariants(t *testing.T, deferred bool) {
	ctx := t.Context()
	db, set := itemsDB(t, Options{})
	unitKinds0 := unitKinds
	unitKinds := unitKinds0
	if !deferred {
		// Pledged before it is added, an item is refused at once.
		immediatePledges(t, db)
		unitKinds = unitKinds[:0:0]
		for _, k := range unitKinds0 {
			if k.name != "pledges an item it adds after" {
				unitKinds = append(unitKinds, k)
			}
		}
	}
	const goroutines = 8
	perGoroutine := 4 * len(unitKinds)
	committed, failed := raceUnits(ctx, set, unitKinds, goroutines, perGoroutine, nil, nil)
	checkUnits(ctx, t, db, unitKinds, committed, failed)
	for id, kind := range failed {
		_, err := set.Load(ctx, id)
		assert.ErrorIs(t, err, refset.ErrNotFound, "%s (%s): no lease of what rolled back", id, kind)
	}
	nCommitted, nFailed := len(committed), len(failed)
	commitKinds := 0
	for _, k := range unitKinds {
		if k.commit {
			commitKinds++
		}
	}
	require.Zero(t, perGoroutine%len(unitKinds), "each goroutine runs each kind as often")
	assert.Equal(t, goroutines*perGoroutine*commitKinds/len(unitKinds), nCommitted, "the units meant to commit did")
	assert.Equal(t, goroutines*perGoroutine, nCommitted+nFailed)
	stats := engine.Stats(db.storeEngine)
	t.Logf("%d units committed in %d groups", stats.Units, stats.Commits)
	if deferred {
		assert.Equal(t, stats.Commits, stats.Units, "a unit shared a commit, though a key is deferred")
	} else {
		assert.Less(t, stats.Commits, stats.Units, "units shared commits")
	}
}

// raceUnits runs units of work from goroutines goroutines, perGoroutine each, taking
// kinds in turn, each unit with an id of its own. after, unless nil, is told each
// unit's outcome as it ends; during, unless nil, runs while the units race. It
// returns the kind's name of each unit told it committed, and of each told it
// failed, by id.
func raceUnits(ctx context.Context, set *refset.RefSet[item, string], kinds []unitKind, goroutines, perGoroutine int,
	after func(id string, k unitKind, err error), during func()) (committed, failed map[string]string) {
	committed, failed = map[string]string{}, map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				k := kinds[(g+i)%len(kinds)]
				id := fmt.Sprintf("g%d-%d", g, i)
				err := k.run(ctx, set, id)
				mu.Lock()
				if err == nil {
					committed[id] = k.name
				} else {
					failed[id] = k.name
				}
				mu.Unlock()
				if after != nil {
					after(id, k, err)
				}
			}
		})
	}
	if during != nil {
		during()
	}
	wg.Wait()
	return committed, failed
}

// checkUnits checks db after raceUnits: every unit told it committed meant to
// commit, and its item and row are there; every unit told it failed left nothing;
// and no reference dangles.
func checkUnits(ctx context.Context, t *testing.T, db *DB, kinds []unitKind, committed, failed map[string]string) {
	t.Helper()
	exists := func(table, id string) bool {
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE id = ?`, id).Scan(&n))
		return n == 1
	}
	for id, name := range committed {
		for _, k := range kinds {
			if k.name == name {
				assert.True(t, k.commit, "%s (%s) was told it committed", id, name)
			}
		}
		assert.True(t, exists("items", id), "%s (%s) told committed: its item", id, name)
		assert.True(t, exists("units", id), "%s (%s) told committed: its row", id, name)
	}
	for id, name := range failed {
		for _, table := range []string{"items", "units", "notes", "pledges"} {
			assert.False(t, exists(table, id), "%s (%s) told failed: left its %s", id, name, table)
		}
	}
	rows, err := db.Readers().QueryContext(ctx, `PRAGMA foreign_key_check`)
	require.NoError(t, err)
	assert.False(t, rows.Next(), "a reference dangles")
	require.NoError(t, rows.Close())
}

// A unit that joined a group and then waits for the return of a unit before it in
// the group (which waits for the group's commit) would wait for ever; it is rolled
// back instead, the unit before it commits, and InTx runs it again.
func TestGroupCommitEvictsBlockedUnit(t *testing.T) {
	ctx, db, set := groupDB(t, Options{}, 20*time.Second)
	bRuns := joinGroup(ctx, t, db, set, func(ctx context.Context, tx refset.Tx, run int32, aDone <-chan struct{}) error {
		if run == 1 {
			<-aDone // a's Add returns only once its group commits
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('b')`)
		return err
	})
	assert.EqualValues(t, 2, bRuns, "b was rolled back once, and ran again")
	var n int
	require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM items WHERE id = 'a') + (SELECT count(*) FROM units WHERE id = 'b')`).Scan(&n))
	assert.Equal(t, 2, n)
}

// joinGroup adds item a in a unit of work whose command waits until another waits
// for the writer: b, run by refset.InTx, which so joins a's group. b is told which
// run of it this is, and gets a channel closed once a's Add returned (after its
// group's commit). joinGroup fails t unless both succeed, and returns b's runs.
func joinGroup(ctx context.Context, t *testing.T, db *DB, set *refset.RefSet[item, string],
	b func(ctx context.Context, tx refset.Tx, run int32, aDone <-chan struct{}) error) int32 {
	t.Helper()
	aDone := make(chan struct{})
	var bRuns atomic.Int32
	aErr, bErr := groupOfTwo(ctx, t, db, func(hold func()) error {
		defer close(aDone)
		_, err := set.Add(ctx, item{Key: "a"}, refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
			hold()
			return nil
		}))
		return err
	}, func() error {
		return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			return b(ctx, tx, bRuns.Add(1), aDone)
		})
	})
	require.NoError(t, aErr)
	require.NoError(t, bErr)
	return bRuns.Load()
}

// groupOfTwo runs a, which runs a unit of work, and b, which runs another once a's
// holds the writer, so that b's joins a's group: a's unit calls hold (once: a second
// call panics), which returns once b's waits for the writer. It returns a's and b's
// errors.
func groupOfTwo(ctx context.Context, t *testing.T, db *DB, a func(hold func()) error, b func() error) (aErr, bErr error) {
	t.Helper()
	aIn := make(chan struct{})
	hold := func() {
		close(aIn)
		waitFor(ctx, t, func() bool { return engine.Stats(db.storeEngine).Waiting == 1 })
	}
	var wg sync.WaitGroup
	wg.Go(func() { aErr = a(hold) })
	wg.Go(func() {
		<-aIn
		bErr = b()
	})
	wg.Wait()
	return aErr, bErr
}

// busyUnitKept runs busy in a unit b that joins the group of a unit a (joinGroup),
// then writes b's row, and checks that b, busy, was not evicted: it ran once, and a
// and b committed together.
func busyUnitKept(ctx context.Context, t *testing.T, db *DB, set *refset.RefSet[item, string], busy func(ctx context.Context, tx refset.Tx) error) {
	t.Helper()
	before := engine.Stats(db.storeEngine) // store.NewStore's units
	bRuns := joinGroup(ctx, t, db, set, func(ctx context.Context, tx refset.Tx, _ int32, _ <-chan struct{}) error {
		if err := busy(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('b')`)
		return err
	})
	assert.EqualValues(t, 1, bRuns, "b, busy, was not evicted")
	stats := engine.Stats(db.storeEngine)
	assert.EqualValues(t, before.Commits+1, stats.Commits, "a and b committed together")
	assert.EqualValues(t, before.Units+2, stats.Units)
}

// waitFor polls cond until it holds, failing tb if ctx ends first.
func waitFor(ctx context.Context, tb testing.TB, cond func() bool) {
	tb.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Error("gave up waiting")
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// A unit in a group whose statement is cut short by its context takes only itself
// back: SQLite would roll back the whole shared transaction on the interrupt, so the
// statement runs to its end and the unit rolls back after it. The unit before it in
// the group commits on its first run.
func TestGroupCommitCancelInsideStatement(t *testing.T) {
	ctx, db, set := groupDB(t, Options{}, 20*time.Second)
	var aRuns atomic.Int32
	aErr, bErr := groupOfTwo(ctx, t, db, func(hold func()) error {
		_, err := set.Add(ctx, item{Key: "a"}, refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
			if aRuns.Add(1) == 1 {
				hold()
			}
			return nil
		}))
		return err
	}, func() error {
		bCtx, bCancel := context.WithCancel(ctx)
		defer bCancel()
		return refset.InTx(bCtx, db, func(ctx context.Context, tx refset.Tx) error {
			time.AfterFunc(20*time.Millisecond, bCancel)
			_, err := tx.ExecContext(ctx, `INSERT INTO units (id) WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 300000) SELECT 'b' || i FROM r`)
			return err
		})
	})
	require.NoError(t, aErr)
	require.ErrorIs(t, bErr, context.Canceled)
	assert.EqualValues(t, 1, aRuns.Load(), "a committed on its first run: b's cancel did not roll it back")
	var items, units int
	require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM units)`).Scan(&items, &units))
	assert.Equal(t, 1, items)
	assert.Zero(t, units, "b left nothing")
}

// What Begin hands out is one unit of a group: it cannot end the shared transaction
// or touch its savepoint, ends once (later calls and statements fail, changing
// nothing), and a unit left open rolls back when its context ends, letting the others
// on.
func TestGroupCommitHostileUnit(t *testing.T) {
	ctx := t.Context()
	db, _ := itemsDB(t, Options{})
	immediatePledges(t, db)
	count := func() int {
		var n int
		require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM units`).Scan(&n))
		return n
	}

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('x')`)
	require.NoError(t, err)
	for _, q := range []string{`COMMIT`, `ROLLBACK`, `RELEASE refset_group_unit`, `ROLLBACK TO Refset_Group_Unit`, `BEGIN`} {
		_, err = tx.ExecContext(ctx, q)
		require.ErrorIs(t, err, refset.ErrInvalidCommand, q)
	}
	var n int
	require.Error(t, tx.QueryRowContext(ctx, `SELECT 1; COMMIT`).Scan(&n))
	assert.Zero(t, count(), "nothing committed early")
	require.NoError(t, tx.Rollback())
	require.Error(t, tx.Commit(), "ended once")
	_, err = tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('y')`)
	require.Error(t, err, "no statement after the end")
	assert.Zero(t, count())

	// Left open with a context that ends: rolled back then, and the next unit runs.
	left, stop := context.WithCancel(ctx)
	tx, err = db.Begin(left)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('left')`)
	require.NoError(t, err)
	time.AfterFunc(20*time.Millisecond, stop)
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES ('next')`)
		return err
	}))
	assert.Equal(t, 1, count(), "the next unit alone")
	require.ErrorIs(t, tx.Commit(), context.Canceled)
	assert.Equal(t, 1, count())
}

func TestMain(m *testing.M) {
	child.Main(m, map[string]func(arg string) int{"group-commit-writer": groupCommitWriter})
}

// A process killed while its units of work run in groups: every unit it was told had
// committed is in the file when it is opened again. (A kill, not a power loss: it
// proves that no unit is told before its group's COMMIT returned.)
func TestGroupCommitSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	first, _ := itemsAt(t, path, Options{}) // the tables, before the child writes
	require.NoError(t, first.Close())
	cmd := child.Command(t.Context(), "group-commit-writer", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var told []string
	lines := bufio.NewScanner(out)
	for len(told) < 300 && lines.Scan() {
		if id, ok := strings.CutPrefix(lines.Text(), "committed "); ok {
			told = append(told, id)
		}
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Len(t, told, 300, "the child reported its commits; it said: %s", stderr.String())

	db, _ := itemsAt(t, path, Options{})
	var n int
	require.NoError(t, db.Readers().QueryRowContext(t.Context(), `SELECT count(*) FROM items`).Scan(&n))
	t.Logf("told %d, found %d", len(told), n)
	for _, id := range told {
		var got int
		require.NoError(t, db.Readers().QueryRowContext(t.Context(), `SELECT count(*) FROM items JOIN units USING (id) WHERE id = ?`, id).Scan(&got))
		assert.Equal(t, 1, got, "%s was told committed", id)
	}
}

// groupCommitWriter is TestGroupCommitSurvivesKill's child: it adds items to the
// database file at path from eight goroutines until it is killed, printing each one
// whose Add returned.
func groupCommitWriter(path string) int {
	ctx := context.Background()
	_, set, err := openItems(ctx, path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				// Each unit takes a while, so a group is open for a while: a unit told
				// before its group commits would be told well before.
				slow := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
					time.Sleep(time.Millisecond)
					return nil
				})
				if _, err := set.Add(ctx, item{Key: id}, refset.Exec[string](`INSERT INTO units (id) VALUES (?)`, 1), slow); err != nil {
					fmt.Fprintln(os.Stderr, id, err)
					return
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "committed %s\n", id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 1 // every writer failed: it runs until it is killed
}

// A unit that joined a group holding another unit's work is evicted only when it
// sends no statement for Group.Evict: not while one statement of it runs longer than
// that (an Exec, or a query whose rows the database computes as they are read), nor
// while it sends statements more often, however long it takes in all.
func TestGroupCommitKeepsBusyUnit(t *testing.T) {
	const evict = 100 * time.Millisecond
	const stepRows = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) SELECT count(*) FROM c`
	for _, tc := range []struct {
		name string
		busy func(ctx context.Context, tx refset.Tx, long int) error
	}{
		{"one exec longer than the eviction", func(ctx context.Context, tx refset.Tx, long int) error {
			_, err := tx.ExecContext(ctx, stepRows, long)
			return err
		}},
		{"one query longer than the eviction", func(ctx context.Context, tx refset.Tx, long int) error {
			var n int
			return tx.QueryRowContext(ctx, stepRows, long).Scan(&n)
		}},
		{"statements more often than the eviction, longer in all", func(ctx context.Context, tx refset.Tx, _ int) error {
			for start := time.Now(); time.Since(start) < 5*evict; time.Sleep(evict / 4) {
				if _, err := tx.ExecContext(ctx, stepRows, 10); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachDriver(t, func(t *testing.T, driverName string) {
				ctx, db, set := groupDB(t, Options{Driver: driverName, groupEvict: evict}, 2*time.Minute)
				// long: rows enough for the statement to take three evictions here
				// (the pure-Go driver under the race detector is a hundred times slower).
				long := 10_000
				for {
					start := time.Now()
					_, err := db.Readers().ExecContext(ctx, stepRows, long)
					require.NoError(t, err)
					if time.Since(start) >= 3*evict {
						break
					}
					long *= 2
				}
				busyUnitKept(ctx, t, db, set, func(ctx context.Context, tx refset.Tx) error { return tc.busy(ctx, tx, long) })
			})
		})
	}
}

// groupDB is itemsDB for a test of units that share a group: a group takes units
// for a minute, so that they join one however slow the machine is between them (CI
// saw the default 10 ms pass, and the second unit begin a group of its own, testing
// nothing of a group), and ctx ends after timeout, so that a unit waiting for ever
// fails the test instead of hanging it.
//
// Its pledges are checked at once, as every key of a database whose units share
// groups: while a key is DEFERRABLE INITIALLY DEFERRED, each unit runs in a
// transaction of its own (deferredGroupDB).
func groupDB(t *testing.T, opts Options, timeout time.Duration) (context.Context, *DB, *refset.RefSet[item, string]) {
	t.Helper()
	ctx, db, set := deferredGroupDB(t, opts, timeout)
	immediatePledges(t, db)
	return ctx, db, set
}

// deferredGroupDB is groupDB with itemsDB's pledges, checked at COMMIT: its units
// never share a group.
func deferredGroupDB(t *testing.T, opts Options, timeout time.Duration) (context.Context, *DB, *refset.RefSet[item, string]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	opts.groupMaxAge = time.Minute
	db, set := itemsDB(t, opts)
	return ctx, db, set
}

// immediatePledges makes the key of db's pledges checked at once: a database with no
// deferred key, whose units share groups.
func immediatePledges(tb testing.TB, db *DB) {
	tb.Helper()
	for _, q := range []string{`DROP TABLE pledges`,
		`CREATE TABLE pledges (id TEXT PRIMARY KEY, item TEXT NOT NULL REFERENCES items (id))`,
		`CREATE INDEX pledges_item ON pledges (item)`} {
		_, err := db.Writer().ExecContext(tb.Context(), q)
		require.NoError(tb, err, q)
	}
}

// unitIDs are the ids of the units table, in order.
func unitIDs(tb testing.TB, db *DB) []string {
	tb.Helper()
	var ids []string
	require.NoError(tb, db.Readers().SelectContext(tb.Context(), &ids, `SELECT id FROM units ORDER BY id`))
	return ids
}

// The statements a caller can run on what Begin hands out, by any of its methods,
// all go through the unit: once the unit rolled back, none runs, not even in the
// transaction that goes on with the group's other units. (Before, *sqlx.Tx's
// promoted methods, Exec, Query, PrepareContext, sqlx's Get..., ran on the shared
// transaction unguarded, and what they wrote committed with the next unit.)
func TestGroupCommitUnitHasOneDoor(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx, db, _ := groupDB(t, Options{Driver: driverName}, 30*time.Second)
		insert := func(tx interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
		}, id string) {
			_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES (?)`, id)
			require.NoError(t, err)
		}
		waiting := func(n int64) {
			waitFor(ctx, t, func() bool { return engine.Stats(db.storeEngine).Waiting == n })
		}
		a, err := db.Begin(ctx)
		require.NoError(t, err)
		insert(a, "a")
		var wg sync.WaitGroup
		begun := make(chan any, 2)
		wg.Go(func() { b, err := db.Begin(ctx); assert.NoError(t, err); begun <- b })
		waiting(1)
		wg.Go(func() { c, err := db.Begin(ctx); assert.NoError(t, err); begun <- c })
		waiting(2)
		var aErr error
		wg.Go(func() { aErr = a.Commit() }) // waits for the group's commit
		b := (<-begun).(interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
			Rollback() error
		})
		insert(b, "b")
		require.NoError(t, b.Rollback()) // b alone is undone; c gets the transaction

		// b, ended, tries every other way its value offers to run a statement.
		const q = `INSERT INTO units (id) VALUES ('b-after-rollback')`
		if x, ok := b.(interface {
			Exec(string, ...any) (sql.Result, error)
		}); ok {
			_, _ = x.Exec(q)
		}
		if x, ok := b.(interface {
			Query(string, ...any) (*sql.Rows, error)
		}); ok {
			if rows, err := x.Query(q + ` RETURNING id`); err == nil {
				for rows.Next() {
				}
				rows.Close()
			}
		}
		if x, ok := b.(interface {
			PrepareContext(context.Context, string) (*sql.Stmt, error)
		}); ok {
			if st, err := x.PrepareContext(ctx, q); err == nil {
				_, _ = st.ExecContext(ctx)
			}
		}
		if x, ok := b.(interface {
			Get(any, string, ...any) error
		}); ok {
			var id string
			_ = x.Get(&id, q+` RETURNING id`)
		}

		c := (<-begun).(interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
			Commit() error
		})
		insert(c, "c")
		require.NoError(t, c.Commit())
		wg.Wait()
		require.NoError(t, aErr)
		assert.Equal(t, []string{"a", "c"}, unitIDs(t, db), "b, rolled back, left nothing")
	})
}

// A unit that joined a group and runs prepared statements (as clean-up's batch
// deletes a chain, a link at a time) is busy: it is not evicted, however long the
// statements take in all. (Before, a prepared statement did not go through the unit,
// which looked idle and was rolled back.)
func TestGroupCommitKeepsUnitBusyWithPreparedStatements(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		// Far above the gaps between two statements of a busy loop on a loaded machine
		// under the race detector (up to 80 ms seen).
		const evict = 250 * time.Millisecond
		ctx, db, set := groupDB(t, Options{Driver: driverName, groupEvict: evict}, time.Minute)
		busyUnitKept(ctx, t, db, set, func(ctx context.Context, tx refset.Tx) error {
			p := prepare(tx)
			for start := time.Now(); time.Since(start) < 4*evict; {
				if _, err := p.ExecContext(ctx, `UPDATE items SET n = n + 1 WHERE id = ?`, "no such item"); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// A unit of work waiting for the writer's connection gives up when its context ends,
// with group commit as without: the connection may be held by reads, on a database
// whose reads and writes share one pool (New with no readers). (Before, a group's
// first unit waited for the connection whatever its context, and every other unit
// queued behind it.)
func TestGroupCommitBeginHonoursContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		for _, noGroup := range []bool{false, true} {
			t.Run(fmt.Sprintf("NoGroupCommit=%v", noGroup), func(t *testing.T) {
				ctx := t.Context()
				db := callersDB(t, driverName, filepath.Join(t.TempDir(), "x.db"), Options{NoGroupCommit: noGroup})
				rows, err := db.Reader().QueryContext(ctx, `SELECT 1 UNION ALL SELECT 2`) // holds the one connection
				require.NoError(t, err)
				defer rows.Close()
				require.True(t, rows.Next())
				free := time.AfterFunc(10*time.Second, func() { rows.Close() }) // never hang the test
				defer free.Stop()

				short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				start := time.Now()
				err = refset.InTx(short, db, func(context.Context, refset.Tx) error { return nil })
				waited := time.Since(start)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Less(t, waited, 2*time.Second, "gave up when its context ended")

				// The writer is free again once the read ends: the next unit runs.
				require.NoError(t, rows.Close())
				require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `CREATE TABLE t (x)`)
					return err
				}))
			})
		}
	})
}

// Each unit of work is told it committed exactly when its rows are in the database,
// when SQLite rolls back a group's transaction under it: a group's first unit, which
// runs without a savepoint, has a write cut short by the statement's context (SQLite
// then rolls back the whole transaction), ignores its error and returns nil, while
// a second unit waits for the writer. (Before, the second unit's SAVEPOINT opened a
// new transaction, its RELEASE committed its row there, and the group's COMMIT
// failed: it was told it failed, with its row in the database; and a statement the
// first unit sent after the rollback committed on its own.)
func TestGroupCommitToldCommittedExactly(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx, db, _ := groupDB(t, Options{Driver: driverName}, 5*time.Minute)
		count := func(like string) int {
			var n int
			require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM units WHERE id LIKE ?`, like).Scan(&n))
			return n
		}
		const tries, rows = 20, 20_000
		interrupted := 0
		for try := range tries {
			var aErr, bErr error
			var aWrote int // the rows of a's last run's statements that succeeded
			var bRuns int
			var wg sync.WaitGroup
			wg.Go(func() {
				aErr = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					deadline := 3 * time.Millisecond
					if try%10 == 9 { // and now and then one that writes
						deadline = time.Minute
					}
					short, stop := context.WithTimeout(ctx, deadline)
					defer stop()
					_, err := tx.ExecContext(short, fmt.Sprintf(`INSERT INTO units (id) WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < %d) SELECT 'a%d-' || i FROM r`, rows, try))
					aWrote = 0
					if err == nil {
						aWrote = rows
					}
					// Sent after SQLite rolled the transaction back, this would commit
					// on its own.
					if _, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO units (id) VALUES ('a%d-after')`, try)); err == nil {
						aWrote++
					}
					return nil // the statements' errors ignored
				})
			})
			wg.Go(func() {
				time.Sleep(2 * time.Millisecond)
				bErr = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					bRuns++
					_, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES (?)`, fmt.Sprintf("b%d", try))
					return err
				})
			})
			wg.Wait()
			a, b := count(fmt.Sprintf("a%d-%%", try)), count(fmt.Sprintf("b%d", try))
			if aWrote < rows {
				interrupted++
			}
			if aErr != nil {
				assert.Zero(t, a, "try %d: a told %v, %d rows of it there", try, aErr, a)
			} else {
				// modernc.org/sqlite may report a statement that ran to its end as
				// failed, when its context ended as it finished: its rows stand.
				assert.True(t, a == aWrote || aWrote < rows && a == aWrote+rows,
					"try %d: a told it committed (its statements wrote %d rows), %d rows of it there", try, aWrote, a)
			}
			assert.Equal(t, bErr == nil, b == 1, "try %d: b told %v (in %d runs), its row there %d times", try, bErr, bRuns, b)
		}
		t.Logf("a's statement was cut short in %d tries of %d", interrupted, tries)
	})
}

// A unit whose context ended before its Commit rolls back, and Commit says so, as
// database/sql's Tx.Commit does. (Before, Commit raced the context's own rollback,
// and mostly won: the unit committed.)
func TestGroupCommitEndedContextRollsBack(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		ctx := t.Context()
		db, _ := itemsDB(t, Options{Driver: driverName})
		for try := range 50 {
			unitCtx, cancel := context.WithCancel(ctx)
			tx, err := db.Begin(unitCtx)
			require.NoError(t, err)
			_, err = tx.ExecContext(unitCtx, `INSERT INTO units (id) VALUES (?)`, fmt.Sprint(try))
			require.NoError(t, err)
			cancel()
			require.ErrorIs(t, tx.Commit(), context.Canceled, "try %d", try)
		}
		assert.Empty(t, unitIDs(t, db), "no unit committed")
	})
}

// hostileKinds are units of work that misbehave, raced by
// TestGroupCommitRaceWithClose beside unitKinds: each must undo itself alone.
var hostileKinds = []unitKind{
	{"sets a connection pragma, ignores the refusal", true, inTx(addItem, run(insertUnit),
		func(ctx context.Context, tx refset.Tx, _ *refset.RefSet[item, string], _ string) error {
			_, _ = tx.ExecContext(ctx, `PRAGMA query_only = ON`)
			return nil
		})},
	{"defers foreign keys, leaves a note dangling", false, inTx(addItem, run(insertUnit),
		func(ctx context.Context, tx refset.Tx, _ *refset.RefSet[item, string], id string) error {
			_, err := tx.ExecContext(ctx, `PRAGMA defer_foreign_keys = ON`)
			if err == nil {
				_, err = tx.ExecContext(ctx, `INSERT INTO notes (id, item) VALUES (?, 'no such item')`, id)
			}
			return err
		})},
	{"rolls the whole transaction back, ignores it", false, inTx(addItem, run(insertUnit),
		func(ctx context.Context, tx refset.Tx, _ *refset.RefSet[item, string], _ string) error {
			_, _ = tx.ExecContext(ctx, `INSERT OR ROLLBACK INTO units (id) VALUES ('dup')`)
			return nil
		})},
	{"returns a wrapped context.Canceled", false, inTx(addItem, run(insertUnit),
		func(context.Context, refset.Tx, *refset.RefSet[item, string], string) error {
			return fmt.Errorf("odd: %w", context.Canceled)
		})},
}

// Units of work of every kind, well-behaved and hostile, race on each driver, on
// pools Open made and on the caller's (New), while the database is closed under
// them: every unit told it committed is in the file whole, every other left nothing,
// every error is typed, and no reference dangles.
func TestGroupCommitRaceWithClose(t *testing.T) {
	kinds := append(append([]unitKind{}, unitKinds...), hostileKinds...)
	eachPool(t, func(t *testing.T, driverName, path string, db *DB) {
		ctx := t.Context()
		_, err := db.Writer().ExecContext(ctx, `INSERT INTO units (id) VALUES ('dup')`)
		require.NoError(t, err)
		st, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
		require.NoError(t, err)
		set := refset.New(st)

		const goroutines, perGoroutine = 8, 60
		var ran atomic.Int64
		committed, failed := raceUnits(ctx, set, kinds, goroutines, perGoroutine, func(id string, k unitKind, err error) {
			ran.Add(1)
			if err != nil {
				assert.True(t, refset.IsSentinel(err) || errors.Is(err, context.Canceled) ||
					err.Error() == "panicked" || strings.Contains(err.Error(), "the unit's own error"),
					"%s (%s): untyped error %v", id, k.name, err)
			}
		}, func() {
			// Closed once half the units ran, the others racing it.
			waitFor(ctx, t, func() bool { return ran.Load() >= goroutines*perGoroutine/2 })
			require.NoError(t, db.Close())
		})

		check, _ := itemsAt(t, path, Options{Driver: driverName})
		checkUnits(ctx, t, check, kinds, committed, failed)
		t.Logf("%d committed, %d failed", len(committed), len(failed))
	})
}
