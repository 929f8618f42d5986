package refset_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
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
	ctx := tb.Context()
	db := b.Open(tb, testdb.Options{})
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
