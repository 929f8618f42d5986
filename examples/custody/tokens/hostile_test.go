package tokens

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"math"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
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

// hostileOnes are the backends of the hostile tests: SQLite, and PostgreSQL on each
// driver (the pooled backends run the same statements).
var hostileOnes = []backend{sqliteDB, libpqDB, pgxDB}

// books is what a refused call must leave as it was: the audit, and what alice and
// bob have, in all and unlocked.
type books struct {
	Audit    Audit
	Balances [4]int64
}

func readBooks(t testing.TB, v *Vault) books {
	t.Helper()
	var b books
	var err error
	b.Audit, err = v.Audit(context.Background())
	require.NoError(t, err)
	b.Balances[0], b.Balances[1], err = v.Balance(context.Background(), "alice", "GBP")
	require.NoError(t, err)
	b.Balances[2], b.Balances[3], err = v.Balance(context.Background(), "bob", "GBP")
	require.NoError(t, err)
	return b
}

// incompressible is n bytes of valid UTF-8 that PostgreSQL cannot compress into an
// index row.
func incompressible(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.RawStdEncoding.EncodeToString(b)[:n]
}

// Requests a hostile caller can make fail with ErrInvalid, saying what was wrong, and
// change nothing, on every database alike: zero and negative amounts, sums past
// int64, and texts no database keeps alike (NUL and invalid UTF-8: PostgreSQL refused
// them with untyped errors while SQLite stored them; texts longer than an index row,
// which PostgreSQL refused untyped).
func TestHostileRequestsAreInvalid(t *testing.T) {
	long := incompressible(t, 4*MaxText)
	type call func(ctx context.Context, v *Vault, locked string) error
	with := func(mod func(*Token)) Token {
		tok := gbp("bob", 1)
		mod(&tok)
		return tok
	}
	cases := []struct {
		name string
		call call
		want string // in the error's message
	}{
		{"issue zero", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Issue(ctx, newTx(), gbp("bob", 0))
			return err
		}, "positive amount"},
		{"issue negative", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Issue(ctx, newTx(), gbp("bob", -1))
			return err
		}, "positive amount"},
		{"select zero", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Select(ctx, newTx(), "alice", 0, Filter{}, time.Minute)
			return err
		}, "positive amount"},
		{"select negative ttl", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Select(ctx, newTx(), "alice", 1, Filter{}, -time.Second)
			return err
		}, "positive ttl"},
		{"pay negative", func(ctx context.Context, v *Vault, _ string) error {
			_, _, err := v.Pay(ctx, newTx(), "alice", gbp("bob", -1))
			return err
		}, "positive amount"},
		{"pay overflowing sum", func(ctx context.Context, v *Vault, _ string) error {
			_, _, err := v.Pay(ctx, newTx(), "alice", gbp("bob", math.MaxInt64), gbp("bob", 2))
			return err
		}, "largest amount"},
		{"spend zero output", func(ctx context.Context, v *Vault, locked string) error {
			_, _, err := v.Spend(ctx, locked, []Token{gbp("bob", 5), gbp("bob", 0)})
			return err
		}, "positive amount"},
		{"issue two tokens of one ID", func(ctx context.Context, v *Vault, _ string) error {
			same := with(func(t *Token) { t.TokenID = "twin" })
			_, err := v.Issue(ctx, newTx(), same, same)
			return err
		}, `two tokens with ID "twin"`},
		{"pay two outputs of one ID", func(ctx context.Context, v *Vault, _ string) error {
			same := with(func(t *Token) { t.TokenID = "twin" })
			_, _, err := v.Pay(ctx, newTx(), "alice", same, same)
			return err
		}, `two tokens with ID "twin"`},
	}
	for _, bad := range []struct{ name, s, want string }{
		{"NUL", "bo\x00b", "NUL"}, {"invalid UTF-8", "bo\xffb", "UTF-8"}, {"too long", long, "more than"},
	} {
		cases = append(cases, []struct {
			name string
			call call
			want string
		}{
			{"issue owner " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Issue(ctx, newTx(), with(func(t *Token) { t.Owner = bad.s }))
				return err
			}, "owner"},
			{"issue type " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Issue(ctx, newTx(), with(func(t *Token) { t.Type = bad.s }))
				return err
			}, "type"},
			{"issue notary " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Issue(ctx, newTx(), with(func(t *Token) { t.Notary = bad.s }))
				return err
			}, "notary"},
			{"issue token ID " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Issue(ctx, newTx(), with(func(t *Token) { t.TokenID = bad.s }))
				return err
			}, "token ID"},
			{"issue transaction " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Issue(ctx, bad.s, gbp("bob", 1))
				return err
			}, "transaction ID"},
			{"select owner " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Select(ctx, newTx(), bad.s, 1, Filter{}, time.Minute)
				return err
			}, "owner"},
			{"select transaction " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Select(ctx, bad.s, "alice", 1, Filter{}, time.Minute)
				return err
			}, "transaction ID"},
			{"select filter " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Select(ctx, newTx(), "alice", 1, Filter{Issuer: bad.s}, time.Minute)
				return err
			}, "issuer"},
			{"pay payer " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, _, err := v.Pay(ctx, newTx(), bad.s, gbp("bob", 1))
				return err
			}, "payer"},
			{"pay transaction " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, _, err := v.Pay(ctx, bad.s, "alice", gbp("bob", 1))
				return err
			}, "transaction ID"},
			{"pay to " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, _, err := v.Pay(ctx, newTx(), "alice", with(func(t *Token) { t.Owner = bad.s }))
				return err
			}, "owner"},
			{"spend output " + bad.name, func(ctx context.Context, v *Vault, locked string) error {
				_, _, err := v.Spend(ctx, locked, []Token{with(func(t *Token) { t.Owner = bad.s; t.Amount = 5 })})
				return err
			}, "owner"},
			{"release " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, err := v.Release(ctx, bad.s)
				return err
			}, "transaction ID"},
			{"balance " + bad.name, func(ctx context.Context, v *Vault, _ string) error {
				_, _, err := v.Balance(ctx, bad.s, "GBP")
				return err
			}, "owner"},
		}...)
	}
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 5, 5)
		locked := newTx()
		_, err := v.Select(t.Context(), locked, "alice", 5, Filter{}, time.Minute)
		require.NoError(t, err)
		before := readBooks(t, v)
		for _, c := range cases {
			err := c.call(t.Context(), v, locked)
			if assert.ErrorIs(t, err, ErrInvalid, c.name) {
				assert.ErrorContains(t, err, c.want, c.name)
			}
			require.Equal(t, before, readBooks(t, v), "%s changed the books", c.name)
		}
		_, _, err = v.Spend(t.Context(), locked, []Token{gbp("bob", 5)})
		require.NoError(t, err, "the refused spends took the locks")
	})
}

// An output whose ID another token has is the caller's mistake, not a race: Pay
// fails at once (it was retried as a lost race, MaxAttempts times, and reported as
// ErrLocked, funds locked by others, after up to LockWait), and Pay, Spend and Issue
// say ErrInvalid beside refset.ErrDuplicate, changing nothing.
func TestTakenOutputIDIsInvalid(t *testing.T) {
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{LockWait: 2 * time.Second})[0]
		issue(t, v, "alice", 5, 5)
		carol, err := v.Issue(ctx, newTx(), gbp("carol", 1))
		require.NoError(t, err)
		taken := gbp("bob", 5)
		taken.TokenID = carol[0].TokenID
		locked := newTx()
		_, err = v.Select(ctx, locked, "alice", 5, Filter{}, time.Minute)
		require.NoError(t, err)
		before := readBooks(t, v)

		attempts := v.Stats().Attempts
		_, _, err = v.Pay(ctx, newTx(), "alice", taken)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, err, refset.ErrDuplicate)
		assert.NotErrorIs(t, err, ErrLocked)
		assert.Equal(t, attempts+1, v.Stats().Attempts, "Pay tried a taken ID again")
		_, _, err = v.Spend(ctx, locked, []Token{taken})
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, err, refset.ErrDuplicate)
		_, err = v.Issue(ctx, newTx(), taken)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, err, refset.ErrDuplicate)
		require.Equal(t, before, readBooks(t, v))

		_, _, err = v.Spend(ctx, locked, []Token{gbp("bob", 5)})
		require.NoError(t, err, "a refused spend took the locks")
		audit(t, v)
	})
}

// A refusal inside a unit of work (refset.InTx) changes nothing, the unit's
// transaction included: the call fails with its typed error and the unit goes on, on
// every database alike, to pay in the same transaction and commit. On PostgreSQL the
// fast paths ran their statement on the unit's transaction bare, so a refusal raised
// in it (custody_refuse, a taken output ID) aborted the whole unit: every later
// statement of the unit failed, refset.ErrInvalidTx.
func TestRefusalInUnitOfWork(t *testing.T) {
	cases := []struct {
		name   string
		refuse func(ctx context.Context, v *Vault, locked string) error
		want   error
	}{
		{"spend of nothing locked", func(ctx context.Context, v *Vault, _ string) error {
			_, _, err := v.Spend(ctx, newTx(), []Token{gbp("bob", 5)})
			return err
		}, ErrNothingLocked},
		{"unbalanced spend", func(ctx context.Context, v *Vault, locked string) error {
			_, _, err := v.Spend(ctx, locked, []Token{gbp("bob", 4)})
			return err
		}, ErrUnbalanced},
		{"spend to a taken ID", func(ctx context.Context, v *Vault, locked string) error {
			taken := gbp("bob", 5)
			taken.TokenID = locked + "-carol"
			_, _, err := v.Spend(ctx, locked, []Token{taken})
			return err
		}, ErrInvalid},
		{"pay to a taken ID", func(ctx context.Context, v *Vault, locked string) error {
			taken := gbp("bob", 1)
			taken.TokenID = locked + "-carol"
			_, _, err := v.Pay(ctx, newTx(), "alice", taken)
			return err
		}, ErrInvalid},
		{"insufficient pay", func(ctx context.Context, v *Vault, _ string) error {
			_, _, err := v.Pay(ctx, newTx(), "alice", gbp("bob", 100))
			return err
		}, ErrInsufficientFunds},
		{"insufficient select", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Select(ctx, newTx(), "alice", 100, Filter{}, time.Minute)
			return err
		}, ErrInsufficientFunds},
	}
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		for _, c := range cases {
			issue(t, v, "alice", 5, 5)
			locked := newTx()
			_, err := v.Issue(ctx, newTx(), Token{TokenID: locked + "-carol", Owner: "carol", Identifier: "GBP", Type: "fiat", Amount: 1})
			require.NoError(t, err)
			_, err = v.Select(ctx, locked, "alice", 5, Filter{}, time.Minute)
			require.NoError(t, err)
			before := readBooks(t, v)
			err = refset.InTx(ctx, v.db, func(unit context.Context, _ refset.Tx) error {
				require.ErrorIs(t, c.refuse(unit, v, locked), c.want, c.name)
				_, _, err := v.Pay(unit, newTx(), "alice", gbp("bob", 5))
				return err
			})
			require.NoError(t, err, "%s: the unit of work could not go on", c.name)
			after := readBooks(t, v)
			assert.Equal(t, [2]int64{before.Balances[2] + 5, before.Balances[3] + 5}, [2]int64(after.Balances[2:]), "%s: the unit's payment", c.name)
			_, _, err = v.Spend(ctx, locked, []Token{gbp("bob", 5)})
			require.NoError(t, err, "%s: the refusal took the locks", c.name)
			_, _, err = v.Pay(ctx, newTx(), "bob", gbp("dan", 10)) // bob's back to nothing but tokens of earlier cases
			require.NoError(t, err)
			audit(t, v)
		}
	})
}

// A payment's transaction ID may be one an earlier Select still holds locks for: Pay
// takes other tokens and leaves those locks for the Spend (on SQLite its spend took
// every lock of the transaction, the Select's too, and failed with ErrUnbalanced or
// ErrLocked while PostgreSQL paid).
func TestPayBesideOwnSelect(t *testing.T) {
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 5, 5)
		tx := newTx()
		locked, err := v.Select(ctx, tx, "alice", 5, Filter{}, time.Minute)
		require.NoError(t, err)
		require.Len(t, locked, 1)
		spent, _, err := v.Pay(ctx, tx, "alice", gbp("bob", 5))
		require.NoError(t, err)
		require.Len(t, spent, 1)
		assert.NotEqual(t, locked[0].TokenID, spent[0].TokenID, "Pay spent a token the Select locked")
		total, unlocked, err := v.Balance(ctx, "alice", "GBP")
		require.NoError(t, err)
		assert.Equal(t, []int64{5, 0}, []int64{total, unlocked}, "the Select's lock is gone")
		_, _, err = v.Spend(ctx, tx, []Token{gbp("bob", 5)})
		require.NoError(t, err)
		bob, _, err := v.Balance(ctx, "bob", "GBP")
		require.NoError(t, err)
		assert.EqualValues(t, 10, bob)
		audit(t, v)
	})
}

// Every call with a context already cancelled fails with the context's error and
// changes nothing; one on a closed database fails with refset.ErrClosed.
func TestEndedContextAndClosedDatabase(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, v *Vault, locked string) error
	}{
		{"issue", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Issue(ctx, newTx(), gbp("bob", 1))
			return err
		}},
		{"select", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Select(ctx, newTx(), "alice", 1, Filter{}, time.Minute)
			return err
		}},
		{"select with predicate", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Select(ctx, newTx(), "alice", 1, Filter{Predicate: func(Token) bool { return true }}, time.Minute)
			return err
		}},
		{"pay", func(ctx context.Context, v *Vault, _ string) error {
			_, _, err := v.Pay(ctx, newTx(), "alice", gbp("bob", 1))
			return err
		}},
		{"spend", func(ctx context.Context, v *Vault, locked string) error {
			_, _, err := v.Spend(ctx, locked, []Token{gbp("bob", 5)})
			return err
		}},
		{"release", func(ctx context.Context, v *Vault, locked string) error {
			_, err := v.Release(ctx, locked)
			return err
		}},
		{"collect", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Collect(ctx)
			return err
		}},
		{"balance", func(ctx context.Context, v *Vault, _ string) error {
			_, _, err := v.Balance(ctx, "alice", "GBP")
			return err
		}},
		{"audit", func(ctx context.Context, v *Vault, _ string) error {
			_, err := v.Audit(ctx)
			return err
		}},
	}
	eachBackend(t, hostileOnes, func(t *testing.T, b backend) {
		db := b.new(t).open(t, 4)
		v := openVault(t, db, Config{LockWait: time.Second})
		issue(t, v, "alice", 5, 5)
		locked := newTx()
		_, err := v.Select(t.Context(), locked, "alice", 5, Filter{}, time.Minute)
		require.NoError(t, err)
		before := readBooks(t, v)
		ended, cancel := context.WithCancel(t.Context())
		cancel()
		for _, c := range cases {
			require.ErrorIs(t, c.call(ended, v, locked), context.Canceled, c.name)
			require.Equal(t, before, readBooks(t, v), "%s changed the books", c.name)
		}
		require.NoError(t, db.(interface{ Close() error }).Close())
		for _, c := range cases {
			assert.ErrorIs(t, c.call(t.Context(), v, locked), refset.ErrClosed, c.name)
		}
	})
}

// Many goroutines on several replicas pay between the same owners on PostgreSQL, in
// one step and in two, to others and to themselves: every failure is one custody
// names, the supply is unchanged, no token is spent twice, and the history agrees
// with the tokens one by one.
func TestConcurrentPaymentsConserve(t *testing.T) {
	eachBackend(t, []backend{libpqDB, pgxPooledDB}, func(t *testing.T, b backend) {
		ctx := t.Context()
		vs := openVaults(t, b, 3, Config{LockWait: 5 * time.Second})
		owners := []string{"ann", "ben", "cat"}
		for _, o := range owners {
			issue(t, vs[0], o, repeat(10, 7)...)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for g := range 24 {
			wg.Go(func() {
				v := vs[g%len(vs)]
				for i := range 12 {
					from, to := owners[(g+i)%3], owners[(g+i*g)%3] // to is from a third of the time
					amount := int64(1 + (g*i)%9)
					var err error
					if i%2 == 0 {
						_, _, err = v.Pay(ctx, newTx(), from, gbp(to, amount))
					} else {
						err = payTx(ctx, v, newTx(), from, to, amount)
					}
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		paid := 0
		for err := range errs {
			if err == nil {
				paid++
				continue
			}
			assert.True(t, errors.Is(err, ErrInsufficientFunds) || errors.Is(err, ErrLocked), "untyped failure: %v", err)
		}
		assert.Greater(t, paid, 200, "too few payments went through to test anything")
		a := audit(t, vs[0])
		var supply int64
		for _, o := range owners {
			total, unlocked, err := vs[0].Balance(ctx, o, "GBP")
			require.NoError(t, err)
			assert.Equal(t, total, unlocked, "%s has tokens left locked", o)
			supply += total
		}
		assert.EqualValues(t, 3*70, supply, "the supply changed")
		assert.Equal(t, a.Issued, supply)
		// The history, token by token: each unspent token has its own row, unspent,
		// with its owner and amount; no other row is unspent.
		var disagree, unspent int64
		require.NoError(t, refset.Reader(ctx, vs[0].db).QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM tokens t LEFT JOIN token_history h ON h.token_id = t.id
			 WHERE h.token_id IS NULL OR h.spent_by IS NOT NULL OR h.owner <> t.owner OR h.amount <> t.amount),
			(SELECT COUNT(*) FROM token_history WHERE spent_by IS NULL)`).Scan(&disagree, &unspent))
		assert.Zero(t, disagree, "tokens the history does not describe")
		assert.Equal(t, a.Tokens, unspent, "history rows unspent without their token")
	})
}
