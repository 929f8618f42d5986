package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hostile tests of the flushed segment (flushed.go): the last segment of a pipelined
// unit on pgx where lost commits are resolved, sent as [BEGIN] statements, ticket,
// Flush, COMMIT, Sync. Each compares with the ordinary path (resolution off: one
// implicit batch) or with what a unit must do: the same sentinel, nothing or all of
// the unit committed, and the connection usable after.

// flushedModes are the query modes that send the last segment flushed: pgx's default
// (cache_statement: prepared under refset's names) and exec (unprepared).
var flushedModes = []string{"cache_statement", "exec"}

// newFlushedEnv is a hand-over env on pgx in query mode mode (on dsn, or a fresh
// schema's), with one connection unless opts says otherwise, and the tables the
// tests below fail units with: a sequence a statement that must not run would touch,
// a reference checked at COMMIT, and a row (doomed) whose COMMIT ends its backend.
func newFlushedEnv(t *testing.T, dsn, mode string, opts Options) *handOverEnv {
	t.Helper()
	if dsn == "" {
		dsn = pgtest.DSN(t)
	}
	opts.Driver = DriverPgx
	if opts.MaxConns == 0 {
		opts.MaxConns = 1
	}
	e := newHandOverEnv(t, openWith(t, inMode(t, dsn, mode), opts))
	for _, q := range []string{
		`CREATE SEQUENCE touched`,
		`CREATE TABLE parents (id text PRIMARY KEY)`,
		`CREATE TABLE late_refs (parent text REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`,
		`CREATE TABLE doomed (id text PRIMARY KEY)`,
		`CREATE FUNCTION end_backend() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER end_backend AFTER INSERT ON doomed
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_backend()`,
	} {
		_, err := e.db.Pool().ExecContext(t.Context(), q)
		require.NoError(t, err, q)
	}
	return e
}

// touchedAt is where the sequence touched is: a statement that ran moved it, rolled
// back or not.
func (e *handOverEnv) touchedAt(t *testing.T) string {
	t.Helper()
	var at string
	require.NoError(t, e.db.Pool().QueryRowContext(t.Context(), `SELECT last_value || '/' || is_called FROM touched`).Scan(&at))
	return at
}

// worksOn asserts that e's pool is in no transaction and that a next hand-over, id's,
// commits on it at once (on one connection: the one the failed unit left, or a new).
func (e *handOverEnv) worksOn(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// A transaction left open on the connection has written (an id) or failed (the
	// query fails).
	var fresh bool
	require.NoError(t, e.db.Pool().QueryRowContext(ctx, `SELECT pg_current_xact_id_if_assigned() IS NULL`).Scan(&fresh))
	assert.True(t, fresh, "no transaction left open on the connection")
	_, err := e.acquired(t, id, []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}).Complete(ctx)
	require.NoError(t, err, "the next unit")
	pending, head := e.state(t, id)
	assert.False(t, pending)
	assert.True(t, head)
	assert.Zero(t, e.db.Pool().Stats().InUse, "no connection left in use")
}

// handedOver asserts that id's hand-over committed wholly (want) or not at all.
func (e *handOverEnv) handedOver(t *testing.T, id string, want bool) {
	t.Helper()
	pending, head := e.state(t, id)
	assert.Equal(t, !want, pending, "the release committed: %v", want)
	assert.Equal(t, want, head, "the acquire committed: %v", want)
}

func cmds(cs ...refset.Command[string]) []refset.Command[string] { return cs }

// A flushed segment that fails on a statement fails as the ordinary path does (the
// same sentinel, with resolution on and off), before or after statements of earlier
// segments (a RETURNING release ends its own), commits nothing, runs nothing after
// the failure, and leaves the one connection usable: a wrong count the server checks
// in the middle, arguments pgx cannot encode, a syntax error, a duplicate, and a
// deferred reference that fails at COMMIT.
func TestFlushedStatementFailures(t *testing.T) {
	exec := func(q string, rows int64, args ...any) refset.Command[string] {
		return refset.Exec[string](q, rows, args...)
	}
	touch := exec(`SELECT nextval('touched') WHERE ?::text IS NOT NULL`, -1)
	returning := exec(`DELETE FROM pending WHERE block_id = ? RETURNING block_id`, 1) // refset reads its count: a segment of its own
	cases := []struct {
		name    string
		release []refset.Command[string]
		acquire []refset.Command[string]
		want    error
	}{
		{"a count wrong in the middle", cmds(releasePending), cmds(acquireHead, exec(`UPDATE heads SET block_id = block_id WHERE block_id = ? AND false`, 1), touch), refset.ErrNotFound},
		{"a channel argument", cmds(releasePending), cmds(exec(`INSERT INTO heads (block_id) SELECT ? WHERE ? IS NOT NULL`, 1, make(chan int)), touch), refset.ErrStatement},
		{"a func argument", cmds(releasePending), cmds(acquireHead, exec(`SELECT ? WHERE ? IS NOT NULL`, -1, func() {}), touch), refset.ErrStatement},
		{"a channel argument after a segment", cmds(returning), cmds(exec(`INSERT INTO heads (block_id) SELECT ? WHERE ? IS NOT NULL`, 1, make(chan int)), touch), refset.ErrStatement},
		{"a syntax error", cmds(releasePending), cmds(exec(`INSERT INTO heads (block_id) VALUS (?)`, -1), touch), refset.ErrStatement},
		{"a syntax error after a segment", cmds(returning), cmds(acquireHead, exec(`INSERT INTO heads (block_id) VALUS (?)`, 1), touch), refset.ErrStatement},
		{"a duplicate", cmds(releasePending), cmds(acquireHead, acquireHead, touch), refset.ErrDuplicate},
		{"a reference dangling at COMMIT", cmds(returning), cmds(acquireHead, exec(`INSERT INTO late_refs VALUES (?)`, 1)), refset.ErrNotFound},
	}
	for _, mode := range flushedModes {
		t.Run(mode, func(t *testing.T) {
			forResolvingOrNot(t, func(t *testing.T, resolves bool) {
				e := newFlushedEnv(t, "", mode, resolvingOrNot(resolves))
				for i, tc := range cases {
					t.Run(tc.name, func(t *testing.T) {
						id := fmt.Sprint("b", i)
						acq := e.acquired(t, id, tc.release, tc.acquire)
						touched := e.touchedAt(t)
						for range 2 { // the Acquired is left usable: it fails the same way again
							_, err := acq.Complete(t.Context())
							require.ErrorIs(t, err, tc.want)
							require.NotErrorIs(t, err, refset.ErrCommitUnknown)
							require.NotErrorIs(t, err, refset.ErrUnavailable)
						}
						e.handedOver(t, id, false)
						assert.Equal(t, touched, e.touchedAt(t), "nothing ran after the failure")
						e.worksOn(t, id+"-next")
					})
				}
			})
		})
	}
}

// A flushed segment whose connection is lost at each point has the outcome the table
// agrees with: nil once committed and the ticket read; ErrUnavailable alone when the
// server ended the transaction at COMMIT (doomed: the ticket was read, and the
// server says it did not commit); ErrCommitUnknown with ErrUnavailable only when the
// ticket never reached refset. Losses racing the Flush (the client cut off as the
// segment's Sync goes) may see the ticket or not: nil or unknown, committed either
// way. Each leaves the pool working.
func TestFlushedConnectionLost(t *testing.T) {
	type outcome int
	const (
		committed outcome = iota // nil
		notCommitted
		unknownCommitted // ErrCommitUnknown, and it committed
		raced            // nil or ErrCommitUnknown, and it committed
	)
	doomed := refset.Exec[string](`INSERT INTO doomed VALUES (?)`, 1)
	cases := []struct {
		name    string
		arm     func(p *pgtest.Proxy)
		acquire []refset.Command[string]
		want    outcome
	}{
		{"COMMIT's answer lost", (*pgtest.Proxy).CutCommitReply, cmds(acquireHead), committed},
		{"the ticket's answer lost", func(p *pgtest.Proxy) { p.CutReplyTo("pg_current_wal_insert_lsn") }, cmds(acquireHead), unknownCommitted},
		{"cut after the statement was sent", func(p *pgtest.Proxy) { p.DropCancels(); p.CutAfterSent("INSERT INTO heads") }, cmds(acquireHead), raced},
		{"cut as COMMIT was sent", func(p *pgtest.Proxy) { p.DropCancels(); p.CutAfterCommitSent() }, cmds(acquireHead), raced},
		{"the backend ended at COMMIT", nil, cmds(acquireHead, doomed), notCommitted},
	}
	for _, mode := range flushedModes {
		t.Run(mode, func(t *testing.T) {
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
					e := newFlushedEnv(t, dsn, mode, Options{MaxConns: 2})
					e.worksOn(t, "first") // the statements prepared on the connection
					id := fmt.Sprint("b", i)
					acq := e.acquired(t, id, cmds(releasePending), tc.acquire)
					if tc.arm != nil {
						tc.arm(proxy)
					}
					_, err := acq.Complete(t.Context())
					t.Logf("%v", err)
					switch tc.want {
					case committed:
						require.NoError(t, err)
					case notCommitted:
						require.ErrorIs(t, err, refset.ErrUnavailable)
						require.NotErrorIs(t, err, refset.ErrCommitUnknown)
					case unknownCommitted:
						require.ErrorIs(t, err, refset.ErrUnavailable)
						require.ErrorIs(t, err, refset.ErrCommitUnknown)
					case raced:
						if err != nil {
							require.ErrorIs(t, err, refset.ErrCommitUnknown)
						}
					}
					check := func() bool {
						pending, head := e.state(t, id)
						return pending != (tc.want != notCommitted) && head == (tc.want != notCommitted)
					}
					require.Eventually(t, check, 10*time.Second, 20*time.Millisecond, "the table agrees")
					e.worksOn(t, id+"-next")
				})
			}
		})
	}
}

// With one connection in the pool, a lost COMMIT of a pipelined unit is resolved
// all the same: the question needs a connection of its own, which the unit's, lost,
// must not keep from it.
func TestFlushedLostCommitOnOneConnection(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	e := newFlushedEnv(t, dsn, "", Options{ResolveCommitWait: 3 * time.Second})
	acq := e.acquired(t, "b", cmds(releasePending), cmds(acquireHead))
	proxy.CutCommitReply()
	_, err := acq.Complete(t.Context())
	require.NoError(t, err, "resolved: committed")
	e.handedOver(t, "b", true)
	e.worksOn(t, "next")
}

// A context that ends while the flushed segment runs a slow statement: with a cancel
// request (a direct connection), the server cancels the statement and nothing
// commits, the call reporting the context's end; behind a pooler (Unprepared: no
// cancel request) the segment has cancelGrace to end on its own, and it commits,
// the call returning nil. Either way the table agrees, and the pool works on.
func TestFlushedContextEnds(t *testing.T) {
	slow := refset.Exec[string](`INSERT INTO heads (block_id) SELECT ? FROM pg_sleep(0.5)`, 1)
	ends := []struct {
		name     string
		deadline bool
		want     error
	}{{"deadline", true, context.DeadlineExceeded}, {"cancel", false, context.Canceled}}
	for _, unprepared := range []bool{false, true} {
		t.Run(fmt.Sprintf("unprepared=%v", unprepared), func(t *testing.T) {
			e := newFlushedEnv(t, "", "", Options{Unprepared: unprepared})
			for i, end := range ends {
				t.Run(end.name, func(t *testing.T) {
					id := fmt.Sprint("b", i)
					acq := e.acquired(t, id, cmds(releasePending), cmds(slow))
					ctx, cancel := endingAfter(t.Context(), 100*time.Millisecond, end.deadline)
					defer cancel()
					_, err := acq.Complete(ctx)
					t.Logf("%v", err)
					if unprepared {
						require.NoError(t, err, "the segment ended within cancelGrace, committed")
					} else {
						require.ErrorIs(t, err, end.want)
						require.NotErrorIs(t, err, refset.ErrCommitUnknown)
					}
					e.handedOver(t, id, unprepared)
					e.worksOn(t, id+"-next")
				})
			}
		})
	}
}

// endingAfter is a context of parent's that ends after d: at its deadline, or
// cancelled.
func endingAfter(parent context.Context, d time.Duration, deadline bool) (context.Context, context.CancelFunc) {
	if deadline {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancel(parent)
	time.AfterFunc(d, cancel)
	return ctx, cancel
}

// panickingTracer is a pgx.BatchTracer that panics at where, while armed.
type panickingTracer struct {
	where string
	armed bool
}

func (p *panickingTracer) at(where string) {
	if p.armed && p.where == where {
		p.armed = false
		panic("tracer: " + where)
	}
}

func (p *panickingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	p.at("start")
	return ctx
}
func (p *panickingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	p.at("query")
}
func (p *panickingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	p.at("end")
}
func (p *panickingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (p *panickingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A pgx tracer that panics (the caller's bug) while a flushed segment runs: the panic
// reaches the caller, and the unit is whole or absent, never half: a panic at the
// segment's start comes before anything of it was sent (nothing commits); one at its
// end comes once COMMIT was answered (it committed); one while its answers are read
// comes once COMMIT was sent, and the connection, closed in the pipeline's middle,
// may or may not let the server commit the whole unit (as for a pgx batch's). No
// transaction is left open, nothing of the segment outlives the call (its watch,
// which would send a cancel request once the call's context ends), and the pool of
// one connection works on.
// Without resolution (one implicit batch, pgx's own tracing) the same holds.
func TestFlushedTracerPanics(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) { testTracerPanics(t, resolvingOrNot(resolves)) })
}

func testTracerPanics(t *testing.T, opts Options) {
	opts.MaxConns = 1
	for _, tc := range []struct {
		where     string
		committed *bool // nil: either, whole
	}{{"start", ptr(false)}, {"query", nil}, {"end", ptr(true)}} {
		t.Run(tc.where, func(t *testing.T) {
			tracer := &panickingTracer{where: tc.where}
			e := newHandOverEnv(t, openTracedPgx(t, tracer, opts))
			acq := e.acquired(t, "b", cmds(releasePending), cmds(acquireHead))
			ctx, cancel := context.WithCancel(t.Context())
			tracer.armed = true
			require.PanicsWithValue(t, "tracer: "+tc.where, func() { _, _ = acq.Complete(ctx) })
			cancel()
			time.Sleep(200 * time.Millisecond)
			assert.Zero(t, strings.Count(allStacks(), "postgres.watchCommit"), "goroutines of the segment's watch left after the call")
			if tc.committed == nil {
				pending, head := e.state(t, "b")
				assert.NotEqual(t, pending, head, "whole or nothing")
			} else {
				e.handedOver(t, "b", *tc.committed)
			}
			e.worksOn(t, "next")
		})
	}
}

// allStacks are the stacks of every goroutine.
func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// Past flushedMost statements prepared on one connection (Exec commands whose text
// varies per call), units take the two batches: each commits, fails as it should,
// and a lost COMMIT is resolved; the connection keeps no more than flushedMost.
func TestFlushedMostReached(t *testing.T) {
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	e := newFlushedEnv(t, dsn, "", Options{MaxConns: 2})
	e.db.Pool().SetMaxOpenConns(1) // every unit on the one connection; resolution on its own
	ctx := t.Context()
	for i := range flushedMost + 10 {
		insert := refset.Exec[string](fmt.Sprintf(`INSERT INTO pending (block_id) SELECT ? WHERE %d >= 0`, i), 1)
		_, err := e.set.Add(ctx, block{Hash: fmt.Sprint("b", i), Height: 1}, insert)
		require.NoError(t, err, i)
	}
	assert.Equal(t, flushedMost+10, count(t, e.db, `SELECT count(*) FROM pending`))
	assert.Equal(t, flushedMost, count(t, e.db, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'refset\_flushed\_%'`), "no more kept")

	_, err := e.set.Add(ctx, block{Hash: "dup", Height: 1}, refset.Exec[string](`INSERT INTO pending (block_id) SELECT ? WHERE 'dup' <> ''`, 1), acquireHead, acquireHead)
	require.ErrorIs(t, err, refset.ErrDuplicate)
	assert.Zero(t, count(t, e.db, `SELECT count(*) FROM blocks WHERE id = 'dup'`))

	e.db.Pool().SetMaxOpenConns(2) // the resolution's
	proxy.CutCommitReply()
	_, err = e.set.Add(ctx, block{Hash: "lost", Height: 1}, refset.Exec[string](`INSERT INTO pending (block_id) SELECT ? WHERE 'lost' <> ''`, 1))
	require.NoError(t, err, "resolved: committed")
	assert.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM pending WHERE block_id = 'lost'`))
}

// Under REPEATABLE READ and SERIALIZABLE the flushed segment begins at the level, and
// a serialization failure (40001) at COMMIT (a deferred trigger raises it on the
// unit's first run) is retried by refset, and the unit commits once.
func TestFlushedIsolation(t *testing.T) {
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(iso.String(), func(t *testing.T) {
			e := newFlushedEnv(t, "", "", Options{Isolation: iso})
			ctx := t.Context()
			for _, q := range []string{
				`CREATE TABLE levels (block_id text, level text)`,
				`CREATE SEQUENCE tries`,
				`CREATE FUNCTION conflict_once() RETURNS trigger LANGUAGE plpgsql AS $$
				 BEGIN IF nextval('tries') = 1 THEN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END IF; RETURN NULL; END $$`,
				`CREATE CONSTRAINT TRIGGER conflict_once AFTER INSERT ON levels
				 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION conflict_once()`,
			} {
				_, err := e.db.Pool().ExecContext(ctx, q)
				require.NoError(t, err, q)
			}
			record := refset.Exec[string](`INSERT INTO levels SELECT ?, current_setting('transaction_isolation')`, 1)
			_, err := e.acquired(t, "a", cmds(releasePending), cmds(record)).Complete(ctx)
			require.NoError(t, err, "retried after the conflict")
			var level string
			require.NoError(t, e.db.Pool().QueryRowContext(ctx, `SELECT level FROM levels WHERE block_id = 'a'`).Scan(&level))
			assert.Equal(t, map[sql.IsolationLevel]string{sql.LevelRepeatableRead: "repeatable read", sql.LevelSerializable: "serializable"}[iso], level)
			assert.Equal(t, 2, count(t, e.db, `SELECT last_value FROM tries`), "run twice")
			assert.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM levels`), "committed once")
			assert.Zero(t, count(t, e.db, `SELECT count(*) FROM pending WHERE block_id = 'a'`), "released")
			e.worksOn(t, "next")
		})
	}
}

// A statement of the caller's that fails with SQLSTATE 26000 (invalid_sql_statement_name:
// its own EXECUTE of a statement it never prepared, or a function raising it) is that
// statement's failure, as on the ordinary path: not refset's prepared statements gone
// (staleFlushed), so the unit is not run again (a sequence the unit moves moves once
// per call) and refset's statements are not forgotten and prepared anew beside the
// old ones, which the server would keep: the connection's prepared statements stay as
// many however often it fails.
func TestFlushedCallersInvalidStatementName(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) {
		e := newFlushedEnv(t, "", "", resolvingOrNot(resolves))
		_, err := e.db.Pool().ExecContext(t.Context(), `CREATE FUNCTION no_such_statement(text) RETURNS int LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'prepared statement "%" does not exist', $1 USING ERRCODE = '26000'; END $$`)
		require.NoError(t, err)
		touch := refset.Exec[string](`SELECT nextval('touched') WHERE ?::text IS NOT NULL`, -1)
		failing := refset.Exec[string](`SELECT no_such_statement(?)`, -1)
		moved := func() int {
			return count(t, e.db, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM touched`)
		}
		prepared := 0
		for i := range 3 {
			id := fmt.Sprint("b", i)
			acq := e.acquired(t, id, cmds(releasePending), cmds(touch, failing))
			before := moved()
			_, err := acq.Complete(t.Context())
			require.ErrorIs(t, err, refset.ErrStatement)
			assert.Equal(t, before+1, moved(), "the unit ran once")
			e.handedOver(t, id, false)
			if i == 0 { // every statement prepared once on the connection
				prepared = count(t, e.db, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'refset\_flushed\_%'`)
			}
		}
		assert.Equal(t, prepared, count(t, e.db, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'refset\_flushed\_%'`), "no statements prepared anew")
	})
}
