package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// Values are anyone's to write: a holder named by a program's user, an object ID from
// outside. The text output prints each on its line and in its column, escaped where
// it has characters that do not print, so that none forges a line of the report,
// shifts its columns or sends the operator's terminal an escape sequence (one that
// erases the lines above it, say). --json is left as it was: JSON escapes them.
func TestHostileValuesInText(t *testing.T) {
	const (
		// An object ID and a holder that, printed raw, rewrite the report.
		hostileID     = "n\r\x1b[2Kforged"
		hostileHolder = "evil\n0 holds in nowhere\t\x1b[1A\x1b[2K"
		leakedID      = "leak\nnotes: 0 leaked, 0 dangling"
	)
	bin := buildCLI(t)
	for _, b := range backends()[:2] { // SQLite, PostgreSQL
		t.Run(b.Name, func(t *testing.T) {
			db, dbArgs := b.open(t)
			ctx := t.Context()
			notesSet(t, db)
			_, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes"})
			require.NoError(t, err)
			require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				for _, q := range []struct {
					sql  string
					args []any
				}{
					{`INSERT INTO notes (id) VALUES (?), (?)`, []any{hostileID, leakedID}},
					{`INSERT INTO notes_holds (holder, object_id) VALUES (?, ?)`, []any{hostileHolder, hostileID}},
					{`DELETE FROM notes_review`, nil}, // leakedID leaks
				} {
					if _, err := tx.ExecContext(ctx, db.Driver().Rebind(q.sql), q.args...); err != nil {
						return err
					}
				}
				return nil
			}))

			for _, c := range []struct {
				args  []string
				code  int
				lines int      // lines printed
				shown []string // what stdout shows, escaped
			}{
				{[]string{"holds", "ls", "--table", "notes"}, exitOK, 3, []string{strconv.Quote(hostileID), strconv.Quote(hostileHolder), "1 holds in notes_holds"}},
				{[]string{"holds", "ls", "--table", "notes", "--holder", hostileHolder}, exitOK, 3, []string{strconv.Quote(hostileHolder)}},
				{[]string{"why", "--table", "notes", "--", hostileID}, exitOK, 1, []string{`\n0 holds in nowhere\t\x1b[1A`}},
				{[]string{"why", "--table", "notes", "--", leakedID}, exitOK, 1, []string{strconv.Quote(leakedID) + ": nothing references it"}},
				{[]string{"check", "--table", "notes"}, exitFindings, 3, []string{"notes: 1 leaked, 0 dangling\n", strconv.Quote("leaked '" + leakedID + "'")}},
			} {
				// The database's flags before "--", after which all is the ID.
				at := len(c.args)
				for i, a := range c.args {
					if a == "--" {
						at = i
					}
				}
				args := append(append(append([]string{}, c.args[:at]...), dbArgs...), c.args[at:]...)
				stdout, stderr, code := runCLI(t, bin, args...)
				require.Equal(t, c.code, code, "%q\nstdout:\n%s\nstderr:\n%s", c.args, stdout, stderr)
				require.Equal(t, c.lines, strings.Count(stdout, "\n"), "%q: lines of\n%s", c.args, stdout)
				require.Equal(t, -1, strings.IndexFunc(stdout, func(r rune) bool { return r < ' ' && r != '\n' || r == 0x7f }),
					"%q: a control character in %q", c.args, stdout)
				for _, s := range c.shown {
					require.Contains(t, stdout, s, c.args)
				}
			}
		})
	}
}

// refset ui says on stderr what goes wrong while it serves: a page that failed on the
// database's side (500) and the sampler's failures, which the operator who runs it
// (in a terminal, under a service manager) would otherwise never hear of.
func TestUILogsFailures(t *testing.T) {
	bin := buildCLI(t)
	b := backends()[0] // SQLite
	db, dbArgs := b.open(t)
	prepare(t, b, db)
	base, cmd, stderr := startUIProcess(t, bin, append([]string{"ui", "--addr", "127.0.0.1:0", "--sample-every", "1s"}, dbArgs...)...)
	// A table of a set gone from under the console: every page that counts fails.
	require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `DROP TABLE tokens_holds`)
		return err
	}))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(body))
	time.Sleep(2500 * time.Millisecond) // a sample or two fail
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	_ = cmd.Wait() // stderr is the process's until it ends
	logged := stderr.String()
	for _, want := range []string{`level=ERROR msg="refset console: page failed"`, `level=WARN msg="refset console: sampling failed"`, "tokens_holds"} {
		require.Contains(t, logged, want)
	}
}

// notesSet makes a table notes (id TEXT) in db and the set on it.
func notesSet(t *testing.T, db refset.Database) *refset.RefSet[object, string] {
	t.Helper()
	require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE notes (id TEXT PRIMARY KEY)`)
		return err
	}))
	s, err := store.NewStore[object, string](t.Context(), db, store.Config{Table: "notes"})
	require.NoError(t, err)
	return refset.New(s)
}

// A --holder given empty is refused (exit 2), changing nothing: left out, the flag
// means every holder, and a script's `--holder "$HOLDER"` with the variable unset
// must not delete every holder's expired holds.
func TestHostileEmptyHolder(t *testing.T) {
	bin := buildCLI(t)
	for _, b := range backends()[:2] { // SQLite, PostgreSQL
		t.Run(b.Name, func(t *testing.T) {
			db, dbArgs := b.open(t)
			ctx := t.Context()
			set := notesSet(t, db)
			_, err := set.Add(ctx, object{Key: "n1"}, set.Hold("brief", time.Millisecond))
			require.NoError(t, err)
			time.Sleep(5 * time.Millisecond)

			for _, args := range [][]string{
				{"holds", "rm", "--expired", "--holder", "", "--table", "notes"},
				{"holds", "rm", "--expired", "--holder=", "--table", "notes"},
				{"holds", "ls", "--holder", "", "--table", "notes"},
			} {
				stdout, stderr, code := runCLI(t, bin, append(args, dbArgs...)...)
				require.Equal(t, exitError, code, "%q\nstdout:\n%s\nstderr:\n%s", args, stdout, stderr)
				require.Contains(t, stderr, "--holder is empty")
			}
			stdout, stderr, code := runCLI(t, bin, append([]string{"holds", "ls", "--expired", "--table", "notes"}, dbArgs...)...)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, "1 holds in ", "the expired hold is still there")
		})
	}
}
