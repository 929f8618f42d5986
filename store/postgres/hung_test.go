package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hungDeadline is the deadline of the calls a hung server is given.
const hungDeadline = time.Second

// hungEnv is a database reached through a pgtest.Freezer, with a set of blocks holding
// "a", and the hand-over tables.
type hungEnv struct {
	*handOverEnv
	f    *pgtest.Freezer
	acq  *refset.Acquired[string] // a hand-over ready to complete, once made
	stmt *sql.Stmt                // a statement prepared on the pool, once made
}

func newHungEnv(t *testing.T, driver string) *hungEnv {
	t.Helper()
	f, dsn := pgtest.NewFreezer(t, pgtest.DSN(t))
	e := &hungEnv{handOverEnv: newHandOverEnv(t, openWith(t, dsn, Options{Driver: driver, MaxConns: 4})), f: f}
	_, err := e.set.Add(t.Context(), block{Hash: "a", Height: 1})
	require.NoError(t, err)
	return e
}

// insertX is a unit of work that stores block "x".
func insertX(ctx context.Context, tx refset.Tx) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO blocks (id, height) VALUES ('x', 2)`)
	return err
}

// works checks that the database serves a read and a unit of work, within seconds.
func (e *hungEnv) works(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := e.set.Upgrade(ctx, "a")
	require.NoError(t, err, "a read after the server answers again")
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO blocks (id, height) VALUES ('after', 3)`)
		return err
	}), "a unit of work after the server answers again")
}

// TestHungServerEndsWithContext: on a server that stops answering on connections it
// accepted (a hung host, a proxy whose backend froze), a call on either driver waits
// only about as long as its context: a read (a set's, a query or a prepared
// statement on the pool), a unit of work's BEGIN and a statement inside one return
// the context's error within cutGrace of its end (lib/pq's own cancel request goes
// to the same hung server, and is never answered), and a COMMIT, a unit's or a
// hand-over's, is a lost one, whose outcome refset asks on another connection (here,
// through the same hung server: ErrCommitUnknown, with ErrUnavailable). Every
// connection that waited on the hung server is then closed by its client, so none
// is lent again, and once the server answers again the database works; a unit cut
// short before its COMMIT committed nothing.
func TestHungServerEndsWithContext(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		cases := []struct {
			name      string
			setup     func(t *testing.T, e *hungEnv)
			atCommit  bool // freeze as COMMIT arrives, not before the call
			inCall    bool // the call freezes the server itself
			libpqOnly bool
			cancel    bool // end the context with a cancel, not its deadline
			call      func(ctx context.Context, e *hungEnv) error
			want      []error
			within    time.Duration // from the context's end, beyond cutGrace
		}{
			{name: "a set's read", call: func(ctx context.Context, e *hungEnv) error {
				_, err := e.set.Upgrade(ctx, "a")
				return err
			}},
			{name: "a set's read, cancelled", cancel: true, call: func(ctx context.Context, e *hungEnv) error {
				_, err := e.set.Upgrade(ctx, "a")
				return err
			}},
			{name: "a query on the pool", call: func(ctx context.Context, e *hungEnv) error {
				var n int
				return e.db.Pool().QueryRowContext(ctx, `SELECT count(*) FROM blocks`).Scan(&n)
			}},
			// lib/pq waits for the end of the cancel request it sent for a prepared
			// statement before it returns: it too is cut.
			{name: "a prepared statement", setup: func(t *testing.T, e *hungEnv) {
				var err error
				e.stmt, err = e.db.Pool().PrepareContext(t.Context(), `SELECT count(*) FROM blocks WHERE height > $1`)
				require.NoError(t, err)
				t.Cleanup(func() { e.stmt.Close() })
			}, call: func(ctx context.Context, e *hungEnv) error {
				var n int
				return e.stmt.QueryRowContext(ctx, 0).Scan(&n)
			}},
			{name: "BEGIN", call: func(ctx context.Context, e *hungEnv) error {
				return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
					return errors.New("the unit of work ran: BEGIN was answered")
				})
			}},
			{name: "a statement in a unit of work", inCall: true, call: func(ctx context.Context, e *hungEnv) error {
				return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
					e.f.Freeze()
					return insertX(ctx, tx)
				})
			}},
			// The outcome of a lost COMMIT is asked, through the hung server, for
			// resolveGrace past the context's end, and that call too is cut.
			{name: "COMMIT", atCommit: true, call: func(ctx context.Context, e *hungEnv) error {
				return refset.InTx(ctx, e.db, insertX)
			}, want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}, within: resolveGrace + cutGrace},
			// A hand-over of Exec commands, sent in a simple query, and then COMMIT
			// (libpqPipeline). pgx pipelines it in one batch that commits at its
			// Sync, with no COMMIT: TestGivenUpCommitIsResolved is its case.
			{name: "a hand-over's COMMIT", atCommit: true, libpqOnly: true, setup: func(t *testing.T, e *hungEnv) {
				e.acq = e.acquired(t, "b", []refset.Command[string]{releasePending}, []refset.Command[string]{acquireHead})
			}, call: func(ctx context.Context, e *hungEnv) error {
				_, err := e.acq.Complete(ctx)
				return err
			}, want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}, within: cancelGrace + resolveGrace + cutGrace},
		}
		for _, tc := range cases {
			if tc.libpqOnly && driver != DriverLibPQ {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newHungEnv(t, driver)
				if tc.setup != nil {
					tc.setup(t, e)
				}
				want := tc.want
				ctx, cancel := context.WithTimeout(t.Context(), hungDeadline)
				if tc.cancel {
					ctx, cancel = context.WithCancel(t.Context())
					time.AfterFunc(hungDeadline, cancel)
				}
				defer cancel()
				if want == nil {
					want = []error{context.DeadlineExceeded}
					if tc.cancel {
						want = []error{context.Canceled}
					}
				}
				if tc.atCommit {
					e.f.FreezeAtCommit()
				} else if !tc.inCall {
					e.f.Freeze()
				}
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- tc.call(ctx, e) }()
				bound := hungDeadline + cutGrace + tc.within + 10*time.Second
				var err error
				select {
				case err = <-done:
				case <-time.After(bound):
					e.f.Close() // the call then hears the server's end, and the database closes
					t.Fatalf("the call still waits for the hung server %s after it began (its context ended after %s)", bound, hungDeadline)
				}
				took := time.Since(start)
				t.Logf("after %s: %v", took.Round(time.Millisecond), err)
				require.True(t, e.f.Frozen(), "the server was hung")
				for _, w := range want {
					require.ErrorIs(t, err, w)
				}

				// Every connection that waited on the hung server (the call's, lib/pq's
				// cancel request, a new connection's startup) was closed by its client:
				// lib/pq's at once, pgx's once its own cancel request, sent as it closes
				// one, had 15 seconds.
				require.Eventually(t, func() bool {
					caught, closed := e.f.Caught()
					return caught > 0 && caught == closed
				}, 30*time.Second, 10*time.Millisecond, "the connections that waited on the hung server are closed")

				e.f.Thaw()
				e.works(t)
				if !tc.atCommit {
					assert.Zero(t, count(t, e.db, `SELECT count(*) FROM blocks WHERE id = 'x'`), "nothing committed")
				}
			})
		}
	})
}

// TestHungReplicaEndsWithContext: a read that goes to the replica first, whose
// server stops answering, waits only about as long as its context, on either
// driver: the replica's connection is cut as the primary's would be, and the read,
// left to the primary with its context ended, returns the context's error.
func TestHungReplicaEndsWithContext(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		t.Parallel()
		primary, standby, _ := pgtest.NewWithStandby(t)
		f, replica := pgtest.NewFreezer(t, standby)
		db := openWith(t, primary, Options{Driver: driver, ReplicaDSN: replica, MaxConns: 4})
		_, err := db.Pool().ExecContext(t.Context(), `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
		require.NoError(t, err)
		setStore, err := store.NewStore[block, string](t.Context(), db, store.Config{Table: "blocks"})
		require.NoError(t, err)
		set := refset.New(setStore)

		f.Freeze()
		ctx, cancel := context.WithTimeout(t.Context(), hungDeadline)
		defer cancel()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := set.Upgrade(ctx, "a")
			done <- err
		}()
		bound := hungDeadline + cutGrace + 10*time.Second
		select {
		case err = <-done:
		case <-time.After(bound):
			f.Close()
			t.Fatalf("the read still waits for the hung replica %s after it began", bound)
		}
		t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		f.Thaw()
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var n int
		require.NoError(t, db.Replica().QueryRowContext(ctx, `SELECT 1`).Scan(&n), "the replica answers again")
	})
}

// TestCancelledOnALiveServer: on a server that answers, a statement whose context
// ends is ended by the server (lib/pq's cancel request: PostgreSQL's 57014), well
// within cutGrace, and its connection, sound, is used again: the next statement runs
// on the same server session.
func TestCancelledOnALiveServer(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{Driver: DriverLibPQ, MaxConns: 1})
	ctx := t.Context()
	pid := func() int {
		t.Helper()
		var pid int
		require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	sleep, err := db.Pool().PrepareContext(ctx, `SELECT pg_sleep($1)`)
	require.NoError(t, err)
	defer sleep.Close()

	for _, prepared := range []bool{true, false} {
		before := pid()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		if prepared {
			_, err = sleep.ExecContext(short, 30)
		} else {
			_, err = db.Pool().ExecContext(short, `SELECT pg_sleep(30)`)
		}
		took := time.Since(start)
		cancel()
		t.Logf("prepared %v, after %s: %v", prepared, took.Round(time.Millisecond), err)
		require.Error(t, err)
		assert.Equal(t, codeQueryCanceled, sqlState(err), "the server cancelled the statement")
		assert.Less(t, took, cutGrace, "ended by the cancel request, not by cutting the connection")
		if prepared {
			// lib/pq keeps a connection whose prepared statement was cancelled (it
			// closes one whose unprepared statement was).
			assert.Equal(t, before, pid(), "the same connection serves the next statement")
		} else {
			pid()
		}
	}
}

// TestGuardedRowsKeepLibPQs: the rows a guardedConn returns have the optional
// interfaces of lib/pq's own, which database/sql asks for (column types, further
// result sets), and no other.
func TestGuardedRowsKeepLibPQs(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{Driver: DriverLibPQ})
	conn, err := db.Pool().Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	optional := []reflect.Type{
		reflect.TypeFor[driver.RowsNextResultSet](),
		reflect.TypeFor[driver.RowsColumnTypeScanType](),
		reflect.TypeFor[driver.RowsColumnTypeDatabaseTypeName](),
		reflect.TypeFor[driver.RowsColumnTypeLength](),
		reflect.TypeFor[driver.RowsColumnTypeNullable](),
		reflect.TypeFor[driver.RowsColumnTypePrecisionScale](),
	}
	require.NoError(t, conn.Raw(func(dc any) error {
		c := dc.(*guardedConn)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		own, err := c.conn.QueryContext(ctx, `SELECT 1`, nil)
		require.NoError(t, err)
		require.NoError(t, own.Close())
		guarded, err := c.QueryContext(ctx, `SELECT 1`, nil)
		require.NoError(t, err)
		defer guarded.Close()
		require.IsType(t, &guardedRows{}, guarded, "the rows are watched")
		for _, it := range optional {
			assert.Equal(t, reflect.TypeOf(own).Implements(it), reflect.TypeOf(guarded).Implements(it), "%v", it)
		}
		return nil
	}))
}
