package refset_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// Block is a block of a chain; its ID is its hash.
type Block struct {
	Hash   string  `db:"id"`
	Prev   *string `db:"prev"`
	Height int64   `db:"height"`
}

func (b Block) ID() string { return b.Hash }

// The RFC's tables: blocks chained by a self-reference, the completer's pending
// blocks and the chain controller's heads, each referencing blocks.
const tables = `
CREATE TABLE blocks (
    id     TEXT NOT NULL PRIMARY KEY,
    prev   TEXT REFERENCES blocks (id) ON DELETE RESTRICT,
    height INTEGER NOT NULL
);
CREATE TABLE pending_blocks (block_id TEXT NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
CREATE TABLE chain_heads    (block_id TEXT NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);`

// openBlocks opens a fresh SQLite database in a new directory, with the RFC's tables
// and a set of blocks on it; done closes the database and removes the directory.
func openBlocks(ctx context.Context) (db *sqlite.DB, blocks *refset.RefSet[Block, string], done func()) {
	dir, err := os.MkdirTemp("", "refset-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sqlite.Open(ctx, filepath.Join(dir, "chain.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Writer().ExecContext(ctx, tables); err != nil {
		log.Fatal(err)
	}
	setStore, err := store.NewStore[Block, string](ctx, db, store.Config{Table: "blocks"})
	if err != nil {
		log.Fatal(err)
	}
	return db, refset.New(setStore), func() { db.Close(); os.RemoveAll(dir) }
}

// A block arrives at the completer, which records it as pending in the same
// transaction as the block itself; then it hands the block to the chain controller,
// which records it as a head. Both rows change in one transaction.
func Example() {
	ctx := context.Background()
	db, blocks, done := openBlocks(ctx)
	defer done()

	pending := refset.Exec[string](`INSERT INTO pending_blocks (block_id) VALUES (?)`, 1)
	tok, err := blocks.Add(ctx, Block{Hash: "genesis"}, pending)
	if err != nil {
		log.Fatal(err)
	}

	// The completer lets go of the block...
	rel, err := tok.Release(refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = ?`, 1))
	if err != nil {
		log.Fatal(err)
	}
	// ...the controller takes it...
	acq, err := rel.Acquire(refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
	if err != nil {
		log.Fatal(err)
	}
	// ...and both happen at once.
	head, err := acq.Complete(ctx)
	if err != nil {
		log.Fatal(err)
	}

	lease, err := blocks.Get(ctx, head)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("head:", lease.Value().Hash, "at height", lease.Value().Height)

	// The database refuses to delete a block that is referenced.
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM blocks WHERE id = 'genesis'`)
		return err
	})
	fmt.Println("delete refused:", errors.Is(err, refset.ErrReferenced))

	// A token is single-use.
	_, err = acq.Complete(ctx)
	fmt.Println("second complete:", errors.Is(err, refset.ErrTokenConsumed))
	// Output:
	// head: genesis at height 0
	// delete refused: true
	// second complete: true
}

// A unit of work: a block, its hold and the caller's own row commit together, or,
// when anything fails, none of them does.
func ExampleInTx() {
	ctx := context.Background()
	db, blocks, done := openBlocks(ctx)
	defer done()

	err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		if _, err := blocks.AddTx(ctx, tx, Block{Hash: "b1"}, blocks.Hold("validator", 0)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO chain_heads (block_id) VALUES ('missing')`); err != nil {
			return err // the database refuses a reference to a missing block
		}
		return nil
	})
	fmt.Println("refused:", errors.Is(err, refset.ErrNotFound))

	_, err = blocks.Upgrade(ctx, "b1")
	fmt.Println("b1 rolled back:", errors.Is(err, refset.ErrNotFound))
	// Output:
	// refused: true
	// b1 rolled back: true
}

// Leases on one ID share one instance, read from the database once.
func ExampleRefSet_Get() {
	ctx := context.Background()
	_, blocks, done := openBlocks(ctx)
	defer done()

	if _, err := blocks.Add(ctx, Block{Hash: "b1", Height: 7}, blocks.Hold("reader", 0)); err != nil {
		log.Fatal(err)
	}
	a, _ := blocks.Upgrade(ctx, "b1")
	b, _ := blocks.Upgrade(ctx, "b1")
	first, _ := blocks.Get(ctx, a)
	second, _ := blocks.Get(ctx, b)
	fmt.Println("same instance:", first.Value() == second.Value())
	fmt.Println("cached:", blocks.Cached())
	// Output:
	// same instance: true
	// cached: 1
}

// A component's reference is a row of its own table; Exec writes or deletes it in the
// transaction of an Add or a hand-over. With a row count, a command that finds nothing
// to delete stops the hand-over: releasing what one never held is a bug.
func ExampleExec() {
	ctx := context.Background()
	db, blocks, done := openBlocks(ctx)
	defer done()

	hold := refset.Exec[string](`INSERT INTO pending_blocks (block_id) VALUES (?)`, 1)
	release := refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = ?`, 1)
	tok, err := blocks.Add(ctx, Block{Hash: "b1"}, hold)
	if err != nil {
		log.Fatal(err)
	}
	rel, err := tok.Release(release, release) // the second finds no row
	if err != nil {
		log.Fatal(err)
	}
	acq, err := rel.Acquire()
	if err != nil {
		log.Fatal(err)
	}
	_, err = acq.Complete(ctx)
	fmt.Println("released twice:", errors.Is(err, refset.ErrNotFound))

	var pending int
	if err := db.Readers().GetContext(ctx, &pending, `SELECT COUNT(*) FROM pending_blocks`); err != nil {
		log.Fatal(err)
	}
	fmt.Println("still pending:", pending)
	// Output:
	// released twice: true
	// still pending: 1
}
