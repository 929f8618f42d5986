package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mattn/go-sqlite3"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sqlstore"
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
		return sqlstore.TranslateConnError(err, "refset/sqlite")
	}
	wrap := func(sentinel error) error { return fmt.Errorf("refset/sqlite: %w: %w", sentinel, err) }
	switch se.ExtendedCode {
	case sqlite3.ErrConstraintPrimaryKey, sqlite3.ErrConstraintUnique:
		return wrap(refset.ErrDuplicate)
	case sqlite3.ErrConstraintForeignKey:
		return sqlstore.ForeignKeyError(err, query)
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
		// go-sqlite3 interrupts a statement whose context ended; refset adds the
		// context's own error.
		return fmt.Errorf("refset/sqlite: statement interrupted: %w: %w", context.Canceled, err)
	case sqlite3.ErrCantOpen, sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrNomem,
		sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrProtocol:
		// The file cannot be opened, read or written as a database.
		return wrap(refset.ErrUnavailable)
	case sqlite3.ErrError:
		// SQLite's generic code; its messages for a missing table or column are
		// stable, so those are told apart as the Postgres codes are.
		if msg := se.Error(); strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column") {
			return wrap(refset.ErrSchema)
		}
	}
	return wrap(refset.ErrStatement)
}
