package sqlstore

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/sqlident"
)

// Mapping ties the `db`-tagged fields of a struct type to table columns.
type Mapping struct {
	typ    reflect.Type
	fields []field
}

type field struct {
	column    string
	index     []int
	byteArray bool // [N]byte: stored as bytes, scanned through a []byte
	typ       reflect.Type
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	scannerType = reflect.TypeFor[sql.Scanner]()
	valuerType  = reflect.TypeFor[driver.Valuer]()
)

// NewMapping reads the `db` tags of struct type T. A field tagged `db:"-"` or untagged
// is not stored; every tagged field must have a type the drivers can store. Tagged
// fields of embedded structs are mapped too, but not through an embedded pointer: a
// row is scanned into a zero struct, where that pointer is nil, so the field has no
// place to go.
func NewMapping(t reflect.Type) (*Mapping, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("refset: %v is not a struct: %w", t, refset.ErrSchema)
	}
	m := &Mapping{typ: t}
	seen := map[string]bool{}
	for _, sf := range reflect.VisibleFields(t) {
		tag, ok := sf.Tag.Lookup("db")
		if !ok || tag == "-" || !sf.IsExported() {
			continue
		}
		col := strings.Split(tag, ",")[0]
		if _, err := sqlident.Parse(col, false); err != nil {
			return nil, fmt.Errorf("refset: field %s.%s: %w", t.Name(), sf.Name, err)
		}
		if seen[col] {
			return nil, fmt.Errorf("refset: %s maps column %q twice: %w", t.Name(), col, refset.ErrSchema)
		}
		seen[col] = true
		if through := embeddedPointer(t, sf.Index); through != nil {
			return nil, fmt.Errorf("refset: field %s.%s is promoted through the embedded pointer %v (embed the struct, not a pointer to it): %w",
				t.Name(), sf.Name, through, refset.ErrSchema)
		}
		f := field{column: col, index: sf.Index, typ: sf.Type}
		switch {
		case isByteArray(sf.Type):
			f.byteArray = true
		case !storable(sf.Type):
			return nil, fmt.Errorf("refset: field %s.%s has type %v, which no store can hold: %w",
				t.Name(), sf.Name, sf.Type, refset.ErrSchema)
		}
		m.fields = append(m.fields, f)
	}
	if len(m.fields) == 0 {
		return nil, fmt.Errorf("refset: %s has no field tagged `db:\"column\"`: %w", t.Name(), refset.ErrSchema)
	}
	return m, nil
}

// embeddedPointer is the type of the first embedded pointer on the path index takes
// from t to a promoted field, or nil if there is none.
func embeddedPointer(t reflect.Type, index []int) reflect.Type {
	for _, i := range index[:len(index)-1] {
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Pointer {
			return ft
		}
		t = ft
	}
	return nil
}

func isByteArray(t reflect.Type) bool {
	return t.Kind() == reflect.Array && t.Elem().Kind() == reflect.Uint8
}

func storable(t reflect.Type) bool {
	if t == timeType || t.Implements(valuerType) || reflect.PointerTo(t).Implements(scannerType) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return true
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8
	case reflect.Pointer:
		return t.Elem().Kind() != reflect.Pointer && storable(t.Elem())
	}
	return false
}

// Columns are the mapped columns, in field order.
func (m *Mapping) Columns() []string {
	cols := make([]string, len(m.fields))
	for i, f := range m.fields {
		cols[i] = f.column
	}
	return cols
}

// Field returns the Go type of the field mapped to column.
func (m *Mapping) Field(column string) (reflect.Type, bool) {
	for _, f := range m.fields {
		if f.column == column {
			return f.typ, true
		}
	}
	return nil, false
}

// Values are the arguments for an INSERT of the columns, from the struct v.
func (m *Mapping) Values(v reflect.Value) []any {
	args := make([]any, len(m.fields))
	for i, f := range m.fields {
		fv := v.FieldByIndex(f.index)
		if f.byteArray {
			b := make([]byte, fv.Len())
			reflect.Copy(reflect.ValueOf(b), fv)
			args[i] = b
			continue
		}
		args[i] = fv.Interface()
	}
	return args
}

// Scan reads one row of the columns into the struct that ptr points to.
func (m *Mapping) Scan(row interface{ Scan(...any) error }, ptr reflect.Value) error {
	v := ptr.Elem()
	dest := make([]any, len(m.fields))
	var arrays []*[]byte
	for i, f := range m.fields {
		if f.byteArray {
			b := new([]byte)
			arrays = append(arrays, b)
			dest[i] = b
			continue
		}
		dest[i] = v.FieldByIndex(f.index).Addr().Interface()
	}
	if err := row.Scan(dest...); err != nil {
		return err
	}
	k := 0
	for _, f := range m.fields {
		if !f.byteArray {
			continue
		}
		b, fv := *arrays[k], v.FieldByIndex(f.index)
		k++
		if len(b) != fv.Len() {
			return fmt.Errorf("refset: column %q holds %d bytes, field %v wants %d: %w",
				f.column, len(b), f.typ, fv.Len(), refset.ErrSchema)
		}
		reflect.Copy(fv, reflect.ValueOf(b))
	}
	return nil
}
