package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"example.com/ledger/internal/dbs"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newLedger migrates db and opens the ledger and its collector, with a grace period
// short enough for a test to see a note collected.
func newLedger(t *testing.T, db refset.Database) (*Ledger, *cleanup.Collector) {
	t.Helper()
	ctx := t.Context()
	m, err := Migrator(db)
	require.NoError(t, err)
	_, err = m.Migrate(ctx, schema.DirectionUp, nil)
	require.NoError(t, err)
	l, err := Open(ctx, db)
	require.NoError(t, err)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "notes", Grace: 10 * time.Millisecond})
	require.NoError(t, err)
	return l, c
}

// TestMigrate migrates a new database: a dry run says what would run and runs
// nothing, the migration runs it, then nothing is pending.
func TestMigrate(t *testing.T) {
	dbs.Each(t, func(t *testing.T, db refset.Database) {
		ctx := t.Context()
		m, err := Migrator(db)
		require.NoError(t, err)
		plan, err := m.Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{Component: "ledger", DryRun: true})
		require.NoError(t, err)
		assert.Contains(t, plan.SQL(), "CREATE TABLE notes")
		_, err = Open(ctx, db)
		assert.ErrorIs(t, err, refset.ErrSchema, "a dry run creates nothing")

		ran, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Contains(t, ran.String(), "ledger 0 -> 1")
		require.NoError(t, m.Validate(ctx))
		again, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Empty(t, again.Steps, "a second migration has nothing to do")
		_, err = Open(ctx, db)
		require.NoError(t, err)
	})
}

// TestHandOver issues notes, pays one from owner to owner (a failed payment changes
// nothing), and asks clean-up who holds it.
func TestHandOver(t *testing.T) {
	dbs.Each(t, func(t *testing.T, db refset.Database) {
		ctx := t.Context()
		l, c := newLedger(t, db)
		_, err := l.Issue(ctx, Note{Serial: "n1", Amount: 5}, "alice")
		require.NoError(t, err)

		require.NoError(t, l.Pay(ctx, "n1", "alice", "bob"))
		err = l.Pay(ctx, "n1", "alice", "carol")
		assert.ErrorIs(t, err, refset.ErrNotFound, "alice has given n1 away")
		refsettest.AssertHeldBy(t, c, "n1", "owners.note_serial")
		holders, err := c.Why(ctx, "n1")
		require.NoError(t, err)
		require.Len(t, holders, 1)
		assert.Contains(t, holders[0].Key, "n1")

		lease, err := l.Notes.Load(ctx, "n1")
		require.NoError(t, err)
		assert.Equal(t, int64(5), lease.Value().Amount)
	})
}

// TestUnitOfWork issues two notes in one unit of work that fails: neither stays.
func TestUnitOfWork(t *testing.T) {
	dbs.Each(t, func(t *testing.T, db refset.Database) {
		ctx := t.Context()
		l, _ := newLedger(t, db)
		failed := errors.New("the batch was refused")
		err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			for _, serial := range []string{"u1", "u2"} {
				if _, err := l.Issue(ctx, Note{Serial: serial, Amount: 1}, "alice"); err != nil {
					return err
				}
			}
			return failed
		})
		require.ErrorIs(t, err, failed)
		_, err = l.Notes.Load(ctx, "u1")
		assert.ErrorIs(t, err, refset.ErrNotFound)
	})
}

// TestCollect burns a note and sees clean-up collect it, and no other.
func TestCollect(t *testing.T) {
	dbs.Each(t, func(t *testing.T, db refset.Database) {
		ctx := t.Context()
		l, c := newLedger(t, db)
		for _, serial := range []string{"kept", "burnt"} {
			_, err := l.Issue(ctx, Note{Serial: serial, Amount: 1}, "alice")
			require.NoError(t, err)
		}
		require.NoError(t, l.Burn(ctx, "burnt", "alice"))
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := c.Collect(ctx)
			require.NoError(t, err)
			if _, err := l.Notes.Load(ctx, "burnt"); errors.Is(err, refset.ErrNotFound) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		refsettest.AssertGone(t, c, "burnt")
		refsettest.AssertHeldBy(t, c, "kept", "owners.note_serial")
		refsettest.AssertClean(t, c)

		// A report tool inspects the set without installing anything.
		inspected, err := cleanup.Inspect(ctx, db, cleanup.Config{Table: "notes"})
		require.NoError(t, err)
		report, err := inspected.Check(ctx)
		require.NoError(t, err)
		assert.True(t, report.OK(), "%+v", report)
		status, err := cleanup.Status(ctx, db)
		require.NoError(t, err)
		assert.NotEmpty(t, status.Sets, "the status of the database lists the notes set")
	})
}
