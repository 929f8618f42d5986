package console_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// A program mounts the console under a path of its own server. Its links are
// relative, so it works under any prefix that ends in a slash; with a token, each
// request must carry it.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "console-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Writer().ExecContext(ctx, `CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := store.NewStore[note, string](ctx, db, store.Config{Table: "notes"}); err != nil {
		log.Fatal(err)
	}

	ui, err := console.New(ctx, db, console.Config{Token: "s3cret"})
	if err != nil {
		log.Fatal(err)
	}
	defer ui.Close()
	mux := http.NewServeMux()
	mux.Handle("/refset/", http.StripPrefix("/refset", ui))
	srv := httptest.NewServer(mux) // a program's own http.Server
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/refset/", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// 200 OK
}
