package blockmanager

import (
	"database/sql"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"testing"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		ids  IDs
		want IDs
	}{
		{"nil", nil, IDs{}},
		{"empty", IDs{}, IDs{}},
		{"one", IDs{"abc"}, IDs{"abc"}},
		{"several", IDs{"a", "b", "c"}, IDs{"a", "b", "c"}},
		{"empty strings", IDs{"", ""}, IDs{"", ""}},
		{"quotes and separators", IDs{`a","b`, `"`, `\`, "x,y"}, IDs{`a","b`, `"`, `\`, "x,y"}},
		{"unicode", IDs{"héllo", "世界"}, IDs{"héllo", "世界"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tc.ids.Value()
			require.NoError(t, err)
			var got IDs
			require.NoError(t, got.Scan(v))
			assert.Equal(t, tc.want, got)
			var fromBytes IDs
			require.NoError(t, fromBytes.Scan([]byte(v.(string))))
			assert.Equal(t, tc.want, fromBytes)
		})
	}
	var ids IDs
	require.Error(t, ids.Scan(42))
	require.Error(t, ids.Scan("not json"))
	require.NoError(t, ids.Scan(nil))
	assert.Nil(t, ids)
}

// IDs read back from the database: the fast path decodes exactly what encoding/json
// decodes from valid JSON (invalid UTF-8, which Value never writes, it keeps as it is
// where encoding/json replaces it), Scan never panics, and a list written reads back
// as it was.
func FuzzIDsScan(f *testing.F) {
	for _, seed := range []string{
		`[]`, `[""]`, `["a","b"]`, `["a","","b"]`, `[","]`, `["]`, `["a", "b"]`, `["a\"b"]`, `[1]`,
		`["a","b"`, `"a"`, `null`, "[\"a\nb\"]", "[\"\xff\"]", `["<&>"]`, ``, `[`, `]`,
	} {
		f.Add([]byte(seed), "a\x00b")
	}
	f.Fuzz(func(t *testing.T, stored []byte, list string) {
		var ids IDs
		err := ids.Scan(stored)
		var want []string
		if utf8.Valid(stored) && json.Valid(stored) && json.Unmarshal(stored, &want) == nil && want != nil {
			if err != nil {
				t.Fatalf("Scan(%q) refused valid JSON: %v", stored, err)
			}
			if !slices.Equal([]string(ids), want) {
				t.Fatalf("Scan(%q) = %q, encoding/json reads %q", stored, ids, want)
			}
		}

		written := IDs(strings.Split(list, "\x00"))
		v, err := written.Value()
		if err != nil {
			t.Fatalf("Value(%q): %v", written, err)
		}
		var back IDs
		if err := back.Scan(v); err != nil {
			t.Fatalf("Scan(Value(%q)): %v", written, err)
		}
		for i, id := range written {
			if utf8.ValidString(id) && (i >= len(back) || back[i] != id) {
				t.Fatalf("%q read back as %q", written, back)
			}
		}
	})
}

// The walks read whole blocks with columns of their own, which must be the ones the
// set's store maps, in the order their fields are scanned.
func TestWalksReadTheColumnsTheStoreMaps(t *testing.T) {
	mapping, err := sqlstore.NewMapping(reflect.TypeFor[Block]())
	require.NoError(t, err)
	assert.Equal(t, strings.Join(mapping.Columns(), ", "), wholeBlocks.list)
	var b Block
	var ref sql.NullString
	fields := wholeBlocks.fields(&b, &ref)
	v := reflect.ValueOf(&b).Elem()
	for i, name := range mapping.Columns() {
		if name == "previous_block_ref" { // scanned into ref, then linked
			assert.Same(t, &ref, fields[i], name)
			continue
		}
		f, ok := mapping.Field(name)
		require.True(t, ok, name)
		assert.Equal(t, reflect.PointerTo(f), reflect.TypeOf(fields[i]), name)
		assert.Same(t, v.FieldByName(fieldOf(t, name)).Addr().Interface(), fields[i], name)
	}
}

// fieldOf is the name of Block's field tagged column.
func fieldOf(t *testing.T, column string) string {
	t.Helper()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Block]()) {
		if f.Tag.Get("db") == column {
			return f.Name
		}
	}
	t.Fatalf("no field of Block is tagged %q", column)
	return ""
}
