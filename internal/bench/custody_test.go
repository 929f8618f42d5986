package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/store/postgres"
)

// The custody benchmarks: select-and-spend cycles (two transactions each) by eight
// concurrent selectors, each a replica with its own connection pool, on 100,000
// tokens over 1,000 owners; and the share of lock attempts that lose a race when all
// eight pay from one owner.

func custodyVaults(b *testing.B, n int) []*tokens.Vault {
	b.Helper()
	dsn := pgtest.DSN(b)
	var vs []*tokens.Vault
	for range n {
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		v, err := tokens.Open(context.Background(), db, tokens.Config{LockWait: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

func custodyIssue(b *testing.B, v *tokens.Vault, owners, each int) {
	b.Helper()
	for o := range owners {
		toks := make([]tokens.Token, each)
		for i := range toks {
			toks[i] = tokens.Token{Owner: fmt.Sprintf("owner-%04d", o), Type: "fiat", Identifier: "GBP",
				Issuer: "bank", Notary: "notary", Amount: int64(1 + i%10)}
		}
		if _, err := v.Issue(context.Background(), fmt.Sprintf("issue-%d", o), toks...); err != nil {
			b.Fatal(err)
		}
	}
}

// cycle selects amount of from's GBP and spends it to `to`, change back to from.
func cycle(ctx context.Context, v *tokens.Vault, tx, from, to string, amount int64) error {
	locked, err := v.Select(ctx, tx, from, amount, tokens.Filter{Identifier: "GBP"}, 30*time.Second)
	if err != nil {
		return err
	}
	var sum int64
	for _, t := range locked {
		sum += t.Amount
	}
	outputs := []tokens.Token{{Owner: to, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: amount}}
	if sum > amount {
		outputs = append(outputs, tokens.Token{Owner: from, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: sum - amount})
	}
	_, _, err = v.Spend(ctx, tx, outputs)
	return err
}

func selectAndSpend(b *testing.B, owners int) {
	const selectors = 8
	vs := custodyVaults(b, selectors)
	custodyIssue(b, vs[0], owners, 100_000/owners)
	var next, seq atomic.Int64
	b.SetParallelism((selectors + 1) / 2) // GOMAXPROCS (2 here) times this: eight goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		v := vs[int(next.Add(1)-1)%selectors]
		rng := rand.New(rand.NewPCG(uint64(next.Load()), 3))
		ctx := context.Background()
		for pb.Next() {
			n := seq.Add(1)
			from, to := rng.IntN(owners), rng.IntN(owners)
			err := cycle(ctx, v, fmt.Sprintf("tx-%d", n), fmt.Sprintf("owner-%04d", from), fmt.Sprintf("owner-%04d", to), int64(1+rng.IntN(12)))
			if err != nil && !errors.Is(err, tokens.ErrInsufficientFunds) {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	var st tokens.LockStats
	for _, v := range vs {
		st.Attempts += v.Stats().Attempts
		st.LostRaces += v.Stats().LostRaces
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	b.ReportMetric(100*float64(st.LostRaces)/float64(max(st.Attempts, 1)), "%lost-races")
	a, err := vs[0].Audit(context.Background())
	if err != nil || !a.Balanced() {
		b.Fatalf("books do not balance: %+v %v", a, err)
	}
}

// BenchmarkSelectAndSpend: 8 selectors paying between 1,000 owners of 100,000 tokens.
func BenchmarkSelectAndSpend(b *testing.B) { selectAndSpend(b, 1000) }

// BenchmarkSelectAndSpendOneOwner: all 8 selectors pay from one owner's 100,000 tokens.
func BenchmarkSelectAndSpendOneOwner(b *testing.B) { selectAndSpend(b, 1) }
