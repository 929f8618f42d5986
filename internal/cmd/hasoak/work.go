package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

// outcome is what refset said of an operation.
type outcome string

const (
	acked   outcome = "acked"   // nil: refset promises it is there
	failed  outcome = "failed"  // an error without refset.ErrCommitUnknown: refset promises it is not
	unknown outcome = "unknown" // refset.ErrCommitUnknown: no promise either way
)

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return acked
	case errors.Is(err, refset.ErrCommitUnknown):
		return unknown
	}
	return failed
}

// op is one operation and its outcome. Its ID is unique in the run: the kind and
// the key, a block's ID or a custody transaction's ID, which a transaction's
// steps (select, spend, release) share.
type op struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"` // receive, pay, select, spend, release
	Key     string    `json:"key"`
	Client  int       `json:"client"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Outcome outcome   `json:"outcome"`
	Err     string    `json:"err,omitempty"`
	// Unavailable: the error matched refset.ErrUnavailable (the server went away),
	// as opposed to a refusal (custody's insufficient funds, say).
	Unavailable bool `json:"unavailable,omitempty"`
	// Found is filled in by the checks: whether the operation's effect is there.
	Found *bool `json:"found,omitempty"`
}

// The soak's world: the owners of custody's tokens, what each is issued, and the
// genesis block every client's branch grows from.
var owners = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}

const (
	tokensPerOwner = 300
	genesis        = "genesis"
	lockTTL        = time.Hour // locks never expire during a soak: a lock found is a select's
)

func gbp(owner string, amount int64) tokens.Token {
	return tokens.Token{Owner: owner, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: amount}
}

// workload is the soak's database and the components on it.
type workload struct {
	dsn         string // the cluster's DSN with the soak's schema as search_path
	schema      string
	replication string // sync or async, as the primary said at the start
	logger      *slog.Logger
	db          *postgres.DB
	manager     *blockmanager.Manager
	vault       *tokens.Vault
	tokensGC    *cleanup.Collector
	passes      struct{ ok, failed atomic.Int64 }
}

// setUp makes a schema of the soak's own (so runs on one cluster never mix), the
// components' tables in it, the genesis block and the owners' tokens.
func setUp(ctx context.Context, cfg config, logger *slog.Logger) (*workload, error) {
	w := &workload{logger: logger, schema: cfg.schema, dsn: cfg.dsn}
	admin, err := postgres.Open(ctx, cfg.dsn, postgres.Options{Driver: cfg.driver, MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", cfg.driver, err)
	}
	defer admin.Close()
	var names, commit string
	if err := admin.Pool().QueryRowContext(ctx, `SELECT current_setting('synchronous_standby_names'),
		current_setting('synchronous_commit')`).Scan(&names, &commit); err != nil {
		return nil, err
	}
	w.replication = "async"
	if names != "" && commit != "off" && commit != "local" {
		w.replication = "sync"
	}
	if w.schema == "" {
		w.schema = fmt.Sprintf("soak_%s_%d", cfg.driver, time.Now().Unix())
		if _, err := admin.Pool().ExecContext(ctx, `CREATE SCHEMA `+w.schema); err != nil {
			return nil, err
		}
		if w.dsn, err = withSearchPath(cfg.dsn, w.schema); err != nil {
			return nil, err
		}
	}
	if w.db, err = w.open(ctx, cfg); err != nil {
		return nil, err
	}
	if w.manager, err = blockmanager.Open(ctx, w.db, blockmanager.Config{ForkTTL: 24 * time.Hour, Logger: logger}); err != nil {
		return nil, err
	}
	if w.vault, err = tokens.Open(ctx, w.db, tokens.Config{LockWait: 5 * time.Second, Logger: logger}); err != nil {
		return nil, err
	}
	// The vault's own collector is not exported; this one is the same set's, with
	// the vault's grace, for Run during the soak.
	if w.tokensGC, err = store.NewCollector(ctx, w.db, cleanup.Config{Table: "tokens", Grace: time.Minute, Logger: logger}); err != nil {
		return nil, err
	}
	if _, err := w.manager.Completer().Receive(ctx, blockmanager.Block{HeaderSignature: genesis,
		PreviousBlockID: blockmanager.NullBlockID, BatchIDs: blockmanager.IDs{"batch-" + genesis}}); err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	for _, o := range owners {
		toks := make([]tokens.Token, tokensPerOwner)
		for i := range toks {
			toks[i] = gbp(o, int64(1+i%10))
		}
		if _, err := w.vault.Issue(ctx, "issue-"+o, toks...); err != nil {
			return nil, fmt.Errorf("issue: %w", err)
		}
	}
	return w, nil
}

// withSearchPath is dsn, a URL or key=value pairs, whose connections use schema:
// both drivers send a DSN key they do not know to the server as a run-time
// parameter.
func withSearchPath(dsn, schema string) (string, error) {
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema, nil // a later key wins
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("the DSN is neither key=value pairs nor a URL") // not quoted: it may hold a password
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// open opens a pool on the soak's schema: two connections per client, for a
// client's unit and the collectors beside it.
func (w *workload) open(ctx context.Context, cfg config) (*postgres.DB, error) {
	opts := postgres.Options{Driver: cfg.driver, MaxConns: 2*cfg.clients + 2, ResolveCommitWait: cfg.resolveWait}
	opts.Logger, opts.RetryUnavailable = w.logger, cfg.retry
	return postgres.Open(ctx, w.dsn, opts)
}

func (w *workload) close() {
	if w.db != nil {
		w.db.Close()
	}
}

func (w *workload) collectorStats() [2]int64 {
	return [2]int64{w.passes.ok.Load(), w.passes.failed.Load()}
}

// run runs the clients, and both sets' collectors beside them (clean-up must carry
// on through a failover too), until the soak is over, and returns every operation.
func (w *workload) run(ctx context.Context, cfg config) []op {
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		w.waitForEnd(ctx, cfg)
	}()
	gcCtx, stopGC := context.WithCancel(ctx)
	var gc sync.WaitGroup
	for _, c := range []*cleanup.Collector{w.manager.Collector(), w.tokensGC} {
		gc.Go(func() {
			_ = c.Run(gcCtx, time.Second, func(_ cleanup.Stats, err error) {
				if err == nil {
					w.passes.ok.Add(1)
				} else if gcCtx.Err() == nil {
					w.passes.failed.Add(1)
				}
			})
		})
	}
	results := make([][]op, cfg.clients)
	var clients sync.WaitGroup
	for i := range cfg.clients {
		clients.Go(func() {
			c := &client{w: w, cfg: cfg, n: i, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))),
				tip: genesis}
			c.work(ctx, stop)
			results[i] = c.ops
		})
	}
	clients.Wait()
	stopGC()
	gc.Wait()
	var all []op
	for _, r := range results {
		all = append(all, r...)
	}
	return all
}

// waitForEnd returns once the soak is over: -duration has passed, and with
// -events the log says done and -settle has passed since; or ctx ended.
func (w *workload) waitForEnd(ctx context.Context, cfg config) {
	sleep := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !sleep(cfg.duration) || cfg.events == "" {
		return
	}
	for {
		_, done, err := readEvents(cfg.events)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(os.Stderr, "soak: reading the event log:", err)
		}
		if done {
			sleep(cfg.settle)
			return
		}
		if !sleep(500 * time.Millisecond) {
			return
		}
	}
}

// client is one of the soak's clients: it makes a hand-over step and a payment in
// turn, each a pair of operations, until stop closes.
type client struct {
	w      *workload
	cfg    config
	n      int
	rng    *rand.Rand
	seq    int
	tip    string // the last block of its branch known complete: acknowledged and handed over
	tipNum int64
	ops    []op
}

func (c *client) work(ctx context.Context, stop <-chan struct{}) {
	for turn := c.n; ; turn++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(c.cfg.pause):
		}
		if turn%2 == 0 {
			c.handOver(ctx)
		} else {
			c.payment(ctx)
		}
	}
}

func (c *client) next(prefix string) string {
	c.seq++
	return fmt.Sprintf("%s%d-%06d", prefix, c.n, c.seq)
}

// do runs one operation under the operation's deadline, records it and returns
// its outcome. After a failure the client backs off a little, so that a cluster
// without a primary is not asked hundreds of times a second.
func (c *client) do(ctx context.Context, kind, key string, fn func(ctx context.Context) error) outcome {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.opTimeout)
	defer cancel()
	o := op{ID: kind + ":" + key, Kind: kind, Key: key, Client: c.n, Start: time.Now()}
	err := fn(octx)
	o.End, o.Outcome = time.Now(), outcomeOf(err)
	if err != nil {
		o.Err, o.Unavailable = err.Error(), errors.Is(err, refset.ErrUnavailable)
		if c.cfg.verbose {
			fmt.Fprintf(os.Stderr, "soak: client %d: %s %s: %s: %v\n", c.n, kind, key, o.Outcome, err)
		}
		if o.Unavailable {
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.ops = append(c.ops, o)
	return o.Outcome
}

// handOver grows the client's branch by two blocks, sent child first: the child
// waits in the completer (pending), and its parent's arrival hands both over to the
// chain controller in one transaction. A block that did not certainly arrive is
// never sent again: the branch goes on from the last block known complete, as a new
// fork, and a child left waiting for a parent that never came stays pending.
func (c *client) handOver(ctx context.Context) {
	parent := blockmanager.Block{HeaderSignature: c.next("b"), PreviousBlockID: c.tip, BlockNum: c.tipNum + 1}
	child := blockmanager.Block{HeaderSignature: c.next("b"), PreviousBlockID: parent.HeaderSignature, BlockNum: c.tipNum + 2}
	receive := func(b blockmanager.Block) outcome {
		b.BatchIDs = blockmanager.IDs{"batch-" + b.HeaderSignature}
		b.TransactionIDs = blockmanager.IDs{"txn-" + b.HeaderSignature}
		return c.do(ctx, "receive", b.HeaderSignature, func(ctx context.Context) error {
			_, err := c.w.manager.Completer().Receive(ctx, b)
			return err
		})
	}
	childDone := receive(child)
	if receive(parent) != acked {
		return
	}
	c.tip, c.tipNum = parent.HeaderSignature, parent.BlockNum
	if childDone == acked {
		c.tip, c.tipNum = child.HeaderSignature, child.BlockNum
	}
}

// payment makes one custody payment between two random owners: in one step (Pay)
// or in two (Select, which locks, then Spend). Locks a two-step payment may have
// left (its spend failed, or its select's outcome is unknown) are released.
func (c *client) payment(ctx context.Context) {
	from, to := owners[c.rng.IntN(len(owners))], owners[c.rng.IntN(len(owners))]
	amount := int64(1 + c.rng.IntN(20))
	txID := c.next("t")
	v := c.w.vault
	if c.rng.IntN(10) < 6 {
		c.do(ctx, "pay", txID, func(ctx context.Context) error {
			_, _, err := v.Pay(ctx, txID, from, gbp(to, amount))
			return err
		})
		return
	}
	var locked []tokens.Token
	selected := c.do(ctx, "select", txID, func(ctx context.Context) (err error) {
		locked, err = v.Select(ctx, txID, from, amount, tokens.Filter{Identifier: "GBP"}, lockTTL)
		return err
	})
	if selected == acked {
		if c.do(ctx, "spend", txID, func(ctx context.Context) error {
			_, _, err := v.Spend(ctx, txID, tokens.WithChange(locked, from, gbp(to, amount)))
			return err
		}) == acked {
			return
		}
	} else if selected == failed {
		return // it took no lock
	}
	c.do(ctx, "release", txID, func(ctx context.Context) error {
		_, err := v.Release(ctx, txID)
		return err
	})
}

// writeOps writes ops to path, one JSON object a line.
func writeOps(path string, ops []op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, o := range ops {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
