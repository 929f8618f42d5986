package sqlident

import (
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in          string
		allowSchema bool
		quoted      string // "" means refused
	}{
		{"blocks", false, `"blocks"`},
		{"_x9", false, `"_x9"`},
		{"Blocks", false, `"Blocks"`},
		{"ledger.blocks", true, `"ledger"."blocks"`},
		{"ledger.blocks", false, ""},
		{"a.b.c", true, ""},
		{"", false, ""},
		{"9lives", false, ""},
		{"blocks; DROP TABLE x", true, ""},
		{`bl"ocks`, true, ""},
		{"bl ocks", true, ""},
		{"ledger.", true, ""},
		{".blocks", true, ""},
		{"héllo", false, ""},
		{strings.Repeat("a", 63), false, `"` + strings.Repeat("a", 63) + `"`},
		{strings.Repeat("a", 64), false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			id, err := Parse(tc.in, tc.allowSchema)
			if tc.quoted == "" {
				require.ErrorIs(t, err, sentinel.ErrInvalidIdentifier)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.quoted, id.Quoted())
			assert.Equal(t, tc.in, id.String())
		})
	}
}

func TestCheckType(t *testing.T) {
	for _, ok := range []string{"text", "bigint", "character varying(128)", "VARCHAR(64)", "numeric(10,2)", "numeric(10, 2)", "BLOB", "timestamp with time zone"} {
		assert.NoError(t, CheckType(ok), ok)
	}
	for _, bad := range []string{"", "text; DROP TABLE x", "text)", "int[]", `"quoted"`, "text -- comment"} {
		assert.ErrorIs(t, CheckType(bad), sentinel.ErrInvalidIdentifier, bad)
	}
}

// An Ident written as a literal is not checked, but Quoted still quotes it as the one
// identifier it names: a double quote in it is doubled, as both dialects read it, so
// it cannot end the quotes and let the rest through as SQL.
func TestQuotedLiteral(t *testing.T) {
	for _, tc := range []struct {
		id   Ident
		want string
	}{
		{Ident{Name: "blocks"}, `"blocks"`},
		{Ident{Schema: "ledger", Name: "blocks"}, `"ledger"."blocks"`},
		{Ident{Name: `x"; DROP TABLE y; --`}, `"x""; DROP TABLE y; --"`},
		{Ident{Schema: `a"b`, Name: `"`}, `"a""b".""""`},
		{Ident{Name: "two words"}, `"two words"`},
	} {
		t.Run(tc.id.String(), func(t *testing.T) {
			assert.Equal(t, tc.want, tc.id.Quoted())
		})
	}
}
