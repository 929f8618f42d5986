package postgres

import (
	"database/sql/driver"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/refsetdb/refset/internal/sqltext"
)

// lib/pq sends one statement a round trip, and no statement before the reply to the one
// before it: it has no pipeline. It does send a simple query, several statements in
// one message, but a simple query takes no arguments. So a unit of statements
// (libpqPipeline) goes in one simple query only with its arguments written into it as
// literals, and only where a literal means to the server exactly what lib/pq would
// have sent: the value's text, of a type the server infers from where it stands. lib/pq
// sends every argument as text of no stated type, so a quoted literal, which the
// server also types from where it stands, is that argument. Any other argument keeps
// its statement out of the simple query (inlined refuses), and the statement is sent
// with its arguments, as before.

// inlined writes query, a PostgreSQL statement, to b with args written into it as
// literals (sqltext.Inline), or reports false when one of them has no literal that
// lib/pq's sending would equal (see literal). With b nil, it only tells.
func inlined(b *strings.Builder, query string, args []any) bool {
	// Every argument must stand in the statement, or the server refuses it when sent
	// with them (its parameters are as many as the highest it names): a statement
	// that names a parameter past the arguments, or leaves one out, is sent with them
	// to be refused as before.
	if len(args) > 64 {
		return false
	}
	var used uint64
	ok := sqltext.Inline(b, query, func(b *strings.Builder, n int, cast string) bool {
		if n > len(args) {
			return false
		}
		used |= 1 << (n - 1)
		return literal(b, args[n-1], cast)
	})
	return ok && used == 1<<len(args)-1
}

// executed writes to b EXECUTE name(...) with args as literals, the parameters of
// query, prepared as name (libpqPipeline.prepared), or reports false when name is ""
// or an argument has no literal that lib/pq's sending would equal (see literal). A
// byte slice is bytea's only where every place of its parameter casts it to bytea.
func executed(b *strings.Builder, name, query string, args []any) bool {
	if name == "" || len(args) > 64 {
		return false
	}
	var casts [64]string
	var seen, mixed uint64
	ok := sqltext.Inline(nil, query, func(_ *strings.Builder, n int, cast string) bool {
		if n > len(args) {
			return false
		}
		bit := uint64(1) << (n - 1)
		if seen&bit != 0 && casts[n-1] != cast {
			mixed |= bit
		}
		seen |= bit
		casts[n-1] = cast
		return true
	})
	if !ok || seen != 1<<len(args)-1 {
		return false
	}
	b.WriteString("EXECUTE ")
	b.WriteString(name)
	if len(args) == 0 {
		return true
	}
	b.WriteByte('(')
	for i, a := range args {
		if i > 0 {
			b.WriteString(", ")
		}
		cast := casts[i]
		if mixed&(1<<i) != 0 {
			cast = ""
		}
		if !literal(b, a, cast) {
			return false
		}
	}
	b.WriteByte(')')
	return true
}

// literal writes to b (unless it is nil) the SQL literal of v, an argument whose
// parameter the statement casts to cast ("" if it does not), as lib/pq would send it:
// nil, and the kinds database/sql converts to driver values without help (strings,
// integers, floats, booleans, byte slices), pointers to them, and the driver.Valuers
// that give them (sql.NullString...). It reports false for anything else (a slice
// lib/pq would send as an array, a time.Time, which
// lib/pq writes as a setting of its own says), and for a value whose literal could
// mean something else to the server than lib/pq's argument:
//
//   - a string with a backslash, a NUL or invalid UTF-8: lib/pq sends a string for a
//     bytea parameter as those very bytes, while the server reads a backslash in a
//     literal for bytea as an escape (and text refuses NUL and invalid UTF-8 either way);
//   - a byte slice whose parameter is not cast to bytea: lib/pq sends it as bytes for
//     bytea and as text for any other type, and only the cast tells which it is here.
//
// A string literal is '...' with its quotes doubled: without a backslash, it reads the
// same whatever standard_conforming_strings says. The bytea literal, which needs one,
// is an escape string (E'\\x...'), read the same either way too. Numbers and booleans
// are quoted as strings are: lib/pq sends them as text of no stated type, which the
// server types from where the parameter stands, as it types a quoted literal.
func literal(b *strings.Builder, v any, cast string) bool {
	switch v := v.(type) {
	case nil:
		return null(b)
	case string:
		return quoted(b, v)
	case []byte:
		switch {
		case v == nil:
			return null(b)
		case cast != "bytea":
			return false
		case b != nil:
			b.Grow(len(`E'\\x'`) + 2*len(v))
			b.WriteString(`E'\\x`)
			for _, c := range v {
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			}
			b.WriteByte('\'')
		}
		return true
	case interface{ BinaryValue() ([]byte, error) }:
		return false // lib/pq sends it in binary, with binary_parameters
	case driver.Valuer:
		// As database/sql converts it: the value it gives, NULL for a nil pointer
		// whose type gives values by value.
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Pointer && rv.IsNil() && rv.Type().Elem().Implements(valuerType) {
			return null(b)
		}
		dv, err := v.Value()
		if err != nil || !driver.IsValue(dv) {
			return false // sent with its arguments, database/sql says what is wrong
		}
		if _, again := dv.(driver.Valuer); again {
			return false
		}
		return literal(b, dv, cast)
	}
	var num [32]byte
	var digits []byte
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return quoted(b, rv.String())
	case reflect.Bool:
		digits = strconv.AppendBool(num[:0], rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		digits = strconv.AppendInt(num[:0], rv.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if rv.Uint() > math.MaxInt64 && rv.Kind() != reflect.Uint64 {
			return false // database/sql refuses it: let it say so
		}
		digits = strconv.AppendUint(num[:0], rv.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		digits = strconv.AppendFloat(num[:0], rv.Float(), 'f', -1, 64)
	case reflect.Pointer:
		// database/sql sends what it points to, or NULL.
		if rv.IsNil() {
			return null(b)
		}
		return literal(b, rv.Elem().Interface(), cast)
	default:
		return false
	}
	if b != nil {
		b.WriteByte('\'')
		b.Write(digits)
		b.WriteByte('\'')
	}
	return true
}

const hexDigits = "0123456789abcdef"

var valuerType = reflect.TypeFor[driver.Valuer]()

// null writes NULL to b, unless it is nil.
func null(b *strings.Builder) bool {
	if b != nil {
		b.WriteString("NULL")
	}
	return true
}

// quoted writes s to b (unless it is nil) as a '...' literal, or reports false for a
// string that needs other: see literal.
func quoted(b *strings.Builder, s string) bool {
	if strings.ContainsAny(s, "\\\x00") || !utf8.ValidString(s) {
		return false
	}
	if b != nil {
		b.WriteByte('\'')
		for {
			i := strings.IndexByte(s, '\'')
			if i < 0 {
				break
			}
			b.WriteString(s[:i+1])
			b.WriteByte('\'')
			s = s[i+1:]
		}
		b.WriteString(s)
		b.WriteByte('\'')
	}
	return true
}
