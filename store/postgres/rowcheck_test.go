package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On pgx, a hand-over of Exec commands whose counts the server checks, and an Add
// with such commands, take one round trip, counted on the wire: the server's
// ReadyForQuery messages. A checked statement the server cannot check (RETURNING)
// is read before the next is sent, one more; a hand-over refused for its count takes
// its batch alone, rolled back at its Sync with no ROLLBACK after it. (pgx then forgets
// the batch's prepared statements, as it does after any failed batch: the next unit
// prepares them again.) Where lost commits are resolved (the default), the batch
// begins with BEGIN and ends with the ticket and COMMIT, one round trip still, but a
// refused hand-over's transaction is then rolled back in one more.
func TestPgxUnitsTakeOneRoundTrip(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) {
		ctx := t.Context()
		proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		// No ping before a connection is lent again: only the units' own messages.
		pool := stdlib.OpenDB(*cfg, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
		pool.SetMaxOpenConns(1)
		t.Cleanup(func() { pool.Close() })
		db, err := New(ctx, pool, resolvingOrNot(resolves))
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		require.Equal(t, resolves, db.resolveWait > 0)
		e := newHandOverEnv(t, db)

		acquireChecked := refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1)
		releaseReturning := refset.Exec[string](`DELETE FROM pending WHERE block_id = ? RETURNING block_id`, 1)
		pendingChecked := refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1)
		cases := []struct {
			name             string
			release, acquire []refset.Command[string] // a hand-over
			add              []refset.Command[string] // or an Add with these
			moved            bool                     // the pending row is gone before the counted Complete
			roundTrips       int64
		}{
			{name: "checked release, unchecked acquire", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{acquireHead}, roundTrips: 1},
			{name: "both checked", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{acquireChecked}, roundTrips: 1},
			{name: "an Add with a checked command", add: []refset.Command[string]{pendingChecked}, roundTrips: 1},
			{name: "a release the server cannot check", release: []refset.Command[string]{releaseReturning}, acquire: []refset.Command[string]{acquireChecked}, roundTrips: 2},
			{name: "a release of a row gone", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{acquireHead}, moved: true, roundTrips: 1},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				// The first runs prepare the statements (pgx's statement cache) and
				// succeed; the last is counted.
				for run := range 3 {
					id := fmt.Sprintf("b%d-%d", i, run)
					unit := e.unitOf(t, id, tc.release, tc.acquire, tc.add, tc.moved && run == 2)
					before := proxy.ReadyForQuery()
					err := unit()
					after := proxy.ReadyForQuery()
					if tc.moved && run == 2 {
						require.ErrorIs(t, err, refset.ErrNotFound)
					} else {
						require.NoError(t, err)
					}
					if run == 2 {
						want := tc.roundTrips
						if resolves && tc.moved {
							want++ // ROLLBACK
						}
						assert.Equal(t, want, after-before, "round trips")
					}
				}
			})
		}
	})
}

// A count the server refuses is the error refset gives wherever the count is
// checked: the same sentinel and message on lib/pq (checked in Go, prepared or not)
// and pgx (checked by the server), for a row already gone, a row matched twice, a
// count above the one wanted; the transaction rolls back and no statement after the
// refused one runs. A count that is right passes, more than one row too; an INSERT
// that does nothing on a conflict counts no row; a table whose rule Postgres does
// not apply to a statement nested as the server's check takes it (0A000) has its
// statement sent as it is, and checked as before.
func TestHandOverCountsRefused(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		opts.MaxConns = 2
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		for _, q := range []string{
			`CREATE SEQUENCE acquired`,
			`CREATE TABLE archive (block_id text NOT NULL)`,
			`CREATE RULE keep AS ON DELETE TO archive DO INSTEAD NOTHING`,
		} {
			_, err := e.db.Pool().ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		// touch is an acquire that leaves a trace outside the transaction.
		touch := refset.Exec[string](`SELECT nextval('acquired') WHERE ?::text IS NOT NULL`, -1)
		add := func(t *testing.T, id string) {
			t.Helper()
			_, err := e.set.Add(ctx, block{Hash: id, Height: 1}, refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1))
			require.NoError(t, err)
		}
		cases := []struct {
			name    string
			id      string
			release refset.Command[string]
			prepare func(t *testing.T, id string) // before the hand-over
			says    string                        // the error's message, "" for none
		}{
			{name: "a row gone", id: "gone", release: releasePending,
				prepare: func(t *testing.T, id string) {
					_, err := e.db.Pool().ExecContext(ctx, `DELETE FROM pending WHERE block_id = $1`, id)
					require.NoError(t, err)
				},
				says: "refset: complete %s: release command 1 of 2 (DELETE FROM pending WHERE block_id = ?): affected 0 rows, want 1"},
			{name: "a row matched twice", id: "twice", release: refset.Exec[string](`DELETE FROM pending WHERE block_id IN (?, ? || '-twin')`, 1, "twice"),
				prepare: func(t *testing.T, id string) { add(t, "twice-twin") },
				says:    "refset: complete %s: release command 1 of 2 (DELETE FROM pending WHERE block_id IN (?, ? || '-twin')): affected 2 rows, want 1"},
			{name: "one row where none is wanted", id: "none-wanted", release: refset.Exec[string](`UPDATE pending SET block_id = block_id WHERE block_id = ?`, 0),
				says: "refset: complete %s: release command 1 of 2 (UPDATE pending SET block_id = block_id WHERE block_id = ?): affected 1 rows, want 0"},
			{name: "a conflict that inserts nothing", id: "conflict", release: refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?) ON CONFLICT DO NOTHING`, 1),
				says: "refset: complete %s: release command 1 of 2 (INSERT INTO pending (block_id) VALUES (?) ON CONFLICT DO NOTHING): affected 0 rows, want 1"},
			{name: "a rule's table, a count refused", id: "rule-refused", release: refset.Exec[string](`DELETE FROM archive WHERE block_id = ?`, 1),
				says: "refset: complete %s: release command 1 of 2 (DELETE FROM archive WHERE block_id = ?): affected 0 rows, want 1"},
			{name: "two rows wanted and matched", id: "two", release: refset.Exec[string](`DELETE FROM pending WHERE block_id IN (?, ? || '-twin')`, 2, "two"),
				prepare: func(t *testing.T, id string) { add(t, "two-twin") }},
			{name: "a rule's table, the count right", id: "rule-right", release: refset.Exec[string](`DELETE FROM archive WHERE block_id = ?`, 0)},
		}
		// The cases that commit come last: their acquire touches the sequence.
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := tc.id
				acq := e.acquired(t, id, []refset.Command[string]{tc.release}, []refset.Command[string]{touch})
				if tc.prepare != nil {
					tc.prepare(t, id)
				}
				pendingBefore := count(t, e.db, `SELECT count(*) FROM pending`)
				for range 2 { // the same again: on pgx, statements sent as they are the second time
					_, err := acq.Complete(ctx)
					if tc.says == "" {
						require.NoError(t, err)
						break
					}
					require.ErrorIs(t, err, refset.ErrNotFound)
					assert.Equal(t, fmt.Sprintf(tc.says, id), err.Error())
					assert.Equal(t, pendingBefore, count(t, e.db, `SELECT count(*) FROM pending`), "nothing was committed")
					assert.Zero(t, count(t, e.db, `SELECT count(*) FROM acquired WHERE is_called`), "no statement ran after the refused one")
				}
			})
		}
		assert.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM pending WHERE block_id = 'twice-twin'`), "kept")
		assert.Zero(t, count(t, e.db, `SELECT count(*) FROM pending WHERE block_id LIKE 'two%'`), "both released")
	})
}

// Hand-overs of one object by many tokens (each its own Upgrade) at once, from real
// goroutines: one moves it, and every other one's release, which waited for the
// first to commit, finds the row gone and is refused, by the server on pgx, in Go
// on lib/pq: ErrNotFound with the count. The acquire, which counts nothing and
// would append a row, never runs for the losers: the ledger has one row per object.
func TestHandOversOfOneObjectRace(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		const racers, objects = 8, 4
		opts.MaxConns = racers
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		_, err := e.db.Pool().ExecContext(ctx, `CREATE TABLE ledger (block_id text NOT NULL REFERENCES blocks (id))`)
		require.NoError(t, err)
		appendLedger := refset.Exec[string](`INSERT INTO ledger (block_id) VALUES (?)`, -1)
		for o := range objects {
			id := fmt.Sprint("o", o)
			_, err := e.set.Add(ctx, block{Hash: id, Height: 1}, refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1))
			require.NoError(t, err)
			var acqs []*refset.Acquired[string]
			for range racers {
				tok, err := e.set.Upgrade(ctx, id)
				require.NoError(t, err)
				rel, err := tok.Release(releasePending)
				require.NoError(t, err)
				acq, err := rel.Acquire(appendLedger)
				require.NoError(t, err)
				acqs = append(acqs, acq)
			}
			errs := make([]error, racers)
			var start, wg sync.WaitGroup
			start.Add(1)
			for r, acq := range acqs {
				wg.Go(func() {
					start.Wait()
					_, errs[r] = acq.Complete(ctx)
				})
			}
			start.Done()
			wg.Wait()
			won := 0
			for _, err := range errs {
				if err == nil {
					won++
					continue
				}
				require.ErrorIs(t, err, refset.ErrNotFound)
				assert.Equal(t, "refset: complete "+id+": release command 1 of 2 (DELETE FROM pending WHERE block_id = ?): affected 0 rows, want 1", err.Error())
			}
			assert.Equal(t, 1, won, "one hand-over moved %s", id)
			assert.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM ledger WHERE block_id = '`+id+`'`), "one acquire ran")
		}
		assert.Zero(t, count(t, e.db, `SELECT count(*) FROM pending`))
	})
}

// A hand-over whose context is cancelled while its release waits for a row lock
// (on pgx, while its one batch runs, COMMIT in it) is refused with the context's
// error, not a lost commit; nothing is committed, and the Acquired completes once the
// lock is gone.
func TestHandOverCancelledMidBatch(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		e := newHandOverEnv(t, openWith(t, pgtest.DSN(t), opts))
		ctx := t.Context()
		acq := e.acquired(t, "locked", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead})
		holder, err := e.db.Pool().BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Rollback() })
		_, err = holder.ExecContext(ctx, `SELECT 1 FROM pending WHERE block_id = 'locked' FOR UPDATE`)
		require.NoError(t, err)

		callCtx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		_, err = acq.Complete(callCtx)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, refset.ErrCommitUnknown)
		assert.Less(t, time.Since(start), cancelGrace, "the server's answer to the cancel, not the grace")
		require.NoError(t, holder.Rollback())
		pending, head := e.state(t, "locked")
		assert.True(t, pending, "nothing was committed")
		assert.False(t, head, "nothing was committed")

		_, err = acq.Complete(ctx)
		require.NoError(t, err)
		pending, head = e.state(t, "locked")
		assert.False(t, pending)
		assert.True(t, head)
	})
}

// A pgx unit whose connection is lost once its one batch was sent, COMMIT in it (or
// the Sync that commits an implicit transaction), may have committed, and says so
// (ErrCommitUnknown): the ticket it would be resolved with, sent before COMMIT, never
// reached it either. The server did commit. The claim is never the opposite,
// ErrUnavailable alone (nothing committed), which only a batch whose COMMIT was never
// sent may say. A hand-over, and an Add with no commands, one batch before the server
// checked counts too; with lost commits resolved or not.
func TestPgxUnitLostMidBatch(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) {
		for _, tc := range []struct {
			name string
			unit func(t *testing.T, e *handOverEnv, id string) (run func() error, committed func() bool)
		}{
			{"a hand-over", func(t *testing.T, e *handOverEnv, id string) (func() error, func() bool) {
				acq := e.acquired(t, id, []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead})
				return func() error { _, err := acq.Complete(t.Context()); return err },
					func() bool { pending, head := e.state(t, id); return !pending && head }
			}},
			{"an Add", func(t *testing.T, e *handOverEnv, id string) (func() error, func() bool) {
				return func() error { _, err := e.set.Add(t.Context(), block{Hash: id, Height: 1}); return err },
					func() bool { return count(t, e.db, `SELECT count(*) FROM blocks WHERE id = '`+id+`'`) == 1 }
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
				// One connection: the one the first unit prepared its statements on.
				opts := resolvingOrNot(resolves)
				opts.Driver, opts.MaxConns = DriverPgx, 1
				e := newHandOverEnv(t, openWith(t, dsn, opts))
				// The unit once first, so the connection has its statements prepared: a
				// loss while preparing them, before anything runs, is a loss before
				// COMMIT was sent.
				run, _ := tc.unit(t, e, "first")
				require.NoError(t, run())
				run, committed := tc.unit(t, e, "lost")
				proxy.DropCancels()        // the server runs what it got to its end
				proxy.CutAfterSent("lost") // the ID, in the statements' arguments
				err := run()
				require.ErrorIs(t, err, refset.ErrUnavailable)
				require.ErrorIs(t, err, refset.ErrCommitUnknown, "COMMIT was sent with the statements")
				require.Eventually(t, committed, 10*time.Second, 50*time.Millisecond, "the server committed what it got")
			})
		}
	})
}

// rowCountRefused reads the count from the server's refusal only (pgx's or lib/pq's): a cast's failure
// of another text, or another error, is not a count.
func TestRowCountRefused(t *testing.T) {
	cases := []struct {
		err  error
		n    int64
		read bool
	}{
		{&pgconn.PgError{Code: codeInvalidTextRepresentation, Message: `invalid input syntax for type bigint: "` + rowCountMark + `0"`}, 0, true},
		{&pgconn.PgError{Code: codeInvalidTextRepresentation, Message: `ungültige Eingabesyntax für Typ bigint: »` + rowCountMark + `12«`}, 12, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: codeInvalidTextRepresentation, Message: rowCountMark + "2"}), 2, true},
		{&pgconn.PgError{Code: codeInvalidTextRepresentation, Message: `invalid input syntax for type integer: "abc"`}, 0, false},
		{&pgconn.PgError{Code: codeUniqueViolation, Message: rowCountMark + "1"}, 0, false},
		{&pgconn.PgError{Code: codeInvalidTextRepresentation, Message: rowCountMark}, 0, false},
		{errors.New(rowCountMark + "1"), 0, false},
		{&pq.Error{Code: codeInvalidTextRepresentation, Message: `invalid input syntax for type bigint: "` + rowCountMark + `3"`}, 3, true},
		{&pq.Error{Code: codeUniqueViolation, Message: rowCountMark + "1"}, 0, false},
	}
	for _, tc := range cases {
		n, ok := rowCountRefused(tc.err)
		assert.Equal(t, tc.read, ok, "%v", tc.err)
		assert.Equal(t, tc.n, n, "%v", tc.err)
	}
}
