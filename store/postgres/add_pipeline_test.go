package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On pgx, an Add whose commands are all Exec commands is one unit of statements: the
// store's insert and the commands after it in one batch, the server checking the
// counts of checked commands, as a hand-over's (TestPgxPipelinesHandOvers). An Add
// with a command of the caller's own (Hold is one) takes the ordinary path.
func TestPgxPipelinesAdd(t *testing.T) {
	forResolvingOrNot(t, func(t *testing.T, resolves bool) {
		ctx := t.Context()
		db, tracer := tracedPgx(t, resolvingOrNot(resolves))
		e := newHandOverEnv(t, db)

		const ins = `INSERT INTO pending (block_id) VALUES ($1)`
		pendingUnchecked := refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, -1)
		pendingChecked := refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, 1)
		hold := e.set.Hold("completer", 0)
		for i, tc := range []struct {
			name    string
			cmds    []refset.Command[string]
			batches [][]string // "insert" stands for the store's insert
			pending bool
		}{
			{"no commands", nil, committing(resolves, []string{"insert"}), false},
			{"an unchecked command", []refset.Command[string]{pendingUnchecked}, committing(resolves, []string{"insert", ins}), true},
			{"a checked command", []refset.Command[string]{pendingChecked}, committing(resolves, []string{"insert", rowCheckedSQL(ins, 1)}), true},
			{"a command of refset's own", []refset.Command[string]{pendingChecked, hold}, nil, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id := fmt.Sprint("a", i)
				tracer.reset()
				_, err := e.set.Add(ctx, block{Hash: id, Height: 1}, tc.cmds...)
				require.NoError(t, err)
				batches, alone := tracer.reset()
				for _, b := range batches {
					for j, q := range b {
						if strings.HasPrefix(q, "INSERT INTO") && strings.Contains(q, "blocks") {
							b[j] = "insert"
						}
					}
				}
				assert.Equal(t, tc.batches, batches)
				if tc.batches != nil {
					assert.Empty(t, alone, "nothing but the batches")
				} else {
					assert.NotEmpty(t, alone)
				}
				assert.Equal(t, 1, count(t, db, `SELECT count(*) FROM blocks WHERE id = '`+id+`'`))
				pending, _ := e.state(t, id)
				assert.Equal(t, tc.pending, pending)
			})
		}
	})
}

// A failed Add stores nothing and leaves its connection usable, whichever statement
// failed, pipelined (pgx) or not: the sentinel is the one the ordinary path gives.
func TestAddStatementErrors(t *testing.T) {
	forEachHandOverMode(t, func(t *testing.T, opts Options) {
		opts.MaxConns = 1 // every Add on the connection the failed one used
		db, err := Open(t.Context(), pgtest.DSN(t), opts)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		e := newHandOverEnv(t, db)
		ctx := t.Context()
		_, err = e.set.Add(ctx, block{Hash: "stored", Height: 1})
		require.NoError(t, err)

		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		pending := refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?)`, -1)
		for _, tc := range []struct {
			name string
			ctx  context.Context
			id   string
			cmds []refset.Command[string]
			want error
		}{
			{"a stored ID", ctx, "stored", []refset.Command[string]{pending}, refset.ErrDuplicate},
			{"a command referencing a missing object", ctx, "x1",
				[]refset.Command[string]{pending, refset.Exec[string](`INSERT INTO heads (block_id) VALUES (? || '-missing')`, -1)}, refset.ErrNotFound},
			{"a command repeating a row", ctx, "x2", []refset.Command[string]{pending, pending}, refset.ErrDuplicate},
			{"a checked command that matched nothing", ctx, "x3",
				[]refset.Command[string]{refset.Exec[string](`DELETE FROM heads WHERE block_id = ?`, 1), pending}, refset.ErrNotFound},
			{"a command on a missing table", ctx, "x4", []refset.Command[string]{pending, refset.Exec[string](`INSERT INTO nowhere VALUES (?)`, -1)}, refset.ErrSchema},
			{"a command that is not SQL", ctx, "x7", []refset.Command[string]{pending, refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?) garbage`, -1)}, refset.ErrStatement},
			{"a command that would commit", ctx, "x5", []refset.Command[string]{pending, refset.Exec[string](`COMMIT`, -1)}, refset.ErrInvalidCommand},
			{"an ended context", cancelled, "x6", []refset.Command[string]{pending}, context.Canceled},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := e.set.Add(tc.ctx, block{Hash: tc.id, Height: 2}, tc.cmds...)
				require.ErrorIs(t, err, tc.want)
				assert.Zero(t, count(t, db, `SELECT count(*) FROM blocks WHERE height = 2`), "no block stored")
				assert.Zero(t, count(t, db, `SELECT count(*) FROM pending`), "no command's row left")
				// The connection is out of the failed transaction: the next Add commits.
				_, err = e.set.Add(ctx, block{Hash: tc.id + "-after", Height: 3}, pending)
				require.NoError(t, err)
				_, err = db.Pool().ExecContext(ctx, `DELETE FROM pending; DELETE FROM blocks WHERE height = 3`)
				require.NoError(t, err)
			})
		}
	})
}

// A pipelined unit whose context ends while its COMMIT segment runs: on a direct
// connection a cancel request stops the statement and the unit rolls back; with
// Unprepared (behind a pooler, which may mishandle cancel requests) none is sent,
// the statement runs to its end and the unit commits. The same whether lost commits
// are resolved (COMMIT after the ticket, in the same round trip) or not (an implicit
// transaction). Either way the caller learns the truth: an error exactly when nothing
// was stored.
func TestPipelineCancelsOnlyWithoutPooler(t *testing.T) {
	for _, tc := range []struct {
		name       string
		unprepared bool
		resolves   bool
		committed  bool
	}{
		{"direct: a cancel request", false, false, false},
		{"unprepared: no cancel request", true, false, true},
		{"direct, resolving: a cancel request", false, true, false},
		{"unprepared, resolving: no cancel request", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := resolvingOrNot(tc.resolves)
			opts.Driver, opts.Unprepared = DriverPgx, tc.unprepared
			db, err := Open(t.Context(), pgtest.DSN(t), opts)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			e := newHandOverEnv(t, db)
			slow := refset.Exec[string](`INSERT INTO pending (block_id) SELECT ? FROM pg_sleep(0.5)`, -1)
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			_, err = e.set.Add(ctx, block{Hash: "slow", Height: 1}, slow)
			stored := count(t, db, `SELECT count(*) FROM blocks WHERE id = 'slow'`) == 1
			assert.Equal(t, tc.committed, stored)
			if tc.committed {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
			// The pool goes on working.
			_, err = e.set.Add(t.Context(), block{Hash: "next", Height: 1})
			require.NoError(t, err)
		})
	}
}
