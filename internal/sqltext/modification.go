package sqltext

// Modification is query cut after its last token (what follows, semicolons, space
// and comments, dropped) when query is one INSERT, UPDATE or DELETE statement that
// begins with its verb and has no RETURNING clause: a statement that Postgres takes
// as the body of a data-modifying common table expression once RETURNING is written
// after it, and whose RETURNING rows are then the rows it affected. ok is false for
// any other query: a SELECT, a MERGE, several statements, a WITH prefix (whose own
// data-modifying expressions could not be nested), any RETURNING (even one in
// parentheses: the reader does not tell a subquery's from the statement's).
func Modification(query string) (body string, ok bool) {
	l := lexer{src: query}
	tok := l.next()
	if !isKeyword(tok, "INSERT") && !isKeyword(tok, "UPDATE") && !isKeyword(tok, "DELETE") {
		return "", false
	}
	last := tok.pos + len(tok.text)
	for {
		tok = l.next()
		switch {
		case tok.kind == end:
			return query[:last], true
		case tok.kind == ';':
			// Only more semicolons, space and comments may follow.
			for tok = l.next(); tok.kind == ';'; tok = l.next() {
			}
			if tok.kind != end {
				return "", false
			}
			return query[:last], true
		case isKeyword(tok, "RETURNING"):
			return "", false
		}
		last = tok.pos + len(tok.text)
	}
}
