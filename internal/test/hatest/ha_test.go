// Package hatest holds the tests that need the throwaway high-availability
// cluster of scripts/hacluster.sh (issue 24): a pg_auto_failover monitor and three
// PostgreSQL nodes, a primary and two synchronous standbys. scripts/test.sh starts
// it when its run includes this package and sets REFSET_TEST_HA_DSN (its multi-host
// DSN) and REFSET_HA_STATE (its state file, through which TestFailover switches it
// over and kills its primary). Without the DSN the tests skip, or fail under CI.
// By hand:
//
//	eval "$(scripts/hacluster.sh start)"
//	go test ./internal/test/hatest -v
//	scripts/hacluster.sh stop
//
// With REFSET_TEST_HA_LOOP set to a duration (say 60s), TestHAWriteLoop writes
// through each driver's pool for that long while someone runs
// `scripts/hacluster.sh switchover` or `kill-primary` in another shell, and
// logs each outage: how long writes failed, the errors seen, and which node
// took the writes before and after.
package hatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
)

var drivers = []string{postgres.DriverLibPQ, postgres.DriverPgx}

// write commits one row through db and returns the port of the server that
// took it, which must not be in recovery (a standby).
func write(ctx context.Context, db *postgres.DB, driver string) (port int, err error) {
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		var standby bool
		if err := tx.QueryRowContext(ctx, `SELECT inet_server_port(), pg_is_in_recovery()`).Scan(&port, &standby); err != nil {
			return err
		}
		if standby {
			return fmt.Errorf("the DSN led to a standby (port %d)", port)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO hatest_rows (driver, port) VALUES (?, ?)`, driver, port)
		return err
	})
	return port, err
}

func open(t *testing.T, ctx context.Context, dsn, driver string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(ctx, dsn, postgres.Options{Driver: driver})
	if err != nil {
		t.Fatalf("%s: Open with the multi-host DSN: %v", driver, err)
	}
	t.Cleanup(func() { db.Close() })
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS hatest_rows (
			driver text NOT NULL, port int NOT NULL, at timestamptz NOT NULL DEFAULT now())`)
		return err
	})
	if err != nil {
		t.Fatalf("%s: create table: %v", driver, err)
	}
	return db
}

// TestHADSN proves that both drivers take the multi-host DSN and reach the
// primary with it.
func TestHADSN(t *testing.T) {
	dsn := pgtest.HADSN(t)
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db := open(t, ctx, dsn, driver)
			port, err := write(ctx, db, driver)
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			t.Logf("%s wrote on the primary at port %d", driver, port)
		})
	}
}

// TestHAWriteLoop writes every 50ms through one pool per driver for
// REFSET_TEST_HA_LOOP (two seconds when unset, on the cluster as it is, where
// writes must commit), logging each outage; it fails if writes have not resumed by
// the end.
func TestHAWriteLoop(t *testing.T) {
	dsn := pgtest.HADSN(t)
	d, steady := 2*time.Second, true
	if v := os.Getenv("REFSET_TEST_HA_LOOP"); v != "" {
		steady = false
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("REFSET_TEST_HA_LOOP=%q is not a positive duration", v)
		}
	}
	var wg sync.WaitGroup
	for _, driver := range drivers {
		ctx := context.Background()
		db := open(t, ctx, dsn, driver)
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(d)
			lastPort, writes, fails := 0, 0, 0
			var down time.Time
			var errs []string
			for time.Now().Before(end) {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				port, err := write(wctx, db, driver)
				cancel()
				if err != nil {
					fails++
					if down.IsZero() {
						down = time.Now()
					}
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
				} else {
					writes++
					if !down.IsZero() {
						t.Logf("%s: writes failed for %.1fs, now on port %d (was %d); first errors: %q",
							driver, time.Since(down).Seconds(), port, lastPort, errs)
						down, errs = time.Time{}, nil
					} else if lastPort != 0 && port != lastPort {
						t.Logf("%s: moved from port %d to %d without a failed write", driver, lastPort, port)
					}
					lastPort = port
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("%s: %d writes committed, %d failed, last on port %d", driver, writes, fails, lastPort)
			if !down.IsZero() {
				t.Errorf("%s: writes still failing at the end, since %.1fs: %q", driver, time.Since(down).Seconds(), errs)
			}
			if steady && writes == 0 {
				// Failures are only logged: the cluster may still settle from
				// TestFailover's last restart.
				t.Errorf("%s: no write committed in %v (%d failed: %q)", driver, d, fails, errs)
			}
		}()
	}
	wg.Wait()
}

const (
	// writersPerPool is how many goroutines commit through each pool at once:
	// enough that a failover catches some in COMMIT, few enough for CI's two
	// cores (four pools: eight writers in all).
	writersPerPool = 2
	// writePause is each writer's pause between units of work; a failover's
	// outage is measured to about this.
	writePause = 20 * time.Millisecond
	// writeTimeout bounds one unit of work: longer than any outage, so that a
	// write fails for the cluster's sake, never for the context's.
	writeTimeout = 90 * time.Second
	// resumeWithin is how long after a failover command returned (it returns once
	// a write commits on the new primary) every pool must have committed again.
	resumeWithin = 30 * time.Second
	// retryBudget is the retrying pools' store.Options.RetryUnavailable: longer
	// than a kill's outage (10-15s here), so that no unit of work runs out of it.
	retryBudget = 60 * time.Second
)

// errStandby is what a unit of work returns when its connection leads to a server
// in recovery: the DSN's target_session_attrs=read-write must never allow it.
var errStandby = errors.New("the unit of work ran on a standby")

// key names one write: its writer and the writer's count.
type key struct{ writer, seq int }

// pool is one refset database of the test, on one driver, and what its writers saw.
type pool struct {
	name  string // driver[/retry]: the subtest's name, and the rows' driver column
	db    *postgres.DB
	retry bool // the pool rides through failovers: RetryUnavailable is set

	mu        sync.Mutex
	acked     map[key]int   // writes InTx returned nil for, and the port they committed on
	failed    map[key]error // writes InTx returned an error for
	successes []time.Time   // when each acknowledged write returned, unsorted
}

func (p *pool) record(k key, port int, err error, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed[k] = err
		return
	}
	p.acked[k] = port
	p.successes = append(p.successes, at)
}

// committedSince reports whether a write was acknowledged after t.
func (p *pool) committedSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.successes {
		if s.After(t) {
			return true
		}
	}
	return false
}

// outage is the longest time without an acknowledged write that overlaps
// [from, to]: how long a failover kept the pool from writing.
func (p *pool) outage(from, to time.Time) time.Duration {
	p.mu.Lock()
	s := slices.Clone(p.successes)
	p.mu.Unlock()
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	for i := 1; i < len(s); i++ {
		if s[i].After(from) && s[i-1].Before(to) {
			longest = max(longest, s[i].Sub(s[i-1]))
		}
	}
	return longest
}

// failoverWrite commits the row (run, driver, writer, seq) through refset and
// returns the port of the server it ran on, refusing a standby.
func failoverWrite(ctx context.Context, p *pool, run string, k key) (port int, err error) {
	err = refset.InTx(ctx, p.db, func(ctx context.Context, tx refset.Tx) error {
		var standby bool
		if err := tx.QueryRowContext(ctx, `SELECT inet_server_port(), pg_is_in_recovery()`).Scan(&port, &standby); err != nil {
			return err
		}
		if standby {
			return fmt.Errorf("%w (port %d)", errStandby, port)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO hatest_failover (run, driver, writer, seq, port) VALUES (?, ?, ?, ?, ?)`,
			run, p.name, k.writer, k.seq, port)
		return err
	})
	return port, err
}

// TestFailover writes through refset on both drivers, each with a pool that fails
// fast and one that rides through (store.Options.RetryUnavailable), while the
// cluster is switched over once and its primary killed with SIGKILL once (then
// brought back as a standby), and checks what refset promises: writes resume
// after each failover; every write refset acknowledged is on the final primary;
// none ran on a standby; every failed write failed with ErrUnavailable, and those
// that failed without ErrCommitUnknown (nothing changed) are not there; the pools
// that retry lose no unit of work to ErrUnavailable alone. It logs each
// failover's seconds without an acknowledged write, per pool.
func TestFailover(t *testing.T) {
	dsn := pgtest.HADSN(t)
	c := haCluster(t)
	ctx := t.Context()
	run := randomRun(t)

	var pools []*pool
	for _, driver := range drivers {
		for _, retry := range []bool{false, true} {
			opts := postgres.Options{Driver: driver}
			name := driver
			if retry {
				opts.RetryUnavailable = retryBudget
				name += "/retry"
			}
			db, err := postgres.Open(ctx, dsn, opts)
			if err != nil {
				t.Fatalf("%s: Open with the multi-host DSN: %v", name, err)
			}
			t.Cleanup(func() { db.Close() })
			pools = append(pools, &pool{name: name, db: db, retry: retry,
				acked: map[key]int{}, failed: map[key]error{}})
		}
	}
	err := refset.InTx(ctx, pools[0].db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS hatest_failover (
			run text NOT NULL, driver text NOT NULL, writer int NOT NULL, seq int NOT NULL,
			port int NOT NULL, at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (run, driver, writer, seq))`)
		return err
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}

	// The writers stop when the failovers are done, or when the test fails
	// half-way (the cleanup), so that no write outlives the test.
	stop := make(chan struct{})
	var stopOnce sync.Once
	var writers sync.WaitGroup
	stopWriters := func() { stopOnce.Do(func() { close(stop) }); writers.Wait() }
	t.Cleanup(stopWriters)
	for _, p := range pools {
		for w := range writersPerPool {
			writers.Go(func() {
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					k := key{writer: w, seq: seq}
					wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
					port, err := failoverWrite(wctx, p, run, k)
					cancel()
					p.record(k, port, err, time.Now())
					time.Sleep(writePause)
				}
			})
		}
	}

	waitForWrites := func(what string, since time.Time) {
		t.Helper()
		deadline := time.Now().Add(resumeWithin)
		for _, p := range pools {
			for !p.committedSince(since) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s has committed nothing in the %v since", what, p.name, resumeWithin)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitForWrites("before the failovers", time.Now())

	// The failovers, one after the other; restart-killed brings the killed node
	// back, so that the cluster is whole again for the tests after this one
	// (and done by a cleanup if the test fails before).
	type failover struct {
		command  string
		from, to time.Time
	}
	var failovers []failover
	killed := false
	t.Cleanup(func() {
		if killed {
			c.run(t, "restart-killed")
		}
	})
	for _, command := range []string{"switchover", "kill-primary", "restart-killed"} {
		from := time.Now()
		c.run(t, command)
		to := time.Now()
		killed = command == "kill-primary"
		failovers = append(failovers, failover{command, from, to})
		waitForWrites("after "+command, to)
		time.Sleep(500 * time.Millisecond) // steady writes between two failovers
	}
	stopWriters()

	for _, p := range pools {
		t.Run(p.name, func(t *testing.T) {
			for _, f := range failovers {
				t.Logf("%s: %.2fs without an acknowledged write", f.command, p.outage(f.from, f.to).Seconds())
			}
			checkOutcomes(t, p, run)
		})
	}
}

// checkOutcomes checks a pool's writes against the final primary.
func checkOutcomes(t *testing.T, p *pool, run string) {
	t.Helper()
	unknown, plain, other, onStandby := 0, []error{}, []error{}, []error{}
	for _, err := range p.failed {
		switch {
		case errors.Is(err, errStandby):
			onStandby = append(onStandby, err)
		case errors.Is(err, refset.ErrCommitUnknown) && errors.Is(err, refset.ErrUnavailable):
			unknown++
		case errors.Is(err, refset.ErrUnavailable):
			plain = append(plain, err)
		default:
			other = append(other, err)
		}
	}
	t.Logf("%d writes acknowledged, %d failed (%d with ErrCommitUnknown)", len(p.acked), len(p.failed), unknown)
	someErrors(t, "a write reached a standby", onStandby)
	someErrors(t, "a failed write's error is not ErrUnavailable", other)
	if p.retry {
		// ErrUnavailable alone says the unit did not commit, which RetryUnavailable
		// runs again until the new primary takes it: a failover shorter than the
		// budget must leave none.
		someErrors(t, "a unit of work failed with ErrUnavailable alone despite RetryUnavailable", plain)
	}

	// The final primary's rows of this pool, on a connection of its own pool.
	present := map[key]bool{}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := refset.InTx(ctx, p.db, func(ctx context.Context, tx refset.Tx) error {
		var standby bool
		if err := tx.QueryRowContext(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
			return err
		}
		if standby {
			return errStandby
		}
		rows, err := tx.QueryContext(ctx, `SELECT writer, seq FROM hatest_failover WHERE run = ? AND driver = ?`, run, p.name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k key
			if err := rows.Scan(&k.writer, &k.seq); err != nil {
				return err
			}
			present[k] = true
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("read the final primary: %v", err)
	}
	var lost []key
	for k := range p.acked {
		if !present[k] {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes are not on the final primary, among them %v", len(lost), lost[:min(len(lost), 5)])
	}
	// A failure without ErrCommitUnknown says nothing changed; one with it may
	// have committed, and is counted.
	var landed []key
	unknownPresent := 0
	for k, err := range p.failed {
		switch {
		case !present[k]:
		case errors.Is(err, refset.ErrCommitUnknown):
			unknownPresent++
		default:
			landed = append(landed, k)
		}
	}
	t.Logf("%d of the %d writes failed with ErrCommitUnknown are on the final primary", unknownPresent, unknown)
	if len(landed) > 0 {
		t.Errorf("%d writes refset reported failed (without ErrCommitUnknown) are on the final primary, among them %v",
			len(landed), landed[:min(len(landed), 5)])
	}
}

// someErrors reports the first five of errs, and how many more there are.
func someErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for _, err := range errs[:min(len(errs), 5)] {
		t.Errorf("%s: %v", what, err)
	}
	if len(errs) > 5 {
		t.Errorf("%s: %d more", what, len(errs)-5)
	}
}

// randomRun names one run of the test: its rows, apart from those of earlier runs
// on the same cluster.
func randomRun(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatalf("random run: %v", err)
	}
	return hex.EncodeToString(b)
}
