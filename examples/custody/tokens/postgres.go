package tokens

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/refset"
)

// The Postgres fast paths: a select is one statement and a spend is one statement,
// each committed on its own. They do what the general paths in tokens.go do statement
// by statement (which SQLite, selections with a Predicate and every case the fast
// select cannot settle still take), in one round trip, and they write the same rows:
// the RefSet's tokens table and its holds, under the same clean-up triggers.
//
// A spend deletes the spent tokens in the statement that deletes their holds, and
// creates the outputs in the statement that creates their owners' holds, so the
// clean-up triggers, which look at the end of the statement, queue nothing: payments
// give clean-up no work.

// statements are the fast paths' prepared statements, one per query text (the
// select has a text per combination of filter fields). A statement is parsed and
// planned once per connection, not once per call: for these statements planning
// costs more than running them.
//
// With postgres.Options.Unprepared (a pooler that keeps no prepared statements) they
// run unprepared instead, planned on every call.
type statements struct {
	pool       *sql.DB
	unprepared bool
	mu         sync.Mutex
	byText     map[string]*sql.Stmt
}

// query runs query with args, prepared unless the database says not to. A statement
// that PostgreSQL refuses because a migration changed the type of a column it returns
// ("cached plan must not change result type", 0A000) is prepared again, once.
func (s *statements) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s.unprepared {
		return s.pool.QueryContext(ctx, query, args...)
	}
	for attempt := 0; ; attempt++ {
		st, err := s.get(ctx, query)
		if err != nil {
			return nil, err
		}
		rows, err := st.QueryContext(ctx, args...)
		if attempt == 0 && sqlState(err) == "0A000" { // feature_not_supported: the cached plan's result type changed
			s.forget(query, st)
			continue
		}
		return rows, err
	}
}

// forget drops query's statement, if it is still st, so the next call prepares it anew.
func (s *statements) forget(query string, st *sql.Stmt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byText[query] == st {
		delete(s.byText, query)
		_ = st.Close() // it failed already; closing it only frees it on the server
	}
}

func (s *statements) get(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.byText[query]; ok {
		return st, nil
	}
	st, err := s.pool.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if s.byText == nil {
		s.byText = map[string]*sql.Stmt{}
	}
	s.byText[query] = st
	return st, nil
}

// selectSQL is Select on Postgres: custody_select (sql/postgres/tables/0004_claim.sql)
// claims the owner's unlocked tokens that match the filter, row by row FOR UPDATE SKIP
// LOCKED, until they cover the amount, and locks them, taking expired locks over. Its
// placeholders: $1 the owner, $2..$5 the filter's type, identifier, issuer and notary
// (NULL for any), $6 the amount, $7 the pivot, $8 the holder, $9 the ttl in
// milliseconds.
//
// One row comes back unless it locked: its verdict ('insufficient', 'locked' or
// 'busy') and the amount behind it. Locked, a row per locked token, and how many
// expired locks it took over.
const selectSQL = `SELECT verdict, covered::text, took_over, tok_id, tok_owner, tok_type, tok_identifier, tok_issuer, tok_notary, tok_amount
FROM custody_select($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// selectFast is one attempt of Select on Postgres, for a filter without a Predicate.
func (v *Vault) selectFast(ctx context.Context, txID, owner string, amount int64, f Filter, ttl time.Duration) ([]Token, error) {
	rows, err := v.stmts.query(ctx, selectSQL, owner, orNull(f.Type), orNull(f.Identifier), orNull(f.Issuer), orNull(f.Notary),
		amount, NewID(), lockHolder(txID), ttl.Milliseconds())
	if err != nil {
		return nil, v.db.TranslateError(err, selectSQL)
	}
	defer rows.Close()
	var verdict, covered string
	var tookOver int64
	var locked []Token
	for rows.Next() {
		var id, own, typ, ident, issuer, notary *string
		var amt *int64
		if err := rows.Scan(&verdict, &covered, &tookOver, &id, &own, &typ, &ident, &issuer, &notary, &amt); err != nil {
			return nil, err
		}
		if id != nil {
			locked = append(locked, Token{TokenID: *id, Owner: *own, Type: *typ, Identifier: *ident,
				Issuer: *issuer, Notary: *notary, Amount: *amt})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, v.db.TranslateError(err, selectSQL)
	}
	if tookOver > 0 {
		v.takeovers.Add(1)
	}
	switch verdict {
	case "selected":
		if len(locked) == 0 { // custody_select locks or says why not; this guards the guard
			return nil, fmt.Errorf("%w: custody_select locked no token", errBooks)
		}
		return locked, nil
	default:
		return nil, claimError(verdict, owner, covered, amount)
	}
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

// fastSpendSQL spends what a transaction has locked and creates the outputs, in one
// statement committed on its own: custody_spend (sql/postgres/tables/0005_spend.sql),
// a function so that the statement is planned once per session rather than on every
// call. It deletes the tokens the transaction's locks ($1) are on, then their locks
// and their owners' holds; records them spent ($9; only history rows not spent yet: a
// token is spent once); and inserts the outputs ($2..$8, one array per column), their
// owners' holds and their history rows. Last it checks what it did, and custody_refuse
// (0002_spend_refusal.sql) undoes the whole statement if there was nothing locked, if
// the outputs do not balance the inputs per kind of token (or a lock expired and was
// taken over while the statement ran, which leaves less locked than the outputs were
// made for, as a takeover before it would), or if the counts disagree. It returns the
// spent tokens.
//
// The tokens go before their locks, so the spend never waits on a select while that
// select waits on the spend. A select whose snapshot predates one of this
// transaction's locks may lock that token's row FOR UPDATE; then the spend waits for
// it, and the select's insert of its lock fails at once on the one-lock index against
// the lock, still there, committed (a lost race, retried), which lets the spend go on.
// Deleting the lock first would make the select's insert wait for the spend instead,
// a deadlock that PostgreSQL breaks only after deadlock_timeout.
//
// The later steps find their rows by = ANY (ARRAY (...)) rather than by joining the
// earlier steps' results: the planner cannot estimate a step's result, and with a
// join it hashes whole tables; with an array it looks each row up in the index.
const fastSpendSQL = `SELECT tok_id, tok_owner, tok_type, tok_identifier, tok_issuer, tok_notary, tok_amount
FROM custody_spend($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// refusals are the sentinels of custody_refuse's codes.
var refusals = map[string]error{
	"CU001": ErrNothingLocked,
	"CU002": ErrUnbalanced,
	"CU003": errBooks,
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
	rows, err := v.stmts.query(ctx, fastSpendSQL, args...)
	if err != nil {
		return nil, v.refusal(err)
	}
	defer rows.Close()
	var spent []Token
	for rows.Next() {
		var t Token
		if err := rows.Scan(&t.TokenID, &t.Owner, &t.Type, &t.Identifier, &t.Issuer, &t.Notary, &t.Amount); err != nil {
			return nil, err
		}
		spent = append(spent, t)
	}
	if err := rows.Err(); err != nil {
		return nil, v.refusal(err)
	}
	if len(spent) == 0 { // custody_refuse raises first; this guards the guard
		return nil, fmt.Errorf("%w: %s", ErrNothingLocked, txID)
	}
	return spent, nil
}

// refusal is err as custody's sentinel when custody_refuse raised it.
func (v *Vault) refusal(err error) error {
	if sentinel, ok := refusals[sqlState(err)]; ok {
		return fmt.Errorf("%w: %s", sentinel, strings.TrimPrefix(serverMessage(err), "custody: "))
	}
	return v.db.TranslateError(err, fastSpendSQL)
}

// sqlState is the SQLSTATE of a server error from lib/pq or pgx, or "".
func sqlState(err error) string {
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		return se.SQLState()
	}
	return ""
}

// serverMessage is the server's primary message of err, without the driver's prefix.
func serverMessage(err error) string {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	var pgxe *pgconn.PgError
	if errors.As(err, &pgxe) {
		return pgxe.Message
	}
	return err.Error()
}

// paySQL is Pay on Postgres: custody_pay (sql/postgres/tables/0004_claim.sql) claims
// the payer's tokens of the outputs' kind, row by row FOR UPDATE SKIP LOCKED, until
// they cover the outputs, then spends them and creates the outputs and the change in
// one statement, all in this statement's transaction. Its placeholders: $1 the payer,
// $2..$5 the kind (type, identifier, issuer, notary), $6 the pivot, $7 the
// transaction, $8..$10 the outputs' IDs, owners and amounts, $11 the change's ID, $12
// the outputs' sum.
//
// One row comes back unless it paid: its verdict ('insufficient', 'locked' or 'busy')
// and the amount behind it. Paid, a row per spent token, its ID and amount: the rest
// is the payer's and the outputs' kind.
const paySQL = `SELECT verdict, covered::text, tok_id, tok_amount FROM custody_pay($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// payFast is one attempt of Pay on Postgres; outputs have their IDs.
func (v *Vault) payFast(ctx context.Context, txID, from string, amount int64, outputs []Token, changeID string) ([]Token, error) {
	ids, owners := make([]string, len(outputs)), make([]string, len(outputs))
	amounts := make([]int64, len(outputs))
	for i, t := range outputs {
		ids[i], owners[i], amounts[i] = t.TokenID, t.Owner, t.Amount
	}
	k := kindOf(outputs[0])
	rows, err := v.stmts.query(ctx, paySQL, from, k.typ, k.identifier, k.issuer, k.notary, NewID(), txID,
		pq.Array(ids), pq.Array(owners), pq.Array(amounts), changeID, amount)
	if err != nil {
		return nil, v.payRefusal(err)
	}
	defer rows.Close()
	var verdict, covered string
	var spent []Token
	for rows.Next() {
		var id *string
		var amt *int64
		if err := rows.Scan(&verdict, &covered, &id, &amt); err != nil {
			return nil, err
		}
		if id != nil {
			spent = append(spent, Token{TokenID: *id, Owner: from, Type: k.typ, Identifier: k.identifier,
				Issuer: k.issuer, Notary: k.notary, Amount: *amt})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, v.payRefusal(err)
	}
	switch verdict {
	case "paid":
		if len(spent) == 0 { // custody_pay refuses first; this guards the guard
			return nil, fmt.Errorf("%w: custody_pay paid from no token", errBooks)
		}
		return spent, nil
	default:
		return nil, claimError(verdict, from, covered, amount)
	}
}

// payRefusal is err as custody's sentinel when custody_pay refused the payment: CU004,
// a claimed token locked first by a two-step transaction, is a race lost.
func (v *Vault) payRefusal(err error) error {
	if sqlState(err) == "CU004" {
		return fmt.Errorf("%w: %s", errRace, serverMessage(err))
	}
	if sentinel, ok := refusals[sqlState(err)]; ok {
		return fmt.Errorf("%w: %s", sentinel, strings.TrimPrefix(serverMessage(err), "custody: "))
	}
	return v.db.TranslateError(err, paySQL)
}
