package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

type Batch struct {
	Signature string `db:"signature"`
	Payload   []byte `db:"payload"`
}

func (b Batch) ID() string { return b.Signature }

// Open a database file, create the object table, and put a set on it. NewStore
// checks the struct against the table and creates the set's holds table.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "refset-sqlite")
	defer os.RemoveAll(dir)

	db, err := sqlite.Open(ctx, filepath.Join(dir, "node.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Writer().ExecContext(ctx, `CREATE TABLE batches (signature TEXT PRIMARY KEY, payload BLOB NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	setStore, err := store.NewStore[Batch, string](ctx, db, store.Config{Table: "batches"})
	if err != nil {
		log.Fatal(err)
	}
	batches := refset.New(setStore)

	// A batch held by the block publisher until it is published.
	tok, err := batches.Add(ctx, Batch{Signature: "b-1", Payload: []byte("txns")}, batches.Hold("publisher", 0))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := batches.Get(ctx, tok)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", lease.Value().Signature, lease.Value().Payload)

	var holder string
	if err := db.Readers().GetContext(ctx, &holder, `SELECT holder FROM batches_holds WHERE object_id = 'b-1'`); err != nil {
		log.Fatal(err)
	}
	fmt.Println("held by", holder)
	// Output:
	// b-1: txns
	// held by publisher
}
