// This file is README.md's quick start, from its import block to its end, line for
// line (TestREADMEQuickStart compares them): main.go runs it.

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

type Block struct {
	Hash   string  `db:"id"`
	Prev   *string `db:"prev"`
	Height int64   `db:"height"`
}

func (b Block) ID() string { return b.Hash }

// Your tables: the objects, and the rows that reference them, ON DELETE RESTRICT (on
// PostgreSQL, the default NO ACTION makes clean-up check each key twice). Clean-up needs
// an index on every column that references blocks (a primary key is one).
const tables = `
CREATE TABLE blocks (id TEXT PRIMARY KEY, prev TEXT REFERENCES blocks (id) ON DELETE RESTRICT, height INTEGER NOT NULL);
CREATE INDEX blocks_prev ON blocks (prev);
CREATE TABLE pending_blocks (block_id TEXT PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
CREATE TABLE chain_heads    (block_id TEXT PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);`

// dsn is a SQLite file path (or file: URL), or a PostgreSQL URL or key=value DSN: one
// code path runs on either, with each store's own options.
func quickStart(ctx context.Context, dsn string) error {
	db, err := store.Open(ctx, dsn, sqlite.Options{}, postgres.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	// The pool refset writes on runs your own SQL too.
	if _, err := db.Driver().Pool().ExecContext(ctx, tables); err != nil {
		return err
	}
	setStore, err := store.NewStore[Block, string](ctx, db, store.Config{Table: "blocks"})
	if err != nil {
		return err
	}
	blocks := refset.New(setStore)
	// Clean-up deletes the blocks nothing references any more (a new one only after a
	// grace period, so its holder has time to reference it).
	collector, err := store.NewCollector(ctx, db, cleanup.Config{Table: "blocks"})
	if err != nil {
		return err
	}

	// Store a block and its first reference in one transaction.
	tok, err := blocks.Add(ctx, Block{Hash: "genesis"}, refset.Exec[string](`INSERT INTO pending_blocks (block_id) VALUES (?)`, 1))
	if err != nil {
		return err
	}

	// Hand it from the completer to the chain controller: both rows change in one transaction.
	rel, err := tok.Release(refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = ?`, 1))
	if err != nil {
		return err
	}
	acq, err := rel.Acquire(refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
	if err != nil {
		return err
	}
	head, err := acq.Complete(ctx)
	if err != nil {
		return err
	}

	// Read it: every live lease on an ID shares one instance.
	lease, err := blocks.Get(ctx, head)
	if err != nil {
		return err
	}
	fmt.Println("head:", lease.Value().Hash, "at height", lease.Value().Height)

	// Collect now (or every minute in the background: go collector.Run(ctx, time.Minute, nil)).
	stats, err := collector.Collect(ctx)
	if err != nil {
		return err
	}
	why, err := collector.Why(ctx, "genesis")
	if err != nil {
		return err
	}
	fmt.Println("collected:", stats.Deleted, "kept alive by:", why)

	// The database itself refuses to delete a block a row references, whoever asks.
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM blocks WHERE id = ?`, "genesis")
		return err
	})
	fmt.Println("delete refused:", errors.Is(err, refset.ErrReferenced))
	return nil
}
