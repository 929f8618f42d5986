package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
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
// eight pay from one owner. Each compares refset's custody (examples/custody/tokens)
// with the same payments written by hand with sqlx (custody_sqlx_test.go), each side
// on a schema of its own in the same database:
//
//   - refset, sqlx: each side alone, b.N payments;
//   - paired: both sides set up, then b.N payments of each in rounds of
//     custodyRound, the sides taking turns at going first, so that both see the
//     machine in the same moods; it reports each side's cycles/s and
//     throughput-ratio, refset's over sqlx's.

const (
	custodySelectors = 8
	custodyTokens    = 100_000
	custodyRound     = 500
)

// BenchmarkSelectAndSpend: 8 selectors paying between 1,000 owners of 100,000 tokens.
func BenchmarkSelectAndSpend(b *testing.B) { selectAndSpend(b, 1000) }

// BenchmarkSelectAndSpendOneOwner: all 8 selectors pay from one owner's 100,000 tokens.
func BenchmarkSelectAndSpendOneOwner(b *testing.B) { selectAndSpend(b, 1) }

func selectAndSpend(b *testing.B, owners int) {
	for _, s := range []struct {
		name string
		open custodySide
	}{{"refset", refsetCustody}, {"sqlx", sqlxCustody}} {
		b.Run(s.name, func(b *testing.B) {
			c := s.open(b, owners)
			cpu := startCPU()
			b.ResetTimer()
			c.pay(b, b.N)
			b.StopTimer()
			c.report(b, "")
			cpu.report(b, b.N)
			c.audit(b)
		})
	}
	b.Run("paired", func(b *testing.B) {
		sides := [2]*custody{refsetCustody(b, owners), sqlxCustody(b, owners)}
		var spent [2]time.Duration
		b.ResetTimer()
		for i, round := 0, 0; i < b.N; i, round = i+custodyRound, round+1 {
			n := min(custodyRound, b.N-i)
			for k := range 2 {
				s := (round + k) % 2
				start := time.Now()
				sides[s].pay(b, n)
				spent[s] += time.Since(start)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/spent[0].Seconds(), "refset-cycles/s")
		b.ReportMetric(float64(b.N)/spent[1].Seconds(), "sqlx-cycles/s")
		b.ReportMetric(spent[1].Seconds()/spent[0].Seconds(), "throughput-ratio")
		sides[0].report(b, "refset-")
		for _, c := range sides {
			c.audit(b)
		}
	})
}

// payer is one replica's way of paying: it selects and locks amount of from's GBP,
// then spends it to `to` with change back to from. A wrapped
// tokens.ErrInsufficientFunds means from could not pay, which the benchmark allows.
type payer interface {
	pay(ctx context.Context, tx, from, to string, amount int64) error
	stats() tokens.LockStats
}

// custodySide opens one side's replicas on a fresh schema and issues the tokens.
type custodySide func(b *testing.B, owners int) *custody

// custody is one side, set up: its replicas, its owners and a check of its books.
type custody struct {
	replicas []payer
	owners   int
	books    func() error
	paid     atomic.Int64 // payments started, for transaction IDs and seeds
}

// pay makes n payments, eight at a time, one goroutine per replica.
func (c *custody) pay(b *testing.B, n int) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for _, p := range c.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for left.Add(-1) >= 0 {
				i := c.paid.Add(1)
				rng := rand.New(rand.NewPCG(uint64(i), 3))
				from, to := rng.IntN(c.owners), rng.IntN(c.owners)
				err := p.pay(ctx, fmt.Sprintf("tx-%d", i), ownerName(from), ownerName(to), int64(1+rng.IntN(12)))
				if err != nil && !errors.Is(err, tokens.ErrInsufficientFunds) {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// report adds cycles/s (the side alone) and the share of lock attempts that lost a
// race.
func (c *custody) report(b *testing.B, prefix string) {
	if prefix == "" {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	}
	var st tokens.LockStats
	for _, p := range c.replicas {
		st.Attempts += p.stats().Attempts
		st.LostRaces += p.stats().LostRaces
	}
	b.ReportMetric(100*float64(st.LostRaces)/float64(max(st.Attempts, 1)), prefix+"%lost-races")
}

func (c *custody) audit(b *testing.B) {
	b.Helper()
	if err := c.books(); err != nil {
		b.Fatal(err)
	}
}

// cpuClock is the machine's busy CPU time when a measurement started.
type cpuClock struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuClock {
	start, ok := machineCPU()
	return cpuClock{start, ok}
}

// report adds the whole machine's CPU time per cycle since the clock started (Go
// client, server and kernel together), where the machine tells it.
func (c cpuClock) report(b *testing.B, cycles int) {
	now, ok := machineCPU()
	if c.ok && ok {
		b.ReportMetric(float64((now-c.start).Microseconds())/float64(cycles), "cpu-us/cycle")
	}
}

func ownerName(i int) string { return fmt.Sprintf("owner-%04d", i) }

// issueAmount is the amount of every owner's i-th token: 1 to 10.
func issueAmount(i int) int64 { return int64(1 + i%10) }

// refsetCustody: replicas are tokens.Vaults, each on a postgres.DB of its own.
// custodyDriver is the database/sql driver both sides of the custody benchmarks use:
// REFSET_BENCH_DRIVER ("postgres" for lib/pq, the default, or "pgx"), so a run keeps
// the earlier benchmark names and both sides always share a driver.
func custodyDriver() string {
	if d := os.Getenv("REFSET_BENCH_DRIVER"); d != "" {
		return d
	}
	return postgres.DriverLibPQ
}

func refsetCustody(b *testing.B, owners int) *custody {
	b.Helper()
	dsn := pgtest.DSN(b)
	c := &custody{owners: owners}
	var first *tokens.Vault
	for range custodySelectors {
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 2, Driver: custodyDriver()})
		must(b, err)
		b.Cleanup(func() { db.Close() })
		v, err := tokens.Open(context.Background(), db, tokens.Config{LockWait: 10 * time.Second})
		must(b, err)
		c.replicas = append(c.replicas, vaultPayer{v})
		if first == nil {
			first = v
		}
	}
	for o := range owners {
		toks := make([]tokens.Token, custodyTokens/owners)
		for i := range toks {
			toks[i] = tokens.Token{Owner: ownerName(o), Type: "fiat", Identifier: "GBP",
				Issuer: "bank", Notary: "notary", Amount: issueAmount(i)}
		}
		_, err := first.Issue(context.Background(), fmt.Sprintf("issue-%d", o), toks...)
		must(b, err)
	}
	c.books = func() error {
		a, err := first.Audit(context.Background())
		if err == nil && !a.Balanced() {
			err = fmt.Errorf("books do not balance: %+v", a)
		}
		return err
	}
	return c
}

type vaultPayer struct{ v *tokens.Vault }

func (p vaultPayer) stats() tokens.LockStats { return p.v.Stats() }

func (p vaultPayer) pay(ctx context.Context, tx, from, to string, amount int64) error {
	locked, err := p.v.Select(ctx, tx, from, amount, tokens.Filter{Identifier: "GBP"}, 30*time.Second)
	if err != nil {
		return err
	}
	_, _, err = p.v.Spend(ctx, tx, payment(locked, from, to, amount))
	return err
}

// payment is the outputs that pay amount of the locked tokens to `to`, change to from.
func payment(locked []tokens.Token, from, to string, amount int64) []tokens.Token {
	var sum int64
	for _, t := range locked {
		sum += t.Amount
	}
	outputs := []tokens.Token{{Owner: to, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: amount}}
	if sum > amount {
		outputs = append(outputs, tokens.Token{Owner: from, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: sum - amount})
	}
	return outputs
}
