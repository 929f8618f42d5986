package tokens

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expiringTTL is the time-to-live of the locks these tests let expire: long enough
// that a lock taken on a loaded machine under -race does not expire before the test
// has seen it, short enough to wait for.
const expiringTTL = 1500 * time.Millisecond

// waitExpired waits until, by the database's clock, none of owner's GBP is locked.
func waitExpired(t *testing.T, v *Vault, owner string) {
	t.Helper()
	require.Eventually(t, func() bool {
		total, unlocked, err := v.Balance(t.Context(), owner, "GBP")
		require.NoError(t, err)
		return total > 0 && unlocked == total
	}, 10*expiringTTL, 20*time.Millisecond, "%s's locks never expired", owner)
}

// locks is every token's non-owner holders, as the database has them.
func locks(t *testing.T, v *Vault, owner string) map[string][]string {
	t.Helper()
	rows, err := v.db.Reader().QueryContext(t.Context(), v.sql(`SELECT t.id, l.holder FROM tokens t
		JOIN token_locks l ON l.token_id = t.id WHERE t.owner = ? ORDER BY t.id, l.holder`), owner)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, holder string
		require.NoError(t, rows.Scan(&id, &holder))
		out[id] = append(out[id], holder)
	}
	require.NoError(t, rows.Err())
	return out
}

// lostLocks checks that txID, whose locks expired and were taken, can neither release
// nor spend anything.
func lostLocks(t *testing.T, v *Vault, txID string) {
	t.Helper()
	n, err := v.Release(t.Context(), txID)
	require.NoError(t, err)
	assert.Zero(t, n, "%s released a lock it lost", txID)
	_, _, err = v.Spend(t.Context(), txID, []Token{gbp("jack", 1)})
	require.ErrorIs(t, err, ErrNothingLocked)
}

// A lock that has expired by the database's clock does not hide its token: the next
// Select takes it over at once, with no clean-up run, and on Postgres in the one
// statement of the fast path. The takeover replaces the lock, so the token still
// has one, the new transaction's, and the old transaction can neither unlock nor
// spend it; a lock taken over is live, and not taken over again.
func TestExpiredLockIsTakenOverAtOnce(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx, v := t.Context(), vs[0]
		issue(t, v, "ivy", 3, 4)
		old := newTx()
		_, err := v.Select(ctx, old, "ivy", 7, Filter{}, expiringTTL)
		require.NoError(t, err)
		waitExpired(t, v, "ivy")

		before := v.Stats()
		next := newTx()
		got, err := v.Select(ctx, next, "ivy", 7, Filter{Identifier: "GBP"}, time.Minute)
		require.NoError(t, err, "the expired locks hide the tokens")
		assert.Len(t, got, 2)
		if v.fast {
			assert.Equal(t, before.General, v.Stats().General, "the fast select did not settle the takeover")
			assert.Equal(t, before.Takeovers+1, v.Stats().Takeovers, "the fast select took over no lock")
		}
		for id, holders := range locks(t, v, "ivy") {
			assert.Equal(t, []string{lockHolder(next)}, holders, "token %s", id)
		}

		_, err = v.Select(ctx, newTx(), "ivy", 1, Filter{}, time.Minute)
		require.ErrorIs(t, err, ErrLocked, "a live lock was taken over")
		lostLocks(t, v, old)
		_, _, err = v.Spend(ctx, next, []Token{gbp("jack", 7)})
		require.NoError(t, err)
	})
}

// Selectors on several replicas race for the same tokens, all under expired locks:
// each token ends up locked by exactly one winner, the one Select returned it to,
// and the losers are told the funds are locked.
func TestRaceForExpiredLocks(t *testing.T) {
	cases := []struct {
		name             string
		tokens, racers   int
		amount           int64
		wantAllTokensWon bool
	}{
		{"a token each", 8, 16, 1, true},
		{"every token each", 8, 6, 8, true},
		{"three tokens each", 9, 8, 3, true},
	}
	each(t, 4, Config{}, func(t *testing.T, vs []*Vault) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := t.Context()
				owner := "racer-owner-" + newTx()
				issue(t, vs[0], owner, repeat(c.tokens, 1)...)
				_, err := vs[0].Select(ctx, newTx(), owner, int64(c.tokens), Filter{}, expiringTTL)
				require.NoError(t, err)
				waitExpired(t, vs[0], owner)

				var mu sync.Mutex
				won := map[string]string{} // token -> the transaction Select gave it to
				var wg sync.WaitGroup
				for i := range c.racers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tx := newTx()
						got, err := vs[i%len(vs)].Select(ctx, tx, owner, c.amount, Filter{}, time.Minute)
						if errors.Is(err, ErrLocked) {
							return
						}
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						defer mu.Unlock()
						for _, tok := range got {
							assert.NotContains(t, won, tok.TokenID, "token given to two transactions")
							won[tok.TokenID] = lockHolder(tx)
						}
					}()
				}
				wg.Wait()

				held := locks(t, vs[0], owner)
				for id, holder := range won {
					assert.Equal(t, []string{holder}, held[id], "token %s", id)
				}
				for id, holders := range held {
					assert.Len(t, holders, 1, "token %s has more than one lock", id)
				}
				assert.Len(t, won, c.tokens, "tokens left under expired locks")
			})
		}
	})
}

// Locks live the whole time-to-live the caller asked for: a Select made slow before it
// writes its locks returns locks that expire ttl after they were written, says when,
// and no other replica takes the tokens before then.
//
// Two ways to make a Select slow, each on the path it slows: a Predicate that takes
// its time (the general path, on every backend), and, on Postgres's fast path, the
// takeover of an expired lock whose row another transaction holds (custody_select
// waits for it).
func TestLocksLiveTheirWholeTTL(t *testing.T) {
	const (
		// Any delay shows a ttl counted from before the delay; slow leaves the Select
		// time to reach the row lock first on a loaded machine, and each case waits
		// out slow and ttl.
		ttl  = 2500 * time.Millisecond
		slow = 1500 * time.Millisecond
		// slack covers SQLite's clock in whole milliseconds.
		slack = 2 * time.Millisecond
	)
	cases := []struct {
		name     string
		backends []backend
		// delay makes the Select of tx on vault v slow: it returns the filter the
		// Select uses and a function that returns, once the delay is over, a time
		// before which no lock was written.
		delay func(t *testing.T, v *Vault) (Filter, func() time.Time)
	}{
		{
			name:     "general path, slow predicate",
			backends: []backend{sqliteDB, libpqDB, pgxDB},
			delay: func(t *testing.T, v *Vault) (Filter, func() time.Time) {
				var once sync.Once
				var released time.Time
				f := Filter{Identifier: "GBP", Predicate: func(Token) bool {
					once.Do(func() {
						time.Sleep(slow)
						released = time.Now()
					})
					return true
				}}
				return f, func() time.Time { return released }
			},
		},
		{
			name:     "fast path, takeover waits for a row lock",
			backends: []backend{libpqDB, pgxDB},
			delay: func(t *testing.T, v *Vault) (Filter, func() time.Time) {
				ctx := t.Context()
				// An expired lock on the token, whose row another transaction holds for
				// slow: the takeover waits for it.
				_, err := v.Select(ctx, newTx(), "uma", 1, Filter{}, time.Millisecond)
				require.NoError(t, err)
				time.Sleep(20 * time.Millisecond)
				blocker, err := v.drv.Pool().BeginTx(ctx, nil)
				require.NoError(t, err)
				var holder string
				require.NoError(t, blocker.QueryRowContext(ctx,
					`SELECT holder FROM token_locks WHERE token_id IN (SELECT id FROM tokens WHERE owner = 'uma') FOR UPDATE`).Scan(&holder))
				done := make(chan time.Time, 1)
				go func() {
					time.Sleep(slow)
					before := time.Now()
					assert.NoError(t, blocker.Commit())
					done <- before
				}()
				var released time.Time
				return Filter{}, func() time.Time {
					if released.IsZero() {
						released = <-done
					}
					return released
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, c.backends, func(t *testing.T, b backend) {
				ctx := t.Context()
				vs := openVaults(t, b, 2, Config{})
				issue(t, vs[0], "uma", 1)
				f, lockedAfter := c.delay(t, vs[0])

				start := time.Now()
				tx := newTx()
				locked, expires, err := vs[0].SelectUntil(ctx, tx, "uma", 1, f, ttl)
				require.NoError(t, err)
				returned := time.Now()
				require.Len(t, locked, 1)
				after := lockedAfter()
				require.GreaterOrEqual(t, returned.Sub(start), slow, "the Select was not slowed: the test proves nothing")
				assert.False(t, expires.Before(after.Add(ttl-slack)),
					"the locks expire %v after the Select began and %v after they were taken; want at least %v after they were taken",
					expires.Sub(start).Round(time.Millisecond), expires.Sub(after).Round(time.Millisecond), ttl)
				assert.False(t, expires.After(returned.Add(ttl)), "the locks expire %v after the Select returned, more than its ttl",
					expires.Sub(returned).Round(time.Millisecond))

				// Another replica tries the same token every 100 ms: it gets it only once
				// the returned expiry has passed. When it took the lock over, by the
				// database's clock, is its own lock's expiry less its ttl.
				const ttl2 = time.Minute
				var took time.Time
				for deadline := expires.Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					_, expires2, err := vs[1].SelectUntil(ctx, newTx(), "uma", 1, Filter{}, ttl2)
					if errors.Is(err, ErrLocked) {
						continue
					}
					require.NoError(t, err)
					took = expires2.Add(-ttl2)
					break
				}
				require.False(t, took.IsZero(), "the token was never taken over after its lock expired")
				assert.False(t, took.Before(expires.Add(-slack)), "another replica took the token %v before the expiry the Select returned",
					expires.Sub(took).Round(time.Millisecond))
				lostLocks(t, vs[0], tx)
				audit(t, vs[0])
			})
		})
	}
}

// Replicas select, spend and collect one owner's tokens with locks so short
// that they expire while the others race for them, transaction IDs shared by two
// replicas at once, on both paths of Select. Afterwards: each token's locks, as the
// Selects returned them (taken at their expiry less their ttl, by the database's
// clock), never overlap (no token was locked by two live transactions); each token a
// Spend spent was locked for that transaction by a Select; every failure is one
// custody names; and the books balance.
func TestLocksNeverOverlapUnderExpiryRaces(t *testing.T) {
	type lock struct {
		tx            string
		taken, expiry time.Time
	}
	ttls := []time.Duration{time.Nanosecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond}
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		vs := openVaults(t, b, 3, Config{})
		issue(t, vs[0], "lena", repeat(12, 1)...)
		var mu sync.Mutex
		given := map[string][]lock{}             // token -> the locks Selects returned on it
		lockedBy := map[string]map[string]bool{} // tx -> the tokens Selects gave it
		spentBy := map[string][]string{}         // token -> the transactions whose Spend spent it
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rnd := rand.New(rand.NewPCG(uint64(g), 7))
				v := vs[g%len(vs)]
				for i := range 30 {
					tx := fmt.Sprintf("lena-%s-%d", b.name, rnd.IntN(8)) // shared by replicas
					ttl := ttls[rnd.IntN(len(ttls))]
					f := Filter{Identifier: "GBP"}
					if i%3 == 0 {
						f.Predicate = func(Token) bool { return true }
					}
					// An amount of 1, which one token covers: the expiry the Select
					// returns, its earliest lock's, is that token's.
					got, expires, err := v.SelectUntil(ctx, tx, "lena", 1, f, ttl)
					if errors.Is(err, ErrLocked) {
						continue
					}
					if !assert.NoError(t, err) || !assert.Len(t, got, 1) {
						return
					}
					var sum int64
					mu.Lock()
					if lockedBy[tx] == nil {
						lockedBy[tx] = map[string]bool{}
					}
					for _, tok := range got {
						sum += tok.Amount
						lockedBy[tx][tok.TokenID] = true
						given[tok.TokenID] = append(given[tok.TokenID],
							lock{tx, expires.Add(-time.Duration(lockMillis(ttl)) * time.Millisecond), expires})
					}
					mu.Unlock()
					switch rnd.IntN(3) {
					case 0, 1:
						spent, _, err := v.Spend(ctx, tx, []Token{gbp("lena", sum)})
						if errors.Is(err, ErrNothingLocked) || errors.Is(err, ErrUnbalanced) {
							continue
						}
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						for _, tok := range spent {
							spentBy[tok.TokenID] = append(spentBy[tok.TokenID], tx)
						}
						mu.Unlock()
					default: // no Release: it ends a lock before its expiry, as it should
						_, err := v.Collect(ctx)
						assert.NoError(t, err)
					}
				}
			}()
		}
		wg.Wait()
		// Checked once all is done: a transaction ID's Select on one goroutine may
		// commit, and its Spend on another spend the tokens, before the Select's
		// goroutine has noted them.
		for id, txs := range spentBy {
			assert.Len(t, txs, 1, "token %s spent by %v", id, txs)
			for _, tx := range txs {
				assert.True(t, lockedBy[tx][id], "%s spent %s, which no Select gave it", tx, id)
			}
		}
		relocked := 0
		for id, ls := range given {
			if len(ls) > 1 {
				relocked++
			}
			sort.Slice(ls, func(i, j int) bool { return ls[i].taken.Before(ls[j].taken) })
			for i := 1; i < len(ls); i++ {
				assert.False(t, ls[i].taken.Before(ls[i-1].expiry),
					"token %s: %s locked it at %v, %v before %s's lock expired",
					id, ls[i].tx, ls[i].taken.Format(time.RFC3339Nano), ls[i-1].expiry.Sub(ls[i].taken), ls[i-1].tx)
			}
		}
		assert.Positive(t, relocked, "no token was locked twice: the test proves nothing")
		total, _, err := vs[0].Balance(ctx, "lena", "GBP")
		require.NoError(t, err)
		assert.EqualValues(t, 12, total)
		audit(t, vs[0])
	})
}
