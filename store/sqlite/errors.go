package sqlite

import (
	"database/sql"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
)

// TranslateError maps an error of either driver (go-sqlite3, modernc.org/sqlite) to
// the refset sentinels, wrapping both; it is the one place this store reads driver
// codes. Both drivers report SQLite's own result codes, so one switch on them maps
// both alike. query is the statement that failed ("" when unknown): SQLite reports one
// code for every foreign key failure, and only the statement says whether a parent was
// missing or a child still refers to it.
func (db *DB) TranslateError(err error, query string) error {
	return engine.TranslateError(db.storeEngine, err, query, translateError)
}

func translateError(err error, query string) error {
	if err == nil || sqlstore.Translated(err) {
		return err
	}
	code, msg, ok := resultCode(err)
	if !ok {
		return sqlstore.TranslateConnError(err, msgPrefix)
	}
	return translateCode(err, code, msg, query)
}

// translateCode is translateError of a driver's error err that carries SQLite's
// result code and message.
func translateCode(err error, code int, msg, query string) error {
	wrap := func(s error) error { return sentinel.New(msgPrefix, "", s, err) }
	switch code {
	case codeConstraintPrimaryKey, codeConstraintUnique:
		return wrap(refset.ErrDuplicate)
	case codeConstraintForeignKey:
		return sqlstore.ForeignKeyError(msgPrefix, err, query)
	case codeConstraintDataType:
		// A STRICT table refusing a value of the wrong type: Postgres refuses it as a
		// statement (invalid input, SQLSTATE 22P02), not as a constraint.
		return wrap(refset.ErrStatement)
	case codeConstraintTrigger:
		// An ON DELETE/UPDATE RESTRICT action refusing to remove a referenced parent
		// fails as a trigger (1811), not as a foreign key (787). RESTRICT only ever
		// guards the parent, so the direction is certain.
		if strings.Contains(msg, "FOREIGN KEY") {
			return wrap(refset.ErrReferenced)
		}
	}
	switch code & 0xff { // the primary code
	case codeBusy, codeLocked:
		return wrap(refset.ErrConflict)
	case codeConstraint:
		return wrap(refset.ErrConstraint)
	case codeReadOnly:
		// The database refused a write: it was opened read-only, or the process may
		// not write its file, or its directory, where SQLite creates the -wal and
		// -shm files. The setup's mistake, not the statement's.
		return sentinel.New(msgPrefix, "", refset.ErrInvalidConfig, &readOnlyError{err})
	case codeInterrupt:
		// A driver interrupts a statement whose context ended; refset learns from
		// the context whether its deadline or a cancel did it.
		return sentinel.Wrap(msgPrefix, "", ctxerr.Interrupted(err))
	case codeCantOpen, codeIOErr, codeFull, codeNoMem, codeNotADB, codeCorrupt, codeProtocol:
		// The file cannot be opened, read or written as a database.
		return wrap(refset.ErrUnavailable)
	case codeError:
		// SQLite's generic code; its messages for a name the schema lacks are
		// stable, so those are told apart as the Postgres codes are (undefined table,
		// column, function, object).
		if undefined(msg) {
			return wrap(refset.ErrSchema)
		}
	}
	return wrap(refset.ErrStatement)
}

// SQLite's result codes (sqlite3.h), primary and extended (primary | n<<8), which
// neither driver names all of and both report.
const (
	codeError      = 1
	codeBusy       = 5
	codeLocked     = 6
	codeNoMem      = 7
	codeReadOnly   = 8
	codeInterrupt  = 9
	codeIOErr      = 10
	codeCorrupt    = 11
	codeFull       = 13
	codeCantOpen   = 14
	codeProtocol   = 15
	codeConstraint = 19
	codeMismatch   = 20
	codeNotADB     = 26

	codeConstraintNotNull    = codeConstraint | 5<<8
	codeConstraintForeignKey = codeConstraint | 3<<8
	codeConstraintPrimaryKey = codeConstraint | 6<<8
	codeConstraintTrigger    = codeConstraint | 7<<8
	codeConstraintUnique     = codeConstraint | 8<<8
	codeConstraintDataType   = codeConstraint | 12<<8
)

// readOnlyError is a driver's SQLITE_READONLY, saying what SQLite's words ("attempt
// to write a readonly database") leave out: what may be read-only.
type readOnlyError struct{ err error }

func (e *readOnlyError) Error() string {
	return "the database is read-only (opened ReadOnly, or its file or its directory, where SQLite keeps the -wal " +
		"and -shm files, may not be written): " + e.err.Error()
}

func (e *readOnlyError) Unwrap() error { return e.err }

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
