package sqltext

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// verbCases are statements as users write them, with the keyword of their main
// clause. They seed FuzzVerb too.
var verbCases = []struct {
	query string
	want  string
}{
	{"DELETE FROM blocks WHERE id = ?", "DELETE"},
	{"  delete from blocks", "DELETE"},
	{"\t\r\n\fDelete from blocks", "DELETE"},
	{"-- a comment\nDELETE FROM blocks", "DELETE"},
	{"-- one\n  -- two\n\tDELETE FROM blocks", "DELETE"},
	{"/* a comment */ DELETE FROM blocks", "DELETE"},
	{"/* a\nmultiline -- comment */DELETE FROM blocks", "DELETE"},
	{"/* nested /* as Postgres nests them */ still a comment */ DELETE FROM blocks", "DELETE"},
	{"/**/DELETE FROM blocks", "DELETE"},
	{"-- INSERT\nDELETE FROM blocks", "DELETE"},
	{"/* INSERT */ DELETE FROM blocks", "DELETE"},
	{"WITH x AS (SELECT 1) DELETE FROM blocks", "DELETE"},
	{"with x as (select 1) delete from blocks", "DELETE"},
	{"WITH RECURSIVE chain (id, prev) AS (SELECT id, prev FROM blocks WHERE id = ? UNION ALL SELECT b.id, b.prev FROM blocks b JOIN chain c ON b.id = c.prev) DELETE FROM blocks WHERE id IN (SELECT id FROM chain)", "DELETE"},
	{"WITH a AS MATERIALIZED (SELECT 1), b AS NOT MATERIALIZED (SELECT 2) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (SELECT ')', \"(\" FROM t WHERE x = '(' ) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (SELECT 'it''s (' FROM t) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (SELECT E'it\\'s (' FROM t) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (SELECT $$ ) $$, $q$ ( $q$ FROM t) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (SELECT `)`, [)] FROM t) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (SELECT 1 /* ) */ -- )\n) DELETE FROM blocks", "DELETE"},
	{"WITH \"insert\" AS (SELECT 1) DELETE FROM blocks", "DELETE"},
	{"WITH a AS (DELETE FROM x RETURNING id) INSERT INTO y SELECT id FROM a", "INSERT"},
	{"WITH RECURSIVE t (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SEARCH DEPTH FIRST BY n SET ord DELETE FROM blocks", "DELETE"},
	{"WITH RECURSIVE t (n) AS (SELECT 1) CYCLE n SET seen USING path, u AS (SELECT 2) DELETE FROM blocks", "DELETE"},
	{"INSERT INTO heads VALUES (?)", "INSERT"},
	{"insert or replace into heads values (?)", "INSERT"},
	{"INSERT OR IGNORE INTO heads VALUES (?)", "INSERT"},
	{"REPLACE INTO heads VALUES (?)", "REPLACE"},
	{"INSERT INTO heads VALUES ($1) ON CONFLICT (block_id) DO UPDATE SET block_id = excluded.block_id", "INSERT"},
	{"WITH src AS (SELECT ? AS id) INSERT INTO heads SELECT id FROM src", "INSERT"},
	{"UPDATE blocks SET prev = ?", "UPDATE"},
	{"((SELECT 1))", "SELECT"},
	{"(DELETE FROM blocks)", "DELETE"},
	{"DELETE FROM a; INSERT INTO b VALUES (1)", "DELETE"},
	{"COMMIT", "COMMIT"},
	{"", ""},
	{"   -- only a comment", ""},
	{"/* unterminated", ""},
	{"WITH", ""},
	{"WITH x AS (SELECT 1", ""},
	{"WITH x (SELECT 1) DELETE FROM blocks", ""},
	{"WITH x AS SELECT DELETE FROM blocks", ""},
	{"'DELETE'", ""},
	{"$1", ""},
	{"123 DELETE", ""},
}

func TestVerb(t *testing.T) {
	for _, tc := range verbCases {
		t.Run(tc.query, func(t *testing.T) {
			assert.Equal(t, tc.want, Verb(tc.query))
		})
	}
}

// FuzzVerb: Verb reads any input without panicking or looping, answers a keyword or
// nothing, and what comes before the main clause (space, comments, a WITH prefix)
// never changes its answer.
func FuzzVerb(f *testing.F) {
	for _, tc := range verbCases {
		f.Add(tc.query)
	}
	f.Fuzz(func(t *testing.T, query string) {
		verb := Verb(query)
		if verb != strings.ToUpper(verb) {
			t.Fatalf("Verb(%q) = %q, not upper case", query, verb)
		}
		for _, prefix := range []string{" \n\t", "-- comment\n", "/* comment */", "/* a /* nested */ one */"} {
			if got := Verb(prefix + query); got != verb {
				t.Fatalf("Verb(%q) = %q, but Verb(%q) = %q", prefix+query, got, query, verb)
			}
		}
		// A main clause keeps its verb behind a WITH prefix.
		switch verb {
		case "INSERT", "UPDATE", "DELETE", "REPLACE":
			if !strings.HasPrefix(strings.ToUpper(query), verb) {
				return // the verb came after comments or parentheses
			}
			with := "WITH a (x) AS NOT MATERIALIZED (SELECT ')' /* ( */), b AS (SELECT 1) "
			if got := Verb(with + query); got != verb {
				t.Fatalf("Verb(%q) = %q, want %q", with+query, got, verb)
			}
		}
	})
}
