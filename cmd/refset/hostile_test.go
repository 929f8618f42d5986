package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
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
	onSQLiteAndPostgres(t, func(t *testing.T, b backend, bin string, db refset.Database, dbArgs []string) {
		installedNotes(t, db,
			stmt{`INSERT INTO notes (id) VALUES (?), (?)`, []any{hostileID, leakedID}},
			stmt{`INSERT INTO notes_holds (holder, object_id) VALUES (?, ?)`, []any{hostileHolder, hostileID}},
			stmt{`DELETE FROM notes_review`, nil}) // leakedID leaks

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

// onSQLiteAndPostgres runs fn as a subtest on SQLite and on PostgreSQL, each with a
// database of its own, and the command built once.
func onSQLiteAndPostgres(t *testing.T, fn func(t *testing.T, b backend, bin string, db refset.Database, dbArgs []string)) {
	t.Helper()
	bin := buildCLI(t)
	for _, b := range backends()[:2] {
		t.Run(b.Name, func(t *testing.T) {
			db, dbArgs := b.open(t)
			fn(t, b, bin, db, dbArgs)
		})
	}
}

// stmt is a statement with its arguments, written with ? placeholders.
type stmt struct {
	sql  string
	args []any
}

// installedNotes makes the set notes (notesSet) with clean-up installed, then runs
// stmts in one unit of work.
func installedNotes(t *testing.T, db refset.Database, stmts ...stmt) {
	t.Helper()
	ctx := t.Context()
	notesSet(t, db)
	_, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes"})
	require.NoError(t, err)
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, db.Driver().Rebind(q.sql), q.args...); err != nil {
				return err
			}
		}
		return nil
	}))
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
	onSQLiteAndPostgres(t, func(t *testing.T, b backend, bin string, db refset.Database, dbArgs []string) {
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

// Values not valid UTF-8, which SQLite stores as written, and values that begin with a
// quote: every --json document is valid JSON (and UTF-8) whose strings give back what
// is stored, byte for byte, by the rule the text output follows (a value that is not
// valid UTF-8 or begins with a quote is printed quoted with Go's escapes; decoded by
// strconv.Unquote), and the text output prints no control byte.
func TestHostileBytesInJSON(t *testing.T) {
	const (
		badHolder = "ev\xffil\x01\n"
		badID     = "n\xfe\x1b[2K"
		quotedID  = `"q"`
	)
	onSQLiteAndPostgres(t, func(t *testing.T, b backend, bin string, db refset.Database, dbArgs []string) {
		holder, id := badHolder, badID
		if b.Name != testdb.SQLite.Name { // PostgreSQL stores valid UTF-8 alone
			holder, id = "ev\u00ffil\n", "n\x1b[2K"
		}
		installedNotes(t, db,
			stmt{`INSERT INTO notes (id) VALUES (?), (?), (?), (?)`, []any{id, quotedID, id + "!", quotedID + "!"}},
			stmt{`INSERT INTO notes_holds (holder, object_id) VALUES (?, ?), (?, ?)`, []any{holder, id, quotedID, quotedID}},
			stmt{`DELETE FROM notes_review`, nil}) // the two not held leak
		// The documents as a reader who knows the rule alone decodes them.
		type (
			hold struct {
				Holder   string
				ObjectID string `json:"object_id"`
			}
			holds   struct{ Holds []hold }
			holderJ struct{ Key string }
			whyJ    struct {
				ID      string
				Holders []holderJ
			}
			checkJ struct{ Samples []string }
		)
		// unquote is the inverse of the rule.
		unquote := func(s string) string {
			if strings.HasPrefix(s, `"`) {
				u, err := strconv.Unquote(s)
				require.NoError(t, err, s)
				return u
			}
			return s
		}
		for _, c := range []struct {
			args  []string
			check func(t *testing.T, out []byte)
		}{
			{[]string{"holds", "ls", "--json", "--table", "notes"}, func(t *testing.T, out []byte) {
				var doc holds
				require.NoError(t, json.Unmarshal(out, &doc))
				require.Len(t, doc.Holds, 2)
				got := map[string]string{}
				for _, h := range doc.Holds {
					got[unquote(h.Holder)] = unquote(h.ObjectID)
				}
				var typed holdsJSON // the command's own type decodes it alike
				require.NoError(t, json.Unmarshal(out, &typed))
				for _, h := range typed.Holds {
					require.Equal(t, got[string(h.Holder)], string(h.ObjectID))
				}
				require.Equal(t, map[string]string{holder: id, quotedID: quotedID}, got)
			}},
			{[]string{"holds", "ls", "--json", "--table", "notes", "--holder", holder}, func(t *testing.T, out []byte) {
				var doc holds
				require.NoError(t, json.Unmarshal(out, &doc))
				require.Len(t, doc.Holds, 1)
				require.Equal(t, holder, unquote(doc.Holds[0].Holder))
			}},
			{[]string{"why", "--json", "--table", "notes", "--", id}, func(t *testing.T, out []byte) {
				var doc whyJ
				require.NoError(t, json.Unmarshal(out, &doc))
				require.Equal(t, id, unquote(doc.ID))
				require.Len(t, doc.Holders, 1)
				require.Contains(t, unquote(doc.Holders[0].Key), holder)
			}},
			{[]string{"check", "--json", "--table", "notes"}, func(t *testing.T, out []byte) {
				var doc checkJ
				require.NoError(t, json.Unmarshal(out, &doc))
				require.Len(t, doc.Samples, 2)
				require.ElementsMatch(t, []string{"leaked '" + id + "!'", "leaked '" + quotedID + "!'"},
					[]string{unquote(doc.Samples[0]), unquote(doc.Samples[1])})
			}},
			{[]string{"status", "--json"}, nil},
			{[]string{"migrate", "status", "--json"}, nil},
			{[]string{"holds", "ls", "--table", "notes"}, nil},
			{[]string{"why", "--table", "notes", "--", id}, nil},
			{[]string{"check", "--table", "notes"}, nil},
		} {
			at := slices.Index(c.args, "--")
			if at < 0 {
				at = len(c.args)
			}
			args := append(append(append([]string{}, c.args[:at]...), dbArgs...), c.args[at:]...)
			stdout, stderr, code := runCLI(t, bin, args...)
			require.Contains(t, []int{exitOK, exitFindings}, code, "%q\nstdout:\n%s\nstderr:\n%s", c.args, stdout, stderr)
			require.True(t, utf8.ValidString(stdout), "%q: not UTF-8: %q", c.args, stdout)
			require.Equal(t, -1, strings.IndexFunc(stdout, func(r rune) bool { return r < ' ' && r != '\n' || r == 0x7f }),
				"%q: a control character in %q", c.args, stdout)
			if slices.Contains(c.args, "--json") {
				require.True(t, json.Valid([]byte(stdout)), "%q: not JSON: %s", c.args, stdout)
			}
			if c.check != nil {
				c.check(t, []byte(stdout))
			}
		}
	})
}

// Names in the database's catalogs are anyone's to choose too: a table or column
// named with a terminal's escape sequence, which status names in its warning and an
// error names on stderr, reaches no terminal raw.
func TestHostileCatalogNames(t *testing.T) {
	onSQLiteAndPostgres(t, func(t *testing.T, b backend, bin string, db refset.Database, dbArgs []string) {
		ctx := t.Context()
		installedNotes(t, db)
		for _, c := range []struct {
			ddl   string
			args  []string
			code  int
			shown string // in stdout or stderr, escaped
		}{
			{"CREATE TABLE \"ev\x1b[2Jil\" (k TEXT PRIMARY KEY, \"c\x07ol\" TEXT REFERENCES notes (id) ON DELETE CASCADE)",
				[]string{"status"}, exitOK, `\x1b[2Jil`},
			// A component's version recorded by hand.
			{"INSERT INTO refset_schema_version (component, version) VALUES ('comp\x1b[2J', 1)",
				[]string{"status"}, exitOK, `"comp\x1b[2J"`},
			// A holder table refset cannot name in SQL: the reports refuse the set.
			{"CREATE TABLE \"ho\x1b[1Ald\" (k TEXT PRIMARY KEY, n TEXT REFERENCES notes (id))",
				[]string{"check", "--table", "notes"}, exitError, `\x1b[1Ald`},
		} {
			require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, c.ddl)
				return err
			}))
			stdout, stderr, code := runCLI(t, bin, append(c.args, dbArgs...)...)
			require.Equal(t, c.code, code, "%q\nstdout:\n%s\nstderr:\n%s", c.args, stdout, stderr)
			for _, out := range []string{stdout, stderr} {
				i := strings.IndexFunc(out, func(r rune) bool { return r < ' ' && r != '\n' || r == 0x7f })
				require.Equal(t, -1, i, "%q: a control character in %q", c.args, out)
			}
			require.Contains(t, stdout+stderr, c.shown, c.args)
		}
	})
}
