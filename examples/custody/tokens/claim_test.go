package tokens

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// generous bounds a refusal from a large wallet: far above what the claim needs (well
// under a second on a quiet machine; a CI run under the race detector beside other
// work once took more than 10 s), below what a claim quadratic in the tokens it took
// needed (more than two minutes), so that neither a loaded machine nor a slow one makes
// it flaky. The claim's cost is guarded without a clock by
// TestInsufficientClaimLocksLittle.
const generous = 60 * time.Second

// claimCheckAfter is how many tokens custody_claim takes before it asks, unlocked,
// whether the owner can cover the amount at all (sql/postgres/tables/0008_claim.sql).
const claimCheckAfter = 32

// fillWallet gives owner n GBP tokens of 1 to 5 and returns their sum.
func fillWallet(t *testing.T, v *Vault, owner string, n int) int64 {
	t.Helper()
	var sum int64
	for left := n; left > 0; left -= 10_000 {
		toks := make([]Token, min(left, 10_000))
		for i := range toks {
			toks[i] = gbp(owner, 1+int64(i%5))
			sum += toks[i].Amount
		}
		_, err := v.Issue(t.Context(), newTx(), toks...)
		require.NoError(t, err)
	}
	return sum
}

// Paying more than a wallet of 100,000 tokens holds is refused with
// ErrInsufficientFunds at once, by Pay and by Select alike, and a payer of the same
// wallet meanwhile is not held up by it: the refusal takes none of the wallet's tokens
// from others while it looks. A payment that does need half the wallet is paid. The claim used to test every row it read against
// every token it had claimed (minutes for the refusal, the whole wallet locked
// meanwhile, and a concurrent payer told ErrLocked).
func TestLargeWalletPaysLinearly(t *testing.T) {
	eachBackend(t, []backend{sqliteDB, pgxDB}, func(t *testing.T, b backend) {
		vs := openVaults(t, b, 2, Config{})
		balance := fillWallet(t, vs[0], "whale", walletSize)

		for _, c := range []struct {
			name string
			try  func(ctx context.Context) error
		}{
			{"pay", func(ctx context.Context) error {
				_, _, err := vs[0].Pay(ctx, newTx(), "whale", gbp("minnow", 10*balance))
				return err
			}},
			{"select", func(ctx context.Context) error {
				_, err := vs[0].Select(ctx, newTx(), "whale", balance+1, Filter{Identifier: "GBP"}, time.Minute)
				return err
			}},
		} {
			ctx, cancel := context.WithTimeout(t.Context(), generous)
			err := c.try(ctx)
			cancel()
			require.ErrorIs(t, err, ErrInsufficientFunds, "%s of more than the balance", c.name)
		}

		// Refusals over and over on one pool, small payments on the other: each small
		// payment finds tokens at once (LockWait is zero, so a wallet held by the
		// refusals would fail it with ErrLocked), and on SQLite the writer too (a
		// refusal takes none: TestRefusalTakesNoWriter).
		ctx, cancel := context.WithTimeout(t.Context(), 3*generous)
		defer cancel()
		done, refusing := make(chan struct{}), make(chan struct{})
		var refusals int
		var wg sync.WaitGroup
		wg.Go(func() {
			defer func() {
				if refusals == 0 {
					close(refusing)
				}
			}()
			for {
				select {
				case <-done:
					return
				default:
				}
				_, _, err := vs[0].Pay(ctx, newTx(), "whale", gbp("minnow", 10*balance))
				if !assert.ErrorIs(t, err, ErrInsufficientFunds) {
					return
				}
				if refusals++; refusals == 1 {
					close(refusing)
				}
			}
		})
		<-refusing // the payments start while refusals run back to back
		for range 20 {
			_, _, err := vs[1].Pay(ctx, newTx(), "whale", gbp("minnow", 7))
			require.NoError(t, err, "a small payment beside the refusals")
		}
		close(done)
		wg.Wait()
		t.Logf("%d refusals beside 20 payments", refusals)

		audit(t, vs[0])
		if !b.postgres {
			return // SQLite's general path takes more than the bound for this (left alone: not a claim)
		}
		// Half the wallet: tens of thousands of tokens claimed in one payment, paid.
		// Its bound only stops a hang: the claim's linear cost is guarded by what
		// TestInsufficientClaimLocksLittle counts, not by a clock.
		ctx, cancel = context.WithTimeout(t.Context(), 2*generous)
		defer cancel()
		spent, _, err := vs[0].Pay(ctx, newTx(), "whale", gbp("minnow", balance/2))
		require.NoError(t, err, "a payment of half the wallet")
		assert.Greater(t, len(spent), walletSize/4)
		audit(t, vs[0])
	})
}

// On SQLite, whose transactions take the one writer, a refusal needs no writer:
// while another connection holds it, paying or selecting more than the wallet holds
// is refused with ErrInsufficientFunds, and selecting funds others locked with
// ErrLocked, at once. A refusal that took the writer kept payers of other processes
// from it: refusals back to back on one pool held a payment on another for more than
// a minute, as SQLite gives a freed writer to whichever waiter asks first, not to the
// one that waited longest.
func TestRefusalTakesNoWriter(t *testing.T) {
	where := sqliteDB.new(t)
	v := openVault(t, where.open(t, 4), Config{})
	fillWallet(t, v, "whale", 200) // more than a page of candidates: the sum is asked
	small := fillWallet(t, v, "shrimp", 10)
	pinned := fillWallet(t, v, "pinned", 10)
	_, err := v.Select(t.Context(), newTx(), "pinned", pinned, Filter{}, time.Hour)
	require.NoError(t, err)

	// Another replica's unit of work holds the writer until the cases are done.
	held, release := make(chan struct{}), make(chan struct{})
	holder := where.open(t, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		err := refset.InTx(t.Context(), holder, func(ctx context.Context, tx refset.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM token_locks WHERE holder = 'nobody'`); err != nil {
				return err
			}
			close(held)
			<-release
			return nil
		})
		assert.NoError(t, err, "the unit that held the writer")
	})
	<-held

	never := Filter{Predicate: func(Token) bool { return false }}
	for _, c := range []struct {
		name string
		want error
		try  func(ctx context.Context) error
	}{
		{"pay more than a large wallet", ErrInsufficientFunds, func(ctx context.Context) error {
			_, _, err := v.Pay(ctx, newTx(), "whale", gbp("minnow", 1_000_000))
			return err
		}},
		{"pay more than a small wallet", ErrInsufficientFunds, func(ctx context.Context) error {
			_, _, err := v.Pay(ctx, newTx(), "shrimp", gbp("minnow", small+1))
			return err
		}},
		{"select more than a large wallet", ErrInsufficientFunds, func(ctx context.Context) error {
			_, err := v.Select(ctx, newTx(), "whale", 1_000_000, Filter{Identifier: "GBP"}, time.Minute)
			return err
		}},
		{"select what a predicate refuses", ErrInsufficientFunds, func(ctx context.Context) error {
			_, err := v.Select(ctx, newTx(), "whale", 1, never, time.Minute)
			return err
		}},
		{"select funds others locked", ErrLocked, func(ctx context.Context) error {
			_, err := v.Select(ctx, newTx(), "pinned", 1, Filter{}, time.Minute)
			return err
		}},
		{"pay with funds others locked", ErrLocked, func(ctx context.Context) error {
			_, _, err := v.Pay(ctx, newTx(), "pinned", gbp("minnow", 1))
			return err
		}},
	} {
		// The bound stops a hang only: a refusal that waits for the writer waits
		// out the busy timeout (5 s) on each of its attempts; one that does not
		// takes milliseconds.
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		err := c.try(ctx)
		cancel()
		assert.ErrorIs(t, err, c.want, c.name)
	}
	close(release)
	wg.Wait()

	// With the writer free again, the same vault pays.
	_, _, err = v.Pay(t.Context(), newTx(), "shrimp", gbp("minnow", small))
	require.NoError(t, err)
	audit(t, v)
}

// An insufficient payment or select on PostgreSQL row-locks a few of the wallet's
// tokens at most, not the wallet: what the claims' cursors locked is counted in their
// plans (auto_explain with ANALYZE), so the bound does not depend on timing.
func TestInsufficientClaimLocksLittle(t *testing.T) {
	ctx := t.Context()
	log, db, _ := refsettest.PlanGuard(t)
	v := openVault(t, db, Config{})
	const wallet = 5_000 // enough to tell a few rows from all; small enough for the old claim
	explaining(t, db.Pool().DB, false)
	balance := fillWallet(t, v, "whale", wallet)
	explaining(t, db.Pool().DB, true)

	for _, c := range []struct {
		name string
		try  func() error
	}{
		{"pay", func() error {
			_, _, err := v.Pay(ctx, newTx(), "whale", gbp("minnow", balance+1))
			return err
		}},
		{"select", func() error {
			_, err := v.Select(ctx, newTx(), "whale", balance+1, Filter{Identifier: "GBP"}, time.Minute)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			logged := log.PlansOf(t, func() { err = c.try() })
			require.ErrorIs(t, err, ErrInsufficientFunds)
			var locked float64
			var claims int
			for _, p := range logged {
				if !strings.Contains(p.Query, "SKIP LOCKED") {
					continue
				}
				claims++
				for _, n := range p.Nodes() {
					if n.Type == "LockRows" {
						locked += n.Rows
					}
				}
			}
			assert.Positive(t, claims, "auto_explain logged no claim: the guard sees nothing (%d plans)", len(logged))
			assert.LessOrEqual(t, locked, float64(2*claimCheckAfter), "rows locked by a claim of more than the wallet holds (%d tokens)", wallet)
		})
	}
	audit(t, v)
}
