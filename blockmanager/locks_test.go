package blockmanager

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/stretchr/testify/require"
)

// step is one thing a transaction does that may wait for another's lock.
type step func(ctx context.Context, m *Manager, tx refset.Tx) error

func lockStep(key string) step {
	return func(ctx context.Context, m *Manager, tx refset.Tx) error { return m.lock(ctx, tx, key) }
}

func gateStep(exclusive bool) step {
	return func(ctx context.Context, m *Manager, tx refset.Tx) error { return m.passGate(ctx, tx, exclusive) }
}

func keepStep(id string, gate bool) step {
	return func(ctx context.Context, m *Manager, tx refset.Tx) error {
		_, err := m.keepPredecessor(ctx, tx, id, gate)
		return err
	}
}

// collectorLock locks a block's row as clean-up does before it deletes it.
func collectorLock(id string) step {
	return func(ctx context.Context, m *Manager, tx refset.Tx) error {
		var one int
		return tx.QueryRowContext(ctx, m.sql(`SELECT 1 FROM blocks WHERE header_signature = ? FOR UPDATE`), id).Scan(&one)
	}
}

// Where the database runs write transactions side by side (refsetdriver.TxLocks),
// the manager's locks order them: a transaction waits for another's lock until
// that one ends, exactly where the two conflict.
func TestTxLocksOrderTransactions(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		if _, ok := m.drv.(refsetdriver.TxLocks); !ok {
			// Only a database that runs one write transaction at a time (SQLite's one
			// writer, in process) may go without: the manager then takes no lock.
			require.True(t, m.drv.InProcess(), "a database of concurrent writers must give the manager its locks")
			return
		}
		put(t, m, chain("g", NullBlockID, 0, 1))
		tests := []struct {
			name          string
			first, second step
			waits         bool
		}{
			{"lock, same key", lockStep("a"), lockStep("a"), true},
			{"lock, other key", lockStep("a"), lockStep("b"), false},
			{"exclusive gate, shared gate", gateStep(true), gateStep(false), true},
			{"exclusive gate, predecessor kept through the gate", gateStep(true), keepStep("g0000", true), true},
			{"exclusive gate, predecessor kept without the gate", gateStep(true), keepStep("g0000", false), false},
			{"shared gate, shared gate", gateStep(false), gateStep(false), false},
			{"shared gate, exclusive gate", gateStep(false), gateStep(true), true},
			{"kept predecessor, clean-up's row lock", keepStep("g0000", false), collectorLock("g0000"), true},
			{"kept predecessor, kept predecessor", keepStep("g0000", true), keepStep("g0000", true), false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) { runPair(t, m, tt.first, m, tt.second, tt.waits) })
		}
	})
}

// The locks are the blocks table's: managers of tables in other schemas of one
// database never wait for each other's, even under the same names (the gate, the
// chain controller's lock, a block's lock), where one gate for the whole database
// made every arrival wait behind any manager's decision to make a block wait.
func TestTxLocksAreTheTablesOwn(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		a, other := openManager(t, b.Open(t, testdb.Options{}), Config{}), openManager(t, b.Open(t, testdb.Options{}), Config{})
		require.NotEqual(t, a.locks, other.locks)
		put(t, a, chain("g", NullBlockID, 0, 1))
		put(t, other, chain("g", NullBlockID, 0, 1))
		tests := []struct {
			name          string
			first, second step
		}{
			{"exclusive gate, shared gate", gateStep(true), gateStep(false)},
			{"exclusive gate, exclusive gate", gateStep(true), gateStep(true)},
			{"exclusive gate, predecessor kept through the gate", gateStep(true), keepStep("g0000", true)},
			{"shared gate, exclusive gate", gateStep(false), gateStep(true)},
			{"the chain controller's lock", lockStep("chain-controller"), lockStep("chain-controller")},
			{"a block's lock", lockStep("g0000"), lockStep("g0000")},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) { runPair(t, a, tt.first, other, tt.second, false) })
		}
	})
}

// runPair runs first in a transaction of m1 and, while that transaction holds what
// first took, second in one of m2, and checks that the second waits for the first
// to end, or does not.
func runPair(t *testing.T, m1 *Manager, first step, m2 *Manager, second step, waits bool) {
	ctx := t.Context()
	held, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	end := sync.OnceFunc(func() { close(release) })
	defer end() // a failed test's first transaction ends too
	go func() {
		firstDone <- refset.InTx(ctx, m1.db, func(ctx context.Context, tx refset.Tx) error {
			if err := first(ctx, m1, tx); err != nil {
				return err
			}
			close(held)
			<-release
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-firstDone:
		t.Fatalf("first transaction: %v", err)
	}
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- refset.InTx(ctx, m2.db, func(ctx context.Context, tx refset.Tx) error { return second(ctx, m2, tx) })
	}()
	if waits {
		select {
		case err := <-secondDone:
			t.Fatalf("the second transaction did not wait for the first (%v)", err)
		case <-time.After(500 * time.Millisecond):
		}
		end()
		require.NoError(t, <-secondDone)
	} else {
		select {
		case err := <-secondDone:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the second transaction waits for the first")
		}
		end()
	}
	require.NoError(t, <-firstDone)
}
