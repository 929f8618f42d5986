// Package ledger is a small program built on refset as a user builds one: notes
// (immutable objects) owned through a holder table with a column of its own, handed
// from one owner to another atomically, and collected once nobody holds them. It
// imports refset's exported packages only; its tests run it on SQLite and on
// PostgreSQL through lib/pq and pgx.
package ledger

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
)

// Note is an immutable note of value.
type Note struct {
	Serial string `db:"serial"`
	Amount int64  `db:"amount"`
}

// ID is the note's serial.
func (n Note) ID() string { return n.Serial }

// migrations are the ledger's own tables, versioned, which Migrate applies with
// refset's.
//
//go:embed migrations
var migrations embed.FS

// Migrator brings db's schema to what the ledger needs: its own tables (the
// "ledger" component), then refset's tables for the notes set.
func Migrator(db refset.Database) (*schema.Migrator, error) {
	files, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	return schema.New(db, schema.Config{
		Components: []schema.Component{{Name: "ledger", Migrations: files}},
		Sets:       []schema.Set{{Table: "notes"}},
	})
}

// Ledger is the notes of one database.
type Ledger struct {
	DB    refset.Database
	Notes *refset.RefSet[Note, string]
}

// Open builds the ledger on db, migrated by Migrator.
func Open(ctx context.Context, db refset.Database) (*Ledger, error) {
	s, err := store.NewStore[Note, string](ctx, db, store.Config{Table: "notes"})
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &Ledger{DB: db, Notes: refset.New(s)}, nil
}

// own is the command that records owner's hold on a note.
func own(owner string) refset.Command[string] {
	return refset.Exec[string](`INSERT INTO owners (note_serial, owner) VALUES (?, ?)`, 1, owner)
}

// disown is the command that ends owner's hold, failing if owner had none.
func disown(owner string) refset.Command[string] {
	return refset.Exec[string](`DELETE FROM owners WHERE note_serial = ? AND owner = ?`, 1, owner)
}

// Issue stores a note owned by owner.
func (l *Ledger) Issue(ctx context.Context, n Note, owner string) (*refset.RefToken[string], error) {
	return l.Notes.Add(ctx, n, own(owner))
}

// Pay hands a note from one owner to another in one transaction.
func (l *Ledger) Pay(ctx context.Context, serial, from, to string) error {
	tok, err := l.Notes.Upgrade(ctx, serial)
	if err != nil {
		return err
	}
	rel, err := tok.Release(disown(from))
	if err != nil {
		return err
	}
	acq, err := rel.Acquire(own(to))
	if err != nil {
		return err
	}
	_, err = acq.Complete(ctx)
	return err
}

// Burn ends owner's hold on a note: nothing keeps it then, and clean-up collects it.
func (l *Ledger) Burn(ctx context.Context, serial, owner string) error {
	return refset.InTx(ctx, l.DB, func(ctx context.Context, tx refset.Tx) error {
		tok, err := l.Notes.Upgrade(ctx, serial)
		if err != nil {
			return err
		}
		rel, err := tok.Release(disown(owner))
		if err != nil {
			return err
		}
		acq, err := rel.Acquire()
		if err != nil {
			return err
		}
		_, err = acq.Complete(ctx)
		return err
	})
}
