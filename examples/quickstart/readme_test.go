package main_test

import (
	"bufio"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// README quick start: begin
import (
	"context"
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
	return nil
}

// README quick start: end

// The quick start runs as README.md shows it.
func Example_quickStart() {
	dir, err := os.MkdirTemp("", "refset-quickstart")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := quickStart(context.Background(), filepath.Join(dir, "chain.db")); err != nil {
		log.Fatal(err)
	}
	// Output:
	// head: genesis at height 0
	// collected: 0 kept alive by: [chain_heads.block_id (block_id='genesis')]
}

// The README's quick start runs as it stands on both databases, named in each form
// store.Open takes (lib/pq dials both PostgreSQL forms), and prints the same on each
// (PostgreSQL names the holder's table with its schema).
func TestQuickStartOnBothDatabases(t *testing.T) {
	sqlitePath := func(tb testing.TB) (string, string) { return filepath.Join(tb.TempDir(), "chain.db"), "" }
	pg := func(form int) func(testing.TB) (string, string) {
		return func(tb testing.TB) (string, string) {
			dsn, schema := pgtest.New(tb)
			asURL, keyValue := pgtest.Forms(tb, dsn)
			return []string{asURL, keyValue}[form], schema + "."
		}
	}
	for _, tc := range []struct {
		name string
		dsn  func(testing.TB) (dsn, schema string)
	}{
		{"sqlite/path", sqlitePath},
		{"sqlite/file URL", func(tb testing.TB) (string, string) {
			path, _ := sqlitePath(tb)
			return "file:" + filepath.ToSlash(path), ""
		}},
		{"postgres/URL", pg(0)},
		{"postgres/key=value", pg(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, schema := tc.dsn(t)
			out := stdout(t, func() { require.NoError(t, quickStart(t.Context(), dsn)) })
			assert.Equal(t, "head: genesis at height 0\ncollected: 0 kept alive by: ["+schema+"chain_heads.block_id (block_id='genesis')]\n", out)
		})
	}
}

// stdout is what fn printed to os.Stdout.
func stdout(t *testing.T, fn func()) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	require.NoError(t, err)
	defer f.Close()
	saved := os.Stdout
	os.Stdout = f
	defer func() { os.Stdout = saved }()
	fn()
	out, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	return string(out)
}

// README.md's "Quick start in code" is this file's code between the markers, line for
// line, so the README shows code that compiles and runs (Example_quickStart).
func TestREADMEQuickStart(t *testing.T) {
	readme := between(t, "../../README.md", "## Quick start in code", "```go", "```")
	code := between(t, "readme_test.go", "", "// README quick start: begin", "// README quick start: end")
	assert.Equal(t, strings.TrimSpace(code), strings.TrimSpace(readme),
		"README.md's quick start and examples/quickstart/readme_test.go differ: copy the code between the markers into the README")
}

// between returns the lines of file after the line begin (the first one after the
// line heading, if heading is not empty) up to the line end.
func between(t *testing.T, file, heading, begin, end string) string {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var b strings.Builder
	state := 0 // 0: looking for heading, 1: for begin, 2: inside, 3: done
	if heading == "" {
		state = 1
	}
	sc := bufio.NewScanner(f)
	for state < 3 && sc.Scan() {
		line := sc.Text()
		switch {
		case state == 0 && line == heading:
			state = 1
		case state == 1 && line == begin:
			state = 2
		case state == 2 && line == end:
			state = 3
		case state == 2:
			b.WriteString(line + "\n")
		}
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 3, state, "%s: no block from %q to %q", file, begin, end)
	return b.String()
}
