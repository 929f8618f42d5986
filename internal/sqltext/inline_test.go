package sqltext

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Inline replaces a parameter only where the server sees one, tells each the cast
// written after it, and refuses what it might read otherwise than the server.
func TestInline(t *testing.T) {
	cases := []struct {
		query string
		want  string // "" when refused
	}{
		{"DELETE FROM pending WHERE block_id = $1", "DELETE FROM pending WHERE block_id =  <1> "},
		{"INSERT INTO t (a, b) VALUES ($1,$2)", "INSERT INTO t (a, b) VALUES ( <1> , <2> )"},
		{"INSERT INTO t VALUES ($2, $1, $2)", "INSERT INTO t VALUES ( <2> ,  <1> ,  <2> )"},
		{"INSERT INTO t VALUES ($1::bytea)", "INSERT INTO t VALUES ( <1:bytea> ::bytea)"},
		{"INSERT INTO t VALUES ($1 :: BYTEA)", "INSERT INTO t VALUES ( <1:bytea>  :: BYTEA)"},
		{"SELECT $1::int, $2 : :bytea", "SELECT  <1:int> ::int,  <2>  : :bytea"},
		{"SELECT -$1", "SELECT - <1> "},
		{"SELECT 1 FROM t WHERE a$1 = $1", "SELECT 1 FROM t WHERE a$1 =  <1> "},
		{"SELECT 'it''s $1', $1", "SELECT 'it''s $1',  <1> "},
		{`SELECT "col $1", $1`, `SELECT "col $1",  <1> `},
		{`SELECT "a""$1", $1`, `SELECT "a""$1",  <1> `},
		{"SELECT $$ $1 $$, $1", "SELECT $$ $1 $$,  <1> "},
		{"SELECT $tag$ it's $1 $tag$, $1", "SELECT $tag$ it's $1 $tag$,  <1> "},
		{"SELECT 1 -- $1\n, $1", "SELECT 1 -- $1\n,  <1> "},
		{"SELECT 1 /* $1 /* nested */ $1 */, $1", "SELECT 1 /* $1 /* nested */ $1 */,  <1> "},
		{"SELECT E'it''s $1', $1", "SELECT E'it''s $1',  <1> "},
		{"SELECT 1", "SELECT 1"},

		// What a server might read otherwise.
		{`SELECT 'a\', $1`, ""},
		{`SELECT E'a\'', $1`, ""},
		{"SELECT 1 -- x\r, $1", ""},
		{"SELECT a[$1] FROM t", ""},
		{"SELECT `a`, $1", ""},
		// Parameters it cannot name.
		{"SELECT $0", ""},
		{"SELECT $99999999999999999999", ""},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			var b strings.Builder
			ok := Inline(&b, tc.query, func(b *strings.Builder, n int, cast string) bool {
				b.WriteString("<" + strconv.Itoa(n))
				if cast != "" {
					b.WriteString(":" + cast)
				}
				b.WriteString(">")
				return true
			})
			checked := Inline(nil, tc.query, func(b *strings.Builder, _ int, _ string) bool {
				assert.Nil(t, b, "nothing is written when only asked")
				return true
			})
			assert.Equal(t, ok, checked, "asking tells what writing does")
			if tc.want == "" {
				assert.False(t, ok)
				return
			}
			assert.True(t, ok)
			assert.Equal(t, tc.want, b.String())
		})
	}
}

// A literal refused refuses the statement, and no later parameter is asked for.
func TestInlineRefusedLiteral(t *testing.T) {
	var asked []int
	ok := Inline(nil, "SELECT $1, $2, $3", func(_ *strings.Builder, n int, _ string) bool {
		asked = append(asked, n)
		return n != 2
	})
	assert.False(t, ok)
	assert.Equal(t, []int{1, 2}, asked)
}
