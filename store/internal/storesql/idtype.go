package storesql

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

// The Go types an ID type is judged against.
var (
	timeType    = reflect.TypeFor[time.Time]()
	scannerType = reflect.TypeFor[sql.Scanner]()
	valuerType  = reflect.TypeFor[driver.Valuer]()
)

// goKind is what a set's ID type can hold, as the drivers write and read it.
type goKind int

const (
	goAny goKind = iota // a sql.Scanner or driver.Valuer, or a type we cannot judge
	goString
	goInt
	goFloat
	goBool
	goBytes // [N]byte, stored as bytes
	goTime
)

// kindOf is the kind of the Go type t of a set's IDs. A type that scans or values
// itself (sql.Scanner, driver.Valuer) is goAny: what it reads and writes is its own
// affair. Named types are judged by their underlying kind (type BlockID string is a
// string), pointers by what they point to.
func kindOf(t reflect.Type) goKind {
	if t.Implements(valuerType) || reflect.PointerTo(t).Implements(scannerType) {
		return goAny
	}
	if t == timeType {
		return goTime
	}
	switch t.Kind() {
	case reflect.String:
		return goString
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return goInt
	case reflect.Float32, reflect.Float64:
		return goFloat
	case reflect.Bool:
		return goBool
	case reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return goBytes
		}
	case reflect.Pointer:
		return kindOf(t.Elem())
	}
	return goAny
}

// KeyType is a key column's type as the ID type must match it: the Go kinds that
// hold it, and how to say it in a message. A nil takes is any Go type.
type KeyType struct {
	takes []goKind
	what  string // e.g. "SQLite's INTEGER affinity"
	want  string // the Go types it takes, for the message
}

var (
	anyColumn = KeyType{}
	textWant  = "a string type (string, or a named type such as type BlockID string)"
	intWant   = "an integer type (int64, int32, int, ...)"
)

// SQLiteKeyType follows SQLite's rules for a column's affinity (section 3.1 of
// https://www.sqlite.org/datatype3.html), in their order: a declared type containing
// INT is INTEGER; CHAR, CLOB or TEXT is TEXT; BLOB or none is BLOB; REAL, FLOA or
// DOUB is REAL; anything else NUMERIC. A BLOB column stores each value as given, so
// takes any ID. A NUMERIC one stores text that reads as a number as that number, and
// other text as text: a string ID is taken (a UUID declared "UUID" is NUMERIC), as
// are numbers, booleans (stored 0/1) and times (stored as text the drivers parse back).
func SQLiteKeyType(typ string) KeyType {
	u := strings.ToUpper(typ)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(u, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("INT"):
		return KeyType{[]goKind{goInt, goBool}, "SQLite's INTEGER affinity", intWant}
	case has("CHAR", "CLOB", "TEXT"):
		return KeyType{[]goKind{goString}, "SQLite's TEXT affinity", textWant}
	case u == "" || has("BLOB"):
		return anyColumn
	case has("REAL", "FLOA", "DOUB"):
		return KeyType{[]goKind{goFloat}, "SQLite's REAL affinity", "a float type (float64, float32)"}
	}
	return KeyType{[]goKind{goString, goInt, goFloat, goBool, goTime}, "SQLite's NUMERIC affinity",
		"a string, number, bool or time.Time type"}
}

// PostgresKeyType is the kind of a column of type typ, as PostgreSQL's format_type
// writes it. Types it does not know (domains, enums, extensions' types but citext,
// arrays, network addresses) take any ID: a driver may read them as anything.
func PostgresKeyType(typ string) KeyType {
	t := strings.ToLower(strings.TrimSpace(typ))
	base, _, _ := strings.Cut(t, "(") // character varying(64), numeric(20,0), timestamp(3) with time zone
	base = strings.TrimSpace(base)
	text := KeyType{[]goKind{goString}, "a text type", textWant}
	switch {
	case base == "text", base == "character varying", base == "character", base == "varchar",
		base == "bpchar", base == "name", base == "citext", strings.HasSuffix(base, ".citext"):
		return text
	case base == "uuid":
		return KeyType{[]goKind{goString}, "a uuid (the drivers read it as text)", textWant}
	case base == "smallint", base == "integer", base == "bigint":
		return KeyType{[]goKind{goInt}, "an integer type", intWant}
	case base == "numeric":
		return KeyType{[]goKind{goInt, goFloat, goString}, "a numeric type (the drivers read it as text)",
			"an integer, float or string type"}
	case base == "real", base == "double precision":
		return KeyType{[]goKind{goFloat}, "a floating-point type", "a float type (float64, float32)"}
	case base == "boolean":
		return KeyType{[]goKind{goBool}, "a boolean", "a bool type"}
	case base == "bytea":
		return KeyType{[]goKind{goBytes}, "a bytea", "a byte array type ([32]byte, ...)"}
	case base == "date", strings.HasPrefix(base, "timestamp"):
		return KeyType{[]goKind{goTime}, "a date or timestamp", "time.Time"}
	}
	return anyColumn
}

// checkIDType refuses (refset.ErrSchema) an ID type id that cannot hold the values
// of the set's ID column, named column and of type typ as the dialect's catalog
// writes it, which keyType judges: a string ID on an integer key, which on PostgreSQL
// fails every Add of a key that is not digits and on SQLite stores text in an
// integer column, an integer ID on a text key, and so on. An ID type implementing
// sql.Scanner or driver.Valuer, and a column type the dialect does not describe, are
// taken: only the type's own code knows what it holds.
func checkIDType(keyType func(typ string) KeyType, table sqlident.Ident, column, typ string, id reflect.Type) error {
	var c KeyType
	if keyType != nil {
		c = keyType(typ)
	}
	k := kindOf(id)
	if c.takes == nil || k == goAny {
		return nil
	}
	for _, ok := range c.takes {
		if ok == k {
			return nil
		}
	}
	return fmt.Errorf("refset: new store of %s: the ID column %q has SQL type %s (%s), which the set's ID type %v cannot hold: %w; "+
		"make the ID %s, give it a type implementing sql.Scanner and driver.Valuer, or change the column's type",
		table, column, typ, c.what, id, refset.ErrSchema, c.want)
}
