package sqltext

import (
	"strings"
	"testing"
)

func TestEndingStatement(t *testing.T) {
	tests := []struct {
		query string
		want  string
	}{
		{"COMMIT", "COMMIT"},
		{"commit", "COMMIT"},
		{"  \n\tCommit;", "COMMIT"},
		{"-- done\nCOMMIT", "COMMIT"},
		{"/* done */ COMMIT", "COMMIT"},
		{"/* a /* nested */ comment */ END", "END"},
		{"END TRANSACTION", "END"},
		{"ROLLBACK", "ROLLBACK"},
		{"ROLLBACK WORK", "ROLLBACK"},
		{"ABORT", "ABORT"},
		{"BEGIN", "BEGIN"},
		{"BEGIN IMMEDIATE", "BEGIN"},
		{"START TRANSACTION", "START"},
		{"PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION"},
		{"COMMIT PREPARED 'x'", "COMMIT"},
		{"SELECT 1; COMMIT", "COMMIT"},
		{"INSERT INTO t VALUES ('a;b'); commit; SELECT 1", "COMMIT"},
		{"SELECT 1;;ROLLBACK", "ROLLBACK"},

		{"", ""},
		{";", ""},
		{"SELECT 1", ""},
		{"DELETE FROM pending WHERE id = $1", ""},
		{"ROLLBACK TO SAVEPOINT mine", ""},
		{"rollback to mine", ""},
		{"ROLLBACK TRANSACTION TO SAVEPOINT mine", ""},
		{"SAVEPOINT mine", ""},
		{"RELEASE SAVEPOINT mine", ""},
		{"PREPARE q AS SELECT 1", ""},
		{"SELECT 'x; COMMIT'", ""},
		{`SELECT "a;COMMIT" FROM t`, ""},
		{"SELECT `a;COMMIT` FROM t", ""},
		{"SELECT [a;COMMIT] FROM t", ""},
		{"SELECT E'it\\'s; COMMIT'", ""},
		{"SELECT 'it''s; COMMIT'", ""},
		{"SELECT 1 -- ; COMMIT", ""},
		{"SELECT 1 /* ; COMMIT */", ""},
		{"DO $$ BEGIN PERFORM 1; END $$", ""},
		{"DO $body$ BEGIN PERFORM 1; COMMIT; END $body$", ""},
		{"CREATE FUNCTION f() RETURNS int AS 'SELECT 1; ' LANGUAGE sql", ""},
		{"CREATE TRIGGER tr AFTER DELETE ON t BEGIN DELETE FROM u WHERE id = old.id; END", ""},
		{"CREATE TRIGGER tr AFTER DELETE ON t BEGIN SELECT CASE WHEN 1 THEN 2 END; DELETE FROM u; END; SELECT 1", ""},
		{"CREATE TRIGGER tr AFTER DELETE ON t BEGIN DELETE FROM u; END; COMMIT", "COMMIT"},
		{"SELECT CASE WHEN a THEN 1 END FROM t; END", "END"},
		{"SELECT $1, $2; COMMIT", "COMMIT"},
		{"SELECT 'unterminated; COMMIT", ""},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			if got := EndingStatement(tc.query); got != tc.want {
				t.Errorf("EndingStatement(%q) = %q, want %q", tc.query, got, tc.want)
			}
		})
	}
}

// FuzzEndingStatement checks that the scanner never panics or loops, and that a
// COMMIT appended as a statement of its own after anything that closes its quotes and
// comments is always found.
func FuzzEndingStatement(f *testing.F) {
	for _, s := range []string{"SELECT 1", "DELETE FROM t WHERE id = $1", "'", "\"", "/*", "$a$", "$$", "E'\\", "[", "`", "CASE END BEGIN", "ROLLBACK TO x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		_ = EndingStatement(q)
		if strings.ContainsAny(q, "'\"`[$/-") || strings.Contains(strings.ToUpper(q), "BEGIN") || strings.Contains(strings.ToUpper(q), "CASE") {
			return // may leave a quote, comment or block open
		}
		if got := EndingStatement(q + "; COMMIT"); got != "COMMIT" && EndingStatement(q) == "" {
			t.Errorf("EndingStatement(%q + \"; COMMIT\") = %q", q, got)
		}
	})
}

func TestDollar(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"DELETE FROM t WHERE id = ?", "DELETE FROM t WHERE id = $1"},
		{"INSERT INTO t VALUES (?, ?, ?)", "INSERT INTO t VALUES ($1, $2, $3)"},
		{"SELECT '?' FROM t WHERE id = ?", "SELECT '?' FROM t WHERE id = $1"},
		{`SELECT "a?" FROM t WHERE id = ?`, `SELECT "a?" FROM t WHERE id = $1`},
		{"SELECT 1 /* ? */ WHERE x = ? -- ?\n", "SELECT 1 /* ? */ WHERE x = $1 -- ?\n"},
		{"SELECT $q$?$q$, ?", "SELECT $q$?$q$, $1"},
		{"SELECT $1", "SELECT $1"},
		// A statement that numbers its parameters keeps its ?: jsonb's operators.
		{"SELECT doc ? 'k' FROM t WHERE id = $1", "SELECT doc ? 'k' FROM t WHERE id = $1"},
		{"SELECT doc ?| $2 FROM t WHERE id = $1", "SELECT doc ?| $2 FROM t WHERE id = $1"},
		{"SELECT doc ?& array['a'] FROM t WHERE id = $1 AND ok", "SELECT doc ?& array['a'] FROM t WHERE id = $1 AND ok"},
		// ... but a $1 in a literal or a comment numbers nothing.
		{"SELECT '$1', ? /* $2 */", "SELECT '$1', $1 /* $2 */"},
		{"SELECT $$?$$, ?", "SELECT $$?$$, $1"},
	}
	for _, tc := range tests {
		if got := Dollar(tc.in); got != tc.want {
			t.Errorf("Dollar(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzDollar: never panics, leaves text without ? alone, and leaves no ? outside
// quotes and comments.
func FuzzDollar(f *testing.F) {
	for _, s := range []string{"SELECT ?", "'?'", "/* ? */ ?", "$a$?$a$ ?", "E'\\'?'", "?"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := Dollar(q)
		if !strings.Contains(q, "?") && got != q {
			t.Fatalf("Dollar(%q) = %q changed a query without ?", q, got)
		}
		if strings.ContainsAny(q, "'\"`[$-/") {
			return // quotes and comments may keep a ?
		}
		if strings.Contains(got, "?") {
			t.Fatalf("Dollar(%q) = %q left a placeholder", q, got)
		}
	})
}

// TestSQLiteParams: the arguments SQLite binds for a query, as its own count of each
// statement's parameters says (store/sqlite's TestArgumentCountChecked runs them).
func TestSQLiteParams(t *testing.T) {
	for _, tc := range SQLiteParamCases {
		if got := SQLiteParams(tc.Query); got != tc.Want {
			t.Errorf("SQLiteParams(%q) = %d, want %d", tc.Query, got, tc.Want)
		}
	}
}
