package storesql

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/refsetdb/refset/internal/sentinel"
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
	// changes reports whether the column stores the string s as a value that reads
	// back, or may, as another string, or that compares equal to another string the
	// check takes; nil: it keeps every string as written.
	changes func(s string) bool
	// For the message of a refused ID: what the column does with such a string
	// ("stores a string that reads as a number ... as that number"), and what to do.
	rewrites, instead string
}

var (
	anyColumn = KeyType{}
	textWant  = "a string type (string, or a named type such as type BlockID string)"
	intWant   = "an integer type (int64, int32, int, ...)"
)

// SQLiteKeyType is the kind of a column declared typ, then the collation it compares
// by after " COLLATE " where that is not BINARY (see collated). It follows SQLite's
// rules for a column's affinity (section 3.1 of
// https://www.sqlite.org/datatype3.html), in their order: a declared type containing
// INT is INTEGER; CHAR, CLOB or TEXT is TEXT; BLOB or none is BLOB; REAL, FLOA or
// DOUB is REAL; anything else NUMERIC. A BLOB column stores each value as given, so
// takes any ID. A NUMERIC one stores text that reads as a number as that number, and
// other text as text: a string ID type is taken (a UUID declared "UUID" is NUMERIC),
// as are numbers, booleans (stored 0/1) and times (stored as text the drivers parse
// back), but each string ID must then pass sqliteNumericChanges (see idCheck).
//
// The drivers also read a column by its declared type, whatever its affinity: both
// read a value in a column declared exactly DATE, DATETIME or TIMESTAMP as a time
// (go-sqlite3 every value, the zero time for text that is not one; modernc.org/sqlite
// an INTEGER, and text that parses as one), so a string ID there would read back as a
// time's text ("2024-01-02" as "2024-01-02T00:00:00Z"), and such a key takes no
// string type; and go-sqlite3 reads an INTEGER in a column declared BOOLEAN as a bool,
// so a string ID there is refused if SQLite would store it as any number (sqliteNumber),
// "12" too.
func SQLiteKeyType(typ string) KeyType {
	typ, collations := cutCollations(typ)
	return collated(sqliteKeyType(typ), collations, false)
}

func sqliteKeyType(typ string) KeyType {
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
		return KeyType{takes: []goKind{goInt, goBool}, what: "SQLite's INTEGER affinity", want: intWant}
	case has("CHAR", "CLOB", "TEXT"):
		return KeyType{takes: []goKind{goString}, what: "SQLite's TEXT affinity", want: textWant}
	case u == "" || has("BLOB"):
		return anyColumn
	case has("REAL", "FLOA", "DOUB"):
		return KeyType{takes: []goKind{goFloat}, what: "SQLite's REAL affinity", want: "a float type (float64, float32)"}
	}
	switch strings.TrimSpace(u) {
	case "DATE", "DATETIME", "TIMESTAMP":
		return KeyType{takes: []goKind{goInt, goFloat, goBool, goTime}, what: "SQLite's NUMERIC affinity, " +
			"which both drivers read as a time: go-sqlite3 reads every text in it as a time, the zero time if it does not parse",
			want: "time.Time (or declare the column TEXT for string IDs)"}
	case "BOOLEAN":
		// go-sqlite3 reads an INTEGER in it as a bool: "12" would read back "true".
		return KeyType{takes: []goKind{goString, goInt, goFloat, goBool, goTime}, what: "SQLite's NUMERIC affinity",
			want: "a string, number, bool or time.Time type", changes: sqliteNumber, rewrites: sqliteRewrites, instead: sqliteInstead}
	}
	return KeyType{takes: []goKind{goString, goInt, goFloat, goBool, goTime}, what: "SQLite's NUMERIC affinity",
		want: "a string, number, bool or time.Time type", changes: sqliteNumericChanges, rewrites: sqliteRewrites, instead: sqliteInstead}
}

// What a key of SQLite's NUMERIC affinity does with a string ID it refuses, and what
// to do instead, for the message.
const (
	sqliteRewrites = "stores a string that reads as a number (with a sign, leading zeros, spaces, a fraction or exponent, " +
		"or past 64 bits) as that number"
	sqliteInstead = "declare the column TEXT to keep every string ID as written, or use IDs that are not such numbers"
)

// sqliteNumericChanges reports whether a column of SQLite's NUMERIC affinity stores
// the text s as a number that may read back as another string. As SQLite documents
// (section 3 of https://www.sqlite.org/datatype3.html), it stores text that is a
// well-formed integer or real literal as an INTEGER, or as a REAL when it has a
// fraction or exponent that leaves one, or does not fit 64 bits, and such a value
// reads back in its own spelling. As SQLite 3.53 does, on both drivers
// (store/sqlite's TestNumericKeyKeepsStringIDs checks this against SQLite itself),
// the literal:
//
//   - ends at the first NUL byte: "12\x00abc" is stored as 12, its tail lost;
//   - may have SQLite's white space (space, \t, \n, \v, \f, \r) before and after
//     it: "  12 " is 12;
//   - is an optional sign, decimal digits with an optional '.' (".5", "1.", "12.0"),
//     and an optional exponent with at least one digit ("1e5", "1.5E-3"); leading
//     zeros are no bar ("0012" is 12), a real that is a whole number in 64 bits
//     becomes an INTEGER ("12.0" and "1e5" read back as "12" and "100000"), and one
//     past a REAL's range becomes infinity ("1e999" reads "+Inf");
//   - is never hexadecimal ("0x10"), "inf", "NaN", digits with '_', or non-ASCII
//     digits or spaces: those stay text.
//
// The one literal taken is the canonical decimal spelling of a 64-bit integer ("12",
// "-12", "0"; not "+12", "012", "-0", " 12"): stored as that INTEGER, it reads back
// as the same digits, and no other string the check takes is stored as the same
// value. Taking it keeps the objects a set stored with such IDs before this check
// existed within reach. Every REAL is refused, though some read back as written
// ("12.5"): whether one does hangs on how a driver formats a float ("1234567.5"
// reads back "1.2345675e+06") and on SQLite's rounding of the text, which a check in
// Go cannot promise to follow.
func sqliteNumericChanges(s string) bool {
	return sqliteNumber(s) && !canonicalInt64(s)
}

// sqliteNumber reports whether a column of SQLite's NUMERIC affinity stores the text
// s as a number, INTEGER or REAL (see sqliteNumericChanges).
func sqliteNumber(s string) bool {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	s = strings.Trim(s, " \t\n\v\f\r")
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	digits := func() int {
		n := 0
		for n < len(s) && '0' <= s[n] && s[n] <= '9' {
			n++
		}
		d := n
		s = s[n:]
		return d
	}
	mantissa := digits()
	if s != "" && s[0] == '.' {
		s = s[1:]
		mantissa += digits()
	}
	if mantissa == 0 {
		return false
	}
	if s != "" && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s != "" && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		if digits() == 0 {
			return false
		}
	}
	return s == ""
}

// canonicalInt64 reports whether s is a 64-bit integer as strconv.FormatInt writes
// it, which is how the drivers' INTEGER reads back into a string.
func canonicalInt64(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && strconv.FormatInt(n, 10) == s
}

// PostgresKeyType is the kind of a column of type typ, as PostgreSQL's format_type
// writes it (a domain's base type, as refsetdriver.Column.KeyType gives it), with the
// nondeterministic collation it compares by after " COLLATE ", if any: then it
// takes no string ID type (see collated). Types PostgreSQL writes back in a
// spelling of its own (pgRespelled: network addresses, jsonb, ranges, arrays, ...)
// take no ID of a plain Go kind. Types it does not know (enums, extensions' types
// but citext, types of the program's own) take any ID: a driver may read them as
// anything.
//
// A type that takes a string ID type but would store some strings as another value,
// or compare one equal to another, checks each string ID (see idCheck and
// postgresStringCheck): numeric, uuid, character(n) and bpchar, character
// varying(n), name and citext. text and character varying without a length keep
// every string, and check nothing.
func PostgresKeyType(typ string) KeyType {
	typ, collations := cutCollations(typ)
	return collated(postgresKeyType(typ), collations, true)
}

func postgresKeyType(typ string) KeyType {
	t := strings.ToLower(strings.TrimSpace(typ))
	base, mod, _ := strings.Cut(t, "(") // character varying(64), numeric(20,0), timestamp(3) with time zone
	base = strings.TrimSpace(base)
	mod, _, _ = strings.Cut(mod, ")")
	text := KeyType{takes: []goKind{goString}, what: "a text type", want: textWant}
	switch {
	case base == "text", base == "character varying", base == "character", base == "varchar",
		base == "bpchar", base == "name", base == "citext", strings.HasSuffix(base, ".citext"):
		return postgresStringCheck(text, base, mod)
	case base == "uuid":
		return postgresStringCheck(KeyType{takes: []goKind{goString}, what: "a uuid (the drivers read it as text)", want: textWant},
			base, mod)
	case base == "smallint", base == "integer", base == "bigint":
		return KeyType{takes: []goKind{goInt}, what: "an integer type", want: intWant}
	case base == "numeric":
		return postgresStringCheck(KeyType{takes: []goKind{goInt, goFloat, goString},
			what: "a numeric type (the drivers read it as text)", want: "an integer, float or string type"}, base, mod)
	case base == "real", base == "double precision":
		return KeyType{takes: []goKind{goFloat}, what: "a floating-point type", want: "a float type (float64, float32)"}
	case base == "boolean":
		return KeyType{takes: []goKind{goBool}, what: "a boolean", want: "a bool type"}
	case base == "bytea":
		return KeyType{takes: []goKind{goBytes}, what: "a bytea", want: "a byte array type ([32]byte, ...)"}
	case base == "date", strings.HasPrefix(base, "timestamp"):
		return KeyType{takes: []goKind{goTime}, what: "a date or timestamp", want: "time.Time"}
	case pgRespelled(base), strings.HasSuffix(t, "[]"):
		return KeyType{takes: []goKind{}, what: "a type PostgreSQL writes back in a spelling of its own " +
			`(an inet "10.0.0.1/32" reads back "10.0.0.1", a jsonb '{"a":1}' reads back '{"a": 1}', ` +
			`a range "(1,3]" reads back "[2,4)"), so an ID of a Go kind would read back changed`}
	}
	return anyColumn
}

// pgRespelled reports whether PostgreSQL writes the values of type base (as
// format_type writes it, without its modifier) back in a spelling of its own,
// whatever spelling they were written in: network addresses, money, jsonb,
// intervals, times of day, text search vectors, the built-in ranges and
// multiranges (and, by its caller, arrays). Their keys take no ID of a plain Go
// kind, only a type that scans and values itself in the type's own spelling.
func pgRespelled(base string) bool {
	switch base {
	case "inet", "cidr", "macaddr", "macaddr8", "money", "jsonb", "interval", "tsvector", "tsquery",
		"time without time zone", "time with time zone", "time", "timetz",
		"int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange",
		"int4multirange", "int8multirange", "nummultirange", "tsmultirange", "tstzmultirange", "datemultirange":
		return true
	}
	return strings.HasPrefix(base, "interval ") || strings.HasPrefix(base, "time ")
}

// cutCollations splits a key type as refsetdriver.Column.KeyType writes it into the
// type and the collations after it, each after " COLLATE ".
func cutCollations(typ string) (string, []string) {
	parts := strings.Split(typ, " COLLATE ")
	return parts[0], parts[1:]
}

// collated is k, a key of a column that compares strings by collations (see
// refsetdriver.Column.KeyType: those that may hold two different strings equal).
// SQLite's NOCASE folds the 26 ASCII letters only, and RTRIM ignores trailing spaces,
// so a string ID is taken where no other string the check takes compares equal to
// it: one without an upper-case ASCII letter, one that does not end in a space. Any
// other collation (one the program registered on SQLite; a nondeterministic one on
// PostgreSQL, which refset cannot reproduce) takes no string ID type.
func collated(k KeyType, collations []string, postgres bool) KeyType {
	checks := []func(string) bool{}
	if k.changes != nil {
		checks = append(checks, k.changes)
	}
	var rewrites []string
	if k.rewrites != "" {
		rewrites = append(rewrites, k.rewrites)
	}
	for _, c := range collations {
		switch {
		case !postgres && strings.EqualFold(c, "NOCASE"):
			checks = append(checks, func(s string) bool { return strings.ContainsFunc(s, isASCIIUpper) })
			rewrites = append(rewrites, `compares strings without regard to the case of ASCII letters (COLLATE NOCASE): `+
				`"ABC" would find the object "abc"`)
		case !postgres && strings.EqualFold(c, "RTRIM"):
			checks = append(checks, func(s string) bool { return strings.HasSuffix(s, " ") })
			rewrites = append(rewrites, `compares strings without their trailing spaces (COLLATE RTRIM): "a " would find the object "a"`)
		default:
			return uncollatable(k, c, postgres)
		}
	}
	if len(collations) == 0 {
		return k
	}
	instead := "use IDs that no other ID equals as the collation compares them (no upper-case ASCII letter under " +
		"NOCASE, no trailing space under RTRIM), or declare the column without the collation"
	if k.changes != nil {
		instead = k.instead + "; and " + instead
	}
	k.changes = func(s string) bool {
		return slices.ContainsFunc(checks, func(f func(string) bool) bool { return f(s) })
	}
	k.rewrites = strings.Join(rewrites, ", and ")
	k.instead = instead
	return k
}

// uncollatable is k compared by collation c, which refset cannot follow: it takes
// no string ID type.
func uncollatable(k KeyType, c string, postgres bool) KeyType {
	takes, all := []goKind{}, k.takes
	if all == nil { // a column of any type: it takes all but strings now
		all = []goKind{goInt, goFloat, goBool, goBytes, goTime}
	}
	for _, g := range all {
		if g != goString {
			takes = append(takes, g)
		}
	}
	k.takes = takes
	if postgres {
		k.what += fmt.Sprintf(", compared by %s, a nondeterministic collation, which may hold two different strings equal", c)
	} else {
		k.what += fmt.Sprintf(", compared by %s, a collation refset cannot follow, which may hold two different strings equal", c)
	}
	k.want = `a type other than a string (a string ID needs a deterministic collation: BINARY on SQLite, "C" or the ` +
		`database's default on PostgreSQL)`
	k.changes = nil
	return k
}

func isASCIIUpper(r rune) bool { return r >= 'A' && r <= 'Z' }

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
	makeIt := ""
	if c.want != "" {
		makeIt = fmt.Sprintf("make the ID %s, ", c.want)
	}
	return fmt.Errorf("refset: new store of %s: the ID column %q has SQL type %s (%s), which the set's ID type %v cannot hold: %w; "+
		"%sgive it a type implementing sql.Scanner and driver.Valuer, or change the column's type",
		table, column, typ, c.what, id, refset.ErrSchema, makeIt)
}

// idCheck is the check of each ID of type id that a set's statements send to its ID
// column, named column, of type typ as the dialect's catalog writes it, which keyType
// judges; nil when there is nothing to check, which is every ID type on every column
// but a string type on one that changes some strings (SQLite's NUMERIC affinity;
// PostgreSQL's numeric, uuid, character(n), bpchar, character varying(n), name and
// citext). The store then runs no check at all: a TEXT or BLOB key costs nothing.
//
// The check refuses, with refset.ErrInvalidID, a string ID that the column would
// store as another value ("0012" as the INTEGER 12, which reads back as "12"), or
// as a value equal to another string's (citext's "ABC" and "abc"): the
// object would come back under another ID, and two IDs could become one, the second
// Add failing as a duplicate of an object it never added. It is refused before any
// statement runs: the store checks every ID it sends (an object's ID column on
// insert, and the ID of a look-up, an existence check, a hold and an unhold), so no
// such ID reaches the table, its holds table or its review queue (both declared with
// the key's type, so of the same affinity), and a token, which is made only once its
// ID was added or found, never carries one to a command. A type implementing
// sql.Scanner or driver.Valuer is not checked: what it writes is its own affair, as
// for checkIDType.
func idCheck(keyType func(typ string) KeyType, table sqlident.Ident, column, typ string, id reflect.Type) func(id any) error {
	if keyType == nil || kindOf(id) != goString {
		return nil
	}
	c := keyType(typ)
	if c.changes == nil {
		return nil
	}
	return func(id any) error {
		s, ok := stringOf(id)
		if !ok || !c.changes(s) {
			return nil
		}
		return sentinel.New("refset", fmt.Sprintf("the ID %s of %s", sentinel.QuotedID(s), table), refset.ErrInvalidID,
			fmt.Errorf("the ID column %q has SQL type %s (%s), which %s: "+
				"the ID would read back changed, or name another ID's object; nothing was sent: %s",
				column, typ, c.what, c.rewrites, c.instead))
	}
}

// stringOf is the string that database/sql sends for id, an ID of a string type
// (named, or behind pointers); ok is false for a nil pointer.
func stringOf(id any) (s string, ok bool) {
	if s, ok := id.(string); ok {
		return s, true
	}
	v := reflect.ValueOf(id)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "", false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.String {
		return "", false
	}
	return v.String(), true
}
