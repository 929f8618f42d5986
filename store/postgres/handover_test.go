package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ways a hand-over's Exec commands reach Postgres: in one simple query with
// BEGIN, their arguments written in (lib/pq, and lib/pq with Unprepared; prepared
// from the statement cache where they cannot be written in), and pipelined (pgx).
var handOverModes = []struct {
	name string
	opts Options
}{
	{"lib/pq", Options{}},
	{"lib/pq unprepared", Options{Unprepared: true}},
	{"pgx", Options{Driver: DriverPgx}},
}

func forEachHandOverMode(t *testing.T, fn func(t *testing.T, opts Options)) {
	for _, m := range handOverModes {
		t.Run(m.name, func(t *testing.T) { fn(t, m.opts) })
	}
}

// handOverEnv is a set of blocks with the RFC's two holder tables, pending and heads.
type handOverEnv struct {
	db  *DB
	set *refset.RefSet[block, string]
}

func newHandOverEnv(t *testing.T, db *DB) *handOverEnv {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{
		`CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`,
		`CREATE TABLE pending (block_id text PRIMARY KEY REFERENCES blocks (id))`,
		`CREATE TABLE heads (block_id text PRIMARY KEY REFERENCES blocks (id))`,
	} {
		_, err := db.Pool().ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	return &handOverEnv{db: db, set: refset.New(setStore)}
}

var (
	releasePending = refset.Exec[string](`DELETE FROM pending WHERE block_id = ?`, 1)
	acquireHead    = refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, -1)
)

// acquired stores a block id with its pending row and returns its hand-over.
func (e *handOverEnv) acquired(t *testing.T, id string, release, acquire []refset.Command[string]) *refset.Acquired[string] {
	t.Helper()
	tok, err := e.set.Add(t.Context(), block{Hash: id, Height: 1}, refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1))
	require.NoError(t, err)
	rel, err := tok.Release(release...)
	require.NoError(t, err)
	acq, err := rel.Acquire(acquire...)
	require.NoError(t, err)
	return acq
}

// state is whether id is still pending and whether it is a head.
func (e *handOverEnv) state(t *testing.T, id string) (pending, head bool) {
	t.Helper()
	return count(t, e.db, `SELECT count(*) FROM pending WHERE block_id = '`+id+`'`) == 1,
		count(t, e.db, `SELECT count(*) FROM heads WHERE block_id = '`+id+`'`) == 1
}

// unitOf is a unit a test counts the round trips of: an Add of id with add's
// commands, or else the hand-over of id with release and acquire, its pending row
// deleted first if gone.
func (e *handOverEnv) unitOf(t *testing.T, id string, release, acquire, add []refset.Command[string], gone bool) func() error {
	t.Helper()
	ctx := t.Context()
	if add != nil {
		return func() error { _, err := e.set.Add(ctx, block{Hash: id, Height: 1}, add...); return err }
	}
	acq := e.acquired(t, id, release, acquire)
	if gone {
		_, err := e.db.Pool().ExecContext(ctx, `DELETE FROM pending WHERE block_id = $1`, id)
		require.NoError(t, err)
	}
	return func() error { _, err := acq.Complete(ctx); return err }
}

// completeInUnit completes acq in a unit of work of its own (refset.InTx): the way
// of a hand-over whose statements run one by one, prepared, rather than written into
// one simple query (libpqPipeline).
func completeInUnit(t *testing.T, db *DB, acq *refset.Acquired[string]) {
	t.Helper()
	require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		_, err := acq.CompleteTx(ctx, tx)
		return err
	}))
}

// preparedLike counts the statements prepared on db's connection (open it with
// MaxConns 1) whose text is like pattern.
func preparedLike(t *testing.T, db *DB, pattern string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool().QueryRowContext(t.Context(),
		`SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1`, pattern).Scan(&n))
	return n
}

// The statements of Exec commands run prepared on lib/pq, once each per connection,
// where they run one by one (in a unit of work; a hand-over on its own goes in one
// simple query); Options.Unprepared and a negative StatementCache prepare none.
func TestExecCommandsPrepared(t *testing.T) {
	cases := []struct {
		name     string
		opts     Options
		prepared int // of each command's statement on the one connection
		any      bool
	}{
		{"default", Options{MaxConns: 1}, 1, true},
		{"StatementCache -1", Options{MaxConns: 1, Options: store.Options{StatementCache: -1}}, 0, true},
		{"Unprepared", Options{MaxConns: 1, Unprepared: true}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), tc.opts))
			for i := range 3 {
				id := fmt.Sprint("b", i)
				completeInUnit(t, e.db, e.acquired(t, id, []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}))
				pending, head := e.state(t, id)
				assert.False(t, pending)
				assert.True(t, head)
			}
			assert.Equal(t, tc.prepared, preparedLike(t, e.db, `DELETE FROM pending%`))
			assert.Equal(t, tc.prepared, preparedLike(t, e.db, `INSERT INTO heads%`))
			if !tc.any {
				assert.Zero(t, preparedLike(t, e.db, `%`), "nothing at all is prepared")
			}
		})
	}
}

// However many different statements Exec commands run, a connection holds at most
// StatementCache of them prepared: the least recently used are closed on the server.
// The statements lib/pq's simple queries EXECUTE (an Add's, here) are as many more at
// most.
func TestExecStatementsBoundedPerConnection(t *testing.T) {
	const size = 3
	e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), Options{MaxConns: 1, Options: store.Options{StatementCache: size}}))
	for i := range 24 {
		id := fmt.Sprint("b", i)
		// Each release runs twice, and so is prepared; the acquire runs every time.
		release := refset.Exec[string](fmt.Sprintf(`DELETE FROM pending WHERE block_id = ? /* %d */`, i/2), 1)
		completeInUnit(t, e.db, e.acquired(t, id, []refset.Command[string]{release}, []refset.Command[string]{acquireHead}))
		assert.LessOrEqual(t, preparedLike(t, e.db, `DELETE FROM pending %`)+preparedLike(t, e.db, `INSERT INTO heads %`), size, "after %d statements", i+1)
		assert.LessOrEqual(t, preparedLike(t, e.db, `PREPARE refset_u%`), size, "the simple queries' statements, after %d", i+1)
	}
	assert.Equal(t, size, preparedLike(t, e.db, `DELETE FROM pending %`)+preparedLike(t, e.db, `INSERT INTO heads %`))
	assert.Equal(t, size, e.db.stmts.Len())
	assert.Equal(t, 1, preparedLike(t, e.db, `INSERT INTO heads %`), "the statement used all along stays")
}

// A hand-over whose statement the server refuses fails the same typed way each time
// in every mode, changes nothing, prepares and caches nothing of the refused
// statement, and leaves the Acquired usable. A statement after a checked one whose
// count is wrong never runs.
func TestHandOverStatementErrors(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		opts.MaxConns = 1
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		_, err := e.db.Pool().ExecContext(ctx, `CREATE SEQUENCE acquired`)
		require.NoError(t, err)
		// touch is an acquire that leaves a trace outside the transaction: a
		// sequence that a rollback does not reset.
		touch := refset.Exec[string](`SELECT nextval('acquired') WHERE ?::text IS NOT NULL`, -1)

		cases := []struct {
			name             string
			release, acquire []refset.Command[string]
			prepare          func(t *testing.T, id string) // before the hand-over
			want             error
			refused          string // a pattern of the refused statement
		}{
			{name: "syntax error", release: []refset.Command[string]{refset.Exec[string](`DELETE FRM pending WHERE block_id = ?`, 1)},
				acquire: []refset.Command[string]{touch}, want: refset.ErrStatement, refused: `DELETE FRM%`},
			{name: "unknown table after a checked release", release: []refset.Command[string]{releasePending},
				acquire: []refset.Command[string]{refset.Exec[string](`INSERT INTO nowhere (block_id) VALUES (?)`, -1)}, want: refset.ErrSchema, refused: `INSERT INTO nowhere%`},
			{name: "duplicate", release: []refset.Command[string]{releasePending},
				acquire: []refset.Command[string]{acquireHead, acquireHead}, want: refset.ErrDuplicate},
			{name: "checked count wrong", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{touch},
				prepare: func(t *testing.T, id string) {
					_, err := e.db.Pool().ExecContext(ctx, `DELETE FROM pending WHERE block_id = $1`, id)
					require.NoError(t, err)
				}, want: refset.ErrNotFound},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := fmt.Sprint("b", i)
				acq := e.acquired(t, id, tc.release, tc.acquire)
				if tc.prepare != nil {
					tc.prepare(t, id)
				}
				pendingBefore, _ := e.state(t, id)
				var first error
				for range 3 {
					_, err := acq.Complete(ctx)
					require.ErrorIs(t, err, tc.want)
					require.True(t, refset.IsSentinel(err), "%v", err)
					if first == nil {
						first = err
					}
					assert.Equal(t, first.Error(), err.Error(), "the same error every time")
				}
				pending, head := e.state(t, id)
				assert.Equal(t, pendingBefore, pending, "nothing was committed")
				assert.False(t, head, "nothing was committed")
				assert.Zero(t, count(t, e.db, `SELECT count(*) FROM acquired WHERE is_called`), "no statement ran after the failing one")
				if tc.refused != "" {
					assert.Zero(t, preparedLike(t, e.db, tc.refused), "the refused statement is not prepared")
				}
			})
		}
		// The cache of the prepared mode holds only statements that ran.
		if e.db.stmts != nil {
			assert.LessOrEqual(t, e.db.stmts.Len(), 3, "release, acquire, pending insert")
		}
		_, err = e.acquired(t, "good", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}).Complete(ctx)
		require.NoError(t, err, "the database works on")
	})
}

// Exec commands' statements are prepared once per connection (by lib/pq's statement
// cache, or pgx's own). A migration that changes the type of a column one returns
// makes Postgres refuse it ("cached plan must not change result type"); the hand-over
// runs once more, with the statement prepared anew, and succeeds.
func TestHandOversSurviveColumnTypeChange(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		opts.MaxConns = 2
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		returning := refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?) RETURNING block_id`, 1)
		handOver := func(id string) error {
			_, err := e.acquired(t, id, []refset.Command[string]{releasePending}, []refset.Command[string]{returning}).Complete(ctx)
			return err
		}
		for i := range 4 {
			require.NoError(t, handOver(fmt.Sprint("before", i)))
		}
		_, err := e.db.Pool().ExecContext(ctx, `ALTER TABLE heads ALTER COLUMN block_id TYPE varchar(200)`)
		require.NoError(t, err)
		for i := range 4 { // on every pooled connection that prepared the statement
			require.NoError(t, handOver(fmt.Sprint("after", i)))
		}
		assert.Equal(t, 8, count(t, e.db, `SELECT count(*) FROM heads`))
		assert.Zero(t, count(t, e.db, `SELECT count(*) FROM pending`))
	})
}

// batchTracer records what a pgx connection sends: each batch's statements, and
// the statements sent alone.
type batchTracer struct {
	mu      sync.Mutex
	batches [][]string
	alone   []string
}

func (r *batchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.batches = append(r.batches, sqls)
	return ctx
}

func (r *batchTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *batchTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *batchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alone = append(r.alone, data.SQL)
	return ctx
}

func (r *batchTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPgx is a database on a pgx pool of its own whose batches and lone
// statements the returned tracer records.
func tracedPgx(t *testing.T, opts Options) (*DB, *batchTracer) {
	t.Helper()
	tracer := &batchTracer{}
	return openTracedPgx(t, tracer, opts), tracer
}

// openTracedPgx is a database on a pgx pool of its own that tells tracer what it runs.
func openTracedPgx(t *testing.T, tracer pgx.QueryTracer, opts Options) *DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.Tracer = tracer
	pool := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { pool.Close() })
	db, err := New(t.Context(), pool, opts)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// reset forgets what was recorded, and returns it.
func (r *batchTracer) reset() (batches [][]string, alone []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	batches, alone = r.batches, r.alone
	r.batches, r.alone = nil, nil
	for _, b := range batches {
		for i, q := range b {
			if q == ticketSQL {
				b[i] = "ticket" // read before COMMIT (resolve.go)
			}
		}
	}
	return batches, alone
}

// On pgx, a hand-over of Exec commands goes in one batch, the server checking the
// counts of INSERT, UPDATE and DELETE statements (rowCheckedSQL): the statements in an
// implicit transaction, which the batch's Sync commits; where lost commits are
// resolved (the default), BEGIN, the statements, the commit's ticket and COMMIT, sent
// through pgx's pipeline with a Flush before COMMIT (flushed.go), which pgx's tracer
// sees as a batch. Another checked statement (here one with RETURNING) ends its batch,
// read before the next is sent. A hand-over with a command of the caller's own takes
// the ordinary path.
func TestPgxPipelinesHandOvers(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) {
		ctx := t.Context()
		db, tracer := tracedPgx(t, resolvingOrNot(resolves))
		e := newHandOverEnv(t, db)

		acquireChecked := refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1)
		own := refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO heads (block_id) VALUES ($1)`, id)
			return err
		})
		releaseReturning := refset.Exec[string](`DELETE FROM pending WHERE block_id = ? RETURNING block_id`, 1)
		const del, ins = `DELETE FROM pending WHERE block_id = $1`, `INSERT INTO heads (block_id) VALUES ($1)`
		const delReturning = `DELETE FROM pending WHERE block_id = $1 RETURNING block_id`
		checkedDel, checkedIns := rowCheckedSQL(del, 1), rowCheckedSQL(ins, 1)
		cases := []struct {
			name             string
			release, acquire []refset.Command[string]
			batches          [][]string
		}{
			{"checked release, unchecked acquire", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead},
				committing(resolves, []string{checkedDel, ins})},
			{"both checked", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireChecked},
				committing(resolves, []string{checkedDel, checkedIns})},
			{"a checked release the server cannot check", []refset.Command[string]{releaseReturning}, []refset.Command[string]{acquireChecked},
				committing(resolves, []string{"begin", delReturning}, []string{checkedIns})},
			{"none checked", nil, []refset.Command[string]{refset.Exec[string](`DELETE FROM pending WHERE block_id = ?`, -1), acquireHead},
				committing(resolves, []string{del, ins})},
			{"a command of the caller's own", []refset.Command[string]{releasePending}, []refset.Command[string]{own}, nil},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := fmt.Sprint("b", i)
				acq := e.acquired(t, id, tc.release, tc.acquire)
				tracer.reset()
				_, err := acq.Complete(ctx)
				require.NoError(t, err)
				batches, alone := tracer.reset()
				assert.Equal(t, tc.batches, batches)
				if tc.batches != nil {
					assert.Empty(t, alone, "nothing but the batches")
				} else {
					assert.NotEmpty(t, alone)
				}
				pending, head := e.state(t, id)
				assert.False(t, pending)
				assert.True(t, head)
			})
		}
	})
}

// forResolvingOrNot runs fn as a subtest on a database that resolves lost commits (the
// default), and as one on a database that does not.
func forResolvingOrNot(t *testing.T, fn func(t *testing.T, resolves bool)) {
	for _, resolves := range []bool{true, false} {
		t.Run(fmt.Sprintf("resolves=%v", resolves), func(t *testing.T) { fn(t, resolves) })
	}
}

// resolvingOrNot are the options of a database that resolves lost commits, or not.
func resolvingOrNot(resolves bool) Options {
	if resolves {
		return Options{}
	}
	return Options{ResolveCommitWait: -1}
}

// committing are the batches of a pipelined unit whose statements go in segments:
// the last one commits, with COMMIT (after the commit's ticket, when lost commits are
// resolved), or, when it is the only one and no ticket is read, as an implicit
// transaction.
func committing(resolves bool, segments ...[]string) [][]string {
	last := len(segments) - 1
	switch {
	case resolves && last == 0:
		segments[0] = append([]string{"begin"}, append(segments[0], "ticket", "commit")...)
	case resolves:
		segments[last] = append(segments[last], "ticket", "commit")
	case last > 0:
		segments[last] = append(segments[last], "commit")
	}
	return segments
}

// A pipelined hand-over fails as the ordinary one does when the server fails it:
// a terminated backend, a statement timeout, a connection lost while committing (the
// outcome is then unknown, and logged), a context that ends, a closed database. Each
// leaves nothing committed and the database usable.
func TestHandOverInducedFailures(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		logs := newLogRecorder()
		opts.Logger = logs.logger()
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		for _, q := range []string{
			`CREATE TABLE doomed (id text PRIMARY KEY)`,
			`CREATE FUNCTION end_backend() RETURNS trigger LANGUAGE plpgsql AS $$
			 BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$`,
			`CREATE CONSTRAINT TRIGGER end_backend AFTER INSERT ON doomed
			 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_backend()`,
			`CREATE TABLE parents (id text PRIMARY KEY)`,
			`CREATE TABLE late_refs (parent text REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`,
		} {
			_, err := e.db.Pool().ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		exec := func(q string) refset.Command[string] { return refset.Exec[string](q, -1) }
		shortCtx := func() context.Context {
			c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			t.Cleanup(cancel)
			return c
		}
		cancelled := func() context.Context {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c
		}
		cases := []struct {
			name    string
			ctx     func() context.Context
			acquire []refset.Command[string]
			want    []error
			unknown bool
		}{
			{"terminated backend", nil, []refset.Command[string]{acquireHead, exec(`SELECT pg_terminate_backend(pg_backend_pid()) WHERE ?::text IS NOT NULL`)},
				[]error{refset.ErrUnavailable}, false},
			{"statement_timeout", nil, []refset.Command[string]{acquireHead, exec(`SELECT set_config('statement_timeout', '50ms', true) WHERE ?::text IS NOT NULL`),
				exec(`SELECT pg_sleep(5) WHERE ?::text IS NOT NULL`)}, []error{refset.ErrTimeout}, false},
			{"connection lost while committing", nil, []refset.Command[string]{acquireHead, exec(`INSERT INTO doomed VALUES (?)`)},
				[]error{refset.ErrUnavailable}, false},
			// Checked only when the transaction commits: on pgx, at the Sync of a
			// unit sent without BEGIN and COMMIT.
			{"a reference dangling at commit", nil, []refset.Command[string]{acquireHead, exec(`INSERT INTO late_refs VALUES (?)`)},
				[]error{refset.ErrNotFound}, false},
			{"deadline during a statement", shortCtx, []refset.Command[string]{acquireHead, exec(`SELECT pg_sleep(5) WHERE ?::text IS NOT NULL`)},
				[]error{context.DeadlineExceeded}, false},
			{"cancelled before", cancelled, []refset.Command[string]{acquireHead}, []error{context.Canceled}, false},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := fmt.Sprint("b", i)
				acq := e.acquired(t, id, []refset.Command[string]{releasePending}, tc.acquire)
				callCtx := ctx
				if tc.ctx != nil {
					callCtx = tc.ctx()
				}
				_, err := acq.Complete(callCtx)
				for _, want := range tc.want {
					require.ErrorIs(t, err, want)
				}
				require.NotErrorIs(t, err, refset.ErrConflict, "not retried as a conflict")
				if !tc.unknown {
					require.NotErrorIs(t, err, refset.ErrCommitUnknown)
				} else {
					assert.NotEmpty(t, logs.find("refset: connection lost while committing; the transaction may or may not have committed"))
				}
				pending, head := e.state(t, id)
				assert.True(t, pending, "nothing was committed")
				assert.False(t, head, "nothing was committed")
				assert.Zero(t, count(t, e.db, `SELECT count(*) FROM doomed`), "nothing was committed")
				assert.Zero(t, count(t, e.db, `SELECT count(*) FROM late_refs`), "nothing was committed")

				// The Acquired was left usable: it fails the same way again, or, when
				// it was the context that ended, succeeds with one that did not.
				_, err = acq.Complete(ctx)
				if tc.ctx == nil {
					require.ErrorIs(t, err, tc.want[0])
				} else {
					require.NoError(t, err)
				}
				// And the database works on.
				_, err = e.acquired(t, id+"-next", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}).Complete(ctx)
				require.NoError(t, err)
			})
		}
		t.Run("closed", func(t *testing.T) {
			acq := e.acquired(t, "closed", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead})
			require.NoError(t, e.db.Close())
			_, err := acq.Complete(ctx)
			require.ErrorIs(t, err, refset.ErrClosed)
		})
	})
}

// The hand-over's transaction has the database's isolation level, pipelined or not,
// and slow statements are logged, pipelined or not.
func TestHandOverIsolationAndSlowLog(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		logs := newLogRecorder()
		opts.Isolation, opts.Logger, opts.SlowStatement = sql.LevelSerializable, logs.logger(), 50*time.Millisecond
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		_, err := e.db.Pool().ExecContext(ctx, `CREATE TABLE levels (block_id text, level text)`)
		require.NoError(t, err)
		record := refset.Exec[string](`INSERT INTO levels SELECT ?, current_setting('transaction_isolation')`, 1)
		sleep := refset.Exec[string](`SELECT pg_sleep(0.1) WHERE ?::text IS NOT NULL`, -1)
		_, err = e.acquired(t, "a", []refset.Command[string]{releasePending}, []refset.Command[string]{record, sleep}).Complete(ctx)
		require.NoError(t, err)
		var level string
		require.NoError(t, e.db.Pool().QueryRowContext(ctx, `SELECT level FROM levels WHERE block_id = 'a'`).Scan(&level))
		assert.Equal(t, "serializable", level)
		slow := logs.find("refset: slow statement")
		require.NotEmpty(t, slow)
		assert.Equal(t, `SELECT pg_sleep(0.1) WHERE $1::text IS NOT NULL`, slow[len(slow)-1]["statement"])
	})
}

// Close of a database on the caller's pool, which stays open, closes every statement
// refset prepared on it: the set's own (its inserts, holds, reads), Exec commands',
// and those lib/pq's simple queries EXECUTE (the commit ticket, an Add's command),
// each deallocated when its connection is next lent.
func TestCloseFreesExecStatementsOnCallersPool(t *testing.T) {
	ctx := t.Context()
	pool := callersPool(t, DriverLibPQ, pgtest.DSN(t))
	pool.SetMaxOpenConns(1)
	db, err := New(ctx, pool, Options{})
	require.NoError(t, err)
	e := newHandOverEnv(t, db)
	for i := range 3 { // a statement is prepared at the Begin after its second run
		completeInUnit(t, db, e.acquired(t, fmt.Sprint("b", i), []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}))
	}
	assert.Equal(t, 1, preparedLike(t, db, `DELETE FROM pending%`))
	assert.Equal(t, 1, preparedLike(t, db, `PREPARE refset_u% AS SELECT concat_ws('|', pg_current_xact_id()%`), "the commit ticket, EXECUTEd with BEGIN")
	assert.Equal(t, 1, preparedLike(t, db, `PREPARE refset_u% AS WITH refset_rows AS (INSERT INTO pending %`), "an Add's command, EXECUTEd in its simple query")
	assert.Positive(t, preparedLike(t, db, `INSERT INTO "blocks_holds"%`), "the set's own statements")
	require.NoError(t, db.Close())
	// lib/pq prepares nothing of its own (a statement with arguments is unnamed, and
	// pg_prepared_statements lists none), so every statement left is refset's.
	var left []string
	rows, err := pool.QueryContext(ctx, `SELECT statement FROM pg_prepared_statements`)
	require.NoError(t, err)
	for rows.Next() {
		var st string
		require.NoError(t, rows.Scan(&st))
		left = append(left, st)
	}
	require.NoError(t, rows.Err())
	assert.Empty(t, left, "freed when the connection is next lent")
}

// The pipeline runs in every query mode a pgx pool may be configured with (a pooler
// in transaction mode wants simple_protocol or exec): a hand-over commits, a wrong
// count stops it before its next statement, a refused statement rolls it back, and
// an argument pgx cannot send is a statement's mistake (nothing was sent), not a
// lost commit, in a batch that carries BEGIN and COMMIT together too.
func TestPgxPipelineInEveryQueryMode(t *testing.T) {
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			e := newHandOverEnv(t, openWith(t, dsn+sep+"default_query_exec_mode="+mode, Options{Driver: DriverPgx}))
			ctx := t.Context()
			_, err := e.db.Pool().ExecContext(ctx, `CREATE SEQUENCE acquired`)
			require.NoError(t, err)
			touch := refset.Exec[string](`SELECT nextval('acquired') WHERE ?::text IS NOT NULL`, -1)

			_, err = e.acquired(t, "a", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}).Complete(ctx)
			require.NoError(t, err)
			pending, head := e.state(t, "a")
			assert.False(t, pending)
			assert.True(t, head)

			acq := e.acquired(t, "b", []refset.Command[string]{releasePending}, []refset.Command[string]{touch})
			_, err = e.db.Pool().ExecContext(ctx, `DELETE FROM pending WHERE block_id = 'b'`)
			require.NoError(t, err)
			_, err = acq.Complete(ctx)
			require.ErrorIs(t, err, refset.ErrNotFound)
			assert.Zero(t, count(t, e.db, `SELECT count(*) FROM acquired WHERE is_called`), "no statement ran after the wrong count")

			_, err = e.acquired(t, "c", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead, acquireHead}).Complete(ctx)
			require.ErrorIs(t, err, refset.ErrDuplicate)
			pending, head = e.state(t, "c")
			assert.True(t, pending, "rolled back")
			assert.False(t, head, "rolled back")

			unsendable := refset.Exec[string](`INSERT INTO heads (block_id) SELECT ? WHERE ? IS NOT NULL`, 1, struct{}{})
			_, err = e.acquired(t, "d", []refset.Command[string]{releasePending}, []refset.Command[string]{unsendable}).Complete(ctx)
			require.ErrorIs(t, err, refset.ErrStatement)
			require.NotErrorIs(t, err, refset.ErrCommitUnknown)
			pending, head = e.state(t, "d")
			assert.True(t, pending, "rolled back")
			assert.False(t, head, "rolled back")
		})
	}
}

// Under SERIALIZABLE, concurrent hand-overs whose acquire reads the whole ledger and
// appends the next sequence number conflict: Postgres aborts all but one with 40001.
// Complete runs the aborted ones again, pipelined or not, so every hand-over commits
// exactly once, and the sequence has no gaps and no duplicates.
func TestHandOversRetrySerializationFailures(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		logs := newLogRecorder()
		opts.Isolation, opts.Logger, opts.MaxConns = sql.LevelSerializable, logs.logger(), 8
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		_, err := e.db.Pool().ExecContext(ctx, `CREATE TABLE ledger (seq bigint NOT NULL, block_id text NOT NULL)`)
		require.NoError(t, err)
		// The sleep keeps each transaction open after it read the ledger, so the
		// concurrent ones overlap.
		appendNext := refset.Exec[string](`WITH next AS (SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM ledger), pause AS (SELECT pg_sleep(0.05))
			INSERT INTO ledger (seq, block_id) SELECT next.seq, ? FROM next, pause`, 1)

		// Rounds: the writers of a round start together, so their first attempts
		// overlap; every attempt lets at least one of them commit, so none runs out
		// of retries.
		const writers, each = 3, 4
		errs := make(chan error, writers*each)
		for round := range each {
			var acqs []*refset.Acquired[string]
			for w := range writers {
				acqs = append(acqs, e.acquired(t, fmt.Sprintf("w%d-%d", w, round), []refset.Command[string]{releasePending}, []refset.Command[string]{appendNext}))
			}
			var start, wg sync.WaitGroup
			start.Add(1)
			for _, acq := range acqs {
				wg.Go(func() {
					start.Wait()
					_, err := acq.Complete(ctx)
					errs <- err
				})
			}
			start.Done()
			wg.Wait()
		}
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var rows, distinct, top int64
		require.NoError(t, e.db.Pool().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT seq), COALESCE(MAX(seq), 0) FROM ledger`).Scan(&rows, &distinct, &top))
		assert.Equal(t, int64(writers*each), rows, "every hand-over committed once")
		assert.Equal(t, rows, distinct, "no sequence number twice")
		assert.Equal(t, rows, top, "no gaps")
		assert.Zero(t, count(t, e.db, `SELECT count(*) FROM pending`))
		assert.NotEmpty(t, logs.find("refset: transaction aborted by the database; retrying"), "the workload produced conflicts, so retries were exercised")
	})
}

// TestFlushedStatementsOutliveDeallocate: the statements a pgx connection prepared for
// pipelined units (in pgx's statement cache, for batches, and for flushed segments, a
// unit's last where lost commits are resolved) are gone from the server once the caller
// runs DEALLOCATE ALL or DISCARD ALL on that connection; the next unit on it finds them
// gone, prepares them again and runs again, once, as if nothing happened, and the ones
// after it too: an Add (one segment), and a hand-over of two segments (a release with
// RETURNING, read before the acquire is sent).
func TestFlushedStatementsOutliveDeallocate(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) {
		opts := resolvingOrNot(resolves)
		opts.Driver, opts.MaxConns = DriverPgx, 1
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		pending := refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1)
		releaseReturning := refset.Exec[string](`DELETE FROM pending WHERE block_id = ? RETURNING block_id`, 1)
		for i, q := range []string{"", "DEALLOCATE ALL", "DISCARD ALL"} {
			if q != "" {
				_, err := e.db.Pool().ExecContext(ctx, q) // the one connection the units run on
				require.NoError(t, err)
			}
			for j := range 2 {
				id := fmt.Sprintf("b%d-%d", i, j)
				_, err := e.set.Add(ctx, block{Hash: id, Height: 1}, pending)
				require.NoError(t, err, "Add after %q", q)
				acq := e.acquired(t, id+"h", []refset.Command[string]{releaseReturning}, []refset.Command[string]{acquireHead})
				if q != "" && j == 0 {
					_, err = e.db.Pool().ExecContext(ctx, q) // again, before the hand-over
					require.NoError(t, err)
				}
				_, err = acq.Complete(ctx)
				require.NoError(t, err, "hand-over after %q", q)
				pendingLeft, head := e.state(t, id+"h")
				assert.False(t, pendingLeft, id)
				assert.True(t, head, id)
			}
		}
	})
}

// deallocators are the ways a caller drops the statements prepared on the one
// connection of db's pool: SQL through the pool, SQL on a connection of its own
// (pool.Conn), one statement by name, after another statement in one simple query,
// pgx's own Exec on that connection (sql.Conn.Raw, which no wrapper of refset's
// sees), and DEALLOCATE ALL inside a unit of work
// that goes on with refset's statements (the unit's function runs again, if refset
// runs the unit again, and deallocates again).
var deallocators = []struct {
	name string
	drop func(t *testing.T, e *handOverEnv, set *refset.RefSet[block, string], id string)
}{
	{"DEALLOCATE ALL", func(t *testing.T, e *handOverEnv, _ *refset.RefSet[block, string], _ string) {
		_, err := e.db.Pool().ExecContext(t.Context(), `DEALLOCATE ALL`)
		require.NoError(t, err)
	}},
	{"DISCARD ALL", func(t *testing.T, e *handOverEnv, _ *refset.RefSet[block, string], _ string) {
		_, err := e.db.Pool().ExecContext(t.Context(), `DISCARD ALL`)
		require.NoError(t, err)
	}},
	{"DEALLOCATE name", func(t *testing.T, e *handOverEnv, _ *refset.RefSet[block, string], _ string) {
		ctx := t.Context()
		conn, err := e.db.Pool().Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		var name string
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT name FROM pg_prepared_statements ORDER BY name LIMIT 1`).Scan(&name))
		_, err = conn.ExecContext(ctx, `DEALLOCATE "`+name+`"`)
		require.NoError(t, err, name)
	}},
	{"after another statement", func(t *testing.T, e *handOverEnv, _ *refset.RefSet[block, string], _ string) {
		_, err := e.db.Pool().ExecContext(t.Context(), `SELECT 1; DEALLOCATE ALL`)
		require.NoError(t, err)
	}},
	{"raw pgx", func(t *testing.T, e *handOverEnv, _ *refset.RefSet[block, string], _ string) {
		ctx := t.Context()
		conn, err := e.db.Pool().Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		onPgx := false
		require.NoError(t, conn.Raw(func(dc any) error {
			pc := pgxConnOf(dc)
			if onPgx = pc != nil; !onPgx {
				return nil
			}
			_, err := pc.Exec(ctx, `DEALLOCATE ALL`)
			return err
		}))
		if !onPgx { // lib/pq: nothing lies under refset's wrapper
			_, err = conn.ExecContext(ctx, `DEALLOCATE ALL`)
			require.NoError(t, err)
		}
	}},
	{"in a unit", func(t *testing.T, e *handOverEnv, set *refset.RefSet[block, string], id string) {
		require.NoError(t, refset.InTx(t.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
			if _, err := tx.ExecContext(ctx, `DEALLOCATE ALL`); err != nil {
				return err
			}
			tok, err := set.AddTx(ctx, tx, block{Hash: id, Height: 1}, set.Hold("unit", time.Hour))
			if err != nil {
				return err
			}
			_, err = set.GetTx(ctx, tx, tok)
			return err
		}))
	}},
}

// deallocatingPools are the pools of one connection a caller may give refset, on
// which it deallocates refset's statements: Open's on lib/pq (with the statement
// cache of Exec commands) and on pgx in each query mode, with lost commits resolved
// (a flushed last segment) or not, and the caller's own of each kind New takes.
var deallocatingPools = []struct {
	name string
	open func(t *testing.T, dsn string) *DB
}{
	{"lib/pq", func(t *testing.T, dsn string) *DB { return openWith(t, dsn, Options{MaxConns: 1}) }},
	{"lib/pq StatementCache 4", func(t *testing.T, dsn string) *DB {
		return openWith(t, dsn, Options{MaxConns: 1, Options: store.Options{StatementCache: 4}})
	}},
	{"lib/pq NewConnector", func(t *testing.T, dsn string) *DB { return newOnCallersPool(t, callersPool(t, DriverLibPQ, dsn)) }},
	{"pgx", func(t *testing.T, dsn string) *DB { return openWith(t, dsn, Options{Driver: DriverPgx, MaxConns: 1}) }},
	{"pgx unresolved", func(t *testing.T, dsn string) *DB {
		return openWith(t, dsn, Options{Driver: DriverPgx, MaxConns: 1, ResolveCommitWait: -1})
	}},
	{"pgx cache_describe", func(t *testing.T, dsn string) *DB {
		return openWith(t, inMode(t, dsn, "cache_describe"), Options{Driver: DriverPgx, MaxConns: 1})
	}},
	{"pgx describe_exec", func(t *testing.T, dsn string) *DB {
		return openWith(t, inMode(t, dsn, "describe_exec"), Options{Driver: DriverPgx, MaxConns: 1})
	}},
	{"pgx exec", func(t *testing.T, dsn string) *DB {
		return openWith(t, inMode(t, dsn, "exec"), Options{Driver: DriverPgx, MaxConns: 1})
	}},
	{"pgx simple_protocol", func(t *testing.T, dsn string) *DB {
		return openWith(t, inMode(t, dsn, "simple_protocol"), Options{Driver: DriverPgx, MaxConns: 1})
	}},
	{"pgx NewPgxConnector", func(t *testing.T, dsn string) *DB { return newOnCallersPool(t, guardedPgxPools[1].open(t, dsn)) }},
	{"pgx NewPgxPoolConnector", func(t *testing.T, dsn string) *DB {
		return newOnCallersPool(t, guardedPgxPools[2].open(t, pgtest.WithParam(t, dsn, "pool_max_conns", "1")))
	}},
	{"pgx stdlib.OpenDB", func(t *testing.T, dsn string) *DB {
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		pool := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { pool.Close() })
		return newOnCallersPool(t, pool)
	}},
}

// newOnCallersPool is New on pool, sized to one connection, closed when t ends.
func newOnCallersPool(t *testing.T, pool *sql.DB) *DB {
	t.Helper()
	pool.SetMaxOpenConns(1)
	db, err := New(t.Context(), pool, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPreparedStatementsOutliveDeallocate: a caller that drops the statements
// prepared on a connection (DEALLOCATE ALL, DISCARD ALL, DEALLOCATE of one, through
// database/sql or pgx itself, or inside a unit of work) and goes on using refset on
// that connection finds every call working, the first after it too: an Add alone and
// with commands, a Load, a hold and its release, a hand-over pipelined and in a unit
// of work, a unit that adds, holds and reads, a statement that commits on its own
// (refsetdriver.OwnCommits), and clean-up's collection and reports.
// The statements the drivers and refset keep prepared (pgx's statement cache, the
// statements database/sql prepared, lib/pq's cache of Exec commands, refset's own
// writes) are prepared again, not sent by their names for the rest of the
// connection's life (SQLSTATE 26000, "prepared statement ... does not exist").
func TestPreparedStatementsOutliveDeallocate(t *testing.T) {
	for _, p := range deallocatingPools {
		for _, d := range deallocators {
			t.Run(p.name+"/"+d.name, func(t *testing.T) {
				e := newHandOverEnv(t, p.open(t, pgtest.DSN(t)))
				ctx := t.Context()
				setStore, err := store.NewStore[block, string](ctx, e.db, store.Config{Table: "blocks"})
				require.NoError(t, err)
				c, err := store.NewCollector(ctx, e.db, cleanup.Config{Table: "blocks", Grace: time.Millisecond})
				require.NoError(t, err)
				pending := refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1)
				_, err = e.db.Pool().ExecContext(ctx, `CREATE TABLE paid (id text PRIMARY KEY)`)
				require.NoError(t, err)
				own := e.db.Driver().(refsetdriver.OwnCommits)
				work := func(round int) {
					t.Helper()
					id := func(k string) string { return fmt.Sprint(k, round) }
					step := func(what string, err error) {
						t.Helper()
						assert.NoError(t, err, "round %d: %s", round, what)
					}
					set := refset.New(setStore) // nothing cached: Load reads
					_, err := set.Add(ctx, block{Hash: id("a"), Height: 1}, pending)
					step("Add with a command", err)
					_, err = set.Add(ctx, block{Hash: id("p"), Height: 1})
					step("Add", err)
					_, err = set.Load(ctx, id("a"))
					step("Load", err)
					tok, err := set.Upgrade(ctx, id("p"), set.Hold("h", time.Hour))
					step("Upgrade with a hold", err)
					if err == nil {
						rel, err := tok.Release(set.Unhold("h"))
						require.NoError(t, err)
						acq, err := rel.Acquire()
						require.NoError(t, err)
						_, err = acq.Complete(ctx)
						step("Unhold", err)
					}
					_, err = e.acquired(t, id("h"), cmds(releasePending), cmds(acquireHead)).Complete(ctx)
					step("hand-over", err)
					acq := e.acquired(t, id("u"), cmds(releasePending), cmds(acquireHead))
					step("hand-over in a unit", refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
						_, err := acq.CompleteTx(ctx, tx)
						return err
					}))
					step("unit", refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
						tok, err := set.AddTx(ctx, tx, block{Hash: id("t"), Height: 1}, set.Hold("t", time.Hour))
						if err == nil {
							_, err = set.GetTx(ctx, tx, tok)
						}
						return err
					}))
					step("a statement that commits on its own", own.QueryOwn(ctx, `INSERT INTO paid (id) VALUES ($1) RETURNING id`,
						[]any{id("o")}, func(*sql.Rows) error { return nil }, nil))
					_, err = c.Collect(ctx)
					step("Collect", err)
					_, err = c.Check(ctx)
					step("Check", err)
					_, err = c.Why(ctx, id("a"))
					step("Why", err)
				}
				for round := range 3 { // Exec commands are prepared once they ran twice
					work(round)
				}
				d.drop(t, e, refset.New(setStore), "dropped")
				for round := 3; round < 6; round++ {
					work(round)
				}
			})
		}
	}
}

// A statement of the caller's that fails with SQLSTATE 26000 in a unit of work (a
// function raising it, naming a statement as lib/pq names its own) is that
// statement's failure, not a statement of the driver's gone: the unit runs once
// (a sequence it moves moves once per call), and fails with ErrStatement.
func TestCallersInvalidStatementNameInUnit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), Options{Driver: driver, MaxConns: 1}))
		ctx := t.Context()
		for _, q := range []string{`CREATE SEQUENCE touched`, `CREATE FUNCTION no_such_statement(text) RETURNS int LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'prepared statement "%" does not exist', $1 USING ERRCODE = '26000'; END $$`} {
			_, err := e.db.Pool().ExecContext(ctx, q)
			require.NoError(t, err)
		}
		touch := refset.Exec[string](`SELECT nextval('touched') WHERE ?::text IS NOT NULL`, -1)
		failing := refset.Exec[string](`SELECT no_such_statement('1') WHERE ?::text IS NOT NULL`, -1)
		for i := range 3 { // prepared from the third on, on lib/pq
			id := fmt.Sprint("b", i)
			acq := e.acquired(t, id, cmds(releasePending), cmds(touch, failing))
			err := refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				_, err := acq.CompleteTx(ctx, tx)
				return err
			})
			require.ErrorIs(t, err, refset.ErrStatement)
			assert.Equal(t, i+1, count(t, e.db, `SELECT last_value FROM touched`), "the unit ran once")
			e.handedOver(t, id, false)
		}
	})
}
