package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/refset"
)

// sqlStater is implemented by lib/pq's and pgx's errors alike.
type sqlStater interface{ SQLState() string }

// TranslateError maps a Postgres error to the refset sentinels by SQLSTATE, wrapping
// both; it is the one place this store reads driver codes.
func (db *DB) TranslateError(err error, query string) error {
	return engine.TranslateError(db.storeEngine, err, query, translateError)
}

func translateError(err error, query string) error {
	if err == nil || sqlstore.Translated(err) {
		return err
	}
	var se sqlStater
	if !errors.As(err, &se) || len(se.SQLState()) != 5 {
		return sqlstore.TranslateConnError(err, "refset/postgres")
	}
	code := se.SQLState()
	wrap := func(sentinel error) error { return fmt.Errorf("refset/postgres: %w: %w", sentinel, err) }
	switch code {
	case codeUniqueViolation:
		return wrap(refset.ErrDuplicate)
	case codeForeignKeyViolation:
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
	case codeSerializationFailure, codeDeadlockDetected:
		return wrap(refset.ErrConflict)
	case codeLockNotAvailable, codeIdleInTransactionTimeout, codeIdleSessionTimeout:
		return wrap(refset.ErrTimeout)
	case codeQueryCanceled:
		// By the server's statement_timeout, or on request: the driver's, when the
		// statement's context ended (refset then adds the context's own error), or an
		// operator's pg_cancel_backend.
		if strings.Contains(err.Error(), "statement timeout") {
			return wrap(refset.ErrTimeout)
		}
		return fmt.Errorf("refset/postgres: statement cancelled: %w: %w", context.Canceled, err)
	case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeDatabaseDropped:
		return wrap(refset.ErrUnavailable)
	case codeInFailedSQLTransaction: // a statement failed earlier and the caller went on
		return wrap(refset.ErrInvalidTx)
	case codeUndefinedTable, codeUndefinedColumn, codeUndefinedObject, codeUndefinedFunction, codeInvalidSchemaName:
		return wrap(refset.ErrSchema)
	case codeFeatureNotSupported:
		// "cached plan must not change result type": a statement prepared before a
		// migration changed a column it returns. refset runs the unit of work once
		// more, and the statement is prepared anew (see stmtcache.ErrStale).
		return fmt.Errorf("refset/postgres: %w: %w", refset.ErrStatement, stmtcache.MarkStale(err))
	}
	switch code[:2] {
	case classIntegrityConstraint: // not null, check, exclusion, ...
		return wrap(refset.ErrConstraint)
	case classConnectionException, classInsufficientResource, classSystemError:
		return wrap(refset.ErrUnavailable)
	case classInvalidAuthorization, classInvalidCatalogName:
		return wrap(refset.ErrInvalidConfig)
	}
	return wrap(refset.ErrStatement)
}

// isStalePlan reports whether err is how Postgres refuses a prepared statement whose
// result type changed since it was prepared: the statement cache then forgets it.
func isStalePlan(err error) bool {
	var se sqlStater
	return errors.As(err, &se) && se.SQLState() == codeFeatureNotSupported
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
