package sqlite

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mattn/go-sqlite3"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
)

// TranslateError maps a go-sqlite3 error to the refset sentinels, wrapping both; it
// is the one place this store reads driver codes. go-sqlite3's errors do not match
// errors.Is by code, so the extended code is compared. query is the statement that
// failed ("" when unknown): SQLite reports one code for every foreign key failure, and
// only the statement says whether a parent was missing or a child still refers to it.
func (db *DB) TranslateError(err error, query string) error {
	if err == nil || sqlstore.Translated(err) {
		return err
	}
	if db.closed.Load() {
		return fmt.Errorf("refset/sqlite: %w: %w", refset.ErrClosed, err)
	}
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.ExtendedCode {
	case sqlite3.ErrConstraintPrimaryKey, sqlite3.ErrConstraintUnique:
		return fmt.Errorf("refset/sqlite: %w: %w", refset.ErrDuplicate, err)
	case sqlite3.ErrConstraintForeignKey:
		return sqlstore.ForeignKeyError(err, query)
	case sqlite3.ErrConstraintTrigger:
		// An ON DELETE/UPDATE RESTRICT action refusing to remove a referenced parent
		// fails as a trigger (1811), not as a foreign key (787). RESTRICT only ever
		// guards the parent, so the direction is certain.
		if strings.Contains(se.Error(), "FOREIGN KEY") {
			return fmt.Errorf("refset/sqlite: %w: %w", refset.ErrReferenced, err)
		}
	}
	switch se.Code {
	case sqlite3.ErrBusy, sqlite3.ErrLocked:
		return fmt.Errorf("refset/sqlite: %w: %w", refset.ErrConflict, err)
	case sqlite3.ErrConstraint:
		return fmt.Errorf("refset/sqlite: %w: %w", refset.ErrConstraint, err)
	}
	return err
}
