package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
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
		return sqlstore.TranslateConnError(err, "refset/postgres")
	}
	code := se.SQLState()
	if len(code) != 5 {
		return sqlstore.TranslateConnError(err, "refset/postgres")
	}
	wrap := func(sentinel error) error { return fmt.Errorf("refset/postgres: %w: %w", sentinel, err) }
	switch code {
	case "23505": // unique_violation
		return wrap(refset.ErrDuplicate)
	case "23503": // foreign_key_violation
		// The server's detail says which side failed, even at a COMMIT that checks a
		// deferred constraint or in a CTE; lc_messages may translate it, and then the
		// statement's verb decides.
		detail := errorDetail(err)
		switch {
		case strings.Contains(detail, "is still referenced"):
			return wrap(refset.ErrReferenced)
		case strings.Contains(detail, "is not present"):
			return wrap(refset.ErrNotFound)
		}
		return sqlstore.ForeignKeyError(err, query)
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return wrap(refset.ErrConflict)
	case "55P03", "25P03", "57P05": // lock_not_available (lock_timeout, NOWAIT), idle_in_transaction_session_timeout, idle_session_timeout
		return wrap(refset.ErrTimeout)
	case "57014": // query_canceled
		// By the server's statement_timeout, or on request: the driver's, when the
		// statement's context ended (refset then adds the context's own error), or an
		// operator's pg_cancel_backend.
		if strings.Contains(err.Error(), "statement timeout") {
			return wrap(refset.ErrTimeout)
		}
		return fmt.Errorf("refset/postgres: statement cancelled: %w: %w", context.Canceled, err)
	case "57P01", "57P02", "57P03", "57P04": // admin_shutdown (also a terminated backend), crash_shutdown, cannot_connect_now, database_dropped
		return wrap(refset.ErrUnavailable)
	case "25P02": // in_failed_sql_transaction: a statement failed earlier and the caller went on
		return wrap(refset.ErrInvalidTx)
	case "42P01", "42703", "42704", "42883", "3F000": // undefined table, column, object, function; invalid schema name
		return wrap(refset.ErrSchema)
	}
	switch code[:2] {
	case "23": // integrity_constraint_violation: not null, check, exclusion, ...
		return wrap(refset.ErrConstraint)
	case "08", "53", "58": // connection_exception, insufficient_resources, system_error
		return wrap(refset.ErrUnavailable)
	case "28", "3D": // invalid_authorization_specification, invalid_catalog_name (no such database)
		return wrap(refset.ErrInvalidConfig)
	}
	return wrap(refset.ErrStatement)
}

// errorDetail is the server's DETAIL line of err, as lib/pq and pgx report it.
func errorDetail(err error) string {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return pe.Detail
	}
	var pgxe *pgconn.PgError
	if errors.As(err, &pgxe) {
		return pgxe.Detail
	}
	return err.Error()
}
