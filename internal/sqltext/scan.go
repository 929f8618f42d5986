// Package sqltext reads SQL text as the database would, one token at a time, without
// parsing it: string literals, quoted identifiers, dollar quotes and comments are
// skipped, so what it finds (a statement's first keyword, a ? placeholder) is never
// inside one of them.
package sqltext

import (
	"strconv"
	"strings"
)

// EndingStatement returns the leading keyword of the first statement in query that
// would begin or end a transaction (COMMIT, END, ROLLBACK but not ROLLBACK TO a
// savepoint, ABORT, BEGIN, START, PREPARE TRANSACTION), or "" if there is none. query
// may hold several statements separated by semicolons, as a driver's simple protocol
// runs them; string literals, quoted identifiers, dollar quotes and comments are
// skipped, and so are the BEGIN ... END bodies of triggers and functions.
func EndingStatement(query string) string {
	sc := scanner{src: query}
	for {
		words, more := sc.statement()
		if v := ending(words); v != "" {
			return v
		}
		if !more {
			return ""
		}
	}
}

// ending judges a statement by its first three words, upper-cased.
func ending(w []string) string {
	if len(w) == 0 {
		return ""
	}
	switch w[0] {
	case "COMMIT", "END", "ABORT", "BEGIN", "START":
		return w[0]
	case "ROLLBACK":
		// ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name undoes part of the
		// transaction and keeps it open.
		rest := w[1:]
		if len(rest) > 0 && (rest[0] == "WORK" || rest[0] == "TRANSACTION") {
			rest = rest[1:]
		}
		if len(rest) > 0 && rest[0] == "TO" {
			return ""
		}
		return "ROLLBACK"
	case "PREPARE":
		if len(w) > 1 && w[1] == "TRANSACTION" {
			return "PREPARE TRANSACTION"
		}
	}
	return ""
}

// Dollar rewrites the ? placeholders of query to Postgres's $1, $2, ... in order,
// leaving any ? inside a literal, a quoted identifier or a comment as it is.
func Dollar(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	sc := scanner{src: query}
	n, last := 0, 0
	sc.onPlaceholder = func(pos int) {
		n++
		b.WriteString(query[last:pos])
		b.WriteString("$" + strconv.Itoa(n))
		last = pos + 1
	}
	for {
		if _, more := sc.statement(); !more {
			break
		}
	}
	b.WriteString(query[last:])
	return b.String()
}

// scanner walks SQL text one statement at a time.
type scanner struct {
	src string
	pos int
	// onPlaceholder, if set, is told where each ? outside quotes and comments is.
	onPlaceholder func(pos int)
}

// statement reads up to the next top-level semicolon and returns the statement's
// first three words, upper-cased, and whether more text follows.
func (s *scanner) statement() (words []string, more bool) {
	depth := 0 // BEGIN/CASE ... END blocks inside the statement
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case c == ';' && depth == 0:
			s.pos++
			return words, true
		case c == '-' && s.peek(1) == '-':
			s.skipLine()
		case c == '/' && s.peek(1) == '*':
			s.skipBlockComment()
		case c == '\'':
			escapes := s.pos > 0 && (s.src[s.pos-1] == 'E' || s.src[s.pos-1] == 'e')
			s.skipQuoted('\'', escapes)
		case c == '"':
			s.skipQuoted('"', false)
		case c == '`':
			s.skipQuoted('`', false)
		case c == '[':
			s.skipTo(']')
		case c == '$' && s.dollarTag() != "":
			s.skipDollarQuoted()
		case c == '?' && s.onPlaceholder != nil:
			s.onPlaceholder(s.pos)
			s.pos++
		case isWordStart(c):
			w := strings.ToUpper(s.word())
			if len(words) < 3 {
				words = append(words, w)
			}
			if len(words) > 1 || w != "BEGIN" {
				switch w {
				case "BEGIN", "CASE":
					depth++
				case "END":
					if depth > 0 {
						depth--
					}
				}
			}
		default:
			s.pos++
		}
	}
	return words, false
}

func (s *scanner) peek(n int) byte {
	if s.pos+n < len(s.src) {
		return s.src[s.pos+n]
	}
	return 0
}

func isWordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isWordPart(c byte) bool { return isWordStart(c) || c >= '0' && c <= '9' || c == '$' }

func (s *scanner) word() string {
	start := s.pos
	for s.pos < len(s.src) && isWordPart(s.src[s.pos]) {
		s.pos++
	}
	return s.src[start:s.pos]
}

func (s *scanner) skipLine() {
	if i := strings.IndexByte(s.src[s.pos:], '\n'); i >= 0 {
		s.pos += i + 1
	} else {
		s.pos = len(s.src)
	}
}

// skipBlockComment skips a /* */ comment; Postgres lets them nest.
func (s *scanner) skipBlockComment() {
	depth := 0
	for s.pos < len(s.src) {
		switch {
		case s.src[s.pos] == '/' && s.peek(1) == '*':
			depth++
			s.pos += 2
		case s.src[s.pos] == '*' && s.peek(1) == '/':
			depth--
			s.pos += 2
			if depth == 0 {
				return
			}
		default:
			s.pos++
		}
	}
}

// skipQuoted skips a literal or identifier quoted by q, where a doubled q stands for
// itself (and a backslash escapes the next byte in a Postgres E'...' string).
func (s *scanner) skipQuoted(q byte, backslash bool) {
	s.pos++
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case backslash && c == '\\':
			s.pos += 2
		case c == q && s.peek(1) == q:
			s.pos += 2
		case c == q:
			s.pos++
			return
		default:
			s.pos++
		}
	}
}

func (s *scanner) skipTo(end byte) {
	if i := strings.IndexByte(s.src[s.pos+1:], end); i >= 0 {
		s.pos += i + 2
	} else {
		s.pos = len(s.src)
	}
}

// dollarTag is the $tag$ opening a dollar-quoted string at the scanner's position, or
// "" if there is none ($1 is a placeholder: a tag does not start with a digit).
func (s *scanner) dollarTag() string {
	rest := s.src[s.pos+1:]
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '$':
			return s.src[s.pos : s.pos+i+2]
		case c >= '0' && c <= '9' && i == 0, !isWordStart(c) && !(c >= '0' && c <= '9'):
			return ""
		}
	}
	return ""
}

func (s *scanner) skipDollarQuoted() {
	tag := s.dollarTag()
	s.pos += len(tag)
	if i := strings.Index(s.src[s.pos:], tag); i >= 0 {
		s.pos += i + len(tag)
	} else {
		s.pos = len(s.src)
	}
}
