package storesql

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PostgreSQL's limits on what a key keeps (see postgresStringCheck).
const (
	pgNameBytes       = 63     // NAMEDATALEN-1: name cuts a longer string short
	pgNumericIntegers = 131072 // the digits an unconstrained numeric keeps before its point
	pgNumericFraction = 16383  // and after it
)

// postgresStringCheck is k, the key type of a PostgreSQL column of type base(mod) as
// format_type writes it, with the check of each string ID it takes (see idCheck) if
// the column may store a string as another value, or compare it equal to another
// string, as PostgreSQL 15 does (store's TestKeysKeepStringIDs and this
// package's TestPostgresNumericSpelling check the rules against the server):
//
//   - numeric stores a string as the number it spells and reads it back as its
//     output function writes that number: "0012", "+12", " 12 ", "1e5", "-0" and
//     "12." read back "12", "12", "12", "100000", "0" and "12", "nan" reads back
//     "NaN", and numeric(p,s) writes exactly s fraction digits ("12" reads back
//     "12.00" in numeric(10,2)), rounding to them ("12.345" and "12.349" both read
//     back "12.35", one object); unconstrained it keeps trailing zeros ("12.0") but
//     holds "12.0" equal to "12". Only the spelling it writes is taken, one per
//     value (pgNumericSpelled); one it would refuse as too large for numeric(p,s),
//     or "Infinity" there, is refused before it is sent too.
//   - uuid reads back in lower case, with hyphens (8-4-4-4-12) and without braces:
//     only that spelling is taken.
//   - character(n) pads a shorter string with spaces, cuts the spaces off the end of
//     a longer one, and compares strings without their trailing spaces: only strings
//     of n characters are taken. bpchar (no length) keeps a string as written, but
//     compares "a " equal to "a": a string ending in a space is refused.
//   - character varying(n) cuts a longer string ending in spaces down to n
//     characters, silently (and refuses any other longer string): strings of more
//     than n characters are refused.
//   - name cuts a string past 63 bytes down to 63: those are refused.
//   - citext keeps a string as written but compares it by its lower case: "ABC"
//     would find "abc", and come back so. Only strings that are their own lower case
//     (strings.ToLower) are taken, of which no two are equal.
//
// A check counts characters as runes, as a UTF-8 database does. A string the server
// refuses itself (a NUL byte, invalid UTF-8, "abc" in numeric) is left to it: it
// fails the statement, changing nothing.
func postgresStringCheck(k KeyType, base, mod string) KeyType {
	size, sizeErr := strconv.Atoi(strings.TrimSpace(mod))
	if mod != "" && sizeErr != nil && base != "numeric" {
		size = -1 // not a length: refuse every string
	}
	switch base {
	case "text", "character varying", "varchar":
		if mod == "" {
			return k // keeps every string as written
		}
		k.changes = func(s string) bool { return size < 0 || utf8.RuneCountInString(s) > size }
		k.rewrites = fmt.Sprintf("cuts a longer string that ends in spaces down to %d characters, silently", size)
		k.instead = fmt.Sprintf("use IDs of at most %d characters, or declare the column text", size)
	case "character", "bpchar":
		if base == "character" && mod == "" {
			size = 1 // character is character(1)
		}
		if base == "bpchar" && mod == "" {
			k.changes = func(s string) bool { return strings.HasSuffix(s, " ") }
			k.rewrites = `compares strings without their trailing spaces: "a " would find the object "a"`
			k.instead = "declare the column text to keep every string ID as written, or use IDs that do not end in a space"
			break
		}
		k.changes = func(s string) bool { return size < 0 || utf8.RuneCountInString(s) != size }
		k.rewrites = fmt.Sprintf("pads a shorter string with spaces to %d characters and cuts the spaces off the end "+
			"of a longer one, and compares strings without their trailing spaces", size)
		k.instead = fmt.Sprintf("declare the column text to keep every string ID as written, or use IDs of exactly %d characters", size)
	case "name":
		k.changes = func(s string) bool { return len(s) > pgNameBytes }
		k.rewrites = fmt.Sprintf("cuts a string past %d bytes down to %d, silently", pgNameBytes, pgNameBytes)
		k.instead = fmt.Sprintf("declare the column text, or use IDs of at most %d bytes", pgNameBytes)
	case "uuid":
		k.changes = func(s string) bool { return !pgUUIDSpelled(s) }
		k.rewrites = "stores a string as the uuid it spells, which reads back in lower case with hyphens, 8-4-4-4-12, " +
			"without braces"
		k.instead = `write each ID so ("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), or declare the column text`
	case "numeric":
		p, sc, constrained, ok := pgNumericMod(mod)
		k.changes = func(s string) bool { return !ok || !pgNumericSpelled(s, constrained, p, sc) }
		k.rewrites = "stores a string as the number it spells, which reads back as PostgreSQL writes that number " +
			"(no sign '+', leading zeros, spaces or exponent, no negative zero, \"NaN\" and \"Infinity\" so spelled"
		if constrained && sc > 0 {
			k.rewrites += fmt.Sprintf(", exactly %d fraction digits, rounded to them", sc)
		} else if constrained && sc == 0 {
			k.rewrites += ", no fraction, rounded to a whole number"
		} else if constrained {
			k.rewrites += fmt.Sprintf(", no fraction, rounded to a multiple of 1%s", strings.Repeat("0", -sc))
		}
		if constrained {
			k.rewrites += fmt.Sprintf(", at most %d digits, no Infinity)", p)
		} else {
			k.rewrites += `), and holds a number equal however many zeros end its fraction ("12.0" is "12")`
		}
		k.instead = "declare the column text to keep every string ID as written, or write each ID as PostgreSQL writes its number"
		if constrained {
			k.instead += fmt.Sprintf(" (%q)", pgNumericExample(sc))
		}
	default: // citext, or schema.citext
		k.changes = func(s string) bool { return strings.ToLower(s) != s }
		k.rewrites = `compares strings by their lower case: "ABC" would find the object "abc", and read back so`
		k.instead = "use IDs that are their own lower case, or declare the column text"
	}
	return k
}

// pgNumericMod reads the typmod of a numeric column as format_type writes it: "" for
// none, or "p,s" (PostgreSQL 15 takes a scale below 0 or above p).
func pgNumericMod(mod string) (p, s int, constrained, ok bool) {
	if mod == "" {
		return 0, 0, false, true
	}
	ps, ss, found := strings.Cut(mod, ",")
	p, err := strconv.Atoi(strings.TrimSpace(ps))
	if found {
		var err2 error
		s, err2 = strconv.Atoi(strings.TrimSpace(ss))
		err = errors.Join(err, err2)
	}
	return p, s, true, err == nil && p > 0
}

// pgNumericExample is twelve as numeric(p,s) writes it.
func pgNumericExample(s int) string {
	switch {
	case s > 0:
		return "12." + strings.Repeat("0", s)
	case s < 0:
		return "1" + strings.Repeat("0", -s)
	}
	return "12"
}

// pgNumericSpelled reports whether s is a value of numeric, or of numeric(p,sc) when
// constrained, as PostgreSQL's numeric output writes it, so reads back as written:
// "NaN"; "Infinity" and "-Infinity" unconstrained (PostgreSQL 14 on); otherwise an
// optional '-', the integer digits without leading zeros ("0" for none), and the
// fraction after a '.' (never a bare "1."), which in numeric(p,sc) has exactly sc
// digits (none for sc <= 0, the last -sc integer digits then 0) of which, with the
// integer digits, at most p are significant, as numeric(p,sc) holds; never "-0".
// Unconstrained, numeric keeps the fraction as written, trailing zeros too ("1.50"
// reads back "1.50"), but holds "1.5", "1.50" and "1.500" equal, one key: only the
// spelling without trailing zeros is taken ("1.5", "12"), one per value; and
// PostgreSQL's own limits apply (131072 integer digits, 16383 in the fraction): it
// refuses a longer one.
func pgNumericSpelled(s string, constrained bool, p, sc int) bool {
	if s == "NaN" || !constrained && (s == "Infinity" || s == "-Infinity") {
		return true
	}
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	integer, fraction, dot := strings.Cut(s, ".")
	if !allDigits(integer) || integer == "" || len(integer) > 1 && integer[0] == '0' ||
		dot && (fraction == "" || !allDigits(fraction)) {
		return false
	}
	zero := strings.Trim(integer+fraction, "0") == ""
	switch {
	case neg && zero:
		return false
	case !constrained:
		return !strings.HasSuffix(fraction, "0") && len(integer) <= pgNumericIntegers && len(fraction) <= pgNumericFraction
	case sc > 0 && len(fraction) != sc, sc <= 0 && dot:
		return false
	case zero:
		return true
	case sc < 0:
		if !strings.HasSuffix(integer, strings.Repeat("0", -sc)) {
			return false
		}
		integer = integer[:len(integer)+sc]
	}
	return len(strings.TrimLeft(integer+fraction, "0")) <= p
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// pgUUIDSpelled reports whether s is a uuid as PostgreSQL writes it: 32 lower-case
// hexadecimal digits, in groups of 8, 4, 4, 4 and 12 split by hyphens.
func pgUUIDSpelled(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
