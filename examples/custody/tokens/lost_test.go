package tokens

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// poolKind is how a test reaches PostgreSQL: a pool Open makes, or one of the
// caller's that New takes (lib/pq's through postgres.NewConnector, pgx's as
// sql.Open makes it).
type poolKind struct {
	name    string
	driver  string
	callers bool
}

var poolKinds = []poolKind{
	{"open-libpq", postgres.DriverLibPQ, false},
	{"open-pgx", postgres.DriverPgx, false},
	{"callers-libpq", postgres.DriverLibPQ, true},
	{"callers-pgx", postgres.DriverPgx, true},
}

// open opens dsn as k says, with opts, closed when tb ends.
func (k poolKind) open(tb testing.TB, dsn string, opts postgres.Options) *postgres.DB {
	tb.Helper()
	ctx := tb.Context()
	opts.Driver = k.driver
	if !k.callers {
		db, err := postgres.Open(ctx, dsn, opts)
		require.NoError(tb, err)
		tb.Cleanup(func() { db.Close() })
		return db
	}
	var pool *sql.DB
	if k.driver == postgres.DriverLibPQ {
		connector, err := postgres.NewConnector(dsn)
		require.NoError(tb, err)
		pool = sql.OpenDB(connector)
	} else {
		var err error
		pool, err = sql.Open(k.driver, dsn)
		require.NoError(tb, err)
	}
	db, err := postgres.New(ctx, pool, opts)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		db.Close()
		pool.Close()
	})
	return db
}

// aliceVault opens dsn as k says, with opts, and a vault there in which alice holds
// 10 GBP.
func (k poolKind) aliceVault(t *testing.T, dsn string, opts postgres.Options) (*postgres.DB, *Vault) {
	t.Helper()
	db := k.open(t, dsn, opts)
	v, err := Open(t.Context(), db, Config{})
	require.NoError(t, err)
	issue(t, v, "alice", 10)
	return db, v
}

// TestLostPaymentIsSettled: a payment is one statement that commits on its own. When
// its connection is lost once it was sent, Pay waits until it can no longer commit
// and reads the history: nil, with what it spent and created, when the payment
// committed; ErrUnavailable, without ErrCommitUnknown, when it did not (nothing
// changed); ErrCommitUnknown only when no server answers within
// ResolveCommitWait. The statement never runs a second time: on every pool, Open's
// and the caller's, lib/pq and pgx, the books show one payment or none.
func TestLostPaymentIsSettled(t *testing.T) {
	cases := []struct {
		name string
		// arm loses the payment's connection; it may hold its history insert
		// (block) until the payment is settled.
		arm     func(p *refsettest.Proxy)
		block   bool
		refuse  bool
		want    []error // nil: paid
		settled bool    // the payment's outputs are in the books
	}{
		{name: "committed, its answer lost", arm: func(p *refsettest.Proxy) { p.CutReplyTo("tx-lost") }, settled: true},
		{name: "lost while it waited, ended", arm: func(p *refsettest.Proxy) { p.DropCancels(); p.CutAfterSent("tx-lost") },
			block: true, want: []error{refset.ErrUnavailable}},
		{name: "no server answers", arm: func(p *refsettest.Proxy) { p.CutReplyTo("tx-lost") }, refuse: true,
			settled: true, want: []error{refset.ErrUnavailable, refset.ErrCommitUnknown}},
	}
	t.Parallel()
	for _, k := range poolKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel() // each case has a schema and a proxy of its own
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					ctx := t.Context()
					direct := refsettest.PostgresDSN(t)
					proxy, dsn := refsettest.PostgresProxy(t, direct)
					db, v := k.aliceVault(t, dsn, postgres.Options{ResolveCommitWait: 2 * time.Second})
					require.True(t, v.fast, "the fast paths run on Postgres")
					output := gbp("bob", 4)
					output.TokenID = "lost-output"

					release := func() {}
					if tc.block {
						// Another session inserts the output's history row first and
						// holds it uncommitted: the payment waits on its key.
						blocker, err := sql.Open("postgres", direct)
						require.NoError(t, err)
						t.Cleanup(func() { blocker.Close() })
						hold, err := blocker.BeginTx(ctx, nil)
						require.NoError(t, err)
						_, err = hold.ExecContext(ctx, `INSERT INTO token_history (token_id, owner, identifier, amount, created_by) VALUES ($1, 'x', 'x', 1, 'blocker')`, output.TokenID)
						require.NoError(t, err)
						release = func() {
							// A payment still waiting would go on now, and commit
							// after Pay said it did not: give it the time to.
							require.NoError(t, hold.Rollback())
							time.Sleep(300 * time.Millisecond)
						}
					}
					tc.arm(proxy)
					if tc.refuse {
						// The payment on the pool's one connection, which is lost:
						// none left to ask on, and none to be had.
						db.Pool().SetMaxOpenConns(1)
						proxy.Refuse(true)
					}
					spent, created, err := v.Pay(ctx, "tx-lost", "alice", output)
					proxy.Refuse(false)
					release()
					t.Logf("Pay: %v", err)
					if tc.want == nil {
						require.NoError(t, err)
						require.Len(t, spent, 1)
						assert.Equal(t, Token{TokenID: spent[0].TokenID, Owner: "alice", Type: "fiat", Identifier: "GBP",
							Issuer: "bank", Notary: "notary", Amount: 10}, spent[0], "what it spent, read back from the history")
						require.Len(t, created, 2, "the output and the change")
						assert.EqualValues(t, 6, created[1].Amount)
					} else {
						for _, w := range tc.want {
							require.ErrorIs(t, err, w)
						}
						if len(tc.want) == 1 {
							require.NotErrorIs(t, err, refset.ErrCommitUnknown, "settled")
						}
					}
					want := int64(0)
					if tc.settled {
						want = 4
					}
					bob, _, err := v.Balance(ctx, "bob", "GBP")
					require.NoError(t, err)
					assert.Equal(t, want, bob, "what bob holds")
					var runs int
					require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT count(DISTINCT spent_by) FROM token_history WHERE spent_by = 'tx-lost'`).Scan(&runs))
					assert.Equal(t, int(want/4), runs, "the payment ran once at most")
					assert.EqualValues(t, 10, audit(t, v).Remaining, "value is conserved")
				})
			}
		})
	}
}

// TestPayOnAHungServer: on a server that stops answering with its connections open (a
// hung host, a proxy whose backend froze), Pay gives up soon after its context ends,
// on every pool, Open's and the caller's, lib/pq and pgx, with the context's error; it
// does not wait for the server. Whether the payment was made is then unknown to Pay
// (the freezer passes on what it held as it thaws, and a driver that had sent the
// whole statement would have it run): the books balance either way, it is made once
// at most, bob holds it if the history says so, and the pool pays again on a
// connection of its own.
func TestPayOnAHungServer(t *testing.T) {
	const deadline = time.Second
	for _, k := range poolKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			freezer, dsn := refsettest.PostgresFreezer(t, refsettest.PostgresDSN(t))
			db, v := k.aliceVault(t, dsn, postgres.Options{})

			freezer.Freeze()
			payCtx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				_, _, err := v.Pay(payCtx, "tx-hung", "alice", gbp("bob", 4))
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(deadline + 10*time.Second):
				freezer.Close() // frees the call, so that the test can end
				t.Fatalf("Pay still waits for the hung server %s after it began, its deadline %s", deadline+10*time.Second, deadline)
			}
			t.Logf("Pay after %s: %v", time.Since(start).Round(time.Millisecond), err)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			caught, _ := freezer.Caught()
			require.Positive(t, caught, "the payment reached the hung server")

			freezer.Thaw()
			_, _, err = v.Pay(ctx, newTx(), "alice", gbp("carol", 1))
			require.NoError(t, err, "a payment once the server answers again")
			time.Sleep(300 * time.Millisecond) // what the freezer held reaches the server
			var runs int
			require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT count(*) FROM token_history WHERE created_by = 'tx-hung' AND owner = 'bob'`).Scan(&runs))
			t.Logf("payments made: %d", runs)
			assert.LessOrEqual(t, runs, 1, "the payment was made once at most")
			bob, _, err := v.Balance(ctx, "bob", "GBP")
			require.NoError(t, err)
			assert.EqualValues(t, 4*runs, bob, "bob holds what the history says was paid him")
			assert.EqualValues(t, 10, audit(t, v).Remaining, "value is conserved")
		})
	}
}

// TestFencedPoolDialsAgain: a connection to a server that takes no writes
// (default_transaction_read_only, as an operator fences a primary, here for the
// pool's one session) is dropped, on every pool, so that payments go on on a new
// connection: at once on pgx, which the server told of the fence; on lib/pq after
// the one payment the server refused, with ErrUnavailable, having changed nothing.
func TestFencedPoolDialsAgain(t *testing.T) {
	for _, k := range poolKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			db, v := k.aliceVault(t, refsettest.PostgresDSN(t), postgres.Options{MaxConns: 1})
			db.Pool().SetMaxOpenConns(1)
			var fenced int
			require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&fenced))
			_, err := db.Pool().ExecContext(ctx, `SET default_transaction_read_only = on`)
			require.NoError(t, err)

			_, _, err = v.Pay(ctx, newTx(), "alice", gbp("bob", 4))
			if k.driver == postgres.DriverLibPQ {
				require.ErrorIs(t, err, refset.ErrUnavailable, "refused by the fenced session")
				require.NotErrorIs(t, err, refset.ErrCommitUnknown)
				_, _, err = v.Pay(ctx, newTx(), "alice", gbp("bob", 4))
			}
			require.NoError(t, err, "paid on a new connection")
			var now int
			require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&now))
			assert.NotEqual(t, fenced, now, "the fenced connection was dropped")
			bob, _, err := v.Balance(ctx, "bob", "GBP")
			require.NoError(t, err)
			assert.EqualValues(t, 4, bob, "one payment")
			audit(t, v)
		})
	}
}

// TestLostSelectAndSpendAreSettled: Select and Spend, one statement each, settle a
// connection lost once their statement was sent as Pay does: both committed here
// (their answers lost), and each returns what it would have, read back from the
// locks and the history.
func TestLostSelectAndSpendAreSettled(t *testing.T) {
	for _, k := range poolKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			proxy, dsn := refsettest.PostgresProxy(t, refsettest.PostgresDSN(t))
			_, v := k.aliceVault(t, dsn, postgres.Options{})

			proxy.CutReplyTo("tx-settled")
			locked, err := v.Select(ctx, "tx-settled", "alice", 7, Filter{Identifier: "GBP"}, time.Minute)
			require.NoError(t, err)
			require.Len(t, locked, 1)
			assert.Equal(t, gbp("alice", 10), Token{Owner: locked[0].Owner, Type: locked[0].Type, Identifier: locked[0].Identifier,
				Issuer: locked[0].Issuer, Notary: locked[0].Notary, Amount: locked[0].Amount})

			proxy.CutReplyTo("tx-settled")
			spent, created, err := v.Spend(ctx, "tx-settled", []Token{gbp("bob", 7), gbp("alice", 3)})
			require.NoError(t, err)
			require.Len(t, spent, 1)
			assert.Equal(t, locked[0], spent[0], "what it spent, read back from the history")
			require.Len(t, created, 2)

			bob, _, err := v.Balance(ctx, "bob", "GBP")
			require.NoError(t, err)
			assert.EqualValues(t, 7, bob)
			assert.EqualValues(t, 10, audit(t, v).Remaining)
		})
	}
}

// TestLostSpendOfNoOutputs: a Spend with no outputs cannot commit (the locked tokens
// are never balanced by nothing), and when its connection is lost once its statement
// was sent it settles so: ErrUnavailable, nothing changed, the locks still the
// transaction's. It panicked reading the first of no outputs.
func TestLostSpendOfNoOutputs(t *testing.T) {
	for _, k := range poolKinds[:2] {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			proxy, dsn := refsettest.PostgresProxy(t, refsettest.PostgresDSN(t))
			_, v := k.aliceVault(t, dsn, postgres.Options{})
			tx := newTx()
			_, err := v.Select(ctx, tx, "alice", 7, Filter{Identifier: "GBP"}, time.Minute)
			require.NoError(t, err)
			before := readBooks(t, v)

			proxy.CutReplyTo(tx)
			var spent, created []Token
			require.NotPanics(t, func() { spent, created, err = v.Spend(ctx, tx, nil) })
			require.ErrorIs(t, err, refset.ErrUnavailable)
			assert.Empty(t, spent)
			assert.Empty(t, created)
			require.Equal(t, before, readBooks(t, v), "the lost spend of no outputs changed the books")
			n, err := v.Release(ctx, tx)
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "the transaction's lock is gone")
			audit(t, v)
		})
	}
}
