package txview

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/refsetdb/refset/internal/sqltext"
)

// TestBind is the rule for ? that the View applies on every statement: rewritten to
// the database's placeholders when the statement has arguments, and never where it
// could be PostgreSQL's jsonb operator in a statement that runs today.
func TestBind(t *testing.T) {
	postgres := &View{Options: Options{Rebind: RebindFunc(sqltext.Dollar)}}
	sqlite := &View{Options: Options{Rebind: RebindFunc(func(q string) string { return q })}}
	tests := []struct {
		name  string
		view  *View
		query string
		args  []any
		want  string
	}{
		{"two parameters", postgres, `INSERT INTO t (a, b) VALUES (?, ?)`, []any{1, 2}, `INSERT INTO t (a, b) VALUES ($1, $2)`},
		{"on SQLite, as written", sqlite, `INSERT INTO t (a, b) VALUES (?, ?)`, []any{1, 2}, `INSERT INTO t (a, b) VALUES (?, ?)`},
		{"a ? in a literal", postgres, `SELECT 'who?' WHERE a = ?`, []any{1}, `SELECT 'who?' WHERE a = $1`},
		{"a ? in a quoted name", postgres, `SELECT "a?" FROM t WHERE a = ?`, []any{1}, `SELECT "a?" FROM t WHERE a = $1`},
		{"a ? in comments", postgres, "SELECT 1 /* ? */ WHERE a = ? -- ?\n", []any{1}, "SELECT 1 /* ? */ WHERE a = $1 -- ?\n"},
		{"numbered parameters", postgres, `SELECT doc ? 'k' FROM t WHERE id = $1`, []any{1}, `SELECT doc ? 'k' FROM t WHERE id = $1`},
		{"jsonb ?| with numbered parameters", postgres, `SELECT doc ?| $2 FROM t WHERE id = $1`, []any{1, 2}, `SELECT doc ?| $2 FROM t WHERE id = $1`},
		{"no arguments", postgres, `SELECT doc ? 'k' FROM t`, nil, `SELECT doc ? 'k' FROM t`},
		{"pgx's named arguments", postgres, `SELECT doc ? 'k' FROM t WHERE id = @id`, []any{pgx.NamedArgs{"id": 1}}, `SELECT doc ? 'k' FROM t WHERE id = @id`},
		{"pgx's exec mode", postgres, `SELECT doc ?& array['k'] FROM t`, []any{pgx.QueryExecModeSimpleProtocol}, `SELECT doc ?& array['k'] FROM t`},
		{"no Rebind", &View{}, `SELECT ?`, []any{1}, `SELECT ?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.view.Bind(tc.query, tc.args); got != tc.want {
				t.Errorf("Bind(%q) = %q, want %q", tc.query, got, tc.want)
			}
		})
	}
}
