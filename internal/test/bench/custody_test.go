package bench

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
)

// The custody benchmarks: payments by eight concurrent payers, each a replica with its
// own connection pool, on Postgres.
//
// BenchmarkSelectAndSpend and BenchmarkPayOneStatement pay between 1,000 owners of
// 100,000 tokens, the first in two steps (Select, one transaction, then Spend,
// another), the second in one statement (Vault.Pay). Each compares refset's custody
// (examples/custody/tokens) with the same payments written by hand with sqlx
// (custody_sqlx_test.go), each side on a schema of its own in the same database:
//
//   - refset, sqlx: each side alone, b.N payments;
//   - paired: both sides set up, then b.N payments of each in rounds of
//     custodyRound, the sides taking turns at going first, so that both see the
//     machine in the same moods; it reports each side's cycles/s and
//     throughput-ratio, refset's over sqlx's.
//
// BenchmarkCustodyWallet, BenchmarkCustodySmallPool and BenchmarkCustodyHotOwner pair
// refset with itself on two workloads (wallet sizes, pool sizes) or measure one
// contended workload; see each. They pay with Vault.Pay, or with Select then Spend
// when REFSET_BENCH_CUSTODY_PATH=twostep (the same names, to compare the paths).
//
// Each side's tables are analyzed once its tokens are issued, as autovacuum soon does in
// service: with statistics, the planner sees an owner's whole wallet behind every claim
// (which JIT-compiled custody's claims on every call until they ran with jit off).
//
// With -benchtime Nx (N > 1), go test runs each benchmark once with b.N = 1 before the
// run it reports; the custody benchmarks skip that first run rather than issue their
// tokens twice (see warmUp).

const (
	custodySelectors = 8
	custodyTokens    = 100_000
	custodyRound     = 500
)

// workload is what a benchmark's payers pay: the owners, their tokens, and how each
// payment is drawn.
type workload struct {
	owners, perOwner int
	// recycled: every token is worth 1, and a payment re-mints the tokens it spends,
	// as tokens of 1, to its payer, so every wallet keeps its size and value and no
	// payment fails for want of funds; amount draws how many. Otherwise the tokens
	// are worth 1 to 10 (issueAmount) and a payment pays 1 to 12 from a random owner
	// to a random owner, its change back to the payer.
	recycled bool
	amount   func(rng *rand.Rand) int64
}

// spread: 100,000 tokens over 1,000 owners, payments between random owners.
var spread = workload{owners: 1000, perOwner: custodyTokens / 1000}

// oneToFive draws a recycled payment of 1 to 5 tokens.
func oneToFive(rng *rand.Rand) int64 { return int64(1 + rng.IntN(5)) }

func (w workload) tokens() int { return w.owners * w.perOwner }

// draw is the i-th payment.
func (w workload) draw(i int64) payment {
	rng := rand.New(rand.NewPCG(uint64(i), 3))
	if w.recycled {
		from := ownerName(rng.IntN(w.owners))
		return payment{from: from, to: from, amount: w.amount(rng), units: true}
	}
	from, to := rng.IntN(w.owners), rng.IntN(w.owners)
	return payment{from: ownerName(from), to: ownerName(to), amount: int64(1 + rng.IntN(12))}
}

// issued is the i-th token of an owner.
func (w workload) issued(i int) int64 {
	if w.recycled {
		return 1
	}
	return issueAmount(i)
}

// payment is one payment of amount GBP from `from` to `to`.
type payment struct {
	from, to string
	amount   int64
	units    bool // paid as tokens of 1, from tokens of 1: no change
}

// outputs are what the payment creates, given the sum of the tokens it spends.
func (p payment) outputs(spent int64) []tokens.Token {
	gbp := func(owner string, amount int64) tokens.Token {
		return tokens.Token{Owner: owner, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: amount}
	}
	var out []tokens.Token
	if p.units {
		for range p.amount {
			out = append(out, gbp(p.to, 1))
		}
	} else {
		out = append(out, gbp(p.to, p.amount))
	}
	if spent > p.amount {
		out = append(out, gbp(p.from, spent-p.amount))
	}
	return out
}

// payer is one replica's way of paying. A wrapped tokens.ErrInsufficientFunds means
// the payer could not pay, which the benchmarks of random payments allow.
type payer interface {
	pay(ctx context.Context, tx string, p payment) error
	stats() tokens.LockStats
}

// custodySide opens one side's replicas on a fresh schema and issues the tokens.
type custodySide func(b *testing.B, w workload) *custody

// custody is one side, set up: its replicas, its workload and a check of its books.
type custody struct {
	replicas []payer
	work     workload
	books    func() error
	paid     atomic.Int64 // payments started, for transaction IDs and draws
	// insufficient counts payments refused with ErrInsufficientFunds.
	insufficient atomic.Int64
	app          string  // the application_name of the side's connections
	admin        *sql.DB // a connection of no side, to find the side's backends
}

// tag gives a side's connections an application_name of their own (custody_cpu_test.go)
// and opens the admin pool; it returns dsn with the name.
func (c *custody) tag(b *testing.B, dsn string) string {
	b.Helper()
	admin, err := sql.Open(custodyDriver(), dsn)
	must(b, err)
	b.Cleanup(func() { admin.Close() })
	c.app, c.admin = "custody-bench-"+tokens.NewID()[:12], admin
	return withApplicationName(b, dsn, c.app)
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
				err := p.pay(ctx, fmt.Sprintf("tx-%d", i), c.work.draw(i))
				if errors.Is(err, tokens.ErrInsufficientFunds) {
					c.insufficient.Add(1)
				} else if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// lockStats adds up the replicas' lock attempts and lost races.
func (c *custody) lockStats() tokens.LockStats {
	var st tokens.LockStats
	for _, p := range c.replicas {
		st.Attempts += p.stats().Attempts
		st.LostRaces += p.stats().LostRaces
	}
	return st
}

// lost is the share of lock attempts that lost a race, in percent.
func (c *custody) lost() float64 {
	st := c.lockStats()
	return 100 * float64(st.LostRaces) / float64(max(st.Attempts, 1))
}

// report adds cycles/s (the side alone) and the share of lock attempts that lost a
// race.
func (c *custody) report(b *testing.B, prefix string) {
	if prefix == "" {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	}
	b.ReportMetric(c.lost(), prefix+"%lost-races")
}

func (c *custody) audit(b *testing.B) {
	b.Helper()
	if err := c.books(); err != nil {
		b.Fatal(err)
	}
}

// alone measures one side by itself: b.N payments, cycles/s, lost races and CPU.
func alone(b *testing.B, open custodySide, w workload) {
	if warmUp(b) {
		return
	}
	c := open(b, w)
	measurePayments(b, c)
	c.audit(b)
}

// measurePayments makes b.N payments on one side and reports cycles/s, lost races and CPU.
func measurePayments(b *testing.B, c *custody) {
	cpu, srv, stmts := startCPU(), startServerClock(b, c.admin, c.app), startStatementClock(b, c.admin)
	b.ResetTimer()
	c.pay(b, b.N)
	b.StopTimer()
	c.report(b, "")
	cpu.report(b, b.N)
	srv.report(b, b.N)
	stmts.log(b, b.N)
}

// paired makes b.N payments on each of two sides set up beforehand, in rounds of
// custodyRound, the sides taking turns at going first, and returns each side's
// cycles/s.
func paired(b *testing.B, sides [2]*custody) (rate [2]float64) {
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
	for s := range sides {
		rate[s] = float64(b.N) / spent[s].Seconds()
	}
	return rate
}

// warmUp reports whether this run is the one go test makes with b.N = 1 before the
// run it reports, under -benchtime Nx with N > 1: its figures are thrown away, so
// the custody benchmarks skip it rather than set up 100,000 tokens for one payment.
func warmUp(b *testing.B) bool {
	f := flag.Lookup("test.benchtime")
	if b.N != 1 || f == nil {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(f.Value.String(), "x"))
	return strings.HasSuffix(f.Value.String(), "x") && err == nil && n > 1
}

// BenchmarkSelectAndSpend: 8 payers paying between 1,000 owners of 100,000 tokens, each
// payment a Select then a Spend.
func BenchmarkSelectAndSpend(b *testing.B) { againstSQLX(b, spread, twoStep, sqlxTwoStep) }

// BenchmarkSelectAndSpendOneOwner: all 8 payers pay from one owner's 100,000 tokens.
func BenchmarkSelectAndSpendOneOwner(b *testing.B) {
	againstSQLX(b, workload{owners: 1, perOwner: custodyTokens}, twoStep, sqlxTwoStep)
}

// BenchmarkPayOneStatement: the payments of BenchmarkSelectAndSpend, each in one
// statement that selects, locks and spends (Vault.Pay), against the same written by
// hand with sqlx as one statement.
func BenchmarkPayOneStatement(b *testing.B) { againstSQLX(b, spread, oneStatement, sqlxOneStatement) }

// againstSQLX runs a workload on refset and on sqlx, alone and paired.
func againstSQLX(b *testing.B, w workload, path refsetPath, sqlxPath sqlxPath) {
	refsetSide := func(b *testing.B, w workload) *custody { return refsetCustody(b, w, path) }
	sqlxSide := func(b *testing.B, w workload) *custody { return sqlxCustody(b, w, sqlxPath) }
	b.Run("refset", func(b *testing.B) { alone(b, refsetSide, w) })
	b.Run("sqlx", func(b *testing.B) { alone(b, sqlxSide, w) })
	b.Run("paired", func(b *testing.B) {
		if warmUp(b) {
			return
		}
		sides := [2]*custody{refsetSide(b, w), sqlxSide(b, w)}
		rate := paired(b, sides)
		b.ReportMetric(rate[0], "refset-cycles/s")
		b.ReportMetric(rate[1], "sqlx-cycles/s")
		b.ReportMetric(rate[0]/rate[1], "throughput-ratio")
		sides[0].report(b, "refset-")
		for _, c := range sides {
			c.audit(b)
		}
	})
}

// BenchmarkCustodyWallet: does a payment cost more from a large wallet? 100,000 tokens
// of 1 either way, 8 payers each paying 1 to 5 tokens back to its payer (recycled):
// small wallets are 1,000 owners of 100 tokens, large ones 10 owners of 10,000. The
// table is the same size on both sides, so what differs is only how many tokens the
// payer owns. Paired; throughput-ratio is large over small (1 if the cost follows the
// amount, not the wallet); %lost-races is over both sides.
func BenchmarkCustodyWallet(b *testing.B) {
	if warmUp(b) {
		return
	}
	small := refsetCustody(b, workload{owners: 1000, perOwner: 100, recycled: true, amount: oneToFive}, defaultPath())
	large := refsetCustody(b, workload{owners: 10, perOwner: 10_000, recycled: true, amount: oneToFive}, defaultPath())
	rate := paired(b, [2]*custody{small, large})
	b.ReportMetric(rate[0], "small-cycles/s")
	b.ReportMetric(rate[1], "large-cycles/s")
	b.ReportMetric(rate[1]/rate[0], "throughput-ratio")
	st, lt := small.lockStats(), large.lockStats()
	b.ReportMetric(100*float64(st.LostRaces+lt.LostRaces)/float64(max(st.Attempts+lt.Attempts, 1)), "%lost-races")
	small.audit(b)
	large.audit(b)
}

// BenchmarkCustodyStatistics: does a wallet of 100,000 tokens pay as fast once its
// tables have statistics? One owner holds 100,000 tokens of 1; 8 payers each pay 1
// to 5 of them back to the owner (recycled), on tables analyzed once the tokens are
// issued, as autovacuum soon does in service, and on tables never analyzed
// (autovacuum kept off them). With statistics the planner sees the whole wallet
// behind every claim, and PostgreSQL JIT-compiled each claim on every call until
// custody's functions ran with jit off (256 payments/s against 2,377 without JIT).
// Paired; throughput-ratio is analyzed over never analyzed (1 when statistics change
// nothing).
func BenchmarkCustodyStatistics(b *testing.B) {
	if warmUp(b) {
		return
	}
	w := workload{owners: 1, perOwner: custodyTokens, recycled: true, amount: oneToFive}
	analyzed := newRefsetCustody(b, w, defaultPath(), true)
	bare := newRefsetCustody(b, w, defaultPath(), false)
	rate := paired(b, [2]*custody{analyzed, bare})
	b.ReportMetric(rate[0], "analyzed-cycles/s")
	b.ReportMetric(rate[1], "bare-cycles/s")
	b.ReportMetric(rate[0]/rate[1], "throughput-ratio")
	analyzed.audit(b)
	bare.audit(b)
}

// BenchmarkCustodySmallPool: a small pool of tokens, spent and re-minted over and over.
// One owner holds the pool, tokens of 1; 8 payers each pay 1 to 5 of them back to the
// owner (recycled), so the pool keeps its size, and while it is small they keep
// meeting each other's payments. Paired with the same payments from a pool of 100,000
// tokens ("big"); throughput-ratio is small over big; %lost-races is the small pool's.
func BenchmarkCustodySmallPool(b *testing.B) {
	for _, n := range []int{1000, 100} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			if warmUp(b) {
				return
			}
			small := refsetCustody(b, workload{owners: 1, perOwner: n, recycled: true, amount: oneToFive}, defaultPath())
			big := refsetCustody(b, workload{owners: 1, perOwner: custodyTokens, recycled: true, amount: oneToFive}, defaultPath())
			rate := paired(b, [2]*custody{small, big})
			b.ReportMetric(rate[0], "small-cycles/s")
			b.ReportMetric(rate[1], "big-cycles/s")
			b.ReportMetric(rate[0]/rate[1], "throughput-ratio")
			b.ReportMetric(small.lost(), "%lost-races")
			small.audit(b)
			big.audit(b)
		})
	}
}

// hotOwnerTokens is the hot owner's wallet: three tokens for each payer.
const hotOwnerTokens = 3 * custodySelectors

// BenchmarkCustodyHotOwner: 8 payers paying from one owner, each payment 3 tokens of
// 1 re-minted to the owner (recycled), from a wallet of 3 tokens per payer (24): the
// others' payments in flight hold at most 21 of them, so 3 are always there to take,
// and an ErrInsufficientFunds is false (false-insufficient counts them; it must be
// 0). Reports cycles/s and %lost-races.
func BenchmarkCustodyHotOwner(b *testing.B) {
	if warmUp(b) {
		return
	}
	c := refsetCustody(b, workload{owners: 1, perOwner: hotOwnerTokens, recycled: true,
		amount: func(*rand.Rand) int64 { return 3 }}, defaultPath())
	measurePayments(b, c)
	b.ReportMetric(float64(c.insufficient.Load()), "false-insufficient")
	c.audit(b)
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

// custodyDriver is the database/sql driver both sides of the custody benchmarks use:
// REFSET_BENCH_DRIVER ("postgres" for lib/pq, the default, or "pgx"), so a run keeps
// the earlier benchmark names and both sides always share a driver.
func custodyDriver() string {
	if d := os.Getenv("REFSET_BENCH_DRIVER"); d != "" {
		return d
	}
	return postgres.DriverLibPQ
}

// refsetPath is how refset's replicas pay: twoStep (Select then Spend) or
// oneStatement (Pay).
type refsetPath func(v *tokens.Vault) payer

// defaultPath is the path of the benchmarks that pair refset with itself: Pay, or
// Select then Spend with REFSET_BENCH_CUSTODY_PATH=twostep.
func defaultPath() refsetPath {
	if os.Getenv("REFSET_BENCH_CUSTODY_PATH") == "twostep" {
		return twoStep
	}
	return oneStatement
}

// refsetCustody: replicas are tokens.Vaults, each on a postgres.DB of its own, on
// tables analyzed once the tokens are issued.
func refsetCustody(b *testing.B, w workload, path refsetPath) *custody {
	b.Helper()
	return newRefsetCustody(b, w, path, true)
}

// custodyTables are the tables a payment reads, which the benchmarks analyze.
var custodyTables = []string{"tokens", "token_owners", "token_locks", "token_history"}

// newRefsetCustody is refsetCustody, or, when analyzed is false, the same on tables
// that are never analyzed: autovacuum is kept off them.
func newRefsetCustody(b *testing.B, w workload, path refsetPath, analyzed bool) *custody {
	b.Helper()
	c := &custody{work: w}
	dsn := c.tag(b, pgtest.DSN(b))
	var first *tokens.Vault
	var firstDB *postgres.DB
	for range custodySelectors {
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 2, Driver: custodyDriver()})
		must(b, err)
		b.Cleanup(func() { db.Close() })
		v, err := tokens.Open(context.Background(), db, tokens.Config{LockWait: 10 * time.Second})
		must(b, err)
		c.replicas = append(c.replicas, path(v))
		if first == nil {
			first, firstDB = v, db
		}
	}
	// Issued in transactions of up to 10,000 tokens, whatever the owners.
	var batch []tokens.Token
	flush := func() {
		if len(batch) > 0 {
			_, err := first.Issue(context.Background(), tokens.NewID(), batch...)
			must(b, err)
			batch = batch[:0]
		}
	}
	for o := range w.owners {
		for i := range w.perOwner {
			batch = append(batch, tokens.Token{Owner: ownerName(o), Type: "fiat", Identifier: "GBP",
				Issuer: "bank", Notary: "notary", Amount: w.issued(i)})
			if len(batch) == 10_000 {
				flush()
			}
		}
	}
	flush()
	if analyzed {
		analyzeCustody(b, firstDB.Pool(), strings.Join(custodyTables, ", "))
	} else {
		for _, table := range custodyTables {
			_, err := firstDB.Pool().ExecContext(context.Background(), `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`)
			must(b, err)
		}
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

// analyzeCustody analyzes a side's tables (a list for ANALYZE) once its tokens are issued.
func analyzeCustody(b *testing.B, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, tables string) {
	b.Helper()
	_, err := db.ExecContext(context.Background(), `ANALYZE `+tables)
	must(b, err)
}

// twoStep pays with Select, then Spend.
func twoStep(v *tokens.Vault) payer { return twoStepPayer{v} }

type twoStepPayer struct{ v *tokens.Vault }

func (p twoStepPayer) stats() tokens.LockStats { return p.v.Stats() }

func (p twoStepPayer) pay(ctx context.Context, tx string, pm payment) error {
	locked, err := p.v.Select(ctx, tx, pm.from, pm.amount, tokens.Filter{Identifier: "GBP"}, 30*time.Second)
	if err != nil {
		return err
	}
	_, _, err = p.v.Spend(ctx, tx, pm.outputs(sum(locked)))
	return err
}

// oneStatement pays with Pay.
func oneStatement(v *tokens.Vault) payer { return oneStatementPayer{v} }

type oneStatementPayer struct{ v *tokens.Vault }

func (p oneStatementPayer) stats() tokens.LockStats { return p.v.Stats() }

func (p oneStatementPayer) pay(ctx context.Context, tx string, pm payment) error {
	_, _, err := p.v.Pay(ctx, tx, pm.from, pm.outputs(pm.amount)...)
	return err
}

func sum(toks []tokens.Token) int64 {
	var s int64
	for _, t := range toks {
		s += t.Amount
	}
	return s
}
