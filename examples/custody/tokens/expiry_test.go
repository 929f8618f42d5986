package tokens

import (
	"errors"
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
