// Package sqltext reads SQL text as the databases do, one token at a time, without
// parsing it: string literals, quoted names, dollar quotes and comments are skipped
// whole, so what it finds (a statement's main keyword, a ? placeholder, a COMMIT) is
// never inside one of them.
package sqltext

import (
	"strconv"
	"strings"
)

// EndingStatement returns the leading keyword of the first statement in query that
// would begin or end a transaction (COMMIT, END, ROLLBACK but not ROLLBACK TO a
// savepoint, ABORT, BEGIN, START, PREPARE TRANSACTION), or "" if there is none. query
// may hold several statements separated by semicolons, as a driver's simple protocol
// runs them; the BEGIN ... END bodies of triggers and functions are skipped.
func EndingStatement(query string) string {
	l := lexer{src: query}
	for {
		words, more := l.statement()
		if v := ending(&words); v != "" {
			return v
		}
		if !more {
			return ""
		}
	}
}

// firstWords are a statement's first three words as written, "" past its end: an
// array, so that reading a statement allocates nothing (refset reads every
// statement a unit of work runs).
type firstWords [3]string

// is reports whether the statement's i-th word is keyword kw, in any case.
func (w *firstWords) is(i int, kw string) bool { return strings.EqualFold(w[i], kw) }

// ending judges a statement by its first three words.
func ending(w *firstWords) string {
	for _, kw := range [...]string{"COMMIT", "END", "ABORT", "BEGIN", "START"} {
		if w.is(0, kw) {
			return kw
		}
	}
	switch {
	case w.is(0, "ROLLBACK"):
		// ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name undoes part of the
		// transaction and keeps it open.
		next := 1
		if w.is(1, "WORK") || w.is(1, "TRANSACTION") {
			next = 2
		}
		if w.is(next, "TO") {
			return ""
		}
		return "ROLLBACK"
	case w.is(0, "PREPARE") && w.is(1, "TRANSACTION"):
		return "PREPARE TRANSACTION"
	}
	return ""
}

// statement reads up to the next semicolon outside a BEGIN/CASE ... END block and
// returns the statement's first three words and whether more follows.
func (l *lexer) statement() (words firstWords, more bool) {
	depth, n := 0, 0
	for {
		tok := l.next()
		switch tok.kind {
		case end:
			return words, false
		case ';':
			if depth == 0 {
				return words, true
			}
		case word:
			if n < len(words) {
				words[n] = tok.text
			}
			n++
			switch {
			case strings.EqualFold(tok.text, "BEGIN"):
				if n > 1 { // the statement BEGIN is not a block
					depth++
				}
			case strings.EqualFold(tok.text, "CASE"):
				depth++
			case strings.EqualFold(tok.text, "END"):
				depth = max(depth-1, 0)
			}
		}
	}
}

// Dollar rewrites the ? placeholders of query to Postgres's $1, $2, ... in order,
// leaving any ? inside a literal, a quoted name or a comment as it is. A query that
// already numbers its parameters ($1 outside literals and comments) is returned as it
// is: its ? are its own, PostgreSQL's jsonb operators ?, ?| and ?&, and a statement
// never mixes the two kinds of placeholders.
func Dollar(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	l := lexer{src: query}
	n, last := 0, 0
	for tok := l.next(); tok.kind != end; tok = l.next() {
		switch {
		case tok.kind == other && tok.text == "?":
			n++
			b.WriteString(query[last:tok.pos])
			b.WriteString("$" + strconv.Itoa(n))
			last = tok.pos + 1
		case isNumbered(tok):
			return query
		}
	}
	b.WriteString(query[last:])
	return b.String()
}

// isNumbered reports whether tok is a numbered parameter, $1.
func isNumbered(tok token) bool {
	return tok.kind == other && len(tok.text) > 1 && tok.text[0] == '$'
}

// SQLiteParams is how many arguments SQLite binds for query: for each statement in
// it, SQLite's count of its parameters (the largest index: ? takes the next one,
// ?NNN is NNN, and :name, @name and $name take the next one where the name first
// appears), summed, since go-sqlite3 runs a query's statements in turn, each with the
// arguments left after those of the statements before it. A ? in a literal, a quoted
// name or a comment is none.
func SQLiteParams(query string) int {
	l := lexer{src: query}
	total, largest, depth, words := 0, 0, 0, 0
	names := map[string]int{}
	for {
		tok := l.next()
		switch tok.kind {
		case end:
			return total + largest
		case ';':
			if depth == 0 {
				total, largest, words = total+largest, 0, 0
				clear(names)
			}
		case word:
			words++
			switch w := tok.text; {
			case (strings.EqualFold(w, "BEGIN") && words > 1) || strings.EqualFold(w, "CASE"):
				depth++
			case strings.EqualFold(w, "END"):
				depth = max(depth-1, 0)
			}
		case other:
			switch name := l.paramName(tok); {
			case tok.text == "?":
				digits := l.run(isDigit)
				if n, err := strconv.Atoi(digits); err == nil {
					largest = max(largest, n)
				} else {
					largest++
				}
			case name == "":
			case names[name] == 0:
				largest++
				names[name] = largest
			}
		}
	}
}

// paramName is the name of the SQLite parameter tok starts (":a", "@a", "$a"), read
// past, or "" if tok starts none.
func (l *lexer) paramName(tok token) string {
	switch {
	case tok.text == ":" || tok.text == "@" || tok.text == "$":
		if name := l.run(isParamPart); name != "" {
			return tok.text + name
		}
	case isNumbered(tok): // $1 is a name to SQLite
		return tok.text + l.run(isParamPart)
	}
	return ""
}

// run reads the bytes from l.pos for which ok holds and returns them.
func (l *lexer) run(ok func(byte) bool) string {
	start := l.pos
	for l.pos < len(l.src) && ok(l.src[l.pos]) {
		l.pos++
	}
	return l.src[start:l.pos]
}

func isParamPart(c byte) bool { return isWordStart(c) || isDigit(c) }
