package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// payload is an object with a bytea column, whose insert casts its parameter
// ($n::bytea) so that lib/pq's simple query can write the bytes in.
type payload struct {
	Key  string `db:"id"`
	Body []byte `db:"body"`
}

func (p payload) ID() string { return p.Key }

// On lib/pq, a hand-over of Exec commands and an Add (with such commands or none, of
// an object with a bytea column too) take two round trips, counted on the wire: one
// simple query with BEGIN, the ticket and the statements, then COMMIT. So does a unit
// with resolution off (BEGIN's row is then a mark). A unit whose statements do not all
// go in a simple query runs as before, a round trip per statement (prepared) and for
// BEGIN and COMMIT; so does one Postgres refuses to nest (a table's rules), found
// out once, unless it is the last and unchecked: that one is sent as it is. A hand-over refused for its count takes its simple query and the
// ROLLBACK after it.
func TestLibPQUnitsTakeTwoRoundTrips(t *testing.T) {
	late := refset.Exec[string](`UPDATE blocks SET height = height WHERE id = ? AND now() < ?`, 1, time.Now().Add(time.Hour))
	selecting := refset.Exec[string](`SELECT 1 FROM blocks WHERE id = ?`, -1)
	archived := refset.Exec[string](`DELETE FROM archive WHERE block_id = ?`, -1)
	archivedNone := refset.Exec[string](`DELETE FROM archive WHERE block_id = ?`, 0)
	cases := []struct {
		name             string
		resolveOff       bool
		release, acquire []refset.Command[string] // a hand-over
		add              []refset.Command[string] // or an Add of a block with these
		payload          bool                     // or an Add of a payload
		moved            bool                     // the pending row is gone before the counted Complete
		roundTrips       int64
	}{
		{name: "a hand-over", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{acquireHead}, roundTrips: 2},
		{name: "a hand-over, resolution off", resolveOff: true, release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{acquireHead}, roundTrips: 2},
		{name: "an Add with a checked command", add: []refset.Command[string]{refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1)}, roundTrips: 2},
		{name: "an Add of bytes", payload: true, roundTrips: 2},
		{name: "a release of a row gone", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{acquireHead}, moved: true, roundTrips: 2},
		{name: "a time argument", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{late}, roundTrips: 4},
		{name: "a SELECT command", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{selecting}, roundTrips: 4},
		{name: "a table with rules, last", release: []refset.Command[string]{releasePending}, acquire: []refset.Command[string]{archived}, roundTrips: 2},
		{name: "a table with rules, counted", release: []refset.Command[string]{archivedNone}, acquire: []refset.Command[string]{acquireHead}, roundTrips: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			proxy, dsn := pgtest.NewProxy(t, pgtest.DSN(t))
			wait := time.Duration(0)
			if tc.resolveOff {
				wait = -1
			}
			db := openWith(t, dsn, Options{MaxConns: 1, ResolveCommitWait: wait})
			e := newHandOverEnv(t, db)
			for _, q := range []string{
				`CREATE TABLE payloads (id text PRIMARY KEY, body bytea NOT NULL)`,
				`CREATE TABLE archive (block_id text NOT NULL)`,
				`CREATE RULE keep AS ON DELETE TO archive DO INSTEAD NOTHING`,
			} {
				_, err := db.Pool().ExecContext(ctx, q)
				require.NoError(t, err, q)
			}
			payloads, err := store.NewStore[payload, string](ctx, db, store.Config{Table: "payloads"})
			require.NoError(t, err)
			bodies := refset.New(payloads)
			// The first runs find out what cannot be nested and prepare what runs
			// prepared (on the third run of a statement one by one); the last is
			// counted.
			for run := range 5 {
				id := fmt.Sprintf("b-%d", run)
				unit := func() error {
					_, err := bodies.Add(ctx, payload{Key: id, Body: []byte{0, 1, 2, 0xff, '\'', '\\'}})
					return err
				}
				if !tc.payload {
					unit = e.unitOf(t, id, tc.release, tc.acquire, tc.add, tc.moved && run == 4)
				}
				before := proxy.ReadyForQuery()
				err := unit()
				after := proxy.ReadyForQuery()
				if tc.moved && run == 4 {
					require.ErrorIs(t, err, refset.ErrNotFound)
					assert.Equal(t, "refset: complete "+id+": release command 1 of 2 (DELETE FROM pending WHERE block_id = ?): affected 0 rows, want 1", err.Error())
				} else {
					require.NoError(t, err)
				}
				if run == 4 {
					assert.Equal(t, tc.roundTrips, after-before, "round trips")
				}
			}
			var body []byte
			if tc.payload {
				require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT body FROM payloads WHERE id = 'b-4'`).Scan(&body))
				assert.Equal(t, []byte{0, 1, 2, 0xff, '\'', '\\'}, body, "the bytes, as they were")
			}
		})
	}
}

// A lib/pq unit whose simple query failed, or was given up on, rolls back and leaves
// its connection fit for the next unit: on a pool of one connection, the units that
// follow a refused one, a cancelled one and a deadline run and commit.
func TestLibPQPipelineLeavesItsConnectionClean(t *testing.T) {
	ctx := t.Context()
	db := openWith(t, pgtest.DSN(t), Options{MaxConns: 1})
	e := newHandOverEnv(t, db)
	dup := refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1)
	acq := e.acquired(t, "dup", []refset.Command[string]{releasePending}, []refset.Command[string]{dup, dup})
	_, err := acq.Complete(ctx)
	require.Error(t, err, "the second insert of the same head")
	pending, head := e.state(t, "dup")
	assert.True(t, pending, "nothing was committed")
	assert.False(t, head, "nothing was committed")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.set.Add(cancelled, block{Hash: "cancelled", Height: 1})
	require.ErrorIs(t, err, context.Canceled)

	for i := range 3 {
		_, err := e.acquired(t, fmt.Sprint("next-", i), []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead}).Complete(ctx)
		require.NoError(t, err)
	}
	var inTx bool
	require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT now() <> statement_timestamp()`).Scan(&inTx))
	assert.False(t, inTx, "the pool's connection is not left inside a transaction")
}

// Hand-overs and Adds on lib/pq from many goroutines at once, on fewer connections:
// every unit commits once or is refused with its count, and the rows say so, with
// objects whose IDs carry quotes.
func TestLibPQPipelineRace(t *testing.T) {
	const goroutines, rounds = 8, 20
	ctx := t.Context()
	db := openWith(t, pgtest.DSN(t), Options{MaxConns: 3})
	e := newHandOverEnv(t, db)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("it's %d-%d", g, r)
				tok, err := e.set.Add(ctx, block{Hash: id, Height: int64(r)}, refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1))
				if err != nil {
					errs <- err
					return
				}
				rel, err := tok.Release(releasePending)
				if err == nil {
					var acq *refset.Acquired[string]
					if acq, err = rel.Acquire(acquireHead); err == nil {
						_, err = acq.Complete(ctx)
					}
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, goroutines*rounds, count(t, db, `SELECT count(*) FROM heads`))
	assert.Zero(t, count(t, db, `SELECT count(*) FROM pending`))
	assert.Equal(t, goroutines*rounds, count(t, db, `SELECT count(*) FROM heads h JOIN blocks b ON b.id = h.block_id`))
}

// The statements of lib/pq's simple queries are prepared once per connection (SQL's
// PREPARE) and EXECUTEd after: not with Options.Unprepared (behind a pooler, a
// session is not the client's) nor with a negative StatementCache. A unit whose
// prepared statements the server lost (DEALLOCATE ALL on the connection) prepares them
// again and commits; one whose statement does not prepare (a table not there yet)
// fails as it always did, and works once the table is there; a column added since
// the statement was prepared does not trouble it.
func TestLibPQPreparedStatements(t *testing.T) {
	cases := []struct {
		name     string
		opts     Options
		prepared bool
	}{
		{"default", Options{}, true},
		{"Unprepared", Options{Unprepared: true}, false},
		{"StatementCache -1", Options{Options: store.Options{StatementCache: -1}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			tc.opts.MaxConns = 1
			db := openWith(t, pgtest.DSN(t), tc.opts)
			e := newHandOverEnv(t, db)
			handOver := func(id string, acquire ...refset.Command[string]) error {
				_, err := e.acquired(t, id, []refset.Command[string]{releasePending}, acquire).Complete(ctx)
				return err
			}
			require.NoError(t, handOver("a", acquireHead))
			units := preparedLike(t, db, `PREPARE refset_u%`)
			if !tc.prepared {
				assert.Zero(t, units)
				return
			}
			assert.Equal(t, 5, units, "the ticket, the Add's insert and command, the release, the acquire")

			_, err := db.Pool().ExecContext(ctx, `DEALLOCATE ALL`)
			require.NoError(t, err)
			require.NoError(t, handOver("b", acquireHead), "prepared again")
			pending, head := e.state(t, "b")
			assert.False(t, pending)
			assert.True(t, head)

			late := refset.Exec[string](`INSERT INTO late (block_id) VALUES (?)`, 1)
			err = handOver("c", late)
			require.ErrorIs(t, err, refset.ErrSchema, "the table is not there")
			pending, _ = e.state(t, "c")
			assert.True(t, pending, "nothing was committed")
			_, err = db.Pool().ExecContext(ctx, `CREATE TABLE late (block_id text PRIMARY KEY)`)
			require.NoError(t, err)
			_, err = e.acquired(t, "d", []refset.Command[string]{releasePending}, []refset.Command[string]{late}).Complete(ctx)
			require.NoError(t, err)
			_, err = db.Pool().ExecContext(ctx, `ALTER TABLE late ADD COLUMN note text`)
			require.NoError(t, err)
			_, err = e.acquired(t, "e", []refset.Command[string]{releasePending}, []refset.Command[string]{late}).Complete(ctx)
			require.NoError(t, err)
			assert.Equal(t, 2, count(t, db, `SELECT count(*) FROM late`))
		})
	}
}
