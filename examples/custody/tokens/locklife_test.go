package tokens

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		ttl  = 5 * time.Second
		slow = 3 * time.Second
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
