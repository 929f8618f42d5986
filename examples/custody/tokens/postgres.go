package tokens

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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

// statements are the fast paths' statements. Outside a unit of work each runs
// through the Driver's refsetdriver.OwnCommits, as a statement that commits on its
// own: prepared once per connection where the database prepares (not with
// postgres.Options.Unprepared, behind a pooler), never run twice, and, when the
// connection is lost once it was sent, settled: the database waits until the
// statement can no longer commit, then the call's settled query reads from the
// books whether it did (the tokens a payment's own call spent, in the history; a
// selection's locks), and the call returns as if it had seen the statement's answer,
// or ErrUnavailable (nothing changed). refset.ErrCommitUnknown (beside ErrUnavailable) only when no
// primary answered within postgres.Options.ResolveCommitWait.
type statements struct {
	db                  refset.Database // for the unit of work a call's context carries
	own                 refsetdriver.OwnCommits
	selects, pay, spend statement
	// The queries that read a settled statement's rows back (settled).
	paid, selected string
}

// statement is one fast path's query.
type statement struct{ query string }

// query runs st with args and calls row on each row it returns; settled, run when
// the connection was lost once st was sent, tells from the books whether st
// committed and reads its results there. Inside a unit of work (ctx is the one
// refset.InTx gave its function) st runs in the unit's transaction, to commit or
// roll back with it: on the pool it would commit on its own, on another connection,
// which a pool of one does not have. It runs there under a savepoint (refset.InTx
// joining the unit), so that a refusal (custody_refuse raises, a taken output ID)
// undoes st alone, as on its own it would: run bare, the error aborted the unit's
// whole transaction, and every later statement of the unit failed.
func (s *statements) query(ctx context.Context, st *statement, row func(*sql.Rows) error, settled refsetdriver.CommittedFunc, args ...any) error {
	if _, inUnit := refsetdriver.UnitTx(ctx, s.db); inUnit {
		return refset.InTx(ctx, s.db, func(ctx context.Context, tx refset.Tx) error {
			rows, err := tx.QueryContext(ctx, st.query, args...)
			return eachRow(rows, err, row)
		})
	}
	return s.own.QueryOwn(ctx, st.query, args, row, settled)
}

// selectFast is one attempt of Select on Postgres, for a filter without a Predicate.
func (v *Vault) selectFast(ctx context.Context, txID, owner string, amount int64, f Filter, ttl time.Duration) ([]Token, time.Time, error) {
	var verdict, covered string
	var tookOver int64
	var expires sql.NullTime
	var locked []Token
	selected := func(ctx context.Context, tx refsetdriver.Tx) (bool, error) {
		// The transaction's live locks on what the filter matches: enough of them
		// is a selection that committed.
		var held []Token
		var sum uint64
		var first sql.NullTime
		rows, err := tx.QueryContext(ctx, v.stmts.selected, lockHolder(txID), owner, orNull(f.Type), orNull(f.Identifier), orNull(f.Issuer), orNull(f.Notary))
		err = eachRow(rows, err, func(rows *sql.Rows) error {
			var t Token
			var until time.Time
			err := rows.Scan(&t.TokenID, &t.Owner, &t.Type, &t.Identifier, &t.Issuer, &t.Notary, &t.Amount, &until)
			held, sum = append(held, t), sum+uint64(t.Amount)
			if !first.Valid || until.Before(first.Time) {
				first = sql.NullTime{Time: until, Valid: true}
			}
			return err
		})
		if err != nil || sum < uint64(amount) {
			return false, err
		}
		verdict, locked, expires = "selected", held, first
		return true, nil
	}
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
	}, selected, owner, orNull(f.Type), orNull(f.Identifier), orNull(f.Issuer), orNull(f.Notary), amount, NewID(), lockHolder(txID), lockMillis(ttl))
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
	// The call's own ID, recorded with each token it spends: what settling a lost
	// connection reads back (paidFromHistory), whatever else txID has paid.
	call := NewID()
	args = append(args, pq.Array(amounts), txID, call)
	var spent []Token
	settled := func(ctx context.Context, tx refsetdriver.Tx) (bool, error) {
		paid, err := v.paidFromHistory(ctx, tx, txID, call, outputs)
		if paid != nil {
			spent = paid
		}
		return paid != nil, err
	}
	err := v.stmts.query(ctx, &v.stmts.spend, func(rows *sql.Rows) error {
		var t Token
		err := rows.Scan(&t.TokenID, &t.Owner, &t.Type, &t.Identifier, &t.Issuer, &t.Notary, &t.Amount)
		spent = append(spent, t)
		return err
	}, settled, args...)
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
	// The claim's pivot, a fresh ID per call, is also the call's own ID, which
	// custody_pay records with each token it spends: what settling a lost connection
	// reads back (paidFromHistory), whatever else txID has paid.
	call := NewID()
	settled := func(ctx context.Context, tx refsetdriver.Tx) (bool, error) {
		paid, err := v.paidFromHistory(ctx, tx, txID, call, outputs)
		if paid != nil {
			verdict, spent = "paid", paid
		}
		return paid != nil, err
	}
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
	}, settled, from, k.typ, k.identifier, k.issuer, k.notary, call, txID, pq.Array(ids), pq.Array(owners), pq.Array(amounts), changeID, amount)
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

// paidFromHistory reads, in tx, what the payment or spend call (its own ID) of txID
// with outputs left in the history once it can no longer commit (its connection was
// lost once it was sent): the tokens it spent, or nil if it did not commit. The
// history records the call that spent each token, so this is the call's own outcome,
// never that of another payment of txID: a transaction ID may name several payments
// (a Pay beside its Select and Spend, a caller that uses one twice), and one whose
// outputs' IDs are taken by an earlier payment of txID did not commit, whatever that
// one did. The history keeps a
// token's owner, identifier and amount; its type, issuer and notary are those of the
// outputs of its identifier, which balance the spent tokens per kind (left empty
// when outputs of one identifier are of several kinds).
func (v *Vault) paidFromHistory(ctx context.Context, tx refsetdriver.Tx, txID, call string, outputs []Token) ([]Token, error) {
	if len(outputs) == 0 {
		// A spend of no outputs never commits: the tokens it spends (it is refused
		// with none) are never balanced by nothing. (Reading outputs[0] panicked.)
		return nil, nil
	}
	kinds := map[string]kind{}
	for _, o := range outputs {
		k, seen := kinds[o.Identifier]
		if seen && k != kindOf(o) {
			k = kind{identifier: o.Identifier}
		} else {
			k = kindOf(o)
		}
		kinds[o.Identifier] = k
	}
	var spent []Token
	rows, err := tx.QueryContext(ctx, v.stmts.paid, txID, outputs[0].TokenID, call)
	err = eachRow(rows, err, func(rows *sql.Rows) error {
		var t Token
		if err := rows.Scan(&t.TokenID, &t.Owner, &t.Identifier, &t.Amount); err != nil {
			return err
		}
		k := kinds[t.Identifier]
		t.Type, t.Issuer, t.Notary = k.typ, k.issuer, k.notary
		spent = append(spent, t)
		return nil
	})
	return spent, err
}
