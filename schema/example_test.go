package schema_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/sqlite"
)

// A DBA's tool reads what a database lacks and writes the script; the application,
// opened with ExternalMigrations, then finds everything in place.
func ExamplePending() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "refset-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	db.Writer().MustExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY)`)
	set := schema.Set{Table: sqlident.Ident{Name: "items"}, IDColumn: "id", IDType: "TEXT",
		Holds: sqlident.Ident{Name: "items_holds"}, Queue: sqlident.Ident{Name: "items_review"}}

	plan, err := schema.Pending(ctx, db.Reader(), sqlite.SchemaSQL(), set)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pending:", plan)
	db.Writer().MustExecContext(ctx, plan.SQL()) // what the DBA runs

	done, err := schema.Apply(ctx, db, sqlite.SchemaSQL(), set)
	fmt.Println("applied after the DBA:", len(done), err)
	// Output:
	// pending: core 0 -> 1, set:items 0 -> 2
	// applied after the DBA: 0 <nil>
}
