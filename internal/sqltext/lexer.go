package sqltext

import "strings"

// A token is a word (a keyword or an unquoted name), a quoted name or string, or one
// punctuation character, which is its own kind.
type token struct {
	kind rune
	text string
	pos  int // where text starts in the source
}

const (
	end    rune = 0  // no more tokens
	word   rune = -1 // letters, digits, _ and $, not starting with a digit or $
	quoted rune = -2 // '...', "...", `...`, [...], E'...', $tag$...$tag$
	other  rune = -3 // a number, an operator, a $1 parameter
)

// lexer splits SQL into tokens as both dialects do, as far as Verb needs: it knows
// where comments, strings and quoted names end, so their content is never read as
// keywords or parentheses.
type lexer struct {
	src string
	pos int
}

func (l *lexer) next() token {
	l.skipSpaceAndComments()
	start := l.pos
	tok := l.read()
	tok.pos = start
	return tok
}

// read reads the token at l.pos, past any space and comments.
func (l *lexer) read() token {
	if l.pos >= len(l.src) {
		return token{kind: end}
	}
	start, c := l.pos, l.src[l.pos]
	switch {
	case c == '\'' || c == '"' || c == '`':
		l.skipQuoted(c, c, false)
		return token{kind: quoted, text: l.src[start:l.pos]}
	case c == '[':
		l.skipQuoted('[', ']', false)
		return token{kind: quoted, text: l.src[start:l.pos]}
	case (c == 'E' || c == 'e') && l.at(l.pos+1) == '\'':
		// Postgres's escape string: a backslash escapes the quote.
		l.pos++
		l.skipQuoted('\'', '\'', true)
		return token{kind: quoted, text: l.src[start:l.pos]}
	case c == '$':
		if l.skipDollarQuoted() {
			return token{kind: quoted, text: l.src[start:l.pos]}
		}
		l.pos++
		for l.pos < len(l.src) && isDigit(l.src[l.pos]) {
			l.pos++
		}
		return token{kind: other, text: l.src[start:l.pos]}
	case isWordStart(c):
		for l.pos < len(l.src) && isWordPart(l.src[l.pos]) {
			l.pos++
		}
		return token{kind: word, text: l.src[start:l.pos]}
	case c == '(' || c == ')' || c == ',' || c == ';':
		l.pos++
		return token{kind: rune(c), text: l.src[start:l.pos]}
	}
	l.pos++
	return token{kind: other, text: l.src[start:l.pos]}
}

// at is the byte at i, or 0 past the end.
func (l *lexer) at(i int) byte {
	if i < len(l.src) {
		return l.src[i]
	}
	return 0
}

func (l *lexer) skipSpaceAndComments() {
	for l.pos < len(l.src) {
		switch c := l.src[l.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.pos++
		case c == '-' && l.at(l.pos+1) == '-':
			nl := strings.IndexByte(l.src[l.pos:], '\n')
			if nl < 0 {
				l.pos = len(l.src)
				return
			}
			l.pos += nl + 1
		case c == '/' && l.at(l.pos+1) == '*':
			l.skipBlockComment()
		default:
			return
		}
	}
}

// skipBlockComment skips a /* */ comment, nested as Postgres nests them (SQLite ends
// it at the first */, and then fails to parse what follows, so nothing ran).
func (l *lexer) skipBlockComment() {
	depth := 0
	for l.pos < len(l.src) {
		switch {
		case l.src[l.pos] == '/' && l.at(l.pos+1) == '*':
			depth++
			l.pos += 2
		case l.src[l.pos] == '*' && l.at(l.pos+1) == '/':
			depth--
			l.pos += 2
			if depth == 0 {
				return
			}
		default:
			l.pos++
		}
	}
}

// skipQuoted skips from the opening quote at l.pos past the closing one. A doubled
// closing quote stands for itself; with backslash, so does an escaped one.
func (l *lexer) skipQuoted(open, close byte, backslash bool) {
	l.pos++ // the opening quote
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case backslash && c == '\\':
			l.pos += 2
		case c == close && open == close && l.at(l.pos+1) == close:
			l.pos += 2
		case c == close:
			l.pos++
			return
		default:
			l.pos++
		}
	}
	l.pos = min(l.pos, len(l.src))
}

// skipDollarQuoted skips a Postgres dollar-quoted string ($$...$$ or $tag$...$tag$)
// starting at l.pos, and reports whether there was one.
func (l *lexer) skipDollarQuoted() bool {
	i := l.pos + 1
	for i < len(l.src) && isWordPart(l.src[i]) && l.src[i] != '$' {
		i++
	}
	if i >= len(l.src) || l.src[i] != '$' || (i > l.pos+1 && isDigit(l.src[l.pos+1])) {
		return false
	}
	tag := l.src[l.pos : i+1]
	closing := strings.Index(l.src[i+1:], tag)
	if closing < 0 {
		l.pos = len(l.src)
	} else {
		l.pos = i + 1 + closing + len(tag)
	}
	return true
}

// skipParens skips to just past the parenthesis that closes the one just read.
func (l *lexer) skipParens() {
	for depth := 1; depth > 0; {
		switch l.next().kind {
		case '(':
			depth++
		case ')':
			depth--
		case end:
			return
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isWordStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
func isWordPart(c byte) bool { return isWordStart(c) || isDigit(c) || c == '$' }
