// Command custody demonstrates token custody on refset (package tokens): tokens
// issued to a few owners, payments made concurrently by several replicas, a lock that
// expires and is taken over, and a summary with the conservation check.
//
//	go run ./examples/custody                  # a SQLite file in a temporary directory
//	go run ./examples/custody -postgres "postgres://user@localhost/db?sslmode=disable"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/examples/internal/exampledb"
)

func main() {
	pgDSN := flag.String("postgres", "", "PostgreSQL DSN; the demo's tables go in a new schema, dropped at the end")
	replicas := flag.Int("replicas", 4, "replicas, each with its own connection pool")
	payments := flag.Int("payments", 400, "payments to make")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "%s\n\nUsage: %s [flags]\n", `custody demonstrates token custody on refset: tokens issued to a few owners,
payments made concurrently by several replicas, a lock that expires and is taken over,
and a summary with the conservation check (exit status 1 if the books do not balance).`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	log.SetFlags(0)
	ok, err := run(context.Background(), *pgDSN, *replicas, *payments)
	if err != nil {
		log.Fatal("custody: ", err)
	}
	if !ok {
		os.Exit(1)
	}
}

var owners = []string{"alice", "bob", "carol", "dave"}

func run(ctx context.Context, pgDSN string, replicas, payments int) (bool, error) {
	start := time.Now()
	demo, err := exampledb.New(ctx, "custody", pgDSN)
	if err != nil {
		return false, err
	}
	defer demo.Close()
	var vaults []*tokens.Vault
	for range replicas {
		db, err := demo.Open(ctx, 4)
		if err != nil {
			return false, err
		}
		v, err := tokens.Open(ctx, db, tokens.Config{LockWait: 10 * time.Second})
		if err != nil {
			return false, err
		}
		vaults = append(vaults, v)
	}
	bank := vaults[0]

	// Issue: every owner gets 100 tokens of GBP of assorted sizes.
	var issued int64
	for _, o := range owners {
		var toks []tokens.Token
		for i := range 100 {
			toks = append(toks, gbp(o, int64(1+i%10)))
			issued += int64(1 + i%10)
		}
		if _, err := bank.Issue(ctx, "issue-"+o, toks...); err != nil {
			return false, err
		}
	}

	// Payments between random owners, made by all replicas at once.
	var paid, refused atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, len(vaults))
	for _, v := range vaults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				rng := rand.New(rand.NewPCG(uint64(n), 1))
				from, to := owners[rng.IntN(len(owners))], owners[rng.IntN(len(owners))]
				err := pay(ctx, v, fmt.Sprintf("pay-%d", n), from, to, int64(1+rng.IntN(40)))
				switch {
				case err == nil:
					paid.Add(1)
				case errors.Is(err, tokens.ErrInsufficientFunds):
					refused.Add(1)
				default:
					errs <- err
					for range work {
					}
					return
				}
			}
		}()
	}
	for n := range payments {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		return false, err
	}

	// A lock that expires: a transaction locks some of alice's tokens and vanishes;
	// after the lock's time-to-live another transaction takes the same tokens, and the
	// first one's unlock then does nothing.
	abandoned, err := bank.Select(ctx, "abandoned", "alice", 5, tokens.Filter{Identifier: "GBP"}, 200*time.Millisecond)
	if err != nil {
		return false, err
	}
	time.Sleep(300 * time.Millisecond)
	var want int64
	mine := map[string]bool{}
	for _, t := range abandoned {
		want += t.Amount
		mine[t.TokenID] = true
	}
	taken, err := vaults[len(vaults)-1].Select(ctx, "takeover", "alice", want,
		tokens.Filter{Predicate: func(t tokens.Token) bool { return mine[t.TokenID] }}, time.Minute)
	if err != nil {
		return false, fmt.Errorf("taking over the expired lock: %w", err)
	}
	staleUnlock, err := bank.Release(ctx, "abandoned")
	if err != nil {
		return false, err
	}
	if _, err := bank.Release(ctx, "takeover"); err != nil {
		return false, err
	}
	stats, err := bank.Collect(ctx)
	if err != nil {
		return false, err
	}

	audit, err := bank.Audit(ctx)
	if err != nil {
		return false, err
	}
	var attempts, lost int64
	for _, v := range vaults {
		attempts += v.Stats().Attempts
		lost += v.Stats().LostRaces
	}
	fmt.Printf("  %-34s %d\n", "replicas", replicas)
	fmt.Printf("  %-34s %d GBP in %d tokens\n", "issued", issued, 100*len(owners))
	fmt.Printf("  %-34s %d paid, %d refused (insufficient funds)\n", "payments", paid.Load(), refused.Load())
	fmt.Printf("  %-34s %d, %d lost a race (%.1f%%)\n", "lock attempts", attempts, lost, 100*float64(lost)/float64(max(attempts, 1)))
	fmt.Printf("  %-34s %d tokens taken over; stale unlock released %d\n", "expired lock", len(taken), staleUnlock)
	fmt.Printf("  %-34s %d\n", "clean-up: holds expired", stats.HoldsExpired)
	for _, o := range owners {
		total, _, err := bank.Balance(ctx, o, "GBP")
		if err != nil {
			return false, err
		}
		fmt.Printf("  %-34s %d GBP\n", "balance of "+o, total)
	}
	fmt.Printf("  %-34s issued %d = remaining %d: %v\n", "conservation", audit.Issued, audit.Remaining,
		audit.Issued == audit.Remaining && audit.Unconserved == 0)
	fmt.Printf("  %-34s created %d = spent %d + remaining %d: %v\n", "every token spent once or unspent", audit.Created, audit.Spent, audit.Remaining,
		audit.Created == audit.Spent+audit.Remaining)
	fmt.Printf("  %-34s %v\n", "no token locked or spent twice", audit.LockedTwice == 0 && audit.SpentButPresent == 0 && audit.Unheld == 0)
	fmt.Printf("  %-34s %v\n", "elapsed", time.Since(start).Round(time.Millisecond))
	ok := audit.Balanced() && staleUnlock == 0 && len(taken) == len(abandoned)
	if !ok {
		fmt.Println("  FAILED: an invariant does not hold")
	}
	return ok, nil
}

// pay locks amount of from's GBP and spends it to `to`, with change back to from.
func pay(ctx context.Context, v *tokens.Vault, tx, from, to string, amount int64) error {
	locked, err := v.Select(ctx, tx, from, amount, tokens.Filter{Identifier: "GBP"}, 10*time.Second)
	if err != nil {
		return err
	}
	_, _, err = v.Spend(ctx, tx, tokens.WithChange(locked, from, gbp(to, amount)))
	return err
}

func gbp(owner string, amount int64) tokens.Token {
	return tokens.Token{Owner: owner, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: amount}
}
