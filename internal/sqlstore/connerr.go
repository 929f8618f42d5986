package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
)

// TranslateConnError maps the errors that are not a database's answer but the loss of
// it, the same for every driver, to the refset sentinels (wrapping both), and returns
// any other error unchanged: a connection refused, reset or closed under a statement
// is ErrUnavailable, and a transaction that had already ended is ErrInvalidTx. A
// plain io.EOF is left alone: a caller's own error (a file read to its end) may wrap
// it, and refset returns a caller's errors as they are.
// The context's own errors are returned as they are: context.DeadlineExceeded is a
// net.Error, but a deadline is the caller's, not a lost database. prefix starts the
// message ("refset/postgres").
func TranslateConnError(err error, prefix string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		isNetError(err):
		return sentinel.New(prefix, "", refset.ErrUnavailable, err)
	case errors.Is(err, sql.ErrTxDone):
		// The transaction ended under the statement: database/sql rolled it back
		// because the context given to Begin ended (the caller's context error is
		// added by refset), or a caller ended its own transaction.
		return sentinel.New(prefix, "", refset.ErrInvalidTx, err)
	}
	return err
}

func isNetError(err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) {
		return false
	}
	if ue, ok := ne.(*url.Error); ok {
		// A DSN that does not parse as a URL is no lost connection.
		return isNetError(ue.Err)
	}
	return true
}
