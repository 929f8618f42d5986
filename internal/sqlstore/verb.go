package sqlstore

import (
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
)

// SQLite reports one code (787) for a foreign key refused in either direction, so the
// only way to tell "still referenced" from "refers to nothing" is the statement that
// tripped it. Users write that statement as they like: with comments, in lower case,
// behind a WITH clause. sqltext.Verb therefore reads past everything that comes before the
// main clause instead of taking the first word, so the same failure gets the same
// sentinel however the SQL is written.

// ForeignKeyError says what a refused foreign key means, from the statement that
// tripped it: a DELETE removes a row that is still referenced (refset.ErrReferenced);
// an INSERT, REPLACE or UPDATE writes a reference to a row that does not exist
// (refset.ErrNotFound). A write could also be refused for rewriting the key of a
// referenced row, which SQLite does not tell apart; refset's objects are immutable, so
// the write is taken to be the reference. Anything else (a COMMIT of a deferred
// constraint, a statement sqltext.Verb cannot read) is a plain refset.ErrConstraint.
// prefix starts the message ("refset/sqlite").
func ForeignKeyError(prefix string, err error, query string) error {
	switch sqltext.Verb(query) {
	case "DELETE":
		return sentinel.New(prefix, "", refset.ErrReferenced, err)
	case "INSERT", "REPLACE", "UPDATE":
		return sentinel.New(prefix, "", refset.ErrNotFound, err)
	}
	return sentinel.New(prefix, "", refset.ErrConstraint, err)
}
