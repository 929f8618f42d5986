package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/internal/test/child"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

// The replica benchmarks measure what several replicas of a service do to one
// PostgreSQL: each replica is an OS process of its own (this test binary, started
// again as a replica, told its configuration: internal/test/child), with a connection
// pool of its own, as replicas behind a load balancer are. For 1, 2, 4, ... replicas
// (REFSET_BENCH_REPLICAS, default 1,2,4,8,16) they share b.N operations between them,
// each replica running REFSET_BENCH_WORKERS goroutines (default 2):
//
//   - BenchmarkReplicasCustody: custody payers, each payment a Select then a Spend
//     (examples/custody/tokens), between REFSET_BENCH_OWNERS owners (default 1,000)
//     of REFSET_BENCH_TOKENS tokens (default 100,000); an operation is a payment.
//   - BenchmarkReplicasReceive: block receivers, each storing its own fork with
//     blockmanager.Manager.Put in branches of REFSET_BENCH_BRANCH blocks (default
//     100); an operation is a block.
//
// A replica starts, opens its pool and prepares, says it is ready, and waits; the
// timer runs from the moment every replica is told to go until the last one is done,
// so process start-up is not measured. Each reports:
//
//   - ops/s: operations per second of wall time, all replicas together;
//   - %lost-races, lost/op (custody): Select's lock attempts that lost a race to
//     another selector (tokens.LockStats), as a share of attempts and per payment;
//   - retries/op, deadlocks, serialization: transactions refset ran again because
//     the server aborted them (refset.Observer's Retried), and of those the ones
//     PostgreSQL aborted as deadlocks (SQLSTATE 40P01) and as serialization failures
//     (40001); conflicts: those that outlasted the retries and failed the operation
//     (the benchmark then fails);
//   - pg-deadlocks: the database's own count (pg_stat_database.deadlocks) over the
//     run, which also counts other sessions of the database;
//   - server-cores: CPU time the replicas' server processes (found by
//     application_name in pg_stat_activity, read from /proc) spent per second of wall
//     time: where it nears the machine's cores, the server is saturated;
//     client-cores likewise for the replica processes; machine-cores is the whole
//     machine's busy time (/proc/stat) per second, other load included;
//   - server-cpu-us/op, client-cpu-us/op: the same per operation, which stays flat
//     while the server scales and climbs where it spends its time waiting on locks.
//
// scripts/scale-bench.sh runs them (quick: 1 and 2 replicas on small data; full: the
// defaults).

// TestMain runs a replica when the binary was started as one, and the tests and
// benchmarks otherwise.
func TestMain(m *testing.M) {
	child.Main(m, map[string]func(arg string) int{"replica": child.JSON(replicaMain)})
}

// replicaConfig is what a replica process is told, as JSON.
type replicaConfig struct {
	Role    string // "custody" or "receiver"
	DSN     string // with application_name set to App
	App     string
	Driver  string
	ID      int
	Ops     int // payments or blocks this replica does
	Workers int

	Owners int // custody: owners to pay between

	Prefix  string // receiver: block IDs start with it
	Base    string // receiver: the block its fork grows from
	BaseNum int64
	Branch  int // receiver: blocks per Put
}

// replicaReport is what a replica prints when done, as one JSON line.
type replicaReport struct {
	Ops, Refused                          int64
	Lock                                  tokens.LockStats
	Retries, Deadlocks, Serialization     int64
	Conflicts                             int64
	ServerCPU, ClientCPU                  time.Duration
	Err                                   string `json:",omitempty"`
	ServerBackends, ServerBackendsAtReady int
}

// replicaMain is a replica process: it prepares, prints "ready", waits for a line on
// standard input, does its share, and prints its report.
func replicaMain(cfg replicaConfig) int {
	rep, err := runReplica(cfg, os.Stdin, os.Stdout)
	if err != nil {
		rep.Err = err.Error()
	}
	line, _ := json.Marshal(rep)
	fmt.Fprintf(os.Stdout, "%s\n", line)
	if err != nil {
		return 1
	}
	return 0
}

func runReplica(cfg replicaConfig, in io.Reader, out io.Writer) (replicaReport, error) {
	var rep replicaReport
	ctx := context.Background()
	obs := &retryCounter{}
	db, err := postgres.Open(ctx, cfg.DSN, postgres.Options{MaxConns: cfg.Workers, Driver: cfg.Driver, Options: store.Options{Observer: obs}})
	if err != nil {
		return rep, err
	}
	defer db.Close()

	var work func(worker int, next func() (int, bool)) error
	var vault *tokens.Vault
	switch cfg.Role {
	case "custody":
		if vault, err = tokens.Open(ctx, db, tokens.Config{LockWait: 10 * time.Second}); err != nil {
			return rep, err
		}
		var refused atomic.Int64
		work = func(worker int, next func() (int, bool)) error {
			for {
				n, ok := next()
				if !ok {
					return nil
				}
				rng := rand.New(rand.NewPCG(uint64(cfg.ID), uint64(n)))
				from, to := ownerName(rng.IntN(cfg.Owners)), ownerName(rng.IntN(cfg.Owners))
				err := twoStepPayer{vault}.pay(ctx, fmt.Sprintf("r%d-%d", cfg.ID, n), payment{from: from, to: to, amount: int64(1 + rng.IntN(12))})
				switch {
				case errors.Is(err, tokens.ErrInsufficientFunds), errors.Is(err, tokens.ErrLocked):
					refused.Add(1)
				case err != nil:
					return err
				}
			}
		}
		defer func() { rep.Refused = refused.Load() }()
	case "receiver":
		m, err := blockmanager.Open(ctx, db, blockmanager.Config{})
		if err != nil {
			return rep, err
		}
		// Each worker grows a fork of its own from the base, a branch per Put.
		work = func(worker int, next func() (int, bool)) error {
			prev, num := cfg.Base, cfg.BaseNum
			for {
				branch := make([]blockmanager.Block, 0, cfg.Branch)
				for len(branch) < cfg.Branch {
					if _, ok := next(); !ok {
						break
					}
					num++
					id := fmt.Sprintf("%sw%d-%09d", cfg.Prefix, worker, num)
					branch = append(branch, blockmanager.Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num,
						BatchIDs: blockmanager.IDs{"b-" + id}, TransactionIDs: blockmanager.IDs{"t-" + id}, Payload: bmPayload})
					prev = id
				}
				if len(branch) == 0 {
					return nil
				}
				if _, err := m.Put(ctx, branch); err != nil {
					return err
				}
			}
		}
	default:
		return rep, fmt.Errorf("unknown replica role %q", cfg.Role)
	}

	// Open every connection now, so the server processes are there to be measured
	// from the start and none is opened while the clock runs.
	if err := warm(ctx, db, cfg.Workers); err != nil {
		return rep, err
	}
	serverStart, backends, err := backendsCPU(ctx, db, cfg.App)
	if err != nil {
		return rep, err
	}
	rep.ServerBackendsAtReady = backends
	clientStart := processCPU()
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return rep, err
	}
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return rep, fmt.Errorf("waiting for the start: %w", err)
	}

	var done atomic.Int64
	next := func() (int, bool) {
		n := int(done.Add(1))
		return n, n <= cfg.Ops
	}
	var wg sync.WaitGroup
	errs := make([]error, cfg.Workers)
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = work(w, next)
		}()
	}
	wg.Wait()
	rep.Ops = int64(min(int(done.Load()), cfg.Ops))
	rep.ClientCPU = processCPU() - clientStart
	serverEnd, backends, cpuErr := backendsCPU(ctx, db, cfg.App)
	rep.ServerCPU, rep.ServerBackends = serverEnd-serverStart, backends
	rep.Retries, rep.Deadlocks, rep.Serialization, rep.Conflicts =
		obs.retries.Load(), obs.deadlocks.Load(), obs.serialization.Load(), obs.conflicts.Load()
	if vault != nil {
		rep.Lock = vault.Stats()
	}
	return rep, errors.Join(errors.Join(errs...), cpuErr)
}

// warm opens n connections of db's pool at once, and returns them to it.
func warm(ctx context.Context, db *postgres.DB, n int) error {
	var conns []interface{ Close() error }
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := db.Pool().Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// retryCounter is an Observer that counts the transactions refset ran again, by the
// SQLSTATE the server aborted them with.
type retryCounter struct {
	refset.NoObserver
	retries, deadlocks, serialization, conflicts atomic.Int64
}

func (c *retryCounter) Retried(_ context.Context, cause error) {
	c.retries.Add(1)
	switch sqlStateOf(cause) {
	case "40P01":
		c.deadlocks.Add(1)
	case "40001":
		c.serialization.Add(1)
	}
}

func (c *retryCounter) Conflicted(context.Context, error) { c.conflicts.Add(1) }

// sqlStateOf is the SQLSTATE of the server error inside err (lib/pq's and pgx's
// alike), or "".
func sqlStateOf(err error) string {
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		return se.SQLState()
	}
	return ""
}

// backendsCPU is the CPU time the server processes of the sessions named app have
// used, read from /proc: the server runs on this machine in every run of these
// benchmarks. It reports how many such processes it found.
func backendsCPU(ctx context.Context, db *postgres.DB, app string) (time.Duration, int, error) {
	rows, err := db.Pool().QueryContext(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var total time.Duration
	n := 0
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return 0, 0, err
		}
		if cpu, ok := pidCPU(pid); ok {
			total += cpu
			n++
		}
	}
	return total, n, rows.Err()
}

// replicaCounts is REFSET_BENCH_REPLICAS, the replica counts to measure.
func replicaCounts(b *testing.B) []int {
	return envInts(b, "REFSET_BENCH_REPLICAS", []int{1, 2, 4, 8, 16})
}

// envInts reads a comma-separated list of positive integers from the environment.
func envInts(b *testing.B, name string, def []int) []int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	return out
}

func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	return envInts(b, name, []int{def})[0]
}

// replicaRun is one measurement: replicas started, told to go together, waited for.
type replicaRun struct {
	procs   []*exec.Cmd
	outs    []*bufio.Reader
	ins     []io.WriteCloser
	reports []replicaReport
}

// startReplicas starts one process per configuration and waits until all are ready.
func startReplicas(b *testing.B, cfgs []replicaConfig) *replicaRun {
	b.Helper()
	r := &replicaRun{}
	b.Cleanup(func() {
		for _, p := range r.procs {
			if p.ProcessState == nil && p.Process != nil {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
		}
	})
	for _, cfg := range cfgs {
		raw, err := json.Marshal(cfg)
		must(b, err)
		cmd := child.Command(b.Context(), "replica", string(raw))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		must(b, err)
		out, err := cmd.StdoutPipe()
		must(b, err)
		must(b, cmd.Start())
		r.procs = append(r.procs, cmd)
		r.ins = append(r.ins, in)
		r.outs = append(r.outs, bufio.NewReader(out))
	}
	for i, out := range r.outs {
		line, err := out.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			b.Fatalf("replica %d did not get ready: %q %v", i, line, err)
		}
	}
	return r
}

// run tells every replica to go and waits for their reports.
func (r *replicaRun) run(b *testing.B) {
	b.Helper()
	for _, in := range r.ins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			b.Fatal(err)
		}
	}
	r.reports = make([]replicaReport, len(r.procs))
	var failed []string
	for i, out := range r.outs {
		line, err := out.ReadString('\n')
		if err == nil {
			err = json.Unmarshal([]byte(line), &r.reports[i])
		}
		if werr := r.procs[i].Wait(); err == nil {
			err = werr
		}
		if err != nil || r.reports[i].Err != "" {
			failed = append(failed, fmt.Sprintf("replica %d: %v %s", i, err, r.reports[i].Err))
		}
	}
	if len(failed) > 0 {
		b.Fatal(strings.Join(failed, "; "))
	}
}

// report adds the run's figures to the benchmark's.
func (r *replicaRun) report(b *testing.B, wall time.Duration, machine time.Duration, pgDeadlocks int64) {
	var sum replicaReport
	for _, rep := range r.reports {
		sum.Ops += rep.Ops
		sum.Refused += rep.Refused
		sum.Lock.Attempts += rep.Lock.Attempts
		sum.Lock.LostRaces += rep.Lock.LostRaces
		sum.Retries += rep.Retries
		sum.Deadlocks += rep.Deadlocks
		sum.Serialization += rep.Serialization
		sum.Conflicts += rep.Conflicts
		sum.ServerCPU += rep.ServerCPU
		sum.ClientCPU += rep.ClientCPU
	}
	ops := float64(max(sum.Ops, 1))
	b.ReportMetric(float64(sum.Ops)/wall.Seconds(), "ops/s")
	if sum.Lock.Attempts > 0 {
		b.ReportMetric(100*float64(sum.Lock.LostRaces)/float64(sum.Lock.Attempts), "%lost-races")
		b.ReportMetric(float64(sum.Lock.Attempts)/ops, "lock-attempts/op")
		b.ReportMetric(float64(sum.Lock.LostRaces)/ops, "lost/op")
		b.ReportMetric(100*float64(sum.Refused)/ops, "%refused")
	}
	b.ReportMetric(float64(sum.Retries)/ops, "retries/op")
	b.ReportMetric(float64(sum.Deadlocks), "deadlocks")
	b.ReportMetric(float64(sum.Serialization), "serialization")
	b.ReportMetric(float64(pgDeadlocks), "pg-deadlocks")
	b.ReportMetric(sum.ServerCPU.Seconds()/wall.Seconds(), "server-cores")
	b.ReportMetric(sum.ClientCPU.Seconds()/wall.Seconds(), "client-cores")
	if machine > 0 {
		b.ReportMetric(machine.Seconds()/wall.Seconds(), "machine-cores")
	}
	b.ReportMetric(float64(sum.ServerCPU.Microseconds())/ops, "server-cpu-us/op")
	b.ReportMetric(float64(sum.ClientCPU.Microseconds())/ops, "client-cpu-us/op")
	if sum.Conflicts > 0 {
		b.Errorf("%d operations failed on conflicts that outlasted the retries", sum.Conflicts)
	}
}

// measureReplicas starts the replicas of cfgs, times them doing their shares, and
// reports.
func measureReplicas(b *testing.B, pool *postgres.DB, cfgs []replicaConfig) {
	b.Helper()
	r := startReplicas(b, cfgs)
	before := pgDeadlocks(b, pool)
	cpu, cpuOK := machineCPU()
	b.ResetTimer()
	start := time.Now()
	r.run(b)
	wall := time.Since(start)
	b.StopTimer()
	var machine time.Duration
	if now, ok := machineCPU(); ok && cpuOK {
		machine = now - cpu
	}
	r.report(b, wall, machine, pgDeadlocks(b, pool)-before)
}

// pgDeadlocks is the database's count of deadlocks so far.
func pgDeadlocks(b *testing.B, db *postgres.DB) int64 {
	b.Helper()
	var n int64
	must(b, db.Pool().QueryRowContext(context.Background(),
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// benchReplicaCounts runs a sub-benchmark per replica count n: b.N operations shared
// among n replica processes of role on the database at dsn, each configured by
// config (the sub-benchmark's run number, the replica's index), then measured; after,
// if not nil, checks the outcome.
func benchReplicaCounts(b *testing.B, db *postgres.DB, dsn, role string, config func(run, i int) replicaConfig, after func(b *testing.B)) {
	run := 0
	for _, n := range replicaCounts(b) {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			run++
			var cfgs []replicaConfig
			for i, ops := range shares(b.N, n) {
				cfg := config(run, i)
				cfg.Role, cfg.Ops = role, ops
				cfg.App = fmt.Sprintf("refset-bench-%s-%d-%d-%d", role, os.Getpid(), run, i)
				cfg.DSN = withApplicationName(b, dsn, cfg.App)
				cfgs = append(cfgs, cfg)
			}
			measureReplicas(b, db, cfgs)
			if after != nil {
				after(b)
			}
		})
	}
}

// shares splits n operations between k replicas.
func shares(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// BenchmarkReplicasCustody: payments (Select then Spend) by 1, 2, 4, ... replica
// processes on one database.
func BenchmarkReplicasCustody(b *testing.B) {
	ctx := context.Background()
	owners := envInt(b, "REFSET_BENCH_OWNERS", 1000)
	total := envInt(b, "REFSET_BENCH_TOKENS", custodyTokens)
	workers := envInt(b, "REFSET_BENCH_WORKERS", 2)
	dsn := pgtest.DSN(b)
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 4, Driver: custodyDriver()})
	must(b, err)
	b.Cleanup(func() { db.Close() })
	v, err := tokens.Open(ctx, db, tokens.Config{})
	must(b, err)
	for o := range owners {
		toks := make([]tokens.Token, max(total/owners, 1))
		for i := range toks {
			toks[i] = tokens.Token{Owner: ownerName(o), Type: "fiat", Identifier: "GBP",
				Issuer: "bank", Notary: "notary", Amount: issueAmount(i)}
		}
		_, err := v.Issue(ctx, fmt.Sprintf("issue-%d", o), toks...)
		must(b, err)
	}
	_, err = db.Pool().ExecContext(ctx, `ANALYZE`)
	must(b, err)
	benchReplicaCounts(b, db, dsn, "custody", func(run, i int) replicaConfig {
		return replicaConfig{Driver: custodyDriver(), ID: run*1000 + i, Workers: workers, Owners: owners}
	}, func(b *testing.B) {
		a, err := v.Audit(ctx)
		must(b, err)
		if !a.Balanced() {
			b.Fatalf("books do not balance: %+v", a)
		}
	})
}

// BenchmarkReplicasReceive: blocks stored with Put by 1, 2, 4, ... replica processes
// on one database, each worker growing a fork of its own from a common base.
func BenchmarkReplicasReceive(b *testing.B) {
	ctx := context.Background()
	workers := envInt(b, "REFSET_BENCH_WORKERS", 2)
	branch := envInt(b, "REFSET_BENCH_BRANCH", 100)
	dsn := pgtest.DSN(b)
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 4})
	must(b, err)
	b.Cleanup(func() { db.Close() })
	m, err := blockmanager.Open(ctx, db, blockmanager.Config{})
	must(b, err)
	base := bmChain("base-", blockmanager.NullBlockID, 0, 10)
	_, err = m.Put(ctx, base)
	must(b, err)
	tip := base[len(base)-1]
	benchReplicaCounts(b, db, dsn, "receiver", func(run, i int) replicaConfig {
		return replicaConfig{Driver: postgres.DriverLibPQ, ID: i, Workers: workers,
			Prefix: fmt.Sprintf("run%d-r%d-", run, i), Base: tip.HeaderSignature, BaseNum: tip.BlockNum, Branch: branch}
	}, nil)
}

// TestRetryCounterCountsDeadlocks: two transactions lock two rows in opposite orders,
// PostgreSQL aborts one as a deadlock, refset runs it again, and the counter the
// replica benchmarks report from says so. The one aborted runs again only once the
// other has committed: a second attempt racing the first one's survivor to the rows
// could take one of them first and deadlock again (a loaded machine counted 2 and 2).
func TestRetryCounterCountsDeadlocks(t *testing.T) {
	ctx := t.Context()
	obs := &retryCounter{}
	db := testdb.LibPQ.Open(t, testdb.Options{MaxConns: 4, Observer: obs}).(*postgres.DB)
	if _, err := db.Pool().ExecContext(ctx, `CREATE TABLE pair (k int PRIMARY KEY); INSERT INTO pair VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	var firstLocked sync.WaitGroup // both hold their first row, on their first attempts
	firstLocked.Add(2)
	finished := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	lockBoth := func(me, first, second int) error {
		defer close(finished[me])
		attempt := 0
		return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			attempt++
			if attempt > 1 {
				<-finished[1-me]
			}
			if _, err := tx.ExecContext(ctx, `SELECT k FROM pair WHERE k = $1 FOR UPDATE`, first); err != nil {
				return err
			}
			if attempt == 1 {
				firstLocked.Done()
				firstLocked.Wait()
			}
			_, err := tx.ExecContext(ctx, `SELECT k FROM pair WHERE k = $1 FOR UPDATE`, second)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- lockBoth(0, 1, 2) }()
	go func() { errs <- lockBoth(1, 2, 1) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := obs.deadlocks.Load(); got != 1 || obs.retries.Load() != 1 || obs.serialization.Load() != 0 {
		t.Fatalf("counted %d retries, %d deadlocks, %d serialization failures; want 1, 1, 0",
			obs.retries.Load(), got, obs.serialization.Load())
	}
}
