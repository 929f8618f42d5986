package tokens

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lifetime of a lock and of a transaction ID: how long a ttl makes a lock live,
// that a lock past its ttl cannot be spent, and that a transaction ID naming several
// payments never has one reported as another's, even once a connection was lost.

// dbClock is the database's clock now, as custody reads it for the locks.
func dbClock(t *testing.T, v *Vault) time.Time {
	t.Helper()
	dest, read := v.drv.Clock().Scan()
	require.NoError(t, v.db.Reader().QueryRowContext(t.Context(), `SELECT `+v.drv.Clock().Now).Scan(dest))
	return read()
}

// Every ttl is honoured or refused with ErrInvalid, on every database and on both
// paths of Select (Postgres's fast one, and the general one a Predicate takes). A
// positive ttl is kept in whole milliseconds rounded up, so that a lock lives at least
// ttl: one under a millisecond is a lock of one millisecond (it was 0 ms, a lock
// expired as it was written, whose token the next Select took at once), and the
// largest time.Duration, some 292 years, overflows neither database's arithmetic. A
// ttl of zero or less is refused and changes nothing. The books, once the lock is
// released, are as they were.
func TestLockTTLs(t *testing.T) {
	const largest = time.Duration(math.MaxInt64)
	cases := []struct {
		name    string
		ttl     time.Duration
		want    error // nil: honoured
		millis  int64 // honoured: the ttl as the databases keep it
		minLife time.Duration
	}{
		{name: "a nanosecond", ttl: time.Nanosecond, millis: 1, minLife: time.Millisecond},
		{name: "just under a millisecond", ttl: 999 * time.Microsecond, millis: 1, minLife: time.Millisecond},
		{name: "a millisecond and a half", ttl: 1500 * time.Microsecond, millis: 2, minLife: 2 * time.Millisecond},
		{name: "a minute", ttl: time.Minute, millis: 60_000, minLife: time.Minute},
		{name: "the largest Duration", ttl: largest, millis: math.MaxInt64/int64(time.Millisecond) + 1, minLife: largest},
		{name: "zero", ttl: 0, want: ErrInvalid},
		{name: "a negative nanosecond", ttl: -time.Nanosecond, want: ErrInvalid},
		{name: "the smallest Duration", ttl: time.Duration(math.MinInt64), want: ErrInvalid},
	}
	paths := []struct {
		name string
		f    Filter
	}{
		{"filter", Filter{Identifier: "GBP"}},
		{"predicate", Filter{Predicate: func(Token) bool { return true }}},
	}
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 5, 5)
		before := readBooks(t, v)
		for _, p := range paths {
			for _, c := range cases {
				name := p.name + "/" + c.name
				tx := newTx()
				start := dbClock(t, v)
				locked, expires, err := v.SelectUntil(ctx, tx, "alice", 5, p.f, c.ttl)
				if c.want != nil {
					require.ErrorIs(t, err, c.want, name)
					assert.ErrorContains(t, err, "positive ttl", name)
					require.Equal(t, before, readBooks(t, v), "%s changed the books", name)
					continue
				}
				require.NoError(t, err, name)
				require.Len(t, locked, 1, name)
				assert.Equal(t, c.millis, lockMillis(c.ttl), "%s: the ttl in milliseconds", name)
				// The lock was written after start, by the same clock (SQLite's in
				// whole milliseconds, both times rounded down alike).
				assert.GreaterOrEqual(t, expires.Sub(start), c.minLife, "%s: the lock expires %v after the call began, want at least its ttl", name, expires.Sub(start))
				if c.ttl >= time.Minute {
					// Long enough to see: the lock holds the token.
					total, unlocked, err := v.Balance(ctx, "alice", "GBP")
					require.NoError(t, err)
					assert.Equal(t, []int64{10, 5}, []int64{total, unlocked}, "%s: the lock does not hold its token", name)
					_, err = v.Select(ctx, newTx(), "alice", 10, Filter{}, time.Minute)
					require.ErrorIs(t, err, ErrLocked, "%s: another transaction took the locked token", name)
				}
				_, err = v.Release(ctx, tx)
				require.NoError(t, err, name)
				require.Equal(t, before, readBooks(t, v), "%s: the books once its lock was released", name)
			}
		}
		audit(t, v)
	})
}

// lockedSubtest runs fn in a parallel subtest name, on each of hostileOnes, on a
// vault where alice was issued 5, 5 and 5 and a new transaction, tx, has Selected 5
// of them with each of ttls.
func lockedSubtest(t *testing.T, name string, ttls []time.Duration, fn func(t *testing.T, v *Vault, tx string)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
			v := openVaults(t, b, 1, Config{})[0]
			issue(t, v, "alice", 5, 5, 5)
			tx := newTx()
			for _, ttl := range ttls {
				_, err := v.Select(t.Context(), tx, "alice", 5, Filter{}, ttl)
				require.NoError(t, err)
			}
			fn(t, v, tx)
		})
	})
}

// waitShortLocksExpired waits until the locks lockedSubtest took with expiringTTL (of
// ttls) have expired by the database's clock: all of alice's 15 is unlocked but the
// live locks' 5 each.
func waitShortLocksExpired(t *testing.T, v *Vault, ttls []time.Duration) {
	t.Helper()
	var live int64
	for _, ttl := range ttls {
		if ttl != expiringTTL {
			live += 5
		}
	}
	require.Eventually(t, func() bool {
		_, unlocked, err := v.Balance(t.Context(), "alice", "GBP")
		require.NoError(t, err)
		return unlocked == 15-live
	}, 10*expiringTTL, 20*time.Millisecond, "the locks never expired")
}

// A lock past its ttl is no lock, to Spend too, whether or not another transaction
// has taken its token over since: a Spend whose locks all expired fails with
// ErrNothingLocked, one with some expired with ErrUnbalanced (the live ones do not
// cover the outputs), on every database alike, and neither changes the books. The
// expired locks stay for others to take over; the live ones stay the transaction's to
// spend.
func TestSpendAfterLocksExpired(t *testing.T) {
	cases := []struct {
		name string
		// ttls: one Select of 5 by the transaction with each, of alice's 5, 5 and 5.
		ttls []time.Duration
		// spend: what the late Spend pays bob; want its error.
		spend int64
		want  error
		// then: what the transaction can still spend, its live locks.
		then int64
	}{
		{name: "every lock expired", ttls: []time.Duration{expiringTTL}, spend: 5, want: ErrNothingLocked},
		{name: "every lock of two expired", ttls: []time.Duration{expiringTTL, expiringTTL}, spend: 10, want: ErrNothingLocked},
		{name: "one lock of two expired", ttls: []time.Duration{expiringTTL, time.Minute}, spend: 10, want: ErrUnbalanced, then: 5},
	}
	for _, c := range cases {
		lockedSubtest(t, c.name, c.ttls, func(t *testing.T, v *Vault, tx string) {
			ctx := t.Context()
			waitShortLocksExpired(t, v, c.ttls)
			before := readBooks(t, v)

			_, _, err := v.Spend(ctx, tx, []Token{gbp("bob", c.spend)})
			require.ErrorIs(t, err, c.want, "a spend on expired locks")
			t.Logf("refused: %v", err)
			require.Equal(t, before, readBooks(t, v), "the refused spend changed the books")
			for _, holders := range locks(t, v, "alice") {
				assert.Equal(t, []string{lockHolder(tx)}, holders, "the refused spend dropped a lock")
			}

			if c.then > 0 {
				spent, _, err := v.Spend(ctx, tx, []Token{gbp("bob", c.then)})
				require.NoError(t, err, "the live locks stay the transaction's")
				assert.Len(t, spent, 1)
			}
			// The expired locks' tokens are anyone's: taken over at once, with the
			// rest of alice's.
			next, rest := newTx(), 15-c.then
			_, err = v.Select(ctx, next, "alice", rest, Filter{}, time.Minute)
			require.NoError(t, err, "the expired locks hide their tokens")
			_, _, err = v.Spend(ctx, next, []Token{gbp("bob", rest)})
			require.NoError(t, err)
			lostLocks(t, v, tx)
			audit(t, v)
		})
	}
}

// A lock past its ttl is no lock to a Spend made in a unit of work (refset.InTx)
// either, however long the unit ran before it: the database's clock that judges the
// locks is the one of the moment the Spend runs, not of the unit's start (PostgreSQL's
// now()), so a unit that began while the locks lived and spends after they expired is
// refused as a Spend on its own is, and the unit, rolled back, changes nothing.
func TestSpendInUnitAfterLocksExpired(t *testing.T) {
	cases := []struct {
		name  string
		ttls  []time.Duration // one Select of 5 by the transaction with each
		spend int64
		want  error
	}{
		{name: "every lock expired", ttls: []time.Duration{expiringTTL}, spend: 5, want: ErrNothingLocked},
		{name: "one lock of two expired", ttls: []time.Duration{expiringTTL, time.Minute}, spend: 10, want: ErrUnbalanced},
	}
	for _, c := range cases {
		lockedSubtest(t, c.name, c.ttls, func(t *testing.T, v *Vault, tx string) {
			ctx := t.Context()
			before := readBooks(t, v)
			err := refset.InTx(ctx, v.db, func(unit context.Context, utx refset.Tx) error {
				// The unit's transaction has begun while the locks live.
				var one int
				require.NoError(t, utx.QueryRowContext(unit, `SELECT 1`).Scan(&one))
				// Read outside the unit.
				waitShortLocksExpired(t, v, c.ttls)
				_, _, err := v.Spend(unit, tx, []Token{gbp("bob", c.spend)})
				return err
			})
			require.ErrorIs(t, err, c.want, "a spend in a unit on locks that expired while the unit ran")
			t.Logf("refused: %v", err)
			after := readBooks(t, v)
			before.Balances[1], after.Balances[1] = 0, 0 // alice's unlocked: the locks expired meanwhile
			require.Equal(t, before, after, "the refused spend changed the books")
			for _, holders := range locks(t, v, "alice") {
				assert.Equal(t, []string{lockHolder(tx)}, holders, "the refused spend dropped a lock")
			}
			audit(t, v)
		})
	}
}

// A lock past its ttl is no lock to a Select or a Pay made in a unit of work either,
// however long the unit ran before it: they take the expired locks' tokens at once, on
// both paths of Select, as they would on their own (on PostgreSQL they judged the
// locks by the unit's start, now(), and found them live for as long as the unit ran:
// ErrLocked, after waiting out LockWait).
func TestSelectInUnitAfterLocksExpired(t *testing.T) {
	cases := []struct {
		name string
		take func(unit context.Context, v *Vault, owner string) error
	}{
		{"select", func(unit context.Context, v *Vault, owner string) error {
			_, err := v.Select(unit, newTx(), owner, 10, Filter{Identifier: "GBP"}, time.Minute)
			return err
		}},
		{"select with predicate", func(unit context.Context, v *Vault, owner string) error {
			_, err := v.Select(unit, newTx(), owner, 10, Filter{Predicate: func(Token) bool { return true }}, time.Minute)
			return err
		}},
		{"pay", func(unit context.Context, v *Vault, owner string) error {
			_, _, err := v.Pay(unit, newTx(), owner, gbp("bob", 10))
			return err
		}},
	}
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{LockWait: 500 * time.Millisecond})[0]
		for i, c := range cases {
			owner := fmt.Sprintf("owner-%d", i)
			issue(t, v, owner, 5, 5)
			old := newTx()
			_, err := v.Select(ctx, old, owner, 10, Filter{}, expiringTTL)
			require.NoError(t, err)
			err = refset.InTx(ctx, v.db, func(unit context.Context, utx refset.Tx) error {
				var one int
				require.NoError(t, utx.QueryRowContext(unit, `SELECT 1`).Scan(&one)) // the unit has begun
				waitExpired(t, v, owner)
				return c.take(unit, v, owner)
			})
			require.NoError(t, err, "%s in a unit: the expired locks hid their tokens", c.name)
			lostLocks(t, v, old)
			audit(t, v)
		}
	})
}

// A transaction ID may name several payments: Pays of one ID, and a Select and Spend
// of it again, each report their own tokens, never another's, on every database.
func TestTransactionIDNamesSeveralPayments(t *testing.T) {
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 10, 10, 10, 10)
		tx := newTx()
		seen := map[string]bool{}
		own := func(what string, spent []Token, sum int64) {
			t.Helper()
			var got int64
			for _, s := range spent {
				assert.False(t, seen[s.TokenID], "%s reported token %s, another payment's", what, s.TokenID)
				seen[s.TokenID] = true
				got += s.Amount
			}
			assert.Equal(t, sum, got, "%s: what it spent", what)
		}
		for i := range 2 {
			spent, _, err := v.Pay(ctx, tx, "alice", gbp("bob", 10))
			require.NoError(t, err)
			own("pay", spent, 10)
			locked, err := v.Select(ctx, tx, "alice", 10, Filter{}, time.Minute)
			require.NoError(t, err, "select %d", i)
			spent, _, err = v.Spend(ctx, tx, []Token{gbp("bob", 10)})
			require.NoError(t, err)
			assert.Equal(t, locked, spent, "spend %d: what it spent", i)
			own("spend", spent, 10)
		}
		bob, _, err := v.Balance(ctx, "bob", "GBP")
		require.NoError(t, err)
		assert.EqualValues(t, 40, bob)
		audit(t, v)
	})
}

// A payment or a spend whose connection was lost once it was sent is settled by what
// it itself did, never by what an earlier payment of the same transaction ID did: the
// history records the call that spent each token. Settling used to read every token
// the transaction ID had spent, so a second payment that committed reported the first
// one's tokens too (and change made of them), and one refused because its output's ID
// was the first one's was reported paid, with the first one's tokens. On PostgreSQL
// (SQLite's calls are transactions of database/sql, which settle nothing), on every
// pool, Open's and the caller's, lib/pq and pgx.
func TestLostPaymentOfReusedTransactionID(t *testing.T) {
	cases := []struct {
		name string
		// twoStep: both payments are a Select and a Spend (the cut falls on the second
		// Spend); otherwise each is one Pay.
		twoStep bool
		// reuse: the second payment's output has the first one's ID (refused).
		reuse bool
		want  error // nil: paid
	}{
		{name: "second pay committed, its answer lost"},
		{name: "second pay refused on the first's output ID, its answer lost", reuse: true, want: refset.ErrUnavailable},
		{name: "second spend committed, its answer lost", twoStep: true},
		{name: "second spend refused on the first's output ID, its answer lost", twoStep: true, reuse: true, want: refset.ErrUnavailable},
	}
	for _, k := range poolKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx := t.Context()
					proxy, dsn := refsettest.PostgresProxy(t, refsettest.PostgresDSN(t))
					db := k.open(t, dsn, postgres.Options{ResolveCommitWait: 2 * time.Second})
					v := openVault(t, db, Config{})
					require.True(t, v.fast, "the fast paths run on Postgres")
					issue(t, v, "alice", 7, 7)
					tx := "tx-reused-" + NewID()[:8]
					first := gbp("bob", 4)
					first.TokenID = "first-" + tx
					var firstSpent []Token
					var err error
					if c.twoStep {
						locked, err := v.Select(ctx, tx, "alice", first.Amount, Filter{}, time.Minute)
						require.NoError(t, err)
						firstSpent, _, err = v.Spend(ctx, tx, WithChange(locked, "alice", first))
						require.NoError(t, err, "the first payment")
					} else {
						firstSpent, _, err = v.Pay(ctx, tx, "alice", first)
						require.NoError(t, err, "the first payment")
					}
					require.Len(t, firstSpent, 1)

					second := gbp("bob", 5)
					if c.reuse {
						second.TokenID = first.TokenID
					}
					// The cut falls on the second payment's statement that spends: the
					// Spend of a two-step payment, not its Select.
					var locked []Token
					if c.twoStep {
						locked, err = v.Select(ctx, tx, "alice", second.Amount, Filter{}, time.Minute)
						require.NoError(t, err)
					}
					pay := func() (spent, created []Token, err error) {
						proxy.CutReplyTo(tx)
						if c.twoStep {
							spent, created, err = v.Spend(ctx, tx, WithChange(locked, "alice", second))
						} else {
							spent, created, err = v.Pay(ctx, tx, "alice", second)
						}
						t.Logf("the second payment: %v", err)
						return spent, created, err
					}
					var spent, created []Token
					if c.want != nil {
						// The proxy cuts at the end of the statement's round trip, and
						// the server may answer the refusal before the proxy has read
						// that end: the caller then hears the refusal itself. Refused
						// either way, the payment is made again until its answer is
						// lost, which settling must tell.
						settled := false
						for try := 0; try < 5 && !settled; try++ {
							before := readBooks(t, v)
							_, _, err := pay()
							if settled = errors.Is(err, c.want); settled {
								require.NotErrorIs(t, err, refset.ErrCommitUnknown, "settled")
							} else {
								require.ErrorIs(t, err, ErrInvalid, "heard, the refusal")
								require.ErrorIs(t, err, refset.ErrDuplicate, "heard, the refusal")
								// Heard, its connection was cut all the same, at its round
								// trip's end, and waits idle in the pool: dropped, so that
								// the books are not read on it.
								db.Pool().SetMaxIdleConns(0)
								db.Pool().SetMaxIdleConns(db.Pool().Stats().MaxOpenConnections)
							}
							require.Equal(t, before, readBooks(t, v), "the refused payment changed the books")
						}
						require.True(t, settled, "the refusal's answer was never lost: settling is untested")
						if c.twoStep {
							_, err = v.Release(ctx, tx)
							require.NoError(t, err)
						}
					} else {
						spent, created, err = pay()
						require.NoError(t, err)
						if c.twoStep {
							assert.Equal(t, locked, spent, "what the spend spent, read back from the history")
						}
					}
					if c.want == nil {
						// Its own tokens: none of the first payment's, enough to cover
						// it, and the change made of them is the one in the books.
						var sum int64
						for _, s := range spent {
							assert.NotEqual(t, firstSpent[0].TokenID, s.TokenID, "the first payment's token reported as the second's")
							sum += s.Amount
						}
						require.GreaterOrEqual(t, sum, second.Amount, "what it spent does not cover it")
						var outs int64
						for _, o := range created {
							outs += o.Amount
						}
						assert.Equal(t, sum, outs, "what it created does not balance what it reported spent")
						total, _, err := v.Balance(ctx, "alice", "GBP")
						require.NoError(t, err)
						assert.EqualValues(t, 14-4-5, total, "alice's change")
					}
					audit(t, v)
				})
			}
		})
	}
}

// A replica of the release before migration 0010 calls custody_spend with nine
// arguments until it is upgraded: that call keeps working once another replica has
// migrated (a rolling upgrade), and spends as the new one does, live locks only.
func TestSpendOfThePreviousRelease(t *testing.T) {
	eachBackend(t, []backend{libpqDB, pgxDB}, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 5, 5)
		spendAsBefore := func(tx string, out Token) error {
			_, err := v.db.Driver().Pool().ExecContext(ctx, `SELECT * FROM custody_spend($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
				lockHolder(tx), pq.Array([]string{out.TokenID}), pq.Array([]string{out.Owner}), pq.Array([]string{out.Type}),
				pq.Array([]string{out.Identifier}), pq.Array([]string{out.Issuer}), pq.Array([]string{out.Notary}),
				pq.Array([]int64{out.Amount}), tx)
			return err
		}

		tx := newTx()
		_, err := v.Select(ctx, tx, "alice", 5, Filter{}, time.Minute)
		require.NoError(t, err)
		out := gbp("bob", 5)
		out.TokenID = "bob-1"
		require.NoError(t, spendAsBefore(tx, out), "the previous release's spend")
		lostLocks(t, v, tx)

		late := newTx()
		_, err = v.Select(ctx, late, "alice", 5, Filter{}, expiringTTL)
		require.NoError(t, err)
		time.Sleep(2 * expiringTTL)
		before := readBooks(t, v)
		out.TokenID = "bob-2"
		require.Error(t, spendAsBefore(late, out), "an expired lock is no lock to the previous release's spend either")
		require.Equal(t, before, readBooks(t, v))
		audit(t, v)
	})
}
