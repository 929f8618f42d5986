package tokens

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// The Postgres fast paths: a select is one statement and a spend is one statement,
// each committed on its own. They run where the dialect's SQL folder has their
// statements (sql/postgres/queries) and its tables the functions those call. They do
// what the general paths in tokens.go do statement by statement (which SQLite,
// selections with a Predicate and every case the fast select cannot settle still
// take), in one round trip, and they write the same rows: the RefSet's tokens table
// and custody's holder tables, under the same clean-up triggers.
//
// A spend deletes the spent tokens in the statement that deletes their owners' rows
// and locks, and creates the outputs in the statement that gives them their owners,
// so the clean-up triggers, which look at the end of the statement, queue nothing:
// payments give clean-up no work.

// statements are the fast paths' statements, each prepared on the pool when first
// run, which database/sql then prepares once per connection, not once per call: for
// these statements planning costs more than running them. With
// postgres.Options.Unprepared (a pooler that keeps no prepared statements) they run
// unprepared instead, planned on every call.
type statements struct {
	db                  refset.Database // for the unit of work a call's context carries
	pool                *sql.DB
	unprepared          bool
	selects, pay, spend statement
}

// statement is one fast path's query, and its prepared statement once it has one.
type statement struct {
	query    string
	prepared atomic.Pointer[sql.Stmt]
}

// query runs st with args and calls row on each row it returns. PostgreSQL refuses a
// prepared statement after a migration changed the type of a column it returns
// ("cached plan must not change result type", 0A000), on every connection it was
// prepared on; refused, it did nothing and returned no row, so it is prepared again
// and run once more. Inside a unit of work (ctx is the one refset.InTx gave its
// function) st runs, unprepared, in the unit's transaction, to commit or roll back
// with it: on the pool it would commit on its own, on another connection, which a
// pool of one does not have.
func (s *statements) query(ctx context.Context, st *statement, row func(*sql.Rows) error, args ...any) error {
	if tx, inUnit := refsetdriver.UnitTx(ctx, s.db); inUnit {
		rows, err := tx.QueryContext(ctx, st.query, args...)
		return eachRow(rows, err, row)
	}
	for attempt := 0; ; attempt++ {
		prepared, err := s.prepared(ctx, st)
		if err != nil {
			return err
		}
		var rows *sql.Rows
		if prepared != nil {
			rows, err = prepared.QueryContext(ctx, args...)
		} else {
			rows, err = s.pool.QueryContext(ctx, st.query, args...)
		}
		err = eachRow(rows, err, row)
		if code, _ := serverError(err); attempt > 0 || prepared == nil || code != "0A000" {
			return s.ownCommitError(err)
		}
		// Closed before it is prepared again: pgx prepares a text once per connection,
		// until the last statement of that text on the connection is closed.
		if st.prepared.CompareAndSwap(prepared, nil) {
			_ = prepared.Close()
		}
	}
}

// ownCommitError is err, the error of a fast path's statement that ran in a
// transaction of its own (outside any unit of work): when the connection was lost
// after the statement was sent, the statement may have committed, which
// refset.ErrCommitUnknown says (as refset.InTx says it of a COMMIT no server could
// tell the outcome of), beside refset.ErrUnavailable. Its effects show in the books:
// a payment's outputs carry its transaction ID (History). A connection that failed
// before anything was sent (pgx says so; a refused dial) ran nothing.
func (s *statements) ownCommitError(err error) error {
	if err == nil {
		return nil
	}
	translated := s.db.TranslateError(err, "")
	if !errors.Is(translated, refset.ErrUnavailable) || errors.Is(translated, refset.ErrCommitUnknown) || nothingSent(err) {
		return err
	}
	return fmt.Errorf("custody: %w: the connection was lost after a statement that commits on its own was sent: %w", refset.ErrCommitUnknown, translated)
}

// nothingSent reports whether err, a lost connection's, came before the statement
// was sent.
func nothingSent(err error) bool {
	var op *net.OpError
	return pgconn.SafeToRetry(err) || errors.As(err, &op) && op.Op == "dial"
}

// prepared is st prepared on the pool, or nil when the database runs statements
// unprepared.
func (s *statements) prepared(ctx context.Context, st *statement) (*sql.Stmt, error) {
	if prepared := st.prepared.Load(); prepared != nil || s.unprepared {
		return prepared, nil
	}
	fresh, err := s.pool.PrepareContext(ctx, st.query)
	if err != nil {
		return nil, err
	}
	if !st.prepared.CompareAndSwap(nil, fresh) { // another run prepared it first
		_ = fresh.Close()
		return st.prepared.Load(), nil
	}
	return fresh, nil
}

// selectFast is one attempt of Select on Postgres, for a filter without a Predicate.
func (v *Vault) selectFast(ctx context.Context, txID, owner string, amount int64, f Filter, ttl time.Duration) ([]Token, time.Time, error) {
	var verdict, covered string
	var tookOver int64
	var expires sql.NullTime
	var locked []Token
	err := v.stmts.query(ctx, &v.stmts.selects, func(rows *sql.Rows) error {
		var id, own, typ, ident, issuer, notary *string
		var amt *int64
		if err := rows.Scan(&verdict, &covered, &tookOver, &expires, &id, &own, &typ, &ident, &issuer, &notary, &amt); err != nil {
			return err
		}
		if id != nil {
			locked = append(locked, Token{TokenID: *id, Owner: *own, Type: *typ, Identifier: *ident,
				Issuer: *issuer, Notary: *notary, Amount: *amt})
		}
		return nil
	}, owner, orNull(f.Type), orNull(f.Identifier), orNull(f.Issuer), orNull(f.Notary), amount, NewID(), lockHolder(txID), ttl.Milliseconds())
	if err != nil {
		return nil, time.Time{}, v.db.TranslateError(err, v.stmts.selects.query)
	}
	if tookOver > 0 {
		v.takeovers.Add(1)
	}
	if verdict != "selected" {
		return nil, time.Time{}, claimError(verdict, owner, covered, amount)
	}
	if len(locked) == 0 || !expires.Valid { // custody_select locks or says why not; this guards the guard
		return nil, time.Time{}, fmt.Errorf("%w: custody_select locked no token", errBooks)
	}
	return locked, expires.Time.UTC(), nil
}

// orNull is s, or NULL (matching anything, to custody_claim) if s is empty.
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// claimError is the error of a claim that could not cover amount (custody_claim's
// verdicts): ErrInsufficientFunds, ErrLocked, or errBusy.
func claimError(verdict, owner, covered string, amount int64) error {
	switch verdict {
	case "insufficient":
		return fmt.Errorf("%w: %s has %s, %d asked", ErrInsufficientFunds, owner, covered, amount)
	case "locked":
		return fmt.Errorf("%w: %s has %s unlocked, %d asked", ErrLocked, owner, covered, amount)
	case "busy":
		return errBusy
	default:
		return fmt.Errorf("tokens: custody_claim answered %q", verdict)
	}
}

// errBusy: every token that could pay was being taken by others when custody_claim
// looked, eight times; counted as a race lost and tried again.
var errBusy = fmt.Errorf("%w: the funds are being taken by payments in flight", errRace)

// refusals are the sentinels of custody_refuse's codes. CU004 is custody_pay's: a
// claimed token was locked first by a two-step transaction, a race lost.
var refusals = map[string]error{
	"CU001": ErrNothingLocked,
	"CU002": ErrUnbalanced,
	"CU003": errBooks,
	"CU004": errRace,
}

// errBooks: a spend found the books disagreeing with its locks (a token recorded
// spent yet present, a lock without its token); it is refused and changes nothing.
var errBooks = errors.New("tokens: the books disagree")

// spendFast is Spend on Postgres; outputs have their IDs. A deadlock or
// serialization failure (refset.ErrConflict) is retried, as refset.InTx would.
func (v *Vault) spendFast(ctx context.Context, txID string, outputs []Token) (spent []Token, err error) {
	err = refset.RetryConflicts(ctx, v.db, func() error {
		spent, err = v.spendFastOnce(ctx, txID, outputs)
		return err
	})
	return spent, err
}

func (v *Vault) spendFastOnce(ctx context.Context, txID string, outputs []Token) ([]Token, error) {
	cols := make([][]string, 6)
	amounts := make([]int64, len(outputs))
	for i, t := range outputs {
		for c, val := range []string{t.TokenID, t.Owner, t.Type, t.Identifier, t.Issuer, t.Notary} {
			cols[c] = append(cols[c], val)
		}
		amounts[i] = t.Amount
	}
	args := []any{lockHolder(txID)}
	for _, c := range cols {
		args = append(args, pq.Array(c))
	}
	args = append(args, pq.Array(amounts), txID)
	var spent []Token
	err := v.stmts.query(ctx, &v.stmts.spend, func(rows *sql.Rows) error {
		var t Token
		err := rows.Scan(&t.TokenID, &t.Owner, &t.Type, &t.Identifier, &t.Issuer, &t.Notary, &t.Amount)
		spent = append(spent, t)
		return err
	}, args...)
	if err != nil {
		return nil, v.refusal(err, &v.stmts.spend)
	}
	if len(spent) == 0 { // custody_refuse raises first; this guards the guard
		return nil, fmt.Errorf("%w: %s", ErrNothingLocked, txID)
	}
	return spent, nil
}

// refusal is err, an error of st, as custody's sentinel when custody_refuse raised
// it, or as the database translates it.
func (v *Vault) refusal(err error, st *statement) error {
	if code, message := serverError(err); refusals[code] != nil {
		return fmt.Errorf("%w: %s", refusals[code], strings.TrimPrefix(message, "custody: "))
	}
	return v.db.TranslateError(err, st.query)
}

// serverError is the SQLSTATE and the primary message of a server error from lib/pq
// or pgx, without the driver's prefix; empty for any other error, or none.
func serverError(err error) (code, message string) {
	var pe *pq.Error
	var pgxe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		return string(pe.Code), pe.Message
	case errors.As(err, &pgxe):
		return pgxe.Code, pgxe.Message
	}
	return "", ""
}

// payFast is one attempt of Pay on Postgres; outputs have their IDs.
func (v *Vault) payFast(ctx context.Context, txID, from string, amount int64, outputs []Token, changeID string) ([]Token, error) {
	ids, owners := make([]string, len(outputs)), make([]string, len(outputs))
	amounts := make([]int64, len(outputs))
	for i, t := range outputs {
		ids[i], owners[i], amounts[i] = t.TokenID, t.Owner, t.Amount
	}
	k := kindOf(outputs[0])
	var verdict, covered string
	var spent []Token
	err := v.stmts.query(ctx, &v.stmts.pay, func(rows *sql.Rows) error {
		var id *string
		var amt *int64
		if err := rows.Scan(&verdict, &covered, &id, &amt); err != nil {
			return err
		}
		if id != nil {
			spent = append(spent, Token{TokenID: *id, Owner: from, Type: k.typ, Identifier: k.identifier,
				Issuer: k.issuer, Notary: k.notary, Amount: *amt})
		}
		return nil
	}, from, k.typ, k.identifier, k.issuer, k.notary, NewID(), txID, pq.Array(ids), pq.Array(owners), pq.Array(amounts), changeID, amount)
	if err != nil {
		return nil, v.refusal(err, &v.stmts.pay)
	}
	if verdict != "paid" {
		return nil, claimError(verdict, from, covered, amount)
	}
	if len(spent) == 0 { // custody_pay refuses first; this guards the guard
		return nil, fmt.Errorf("%w: custody_pay paid from no token", errBooks)
	}
	return spent, nil
}
