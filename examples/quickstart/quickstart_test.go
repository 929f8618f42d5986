package main

import (
	"bufio"
	"context"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	// delete refused: true
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
			assert.Equal(t, "head: genesis at height 0\ncollected: 0 kept alive by: ["+schema+"chain_heads.block_id (block_id='genesis')]\n"+
				"delete refused: true\n", out)
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

// The program (go run ./examples/quickstart [-db DSN]) runs the quick start on a new
// database of the -db flag's (exampledb's tests show it leaves nothing behind).
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   func(testing.TB) string // the -db flag
	}{
		{"sqlite/default", func(testing.TB) string { return "" }},
		{"sqlite/path", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "chain.db") }},
		{"postgres", pgtest.DSN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.db(t)
			out := stdout(t, func() { require.NoError(t, run(t.Context(), db)) })
			assert.Contains(t, out, "head: genesis at height 0\n")
			assert.Contains(t, out, "delete refused: true\n")
		})
	}
}

// README.md's "Quick start in code" is quickstart.go from its import block on, line
// for line, so the README shows the code that compiles and runs.
func TestREADMEQuickStart(t *testing.T) {
	readme := between(t, "../../README.md", "## Quick start in code", "```go", "```")
	file, err := os.ReadFile("quickstart.go")
	require.NoError(t, err)
	_, code, ok := strings.Cut(string(file), "\npackage main\n")
	require.True(t, ok, "quickstart.go has no package clause")
	assert.Equal(t, strings.TrimSpace(code), strings.TrimSpace(readme),
		"README.md's quick start and examples/quickstart/quickstart.go differ: copy the file from its import block on into the README")
}

// between returns the lines of file after the line begin, the first one after the
// line heading, up to the line end.
func between(t *testing.T, file, heading, begin, end string) string {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var b strings.Builder
	state := 0 // 0: looking for heading, 1: for begin, 2: inside, 3: done
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
