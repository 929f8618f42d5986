package sqltext

import (
	"strconv"
	"strings"
)

// Inline writes query, a PostgreSQL statement with $1, $2, ... parameters, to b with
// each parameter replaced by what literal(b, n, cast) writes: the SQL of the n-th
// argument's value, given cast, the type the statement casts the parameter to right
// after it ($1::bytea: "bytea", lower case; "" for none). With b nil, nothing is
// written, and Inline only tells whether it would succeed (literal is then given nil
// too). ok is false, and the statement is to be sent with its arguments instead, when
// literal refuses one, or when the query holds anything this reader might split
// otherwise than the server does:
//
//   - a backslash, anywhere: with standard_conforming_strings off a server reads one
//     in a '...' string as an escape, so where that string ends depends on a setting;
//   - a carriage return, which ends a -- comment for the server and not here;
//   - [ or `, which this package's lexer reads as SQLite's quotes and Postgres does not.
//
// Everything else (strings with doubled quotes, quoted names, dollar quotes, nested
// comments) is read as the server reads it, so a parameter is replaced only where the
// server would see one, and the literal, whatever it holds, cannot end a string or
// a comment the statement opened. Each literal stands between spaces, so that it
// joins no neighbouring token. On failure, b may hold part of the statement.
func Inline(b *strings.Builder, query string, literal func(b *strings.Builder, n int, cast string) bool) (ok bool) {
	if strings.ContainsAny(query, "\\\r[`") {
		return false
	}
	l := lexer{src: query}
	last := 0
	for tok := l.next(); tok.kind != end; tok = l.next() {
		if !isNumbered(tok) {
			continue
		}
		n, err := strconv.Atoi(tok.text[1:])
		if err != nil || n < 1 {
			return false
		}
		if b != nil {
			b.WriteString(query[last:tok.pos])
			b.WriteByte(' ')
		}
		if !literal(b, n, castAfter(query, tok.pos+len(tok.text))) {
			return false
		}
		if b != nil {
			b.WriteByte(' ')
		}
		last = tok.pos + len(tok.text)
	}
	if b != nil {
		b.WriteString(query[last:])
	}
	return true
}

// castAfter is the type name of a cast written at i (::name, space allowed around
// the ::), in lower case, or "".
func castAfter(query string, i int) string {
	l := lexer{src: query, pos: i}
	if tok := l.next(); tok.text != ":" || l.at(l.pos) != ':' {
		return ""
	}
	l.pos++
	tok := l.next()
	if tok.kind != word {
		return ""
	}
	return strings.ToLower(tok.text)
}
