package tokens

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// balances is each owner's total and unlocked GBP.
func balances(t *testing.T, v *Vault, owners ...string) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, o := range owners {
		total, unlocked, err := v.Balance(t.Context(), o, "GBP")
		require.NoError(t, err)
		out[o] = [2]int64{total, unlocked}
	}
	return out
}

// payOne pays amount of from's GBP to `to` with Pay.
func payOne(ctx context.Context, v *Vault, from, to string, amount int64) error {
	_, _, err := v.Pay(ctx, newTx(), from, gbp(to, amount))
	return err
}

// What one payment does, and the requests Pay refuses: a refused payment changes
// nothing.
func TestPay(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx, v := t.Context(), vs[0]
		issue(t, v, "alice", 5, 3, 2)

		tx := newTx()
		spent, created, err := v.Pay(ctx, tx, "alice", gbp("bob", 4), gbp("carol", 2))
		require.NoError(t, err)
		var in int64
		for _, s := range spent {
			in += s.Amount
			assert.Equal(t, "alice", s.Owner)
		}
		require.GreaterOrEqual(t, in, int64(6))
		var out int64
		for _, c := range created {
			out += c.Amount
			assert.NotEmpty(t, c.TokenID)
		}
		assert.Equal(t, in, out, "the outputs and the change add up to what was spent")
		assert.Equal(t, []string{"bob", "carol"}, []string{created[0].Owner, created[1].Owner})
		if in > 6 {
			require.Len(t, created, 3)
			assert.Equal(t, Token{TokenID: created[2].TokenID, Owner: "alice", Type: "fiat", Identifier: "GBP",
				Issuer: "bank", Notary: "notary", Amount: in - 6}, created[2], "the change")
		}
		assert.Equal(t, map[string][2]int64{"alice": {4, 4}, "bob": {4, 4}, "carol": {2, 2}},
			balances(t, v, "alice", "bob", "carol"))

		// Refused requests change nothing.
		before := balances(t, v, "alice", "bob")
		btc := gbp("bob", 1)
		btc.Identifier = "BTC"
		otherIssuer := gbp("bob", 1)
		otherIssuer.Issuer = "other bank"
		for _, c := range []struct {
			name     string
			tx, from string
			outputs  []Token
			sentinel error
		}{
			{"more than the payer has", newTx(), "alice", []Token{gbp("bob", 5)}, ErrInsufficientFunds},
			{"a payer with nothing", newTx(), "nobody", []Token{gbp("bob", 1)}, ErrInsufficientFunds},
			{"a kind the payer lacks", newTx(), "alice", []Token{btc}, ErrInsufficientFunds},
			{"the same identifier from another issuer", newTx(), "alice", []Token{otherIssuer}, ErrInsufficientFunds},
			{"no transaction", "", "alice", []Token{gbp("bob", 1)}, ErrInvalid},
			{"no payer", newTx(), "", []Token{gbp("bob", 1)}, ErrInvalid},
			{"no output", newTx(), "alice", nil, ErrInvalid},
			{"outputs of two kinds", newTx(), "alice", []Token{gbp("bob", 1), btc}, ErrInvalid},
			{"a negative output", newTx(), "alice", []Token{gbp("bob", 3), gbp("bob", -1)}, ErrInvalid},
			{"an output with no owner", newTx(), "alice", []Token{gbp("", 1)}, ErrInvalid},
			{"outputs that overflow", newTx(), "alice", []Token{gbp("bob", math.MaxInt64), gbp("bob", 2)}, ErrInvalid},
		} {
			_, _, err := v.Pay(ctx, c.tx, c.from, c.outputs...)
			require.ErrorIs(t, err, c.sentinel, c.name)
		}
		assert.Equal(t, before, balances(t, v, "alice", "bob"))

		// Funds locked by a two-step transaction are not taken: ErrLocked, at once
		// with no LockWait; released, they pay.
		locker := newTx()
		_, err = v.Select(ctx, locker, "alice", 4, Filter{}, time.Minute)
		require.NoError(t, err)
		_, _, err = v.Pay(ctx, newTx(), "alice", gbp("bob", 1))
		require.ErrorIs(t, err, ErrLocked)
		assert.Equal(t, map[string][2]int64{"alice": {4, 0}, "bob": {4, 4}}, balances(t, v, "alice", "bob"))
		_, err = v.Release(ctx, locker)
		require.NoError(t, err)
		require.NoError(t, payOne(ctx, v, "alice", "bob", 4))
		assert.Equal(t, map[string][2]int64{"alice": {0, 0}, "bob": {8, 8}}, balances(t, v, "alice", "bob"))
	})
}

// Twenty payers ask for exactly what alice has, five each, at once: every one must be
// paid. At every moment what alice has not yet paid covers what the payers still
// waiting ask, so an ErrInsufficientFunds (or ErrLocked) here would be false: funds
// that payments in flight are spending, or change they have not yet created, are not
// missing funds.
func TestPayNeverFalselyInsufficient(t *testing.T) {
	each(t, 4, waiting, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "alice", repeat(50, 2)...) // 100: each payment of 5 leaves change
		for _, err := range run(vs, 5, func(v *Vault) error { return payOne(t.Context(), v, "alice", "bob", 5) }) {
			require.NoError(t, err)
		}
		assert.Equal(t, map[string][2]int64{"alice": {0, 0}, "bob": {100, 100}}, balances(t, vs[0], "alice", "bob"))
	})
}

// A hot owner: eight payers, each paying three tokens back to the owner over and over,
// from a wallet of three tokens per payer. The others hold at most 21 of its 24 tokens
// at any time, so three are always there to take: no payment may fail.
func TestPayHotOwner(t *testing.T) {
	each(t, 8, waiting, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "alice", repeat(24, 1)...)
		errs := run(vs, 1, func(v *Vault) error {
			for range 15 {
				if _, _, err := v.Pay(t.Context(), newTx(), "alice", gbp("alice", 1), gbp("alice", 1), gbp("alice", 1)); err != nil {
					return err
				}
			}
			return nil
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		assert.Equal(t, map[string][2]int64{"alice": {24, 24}}, balances(t, vs[0], "alice"))
		a := audit(t, vs[0])
		assert.EqualValues(t, 24, a.Tokens, "every payment re-minted the three tokens it spent")
		logRaces(t, vs)
	})
}

// Pay and the two-step Select then Spend race for one owner's tokens: no token is
// spent twice or by both, every payment that returned success moved its amount, and no
// lock is left.
func TestPayRacesSelectAndSpend(t *testing.T) {
	each(t, 6, waiting, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "alice", repeat(60, 5)...) // 300
		var paid atomic.Int64
		errs := run(vs, 2, func(v *Vault) error {
			for i := range 10 {
				amount := int64(1 + i%3)
				var err error
				if i%2 == 0 {
					err = payOne(t.Context(), v, "alice", "bob", amount)
				} else {
					err = pay(t.Context(), v, "alice", "bob", amount)
				}
				if err != nil {
					return err
				}
				paid.Add(amount)
			}
			return nil
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		assert.Equal(t, map[string][2]int64{"alice": {300 - paid.Load(), 300 - paid.Load()}, "bob": {paid.Load(), paid.Load()}},
			balances(t, vs[0], "alice", "bob"))
		assert.Zero(t, len(locks(t, vs[0], "alice")), "locks left")
	})
}

// A lock whose time-to-live has passed is no lock to Pay: it takes the token at once
// and removes the expired lock with it; the first transaction can then neither spend
// nor release anything.
func TestPayTakesExpiredLocks(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx, v := t.Context(), vs[0]
		issue(t, v, "erin", 7)
		first := newTx()
		_, err := v.Select(ctx, first, "erin", 7, Filter{}, 50*time.Millisecond)
		require.NoError(t, err)
		waitExpired(t, v, "erin")
		_, created, err := v.Pay(ctx, newTx(), "erin", gbp("frank", 7))
		require.NoError(t, err)
		require.Len(t, created, 1)
		lostLocks(t, v, first)
		assert.Equal(t, map[string][2]int64{"erin": {0, 0}, "frank": {7, 7}}, balances(t, v, "erin", "frank"))
	})
}

// Payers whose contexts end at random moments, some before they start, some while
// their statement runs: whatever each saw, the books balance, every payment was
// made whole or not at all, no lock is left, and the vault goes on paying.
func TestPayCancelled(t *testing.T) {
	each(t, 4, waiting, func(t *testing.T, vs []*Vault) {
		// Enough for every payment below and one more: how many of those whose
		// context ended were made anyway varies, and through PgBouncer most are (65
		// of 76 in one run: a cancel there seldom overtakes a statement this short),
		// so alice must never run short.
		issue(t, vs[0], "alice", repeat(220, 3)...)
		var cancelled atomic.Int64
		errs := run(vs, 4, func(v *Vault) error {
			for range 10 {
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(rand.IntN(20_000))*time.Microsecond)
				err := payOne(ctx, v, "alice", "bob", 4)
				deadline, _ := ctx.Deadline()
				ended := !time.Now().Before(deadline) // a dial may time out a moment before ctx.Err says so
				cancel()
				switch {
				case err == nil:
				case ended:
					// Whatever the driver made of it: a cancelled statement, a
					// connection that could not be made in time.
					cancelled.Add(1)
				default:
					return err
				}
			}
			return nil
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		t.Logf("%d of 160 payments saw their context end", cancelled.Load())
		// One snapshot for the sum: a payment whose context ended may still commit on
		// the server after its caller gave up, between two reads of separate balances
		// (alice read before it, bob after: 604 of 600, seen under -race).
		a := audit(t, vs[0])
		assert.EqualValues(t, 660, a.Remaining, "value is conserved")
		assert.Zero(t, balances(t, vs[0], "bob")["bob"][0]%4, "payments are whole")
		assert.Zero(t, len(locks(t, vs[0], "alice")))
		require.NoError(t, payOne(t.Context(), vs[0], "alice", "bob", 4))
	})
}

// WithChange gives back what the locked tokens hold beyond the outputs, to the owner,
// in the outputs' kind, and leaves the outputs it was given as they were.
func TestWithChange(t *testing.T) {
	eur := gbp("bob", 4)
	eur.Identifier = "EUR"
	for _, tc := range []struct {
		name    string
		locked  []Token
		outputs []Token
		want    []Token
	}{
		{"exact", []Token{gbp("alice", 3), gbp("alice", 4)}, []Token{gbp("bob", 7)}, []Token{gbp("bob", 7)}},
		{"change", []Token{gbp("alice", 5), gbp("alice", 5)}, []Token{gbp("bob", 7)}, []Token{gbp("bob", 7), gbp("alice", 3)}},
		{"several outputs", []Token{gbp("alice", 10)}, []Token{gbp("bob", 2), gbp("carol", 3)},
			[]Token{gbp("bob", 2), gbp("carol", 3), gbp("alice", 5)}},
		{"the outputs' kind", []Token{{Owner: "alice", Identifier: "EUR", Amount: 9}}, []Token{eur},
			[]Token{eur, {Owner: "alice", Type: "fiat", Identifier: "EUR", Issuer: "bank", Notary: "notary", Amount: 5}}},
		{"not covered: no change", []Token{gbp("alice", 2)}, []Token{gbp("bob", 7)}, []Token{gbp("bob", 7)}},
		{"no outputs", []Token{gbp("alice", 2)}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := append([]Token(nil), tc.outputs...)
			got := WithChange(tc.locked, "alice", tc.outputs...)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, given, tc.outputs, "the outputs given are left as they were")
		})
	}
	// The change, spent after a real Select, balances.
	v := openVault(t, sqliteDB.new(t).open(t, 0), Config{})
	ctx := t.Context()
	_, err := v.Issue(ctx, newTx(), gbp("alice", 5), gbp("alice", 5))
	require.NoError(t, err)
	tx := newTx()
	locked, err := v.Select(ctx, tx, "alice", 7, Filter{Identifier: "GBP"}, time.Minute)
	require.NoError(t, err)
	_, created, err := v.Spend(ctx, tx, WithChange(locked, "alice", gbp("bob", 7)))
	require.NoError(t, err)
	require.Len(t, created, 2)
	assert.Equal(t, map[string][2]int64{"alice": {3, 3}, "bob": {7, 7}}, balances(t, v, "alice", "bob"))
}
