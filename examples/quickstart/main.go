// Command quickstart shows refset's core on a real database: blocks arrive at a
// completer, which holds each one as pending in the same transaction as the block;
// it hands every block to a chain controller, and each hand-over moves the block's
// reference from one component's table to the other's in one transaction. At the
// end it checks the invariants and shows that the database itself refuses to delete
// a referenced block.
//
// One flag picks the database, and one code path runs on either (store.Open tells
// them apart by the DSN's form):
//
//	go run ./examples/quickstart                  # a SQLite file in a temporary directory
//	go run ./examples/quickstart -db chain.db     # a SQLite file of your choice
//	go run ./examples/quickstart -db 'postgres://user@localhost/db?sslmode=disable'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/refsetdb/refset/examples/internal/exampledb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// Block is a block of a chain; its ID is its hash.
type Block struct {
	Hash    string  `db:"id"`
	Prev    *string `db:"prev"`
	Height  int64   `db:"height"`
	Payload string  `db:"payload"`
}

func (b Block) ID() string { return b.Hash }

func main() {
	dsn := flag.String("db", "", "the database: a SQLite file path or file: URL (default: a new file in a temporary directory), "+
		"or a PostgreSQL postgres:// URL or key=value DSN of a direct connection (the example names its new schema in the DSN's search_path, "+
		"which PgBouncer refuses; its tables are created in that schema, dropped at the end)")
	n := flag.Int("blocks", 1000, "number of blocks")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "%s\n\nUsage: %s [flags]\n", `quickstart shows refset's core: a completer holds each arriving block as pending
and hands it to a chain controller, each hand-over moving the reference between the two
components' tables in one transaction. At the end it checks the invariants and shows
that the database refuses to delete a referenced block.`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(context.Background(), *dsn, *n); err != nil {
		log.SetFlags(0)
		log.Fatal("quickstart: ", err)
	}
}

func run(ctx context.Context, dsn string, n int) error {
	start := time.Now()
	demo, err := exampledb.New(ctx, "quickstart", dsn)
	if err != nil {
		return err
	}
	defer demo.Close()
	db, blocks, err := open(ctx, demo.DSN())
	if err != nil {
		return err
	}
	defer db.Close()

	// Exec commands write the database's own placeholders for ?: the block's ID is
	// the first argument.
	hold := refset.Exec[string](`INSERT INTO pending_blocks (block_id) VALUES (?)`, 1)
	release := refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = ?`, 1)
	acquire := refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1)

	// The completer receives blocks; each is stored and held as pending at once.
	var prev *string
	tokens := make([]*refset.RefToken[string], 0, n)
	for i := range n {
		b := Block{Hash: fmt.Sprintf("block-%06d", i), Prev: prev, Height: int64(i), Payload: "txns"}
		tok, err := blocks.Add(ctx, b, hold)
		if err != nil {
			return err
		}
		tokens = append(tokens, tok)
		prev = &b.Hash
	}

	// It hands each block to the controller; the controller keeps only the newest head,
	// so the hand-over of block i moves its one head row from block i-1 to block i, in
	// one transaction with the release. The chain's own predecessor links keep history
	// alive.
	var head *refset.RefToken[string]
	for _, tok := range tokens {
		rel, err := tok.Release(release)
		if err != nil {
			return err
		}
		take := acquire
		if head != nil {
			// Exec takes arguments after the ID: here the head it replaces.
			take = refset.Exec[string](`UPDATE chain_heads SET block_id = ? WHERE block_id = ?`, 1, head.ID())
		}
		acq, err := rel.Acquire(take)
		if err != nil {
			return err
		}
		if head, err = acq.Complete(ctx); err != nil {
			return err
		}
	}

	lease, err := blocks.Get(ctx, head)
	if err != nil {
		return err
	}
	var stored, pending, heads int
	err = db.Reader().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM blocks), (SELECT COUNT(*) FROM pending_blocks),
		(SELECT COUNT(*) FROM chain_heads)`).Scan(&stored, &pending, &heads)
	if err != nil {
		return err
	}

	// The database, not the program, guards the chain: deleting the genesis block,
	// which its successor references, is refused.
	delErr := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		// The Tx writes the database's placeholders for ?, as Exec does.
		_, err := tx.ExecContext(ctx, `DELETE FROM blocks WHERE id = ?`, "block-000000")
		return err
	})
	refused := errors.Is(delErr, refset.ErrReferenced)

	fmt.Printf("%-28s %d\n", "blocks received", n)
	fmt.Printf("%-28s %d\n", "blocks stored", stored)
	fmt.Printf("%-28s %d\n", "pending after hand-overs", pending)
	fmt.Printf("%-28s %d\n", "chain heads", heads)
	fmt.Printf("%-28s %s (height %d)\n", "head", lease.Value().Hash, lease.Value().Height)
	fmt.Printf("%-28s %v\n", "delete of genesis refused", refused)
	fmt.Printf("%-28s %v\n", "elapsed", time.Since(start).Round(time.Millisecond))

	if stored != n || pending != 0 || heads != 1 || !refused {
		return fmt.Errorf("invariant failed: stored=%d pending=%d heads=%d refused=%v (%v)", stored, pending, heads, refused, delErr)
	}
	return nil
}

// schemaSQL is the example's tables, in types both databases read alike.
const schemaSQL = `
CREATE TABLE blocks (
    id      TEXT NOT NULL PRIMARY KEY,
    prev    TEXT REFERENCES blocks (id) ON DELETE RESTRICT,
    height  BIGINT NOT NULL,
    payload TEXT
);
CREATE TABLE pending_blocks (block_id TEXT NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
CREATE TABLE chain_heads    (block_id TEXT NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT)`

// open opens the database dsn names, whichever it is, creates the example's tables
// and returns the set.
func open(ctx context.Context, dsn string) (refset.Database, *refset.RefSet[Block, string], error) {
	db, err := store.Open(ctx, dsn, sqlite.Options{}, postgres.Options{})
	if err != nil {
		return nil, nil, err
	}
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, schemaSQL)
		return err
	})
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("creating the tables: %w", err)
	}
	set, err := store.NewStore[Block, string](ctx, db, store.Config{Table: "blocks"})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, refset.New(set), nil
}
