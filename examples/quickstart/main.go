// Command quickstart runs README.md's quick start (quickstart.go): it stores a block
// held as pending, hands it from the completer to the chain controller in one
// transaction, reads it back, asks clean-up what keeps it alive, and shows that the
// database refuses to delete it.
//
// One flag picks the database, and one code path runs on either (store.Open tells
// them apart by the DSN's form):
//
//	go run ./examples/quickstart                  # a SQLite file in a temporary directory
//	go run ./examples/quickstart -db chain.db     # a new SQLite file of your choice
//	go run ./examples/quickstart -db 'postgres://user@localhost/db?sslmode=disable'
//
// On PostgreSQL it makes a schema of its own, which it drops at the end, so that it
// never touches the tables already there.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/refsetdb/refset/examples/internal/exampledb"
)

func main() {
	dsn := flag.String("db", "", "the database: a new SQLite file's path or file: URL (default: a new file in a temporary directory), "+
		"or a PostgreSQL postgres:// URL or key=value DSN of a direct connection (the example names its new schema in the DSN's search_path, "+
		"which PgBouncer refuses; its tables are created in that schema, dropped at the end)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "%s\n\nUsage: %s [flags]\n", `quickstart runs README.md's quick start: a block is stored held as pending, handed
from the completer to the chain controller in one transaction, read back, and kept
alive by the controller's row, which the database will not let it lose.`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(context.Background(), *dsn); err != nil {
		log.SetFlags(0)
		log.Fatal("quickstart: ", err)
	}
}

// run runs the quick start on a new database made from dsn (the -db flag).
func run(ctx context.Context, dsn string) error {
	demo, err := exampledb.New(ctx, "quickstart", dsn)
	if err != nil {
		return err
	}
	defer demo.Close()
	return quickStart(ctx, demo.DSN())
}
