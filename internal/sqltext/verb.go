package sqltext

import "strings"

// Verb is the keyword of the statement's main clause, upper-cased ("INSERT",
// "DELETE", "REPLACE" for SQLite's REPLACE INTO), or "" when there is none. It skips
// whitespace, -- and /* */ comments, opening parentheses and a WITH [RECURSIVE]
// prefix of common table expressions, whose bodies may hold any SQL. Only the first
// statement of a query counts.
func Verb(query string) string {
	l := lexer{src: query}
	tok := l.next()
	for tok.kind == '(' {
		tok = l.next()
	}
	if tok.kind == word && strings.EqualFold(tok.text, "WITH") {
		tok = l.skipWith()
	}
	if tok.kind != word {
		return ""
	}
	return strings.ToUpper(tok.text)
}

// skipWith reads the common table expressions after WITH and returns the token that
// follows them, the main clause's keyword in a valid statement:
//
//	WITH [RECURSIVE] name [(columns)] AS [NOT] [MATERIALIZED] (body)
//	     [SEARCH ... | CYCLE ...], ...
func (l *lexer) skipWith() token {
	tok := l.next()
	if isKeyword(tok, "RECURSIVE") {
		tok = l.next()
	}
	for {
		if tok.kind != word && tok.kind != quoted { // the table's name
			return token{}
		}
		tok = l.next()
		if tok.kind == '(' { // its column names
			l.skipParens()
			tok = l.next()
		}
		if !isKeyword(tok, "AS") {
			return token{}
		}
		tok = l.next()
		if isKeyword(tok, "NOT") {
			tok = l.next()
		}
		if isKeyword(tok, "MATERIALIZED") {
			tok = l.next()
		}
		if tok.kind != '(' {
			return token{}
		}
		l.skipParens()
		tok = l.next()
		// Postgres's SEARCH and CYCLE clauses hold no parentheses and none of the
		// keywords that start a main clause.
		for isKeyword(tok, "SEARCH") || isKeyword(tok, "CYCLE") {
			for tok.kind != end && tok.kind != ',' && !mainClause(tok) {
				tok = l.next()
			}
		}
		if tok.kind != ',' {
			return tok
		}
		tok = l.next()
	}
}

// mainClause reports whether tok starts a statement that may follow a WITH prefix.
func mainClause(tok token) bool {
	for _, kw := range []string{"SELECT", "INSERT", "REPLACE", "UPDATE", "DELETE", "VALUES", "MERGE"} {
		if isKeyword(tok, kw) {
			return true
		}
	}
	return false
}

func isKeyword(tok token, kw string) bool {
	return tok.kind == word && strings.EqualFold(tok.text, kw)
}
