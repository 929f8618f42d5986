package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/mattn/go-sqlite3"
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
)

// TranslateError maps a go-sqlite3 error to the refset sentinels, wrapping both; it
// is the one place this store reads driver codes. go-sqlite3's errors do not match
// errors.Is by code, so the extended code is compared. query is the statement that
// failed ("" when unknown): SQLite reports one code for every foreign key failure, and
// only the statement says whether a parent was missing or a child still refers to it.
func (db *DB) TranslateError(err error, query string) error {
	return engine.TranslateError(db.storeEngine, err, query, translateError)
}

func translateError(err error, query string) error {
	if err == nil || sqlstore.Translated(err) {
		return err
	}
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return sqlstore.TranslateConnError(err, msgPrefix)
	}
	wrap := func(s error) error { return sentinel.New(msgPrefix, "", s, err) }
	switch se.ExtendedCode {
	case sqlite3.ErrConstraintPrimaryKey, sqlite3.ErrConstraintUnique:
		return wrap(refset.ErrDuplicate)
	case sqlite3.ErrConstraintForeignKey:
		return sqlstore.ForeignKeyError(msgPrefix, err, query)
	case errConstraintDataType:
		// A STRICT table refusing a value of the wrong type: Postgres refuses it as a
		// statement (invalid input, SQLSTATE 22P02), not as a constraint.
		return wrap(refset.ErrStatement)
	case sqlite3.ErrConstraintTrigger:
		// An ON DELETE/UPDATE RESTRICT action refusing to remove a referenced parent
		// fails as a trigger (1811), not as a foreign key (787). RESTRICT only ever
		// guards the parent, so the direction is certain.
		if strings.Contains(se.Error(), "FOREIGN KEY") {
			return wrap(refset.ErrReferenced)
		}
	}
	switch se.Code {
	case sqlite3.ErrBusy, sqlite3.ErrLocked:
		return wrap(refset.ErrConflict)
	case sqlite3.ErrConstraint:
		return wrap(refset.ErrConstraint)
	case sqlite3.ErrInterrupt:
		// go-sqlite3 interrupts a statement whose context ended; refset learns from
		// the context whether its deadline or a cancel did it.
		return sentinel.Wrap(msgPrefix, "", ctxerr.Interrupted(err))
	case sqlite3.ErrCantOpen, sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrNomem,
		sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrProtocol:
		// The file cannot be opened, read or written as a database.
		return wrap(refset.ErrUnavailable)
	case sqlite3.ErrError:
		// SQLite's generic code; its messages for a name the schema lacks are
		// stable, so those are told apart as the Postgres codes are (undefined table,
		// column, function, object).
		if undefined(se.Error()) {
			return wrap(refset.ErrSchema)
		}
	}
	return wrap(refset.ErrStatement)
}

// checkArgs refuses a statement given another number of arguments than SQLite binds
// for it: go-sqlite3 refuses too few, but runs a statement given too many and drops
// the rest, where PostgreSQL refuses the statement. The same mistake then fails the
// same way on both stores. Named arguments (sql.Named) are bound by name, and left to
// the driver.
func checkArgs(query string, args []any) error {
	for _, a := range args {
		if _, named := a.(sql.NamedArg); named {
			return nil
		}
	}
	if n := sqltext.SQLiteParams(query); n != len(args) {
		return sentinel.New(msgPrefix, "", refset.ErrStatement, fmt.Errorf("the statement has %d parameters, given %d arguments", n, len(args)))
	}
	return nil
}

// errConstraintDataType is SQLITE_CONSTRAINT_DATATYPE, which go-sqlite3 does not name.
var errConstraintDataType = sqlite3.ErrConstraint.Extend(12)

// msgPrefix starts the messages of this store's errors.
const msgPrefix = "refset/sqlite"

// undefinedNames are how SQLite says a statement names what the schema lacks: a
// table, a column (in an expression, or in an INSERT's list of columns), a function,
// an index, a view, a trigger, a collation.
var undefinedNames = []string{
	"no such table", "no such column", "has no column named", "no such function",
	"no such index", "no such view", "no such trigger", "no such collation sequence",
}

func undefined(msg string) bool {
	for _, s := range undefinedNames {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
