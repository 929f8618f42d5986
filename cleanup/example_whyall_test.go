package cleanup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

type item struct {
	Key string `db:"id"`
}

func (i item) ID() string { return i.Key }

// WhyAll lists every row that keeps an object alive, where Why stops at a few per
// table: here seven holders of one item.
func ExampleCollector_WhyAll() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "refset-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Writer().ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY); INSERT INTO items (id) VALUES ('a')`); err != nil {
		panic(err)
	}
	if _, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"}); err != nil {
		panic(err)
	}
	for i := range 7 {
		if _, err := db.Writer().ExecContext(ctx, `INSERT INTO items_holds (holder, object_id) VALUES (?, 'a')`, fmt.Sprint("reader", i)); err != nil {
			panic(err)
		}
	}
	collector, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items"})
	if err != nil {
		panic(err)
	}
	some, err := collector.Why(ctx, "a")
	if err != nil {
		panic(err)
	}
	all, err := collector.WhyAll(ctx, "a")
	if err != nil {
		panic(err)
	}
	fmt.Println("Why:", len(some), "WhyAll:", len(all))
	// Output:
	// Why: 5 WhyAll: 7
}
