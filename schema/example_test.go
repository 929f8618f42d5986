package schema_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing/fstest"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// exampleDB opens a new SQLite database in a temporary directory; done removes it.
func exampleDB(ctx context.Context, opts sqlite.Options) (db *sqlite.DB, done func(), err error) {
	dir, err := os.MkdirTemp("", "refset-example")
	if err != nil {
		return nil, nil, err
	}
	db, err = sqlite.Open(ctx, filepath.Join(dir, "app.db"), opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }, nil
}

// A program migrates at start-up: its own tables (a folder of NNNN_name.sql files,
// usually an embed.FS), then the tables of the set on them, and logs what ran. Run
// again, it finds nothing to do.
func Example() {
	ctx := context.Background()
	db, done, err := exampleDB(ctx, sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	files := fstest.MapFS{ // in a program: //go:embed sql, then fs.Sub
		"0001_notes.sql":      {Data: []byte(`CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)},
		"0001_notes.down.sql": {Data: []byte(`DROP TABLE notes`)},
	}
	m, err := schema.New(db, schema.Config{
		Components: []schema.Component{{Name: "notes-app", Migrations: files}},
		Sets:       []schema.Set{{Table: "notes"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		res, err := m.Migrate(ctx, schema.DirectionUp, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("migrated: %q\n", res)
		for _, s := range res.Steps {
			for _, v := range s.Versions {
				fmt.Println(" ", s.Component, v.Name)
			}
		}
	}
	// Output:
	// migrated: "core 0 -> 2, notes-app 0 -> 1, set:notes 0 -> 3"
	//   core 0001_sets.sql
	//   core 0002_collected.sql
	//   notes-app 0001_notes.sql
	//   set:notes 0001_holds.sql
	//   set:notes 0002_review.sql
	//   set:notes 0003_index_names.sql
	// migrated: ""
}

// Where a DBA owns the schema, the program opens its database with
// ExternalMigrations: NewStore runs no DDL and fails with refset.ErrSchema until the
// DBA has run the script of a dry run (or of the error's plan), which changes
// nothing; then the set works.
func ExampleMigrator_Migrate_dryRun() {
	ctx := context.Background()
	db, done, err := exampleDB(ctx, sqlite.Options{Options: store.Options{ExternalMigrations: true}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	db.Writer().MustExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY)`) // the DBA's own migrations

	m, err := schema.New(db, schema.Config{Sets: []schema.Set{{Table: "items"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, err := m.Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{DryRun: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pending:", plan)
	_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	fmt.Println("before the DBA, refset.ErrSchema:", errors.Is(err, refset.ErrSchema))

	db.Writer().MustExecContext(ctx, plan.SQL()) // what the DBA runs

	_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	fmt.Println("after the DBA:", err, m.Validate(ctx))
	// Output:
	// pending: core 0 -> 2, set:items 0 -> 3
	// before the DBA, refset.ErrSchema: true
	// after the DBA: <nil> <nil>
}

type item struct {
	Key string `db:"id"`
}

func (i item) ID() string { return i.Key }
