package conformance

import (
	"context"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A refused foreign key means the same whatever the SQL looks like: deleting a
// referenced block is refset.ErrReferenced, referencing a missing one
// refset.ErrNotFound, however the statement is written and wherever it runs. SQLite
// gives both the same code, so its store must read the statement to tell them apart.
func testForeignKeyErrorsWhateverTheSQL(t *testing.T, h Harness) {
	e := newEnv(t, h)
	set := e.blocks(t)
	ctx := t.Context()
	_, err := set.Add(ctx, mkBlock("held", "", 0), e.acquireHead())
	require.NoError(t, err)
	// A key without ON DELETE RESTRICT (NO ACTION, the default) fails otherwise than a
	// RESTRICT one on SQLite: as a foreign key (787), not as a trigger (1811).
	e.mustExec(t, `CREATE TABLE receipts (block_id {Text} NOT NULL REFERENCES blocks (id))`)
	_, err = set.Add(ctx, mkBlock("noted", "", 0), refset.Exec[string](e.sql(`INSERT INTO receipts (block_id) VALUES (?)`), 1))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("carrier", "", 0), set.Hold("tester", 0))
	require.NoError(t, err)

	deletes := []string{
		`DELETE FROM blocks WHERE id = ?`,
		`delete from blocks where id = ?`,
		"-- the block is still referenced\nDELETE FROM blocks WHERE id = ?",
		`/* the block is still referenced */ DELETE FROM blocks WHERE id = ?`,
		`WITH doomed AS (SELECT id FROM blocks WHERE id = ?) DELETE FROM blocks WHERE id IN (SELECT id FROM doomed)`,
		`WITH RECURSIVE doomed (id) AS MATERIALIZED (SELECT id FROM blocks WHERE id = ? AND height >= 0) /* ) */
		 DELETE FROM blocks WHERE id IN (SELECT id FROM doomed)`,
	}

	refusals := []struct {
		name  string
		want  error
		arg   string
		forms []string
	}{
		{"delete of a block referenced ON DELETE RESTRICT", refset.ErrReferenced, "held", deletes},
		{"delete of a block referenced by a plain key", refset.ErrReferenced, "noted", deletes},
		{"reference to a missing block", refset.ErrNotFound, "ghost", []string{
			`INSERT INTO heads (block_id) VALUES (?)`,
			`insert into heads (block_id) values (?)`,
			"-- the controller takes it\nINSERT INTO heads (block_id) VALUES (?)",
			`/* the controller takes it */ INSERT INTO heads (block_id) VALUES (?)`,
			`WITH src AS (SELECT CAST(? AS {Text}) AS id) INSERT INTO heads (block_id) SELECT id FROM src`,
			`INSERT INTO heads (block_id) VALUES (?) ON CONFLICT (block_id) DO NOTHING`,
		}},
	}
	// runners are the places a user's statement runs: its own unit of work, a Command
	// of a hand-over that refset runs, and the same hand-over inside a unit of work.
	runners := []struct {
		name string
		run  func(t *testing.T, q string, arg string) error
	}{
		{"InTx", func(t *testing.T, q, arg string) error {
			return refset.InTx(ctx, e.db, func(tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, q, arg)
				return err
			})
		}},
		{"Command via Complete", func(t *testing.T, q, arg string) error {
			_, err := e.handOver(t, set, q, arg).Complete(ctx)
			return err
		}},
		{"Command via CompleteTx in InTx", func(t *testing.T, q, arg string) error {
			acq := e.handOver(t, set, q, arg)
			return refset.InTx(ctx, e.db, func(tx refset.Tx) error {
				_, err := acq.CompleteTx(ctx, tx)
				return err
			})
		}},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			for _, run := range runners {
				for _, q := range r.forms {
					t.Run(run.name+"/"+q, func(t *testing.T) {
						err := run.run(t, e.sql(q), r.arg)
						require.ErrorIs(t, err, r.want)
						assert.Equal(t, 3, e.count(t, "blocks", ""), "nothing was deleted")
						assert.Equal(t, 1, e.count(t, "heads", ""), "nothing was referenced")
						assert.Equal(t, 1, e.count(t, "receipts", ""), "nothing was referenced")
						assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ?", "tester"), "the hand-over was undone")
					})
				}
			}
		})
	}
}

// handOver is a hand-over of carrier whose one command runs q with arg: it drops the
// tester's hold first, so a refusal must undo that too.
func (e *env) handOver(tb testing.TB, set *refset.RefSet[block, string], q, arg string) *refset.Acquired[string] {
	tb.Helper()
	tok, err := set.Upgrade(tb.Context(), "carrier")
	require.NoError(tb, err)
	rel, err := tok.Release(set.Unhold("tester"))
	require.NoError(tb, err)
	acq, err := rel.Acquire(refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, _ string) error {
		_, err := tx.ExecContext(ctx, q, arg)
		return err
	}))
	require.NoError(tb, err)
	return acq
}
