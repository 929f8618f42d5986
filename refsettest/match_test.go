package refsettest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/cleanup"
)

// TestMatch checks the pairing of wants with rows, with no database: above all that
// a want that could take several rows leaves the one another want needs.
func TestMatch(t *testing.T) {
	s1 := cleanup.Holder{Table: "s1.t", Column: "c", Key: "id=1"}
	s2 := cleanup.Holder{Table: "s2.t", Column: "c", Key: "id=1"}
	plain := cleanup.Holder{Table: "t", Column: "c", Key: "id=2"}
	tests := []struct {
		name        string
		wants       []string
		holders     []cleanup.Holder
		wantMissing []string
		wantExtra   []cleanup.Holder
	}{
		{name: "nothing wanted, nothing there"},
		{name: "any row before the one row", wants: []string{"t.c", "s1.t.c"}, holders: []cleanup.Holder{s1, s2}},
		{name: "keyed before any", wants: []string{"t.c", "t.c (id=1)"}, holders: []cleanup.Holder{s1, plain}},
		{name: "key must match", wants: []string{"t.c (id=3)"}, holders: []cleanup.Holder{plain},
			wantMissing: []string{"t.c (id=3)"}, wantExtra: []cleanup.Holder{plain}},
		{name: "column must match", wants: []string{"t.d"}, holders: []cleanup.Holder{plain},
			wantMissing: []string{"t.d"}, wantExtra: []cleanup.Holder{plain}},
		{name: "schema must match", wants: []string{"s2.t.c", "s2.t.c"}, holders: []cleanup.Holder{s1, s2},
			wantMissing: []string{"s2.t.c"}, wantExtra: []cleanup.Holder{s1}},
		{name: "a schema-less row has no schema", wants: []string{"s1.t.c"}, holders: []cleanup.Holder{plain},
			wantMissing: []string{"s1.t.c"}, wantExtra: []cleanup.Holder{plain}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var wants []heldBy
			for _, w := range tc.wants {
				h, err := parseHeldBy(w)
				require.NoError(t, err)
				wants = append(wants, h)
			}
			missing, extra := match(wants, tc.holders)
			require.Equal(t, tc.wantMissing, missing)
			require.Equal(t, tc.wantExtra, extra)
		})
	}
}

func TestParseHeldBy(t *testing.T) {
	tests := []struct {
		in      string
		want    heldBy
		wantErr bool
	}{
		{in: "t.c", want: heldBy{text: "t.c", table: "t", column: "c", anyKey: true}},
		{in: "s.t.c (k='a b')", want: heldBy{text: "s.t.c (k='a b')", schema: "s", table: "t", column: "c", key: "k='a b'"}},
		{in: "t.c ()", want: heldBy{text: "t.c ()", table: "t", column: "c"}},
		{in: "t", wantErr: true},
		{in: ".c", wantErr: true},
		{in: "t.", wantErr: true},
		{in: "t.c (k=1", wantErr: true},
		{in: "a.b.c.d", wantErr: true},
		{in: "t;drop.c", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseHeldBy(tc.in)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// A key matches whether its values are quoted or not, as the stores render them
// apart, but only the same values of the same columns.
func TestSameKey(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		same      bool
	}{
		{"id=7", "id='7'", true},
		{"id='7'", "id=7", true},
		{"id=7", "id=7", true},
		{"block_id='b1'", "block_id='b1'", true},
		{"block_id=b1", "block_id='b1'", true},
		{"a=1, b='x, y'", "a='1', b='x, y'", true},
		{"name='it''s'", "name='it''s'", true},
		{"k=NULL", "k=NULL", true},
		{"row='(0,1)'", "row='(0,1)'", true},
		{"id=7", "id='07'", false},
		{"id=7", "id='7 '", false},
		{"id=7", "ID='7'", false},
		{"a=1, b=2", "b=2, a=1", false},
		{"a=1", "a=1, b=2", false},
		{"k=NULL", "k='NULL'", false},
		{"name='it''s'", "name='its'", false},
		{"id='7", "id='7'", false}, // not a key: compared as written
		{"id=", "id=''", false},
	} {
		t.Run(tc.want+" "+tc.got, func(t *testing.T) {
			require.Equal(t, tc.same, sameKey(tc.want, tc.got))
			require.Equal(t, tc.same, sameKey(tc.got, tc.want), "symmetric")
		})
	}
}
