package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boom is what the hostile commands panic with: the test checks that the very same
// value comes out of the call.
type boom struct{ where string }

// panicOnce is a command that writes a row of its own (so a transaction that is not
// rolled back would show it, and hold its lock) and then panics, the first time
// only: a second run succeeds, which shows that the token or Acquired was left usable.
func (e *env) panicOnce(val *boom) refset.Command[string] {
	var fired atomic.Bool
	return refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
		if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO heads (block_id) VALUES (?)`), id); err != nil {
			return err
		}
		if !fired.Swap(true) {
			panic(val)
		}
		return nil
	})
}

// recovered runs fn and returns what it panicked with (nil if it did not).
func recovered(fn func()) (val any) {
	defer func() { val = recover() }()
	fn()
	return nil
}

// errProbe rolls stillWritable's probe back.
var errProbe = errors.New("probe done")

// stillWritable checks that the database takes a write promptly, so a failed or
// panicking call left no transaction open: on SQLite it would hold the one writer
// connection, on Postgres the locks of the rows its commands inserted (id in blocks
// and in heads), and the inserts here would wait for them. The probe is rolled back.
func (e *env) stillWritable(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		for _, q := range []string{
			`INSERT INTO blocks (id, height) SELECT ?, 0 WHERE NOT EXISTS (SELECT 1 FROM blocks WHERE id = ?)`,
			`INSERT INTO heads (block_id) SELECT ? WHERE ? <> ''`,
		} {
			if _, err := tx.ExecContext(ctx, e.sql(q), id, id); err != nil {
				return err
			}
		}
		return errProbe
	})
	require.ErrorIs(t, err, errProbe, "a write after the call must go through at once: the call left a transaction open")
}

func testPanics(t *testing.T, h harness) {
	cases := []struct {
		name string
		adds bool // the call adds the object, so rolling back removes it
		// prepare sets the case up and returns the call, with cmd among its
		// commands; the test runs it twice: the first run panics, the second must
		// succeed with whatever the first left (token, Acquired, transaction).
		prepare func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) (call func() error)
	}{
		{"Complete", false, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			acq := e.acquired(t, set, id, cmd)
			return func() error { _, err := acq.Complete(t.Context()); return err }
		}},
		{"CompleteTx in InTx", false, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			acq := e.acquired(t, set, id, cmd)
			return func() error {
				return refset.InTx(t.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
					// A row of the unit of work's own, before the hand-over: it must
					// be rolled back with the rest.
					if _, err := tx.ExecContext(t.Context(), e.sql(`INSERT INTO blocks (id, height) VALUES (?, 0)`), id+"-outer"); err != nil {
						return err
					}
					_, err := acq.CompleteTx(t.Context(), tx)
					return err
				})
			}
		}},
		{"CompleteTx in the caller's transaction", false, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			acq := e.acquired(t, set, id, cmd)
			return func() error {
				tx, err := e.db.Begin(t.Context())
				require.NoError(t, err)
				var completeErr error
				val := recovered(func() { _, completeErr = acq.CompleteTx(t.Context(), tx) })
				// The caller recovers and its transaction is still usable: the
				// savepoint undid only the hand-over.
				_, err = tx.ExecContext(t.Context(), e.sql(`INSERT INTO blocks (id, height) VALUES (?, 0)`), id+"-caller"+fmt.Sprint(val != nil))
				require.NoError(t, err, "the caller's transaction is usable after a panic in CompleteTx")
				require.NoError(t, tx.Commit())
				if val != nil {
					assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", id), "the panicking hand-over was undone")
					assert.Equal(t, 1, e.count(t, "pending", "block_id = ?", id), "the panicking hand-over was undone")
					panic(val)
				}
				return completeErr
			}
		}},
		{"Add", true, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			return func() error { _, err := set.Add(t.Context(), mkBlock(id, "", 0), cmd); return err }
		}},
		{"AddTx in InTx", true, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			return func() error {
				return refset.InTx(t.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
					_, err := set.AddTx(t.Context(), tx, mkBlock(id, "", 0), cmd)
					return err
				})
			}
		}},
		{"Upgrade", false, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			_, err := set.Add(t.Context(), mkBlock(id, "", 0))
			require.NoError(t, err)
			return func() error { _, err := set.Upgrade(t.Context(), id, cmd); return err }
		}},
		{"UpgradeTx in InTx", false, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			_, err := set.Add(t.Context(), mkBlock(id, "", 0))
			require.NoError(t, err)
			return func() error {
				return refset.InTx(t.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
					_, err := set.UpgradeTx(t.Context(), tx, id, cmd)
					return err
				})
			}
		}},
		{"InTx function", false, func(t *testing.T, e *env, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) func() error {
			_, err := set.Add(t.Context(), mkBlock(id, "", 0))
			require.NoError(t, err)
			return func() error {
				return refset.InTx(t.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
					return cmd.Execute(t.Context(), tx, id)
				})
			}
		}},
	}
	e := newEnv(t, h)
	set := e.blocks(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("p%d", i)
			val := &boom{where: tc.name}
			call := tc.prepare(t, e, set, id, e.panicOnce(val))
			got := recovered(func() { _ = call() })
			require.Same(t, val, got, "the panic goes on with its own value")
			if tc.adds {
				assert.Equal(t, 0, e.count(t, "blocks", "id = ?", id), "the object of the panicking Add was rolled back")
			}
			assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", id), "the command's row was rolled back")
			assert.Equal(t, 0, e.count(t, "blocks", "id = ?", id+"-outer"), "the unit of work around it was rolled back")
			e.stillWritable(t, id)

			require.NoError(t, call(), "the same call succeeds once the command stops panicking: nothing was left half done or consumed")
			assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", id))
		})
	}
}

// acquired adds id with a pending row and returns it released from pending and
// acquired with cmd, ready to complete.
func (e *env) acquired(t *testing.T, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) *refset.Acquired[string] {
	t.Helper()
	tok, err := set.Add(t.Context(), mkBlock(id, "", 0), e.insertPending())
	require.NoError(t, err)
	return handOverOf(t, tok, e.releasePending(), cmd)
}

// completeWith hands id over with cmd released and a head row acquired after it:
// a hand-over made only of Exec commands when cmd is one, which a database may
// pipeline. It returns what Release or Complete failed with.
func (e *env) completeWith(t *testing.T, set *refset.RefSet[block, string], id string, cmd refset.Command[string]) error {
	t.Helper()
	tok, err := set.Upgrade(t.Context(), id)
	require.NoError(t, err)
	rel, err := tok.Release(cmd)
	if err != nil {
		return err
	}
	acq, err := rel.Acquire(e.acquireHead())
	require.NoError(t, err)
	_, err = acq.Complete(t.Context())
	return err
}

// endingStatements are ways a caller's SQL could end (or begin) the transaction
// refset runs it in.
var endingStatements = []string{
	"COMMIT",
	"commit",
	"  /* done */ COMMIT",
	"-- done\nEND",
	"ROLLBACK",
	"BEGIN",
	"SELECT 1; COMMIT",
}

func testCannotEndTx(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)

	t.Run("no Commit or Rollback in the type", func(t *testing.T) {
		check := refset.CommandFunc[string](func(_ context.Context, tx refset.Tx, _ string) error {
			if _, ok := tx.(interface{ Commit() error }); ok {
				return fmt.Errorf("a command's tx has Commit")
			}
			if _, ok := tx.(interface{ Rollback() error }); ok {
				return fmt.Errorf("a command's tx has Rollback")
			}
			if _, ok := tx.(interface{ Unwrap() refset.Tx }); ok {
				return fmt.Errorf("a command's tx hands out the transaction under it")
			}
			return nil
		})
		_, err := set.Add(ctx, mkBlock("typed", "", 0), check)
		require.NoError(t, err)
		require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error { return check(ctx, tx, "") }))
	})

	for i, stmt := range endingStatements {
		t.Run(stmt, func(t *testing.T) {
			id := fmt.Sprintf("c%d", i)
			// The command writes a row, then tries to commit it, and swallows the
			// error: the hand-over must still fail and leave nothing.
			var execErr error
			ender := refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
				if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO heads (block_id) VALUES (?)`), id); err != nil {
					return err
				}
				_, execErr = tx.ExecContext(ctx, stmt)
				return nil
			})
			acq := e.acquired(t, set, id, ender)
			_, err := acq.Complete(ctx)
			require.ErrorIs(t, execErr, refset.ErrInvalidCommand, "the statement is refused")
			require.ErrorIs(t, err, refset.ErrInvalidCommand, "Complete fails even though the command swallowed the refusal")
			assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", id), "nothing was committed")
			assert.Equal(t, 1, e.count(t, "pending", "block_id = ?", id), "nothing was committed")

			// Inside a unit of work: the caller's rows before the hand-over are not
			// committed by it either.
			err = refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO blocks (id, height) VALUES (?, 0)`), id+"-outer"); err != nil {
					return err
				}
				_, err := acq.CompleteTx(ctx, tx)
				require.ErrorIs(t, err, refset.ErrInvalidCommand)
				return nil // the caller ignores the failure and would commit
			})
			require.NoError(t, err, "the unit of work itself ran nothing that ends it")
			assert.Equal(t, 1, e.count(t, "blocks", "id = ?", id+"-outer"), "the caller's own work commits")
			assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", id), "the refused hand-over was undone")

			// The same statements straight in a unit of work, through each method.
			for _, via := range []string{"exec", "query", "queryrow"} {
				err = refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
					if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO heads (block_id) VALUES (?)`), id); err != nil {
						return err
					}
					switch via {
					case "exec":
						_, _ = tx.ExecContext(ctx, stmt)
					case "query":
						if rows, err := tx.QueryContext(ctx, stmt); err == nil {
							rows.Close()
						}
					case "queryrow":
						var x any
						_ = tx.QueryRowContext(ctx, stmt).Scan(&x)
					}
					return nil
				})
				require.ErrorIs(t, err, refset.ErrInvalidCommand, via)
				assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", id), "nothing was committed (%s)", via)
			}

			e.stillWritable(t, id)
		})
	}

	t.Run("savepoints of the caller's own are allowed", func(t *testing.T) {
		err := refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
			for _, q := range []string{"SAVEPOINT mine", "ROLLBACK TO SAVEPOINT mine", "RELEASE SAVEPOINT mine"} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err)
	})
}

func testPoolIsNotATx(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)
	pool := e.db.Reader()

	_, err = set.AddTx(ctx, pool, mkBlock("b", "", 0))
	require.ErrorIs(t, err, refset.ErrInvalidTx)
	_, err = set.AddAllTx(ctx, pool, []block{mkBlock("b", "", 0)})
	require.ErrorIs(t, err, refset.ErrInvalidTx)
	_, err = set.UpgradeTx(ctx, pool, "a")
	require.ErrorIs(t, err, refset.ErrInvalidTx)
	_, err = set.AddTx(ctx, nil, mkBlock("b", "", 0))
	require.ErrorIs(t, err, refset.ErrInvalidTx)

	acq := handOverOf(t, tok, e.releasePending(), e.acquireHead())
	_, err = acq.CompleteTx(ctx, pool)
	require.ErrorIs(t, err, refset.ErrInvalidTx)
	assert.Equal(t, 0, e.count(t, "blocks", "id = ?", "b"))
	_, err = acq.Complete(ctx)
	require.NoError(t, err, "a refused CompleteTx leaves the Acquired usable")
}

// slowQuery takes seconds on both databases, so a context ends while it runs.
const slowQuery = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000000) SELECT count(*) FROM c`

func testContextErrors(t *testing.T, h harness) {
	h.sendsCancels(t)
	e := newEnv(t, h)
	set := e.blocks(t)
	tok, err := set.Add(t.Context(), mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)
	slow := refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, _ string) error {
		var n int64
		return tx.QueryRowContext(ctx, slowQuery).Scan(&n)
	})

	calls := []struct {
		name string
		call func(ctx context.Context, cmds ...refset.Command[string]) error
	}{
		{"Add", func(ctx context.Context, cmds ...refset.Command[string]) error {
			_, err := set.Add(ctx, mkBlock("b", "", 0), cmds...)
			return err
		}},
		{"Upgrade", func(ctx context.Context, cmds ...refset.Command[string]) error {
			_, err := set.Upgrade(ctx, "a", cmds...)
			return err
		}},
		{"Complete", func(ctx context.Context, cmds ...refset.Command[string]) error {
			tok, err := set.Upgrade(t.Context(), "a")
			require.NoError(t, err)
			rel, err := tok.Release(cmds...)
			require.NoError(t, err)
			acq, err := rel.Acquire()
			require.NoError(t, err)
			_, err = acq.Complete(ctx)
			return err
		}},
		{"InTx", func(ctx context.Context, cmds ...refset.Command[string]) error {
			return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				for _, c := range cmds {
					if err := c.Execute(ctx, tx, "a"); err != nil {
						return err
					}
				}
				return nil
			})
		}},
	}
	// A hand-over made only of Exec commands may be pipelined (pgx): its slow
	// statement is cut short the same way, whether COMMIT was sent with it (its row
	// count not checked) or not yet (checked).
	for _, checked := range []bool{false, true} {
		want := int64(-1)
		if checked {
			want = 1 // count(*): one row
		}
		slowExec := refset.Exec[string](e.sql(slowQuery+` WHERE CAST(? AS TEXT) IS NOT NULL`), want)
		calls = append(calls, struct {
			name string
			call func(ctx context.Context, cmds ...refset.Command[string]) error
		}{fmt.Sprintf("Complete of Exec commands, count checked %v", checked), func(ctx context.Context, cmds ...refset.Command[string]) error {
			if len(cmds) > 0 {
				cmds = []refset.Command[string]{e.acquireHead(), slowExec}
			}
			tok, err := set.Upgrade(t.Context(), "a")
			require.NoError(t, err)
			rel, err := tok.Release()
			require.NoError(t, err)
			acq, err := rel.Acquire(cmds...)
			require.NoError(t, err)
			_, err = acq.Complete(ctx)
			return err
		}})
	}
	for _, c := range calls {
		t.Run(c.name+"/cancelled before", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			saysWhichEnded(t, c.call(ctx), context.Canceled)
		})
		t.Run(c.name+"/deadline during a statement", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			// The driver's report of a statement cut short by the deadline (lib/pq's
			// 57014 "canceling statement due to user request") says deadline, and
			// matches the context's error and no other.
			saysWhichEnded(t, c.call(ctx, slow), context.DeadlineExceeded)
		})
		t.Run(c.name+"/cancelled during a statement", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(300*time.Millisecond, cancel)
			saysWhichEnded(t, c.call(ctx, slow), context.Canceled)
		})
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = set.Get(cancelled, tok)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, e.count(t, "blocks", ""), "nothing was added")
	assert.Equal(t, 0, e.count(t, "heads", ""))
	e.stillWritable(t, "a")
}

// saysWhichEnded checks err, the error of a call whose context ended with want
// (context.Canceled or context.DeadlineExceeded): it matches want and not the other,
// says which ("deadline", and no cancel then; "canceled"), and says it once.
func saysWhichEnded(t *testing.T, err error, want error) {
	t.Helper()
	require.ErrorIs(t, err, want, "%v", err)
	msg := err.Error()
	if want == context.DeadlineExceeded {
		assert.NotErrorIs(t, err, context.Canceled, "a deadline is no cancel: %v", err)
		assert.Contains(t, msg, "deadline")
		assert.NotContains(t, strings.ToLower(msg), "cancel", "a deadline is not called a cancel")
	} else {
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "a cancel is no deadline: %v", err)
		assert.Contains(t, msg, "canceled")
	}
	assertSaidOnce(t, err)
}

// testErrorsMatchSentinels induces the failures a caller meets without a broken
// server and checks that each error matches the sentinel the docs promise (and so one
// of refset's sentinels), and that the set still works after.
func testErrorsMatchSentinels(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)

	exec := func(q string) refset.Command[string] { return refset.Exec[string](e.sql(q), -1) }
	cases := []struct {
		name string
		cmd  refset.Command[string]
		want error
	}{
		{"syntax error", exec(`SELEKT 1`), refset.ErrStatement},
		{"unknown table", exec(`INSERT INTO no_such_table (x) VALUES (?)`), refset.ErrSchema},
		{"unknown column", exec(`UPDATE blocks SET no_such_column = 1 WHERE id = ?`), refset.ErrSchema},
		{"not null", exec(`INSERT INTO blocks (id, height) SELECT id || 'x', NULL FROM blocks WHERE id = ?`), refset.ErrConstraint},
		{"duplicate", exec(`INSERT INTO pending (block_id) VALUES (?)`), refset.ErrDuplicate},
		{"reference to a missing object", exec(`INSERT INTO heads (block_id) SELECT id || 'missing' FROM blocks WHERE id = ?`), refset.ErrNotFound},
		{"delete of a held object", exec(`DELETE FROM blocks WHERE id = ?`), refset.ErrReferenced},
		{"statement ending the transaction", exec(`COMMIT`), refset.ErrInvalidCommand},
		{"nil command", nil, refset.ErrInvalidCommand},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, via := range []string{"Upgrade", "InTx", "Complete"} {
				var err error
				switch via {
				case "Upgrade":
					_, err = set.Upgrade(ctx, "a", tc.cmd)
				case "InTx":
					if tc.cmd == nil {
						continue
					}
					err = refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error { return tc.cmd.Execute(ctx, tx, "a") })
				case "Complete":
					err = e.completeWith(t, set, "a", tc.cmd)
				}
				require.ErrorIs(t, err, tc.want, "%s: %v", via, err)
				require.True(t, refset.IsSentinel(err), "%s: %v", via, err)
			}
		})
	}
	assert.Equal(t, 1, e.count(t, "blocks", ""), "no failed call changed anything")
	assert.Equal(t, 1, e.count(t, "pending", ""))
	assert.Equal(t, 0, e.count(t, "heads", ""))
	e.stillWritable(t, "a")

	t.Run("the caller's own error comes back as it is", func(t *testing.T) {
		mine := fmt.Errorf("a business rule refused it: %w", io.EOF)
		own := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { return mine })
		_, err := set.Upgrade(ctx, "a", own)
		require.ErrorIs(t, err, mine)
		require.False(t, refset.IsSentinel(err), "not dressed up as one of refset's: %v", err)
		err = refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error { return own(ctx, tx, "a") })
		require.ErrorIs(t, err, mine)
		require.False(t, refset.IsSentinel(err), "not dressed up as one of refset's: %v", err)
	})

	t.Run("stored value the type cannot hold", func(t *testing.T) {
		e.mustExec(t, `CREATE TABLE narrow (id {Text} PRIMARY KEY, v {Int} NOT NULL)`)
		e.mustExec(t, `INSERT INTO narrow (id, v) VALUES ('wide', 1099511627776)`)
		narrowSet := refset.New[narrow, string](openStore[narrow, string](t, e, "narrow"))
		tok, err := narrowSet.Upgrade(ctx, "wide")
		require.NoError(t, err)
		_, err = narrowSet.Get(ctx, tok)
		require.ErrorIs(t, err, refset.ErrSchema, "%v", err)
	})
}

// narrow has a field too small for what its table may hold.
type narrow struct {
	Key string `db:"id"`
	V   int32  `db:"v"`
}

func (n narrow) ID() string { return n.Key }

// testPlaceholders: SQL written once with ? runs on every store wherever refset runs
// it or hands it over (issue 23): an Exec command with arguments after the ID, in an
// Add (pipelined on pgx) and in a hand-over of Exec commands alone (pipelined on pgx
// too), a CommandFunc's own statements, an InTx function's; a ? in a literal or a
// comment stays as it is, and a statement with numbered parameters runs as written.
// On PostgreSQL, a ? that is jsonb's operator keeps working where it worked before.
func testPlaceholders(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	e.mustExec(t, `CREATE TABLE owned (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT,
		owner {Text} NOT NULL, note {Text})`)

	// The statements, each inserting the object's row with its owner: the ID is the
	// first argument, the owner the second.
	statements := []struct {
		name, query, note string
	}{
		{"two parameters", `INSERT INTO owned (block_id, owner) VALUES (?, ?)`, ""},
		{"a literal with ?", `INSERT INTO owned (block_id, owner, note) VALUES (?, ?, 'who? me?')`, "who? me?"},
		{"comments with ?", "INSERT INTO owned (block_id, owner) /* why? */ VALUES (?, ?) -- ok?\n", ""},
		{"numbered parameters", `INSERT INTO owned (block_id, owner) VALUES ($1, $2)`, ""},
	}
	// The ways refset runs them. add stores the block and the row; every way stores
	// the block first.
	ways := []struct {
		name string
		add  func(t *testing.T, id, q, owner string) error
	}{
		{"Exec in Add", func(t *testing.T, id, q, owner string) error {
			_, err := set.Add(ctx, mkBlock(id, "", 0), refset.Exec[string](q, 1, owner))
			return err
		}},
		{"Exec in a hand-over", func(t *testing.T, id, q, owner string) error {
			tok, err := set.Add(ctx, mkBlock(id, "", 0))
			require.NoError(t, err)
			rel, err := tok.Release()
			require.NoError(t, err)
			acq, err := rel.Acquire(refset.Exec[string](q, 1, owner))
			require.NoError(t, err)
			_, err = acq.Complete(ctx)
			return err
		}},
		{"CommandFunc", func(t *testing.T, id, q, owner string) error {
			_, err := set.Add(ctx, mkBlock(id, "", 0), refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
				_, err := tx.ExecContext(ctx, q, id, owner)
				return err
			}))
			return err
		}},
		{"InTx", func(t *testing.T, id, q, owner string) error {
			return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				if _, err := set.AddTx(ctx, tx, mkBlock(id, "", 0)); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, q, id, owner)
				return err
			})
		}},
	}
	for i, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			for j, st := range statements {
				t.Run(st.name, func(t *testing.T) {
					id, owner := fmt.Sprintf("b%d-%d", i, j), fmt.Sprintf("owner %d-%d", i, j)
					require.NoError(t, way.add(t, id, st.query, owner))
					// Read it back through a Tx, with ? again: QueryRowContext and
					// QueryContext.
					require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
						var note *string
						err := tx.QueryRowContext(ctx, `SELECT note FROM owned WHERE block_id = ? AND owner = ?`, id, owner).Scan(&note)
						require.NoError(t, err)
						assert.Equal(t, st.note, ptrString(note))
						rows, err := tx.QueryContext(ctx, `SELECT owner FROM owned WHERE block_id = ? AND owner <> ?`, id, "someone else")
						assert.Equal(t, []string{owner}, testdb.Column[string](t, rows, err))
						return nil
					}))
				})
			}
		})
	}

	t.Run("Exec checks the rows its arguments select", func(t *testing.T) {
		_, err := set.Upgrade(ctx, "b0-0", refset.Exec[string](`DELETE FROM owned WHERE block_id = ? AND owner = ?`, 1, "not the owner"))
		require.ErrorIs(t, err, refset.ErrNotFound)
		_, err = set.Upgrade(ctx, "b0-0", refset.Exec[string](`DELETE FROM owned WHERE block_id = ? AND owner = ?`, 1, "owner 0-0"))
		require.NoError(t, err)
	})

	if !h.Postgres {
		return
	}
	// jsonb's ? is an operator; where it ran before, it runs now.
	jsonb := []struct {
		name  string
		query string
		args  []any
	}{
		{"jsonb ? without arguments", `SELECT '{"a": 1}'::jsonb ? 'a'`, nil},
		{"jsonb ?| without arguments", `SELECT '{"a": 1}'::jsonb ?| array['a', 'b']`, nil},
		{"jsonb ? with numbered parameters", `SELECT $1::jsonb ? 'a'`, []any{`{"a": 1}`}},
		{"jsonb ?& with numbered parameters", `SELECT $1::jsonb ?& string_to_array($2, ',')`, []any{`{"a": 1, "b": 2}`, "a,b"}},
	}
	if h.Driver == postgres.DriverPgx {
		jsonb = append(jsonb, struct {
			name  string
			query string
			args  []any
		}{"jsonb ? with pgx's named arguments", `SELECT @doc::jsonb ? 'a'`, []any{pgx.NamedArgs{"doc": `{"a": 1}`}}})
	}
	for _, tc := range jsonb {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				var has bool
				if err := tx.QueryRowContext(ctx, tc.query, tc.args...).Scan(&has); err != nil {
					return err
				}
				assert.True(t, has)
				return nil
			}))
		})
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
