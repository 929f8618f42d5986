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
	"fmt"
	"os"
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
