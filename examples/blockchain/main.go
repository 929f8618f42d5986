// Command blockchain runs a ledger node's block handling on refset.
//
// Several simulated peers send a few thousand blocks, with forks, out of order and
// with duplicates. The node's completer stores each block, holding those whose
// predecessor has not arrived as pending; when the predecessor comes it links them
// and hands them to the chain controller in one transaction. The controller keeps the
// committed head (longest chain, then lowest ID) and a fork cache whose stale heads
// expire; clean-up, running in the background, prunes abandoned forks down to the
// committed chain. At the end it checks every invariant and exits non-zero if one
// fails (exit status 1; 2 for a flag out of range, 130 when interrupted, after it
// has removed the temporary file or dropped the PostgreSQL schema it made).
//
//	go run ./examples/blockchain                       # a SQLite file in a temporary directory
//	go run ./examples/blockchain -db node.db           # a SQLite file of your choice
//	go run ./examples/blockchain -db "postgres://user@localhost/db?sslmode=disable"
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/examples/internal/exampledb"
)

type options struct {
	db            string
	peers, blocks int
	receivers     int
	seed          uint64
	forkTTL       time.Duration
	grace         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.db, "db", "", "the database: a SQLite file (default: a new file in a temporary directory), or a PostgreSQL URL or key=value DSN, whose node's tables go in a new schema, dropped at the end")
	flag.IntVar(&o.peers, "peers", 4, "simulated peers, each sending every block in its own order (at least 1)")
	flag.IntVar(&o.blocks, "blocks", 3000, "blocks to send, forks included (at least 50)")
	flag.IntVar(&o.receivers, "receivers", 0, "goroutines receiving blocks (default 1 on SQLite, 4 on Postgres)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the simulation")
	flag.DurationVar(&o.forkTTL, "fork-ttl", time.Second, "how long a fork that stops growing is kept (more than 0)")
	flag.DurationVar(&o.grace, "grace", 300*time.Millisecond, "how long a new block is safe from clean-up before anything references it (more than 0)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "%s\n\nUsage: %s [flags]\n", `blockchain runs a ledger node's block handling on refset: simulated peers send
blocks with forks, out of order and with duplicates; the completer holds blocks whose
predecessor is missing and hands completed ones to the chain controller in one
transaction; clean-up prunes abandoned forks in the background. It prints a summary
table and exits non-zero if an invariant fails.`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	log.SetFlags(0)
	if err := o.validate(); err != nil {
		fmt.Fprintln(flag.CommandLine.Output(), "blockchain:", err)
		flag.Usage()
		os.Exit(2)
	}
	// Ctrl-C or a SIGTERM cancels the run, whose deferred clean-up then removes the
	// temporary file or drops the schema, instead of the signal killing the process
	// and leaving them behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	table, ok, err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()
	if interrupted {
		log.Print("blockchain: interrupted")
		os.Exit(130)
	}
	if err != nil {
		log.Fatal("blockchain: ", err)
	}
	// Printed after run has closed the database and removed what it made, so that a
	// closed stdout (| head -1), whose SIGPIPE kills the process, leaves nothing behind.
	os.Stdout.WriteString(table)
	if !ok {
		os.Exit(1)
	}
}

// minBlocks is the fewest blocks simulate makes a main chain and forks of: the
// forks branch off more than 40 blocks below the main chain's tip.
const minBlocks = 50

// validate rejects the flags the simulation cannot run with.
func (o options) validate() error {
	switch {
	case o.blocks < minBlocks:
		return fmt.Errorf("-blocks %d: want at least %d", o.blocks, minBlocks)
	case o.peers < 1:
		return fmt.Errorf("-peers %d: want at least 1", o.peers)
	case o.receivers < 0:
		return fmt.Errorf("-receivers %d: want 0 (the default) or more", o.receivers)
	case o.forkTTL <= 0:
		return fmt.Errorf("-fork-ttl %v: want more than 0", o.forkTTL)
	case o.grace <= 0:
		return fmt.Errorf("-grace %v: want more than 0", o.grace)
	}
	return nil
}

// simulation is the blocks the peers send: a main chain and forks off it that the
// main chain outgrows.
type simulation struct {
	all     []blockmanager.Block
	mainTip string
	height  int64
	forks   int
}

func simulate(n int, rng *rand.Rand) simulation {
	var s simulation
	prev := blockmanager.NullBlockID
	var main []blockmanager.Block
	mainLen := n * 5 / 6
	for i := range mainLen {
		b := block(fmt.Sprintf("m%06d", i), prev, int64(i))
		main = append(main, b)
		prev = b.HeaderSignature
	}
	s.all = append(s.all, main...)
	for len(s.all) < n {
		from := rng.IntN(mainLen - 40)
		length := min(2+rng.IntN(25), n-len(s.all))
		prev := main[from].HeaderSignature
		for j := range length {
			b := block(fmt.Sprintf("f%03d-%06d", s.forks, from+1+j), prev, int64(from+1+j))
			s.all = append(s.all, b)
			prev = b.HeaderSignature
		}
		s.forks++
	}
	s.mainTip, s.height = main[mainLen-1].HeaderSignature, int64(mainLen-1)
	return s
}

func block(id, prev string, num int64) blockmanager.Block {
	return blockmanager.Block{
		HeaderSignature: id, PreviousBlockID: prev, BlockNum: num,
		BatchIDs: blockmanager.IDs{"batch-" + id}, TransactionIDs: blockmanager.IDs{"txn-" + id},
		Payload: []byte("transactions of " + id),
	}
}

// peerOrder is the order one peer sends the blocks in: by height, shuffled within
// windows, so many blocks arrive before their predecessor.
func peerOrder(all []blockmanager.Block, rng *rand.Rand) []blockmanager.Block {
	// By height (stable for equal heights), then shuffled in windows of 16.
	order := slices.Clone(all)
	slices.SortStableFunc(order, func(a, b blockmanager.Block) int { return cmp.Compare(a.BlockNum, b.BlockNum) })
	for start := 0; start < len(order); start += 16 {
		w := order[start:min(start+16, len(order))]
		rng.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
	}
	return order
}

// run runs the simulation and returns the summary table, and whether every
// invariant held.
func run(ctx context.Context, o options) (table string, ok bool, err error) {
	if err := o.validate(); err != nil {
		return "", false, err
	}
	start := time.Now()
	demo, err := exampledb.New(ctx, "blockchain", o.db)
	if err != nil {
		return "", false, err
	}
	defer demo.Close()
	db, err := demo.Open(ctx, 0)
	if err != nil {
		return "", false, err
	}
	receivers := o.receivers
	if receivers <= 0 {
		receivers = 1
		if demo.Postgres() {
			receivers = 4
		}
	}
	m, err := blockmanager.Open(ctx, db, blockmanager.Config{ForkTTL: o.forkTTL, Grace: o.grace})
	if err != nil {
		return "", false, err
	}
	sim := simulate(o.blocks, rand.New(rand.NewPCG(o.seed, 0)))

	// Clean-up runs in the background while the node works.
	var pruned, expired atomic.Int64
	collectCtx, stopCollecting := context.WithCancel(ctx)
	defer stopCollecting()
	collecting := make(chan error, 1)
	go func() {
		collecting <- m.Collector().Run(collectCtx, 100*time.Millisecond, func(s cleanup.Stats, err error) {
			if err == nil {
				pruned.Add(s.Deleted)
				expired.Add(s.HoldsExpired)
			}
		})
	}()

	// The peers send; the node receives.
	inbox := make(chan blockmanager.Block, 256)
	var peers sync.WaitGroup
	for p := range o.peers {
		peers.Add(1)
		go func() {
			defer peers.Done()
			for _, b := range peerOrder(sim.all, rand.New(rand.NewPCG(o.seed, uint64(p+1)))) {
				inbox <- b
			}
		}()
	}
	go func() { peers.Wait(); close(inbox) }()

	var received, duplicates, completed atomic.Int64
	total := int64(len(sim.all) * o.peers)
	var node sync.WaitGroup
	errs := make(chan error, receivers)
	for range receivers {
		node.Add(1)
		go func() {
			defer node.Done()
			c := m.Completer()
			for b := range inbox {
				out, err := c.Receive(ctx, b)
				if err != nil {
					errs <- fmt.Errorf("receiving %s: %w", b.HeaderSignature, err)
					for range inbox { // drain, so the peers finish
					}
					return
				}
				received.Add(1)
				completed.Add(int64(out.Completed))
				if out.Duplicate {
					duplicates.Add(1)
				}
			}
		}()
	}
	stopProgress := progress(&received, total)
	node.Wait()
	stopProgress()
	close(errs)
	for err := range errs {
		stopCollecting()
		return "", false, err
	}

	// Ask the peers for the predecessors still missing, as a node's completer does:
	// a block pruned with a fork that lost the main chain for a while comes back.
	byID := make(map[string]blockmanager.Block, len(sim.all))
	for _, b := range sim.all {
		byID[b.HeaderSignature] = b
	}
	var requested int
	for range 1000 {
		_, missing, err := m.Completer().Pending(ctx)
		if err != nil {
			return "", false, err
		}
		if len(missing) == 0 {
			break
		}
		for _, id := range missing {
			out, err := m.Completer().Receive(ctx, byID[id])
			if err != nil {
				return "", false, fmt.Errorf("receiving the requested %s: %w", id, err)
			}
			requested++
			completed.Add(int64(out.Completed))
		}
	}

	// Let the fork cache expire the forks and the newest blocks' grace period end,
	// then collect what is left.
	select {
	case <-time.After(max(o.forkTTL, o.grace) + 200*time.Millisecond):
	case <-ctx.Done():
		return "", false, ctx.Err()
	}
	stopCollecting()
	if err := <-collecting; err != nil {
		return "", false, err
	}
	s, err := m.Collector().Collect(ctx)
	if err != nil {
		return "", false, err
	}
	pruned.Add(s.Deleted)

	// The figures and the checks.
	c := m.Completer()
	waiting, _, err := c.Pending(ctx)
	if err != nil {
		return "", false, err
	}
	headID, err := m.Controller().Head(ctx)
	if err != nil {
		return "", false, err
	}
	forks, err := m.Controller().Forks(ctx)
	if err != nil {
		return "", false, err
	}
	var stored, height int
	if err := db.Reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM blocks`).Scan(&stored); err != nil {
		return "", false, err
	}
	for _, err := range m.Branch(ctx, headID) {
		if err != nil {
			return "", false, err
		}
		height++
	}
	report, err := m.Collector().Check(ctx)
	if err != nil {
		return "", false, err
	}
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(completed.Load() >= int64(len(sim.all)), "%d blocks completed, want every one of %d", completed.Load(), len(sim.all))
	check(waiting == 0, "%d blocks still pending", waiting)
	check(headID == sim.mainTip, "head is %s, want %s", headID, sim.mainTip)
	check(int64(height) == sim.height+1, "the head's branch has %d blocks, want %d", height, sim.height+1)
	check(len(forks) == 0, "%d fork heads outlived the fork cache", len(forks))
	check(stored == int(sim.height)+1, "%d blocks stored, want the %d of the main chain", stored, sim.height+1)
	check(report.OK(), "integrity check: %d leaked, %d dangling %v", report.Leaked, report.Dangling, report.Samples)

	integrity := "ok"
	if len(problems) > 0 {
		integrity = "FAILED"
	}
	rows := [][2]string{
		{"blocks received (with duplicates)", fmt.Sprint(received.Load())},
		{"distinct blocks sent", fmt.Sprint(len(sim.all))},
		{"duplicates ignored", fmt.Sprint(duplicates.Load())},
		{"blocks requested from peers", fmt.Sprint(requested)},
		{"blocks completed", fmt.Sprint(completed.Load())},
		{"still pending", fmt.Sprint(waiting)},
		{"heads (committed + forks)", fmt.Sprintf("%d + %d", 1, len(forks))},
		{"forks sent", fmt.Sprint(sim.forks)},
		{"fork blocks pruned", fmt.Sprint(pruned.Load())},
		{"fork-cache holds expired", fmt.Sprint(expired.Load() + s.HoldsExpired)},
		{"chain height", fmt.Sprint(height - 1)},
		{"blocks stored", fmt.Sprint(stored)},
		{"integrity check", integrity},
		{"elapsed", time.Since(start).Round(time.Millisecond).String()},
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-34s %s\n", r[0], r[1])
	}
	for _, p := range problems {
		fmt.Fprintln(&b, "  FAILED:", p)
	}
	return b.String(), len(problems) == 0, nil
}

// progress draws a bar on stderr while blocks arrive, if stderr is a terminal.
func progress(done *atomic.Int64, total int64) (stop func()) {
	if fi, err := os.Stderr.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	draw := func() {
		n := done.Load()
		const width = 40
		filled := int(int64(width) * n / max(total, 1))
		fmt.Fprintf(os.Stderr, "\r  [%s%s] %d/%d blocks received", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, total)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				draw()
				fmt.Fprintln(os.Stderr)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(quit); <-finished }
}
