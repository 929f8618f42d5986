package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resolveEnv is a database reached through a proxy that loses connections around
// COMMIT, with tables whose rows commit plainly (items), end the committing backend
// at COMMIT when flagged doom (doomed), or take a second to commit (slow).
type resolveEnv struct {
	db    *DB
	proxy *pgtest.Proxy
	logs  *logRecorder
}

func newResolveEnv(t *testing.T, hand func(o *Options)) *resolveEnv {
	t.Helper()
	proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
	logs := newLogRecorder()
	opts := Options{Options: store.Options{Logger: logs.logger()}}
	hand(&opts)
	db := openWith(t, dsn, opts)
	for _, q := range []string{
		`CREATE TABLE items (id text PRIMARY KEY)`,
		// A row flagged doom ends the backend that commits it, at COMMIT, before
		// the commit: the client loses its connection, and nothing committed.
		`CREATE TABLE doomed (id text PRIMARY KEY, doom boolean NOT NULL)`,
		`CREATE FUNCTION end_backend() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN IF NEW.doom THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER end_backend AFTER INSERT ON doomed
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_backend()`,
		// A row of slow takes a second to commit: the backend commits it after its
		// client is gone.
		`CREATE TABLE slow (id text PRIMARY KEY)`,
		`CREATE FUNCTION sleep_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER sleep_at_commit AFTER INSERT ON slow
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sleep_at_commit()`,
	} {
		_, err := db.Pool().ExecContext(t.Context(), q)
		require.NoError(t, err, q)
	}
	return &resolveEnv{db: db, proxy: proxy, logs: logs}
}

// unknownLogged is what refset logs, as an error, of a commit whose outcome it
// could not learn.
const unknownLogged = "refset: connection lost while committing; the transaction may or may not have committed"

// TestLostCommitIsResolved: a COMMIT whose connection is lost is resolved by asking
// the server on a new connection: the unit of work returns nil when it committed,
// ErrUnavailable without ErrCommitUnknown when it did not, and ErrCommitUnknown only
// when no server answers. Each case checks what the table holds afterwards.
func TestLostCommitIsResolved(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		cases := []struct {
			name    string
			opts    func(o *Options)
			arm     func(p *pgtest.Proxy)
			table   string // written by the unit of work
			doom    bool
			want    []error // nil: the unit committed
			present bool    // the unit's row is there afterwards
			logged  string
		}{
			{name: "committed, reply lost", arm: (*pgtest.Proxy).CutCommitReply, table: "items",
				present: true, logged: "refset/postgres: connection lost while committing; the transaction committed"},
			{name: "still committing when the connection ended", arm: func(p *pgtest.Proxy) { p.CutAfterCommitSent(); p.DropCancels() }, table: "slow",
				present: true, logged: "refset/postgres: connection lost while committing; the transaction committed"},
			{name: "did not commit", table: "doomed", doom: true, want: []error{refset.ErrUnavailable},
				logged: "refset/postgres: connection lost while committing; the transaction did not commit"},
			{name: "no server answers", opts: func(o *Options) { o.ResolveCommitWait = 500 * time.Millisecond },
				arm: func(p *pgtest.Proxy) { p.CutCommitReply(); p.Refuse(true) }, table: "items", present: true,
				want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}, logged: unknownLogged},
			{name: "resolution off", opts: func(o *Options) { o.ResolveCommitWait = -1 },
				table: "doomed", doom: true, want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}, logged: unknownLogged},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := newResolveEnv(t, func(o *Options) {
					o.Driver = driver
					if tc.opts != nil {
						tc.opts(o)
					}
				})
				ctx := t.Context()
				if tc.arm != nil {
					tc.arm(e.proxy)
				}
				err := refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
					q := fmt.Sprintf(`INSERT INTO %s (id) VALUES ('x')`, tc.table)
					if tc.table == "doomed" {
						q = `INSERT INTO doomed (id, doom) VALUES ('x', true)`
					}
					_, err := tx.ExecContext(ctx, q)
					return err
				})
				e.proxy.Refuse(false)
				if tc.want == nil {
					require.NoError(t, err)
				} else {
					for _, w := range tc.want {
						require.ErrorIs(t, err, w)
					}
					if !errors.Is(tc.want[len(tc.want)-1], refset.ErrCommitUnknown) {
						require.NotErrorIs(t, err, refset.ErrCommitUnknown, "the server told")
					}
				}
				want := 0
				if tc.present {
					want = 1
				}
				assert.Equal(t, want, count(t, e.db, `SELECT count(*) FROM `+tc.table), "what the table holds")
				if tc.logged != "" {
					logged := e.logs.find(tc.logged)
					require.Len(t, logged, 1, "the outcome is logged")
					if tc.logged == unknownLogged {
						assert.Equal(t, "ERROR", logged[0]["level"])
					}
				}
				t.Logf("%v", err)
			})
		}
	})
}

// TestLostCommitOfAHandOverIsResolved: the same for a hand-over, which lib/pq sends
// through a transaction and pgx pipelined: in one round trip, a Flush sending the
// ticket's answer before COMMIT runs (pgx's default query mode, and exec behind a
// pooler), or, in a mode that cannot (the simple protocol, describe_exec), the ticket
// at the end of the statements' batch and COMMIT alone after it. The reply to its
// COMMIT is lost, and Complete returns the head acquired, as if nothing happened.
func TestLostCommitOfAHandOverIsResolved(t *testing.T) {
	lose := func(t *testing.T, opts Options, mode string) {
		proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
		if mode != "" {
			dsn += "&default_query_exec_mode=" + mode
		}
		e := newHandOverEnv(t, openWith(t, dsn, opts))
		acq := e.acquired(t, "b", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead})
		proxy.CutCommitReply()
		tok, err := acq.Complete(t.Context())
		require.NoError(t, err)
		assert.Equal(t, "b", tok.ID())
		pending, head := e.state(t, "b")
		assert.False(t, pending, "released")
		assert.True(t, head, "acquired")
	}
	forEachHandOverMode(t, func(t *testing.T, opts Options) { lose(t, opts, "") })
	for _, mode := range []string{"exec", "simple_protocol", "describe_exec"} {
		t.Run("pgx "+mode, func(t *testing.T) { lose(t, Options{Driver: DriverPgx, Unprepared: mode != "describe_exec"}, mode) })
	}
}

// TestRetryUnavailable: with Options.RetryUnavailable, a unit of work that lost its
// connection and did not commit runs again and commits once; one whose commit's
// outcome is unknown never runs again; without the option none does.
func TestRetryUnavailable(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		cases := []struct {
			name     string
			retry    time.Duration
			resolve  time.Duration
			runs     int64
			want     []error
			inserted int
		}{
			{name: "runs again", retry: 5 * time.Second, runs: 2, inserted: 1},
			{name: "not after an unknown commit", retry: 5 * time.Second, resolve: -1, runs: 1,
				want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}},
			{name: "off", runs: 1, want: []error{refset.ErrUnavailable}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := newResolveEnv(t, func(o *Options) {
					o.Driver, o.RetryUnavailable, o.ResolveCommitWait = driver, tc.retry, tc.resolve
				})
				ctx := t.Context()
				var runs atomic.Int64
				err := refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
					// The first run's row ends its backend at COMMIT.
					doom := runs.Add(1) == 1
					if _, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES ('x')`); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO doomed (id, doom) VALUES (?, ?)`, fmt.Sprint("run", runs.Load()), doom)
					return err
				})
				for _, w := range tc.want {
					require.ErrorIs(t, err, w)
				}
				if tc.want == nil {
					require.NoError(t, err)
				}
				assert.Equal(t, tc.runs, runs.Load(), "runs of the unit of work")
				assert.Equal(t, tc.inserted, count(t, e.db, `SELECT count(*) FROM items`), "committed once at most")
				if tc.runs > 1 {
					assert.NotEmpty(t, e.logs.find("refset: database unavailable and the unit of work did not commit; running it again"))
				}
			})
		}
	})
}

// TestRetryUnavailableGivesUp: a database that stays away past RetryUnavailable
// fails the unit of work with ErrUnavailable once the budget is spent, and a
// context that ends meanwhile stops the waits at once.
func TestRetryUnavailableGivesUp(t *testing.T) {
	dsn := pgtest.DSN(t)
	db := openWith(t, dsn, Options{Options: store.Options{RetryUnavailable: 600 * time.Millisecond}})
	_, err := db.Pool().ExecContext(t.Context(), `CREATE TABLE items (id text PRIMARY KEY)`)
	require.NoError(t, err)
	var runs atomic.Int64
	unit := func(ctx context.Context, tx refset.Tx) error {
		runs.Add(1)
		_, err := tx.ExecContext(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		return err
	}
	start := time.Now()
	err = refset.InTx(t.Context(), db, unit)
	took := time.Since(start)
	require.ErrorIs(t, err, refset.ErrUnavailable)
	assert.Greater(t, runs.Load(), int64(2), "ran again while the budget lasted")
	assert.Less(t, took, 5*time.Second, "gave up once the budget was spent")

	// The context's end stops the waits at once, however long the budget: the call
	// returns its deadline's error soon after it passes (an attempt cut short by it,
	// or a wait), having run the unit more than once.
	const deadline = time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	db2 := openWith(t, dsn, Options{Options: store.Options{RetryUnavailable: time.Hour}})
	runs.Store(0)
	start = time.Now()
	err = refset.InTx(ctx, db2, unit)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the context's end stops the waits")
	assert.Less(t, time.Since(start), deadline+2*time.Second, "no wait past the deadline")
	assert.Greater(t, runs.Load(), int64(1), "ran again until the deadline")
}

// TestDecideOutcome: what a server's answer about a transaction means, by who gives
// it. "committed" is the transaction's own only from the server that ran it, still
// running, or one that replayed its WAL; from any other it is another transaction's
// that took the same id on a new primary, and this one did not commit there.
func TestDecideOutcome(t *testing.T) {
	cases := []struct {
		status                   string
		sameServer, replayedPast bool
		want                     outcome
	}{
		{"committed", true, false, outcomeCommitted},
		{"committed", false, true, outcomeCommitted},
		{"committed", false, false, outcomeNotCommitted}, // the id was given again
		{"aborted", true, true, outcomeNotCommitted},
		{"aborted", false, false, outcomeNotCommitted},
		{"unassigned", false, false, outcomeNotCommitted},
		{"in progress", true, true, outcomeCommitting}, // its backend still commits: ask again
		{"in progress", false, true, outcomeNotCommitted},
		{"forgotten", true, true, outcomeForgotten},
	}
	for _, tc := range cases {
		got, reason := decideOutcome(tc.status, tc.sameServer, tc.replayedPast)
		assert.Equal(t, tc.want, got, "%+v", tc)
		assert.NotEmpty(t, reason)
	}
}

// TestLostTicketFreesItsConnection: a unit of work whose connection is lost while
// it reads its commit ticket did not commit, and its transaction is ended, its
// connection discarded: on a pool of two that lost two such connections, the next
// unit of work still gets a connection at once and commits, and no connection is
// left in use. On pgx the ticket is read just before COMMIT, and the unit fails with
// ErrUnavailable (COMMIT was never sent); on lib/pq it is read in BEGIN's round trip,
// where nothing ran yet: the unit fails the same way, or, when lib/pq reports the
// loss as ErrBadConn (an end of file, not a reset), database/sql begins again on
// another connection and the unit commits, once.
func TestLostTicketFreesItsConnection(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		e := newResolveEnv(t, func(o *Options) { o.Driver, o.MaxConns = driver, 2 })
		// Each unit on a new connection, whose statements carry their text in the
		// round trip that runs them: the proxy finds it there.
		e.db.Pool().SetMaxIdleConns(0)
		ctx := t.Context()
		insert := func(id string) func(ctx context.Context, tx refset.Tx) error {
			return func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES (?)`, id)
				return err
			}
		}
		needle, atBegin := "pg_current_xact_id_if_assigned", false
		if driver == DriverLibPQ {
			needle, atBegin = "pg_logical_emit_message", true
		}
		want := 1 // the last unit's row
		for _, id := range []string{"lost-1", "lost-2"} {
			e.proxy.CutAfterSent(needle)
			err := refset.InTx(ctx, e.db, insert(id))
			if atBegin && err == nil {
				want++ // BEGIN was lost (lib/pq said ErrBadConn), and sent again on another connection
				continue
			}
			require.ErrorIs(t, err, refset.ErrUnavailable, id)
			require.NotErrorIs(t, err, refset.ErrCommitUnknown, "COMMIT was never sent")
		}
		assert.Zero(t, e.db.Pool().Stats().InUse, "no transaction left open")

		prompt, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		require.NoError(t, refset.InTx(prompt, e.db, insert("after")), "a connection is free")
		assert.Equal(t, want, count(t, e.db, `SELECT count(*) FROM items`), "each unit committed once at most")
	})
}

// TestGivenUpCommitIsResolved: a pipelined unit (pgx) whose context ends while its
// COMMIT runs, and whose server does not answer within cancelGrace (no cancel request
// behind a pooler, or one that never arrives), has its connection closed: the COMMIT
// was sent and may run, so the unit's error is the lost commit's resolution, not the
// context's end, which says nothing of it: nil when the commit then runs, ErrUnavailable
// alone when it fails (doom). The ticket was read before COMMIT was sent; without
// resolution there is none, and the outcome is ErrCommitUnknown, with ErrUnavailable,
// either way. A row of lingering takes secs to commit, and ends the committing backend
// then when flagged doom.
func TestGivenUpCommitIsResolved(t *testing.T) {
	pooled, unresolved := Options{Unprepared: true}, Options{ResolveCommitWait: -1}
	cases := []struct {
		name     string
		opts     Options
		noCancel bool // the proxy drops cancel requests
		doom     bool
		want     []error // nil: committed
	}{
		{name: "behind a pooler (no cancel request), not committed", opts: pooled, doom: true, want: []error{refset.ErrUnavailable}},
		{name: "the cancel request lost, committed", noCancel: true},
		{name: "unresolved, not committed", opts: Options{Unprepared: true, ResolveCommitWait: -1}, doom: true,
			want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}},
		{name: "unresolved, committed", opts: unresolved, noCancel: true, want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
			if tc.noCancel {
				proxy.DropCancels()
			}
			opts := tc.opts
			opts.Driver = DriverPgx
			db := openWith(t, dsn, opts)
			e := newHandOverEnv(t, db)
			for _, q := range []string{
				`CREATE TABLE lingering (id text PRIMARY KEY, secs float8 NOT NULL, doom boolean NOT NULL)`,
				`CREATE FUNCTION linger() RETURNS trigger LANGUAGE plpgsql AS $$
				 BEGIN PERFORM pg_sleep(NEW.secs); IF NEW.doom THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NULL; END $$`,
				`CREATE CONSTRAINT TRIGGER linger AFTER INSERT ON lingering
				 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION linger()`,
			} {
				_, err := db.Pool().ExecContext(t.Context(), q)
				require.NoError(t, err, q)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			secs := cancelGrace.Seconds() + 1
			linger := refset.Exec[string](fmt.Sprintf(`INSERT INTO lingering (id, secs, doom) SELECT ?, %g, %t`, secs, tc.doom), 1)
			start := time.Now()
			_, err := e.set.Add(ctx, block{Hash: "b", Height: 1}, linger)
			t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
			require.Greater(t, time.Since(start), cancelGrace, "the commit was not given up on")
			if tc.want == nil {
				require.NoError(t, err, "resolved: committed")
			}
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
			if len(tc.want) == 1 {
				require.NotErrorIs(t, err, refset.ErrCommitUnknown, "resolved: not committed")
			}
			want := 1
			if tc.doom {
				want = 0
			}
			require.Eventually(t, func() bool {
				return count(t, db, `SELECT count(*) FROM lingering`) == want && count(t, db, `SELECT count(*) FROM blocks`) == want
			}, 10*time.Second, 50*time.Millisecond, "the commit's end: %d rows", want)
		})
	}
}

// TestBeginTicketNamesTheTransactionOnAStandby: on lib/pq the commit ticket is read
// in BEGIN's round trip, before the transaction writes anything, and its WAL
// position is the end of a record that carries the transaction's id (a logical
// decoding message): a server that replayed WAL past it has its next id past this
// one, so it never gives the id to another transaction, and decideOutcome may take
// its "committed" as this transaction's (replayedPast), as it takes that of a server
// that replayed past the position read just before COMMIT. A standby that replayed
// past the position, while the transaction, having written nothing else, is still
// open on the primary, knows the id: in progress, not in its future.
func TestBeginTicketNamesTheTransactionOnAStandby(t *testing.T) {
	primary, standbyDSN, _ := pgtest.NewWithStandby(t)
	db := openWith(t, primary, Options{Driver: DriverLibPQ})
	require.True(t, db.beginTicket, "lib/pq reads the ticket at BEGIN")
	standby := openWith(t, standbyDSN, Options{Driver: DriverLibPQ, ResolveCommitWait: -1})

	ctx := withTicket(t.Context())
	tx, err := db.Pool().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	ticket := ticketOf(ctx)
	require.True(t, ticket.read, "read at BEGIN")
	xid, lsn, _, err := ticket.fields()
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		var replayed bool
		err := standby.Pool().QueryRowContext(t.Context(), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&replayed)
		return err == nil && replayed
	}, 30*time.Second, 5*time.Millisecond, "the standby replays past the ticket's position")
	var status string
	require.NoError(t, standby.Pool().QueryRowContext(t.Context(), `SELECT pg_xact_status($1::xid8)`, xid).Scan(&status),
		"the standby knows the id (an id past its next one is refused as in the future)")
	assert.Equal(t, "in progress", status)
}

// TestLibPQReadsNoTicketBeforeCommit: on lib/pq a write unit sends nothing between
// its work and COMMIT (its ticket came with BEGIN: a proxy armed to cut the ticket
// read before COMMIT never fires), its id is assigned from BEGIN on, and a unit that
// writes nothing still commits. A lost COMMIT is then resolved from the BEGIN ticket
// (TestLostCommitIsResolved).
func TestLibPQReadsNoTicketBeforeCommit(t *testing.T) {
	e := newResolveEnv(t, func(o *Options) { o.Driver = DriverLibPQ })
	// Each unit on a new connection, where a prepared ticket would be prepared
	// anew, its text sent: the proxy would find it.
	e.db.Pool().SetMaxIdleConns(0)
	ctx := t.Context()
	e.proxy.CutAfterSent("pg_current_wal_insert_lsn") // ticketSQL's alone
	defer func() { assert.True(t, e.proxy.Disarm(), "no ticket was read before COMMIT") }()
	var assigned, readOnlyAssigned bool
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT txid_current_if_assigned() IS NOT NULL`).Scan(&assigned); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES ('x')`)
		return err
	}), "no ticket read before COMMIT")
	assert.True(t, assigned, "the id is assigned at BEGIN")
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT txid_current_if_assigned() IS NOT NULL`).Scan(&readOnlyAssigned)
	}), "a unit that writes nothing")
	assert.True(t, readOnlyAssigned, "it has an id too (the cost of reading the ticket before knowing)")
	assert.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM items`))
}

// TestTicketBeforeCommitWithoutMessagePrivilege: a role refused
// pg_logical_emit_message (revoked from PUBLIC, in a database of its own) cannot have
// lib/pq's BEGIN read the ticket; Open finds it out, and the ticket is read before
// COMMIT as on pgx: units commit, and a COMMIT whose reply is lost is still resolved.
func TestTicketBeforeCommitWithoutMessagePrivilege(t *testing.T) {
	ctx := t.Context()
	asURL, _ := pgtest.Forms(t, pgtest.DSN(t))
	admin, err := sql.Open("postgres", asURL)
	require.NoError(t, err)
	defer admin.Close()
	suffix := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))[:20] + fmt.Sprint(time.Now().UnixNano())
	dbName, role := "refset_db_"+suffix, "refset_role_"+suffix
	for _, q := range []string{`CREATE DATABASE ` + dbName, `CREATE ROLE ` + role + ` LOGIN`} {
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), `DROP DATABASE IF EXISTS `+dbName+` WITH (FORCE)`)
		_, _ = admin.ExecContext(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	u, err := url.Parse(asURL)
	require.NoError(t, err)
	u.Path = "/" + dbName
	q := u.Query()
	q.Del("search_path")
	q.Del("options")
	u.RawQuery = q.Encode()
	owner, err := sql.Open("postgres", u.String())
	require.NoError(t, err)
	defer owner.Close()
	for _, q := range []string{
		`REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC`,
		`GRANT ALL ON SCHEMA public TO ` + role,
	} {
		_, err := owner.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	u.User = url.User(role)
	proxy, dsn := pgtest.NewProxy(t, u.String())
	logs := newLogRecorder()
	db := openWith(t, dsn, Options{Driver: DriverLibPQ, Options: store.Options{Logger: logs.logger()}})
	require.False(t, db.beginTicket, "BEGIN reads no ticket for this role")
	_, err = db.Pool().ExecContext(ctx, `CREATE TABLE items (id text PRIMARY KEY)`)
	require.NoError(t, err)

	insert := func(id string) func(ctx context.Context, tx refset.Tx) error {
		return func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES (?)`, id)
			return err
		}
	}
	require.NoError(t, refset.InTx(ctx, db, insert("a")))
	proxy.CutCommitReply()
	require.NoError(t, refset.InTx(ctx, db, insert("b")), "the lost COMMIT resolved from the ticket read before it")
	assert.Len(t, logs.find("refset/postgres: connection lost while committing; the transaction committed"), 1)
	assert.Equal(t, 2, count(t, db, `SELECT count(*) FROM items`))

	// The same for an Add, one simple query (libpqPipeline): its ticket too is read
	// before COMMIT.
	_, err = db.Pool().ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
	require.NoError(t, err)
	blocks, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	set := refset.New(blocks)
	_, err = set.Add(ctx, block{Hash: "a", Height: 1})
	require.NoError(t, err)
	proxy.CutCommitReply()
	_, err = set.Add(ctx, block{Hash: "b", Height: 1})
	require.NoError(t, err, "the lost COMMIT resolved from the ticket read before it")
	assert.Len(t, logs.find("refset/postgres: connection lost while committing; the transaction committed"), 2)
	assert.Equal(t, 2, count(t, db, `SELECT count(*) FROM blocks`))
}
