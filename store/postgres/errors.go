package postgres

import (
	"cmp"
	"errors"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
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
	if pgconn.Timeout(err) && driversOwn(err) {
		// pgx's word for a statement its context cut short ("timeout: context
		// deadline exceeded"): said as every driver's is.
		return sentinel.Wrap(msgPrefix, "", ctxerr.Interrupted(err))
	}
	if _, ok := err.(*cutOff); ok {
		// A lib/pq call whose server had not answered a second after its context
		// ended (watch.go): it matches the context's error, and is said as every
		// driver's is.
		return sentinel.Wrap(msgPrefix, "", err)
	}
	if err == nil || sqlstore.Translated(err) {
		return err
	}
	err = batchError(err)
	if errors.Is(err, pgconn.ErrConnClosed) {
		// pgx's word for a connection it had closed, after losing it.
		return sentinel.New(msgPrefix, "", refset.ErrUnavailable, err)
	}
	if errors.Is(err, pq.ErrInFailedTransaction) || errors.Is(err, pgx.ErrTxCommitRollback) {
		// Each driver's word for a COMMIT of a transaction a refused statement had
		// aborted (a caller that swallowed the statement's error went on): the server
		// rolled it back, as 25P02 says of a statement sent after.
		return sentinel.New(msgPrefix, "", refset.ErrInvalidTx, err)
	}
	var se sqlStater
	if !errors.As(err, &se) || len(se.SQLState()) != 5 {
		if noPrimary(err) {
			return sentinel.New(msgPrefix, "", refset.ErrUnavailable, err)
		}
		return sqlstore.TranslateConnError(err, msgPrefix)
	}
	code := se.SQLState()
	wrap := func(s error) error { return sentinel.New(msgPrefix, "", s, err) }
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
		return sqlstore.ForeignKeyError(msgPrefix, err, query)
	case codeSerializationFailure, codeDeadlockDetected:
		return wrap(refset.ErrConflict)
	case codeLockNotAvailable, codeIdleInTransactionTimeout, codeIdleSessionTimeout:
		return wrap(refset.ErrTimeout)
	case codeQueryCanceled:
		// By the server's statement_timeout, or on request: the driver's, when the
		// statement's context ended (refset then learns from the context whether its
		// deadline or a cancel did it), or an operator's pg_cancel_backend.
		if strings.Contains(err.Error(), "statement timeout") {
			return wrap(refset.ErrTimeout)
		}
		return sentinel.Wrap(msgPrefix, "", ctxerr.Interrupted(err))
	case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeDatabaseDropped:
		return wrap(refset.ErrUnavailable)
	case codeProtocolViolation:
		// A statement given another number of arguments than it has parameters, as
		// the server sees it when the driver sends them unprepared (lib/pq with
		// binary_parameters): the statement's mistake, as when it is prepared. Any
		// other violation (a pooler's refusal) is the connection's.
		if strings.Contains(err.Error(), "bind message supplies") {
			return wrap(refset.ErrStatement)
		}
		return wrap(refset.ErrUnavailable)
	case codeReadOnlySQLTransaction:
		// The server takes no writes (a standby, or a primary fenced off after a
		// failover): the primary is elsewhere, and the unit of work did not commit.
		return wrap(refset.ErrUnavailable)
	case codeInvalidSQLStatementName:
		var gone *goneStatement
		if errors.As(err, &gone) {
			// A statement prepared by a driver or database/sql, which the caller
			// dropped from the server (DEALLOCATE, DISCARD ALL), in a transaction
			// the refusal aborted: refset runs the unit of work again, and the
			// statement is prepared anew (conns.go).
			return sentinel.New(msgPrefix, "", refset.ErrStatement, stmtcache.MarkStale(err))
		}
		if goneFromPgxCache(err) {
			// The same, on a caller's pgx pool without refset's guard (conns.go).
			unguardedDrops.Add(1)
			return sentinel.New(msgPrefix, "", refset.ErrStatement, stmtcache.MarkStale(err))
		}
		return wrap(refset.ErrStatement) // the caller's own EXECUTE, or a function raising it
	case codeInFailedSQLTransaction: // a statement failed earlier and the caller went on
		return wrap(refset.ErrInvalidTx)
	case codeUndefinedTable, codeUndefinedColumn, codeUndefinedObject, codeUndefinedFunction, codeInvalidSchemaName:
		return wrap(refset.ErrSchema)
	case codeFeatureNotSupported:
		if query == "BEGIN" {
			// "cannot set transaction read-write mode during recovery": lib/pq
			// begins READ WRITE, and the server is a standby.
			return wrap(refset.ErrUnavailable)
		}
		// "cached plan must not change result type": a statement prepared before a
		// migration changed a column it returns. refset runs the unit of work once
		// more, and the statement is prepared anew (see stmtcache.ErrStale).
		return sentinel.New(msgPrefix, "", refset.ErrStatement, stmtcache.MarkStale(err))
	}
	switch code[:2] {
	case classIntegrityConstraint: // not null, check, exclusion, ...
		return wrap(refset.ErrConstraint)
	case classConnectionException, classInsufficientResource, classSystemError:
		return wrap(refset.ErrUnavailable)
	case classInvalidAuthorization, classInvalidCatalogName:
		if what, ok := refusedLogin(err); ok {
			// The server refused a new connection of a store that opened: its role,
			// password or database changed since (a rotated password, a revoked LOGIN,
			// a database dropped or renamed, a pg_hba.conf edited). That is no mistake
			// of the caller's, whose replicas retry on ErrUnavailable until an operator
			// puts it right; at Open it is the DSN's (openError says ErrInvalidConfig).
			return sentinel.New(msgPrefix, "", refset.ErrUnavailable, &quiet{msg: what + ": " + err.Error(), err: err})
		}
		// A statement that names a database there is not (ALTER DATABASE,
		// pg_database_size): the statement's mistake.
		return wrap(refset.ErrStatement)
	}
	return wrap(refset.ErrStatement)
}

// refusedLogin reports whether err is the server's refusal of a connection's login:
// SQLSTATE class 28 (invalid authorization: a wrong password, a role without LOGIN,
// pg_hba.conf), which nothing else raises, or 3D (no such database) when the server
// ended the session with it, and says what it refused.
func refusedLogin(err error) (what string, ok bool) {
	var se sqlStater
	if !errors.As(err, &se) {
		return "", false
	}
	switch code := se.SQLState(); {
	case strings.HasPrefix(code, classInvalidAuthorization):
		return "the server refused a new connection's login, which it took when the store opened", true
	case strings.HasPrefix(code, classInvalidCatalogName) && atStartup(err):
		return "the server refused a new connection: the store's database is gone (dropped or renamed since it opened)", true
	}
	return "", false
}

// atStartup reports whether err, the server's, ended a connection's session: pgx's
// error of a connection it could not make, lib/pq's of one refset's connectors could
// not make (startupError), or any error of severity FATAL (as a pooler passes on its
// server's refusal to a client it had let in). lib/pq reads the severity in the
// server's language alone.
func atStartup(err error) bool {
	var ce *pgconn.ConnectError
	var se *startupError
	if errors.As(err, &ce) || errors.As(err, &se) {
		return true
	}
	var pe *pq.Error
	if errors.As(err, &pe) {
		return pe.Fatal()
	}
	var pgxe *pgconn.PgError
	return errors.As(err, &pgxe) && cmp.Or(pgxe.SeverityUnlocalized, pgxe.Severity) == "FATAL"
}

// startupError is the server's error that refused a connection lib/pq was making
// for refset's connectors (startupConnector): it reads as the driver's error.
type startupError struct{ error }

func (e *startupError) Unwrap() error { return e.error }

// msgPrefix starts the messages of this store's errors.
const msgPrefix = "refset/postgres"

// batchError is err, a statement's error, less the words of pgx's batch around it:
// pgx reports a statement of a pipelined hand-over (see pgxPipeline) that could not be
// prepared or whose arguments could not be encoded as "error preprocessing batch
// (prepare): ..." around the statement's own error. The message is that error's, as
// it would be had the statement run alone; pgx's error stays in the chain.
func batchError(err error) error {
	pe, ok := err.(pgx.ErrPreprocessingBatch)
	if !ok || pe.Unwrap() == nil {
		return err
	}
	return &quiet{msg: pe.Unwrap().Error(), err: err}
}

// driversOwn reports whether err is the driver's error itself, not one wrapped by
// refset or a caller on its way here.
func driversOwn(err error) bool {
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.HasPrefix(t.PkgPath(), "github.com/jackc/pgx/")
}

// quiet is a driver's error that reads as the error it wraps.
type quiet struct {
	msg string
	err error
}

func (q *quiet) Error() string { return q.msg }
func (q *quiet) Unwrap() error { return q.err }

// isStalePlan reports whether err is how Postgres refuses a prepared statement whose
// result type changed since it was prepared: the statement cache then forgets it.
func isStalePlan(err error) bool {
	var se sqlStater
	return errors.As(err, &se) && se.SQLState() == codeFeatureNotSupported
}

// errorDetail is the server's DETAIL line of err, as lib/pq and pgx report it.
func errorDetail(err error) string {
	if _, detail, ok := serverError(err); ok {
		return detail
	}
	return err.Error()
}

// serverMessage is the server's message of err (its primary line, without the
// driver's prefix), as lib/pq and pgx report it, or "".
func serverMessage(err error) string {
	msg, _, _ := serverError(err)
	return msg
}

// serverError is the message and DETAIL line of err, the server's error as lib/pq or
// pgx reports it; ok is false for any other error.
func serverError(err error) (message, detail string, ok bool) {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return pe.Message, pe.Detail, true
	}
	var pgxe *pgconn.PgError
	if errors.As(err, &pgxe) {
		return pgxe.Message, pgxe.Detail, true
	}
	return "", "", false
}

// noPrimary reports whether err is a driver's refusal of every server a DSN names
// because none takes writes (target_session_attrs=read-write): during a failover,
// before a standby is promoted. pgx says it with an error value; lib/pq only in
// words (with one host, without its "pq: ").
func noPrimary(err error) bool {
	if errors.Is(err, pgconn.ErrReadOnlyConnection) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "server is in hot standby mode") || strings.Contains(msg, "session is read-only")
}
