package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
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

// The tests of issue 23, point 5: errors say which. The same mistake gets the same
// sentinel on every store and wherever refset runs the statement; a failed command
// says which it was; a driver's words do not lead; each layer says its part once; and
// a context error says deadline or cancel.

// inTx is refset.InTx, for the tests of this file, whose functions use no context
// of the unit's.
func inTx(ctx context.Context, db refset.Database, fn func(tx refset.Tx) error) error {
	return refset.InTx(ctx, db, func(_ context.Context, tx refset.Tx) error { return fn(tx) })
}

// mistake is a statement a user gets wrong. Its first argument is the object's ID
// (an Exec command passes it), args come after it.
type mistake struct {
	name  string
	query string
	args  []any
	want  error
	// sqlite, when not nil, is what SQLite does instead, because it cannot tell:
	// errNone for a statement it runs.
	sqlite error
}

// errNone marks a mistake a database accepts.
var errNone = errors.New("no error")

// mistakes are the mistakes of testSameMistakeSameSentinel, on the blocks tables and
// owned (STRICT on SQLite, so that a value of the wrong type is refused there too) and
// loose (not STRICT). Object "a" has a pending row.
var mistakes = []mistake{
	{name: "unknown column", query: `UPDATE blocks SET no_such_column = 1 WHERE id = ?`, want: refset.ErrSchema},
	// SQLite says "table heads has no column named ..." for an INSERT's list.
	{name: "unknown column in an INSERT", query: `INSERT INTO heads (block_id, no_such_column) VALUES (?, 1)`, want: refset.ErrSchema},
	{name: "unknown table", query: `INSERT INTO no_such_table (x) VALUES (?)`, want: refset.ErrSchema},
	{name: "unknown function", query: `UPDATE blocks SET height = no_such_function(height) WHERE id = ?`, want: refset.ErrSchema},
	{name: "syntax error", query: `INSERT INTO heads (block_id) VALUES (?`, want: refset.ErrStatement},
	{name: "too few arguments", query: `INSERT INTO owned (block_id, owner) VALUES (?, ?)`, want: refset.ErrStatement},
	// go-sqlite3 binds what it needs and drops the rest; refset's SQLite store counts.
	{name: "too many arguments", query: `INSERT INTO heads (block_id) VALUES (?)`, args: []any{"extra"}, want: refset.ErrStatement},
	{name: "a value of the wrong type", query: `INSERT INTO owned (block_id, owner, n) VALUES (?, 'o', ?)`, args: []any{"many"}, want: refset.ErrStatement},
	// SQLite's type affinity stores text in an INTEGER column of a table that is not
	// STRICT: it cannot tell the mistake.
	{name: "a value of the wrong type, not STRICT", query: `INSERT INTO loose (block_id, n) VALUES (?, ?) ON CONFLICT (block_id) DO UPDATE SET n = excluded.n`, args: []any{"many"},
		want: refset.ErrStatement, sqlite: errNone},
	{name: "a value no driver sends", query: `INSERT INTO owned (block_id, owner, n) VALUES (?, 'o', ?)`, args: []any{struct{}{}}, want: refset.ErrStatement},
	{name: "NOT NULL violated", query: `INSERT INTO owned (block_id, owner) VALUES (?, NULL)`, want: refset.ErrConstraint},
	{name: "unique violated", query: `INSERT INTO pending (block_id) SELECT 'a' FROM blocks WHERE id = ?`, want: refset.ErrDuplicate},
	{name: "foreign key violated (parent missing)", query: `INSERT INTO heads (block_id) VALUES (? || '-missing')`, want: refset.ErrNotFound},
	{name: "CHECK violated", query: `INSERT INTO owned (block_id, owner, n) VALUES (?, 'o', -1)`, want: refset.ErrConstraint},
}

// userPath is a way refset runs a user's statement q with the object's ID and args,
// returning the call's error.
type userPath struct {
	name string
	run  func(t *testing.T, q string, args []any) error
}

// testSameMistakeSameSentinel: a mistake in a user's SQL gets the same sentinel on
// every store and driver, wherever refset runs the statement (an Exec command in Add,
// Upgrade and a hand-over, pipelined on pgx where it can be, a CommandFunc, an InTx
// function), and so does a statement refset runs itself on a table that changed
// under its store. Every failure changes nothing, and its message is said once, with
// no driver's words around the database's.
func testSameMistakeSameSentinel(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	strict := ""
	if !h.Postgres {
		strict = " STRICT"
	}
	e.mustExec(t, `CREATE TABLE owned (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT,
		owner {Text} NOT NULL, n {Int} CHECK (n > 0))`+strict)
	e.mustExec(t, `CREATE TABLE loose (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT, n {Int})`)
	_, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)
	noop := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { return nil })

	added := 0
	paths := []userPath{
		{"Exec in Add", func(t *testing.T, q string, args []any) error {
			added++ // a new object each time: one a mistake let through stays
			_, err := set.Add(ctx, mkBlock(fmt.Sprintf("new%d", added), "", 0), refset.Exec[string](q, -1, args...))
			return err
		}},
		{"Exec in Upgrade", func(t *testing.T, q string, args []any) error {
			_, err := set.Upgrade(ctx, "a", refset.Exec[string](q, -1, args...))
			return err
		}},
		{"Exec in a hand-over", func(t *testing.T, q string, args []any) error {
			return e.complete(t, set, "a", []refset.Command[string]{refset.Exec[string](q, -1, args...)}, nil)
		}},
		{"Exec beside a CommandFunc in a hand-over", func(t *testing.T, q string, args []any) error {
			return e.complete(t, set, "a", []refset.Command[string]{refset.Exec[string](q, -1, args...)}, []refset.Command[string]{noop})
		}},
		{"Exec in CompleteTx", func(t *testing.T, q string, args []any) error {
			tok, err := set.Upgrade(ctx, "a")
			require.NoError(t, err)
			acq := handOverOf(t, tok, refset.Exec[string](q, -1, args...))
			return inTx(ctx, e.db, func(tx refset.Tx) error {
				_, err := acq.CompleteTx(ctx, tx)
				return err
			})
		}},
		{"CommandFunc", func(t *testing.T, q string, args []any) error {
			_, err := set.Upgrade(ctx, "a", refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
				_, err := tx.ExecContext(ctx, q, append([]any{id}, args...)...)
				return err
			}))
			return err
		}},
		{"InTx function", func(t *testing.T, q string, args []any) error {
			return inTx(ctx, e.db, func(tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, q, append([]any{"a"}, args...)...)
				return err
			})
		}},
	}
	for _, m := range mistakes {
		t.Run(m.name, func(t *testing.T) {
			want := m.want
			if !h.Postgres && m.sqlite != nil {
				want = m.sqlite
			}
			for _, p := range paths {
				err := p.run(t, m.query, m.args)
				if want == errNone {
					require.NoError(t, err, p.name)
					continue
				}
				require.ErrorIs(t, err, want, "%s: %v", p.name, err)
				for _, other := range []error{refset.ErrSchema, refset.ErrStatement, refset.ErrConstraint, refset.ErrDuplicate, refset.ErrNotFound} {
					if other != want {
						require.NotErrorIs(t, err, other, "%s: one sentinel: %v", p.name, err)
					}
				}
				assertSaidOnce(t, err)
				assert.NotContains(t, err.Error(), "preprocessing batch", "%s: pgx's words for a batch do not lead", p.name)
			}
		})
	}
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "a"))
	assert.Equal(t, 1, e.count(t, "pending", ""), "no failed call changed anything")
	assert.Equal(t, 0, e.count(t, "heads", ""))
	assert.Equal(t, 0, e.count(t, "owned", ""))
	e.stillWritable(t, "a")

	if h.Driver == postgres.DriverPgx && !h.Unprepared { // unprepared, pgx does not describe a batch's statements first
		t.Run("pgx's batch error stays reachable", func(t *testing.T) {
			err := paths[2].run(t, `UPDATE blocks SET no_such_column = 1 WHERE id = ?`, nil)
			require.ErrorIs(t, err, refset.ErrSchema)
			// A batch's (lost commits not resolved), or the prepare of a segment sent
			// through pgx's pipeline (resolved: store/postgres/flushed.go).
			var pe pgx.ErrPreprocessingBatch
			var prepare *pgconn.PrepareError
			require.True(t, errors.As(err, &pe) || errors.As(err, &prepare), "pgx's error is in the chain: %v", err)
		})
	}

	t.Run("refset's own statements on a changed table", func(t *testing.T) { testChangedTables(t, h) })
}

// testChangedTables: the statements refset runs itself (a set's insert, pipelined on
// pgx with an Exec command; its reads; holds; an Exec command's statement prepared
// before the change) fail with the same sentinel on every store once the tables
// changed under the store.
func testChangedTables(t *testing.T, h harness) {
	const blocksAs = `CREATE TABLE blocks (id {Text} NOT NULL PRIMARY KEY, prev {Text} REFERENCES blocks (id) ON DELETE RESTRICT, height {Int} NOT NULL, payload {Bytes}%s)`
	changes := []struct {
		name    string
		blocks  string // the blocks table as it is now; "" drops it
		want    map[string]error
		nHeight int64 // the height of the block the calls add; 0: 101, as "a"'s
	}{
		{"a mapped column dropped", `CREATE TABLE blocks (id {Text} NOT NULL PRIMARY KEY, prev {Text}, height {Int} NOT NULL)`,
			map[string]error{"Add": refset.ErrSchema, "Add with an Exec": refset.ErrSchema, "Get": refset.ErrSchema}, 0},
		// SQLite reads a double-quoted name that names no column as a string: refset's
		// statements must not quote names that way there.
		{"the ID column renamed", `CREATE TABLE blocks (key {Text} NOT NULL PRIMARY KEY, prev {Text}, height {Int} NOT NULL, payload {Bytes})`,
			map[string]error{"Add": refset.ErrSchema, "Get": refset.ErrSchema, "Upgrade": refset.ErrSchema, "Hold": refset.ErrSchema}, 0},
		{"the table dropped", "",
			map[string]error{"Add": refset.ErrSchema, "Add with an Exec": refset.ErrSchema, "Get": refset.ErrSchema, "Upgrade": refset.ErrSchema, "Hold": refset.ErrSchema}, 0},
		{"a NOT NULL column added", fmt.Sprintf(blocksAs, `, extra {Text} NOT NULL`),
			map[string]error{"Add": refset.ErrConstraint, "Add with an Exec": refset.ErrConstraint}, 0},
		{"a CHECK added", fmt.Sprintf(blocksAs, `, CHECK (height > 100)`),
			map[string]error{"Add": refset.ErrConstraint, "Add with an Exec": refset.ErrConstraint}, 7},
		{"a UNIQUE added", fmt.Sprintf(blocksAs, `, UNIQUE (height)`),
			map[string]error{"Add": refset.ErrDuplicate, "Add with an Exec": refset.ErrDuplicate}, 0},
		{"the pending table lost its column", fmt.Sprintf(blocksAs, ``),
			map[string]error{"Add with an Exec": refset.ErrSchema, "prepared Exec": refset.ErrSchema}, 0},
		{"the holds table dropped", fmt.Sprintf(blocksAs, ``),
			map[string]error{"Hold": refset.ErrSchema, "Unhold": refset.ErrSchema}, 0},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			e, set, ctx := newBlocksEnv(t, h)
			insertPending := e.insertPending()
			tok, err := set.Add(ctx, mkBlock("a", "", 101), insertPending)
			require.NoError(t, err)
			// Run the pending row's statement until the database keeps it prepared.
			for i := range 3 {
				_, err := set.Add(ctx, mkBlock(fmt.Sprintf("p%d", i), "", 101), insertPending)
				require.NoError(t, err)
			}
			// Made again as the change has it, with "a" in it, at a height of 101,
			// and no holds table.
			e.mustExec(t, `DROP TABLE pending`)
			e.mustExec(t, `DROP TABLE heads`)
			e.mustExec(t, `DROP TABLE blocks_holds`)
			e.mustExec(t, `DROP TABLE blocks`)
			if c.blocks != "" {
				e.mustExec(t, c.blocks)
				idCol := "id"
				if strings.Contains(c.blocks, "key {Text}") {
					idCol = "key"
				}
				if !strings.Contains(c.blocks, "extra") {
					e.mustExec(t, `INSERT INTO blocks (`+idCol+`, height) VALUES ('a', 101)`)
				}
				pendingCol := "block_id"
				if strings.Contains(c.name, "pending") {
					pendingCol = "object"
				}
				e.mustExec(t, `CREATE TABLE pending (`+pendingCol+` {Text} NOT NULL PRIMARY KEY)`)
			}
			n := mkBlock("n", "", 101)
			if c.nHeight != 0 {
				n.Height = c.nHeight
			}
			calls := map[string]func() error{
				"Add": func() error { _, err := set.Add(ctx, n); return err },
				"Add with an Exec": func() error {
					_, err := set.Add(ctx, n, e.insertPending())
					return err
				},
				"Get":     func() error { _, err := set.Get(ctx, tok); return err },
				"Upgrade": func() error { _, err := set.Upgrade(ctx, "a"); return err },
				"Hold":    func() error { _, err := set.Upgrade(ctx, "a", set.Hold("other", 0)); return err },
				"Unhold":  func() error { _, err := set.Upgrade(ctx, "a", set.Unhold("tester")); return err },
				"prepared Exec": func() error {
					_, err := set.Add(ctx, n, insertPending)
					return err
				},
			}
			for name, want := range c.want {
				err := calls[name]()
				require.ErrorIs(t, err, want, "%s: %v", name, err)
				assertSaidOnce(t, err)
			}
		})
	}
}

// complete hands id over with release and acquire, returning Complete's error.
func (e *env) complete(t *testing.T, set *refset.RefSet[block, string], id string, release, acquire []refset.Command[string]) error {
	t.Helper()
	tok, err := set.Upgrade(t.Context(), id)
	require.NoError(t, err)
	rel, err := tok.Release(release...)
	require.NoError(t, err)
	acq, err := rel.Acquire(acquire...)
	require.NoError(t, err)
	_, err = acq.Complete(t.Context())
	return err
}

// sentinels are refset's errors, each of which a message says at most once.
var sentinels = []error{
	refset.ErrNotFound, refset.ErrDuplicate, refset.ErrReferenced, refset.ErrTokenConsumed, refset.ErrInvalidToken,
	refset.ErrInvalidCommand, refset.ErrInvalidTx, refset.ErrInvalidID, refset.ErrInvalidIdentifier, refset.ErrSchema,
	refset.ErrConflict, refset.ErrConstraint, refset.ErrClosed, refset.ErrUnavailable, refset.ErrCommitUnknown,
	refset.ErrTimeout, refset.ErrInvalidConfig, refset.ErrStatement,
}

// refsetPrefix is how a message of refset's starts a layer's part: "refset: " or
// "refset/postgres: ".
var refsetPrefix = regexp.MustCompile(`\brefset(/[a-z]+)?: `)

// assertSaidOnce checks that err's message says each thing once: one refset prefix
// (the outermost layer's; the layers inside say what they did without repeating the
// library's name), each sentinel's text at most once, and the context's error at most
// once.
func assertSaidOnce(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	assert.LessOrEqual(t, len(refsetPrefix.FindAllString(msg, -1)), 1, "one refset prefix: %s", msg)
	for _, s := range sentinels {
		assert.LessOrEqual(t, strings.Count(msg, s.Error()), 1, "%q once: %s", s, msg)
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		assert.LessOrEqual(t, strings.Count(msg, c.Error()), 1, "%q once: %s", c, msg)
	}
}

// errBusiness is what a caller's command refuses a hand-over with.
var errBusiness = errors.New("the ledger refuses it")

// refuseBusiness is a caller's command, a named function, that fails.
func refuseBusiness(context.Context, refset.Tx, string) error { return errBusiness }

// testFailedCommandSaysWhich: a command that fails says which it was: its place in
// the call's list of commands (a hand-over's release and acquire commands are one
// list, and the side is said), and what it is: an Exec command's statement as the
// caller wrote it, a hold or an unhold and its holder, a function's name. The same on
// every store, pipelined (pgx) or not.
func testFailedCommandSaysWhich(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)
	release := refset.Exec[string](`DELETE FROM pending WHERE block_id = ?`, 1)
	noHead := refset.Exec[string](`DELETE FROM heads WHERE block_id = ?`, 1) // there is none
	acquire := refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1)
	long := refset.Exec[string](`INSERT INTO heads (block_id)
		SELECT id FROM blocks WHERE id = ? AND height >= 0 AND height < 1000000 AND prev IS NULL AND payload IS NULL`, 1)
	cmds := func(c ...refset.Command[string]) []refset.Command[string] { return c }

	cases := []struct {
		name string
		call func() error
		want error
		says string // what the message starts with
	}{
		{"a hand-over's release affects no row", func() error { return e.complete(t, set, "a", cmds(release, noHead), cmds(acquire)) },
			refset.ErrNotFound, "refset: complete a: release command 2 of 3 (DELETE FROM heads WHERE block_id = ?): affected 0 rows, want 1"},
		{"a hand-over's acquire refused", func() error { return e.complete(t, set, "a", cmds(release), cmds(acquire, acquire)) },
			refset.ErrDuplicate, "refset: complete a: acquire command 3 of 3 (INSERT INTO heads (block_id) VALUES (?)): duplicate id: "},
		{"a hand-over's CommandFunc fails", func() error {
			return e.complete(t, set, "a", cmds(release), cmds(acquire, refset.CommandFunc[string](refuseBusiness)))
		}, errBusiness, "refset: complete a: acquire command 3 of 3 (func conformance.refuseBusiness): the ledger refuses it"},
		{"a long statement is cut in the middle", func() error { return e.complete(t, set, "a", cmds(release), cmds(long)) },
			refset.ErrNotFound, "refset: complete a: acquire command 2 of 2 (INSERT INTO heads (block_id) SELECT id FROM blocks WHERE id = ? AND height >= 0 ... AND prev IS NULL AND payload IS NULL): affected 0 rows, want 1"},
		{"an Add's command", func() error { _, err := set.Add(ctx, mkBlock("b", "", 0), e.insertPending(), noHead); return err },
			refset.ErrNotFound, "refset: add b: command 2 of 2 (DELETE FROM heads WHERE block_id = ?): affected 0 rows, want 1"},
		{"an Upgrade's unhold of no hold", func() error { _, err := set.Upgrade(ctx, "a", set.Hold("x", 0), set.Unhold("nobody")); return err },
			refset.ErrNotFound, `refset: upgrade a: command 2 of 2 (unhold by "nobody"): `},
		{"an Add's hold of no one", func() error { _, err := set.Add(ctx, mkBlock("c", "", 0), set.Hold("", 0)); return err },
			refset.ErrInvalidCommand, `refset: add c: command 1 of 1 (hold by ""): `},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.want, "%v", err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.says), "the message says which command:\n got %s\nwant %s...", err, tc.says)
			assertSaidOnce(t, err)
		})
	}
	assert.Equal(t, 1, e.count(t, "blocks", ""), "nothing changed")
	assert.Equal(t, 1, e.count(t, "pending", ""))
	assert.Equal(t, 0, e.count(t, "heads", ""))
	assert.Equal(t, 0, e.count(t, "blocks_holds", ""))
}

// testWrongCountSaysTheCount: an Exec command that affects another count of rows
// than it wants fails the same way on every store, whether the count is read by
// refset (SQLite, lib/pq) or refused by the server itself (pgx, whose hand-over then
// goes in one batch with COMMIT): ErrNotFound, and a message that names the command
// and says the count, for a row already gone, a row matched twice, a row where none
// is wanted, an insert a conflict made do nothing. Nothing changes, and the statement
// after the refused one never runs.
func testWrongCountSaysTheCount(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	for _, id := range []string{"a", "b"} {
		_, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
		require.NoError(t, err)
	}
	acquire := refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, -1)
	cmds := func(c ...refset.Command[string]) []refset.Command[string] { return c }
	cases := []struct {
		name    string
		release refset.Command[string]
		says    string
	}{
		{"a row gone", refset.Exec[string](`DELETE FROM pending WHERE block_id = ? || '-gone'`, 1),
			"refset: complete a: release command 1 of 2 (DELETE FROM pending WHERE block_id = ? || '-gone'): affected 0 rows, want 1"},
		{"a row matched twice", refset.Exec[string](`DELETE FROM pending WHERE block_id IN (?, ?)`, 1, "b"),
			"refset: complete a: release command 1 of 2 (DELETE FROM pending WHERE block_id IN (?, ?)): affected 2 rows, want 1"},
		{"a row where none is wanted", refset.Exec[string](`UPDATE pending SET block_id = block_id WHERE block_id = ?`, 0),
			"refset: complete a: release command 1 of 2 (UPDATE pending SET block_id = block_id WHERE block_id = ?): affected 1 rows, want 0"},
		{"an insert a conflict made do nothing", refset.Exec[string](`INSERT INTO pending (block_id) VALUES (?) ON CONFLICT DO NOTHING`, 1),
			"refset: complete a: release command 1 of 2 (INSERT INTO pending (block_id) VALUES (?) ON CONFLICT DO NOTHING): affected 0 rows, want 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := e.complete(t, set, "a", cmds(tc.release), cmds(acquire))
			require.ErrorIs(t, err, refset.ErrNotFound, "%v", err)
			assert.Equal(t, tc.says, err.Error())
			assertSaidOnce(t, err)
			assert.Equal(t, 2, e.count(t, "pending", ""), "nothing changed")
			assert.Equal(t, 0, e.count(t, "heads", ""), "the acquire did not run")
		})
	}
	require.NoError(t, e.complete(t, set, "a", cmds(refset.Exec[string](`DELETE FROM pending WHERE block_id IN (?, ?)`, 2, "b")), cmds(acquire)),
		"two rows wanted, two matched")
	assert.Equal(t, 0, e.count(t, "pending", ""))
}

// slowStatement is an InTx unit of work whose one statement takes seconds.
func (e *env) slowStatement(ctx context.Context) error {
	return inTx(ctx, e.db, func(tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, e.sql(slowQuery+` WHERE CAST(? AS TEXT) IS NOT NULL`), "a")
		return err
	})
}

// testMessagesSayEachThingOnce provokes the failures a user meets and checks that
// each message says each thing once: one refset prefix, each sentinel's text and the
// context's error at most once (assertSaidOnce).
func testMessagesSayEachThingOnce(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)

	failures := []struct {
		name string
		call func() error
		want error // nil: any error
	}{
		{"a duplicate", func() error { _, err := set.Add(ctx, mkBlock("a", "", 0)); return err }, refset.ErrDuplicate},
		{"a duplicate in a unit of work", func() error {
			return inTx(ctx, e.db, func(tx refset.Tx) error { _, err := set.AddTx(ctx, tx, mkBlock("a", "", 0)); return err })
		}, refset.ErrDuplicate},
		{"not found", func() error { _, err := set.Upgrade(ctx, "nope"); return err }, refset.ErrNotFound},
		{"not found, with commands", func() error { _, err := set.Upgrade(ctx, "nope", set.Hold("x", 0)); return err }, refset.ErrNotFound},
		{"a load of nothing", func() error { _, err := set.Load(ctx, "nope"); return err }, refset.ErrNotFound},
		{"a failed command", func() error {
			return e.complete(t, set, "a", nil, []refset.Command[string]{e.releasePending(), e.releasePending()})
		}, refset.ErrNotFound},
		{"a reference to nothing", func() error { _, err := set.Add(ctx, mkBlock("b", "ghost", 0)); return err }, refset.ErrNotFound},
		{"a statement refused in a unit of work", func() error {
			return inTx(ctx, e.db, func(tx refset.Tx) error { _, err := tx.ExecContext(ctx, `SELEKT ?`, 1); return err })
		}, refset.ErrStatement},
		{"a consumed token", func() error {
			tok, err := set.Upgrade(ctx, "a")
			require.NoError(t, err)
			_, err = tok.Release()
			require.NoError(t, err)
			_, err = tok.Release()
			return err
		}, refset.ErrTokenConsumed},
	}
	if h.SkipCancels == "" {
		failures = append(failures, []struct {
			name string
			call func() error
			want error
		}{
			{"a statement cancelled", func() error {
				ctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(200*time.Millisecond, cancel)
				return e.slowStatement(ctx)
			}, context.Canceled},
			{"a statement past its deadline", func() error {
				ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				return e.slowStatement(ctx)
			}, context.DeadlineExceeded},
			{"a hand-over past its deadline", func() error {
				ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				tok, err := set.Upgrade(t.Context(), "a")
				require.NoError(t, err)
				rel, err := tok.Release(refset.Exec[string](slowQuery+` WHERE CAST(? AS TEXT) IS NOT NULL`, -1))
				require.NoError(t, err)
				acq, err := rel.Acquire()
				require.NoError(t, err)
				_, err = acq.Complete(ctx)
				return err
			}, context.DeadlineExceeded},
		}...)
	}
	for _, f := range badConfigs(t, h, e.db) {
		failures = append(failures, struct {
			name string
			call func() error
			want error
		}{"open: " + f.name, f.open, f.want})
	}
	closed := []struct {
		name string
		call func() error
		want error
	}{
		{"Add on a closed database", func() error { _, err := set.Add(ctx, mkBlock("c", "", 0)); return err }, refset.ErrClosed},
		{"Add with commands on a closed database", func() error { _, err := set.Add(ctx, mkBlock("c", "", 0), e.insertPending()); return err }, refset.ErrClosed},
		{"Upgrade on a closed database", func() error { _, err := set.Upgrade(ctx, "a"); return err }, refset.ErrClosed},
		{"Get on a closed database", func() error { _, err := set.Get(ctx, tok); return err }, refset.ErrClosed},
		{"InTx on a closed database", func() error { return inTx(ctx, e.db, func(refset.Tx) error { return nil }) }, refset.ErrClosed},
	}
	check := func(t *testing.T, call func() error, want error) {
		err := call()
		require.Error(t, err)
		if want != nil {
			require.ErrorIs(t, err, want, "%v", err)
		}
		assertSaidOnce(t, err)
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) { check(t, f.call, f.want) })
	}
	require.NoError(t, e.db.(interface{ Close() error }).Close())
	for _, f := range closed {
		t.Run(f.name, func(t *testing.T) { check(t, f.call, f.want) })
	}
}

// badConfig is a way to open a database that cannot work.
type badConfig struct {
	name string
	open func() error
	want error // nil: any error
}

// badConfigs are the ways to open h's database with a configuration that cannot
// work: a SQLite path that names no file or an option value no one knows; a Postgres
// driver no one knows, a DSN that does not parse, a database that does not exist
// (beside db's).
func badConfigs(t *testing.T, h harness, db refset.Database) []badConfig {
	ctx := t.Context()
	if !h.Postgres {
		return []badConfig{
			{"SQLite in memory", func() error { _, err := sqlite.Open(ctx, ":memory:", sqlite.Options{}); return err }, refset.ErrInvalidConfig},
			{"SQLite's synchronous OFF", func() error {
				_, err := sqlite.Open(ctx, t.TempDir()+"/x.db", sqlite.Options{Synchronous: "OFF"})
				return err
			}, refset.ErrInvalidConfig},
			{"SQLite in a missing directory", func() error {
				_, err := sqlite.Open(ctx, t.TempDir()+"/missing/x.db", sqlite.Options{})
				return err
			}, nil},
		}
	}
	place := testdb.PlaceOf(t, db)
	opts := place.PostgresOptions(testdb.Options{})
	open := func(dsn string, opts postgres.Options) func() error {
		return func() error {
			db, err := postgres.Open(ctx, dsn, opts)
			if err == nil {
				db.Close()
			}
			return err
		}
	}
	unknown := opts
	unknown.Driver = "odbc"
	// A name of its own, so that no other test's failed login to it makes PgBouncer
	// hold this one for server_login_retry.
	noSuch := fmt.Sprintf("refset_no_such_database_%d", time.Now().UnixNano())
	missing := place.At + " dbname=" + noSuch
	switch {
	case h.Pooled:
		// As the user PgBouncer knows itself (its auth_file), which PgBouncer passes
		// the server's refusal on to at once: a test's own role it looks up with its
		// auth_query, in the database named, and holds until its query_wait_timeout
		// (two minutes; store/postgres's TestMissingDatabaseEndsWithContext).
		u, err := url.Parse(os.Getenv(pgtest.EnvPgBouncer))
		require.NoError(t, err)
		u.Path = "/" + noSuch
		missing = u.String()
	case strings.HasPrefix(place.At, "postgres"):
		missing = regexp.MustCompile(`/[^/?]*(\?|$)`).ReplaceAllString(place.At, "/"+noSuch+"$1")
	}
	return []badConfig{
		{"an unknown driver", open(place.At, unknown), refset.ErrInvalidConfig},
		{"a DSN that does not parse", open("postgres://u:pw@127.0.0.1:notaport/x", opts), refset.ErrInvalidConfig},
		{"a database that does not exist", open(missing, opts), nil},
	}
}
