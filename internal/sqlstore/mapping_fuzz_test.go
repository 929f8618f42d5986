package sqlstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/sqlident"
)

// FuzzInner is embedded in the fuzzed structs, by value or by pointer, so that their
// tagged fields are promoted.
type FuzzInner struct {
	Inner string `db:"inner"`
}

// fuzzFieldTypes are the field types a fuzzed struct draws from: storable ones and
// ones no store can hold.
var fuzzFieldTypes = []reflect.Type{
	reflect.TypeFor[string](), reflect.TypeFor[int64](), reflect.TypeFor[*string](), reflect.TypeFor[[]byte](),
	reflect.TypeFor[[4]byte](), reflect.TypeFor[time.Time](), reflect.TypeFor[*time.Time](), reflect.TypeFor[bool](),
	reflect.TypeFor[float64](), reflect.TypeFor[uint64](), reflect.TypeFor[map[string]int](), reflect.TypeFor[any](),
	reflect.TypeFor[**string](), reflect.TypeFor[[]string](), reflect.TypeFor[FuzzInner](), reflect.TypeFor[*FuzzInner](),
}

// NewMapping, over struct types built from fuzzed tags, never panics, refuses with
// ErrSchema or ErrInvalidIdentifier, and maps only valid, distinct column names, whose
// values it can read from a zero struct.
func FuzzNewMapping(f *testing.F) {
	f.Add(`db:"id"`, uint8(0), `db:"height"`, uint8(1), uint8(0))
	f.Add(`db:"id,omitempty"`, uint8(0), `db:"-"`, uint8(10), uint8(1))
	f.Add(`db:"id"`, uint8(0), `db:"id"`, uint8(1), uint8(0))
	f.Add(`db:"a;b"`, uint8(2), `json:"x"`, uint8(3), uint8(2))
	f.Add(`db:""`, uint8(4), `db:"x" db:"y"`, uint8(5), uint8(0))
	f.Add(`db:"inner"`, uint8(6), `db:"\"q\""`, uint8(12), uint8(1))
	f.Add(``, uint8(11), `db`, uint8(14), uint8(0))
	// Found by fuzzing: a field promoted through a nil embedded pointer made Values
	// (and Scan, into a zero struct) panic.
	f.Add("0", uint8(0), "0", uint8(1), uint8(';'))
	f.Add(`db:"id"`, uint8(0), `db:"height"`, uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, tag0 string, type0 uint8, tag1 string, type1 uint8, embed uint8) {
		fields := []reflect.StructField{
			{Name: "F0", Type: fuzzFieldTypes[int(type0)%len(fuzzFieldTypes)], Tag: reflect.StructTag(tag0)},
			{Name: "F1", Type: fuzzFieldTypes[int(type1)%len(fuzzFieldTypes)], Tag: reflect.StructTag(tag1)},
		}
		switch embed % 3 {
		case 1:
			fields = append(fields, reflect.StructField{Name: "FuzzInner", Type: reflect.TypeFor[FuzzInner](), Anonymous: true})
		case 2:
			fields = append(fields, reflect.StructField{Name: "FuzzInner", Type: reflect.TypeFor[*FuzzInner](), Anonymous: true})
		}
		typ := reflect.StructOf(fields)
		m, err := NewMapping(typ)
		if err != nil {
			if !errors.Is(err, refset.ErrSchema) && !errors.Is(err, refset.ErrInvalidIdentifier) {
				t.Fatalf("NewMapping(%v): error %v is neither ErrSchema nor ErrInvalidIdentifier", typ, err)
			}
			return
		}
		cols := m.Columns()
		seen := map[string]bool{}
		for _, c := range cols {
			if _, err := sqlident.Parse(c, false); err != nil {
				t.Fatalf("NewMapping(%v) accepted column %q: %v", typ, c, err)
			}
			if seen[c] {
				t.Fatalf("NewMapping(%v) maps %q twice", typ, c)
			}
			seen[c] = true
		}
		if got := m.Values(reflect.New(typ).Elem()); len(got) != len(cols) {
			t.Fatalf("Values gave %d values for %d columns", len(got), len(cols))
		}
	})
}
