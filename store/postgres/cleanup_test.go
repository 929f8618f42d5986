package postgres

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/child"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	child.Main(m, map[string]func(arg string) int{"collector": child.JSON(collectorProcess)})
}

// collectorRun is what a collector process is told, as JSON: its database and how long
// it collects.
type collectorRun struct {
	DSN string
	For time.Duration
}

// collectorProcess collects the "chain" set until its time is up, then prints its
// totals as JSON.
func collectorProcess(run collectorRun) int {
	ctx, cancel := context.WithTimeout(context.Background(), run.For)
	defer cancel()
	db, err := Open(ctx, run.DSN, Options{MaxConns: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "chain", Grace: 300 * time.Millisecond, BatchSize: 50})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var total cleanup.Stats
	for ctx.Err() == nil {
		s, err := c.Collect(ctx)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "collect:", err)
			return 1
		}
		total.Add(s)
		time.Sleep(5 * time.Millisecond)
	}
	if err := json.NewEncoder(os.Stdout).Encode(total); err != nil {
		return 1
	}
	return 0
}

type link struct {
	Hash string  `db:"id"`
	Prev *string `db:"prev"`
}

func (l link) ID() string { return l.Hash }

// Two collector processes and four writers share one database for a while: writers
// extend chains, fork them, abandon forks, take expiring holds and leave garbage.
// Afterwards every referenced object exists, every unreferenced one past its grace
// is gone, and Check is clean.
func TestCollectorProcessesWithWriters(t *testing.T) {
	duration := 20 * time.Second
	if testing.Short() {
		duration = 3 * time.Second
	}
	dsn := pgtest.DSN(t)
	db := openWith(t, dsn, Options{})
	ctx := t.Context()
	createChain(t, db)
	setStore, err := store.NewStore[link, string](ctx, db, store.Config{Table: "chain"})
	require.NoError(t, err)
	set := refset.New(setStore)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "chain", Grace: 300 * time.Millisecond, BatchSize: 50})
	require.NoError(t, err)

	// The collector processes.
	var children []*exec.Cmd
	var outputs []*strings.Builder
	run, err := json.Marshal(collectorRun{DSN: dsn, For: duration})
	require.NoError(t, err)
	for range 2 {
		cmd := child.Command(ctx, "collector", string(run))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		children, outputs = append(children, cmd), append(outputs, out)
	}

	// The writers.
	var seq atomic.Int64
	var refused, written atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(duration)
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var recent []string
			var picked int
			pick := func() *string {
				if len(recent) == 0 {
					return nil
				}
				picked = rng.IntN(len(recent))
				id := recent[picked]
				return &id
			}
			for time.Now().Before(deadline) {
				id := fmt.Sprintf("w%d-%d", w, seq.Add(1))
				var err error
				switch op := rng.IntN(10); {
				case op < 4: // extend or fork a recent block, as a new tip
					_, err = set.Add(ctx, link{Hash: id, Prev: pick()}, refset.Exec[string](`INSERT INTO tips (block_id) VALUES ($1)`, 1))
				case op < 6: // abandon a tip
					if p := pick(); p != nil {
						_, err = db.Pool().ExecContext(ctx, `DELETE FROM tips WHERE block_id = $1`, *p)
					}
				case op < 8: // an expiring hold
					_, err = set.Add(ctx, link{Hash: id, Prev: pick()}, set.Hold("lease", time.Duration(50+rng.IntN(200))*time.Millisecond))
				default: // garbage from the start
					_, err = set.Add(ctx, link{Hash: id, Prev: pick()})
				}
				switch {
				case err == nil:
					written.Add(1)
					recent = append(recent, id)
					if len(recent) > 20 {
						recent = recent[1:]
					}
				case errors.Is(err, refset.ErrNotFound): // its predecessor was collected first
					refused.Add(1)
					recent = append(recent[:picked], recent[picked+1:]...)
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var childStats []cleanup.Stats
	for i, cmd := range children {
		require.NoError(t, cmd.Wait(), "collector process %d: %s", i, outputs[i])
		var s cleanup.Stats
		line, _ := bufio.NewReader(strings.NewReader(outputs[i].String())).ReadString('\n')
		require.NoError(t, json.Unmarshal([]byte(line), &s), "collector process %d printed %q", i, outputs[i])
		childStats = append(childStats, s)
	}

	// Let every grace period and hold run out, then collect what is left.
	time.Sleep(600 * time.Millisecond)
	final, err := c.Collect(ctx)
	require.NoError(t, err)

	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
	var unreferenced int
	require.NoError(t, db.Pool().GetContext(ctx, &unreferenced, `SELECT count(*) FROM chain b
		WHERE NOT EXISTS (SELECT 1 FROM tips WHERE block_id = b.id)
		  AND NOT EXISTS (SELECT 1 FROM chain_holds WHERE object_id = b.id)
		  AND NOT EXISTS (SELECT 1 FROM chain c WHERE c.prev = b.id)`))
	assert.Zero(t, unreferenced, "unreferenced objects past their grace remain")
	for i, s := range childStats {
		assert.Positive(t, s.Deleted, "collector process %d deleted nothing", i)
	}
	var left int
	require.NoError(t, db.Pool().GetContext(ctx, &left, `SELECT count(*) FROM chain`))
	t.Logf("%d objects written, %d refused (predecessor collected), %d left; processes deleted %d and %d, the final pass %d",
		written.Load(), refused.Load(), left, childStats[0].Deleted, childStats[1].Deleted, final.Deleted)
}

// Clean-up of a set in a schema other than the connection's default.
func TestCleanupInNamedSchema(t *testing.T) {
	db, ledger := withNamedSchema(t)
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, strings.ReplaceAll(`
		CREATE TABLE ledger.blocks (id text PRIMARY KEY, height bigint NOT NULL);
		CREATE TABLE ledger.heads (block_id text PRIMARY KEY REFERENCES ledger.blocks (id))`, "ledger.", ledger+"."))
	require.NoError(t, err)
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: ledger + ".blocks"})
	require.NoError(t, err)
	set := refset.New(setStore)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: ledger + ".blocks", Grace: time.Millisecond})
	require.NoError(t, err)
	var tables []string
	for _, r := range c.References() {
		tables = append(tables, r.Table.String())
	}
	assert.ElementsMatch(t, []string{ledger + ".blocks_holds", ledger + ".heads"}, tables)

	_, err = set.Add(ctx, block{Hash: "kept", Height: 1}, refset.Exec[string](`INSERT INTO `+ledger+`.heads VALUES ($1)`, 1))
	require.NoError(t, err)
	_, err = set.Add(ctx, block{Hash: "dropped", Height: 2})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := c.Collect(ctx)
		require.NoError(t, err)
		var n int
		require.NoError(t, db.Pool().GetContext(ctx, &n, `SELECT count(*) FROM `+ledger+`.blocks`))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond)
	var id string
	require.NoError(t, db.Pool().GetContext(ctx, &id, `SELECT id FROM `+ledger+`.blocks`))
	assert.Equal(t, "kept", id)
}

// The triggers queue what may be garbage at the end of the statement that changed a
// reference, and nothing else: a statement that creates an object together with its
// reference, or deletes a reference together with its object (a custody spend does
// both), leaves the queue alone, and work for the collector follows the garbage.
func TestTriggersQueueOnlyPossibleGarbage(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{})
	ctx := t.Context()
	exec := func(query string) {
		t.Helper()
		_, err := db.Pool().ExecContext(ctx, query)
		require.NoError(t, err, query)
	}
	exec(`CREATE TABLE things (id text PRIMARY KEY, height bigint NOT NULL DEFAULT 0);
		CREATE TABLE pins (id serial PRIMARY KEY, thing_id text NOT NULL REFERENCES things (id));
		CREATE INDEX pins_thing ON pins (thing_id)`)
	_, err := store.NewStore[block, string](ctx, db, store.Config{Table: "things"})
	require.NoError(t, err)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "things", Grace: time.Hour})
	require.NoError(t, err)
	queued := func() []string {
		t.Helper()
		var ids []string
		require.NoError(t, db.Pool().SelectContext(ctx, &ids, `SELECT object_id FROM things_review ORDER BY 1`))
		exec(`DELETE FROM things_review`)
		return ids
	}

	exec(`INSERT INTO things VALUES ('bare')`)
	assert.Equal(t, []string{"bare"}, queued(), "a new object nothing references waits out its grace")

	exec(`WITH t AS (INSERT INTO things VALUES ('held'), ('pinned'), ('loose') RETURNING id),
		h AS (INSERT INTO things_holds (holder, object_id) SELECT 'me', id FROM t WHERE id = 'held')
		INSERT INTO pins (thing_id) SELECT id FROM t WHERE id = 'pinned'`)
	assert.Equal(t, []string{"loose"}, queued(), "objects referenced by the statement that made them are live")

	exec(`DELETE FROM things_holds WHERE object_id = 'held'`)
	assert.Equal(t, []string{"held"}, queued(), "an object whose hold went may be garbage")

	exec(`WITH gone AS (DELETE FROM things WHERE id = 'pinned' RETURNING id)
		DELETE FROM pins WHERE thing_id IN (SELECT id FROM gone)`)
	assert.Empty(t, queued(), "a reference deleted with its object queues nothing: the object is gone")

	exec(`INSERT INTO pins (thing_id) VALUES ('bare'); UPDATE pins SET thing_id = 'held' WHERE thing_id = 'bare'`)
	assert.Equal(t, []string{"bare"}, queued(), "a reference moved away queues the object it left")

	// Nothing leaked: with every object due, collection leaves exactly the referenced
	// one, and the check is clean.
	exec(`INSERT INTO things_review (object_id, review_after) SELECT id, now() FROM things`)
	_, err = c.Collect(ctx)
	require.NoError(t, err)
	var left []string
	require.NoError(t, db.Pool().SelectContext(ctx, &left, `SELECT id FROM things ORDER BY 1`))
	assert.Equal(t, []string{"held"}, left)
	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
}

// The triggers clean-up installs name every table with its schema: a session whose
// search path is another one (another service, psql, a migration tool) writes the
// set's tables by their qualified names without an error, and its writes queue
// what they should. A set installed before names were qualified is brought up to
// date by installing again.
func TestCleanupTriggersIgnoreSearchPath(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "fresh install", true: "install over an unqualified one"}[stale], func(t *testing.T) {
			dsn, sch := pgtest.New(t)
			db := openWith(t, dsn, Options{})
			ctx := t.Context()
			createChain(t, db)
			_, err := store.NewStore[link, string](ctx, db, store.Config{Table: "chain"})
			require.NoError(t, err)
			install := func() {
				t.Helper()
				_, err := store.NewCollector(ctx, db, cleanup.Config{Table: "chain", Grace: time.Hour})
				require.NoError(t, err)
			}
			install()

			other, err := sql.Open("postgres", pgtest.WithParam(t, dsn, "search_path", "public"))
			require.NoError(t, err)
			t.Cleanup(func() { other.Close() })
			q := func(query string) string { return strings.ReplaceAll(query, "$s.", `"`+sch+`".`) }
			if stale {
				unqualifyTriggerFunctions(t, db, sch)
				_, err := other.ExecContext(ctx, q(`INSERT INTO $s.chain (id) VALUES ('probe')`))
				require.ErrorContains(t, err, "does not exist", "the stale install fails in another search path")
				install()
			}

			steps := []struct {
				name, sql string
				queued    []string
			}{
				{"new objects", `INSERT INTO $s.chain (id, prev) VALUES ('g', NULL), ('a', 'g'), ('b', 'g')`, []string{"a", "b"}},
				{"new references", `INSERT INTO $s.tips (block_id) VALUES ('a'), ('b')`, nil},
				{"a reference deleted", `DELETE FROM $s.tips WHERE block_id = 'a'`, []string{"a"}},
				{"a reference moved", `UPDATE $s.tips SET block_id = 'g' WHERE block_id = 'b'`, []string{"b"}},
				{"a hold taken", `INSERT INTO $s.chain_holds (holder, object_id) VALUES ('me', 'a')`, nil},
				{"a hold dropped", `DELETE FROM $s.chain_holds WHERE holder = 'me'`, []string{"a"}},
				{"an object deleted", `DELETE FROM $s.chain WHERE id = 'a'`, []string{"g"}},
			}
			for _, step := range steps {
				_, err := other.ExecContext(ctx, q(`DELETE FROM $s.chain_review`))
				require.NoError(t, err)
				_, err = other.ExecContext(ctx, q(step.sql))
				require.NoError(t, err, step.name)
				var queued []string
				require.NoError(t, db.Pool().SelectContext(ctx, &queued, `SELECT object_id FROM chain_review ORDER BY 1`))
				assert.Equal(t, step.queued, queued, step.name)
			}
		})
	}
}

// unqualifyTriggerFunctions makes the functions of the set's triggers what an
// Install before names were qualified made them: every name in their bodies
// unqualified, resolved through the search path of whoever fires them.
func unqualifyTriggerFunctions(tb testing.TB, db *DB, sch string) {
	tb.Helper()
	var fns []struct {
		Name string `db:"name"`
		Body string `db:"body"`
	}
	require.NoError(tb, db.Pool().SelectContext(tb.Context(), &fns, `
		SELECT DISTINCT t.tgfoid::regproc::text AS name, f.prosrc AS body
		FROM pg_trigger t JOIN pg_proc f ON f.oid = t.tgfoid
		WHERE t.tgname LIKE 'refset_rv_%' AND t.tgrelid::regclass::text IN ('chain', 'tips', 'chain_holds')`))
	require.NotEmpty(tb, fns)
	for _, f := range fns {
		body := strings.ReplaceAll(f.Body, `"`+sch+`".`, "")
		require.NotEqual(tb, f.Body, body, "the body of %s names no table with its schema", f.Name)
		_, err := db.Pool().ExecContext(tb.Context(), `CREATE OR REPLACE FUNCTION `+f.Name+`() RETURNS trigger LANGUAGE plpgsql
			SET enable_seqscan = off AS $refset$`+body+`$refset$`)
		require.NoError(tb, err)
	}
}

// A deferred foreign key added after Install would refuse a delete only at COMMIT,
// failing the whole batch on every pass; collection checks it at the delete instead,
// so the object is refused and postponed like any other unknown reference, and the
// collector follows the key.
func TestCollectWithDeferredUnknownKey(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{})
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, `CREATE TABLE things (id text PRIMARY KEY, height bigint NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	_, err = store.NewStore[block, string](ctx, db, store.Config{Table: "things"})
	require.NoError(t, err)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "things"})
	require.NoError(t, err)
	_, err = db.Pool().ExecContext(ctx, `
		CREATE TABLE later (thing_id text NOT NULL REFERENCES things (id) DEFERRABLE INITIALLY DEFERRED);
		CREATE INDEX later_thing ON later (thing_id);
		INSERT INTO things (id) VALUES ('pinned'), ('free');
		INSERT INTO later VALUES ('pinned');
		UPDATE things_review SET review_after = now() - interval '1 second'`)
	require.NoError(t, err)

	s, err := c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Deleted, "%v", s)
	assert.Equal(t, int64(1), s.Refused, "%v", s)
	assert.Len(t, s.Followed, 1, "%v", s)
	var left []string
	require.NoError(t, db.Pool().SelectContext(ctx, &left, `SELECT id FROM things`))
	assert.Equal(t, []string{"pinned"}, left)
}

// Install tells which keys are ON DELETE NO ACTION, the default, whose check on every
// collected object makes a second index probe that RESTRICT does not: a key that can
// be RESTRICT (not a deferrable one) gets a warning naming it, and the others none.
func TestInstallWarnsOfNoActionKeys(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{})
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, `
		CREATE TABLE things (id text PRIMARY KEY, prev text REFERENCES things (id), height bigint NOT NULL DEFAULT 0);
		CREATE INDEX things_prev ON things (prev);
		CREATE TABLE plain    (thing_id text PRIMARY KEY REFERENCES things (id));
		CREATE TABLE strict   (thing_id text PRIMARY KEY REFERENCES things (id) ON DELETE RESTRICT);
		CREATE TABLE deferred (thing_id text PRIMARY KEY REFERENCES things (id) DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	_, err = store.NewStore[block, string](ctx, db, store.Config{Table: "things"})
	require.NoError(t, err)
	logs := newLogRecorder()
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "things", Logger: logs.logger()})
	require.NoError(t, err)

	noAction := map[string]bool{}
	for _, r := range c.References() {
		noAction[r.Table.Name+"."+r.Column] = r.NoAction
	}
	assert.Equal(t, map[string]bool{"things.prev": true, "plain.thing_id": true, "strict.thing_id": false,
		"deferred.thing_id": false, "things_holds.object_id": false}, noAction)
	var warned []string
	for _, rec := range logs.records() {
		if msg, _ := rec["msg"].(string); rec["level"] == "WARN" && strings.Contains(msg, "ON DELETE RESTRICT") {
			ref, _ := rec["reference"].(string)
			warned = append(warned, ref[strings.Index(ref, ".")+1:])
		}
	}
	assert.ElementsMatch(t, []string{"plain.thing_id", "things.prev"}, warned, "log: %v", logs.records())
}

// A collector walking down an abandoned chain meets a block that a writer has just
// referenced in a transaction not yet committed when the walk's statement took its
// snapshot: the delete waits for the writer, the foreign key refuses it once the
// writer commits, and the batch is reviewed again with the objects locked. Collect
// reports no error; the block and everything below it stay, everything above goes.
func TestChainWalkMeetsUncommittedReference(t *testing.T) {
	const length, referenced = 300, 250
	db := openWith(t, pgtest.DSN(t), Options{})
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, `
		CREATE TABLE chain (id text PRIMARY KEY, prev text REFERENCES chain (id) ON DELETE RESTRICT);
		CREATE INDEX chain_prev ON chain (prev);
		CREATE TABLE tips (block_id text PRIMARY KEY REFERENCES chain (id));
		INSERT INTO chain SELECT 'link-' || i, CASE WHEN i > 0 THEN 'link-' || (i - 1) END FROM generate_series(0, 299) i;
		INSERT INTO tips VALUES ('link-299')`)
	require.NoError(t, err)
	_, err = store.NewStore[link, string](ctx, db, store.Config{Table: "chain"})
	require.NoError(t, err)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "chain", Grace: time.Hour, BatchSize: 100})
	require.NoError(t, err)
	// The first Install queued the chain a grace period ahead, which a walk does not
	// pass: the chain here was reviewed long ago.
	_, err = db.Pool().ExecContext(ctx, `DELETE FROM chain_review; DELETE FROM tips`)
	require.NoError(t, err)

	writer, err := db.Pool().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer writer.Rollback()
	var xid string
	require.NoError(t, writer.GetContext(ctx, &xid, `INSERT INTO tips VALUES ($1) RETURNING pg_current_xact_id()::text`,
		fmt.Sprintf("link-%d", referenced)))

	var s cleanup.Stats
	var collectErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, collectErr = c.Collect(ctx)
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, db.Pool().GetContext(ctx, &waiting, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1)`, xid))
		return waiting
	}, 10*time.Second, time.Millisecond, "the collector never waited for the writer")
	require.NoError(t, writer.Commit())
	<-done
	require.NoError(t, collectErr)
	assert.Equal(t, int64(length-referenced-1), s.Deleted, "%v", s)
	var left int
	require.NoError(t, db.Pool().GetContext(ctx, &left, `SELECT count(*) FROM chain`))
	assert.Equal(t, referenced+1, left)
	var top string
	require.NoError(t, db.Pool().GetContext(ctx, &top, `SELECT id FROM chain c WHERE NOT EXISTS (SELECT 1 FROM chain n WHERE n.prev = c.id)`))
	assert.Equal(t, fmt.Sprintf("link-%d", referenced), top)
}

// createChain makes the tables of the chain set: links, each after the one before
// it, and the tips that hold them.
func createChain(t *testing.T, db *DB) {
	t.Helper()
	_, err := db.Pool().ExecContext(t.Context(), `
		CREATE TABLE chain (id text PRIMARY KEY, prev text REFERENCES chain (id));
		CREATE INDEX chain_prev ON chain (prev);
		CREATE TABLE tips (block_id text PRIMARY KEY REFERENCES chain (id))`)
	require.NoError(t, err)
}
