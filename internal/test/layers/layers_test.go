package layers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/refsetdb/refset"

// pkg is what `go list -json` says of a package that the layers care about.
type pkg struct {
	ImportPath  string
	Imports     []string
	TestImports []string
}

func TestLayers(t *testing.T) {
	root := moduleRoot(t)
	picture, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	require.NoError(t, err)
	pkgs := listPackages(t, root)

	known := make(map[string]bool, len(pkgs))
	for _, p := range pkgs {
		known[p.ImportPath] = true
	}
	rows, err := parseLayers(picture, known)
	require.NoError(t, err)

	for _, p := range pkgs {
		row, drawn := rows[p.ImportPath]
		if !drawn {
			t.Errorf("%s is not drawn in ARCHITECTURE.md's picture: place it in the row of what it is", short(p.ImportPath))
			continue
		}
		check := func(imports []string, what string) {
			for _, q := range imports {
				qrow, ok := rows[q]
				if !ok || qrow > row {
					continue // outside the module, or drawn below: as it should be
				}
				t.Errorf("%s%s imports %s, drawn in row %d, not below its own row %d",
					short(p.ImportPath), what, short(q), qrow, row)
			}
		}
		check(p.Imports, "")
		check(p.TestImports, " (its in-package tests)")
	}
}

// TestParseLayers checks the parser on a picture small enough to read.
func TestParseLayers(t *testing.T) {
	known := map[string]bool{module + "/a": true, module + "/b/c": true, module + "/d": true}
	tests := []struct {
		name    string
		picture string
		want    map[string]int
		wantErr string
	}{
		{
			name:    "rows top to bottom",
			picture: "## Layers\n```\n top   a/  (uses b/c/)\n        │\n mid   b/c/   x/y/\n        │\n low   d/\n```\n",
			want:    map[string]int{module + "/a": 0, module + "/b/c": 1, module + "/d": 2},
		},
		{
			name:    "drawn twice",
			picture: "## Layers\n```\n a/\n │\n a/\n```\n",
			wantErr: "a is drawn in rows 0 and 1",
		},
		{
			name:    "no picture",
			picture: "## Layers\nnothing here\n",
			wantErr: "no picture",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLayers([]byte(tt.picture), known)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// parseLayers reads the first fenced block after "## Layers": rows are separated by lines
// holding only "│"; a token ending in "/" that names a package of the module places that
// package in the row, unless it stands inside parentheses: a comment, as in "(uses b/c/)".
// A package drawn in two rows is an error. The result maps import paths to row numbers, 0 at the top.
func parseLayers(picture []byte, known map[string]bool) (map[string]int, error) {
	_, after, ok := bytes.Cut(picture, []byte("## Layers"))
	if !ok {
		return nil, errors.New("ARCHITECTURE.md has no \"## Layers\" section")
	}
	_, block, ok := bytes.Cut(after, []byte("```\n"))
	if !ok {
		return nil, errors.New("no picture (a ``` block) under \"## Layers\"")
	}
	block, _, _ = bytes.Cut(block, []byte("```"))

	rows := make(map[string]int)
	row := 0
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "│" {
			row++
			continue
		}
		for _, word := range strings.Fields(line) {
			word = strings.Trim(word, "(),;")
			if !strings.HasSuffix(word, "/") {
				continue
			}
			path := module + "/" + strings.TrimSuffix(word, "/")
			if !known[path] || isComment(line, word) {
				continue
			}
			if was, seen := rows[path]; seen && was != row {
				return nil, fmt.Errorf("%s is drawn in rows %d and %d", short(path), was, row)
			}
			rows[path] = row
		}
	}
	return rows, sc.Err()
}

// isComment reports whether word stands inside parentheses on line: a package named in a
// comment ("(uses b/c/)") is not drawn there.
func isComment(line, word string) bool {
	at := strings.Index(line, word)
	return strings.Count(line[:at], "(") > strings.Count(line[:at], ")")
}

func short(path string) string { return strings.TrimPrefix(path, module+"/") }

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// listPackages runs `go list -json ./...` at the module's root: every package of the
// module with its imports and its in-package tests' imports.
func listPackages(t *testing.T, root string) []pkg {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-json=ImportPath,Imports,TestImports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}
