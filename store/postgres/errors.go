package postgres

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lib/pq"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
)

// sqlStater is implemented by lib/pq's and pgx's errors alike.
type sqlStater interface{ SQLState() string }

// TranslateError maps a Postgres error to the refset sentinels by SQLSTATE, wrapping
// both; it is the one place this store reads driver codes.
func (db *DB) TranslateError(err error, query string) error {
	if err != nil && !sqlstore.Translated(err) && db.closed.Load() {
		return fmt.Errorf("refset/postgres: %w: %w", refset.ErrClosed, err)
	}
	return translateError(err, query)
}

func translateError(err error, query string) error {
	if err == nil || sqlstore.Translated(err) {
		return err
	}
	var se sqlStater
	if !errors.As(err, &se) {
		return err
	}
	switch code := se.SQLState(); code {
	case "23505": // unique_violation
		return fmt.Errorf("refset/postgres: %w: %w", refset.ErrDuplicate, err)
	case "23503": // foreign_key_violation
		// The server's detail says which side failed, even at a COMMIT that checks a
		// deferred constraint or in a CTE; lc_messages may translate it, and then the
		// statement's verb decides.
		detail := errorDetail(err)
		switch {
		case strings.Contains(detail, "is still referenced"):
			return fmt.Errorf("refset/postgres: %w: %w", refset.ErrReferenced, err)
		case strings.Contains(detail, "is not present"):
			return fmt.Errorf("refset/postgres: %w: %w", refset.ErrNotFound, err)
		}
		return sqlstore.ForeignKeyError(err, query)
	case "40001", "40P01", "55P03": // serialization_failure, deadlock_detected, lock_not_available
		return fmt.Errorf("refset/postgres: %w: %w", refset.ErrConflict, err)
	case "23502", "23514", "23P01": // not_null, check, exclusion
		return fmt.Errorf("refset/postgres: %w: %w", refset.ErrConstraint, err)
	}
	return err
}

func errorDetail(err error) string {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return pe.Detail
	}
	return err.Error()
}
