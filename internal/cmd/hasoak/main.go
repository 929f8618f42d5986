// Command soak is issue 24's failover soak: clients make block hand-overs
// (blockmanager's completer to its chain controller) and custody payments
// (examples/custody/tokens) on a high-availability PostgreSQL cluster while its
// primary is killed and switched over, and afterwards it checks, on the final
// primary, that refset kept its word through every failover:
//
//   - every operation refset acknowledged (returned nil) is there;
//   - every operation refset said failed without refset.ErrCommitUnknown is not;
//   - custody's books balance, no token spent or locked twice;
//   - blockmanager's chain is whole: each block pending or linked to its stored
//     predecessor, never both nor neither, one head where fork choice puts it, every
//     other tip in the fork cache;
//   - clean-up's Check finds nothing leaked or dangling in either set.
//
// It prints, for each failover of the event log (-events), how long no write
// succeeded and how many commits were left unknown, and at the end one row of
// the soak's markdown table. The exit status is 1 when an invariant is broken,
// 2 when the soak could not run. With asynchronous replication (what the primary
// says when the soak starts) acknowledged operations lost are reported but break
// nothing: that is what the asynchronous soak measures.
//
// scripts/hasoak.sh runs it on a cluster of its own while it kills and switches
// over the primary; by hand, against a cluster of scripts/hacluster.sh:
//
//	eval "$(scripts/hacluster.sh start)"
//	go run ./internal/cmd/hasoak -driver pgx -duration 2m &
//	scripts/hacluster.sh switchover; scripts/hacluster.sh kill-primary; ...
//
// The event log is what scripts/hasoak.sh writes, one line per event:
//
//	KIND START END STATUS    kill|switchover|restart, epoch seconds, ok|failed
//	done                     no more events: the soak ends -settle later
//
// With -events the soak runs until the log says done (and -duration has
// passed), so the last failover's recovery is measured whatever it took.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/refsetdb/refset/store/postgres"
)

// config is what the flags set.
type config struct {
	dsn         string
	schema      string // an existing schema to work in, whose search_path dsn sets; "": a new one
	driver      string
	clients     int
	duration    time.Duration
	events      string
	settle      time.Duration
	pause       time.Duration
	opTimeout   time.Duration
	replication string
	opsLog      string
	retry       time.Duration // store.Options.RetryUnavailable
	resolveWait time.Duration // postgres.Options.ResolveCommitWait
	verbose     bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.dsn, "dsn", os.Getenv("REFSET_TEST_HA_DSN"), "multi-host DSN of the HA cluster (default $REFSET_TEST_HA_DSN)")
	flag.StringVar(&cfg.driver, "driver", postgres.DriverLibPQ, "database/sql driver: postgres (lib/pq) or pgx")
	flag.IntVar(&cfg.clients, "clients", 8, "clients, each making hand-overs and payments in turn")
	flag.DurationVar(&cfg.duration, "duration", 2*time.Minute, "how long the clients work at least")
	flag.StringVar(&cfg.events, "events", "", "event log of the failovers (see the package doc); with it the soak runs until the log says done")
	flag.DurationVar(&cfg.settle, "settle", 10*time.Second, "how long the clients go on after the last event")
	flag.DurationVar(&cfg.pause, "pause", 10*time.Millisecond, "each client's pause between operations")
	flag.DurationVar(&cfg.opTimeout, "op-timeout", 2*time.Minute, "deadline of one operation, against a hang; an operation that meets it counts as failed, as refset reports it")
	flag.StringVar(&cfg.replication, "replication", "", "sync or async: fail unless the primary's replication is that (default: take what it is)")
	flag.StringVar(&cfg.opsLog, "ops", "", "write every operation and its outcome to this file, one JSON object a line")
	flag.DurationVar(&cfg.retry, "retry", 0, "store.Options.RetryUnavailable: how long a unit of work that failed with ErrUnavailable, certainly uncommitted, runs again (0: never)")
	flag.DurationVar(&cfg.resolveWait, "resolve-wait", 0, "postgres.Options.ResolveCommitWait: how long a lost COMMIT may wait to learn its outcome (0: the store's default)")
	flag.BoolVar(&cfg.verbose, "v", false, "log refset's warnings and each client's errors to stderr")
	flag.Parse()
	if cfg.dsn == "" || flag.NArg() > 0 || cfg.clients < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if broken := res.broken(); len(broken) > 0 {
		fmt.Fprintln(os.Stderr, "soak: INVARIANTS BROKEN:")
		for _, b := range broken {
			fmt.Fprintln(os.Stderr, "  -", b)
		}
		os.Exit(1)
	}
}

// soak runs the whole soak and prints its report to out.
func soak(ctx context.Context, cfg config, out io.Writer) (*result, error) {
	logger := slog.New(slog.DiscardHandler)
	if cfg.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	w, err := setUp(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	defer w.close()
	fmt.Fprintf(out, "soak: %s, %s replication, schema %s, %d clients, RetryUnavailable %v\n",
		cfg.driver, w.replication, w.schema, cfg.clients, cfg.retry)
	if cfg.replication != "" && cfg.replication != w.replication {
		return nil, fmt.Errorf("the primary runs %s replication, not %s", w.replication, cfg.replication)
	}
	start := time.Now()
	ops := w.run(ctx, cfg)
	end := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	var events []event
	if cfg.events != "" {
		if events, _, err = readEvents(cfg.events); err != nil {
			return nil, err
		}
	}
	// The checks run on a pool of their own, opened now: the primary it finds is
	// the final one.
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	v, err := w.verify(vctx, cfg, ops)
	if err != nil {
		return nil, fmt.Errorf("verifying: %w", err)
	}
	if cfg.opsLog != "" {
		if err := writeOps(cfg.opsLog, ops); err != nil {
			return nil, err
		}
	}
	res := &result{driver: cfg.driver, replication: w.replication, ops: ops, verdict: v,
		failovers: recoveries(events, ops, start, end), collector: w.collectorStats()}
	res.print(out, start)
	return res, nil
}
