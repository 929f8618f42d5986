package tokens

import (
	"context"
	"errors"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A vault for a hostile caller, and a count of the transactions it left open.
type hostileBackend struct {
	name string
	open func(t *testing.T) (v *Vault, openTxs func() int)
}

var hostileBackends = []hostileBackend{
	{"sqlite", func(t *testing.T) (*Vault, func() int) {
		// An open write transaction holds SQLite's one writer connection: the vault's
		// next write (the checks after the panic) waits for it until its context ends.
		return openVaults(t, sqliteDB, 1, Config{})[0], func() int { return 0 }
	}},
	{"postgres", func(t *testing.T) (*Vault, func() int) {
		// The vault's connections carry an application name of their own, so its
		// backends can be told from every other test's in pg_stat_activity.
		app := "custody-" + NewID()[:12]
		where := libpqDB.new(t)
		where.at = withApplicationName(t, where.at, app)
		db := where.open(t, 4).(*postgres.DB)
		return openVault(t, db, Config{}), func() int {
			t.Helper()
			var n int
			require.NoError(t, db.Pool().GetContext(t.Context(), &n, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND state LIKE 'idle in transaction%'`, app))
			return n
		}
	}},
}

func withApplicationName(t *testing.T, dsn, app string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " application_name=" + app
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// selectPanic runs Select and returns what it panicked with (nil if it returned).
func selectPanic(v *Vault, ctx context.Context, txID, owner string, amount int64, f Filter) (p any) {
	defer func() { p = recover() }()
	_, _ = v.Select(ctx, txID, owner, amount, f, time.Minute)
	return nil
}

// A Predicate that panics, wherever Select is when it calls it: the panic reaches the
// caller with its own value, Select's transaction is rolled back (no lock stays, no
// backend is left idle in transaction, SQLite's writer is free), and the vault goes
// on working at once.
func TestPanickingPredicateLeavesNothingBehind(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name   string
		amount int64 // issued: 1, 2, 3 (6 in all)
		call   int   // Predicate panics at this call
	}{
		{"at the first candidate", 3, 1},
		{"after accepting candidates", 6, 3},
		{"while telling short funds from locked", 100, 5},
	}
	for _, b := range hostileBackends {
		for _, c := range cases {
			t.Run(b.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				v, openTxs := b.open(t)
				issue(t, v, "kim", 1, 2, 3)
				tx, calls := newTx(), 0
				got := selectPanic(v, t.Context(), tx, "kim", c.amount, Filter{Predicate: func(Token) bool {
					if calls++; calls == c.call {
						panic(boom)
					}
					return true
				}})
				require.Same(t, boom, got, "the panic did not reach the caller with its value")
				assert.Zero(t, openTxs(), "a transaction was left open")

				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				n, err := v.Release(ctx, tx)
				require.NoError(t, err)
				assert.Zero(t, n, "the panicking selection left locks")
				next := newTx()
				_, err = v.Select(ctx, next, "kim", 6, Filter{}, time.Minute)
				require.NoError(t, err, "the vault is stuck after the panic")
				_, _, err = v.Spend(ctx, next, []Token{gbp("lee", 6)})
				require.NoError(t, err)
				assert.Zero(t, openTxs())
				audit(t, v)
			})
		}
	}
}

// Amounts at the edge of int64 are refused for what they are, and change nothing:
// a selection of more than anyone has is short of funds (on Postgres an earlier fast
// select doubled it in bigint and failed with an overflow), and outputs whose sum wraps
// around to the inputs' do not balance (SQLite's spend summed them in int64 and
// created value).
func TestHostileAmounts(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx, v := t.Context(), vs[0]
		issue(t, v, "mia", 4, 6)
		for _, amount := range []int64{math.MaxInt64, math.MaxInt64/2 + 1} {
			_, err := v.Select(ctx, newTx(), "mia", amount, Filter{}, time.Minute)
			require.ErrorIs(t, err, ErrInsufficientFunds, "amount %d", amount)
		}

		tx := newTx()
		_, err := v.Select(ctx, tx, "mia", 10, Filter{}, time.Minute)
		require.NoError(t, err)
		// 10 in; MaxInt64 + MaxInt64 + 12 out wraps around to 10.
		huge := gbp("mallory", math.MaxInt64)
		_, _, err = v.Spend(ctx, tx, []Token{huge, huge, gbp("mia", 12)})
		require.ErrorIs(t, err, ErrUnbalanced)
		total, unlocked, err := v.Balance(ctx, "mia", "GBP")
		require.NoError(t, err)
		assert.Equal(t, []int64{10, 0}, []int64{total, unlocked}, "a refused spend changed the books")
		mallory, _, err := v.Balance(ctx, "mallory", "GBP")
		require.NoError(t, err)
		assert.Zero(t, mallory)
		_, _, err = v.Spend(ctx, tx, []Token{gbp("mia", 10)})
		require.NoError(t, err)
	})
}

// A token worth nearly all int64 can be selected: Select reads candidates until they
// cover twice the amount, and twice this amount overflowed int64 (the general path
// then read no candidate and called the unlocked token locked).
func TestHugeTokenIsSelectable(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx, v := t.Context(), vs[0]
		issue(t, v, "ned", math.MaxInt64-1)
		for _, f := range []Filter{{}, {Predicate: func(Token) bool { return true }}} {
			tx := newTx()
			got, err := v.Select(ctx, tx, "ned", math.MaxInt64/2+1, f, time.Minute)
			require.NoError(t, err)
			assert.Len(t, got, 1)
			_, err = v.Release(ctx, tx)
			require.NoError(t, err)
		}
	})
}
