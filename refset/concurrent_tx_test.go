package refset_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
)

// openTally is a fresh database of backend b with a table tally (g, i): a row per
// statement that goroutine g wrote.
func openTally(tb testing.TB, b testdb.Backend) refset.Database {
	tb.Helper()
	db := b.Open(tb, testdb.Options{})
	err := refset.InTx(tb.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE tally (g INTEGER NOT NULL, i INTEGER NOT NULL, PRIMARY KEY (g, i))`)
		return err
	})
	if err != nil {
		tb.Fatalf("create tally: %v", err)
	}
	return db
}

// tallyRows are the rows of tally, committed, as "g/i" sorted.
func tallyRows(tb testing.TB, db refset.Database) []string {
	tb.Helper()
	rows, err := db.Reader().QueryContext(tb.Context(), `SELECT g, i FROM tally`)
	if err != nil {
		tb.Fatalf("read tally: %v", err)
	}
	tb.Cleanup(func() { _ = rows.Close() })
	var got []string
	for rows.Next() {
		var g, i int
		if err := rows.Scan(&g, &i); err != nil {
			tb.Fatalf("scan tally: %v", err)
		}
		got = append(got, fmt.Sprintf("%d/%d", g, i))
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("read tally: %v", err)
	}
	sort.Strings(got)
	return got
}

// statementOutcome checks err, the error of a statement run on a unit's Tx while
// other goroutines ran theirs: nil, or refused unsent with ErrInvalidTx. It reports
// whether the statement ran.
func statementOutcome(tb testing.TB, refused *atomic.Int64, what string, err error) bool {
	tb.Helper()
	switch {
	case err == nil:
		return true
	case errors.Is(err, refset.ErrInvalidTx) && !errors.Is(err, refset.ErrUnavailable):
		refused.Add(1)
		return false
	default:
		tb.Errorf("%s: %v (want nil or ErrInvalidTx; ErrUnavailable means the connection broke)", what, err)
		return false
	}
}

// raceTally runs goroutines goroutines at once, each running rounds rounds of
// statements on tx (an insert, a query whose rows it reads to the end, a
// QueryRowContext): each statement succeeds or is refused with ErrInvalidTx, and
// every goroutine sees, in the unit, exactly the rows its successful inserts wrote.
// It returns those rows, as "g/i", and how many statements were refused.
func raceTally(t *testing.T, ctx context.Context, tx refset.Tx, first, goroutines, rounds int) ([]string, int64) {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		wrote   []string
		refused atomic.Int64
	)
	for g := first; g < first+goroutines; g++ {
		wg.Go(func() {
			mine := 0
			for i := range rounds {
				_, err := tx.ExecContext(ctx, `INSERT INTO tally (g, i) VALUES (?, ?)`, g, i)
				if statementOutcome(t, &refused, "insert", err) {
					mine++
					mu.Lock()
					wrote = append(wrote, fmt.Sprintf("%d/%d", g, i))
					mu.Unlock()
				}
				rows, err := tx.QueryContext(ctx, `SELECT i FROM tally WHERE g = ?`, g)
				if statementOutcome(t, &refused, "query", err) {
					n := 0
					for rows.Next() {
						n++
					}
					if err := rows.Err(); err != nil {
						t.Errorf("goroutine %d: reading rows: %v", g, err)
					}
					if n != mine {
						t.Errorf("goroutine %d: the query saw %d of its rows, want %d", g, n, mine)
					}
				}
				var n int
				err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tally WHERE g = ?`, g).Scan(&n)
				if statementOutcome(t, &refused, "query row", err) && n != mine {
					t.Errorf("goroutine %d: the row counted %d of its rows, want %d", g, n, mine)
				}
			}
		})
	}
	wg.Wait()
	return wrote, refused.Load()
}

// TestConcurrentStatementsInUnit races goroutines that run statements on one unit's
// Tx, directly and on the Tx of a savepoint inside it (a nested InTx, which shares
// the unit's transaction). A transaction is one connection: statements sent at once
// interleave on it, and lib/pq then loses the connection ("pq: unexpected ...
// response", ErrUnavailable). The Tx refuses, unsent, a statement that starts while
// another of the transaction is in flight (ErrInvalidTx); the unit stays usable and
// commits what its statements that ran wrote.
func TestConcurrentStatementsInUnit(t *testing.T) {
	const goroutines, rounds = 8, 40
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		db := openTally(t, b)
		var want []string
		var refused int64
		err := refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
			wrote, n := raceTally(t, ctx, tx, 0, goroutines, rounds)
			want, refused = append(want, wrote...), refused+n
			// A savepoint's Tx shares the unit's transaction: its statements and the
			// unit's own are let in one at a time together.
			err := refset.InTx(ctx, db, func(ctx context.Context, inner refset.Tx) error {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for k, q := range []refset.Tx{tx, inner} {
					wg.Go(func() {
						wrote, n := raceTally(t, ctx, q, goroutines*(k+1), goroutines/2, rounds/2)
						mu.Lock()
						want, refused = append(want, wrote...), refused+n
						mu.Unlock()
					})
				}
				wg.Wait()
				return nil
			})
			if err != nil {
				return fmt.Errorf("savepoint: %w", err)
			}
			// The unit is still usable on the owner's goroutine.
			if _, err := tx.ExecContext(ctx, `INSERT INTO tally (g, i) VALUES (?, ?)`, -1, 0); err != nil {
				return fmt.Errorf("owner's insert after the race: %w", err)
			}
			want = append(want, "-1/0")
			return nil
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		t.Logf("%s: %d statements refused", b.Name, refused)
		sort.Strings(want)
		got := tallyRows(t, db)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("committed %d rows, want the %d the unit's statements wrote:\ngot  %v\nwant %v", len(got), len(want), got, want)
		}
	})
}

// TestStatementWhileRowsOpen: a query's rows keep its statement in flight until they
// are closed, so a statement another goroutine starts meanwhile is refused, unsent,
// with ErrInvalidTx, and runs once they are; reading rows to the end and then
// running a statement, on one goroutine, is the usual pattern and runs.
func TestStatementWhileRowsOpen(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		db := openTally(t, b)
		err := refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
			for i := range 3 {
				if _, err := tx.ExecContext(ctx, `INSERT INTO tally (g, i) VALUES (?, ?)`, 1, i); err != nil {
					return err
				}
			}
			rows, err := tx.QueryContext(ctx, `SELECT i FROM tally WHERE g = ? ORDER BY i`, 1)
			if err != nil {
				return err
			}
			t.Cleanup(func() { _ = rows.Close() })
			if !rows.Next() {
				return fmt.Errorf("no first row: %v", rows.Err())
			}
			// Another goroutine, while the rows are open: each form is refused.
			other := func(stmt func() error) error {
				done := make(chan error)
				go func() { done <- stmt() }()
				return <-done
			}
			var n int
			for name, stmt := range map[string]func() error{
				"exec": func() error {
					_, err := tx.ExecContext(ctx, `INSERT INTO tally (g, i) VALUES (?, ?)`, 2, 0)
					return err
				},
				"query": func() error {
					r, err := tx.QueryContext(ctx, `SELECT 1 WHERE 1 = ?`, 1)
					if err == nil {
						_ = r.Close()
					}
					return err
				},
				"query row": func() error {
					return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tally WHERE g = ?`, 1).Scan(&n)
				},
			} {
				if err := other(stmt); !errors.Is(err, refset.ErrInvalidTx) {
					t.Errorf("%s while rows were open: %v, want ErrInvalidTx", name, err)
				} else {
					t.Logf("%s while rows were open: %v", name, err)
				}
			}
			// The rows are intact, and once read to the end (which closes them) the
			// next statement runs, on this goroutine or another.
			read := 1
			for rows.Next() {
				read++
			}
			if err := rows.Err(); err != nil || read != 3 {
				return fmt.Errorf("read %d rows (%v), want 3", read, err)
			}
			if err := other(func() error {
				_, err := tx.ExecContext(ctx, `INSERT INTO tally (g, i) VALUES (?, ?)`, 2, 1)
				return err
			}); err != nil {
				return fmt.Errorf("insert after the rows were read: %w", err)
			}
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tally`).Scan(&n); err != nil || n != 4 {
				return fmt.Errorf("count: %d, %v; want 4", n, err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		if got := fmt.Sprint(tallyRows(t, db)); got != "[1/0 1/1 1/2 2/1]" {
			t.Errorf("committed %s, want [1/0 1/1 1/2 2/1]", got)
		}
	})
}

// TestQueryRowInUnit: a QueryRowContext row scans as it would from the driver: its
// values, sql.ErrNoRows, and a failed statement's error.
func TestQueryRowInUnit(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		db := openTally(t, b)
		err := refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO tally (g, i) VALUES (?, ?)`, 7, 8); err != nil {
				return err
			}
			var g, i int
			if err := tx.QueryRowContext(ctx, `SELECT g, i FROM tally WHERE g = ?`, 7).Scan(&g, &i); err != nil || g != 7 || i != 8 {
				t.Errorf("row: %d, %d, %v; want 7, 8", g, i, err)
			}
			var s string
			if err := tx.QueryRowContext(ctx, `SELECT 'x' || CAST(? AS TEXT)`, "y").Scan(&s); err != nil || s != "xy" {
				t.Errorf("row: %q, %v; want xy", s, err)
			}
			if err := tx.QueryRowContext(ctx, `SELECT g FROM tally WHERE g = ?`, 9).Scan(&g); !errors.Is(err, sql.ErrNoRows) {
				t.Errorf("no row: %v, want sql.ErrNoRows", err)
			}
			if err := tx.QueryRowContext(ctx, `SELECT nosuch FROM tally`).Scan(&g); err == nil {
				t.Error("a bad query's row scanned")
			}
			return nil
		})
		// PostgreSQL aborts the transaction after the bad query: only the error matters.
		if err != nil && !b.Postgres {
			t.Fatalf("InTx: %v", err)
		}
	})
}

// TestReadsAndStatementsInUnit races refset's reads in a unit (Upgrade checks that
// the object is there, on the unit's transaction, through its Tx) against statements
// run directly on the unit's Tx: each read and each statement runs or is refused
// with ErrInvalidTx, and none breaks the connection.
func TestReadsAndStatementsInUnit(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		if err := refset.InTx(t.Context(), h.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE tally (g INTEGER NOT NULL, i INTEGER NOT NULL, PRIMARY KEY (g, i))`)
			return err
		}); err != nil {
			t.Fatalf("create tally: %v", err)
		}
		tok := h.pending(t)
		var want []string
		var upgrades, refused atomic.Int64
		err := refset.InTx(t.Context(), h.db, func(ctx context.Context, tx refset.Tx) error {
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 40 {
						_, err := h.set.Upgrade(ctx, tok.ID())
						if statementOutcome(t, &refused, "upgrade", err) {
							upgrades.Add(1)
						}
					}
				})
			}
			wg.Go(func() {
				wrote, n := raceTally(t, ctx, tx, 0, 4, 20)
				want = wrote
				refused.Add(n)
			})
			wg.Wait()
			return nil
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		t.Logf("%s: %d upgrades ran, %d calls and statements refused", b.Name, upgrades.Load(), refused.Load())
		sort.Strings(want)
		if got := tallyRows(t, h.db); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("committed %v, want %v", got, want)
		}
	})
}
