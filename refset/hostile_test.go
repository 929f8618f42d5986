package refset_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostile is a set of testdb.Blocks on a fresh database of one backend, with the
// RFC's pending and heads tables, for tests that call the core as a hostile caller
// would.
type hostile struct {
	db  refset.Database
	set *refset.RefSet[testdb.Block, string]
	n   atomic.Int64
}

// hostileBackends are the backends the hostile tests run on: SQLite, and
// PostgreSQL through both drivers (pgx pipelines hand-overs, lib/pq does not).
func hostileBackends() []testdb.Backend {
	return []testdb.Backend{testdb.SQLite, testdb.Pgx, testdb.LibPQ}
}

func openHostile(tb testing.TB, b testdb.Backend) *hostile {
	tb.Helper()
	return openHostileWith(tb, b, testdb.Options{})
}

// openHostileWith is openHostile on a database opened with opts.
func openHostileWith(tb testing.TB, b testdb.Backend, opts testdb.Options) *hostile {
	tb.Helper()
	ctx := tb.Context()
	db := b.Open(tb, opts)
	err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		for _, q := range strings.Split(b.Types().In(testdb.BlocksSchema), ";") {
			if strings.TrimSpace(q) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("create tables: %v", err)
	}
	st, err := store.NewStore[testdb.Block, string](ctx, db, store.Config{Table: "blocks"})
	if err != nil {
		tb.Fatalf("new store: %v", err)
	}
	return &hostile{db: db, set: refset.New(st)}
}

// pending adds a new block with a row in pending, and returns its token.
func (h *hostile) pending(tb testing.TB) *refset.RefToken[string] {
	tb.Helper()
	id := fmt.Sprintf("b%d", h.n.Add(1))
	tok, err := h.set.Add(tb.Context(), testdb.Block{Hash: id, Height: 1}, refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1))
	if err != nil {
		tb.Fatalf("add %s: %v", id, err)
	}
	return tok
}

// handOver releases tok from pending and acquires it into heads.
func (h *hostile) handOver(tb testing.TB, tok *refset.RefToken[string], more ...refset.Command[string]) *refset.Acquired[string] {
	tb.Helper()
	rel, err := tok.Release(refset.Exec[string](`DELETE FROM pending WHERE block_id = ?`, 1))
	if err != nil {
		tb.Fatalf("release: %v", err)
	}
	acq, err := rel.Acquire(append([]refset.Command[string]{refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1)}, more...)...)
	if err != nil {
		tb.Fatalf("acquire: %v", err)
	}
	return acq
}

// count is the number of rows of table whose block_id is id.
func (h *hostile) count(tb testing.TB, table, id string) int {
	tb.Helper()
	var n int
	q := h.db.Driver().Rebind(`SELECT COUNT(*) FROM ` + table + ` WHERE block_id = ?`)
	if err := h.db.Reader().QueryRowContext(tb.Context(), q, id).Scan(&n); err != nil {
		tb.Fatalf("count %s: %v", table, err)
	}
	return n
}

// wantWhere checks that the reference to id is in table alone, of pending and heads.
func (h *hostile) wantWhere(tb testing.TB, id, table string) {
	tb.Helper()
	p, hd := h.count(tb, "pending", id), h.count(tb, "heads", id)
	want := map[string][2]int{"pending": {1, 0}, "heads": {0, 1}}[table]
	if p != want[0] || hd != want[1] {
		tb.Fatalf("%s: %d pending rows and %d heads rows, want its reference in %s alone", id, p, hd, table)
	}
}

var errHostile = errors.New("hostile: the caller's own error")

// A hand-over completed inside a unit of work that then rolls back did not happen:
// the Acquired must be usable again (as after any failed Complete), so that a unit
// InTx runs again, after a conflict, completes it in its new transaction, and a
// caller may complete it after a unit that failed.
func TestHostileCompleteInUnitThatRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end is what the unit does after its Complete succeeded, on its attempt-th run.
		end func(ctx context.Context, tx refset.Tx, attempt int) error
		// complete completes acq in the unit.
		complete func(ctx context.Context, db refset.Database, tx refset.Tx, acq *refset.Acquired[string]) error
		// wantErr is what InTx returns; nil: the unit commits (on a later run).
		wantErr error
	}{
		{
			name:     "unit fails after Complete",
			end:      func(context.Context, refset.Tx, int) error { return errHostile },
			complete: completeJoined,
			wantErr:  errHostile,
		},
		{
			name:     "unit fails after CompleteTx",
			end:      func(context.Context, refset.Tx, int) error { return errHostile },
			complete: completeTx,
			wantErr:  errHostile,
		},
		{
			name: "unit runs again after a conflict",
			end: func(_ context.Context, _ refset.Tx, attempt int) error {
				if attempt == 1 {
					return fmt.Errorf("hostile: %w", refset.ErrConflict)
				}
				return nil
			},
			complete: completeJoined,
		},
		{
			name: "unit panics after Complete",
			end: func(context.Context, refset.Tx, int) error {
				panic("hostile")
			},
			complete: completeJoined,
			wantErr:  errHostile, // the panic, recovered below
		},
		{
			name: "unit ends its transaction after Complete",
			end: func(ctx context.Context, tx refset.Tx, _ int) error {
				_, _ = tx.ExecContext(ctx, `ROLLBACK`) // refused; the unit rolls back
				return nil
			},
			complete: completeJoined,
			wantErr:  refset.ErrInvalidCommand,
		},
		{
			name: "Complete in a nested InTx whose savepoint the unit's function undoes",
			end:  func(context.Context, refset.Tx, int) error { return errHostile },
			complete: func(ctx context.Context, db refset.Database, _ refset.Tx, acq *refset.Acquired[string]) error {
				// The nested InTx is a savepoint that is released; the unit around it
				// then rolls back.
				return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error { return completeTx(ctx, db, tx, acq) })
			},
			wantErr: errHostile,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
				h := openHostile(t, b)
				tok := h.pending(t)
				acq := h.handOver(t, tok)
				attempts := 0
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = errHostile
						}
					}()
					return refset.InTx(t.Context(), h.db, func(ctx context.Context, tx refset.Tx) error {
						attempts++
						if err := tc.complete(ctx, h.db, tx, acq); err != nil {
							return err
						}
						return tc.end(ctx, tx, attempts)
					})
				}()
				if tc.wantErr == nil {
					if err != nil {
						t.Fatalf("InTx: %v (runs: %d), want it to commit on its second run", err, attempts)
					}
					h.wantWhere(t, tok.ID(), "heads")
					// Committed: the Acquired is spent.
					if _, err := acq.Complete(t.Context()); !errors.Is(err, refset.ErrTokenConsumed) {
						t.Fatalf("Complete after the unit committed: %v, want ErrTokenConsumed", err)
					}
					return
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("InTx: %v, want %v", err, tc.wantErr)
				}
				h.wantWhere(t, tok.ID(), "pending")
				// Rolled back: the hand-over did not happen, and can.
				if _, err := acq.Complete(t.Context()); err != nil {
					t.Fatalf("Complete after the unit rolled back: %v, want the Acquired usable", err)
				}
				h.wantWhere(t, tok.ID(), "heads")
			})
		})
	}
}

func completeJoined(ctx context.Context, _ refset.Database, _ refset.Tx, acq *refset.Acquired[string]) error {
	_, err := acq.Complete(ctx)
	return err
}

func completeTx(ctx context.Context, _ refset.Database, tx refset.Tx, acq *refset.Acquired[string]) error {
	_, err := acq.CompleteTx(ctx, tx)
	return err
}

// A hand-over completed in a savepoint (a nested InTx) that rolls back, inside a unit
// that commits, did not happen either: the Acquired is usable, and the token the
// undone Complete gave is spent, so no hand-over is ever made twice from one token.
func TestHostileCompleteInSavepointThatRollsBack(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		tok := h.pending(t)
		acq := h.handOver(t, tok)
		var undone *refset.RefToken[string]
		err := refset.InTx(t.Context(), h.db, func(ctx context.Context, tx refset.Tx) error {
			inner := refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
				var err error
				if undone, err = acq.Complete(ctx); err != nil {
					return err
				}
				return errHostile
			})
			if !errors.Is(inner, errHostile) {
				return fmt.Errorf("nested InTx: %v, want errHostile", inner)
			}
			return nil // the unit commits, without the savepoint's work
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		h.wantWhere(t, tok.ID(), "pending")
		if _, err := undone.Release(); !errors.Is(err, refset.ErrTokenConsumed) {
			t.Fatalf("Release of the token an undone Complete gave: %v, want ErrTokenConsumed", err)
		}
		if _, err := h.set.Get(t.Context(), undone); !errors.Is(err, refset.ErrTokenConsumed) {
			t.Fatalf("Get of the token an undone Complete gave: %v, want ErrTokenConsumed", err)
		}
		again, err := acq.Complete(t.Context())
		if err != nil {
			t.Fatalf("Complete after the savepoint rolled back: %v, want the Acquired usable", err)
		}
		h.wantWhere(t, again.ID(), "heads")
	})
}

// nilCommand is a Command whose Execute would dereference its nil receiver.
type nilCommand struct{ query string }

func (c *nilCommand) Execute(ctx context.Context, tx refset.Tx, _ string) error {
	_, err := tx.ExecContext(ctx, c.query)
	return err
}

// A nil command, however it is typed, and a nil function are a caller's mistake:
// refused with ErrInvalidCommand before anything runs, never a panic in the middle of
// a transaction, and nothing changes.
func TestHostileNilCallables(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		for _, nilCmd := range []struct {
			name string
			cmd  refset.Command[string]
		}{
			{"nil interface", nil},
			{"nil CommandFunc", refset.CommandFunc[string](nil)},
			{"nil pointer", (*nilCommand)(nil)},
		} {
			tok := h.pending(t)
			for _, call := range []struct {
				name string
				run  func() error
			}{
				{"Add", func() error {
					_, err := h.set.Add(ctx, testdb.Block{Hash: "never", Height: 1}, nilCmd.cmd)
					return err
				}},
				{"Upgrade", func() error { _, err := h.set.Upgrade(ctx, tok.ID(), nilCmd.cmd); return err }},
				{"Release", func() error { _, err := tok.Release(nilCmd.cmd); return err }},
				{"Acquire", func() error {
					rel, err := h.pending(t).Release()
					if err != nil {
						return err
					}
					_, err = rel.Acquire(nilCmd.cmd)
					return err
				}},
			} {
				t.Run(nilCmd.name+"/"+call.name, func(t *testing.T) {
					err := callNoPanic(t, call.run)
					if !errors.Is(err, refset.ErrInvalidCommand) {
						t.Fatalf("%v, want ErrInvalidCommand", err)
					}
				})
			}
			// Refused before it took the token: the token is still usable.
			if _, err := tok.Release(); err != nil {
				t.Fatalf("%s: Release after a refused one: %v", nilCmd.name, err)
			}
		}
		if _, err := h.set.Load(ctx, "never"); !errors.Is(err, refset.ErrNotFound) {
			t.Fatalf("Load of the object a refused Add named: %v, want ErrNotFound", err)
		}
		for _, call := range []struct {
			name string
			run  func() error
		}{
			{"InTx", func() error { return refset.InTx(ctx, h.db, nil) }},
			{"InTx in a unit", func() error {
				return refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error { return refset.InTx(ctx, h.db, nil) })
			}},
			{"RetryConflicts", func() error { return refset.RetryConflicts(ctx, h.db, nil) }},
		} {
			t.Run("nil function/"+call.name, func(t *testing.T) {
				if err := callNoPanic(t, call.run); !errors.Is(err, refset.ErrInvalidCommand) {
					t.Fatalf("%v, want ErrInvalidCommand", err)
				}
			})
		}
	})
}

// callNoPanic is fn's error, failing tb if fn panics.
func callNoPanic(tb testing.TB, fn func() error) (err error) {
	tb.Helper()
	defer func() {
		if p := recover(); p != nil {
			tb.Fatalf("panicked: %v", p)
		}
	}()
	return fn()
}

// Each step of a hand-over is taken once, however many goroutines race for it: one
// wins, every other gets ErrTokenConsumed and runs nothing, and the database holds the
// one reference the winner's hand-over made.
func TestHostileRacingSteps(t *testing.T) {
	const racers = 8
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		tok := h.pending(t)
		var ran atomic.Int32 // runs of the acquire command
		counted := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
			ran.Add(1)
			return nil
		})
		rels := race(t, racers, func() (*refset.Released[string], error) {
			return tok.Release(refset.Exec[string](`DELETE FROM pending WHERE block_id = ?`, 1))
		})
		acqs := race(t, racers, func() (*refset.Acquired[string], error) {
			return rels.Acquire(refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1), counted)
		})
		race(t, racers, func() (*refset.RefToken[string], error) { return acqs.Complete(ctx) })
		if n := ran.Load(); n != 1 {
			t.Fatalf("the acquire command ran %d times, want once", n)
		}
		h.wantWhere(t, tok.ID(), "heads")
	})
}

// race runs step on n goroutines at once and returns the one result that won,
// failing tb unless exactly one did and every other got ErrTokenConsumed.
func race[V any](tb testing.TB, n int, step func() (V, error)) V {
	tb.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		vals  = make([]V, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			vals[i], errs[i] = step()
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			tb.Fatalf("racers %d and %d both won", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, refset.ErrTokenConsumed):
			tb.Fatalf("racer %d: %v, want ErrTokenConsumed", i, err)
		}
	}
	if won < 0 {
		tb.Fatalf("no racer won: %v", errs)
	}
	return vals[won]
}

// A Command that panics, or blocks until its context ends, changes nothing: the
// transaction rolls back, the Acquired stays usable, and the panic goes on with its
// own value.
func TestHostileCommandsThatMisbehave(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cmd       refset.CommandFunc[string]
		ctx       func(context.Context) (context.Context, context.CancelFunc)
		wantPanic any
		wantErr   error
	}{
		{
			name:      "panics",
			cmd:       func(context.Context, refset.Tx, string) error { panic("hostile") },
			wantPanic: "hostile",
		},
		{
			name: "panics after its statement",
			cmd: func(ctx context.Context, tx refset.Tx, id string) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO blocks (id, height) VALUES (?, 1)`, id+"-orphan"); err != nil {
					return err
				}
				panic("hostile")
			},
			wantPanic: "hostile",
		},
		{
			name: "blocks until its context ends, then returns nil",
			cmd: func(ctx context.Context, _ refset.Tx, _ string) error {
				<-ctx.Done()
				return nil
			},
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 50*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
		{
			name: "swallows a refused COMMIT",
			cmd: func(ctx context.Context, tx refset.Tx, _ string) error {
				_, _ = tx.ExecContext(ctx, `COMMIT`)
				return nil
			},
			wantErr: refset.ErrInvalidCommand,
		},
		{
			name:    "completes its own hand-over again",
			cmd:     nil, // set below: it needs the Acquired
			wantErr: refset.ErrTokenConsumed,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
				h := openHostile(t, b)
				tok := h.pending(t)
				var acq *refset.Acquired[string]
				cmd := tc.cmd
				if cmd == nil {
					cmd = func(ctx context.Context, _ refset.Tx, _ string) error {
						_, err := acq.Complete(ctx)
						return err
					}
				}
				var runs atomic.Int32
				acq = h.handOver(t, tok, refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
					runs.Add(1)
					return cmd(ctx, tx, id)
				}))
				ctx, cancel := t.Context(), context.CancelFunc(func() {})
				if tc.ctx != nil {
					ctx, cancel = tc.ctx(ctx)
				}
				defer cancel()
				var panicked any
				err := func() error {
					defer func() { panicked = recover() }()
					_, err := acq.Complete(ctx)
					return err
				}()
				if panicked != tc.wantPanic {
					t.Fatalf("panic %v, want %v", panicked, tc.wantPanic)
				}
				if tc.wantPanic == nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("Complete: %v, want %v", err, tc.wantErr)
				}
				h.wantWhere(t, tok.ID(), "pending")
				if _, err := h.set.Load(t.Context(), tok.ID()+"-orphan"); !errors.Is(err, refset.ErrNotFound) {
					t.Fatalf("Load of what the command wrote: %v, want ErrNotFound", err)
				}
				// The Acquired is usable: its next Complete runs the commands again
				// (and they misbehave again).
				again, cancelAgain := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancelAgain()
				_, err = func() (_ *refset.RefToken[string], err error) {
					defer func() {
						if recover() != nil {
							err = errHostile
						}
					}()
					return acq.Complete(again)
				}()
				if n := runs.Load(); n != 2 {
					t.Fatalf("Complete again: %v, after the command ran %d times in all, want the Acquired usable and the command run again", err, n)
				}
			})
		})
	}
}

// A unit whose function returns nil after its context ended does not commit: InTx
// returns the context's error, and nothing the function wrote is stored.
func TestHostileUnitReturnsNilAfterItsContextEnded(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		err := refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
			if _, err := h.set.Add(ctx, testdb.Block{Hash: "late", Height: 1}); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("InTx: %v, want context.DeadlineExceeded", err)
		}
		if _, err := h.set.Load(t.Context(), "late"); !errors.Is(err, refset.ErrNotFound) {
			t.Fatalf("Load of what the unit added: %v, want ErrNotFound", err)
		}
	})
}

// A Tx is the unit's while the unit runs, and no longer: a Command or an InTx
// function that keeps its Tx (or the Querier Reader gave it) and runs a statement
// after its unit ended is refused with ErrInvalidTx and writes nothing, even while
// another unit is running (on SQLite, whose units of work share the writer's
// transaction, in the transaction that unit is in).
func TestHostileTxKeptPastItsUnit(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		var kept []refset.Querier
		keep := refset.CommandFunc[string](func(_ context.Context, tx refset.Tx, _ string) error {
			kept = append(kept, tx)
			return nil
		})
		tok := h.pending(t)
		if _, err := h.handOver(t, tok, keep).Complete(ctx); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if _, err := h.set.Add(ctx, testdb.Block{Hash: "kept", Height: 1}, keep); err != nil {
			t.Fatalf("Add: %v", err)
		}
		err := refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
			kept = append(kept, tx, refset.Reader(ctx, h.db))
			return nil
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		// Another unit holds its transaction open while the kept Txs are tried.
		holding, release := make(chan struct{}), make(chan struct{})
		other := make(chan error, 1)
		go func() {
			other <- refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO pending (block_id) VALUES (?)`, "kept"); err != nil {
					return err
				}
				close(holding)
				<-release
				return nil
			})
		}()
		<-holding
		for i, q := range kept {
			_, err := q.ExecContext(ctx, `INSERT INTO heads (block_id) VALUES (?)`, "kept")
			if !errors.Is(err, refset.ErrInvalidTx) {
				t.Errorf("statement on kept Tx %d after its unit ended: %v, want ErrInvalidTx", i, err)
			}
		}
		close(release)
		if err := <-other; err != nil {
			t.Fatalf("the other unit: %v", err)
		}
		if n := h.count(t, "heads", "kept"); n != 0 {
			t.Fatalf("%d heads rows written through kept Txs, want none", n)
		}
	})
}

// A nested InTx is a savepoint of the unit around it and runs its function once:
// retries are the outermost unit's. A conflict the inner function returns and the
// outer one swallows runs nothing again; one the outer function returns runs the
// whole unit again, a bounded number of times, and then InTx returns ErrConflict
// having committed nothing.
func TestHostileNestedUnitLeavesRetriesToTheOutermost(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		for _, passOn := range []bool{false, true} {
			var outer, inner int
			err := refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
				outer++
				err := refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
					inner++
					if _, err := h.set.Add(ctx, testdb.Block{Hash: fmt.Sprintf("nested-%v", passOn), Height: 1}); err != nil {
						return err
					}
					return fmt.Errorf("hostile: %w", refset.ErrConflict)
				})
				if !errors.Is(err, refset.ErrConflict) {
					return fmt.Errorf("nested InTx: %v, want ErrConflict", err)
				}
				if passOn {
					return err
				}
				return nil
			})
			want, wantErr := 1, error(nil)
			if passOn {
				want, wantErr = 6, refset.ErrConflict // InTx's bound
			}
			if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
				t.Fatalf("passOn %v: InTx: %v, want %v", passOn, err, wantErr)
			}
			if outer != want || inner != want {
				t.Fatalf("passOn %v: outer function ran %d times, inner %d, want %d each", passOn, outer, inner, want)
			}
			if _, err := h.set.Load(ctx, fmt.Sprintf("nested-%v", passOn)); !errors.Is(err, refset.ErrNotFound) {
				t.Fatalf("passOn %v: Load of what the undone savepoint added: %v, want ErrNotFound", passOn, err)
			}
		}
	})
}

// A Command that runs under a savepoint of refset's (an Add or a Complete that joined
// a unit of work, a *Tx call in the caller's own transaction) cannot undermine it:
// whatever it does with the savepoint statements it may run, the call's error says
// what happened (nil: the object is stored, or the hand-over made; an error: nothing
// of the call is), and the transaction around it stays usable. On PostgreSQL a failed
// statement whose error the Command swallows aborts the savepoint; a Command that
// names refset's savepoint (as the source spells it) must not reach it.
func TestHostileCommandsThatUndermineTheSavepoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  refset.CommandFunc[string]
	}{
		{"swallows a failed statement", func(ctx context.Context, tx refset.Tx, _ string) error {
			_, _ = tx.ExecContext(ctx, `INSERT INTO heads (block_id) VALUES (?)`, "ghost") // no such block
			return nil
		}},
		{"rolls back refset's savepoint", func(ctx context.Context, tx refset.Tx, _ string) error {
			_, _ = tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT refset_savepoint`)
			return nil
		}},
		{"releases refset's savepoint, then fails", func(ctx context.Context, tx refset.Tx, id string) error {
			_, _ = tx.ExecContext(ctx, `RELEASE SAVEPOINT refset_savepoint`)
			return errHostile
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
				h := openHostile(t, b)
				ctx := t.Context()
				for _, call := range []struct {
					name string
					// run makes the call with the hostile command, for the new object
					// id, in tx, a unit's or the caller's own; then another call, which
					// must succeed: the transaction is usable.
					run   func(ctx context.Context, tx refset.Tx, id string) error
					ownTx bool // in a transaction of the caller's own (db.Begin)
				}{
					{name: "Add in a unit", run: func(ctx context.Context, _ refset.Tx, id string) error {
						_, err := h.set.Add(ctx, testdb.Block{Hash: id, Height: 1}, tc.cmd)
						return err
					}},
					{name: "AddTx in the caller's transaction", ownTx: true, run: func(ctx context.Context, tx refset.Tx, id string) error {
						_, err := h.set.AddTx(ctx, tx, testdb.Block{Hash: id, Height: 1}, tc.cmd)
						return err
					}},
					{name: "CompleteTx in a unit", run: func(ctx context.Context, tx refset.Tx, id string) error {
						if _, err := h.set.AddTx(ctx, tx, testdb.Block{Hash: id, Height: 1}); err != nil {
							return fmt.Errorf("hostile: the Add before the hand-over: %v", err)
						}
						tok, err := h.set.UpgradeTx(ctx, tx, id)
						if err != nil {
							return fmt.Errorf("hostile: upgrade: %v", err)
						}
						rel, _ := tok.Release()
						acq, _ := rel.Acquire(refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1), tc.cmd)
						_, err = acq.CompleteTx(ctx, tx)
						if err != nil {
							// Only the hand-over is undone: drop the object, as a caller would.
							_, _ = tx.ExecContext(ctx, `DELETE FROM blocks WHERE id = ?`, id)
						}
						return err
					}},
				} {
					id := fmt.Sprintf("sp%d", h.n.Add(1))
					var callErr error
					body := func(ctx context.Context, tx refset.Tx) error {
						callErr = call.run(ctx, tx, id)
						_, err := h.set.AddTx(ctx, tx, testdb.Block{Hash: id + "-after", Height: 1})
						return err
					}
					var err error
					if call.ownTx {
						tx, berr := h.db.Begin(ctx)
						if berr != nil {
							t.Fatalf("begin: %v", berr)
						}
						if err = body(ctx, tx); err == nil {
							err = tx.Commit()
						} else {
							_ = tx.Rollback()
						}
					} else {
						err = refset.InTx(ctx, h.db, body)
					}
					if err != nil {
						t.Fatalf("%s: the transaction after the call (which returned %v): %v, want it usable and committed", call.name, callErr, err)
					}
					_, loadErr := h.set.Load(ctx, id)
					switch {
					case callErr == nil && loadErr != nil:
						t.Fatalf("%s: the call returned nil, and Load of its object: %v", call.name, loadErr)
					case callErr != nil && !errors.Is(loadErr, refset.ErrNotFound):
						t.Fatalf("%s: the call failed (%v), and Load of its object: %v, want ErrNotFound", call.name, callErr, loadErr)
					case callErr != nil && !errors.Is(callErr, errHostile) && !refset.IsSentinel(callErr):
						t.Fatalf("%s: the call failed with %v, which matches no sentinel", call.name, callErr)
					}
				}
			})
		})
	}
}

// A token is its set's: another RefSet, even of the same table, refuses it with
// ErrInvalidToken (its instance would bypass the other set's cache). An AddAll whose
// list names one ID twice is ErrDuplicate and stores none of the list.
func TestHostileOtherSetsTokenAndRepeatedIDs(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		st, err := store.NewStore[testdb.Block, string](ctx, h.db, store.Config{Table: "blocks"})
		if err != nil {
			t.Fatalf("new store: %v", err)
		}
		other := refset.New(st)
		tok := h.pending(t)
		if _, err := other.Get(ctx, tok); !errors.Is(err, refset.ErrInvalidToken) {
			t.Fatalf("Get of another set's token: %v, want ErrInvalidToken", err)
		}
		err = refset.InTx(ctx, h.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := other.GetTx(ctx, tx, tok)
			return err
		})
		if !errors.Is(err, refset.ErrInvalidToken) {
			t.Fatalf("GetTx of another set's token: %v, want ErrInvalidToken", err)
		}
		toks, err := h.set.AddAll(ctx, []testdb.Block{{Hash: "r1", Height: 1}, {Hash: "r2", Height: 1}, {Hash: "r1", Height: 2}})
		if !errors.Is(err, refset.ErrDuplicate) || toks != nil {
			t.Fatalf("AddAll naming r1 twice: %v, %d tokens, want ErrDuplicate and none", err, len(toks))
		}
		for _, id := range []string{"r1", "r2"} {
			if _, err := h.set.Load(ctx, id); !errors.Is(err, refset.ErrNotFound) {
				t.Fatalf("Load %s after the refused AddAll: %v, want ErrNotFound", id, err)
			}
		}
	})
}

// addedCounter is an Observer that counts the objects Added tells it of.
type addedCounter struct {
	refset.NoObserver
	added atomic.Int64
}

func (c *addedCounter) Added(_ context.Context, n int) { c.added.Add(int64(n)) }

// The Observer's Added is told of objects a committed Add or AddAll stored: an Add
// or AddAll that joined a unit of work is told once the unit commits, and not at all
// if it rolls back (an error, a panic, or a run InTx makes again after a conflict).
func TestHostileAddedIsToldOfCommittedObjects(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		obs := &addedCounter{}
		h := openHostileWith(t, b, testdb.Options{Observer: obs})
		ctx := t.Context()
		runs := 0
		add := func(ctx context.Context, id string) error {
			if _, err := h.set.Add(ctx, testdb.Block{Hash: id, Height: 1}); err != nil {
				return err
			}
			_, err := h.set.AddAll(ctx, []testdb.Block{{Hash: id + "-a", Height: 1}, {Hash: id + "-b", Height: 1}})
			return err
		}
		err := refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
			if err := add(ctx, "rolled-back"); err != nil {
				return err
			}
			return errHostile
		})
		if !errors.Is(err, errHostile) {
			t.Fatalf("InTx: %v, want errHostile", err)
		}
		if n := obs.added.Load(); n != 0 {
			t.Fatalf("Added told of %d objects of a unit that rolled back, want 0", n)
		}
		err = refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
			runs++
			if err := add(ctx, fmt.Sprintf("run%d", runs)); err != nil {
				return err
			}
			if runs == 1 {
				return fmt.Errorf("hostile: %w", refset.ErrConflict)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		if n := obs.added.Load(); n != 3 {
			t.Fatalf("Added told of %d objects after a unit that ran twice and committed 3, want 3", n)
		}
	})
}

// panickingObserver panics in HandedOver while armed.
type panickingObserver struct {
	refset.NoObserver
	armed atomic.Bool
}

func (o *panickingObserver) HandedOver(context.Context, time.Duration, error) {
	if o.armed.Load() {
		panic("hostile observer")
	}
}

// An Observer that panics breaks no promise of the hand-over it is told of: the panic
// goes on, and the Acquired is spent if and only if the hand-over committed, so a
// committed one is never made twice (and one that did not commit can be made).
func TestHostileObserverThatPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		// complete completes acq while the observer panics.
		complete func(ctx context.Context, h *hostile, acq *refset.Acquired[string]) error
		// fails adds a command that fails to the hand-over.
		fails bool
		// committed says where the reference is after the panic.
		committed bool
	}{
		{
			name: "after a Complete that committed",
			complete: func(ctx context.Context, _ *hostile, acq *refset.Acquired[string]) error {
				_, err := acq.Complete(ctx)
				return err
			},
			committed: true,
		},
		{
			name: "after a Complete that failed",
			complete: func(ctx context.Context, _ *hostile, acq *refset.Acquired[string]) error {
				_, err := acq.Complete(ctx)
				return err
			},
			fails: true,
		},
		{
			name: "after a Complete in a unit of work, which the panic rolls back",
			complete: func(ctx context.Context, h *hostile, acq *refset.Acquired[string]) error {
				return refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
					_, err := acq.Complete(ctx)
					return err
				})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
				obs := &panickingObserver{}
				h := openHostileWith(t, b, testdb.Options{Observer: obs})
				tok := h.pending(t)
				var more []refset.Command[string]
				if tc.fails {
					more = append(more, refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { return errHostile }))
				}
				acq := h.handOver(t, tok, more...)
				obs.armed.Store(true)
				var panicked any
				func() {
					defer func() { panicked = recover() }()
					_ = tc.complete(t.Context(), h, acq)
				}()
				obs.armed.Store(false)
				if panicked != "hostile observer" {
					t.Fatalf("panic %v, want the observer's to go on", panicked)
				}
				if !tc.committed {
					h.wantWhere(t, tok.ID(), "pending")
					if tc.fails {
						return // its commands would fail again
					}
					if _, err := acq.Complete(t.Context()); err != nil {
						t.Fatalf("Complete of a hand-over that did not commit: %v, want the Acquired usable", err)
					}
					h.wantWhere(t, tok.ID(), "heads")
					return
				}
				h.wantWhere(t, tok.ID(), "heads")
				if _, err := acq.Complete(t.Context()); !errors.Is(err, refset.ErrTokenConsumed) {
					t.Fatalf("Complete of a hand-over that committed: %v, want ErrTokenConsumed", err)
				}
			})
		})
	}
}

// stallKey marks the context of a read that stallingStore holds up.
type stallKey struct{}

// stallingStore is a set's store whose Get, made with a context that stallKey marks,
// waits for release after saying so on stalled.
type stallingStore struct {
	refset.SetStore[testdb.Block, string]
	stalled, release chan struct{}
}

func (s *stallingStore) Get(ctx context.Context, q refset.Querier, id string) (testdb.Block, error) {
	if ctx.Value(stallKey{}) != nil {
		close(s.stalled)
		<-s.release
	}
	return s.SetStore.Get(ctx, q, id)
}

// One instance per live ID holds when a miss outside any unit of work is still
// reading while a unit reads the same object on its own transaction and, committing,
// shares its instance: the slow miss returns the instance that went live meanwhile,
// not a second one.
func TestHostileSlowMissRacesAUnitsInstance(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		inner, err := store.NewStore[testdb.Block, string](ctx, h.db, store.Config{Table: "blocks"})
		if err != nil {
			t.Fatalf("new store: %v", err)
		}
		st := &stallingStore{SetStore: inner, stalled: make(chan struct{}), release: make(chan struct{})}
		set := refset.New[testdb.Block, string](st)
		if _, err := set.Add(ctx, testdb.Block{Hash: "c1", Height: 1}); err != nil {
			t.Fatalf("add: %v", err)
		}
		type result struct {
			lease refset.Lease[testdb.Block]
			err   error
		}
		slow := make(chan result, 1)
		go func() {
			l, err := set.Load(context.WithValue(ctx, stallKey{}, true), "c1")
			slow <- result{l, err}
		}()
		<-st.stalled
		err = refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
			_, err := set.Load(ctx, "c1")
			return err
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		live, err := set.Load(ctx, "c1") // the unit's instance, shared once it committed
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		close(st.release)
		r := <-slow
		if r.err != nil {
			t.Fatalf("slow load: %v", r.err)
		}
		later, err := set.Load(ctx, "c1")
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		if r.lease.Value() != live.Value() || later.Value() != live.Value() {
			t.Fatalf("instances of c1 while one is leased: %p, then the slow miss's %p, then %p; want one", live.Value(), r.lease.Value(), later.Value())
		}
	})
}

// Loads racing units of work that add objects, read them and the set's others on
// their transaction, and commit or roll back: while a lease on an ID lives every Load
// outside a unit returns its instance, and an object whose Add rolled back is never
// found.
func TestHostileLeasesUnderRacingUnits(t *testing.T) {
	const ids, goroutines, rounds = 6, 6, 40
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		ctx := t.Context()
		for i := range ids {
			if _, err := h.set.Add(ctx, testdb.Block{Hash: fmt.Sprintf("r%d", i), Height: 1}); err != nil {
				t.Fatalf("add: %v", err)
			}
		}
		var (
			mu     sync.Mutex
			first  = map[string]refset.Lease[testdb.Block]{} // kept: the instance stays live
			rolled sync.Map
			wg     sync.WaitGroup
		)
		for g := range goroutines {
			wg.Go(func() {
				for i := range rounds {
					id := fmt.Sprintf("r%d", (g+i)%ids)
					switch i % 4 {
					case 0, 1:
						l, err := h.set.Load(ctx, id)
						if err != nil {
							t.Errorf("load %s: %v", id, err)
							return
						}
						mu.Lock()
						if f, ok := first[id]; !ok {
							first[id] = l
						} else if f.Value() != l.Value() {
							t.Errorf("load %s: instance %p while %p is leased", id, l.Value(), f.Value())
						}
						mu.Unlock()
					case 2:
						added, commit := fmt.Sprintf("n%d-%d", g, i), i%8 == 2
						err := refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
							if _, err := h.set.Add(ctx, testdb.Block{Hash: added, Height: 1}); err != nil {
								return err
							}
							for _, read := range []string{added, id} {
								if _, err := h.set.Load(ctx, read); err != nil {
									return err
								}
							}
							if !commit {
								return errHostile
							}
							return nil
						})
						if commit && err != nil {
							t.Errorf("unit: %v", err)
						} else if !commit {
							rolled.Store(added, true)
						}
					case 3:
						rolled.Range(func(k, _ any) bool {
							if _, err := h.set.Load(ctx, k.(string)); !errors.Is(err, refset.ErrNotFound) {
								t.Errorf("load %s, whose Add rolled back: %v, want ErrNotFound", k, err)
							}
							return true
						})
						runtime.GC()
					}
				}
			})
		}
		wg.Wait()
	})
}

// A call that a goroutine the unit's function started still runs in the unit when
// the function returns has done part of its work: the unit rolls back, all of that
// work with it, and fails with ErrInvalidTx; a nested unit breaks the one around it,
// which rolls back too though its function swallowed the error. Nothing is stored,
// whether the stray call's command then succeeds or fails.
func TestHostileCallStillRunningWhenItsUnitEnds(t *testing.T) {
	for _, nested := range []bool{false, true} {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("nested=%v/command fails=%v", nested, fail), func(t *testing.T) {
				testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
					h := openHostile(t, b)
					started, returned := make(chan struct{}), make(chan struct{})
					stray := make(chan error, 1)
					unit := func(ctx context.Context, _ refset.Tx) error {
						defer close(returned)
						go func() {
							_, err := h.set.Add(ctx, testdb.Block{Hash: "stray", Height: 1}, refset.CommandFunc[string](func(context.Context, refset.Tx, string) error {
								close(started)
								<-returned
								time.Sleep(50 * time.Millisecond) // while the unit ends
								if fail {
									return errHostile
								}
								return nil
							}))
							stray <- err
						}()
						<-started
						return nil
					}
					err := refset.InTx(t.Context(), h.db, func(ctx context.Context, tx refset.Tx) error {
						if _, err := h.set.Add(ctx, testdb.Block{Hash: "unit", Height: 1}); err != nil {
							return err
						}
						if !nested {
							return unit(ctx, tx)
						}
						if err := refset.InTx(ctx, h.db, unit); !errors.Is(err, refset.ErrInvalidTx) {
							return fmt.Errorf("nested InTx: %v, want ErrInvalidTx", err)
						}
						return nil // swallowed
					})
					strayErr := <-stray
					for _, id := range []string{"stray", "unit"} {
						if _, lerr := h.set.Load(t.Context(), id); !errors.Is(lerr, refset.ErrNotFound) {
							t.Fatalf("Load %s: %v, want ErrNotFound (InTx: %v; the stray Add: %v)", id, lerr, err, strayErr)
						}
					}
					if !errors.Is(err, refset.ErrInvalidTx) {
						t.Fatalf("InTx: %v, want ErrInvalidTx", err)
					}
				})
			})
		}
	}
}

// A unit of work or a hand-over whose context is cancelled at any moment, COMMIT
// included, reports what happened: nil when it committed, an error (the context's,
// or a sentinel) when it did not, when only ErrCommitUnknown may leave it open; a
// hand-over that did not commit leaves its Acquired usable.
func TestHostileCancelWhileCommitting(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		h := openHostile(t, b)
		for i := range 80 {
			tok := h.pending(t)
			acq := h.handOver(t, tok)
			ctx, cancel := context.WithCancel(t.Context())
			delay := time.Duration(i%40) * 100 * time.Microsecond
			go func() { time.Sleep(delay); cancel() }()
			var err error
			var stored bool
			if i%2 == 0 {
				_, err = acq.Complete(ctx)
				stored = h.count(t, "heads", tok.ID()) == 1
			} else {
				id := fmt.Sprintf("c%d", i)
				err = refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
					_, err := h.set.Add(ctx, testdb.Block{Hash: id, Height: 1})
					return err
				})
				_, lerr := h.set.Load(t.Context(), id)
				stored = lerr == nil
			}
			cancel()
			if errors.Is(err, refset.ErrCommitUnknown) {
				continue
			}
			if (err == nil) != stored {
				t.Fatalf("run %d: %v, stored %v", i, err, stored)
			}
			if err != nil && !refset.IsSentinel(err) && !errors.Is(err, context.Canceled) {
				t.Fatalf("run %d: %v, want a sentinel or context.Canceled", i, err)
			}
			if err != nil && i%2 == 0 {
				if _, err := acq.Complete(t.Context()); err != nil {
					t.Fatalf("run %d: Complete after a cancelled one: %v", i, err)
				}
			}
		}
	})
}

// A hand-over may have no commands at all (a token passed between two components of
// which neither keeps a row): Complete commits it, on every backend and driver (a
// list of no statements is no pipeline), and its token carries on.
func TestHostileHandOverWithoutCommands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete func(ctx context.Context, h *hostile, acq *refset.Acquired[string]) (*refset.RefToken[string], error)
	}{
		{"Complete", func(ctx context.Context, _ *hostile, acq *refset.Acquired[string]) (*refset.RefToken[string], error) {
			return acq.Complete(ctx)
		}},
		{"Complete in a unit of work", func(ctx context.Context, h *hostile, acq *refset.Acquired[string]) (tok *refset.RefToken[string], err error) {
			err = refset.InTx(ctx, h.db, func(ctx context.Context, _ refset.Tx) error {
				tok, err = acq.Complete(ctx)
				return err
			})
			return tok, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
				h := openHostile(t, b)
				tok := h.pending(t)
				rel, err := tok.Release()
				if err != nil {
					t.Fatalf("release: %v", err)
				}
				acq, err := rel.Acquire()
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
				next, err := callNoPanicTok(t, func() (*refset.RefToken[string], error) { return tc.complete(t.Context(), h, acq) })
				if err != nil {
					t.Fatalf("Complete of a hand-over without commands: %v", err)
				}
				if _, err := acq.Complete(t.Context()); !errors.Is(err, refset.ErrTokenConsumed) {
					t.Fatalf("Complete again: %v, want ErrTokenConsumed", err)
				}
				if _, err := next.Release(); err != nil {
					t.Fatalf("Release of the token it gave: %v", err)
				}
				h.wantWhere(t, tok.ID(), "pending")
			})
		})
	}
}

// callNoPanicTok is callNoPanic for a step that gives a token.
func callNoPanicTok(tb testing.TB, fn func() (*refset.RefToken[string], error)) (tok *refset.RefToken[string], err error) {
	tb.Helper()
	err = callNoPanic(tb, func() error {
		tok, err = fn()
		return err
	})
	return tok, err
}

// A token that a hand-over inside a unit of work gave stands only if the unit
// commits, so its own hand-over runs inside that unit or after it committed: one
// completed apart from the unit while it runs could commit while the unit rolls back,
// leaving the undone hand-over's Acquired usable beside a token descended from it
// (one object handed over twice). It is refused with ErrInvalidToken and runs
// nothing.
func TestHostileTokenOfAHandOverNotCommittedYet(t *testing.T) {
	for _, tc := range []struct {
		name string
		// next completes acqA, the hand-over of the token the unit's Complete gave:
		// with the unit's context or the outer one (inside the unit's function), or
		// after the unit ended (later).
		inUnit, later bool
		unitErr       error // what the unit's function returns
		wantErr       error // of acqA's Complete
	}{
		{name: "apart from the unit, which rolls back", unitErr: errHostile, wantErr: refset.ErrInvalidToken},
		{name: "apart from the unit, which commits", wantErr: refset.ErrInvalidToken},
		{name: "inside the unit", inUnit: true},
		{name: "after the unit committed", later: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
				h := openHostile(t, b)
				ctx := t.Context()
				tok := h.pending(t)
				acq := h.handOver(t, tok)
				var ran atomic.Int32
				counted := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { ran.Add(1); return nil })
				var acqA *refset.Acquired[string]
				var nextErr error
				err := refset.InTx(ctx, h.db, func(uctx context.Context, _ refset.Tx) error {
					tokA, err := acq.Complete(uctx)
					if err != nil {
						return err
					}
					relA, err := tokA.Release(counted)
					if err != nil {
						return err
					}
					if acqA, err = relA.Acquire(); err != nil {
						return err
					}
					if !tc.later {
						with := ctx
						if tc.inUnit {
							with = uctx
						}
						_, nextErr = acqA.Complete(with) //unitctx:outside where the case completes it outside the unit
					}
					return tc.unitErr
				})
				if !errors.Is(err, tc.unitErr) {
					t.Fatalf("InTx: %v, want %v", err, tc.unitErr)
				}
				if tc.later {
					_, nextErr = acqA.Complete(ctx)
				}
				if !errors.Is(nextErr, tc.wantErr) || (tc.wantErr == nil) != (nextErr == nil) {
					t.Fatalf("Complete of the unit's token's hand-over: %v, want %v", nextErr, tc.wantErr)
				}
				wantRan := int32(1)
				if tc.wantErr != nil {
					wantRan = 0
				}
				if n := ran.Load(); n != wantRan {
					t.Fatalf("its command ran %d times, want %d", n, wantRan)
				}
				if tc.unitErr != nil {
					// Undone: the first hand-over can be made again, and only it.
					h.wantWhere(t, tok.ID(), "pending")
					if _, err := acqA.Complete(ctx); !errors.Is(err, refset.ErrTokenConsumed) {
						t.Fatalf("Complete of the undone token's hand-over after the unit: %v, want ErrTokenConsumed", err)
					}
					if _, err := acq.Complete(ctx); err != nil {
						t.Fatalf("Complete of the undone hand-over: %v", err)
					}
				}
			})
		})
	}
}

// An ID is caller's data, and an error names it: a message shows it quoted when it
// has characters that do not print (a newline would start a forged line of a log)
// and cut when long (a megabyte's ID made each message about it a megabyte), still
// matching its sentinel.
func TestHostileIDsInMessages(t *testing.T) {
	testdb.Each(t, hostileBackends(), func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		h := openHostile(t, b)
		forged := "b1\nlevel=ERROR msg=\"forged entry\""
		long := strings.Repeat("é", 300) // 600 bytes: within an index's bounds, past a message's
		for _, id := range []string{forged, long, strings.Repeat("x", 1<<20)} {
			_, err := h.set.Load(ctx, id)
			requireShort(t, err, refset.ErrNotFound)
			_, err = h.set.Upgrade(ctx, id)
			requireShort(t, err, refset.ErrNotFound)
		}
		for _, id := range []string{forged, long} {
			_, err := h.set.Add(ctx, testdb.Block{Hash: id, Height: 1})
			require.NoError(t, err)
			_, err = h.set.Add(ctx, testdb.Block{Hash: id, Height: 1})
			requireShort(t, err, refset.ErrDuplicate)
			lease, err := h.set.Load(ctx, id)
			require.NoError(t, err, "the ID itself is stored and read as given")
			assert.Equal(t, id, lease.Value().Hash)
		}
	})
}

// requireShort checks that err matches want and that its message is one line of
// bounded length.
func requireShort(tb testing.TB, err, want error) {
	tb.Helper()
	require.ErrorIs(tb, err, want)
	msg := err.Error()
	assert.NotContains(tb, msg, "\n", "a raw newline in the message")
	assert.Less(tb, len(msg), 600, "the message: %.200s...", msg)
	assert.True(tb, utf8.ValidString(msg), "the message is not UTF-8: %.200q", msg)
}
