package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/internal/test/pgtest"
)

// The custody payments written by hand with sqlx, as a careful developer would without
// refset: the same tokens and history tables, a lock table with one row per locked
// token, candidates read from a random pivot and locked FOR UPDATE SKIP LOCKED, a
// lost race (the lock's primary key) retried with jitter, and a spend that deletes the
// locks and the tokens, inserts the outputs and records the history in one
// transaction. Each statement is sent as sqlx sends it (lib/pq prepares an unnamed
// statement per call). What it leaves out is what refset adds: owners' holds, the
// review queue's triggers, expiry by clean-up, the general path's distinctions
// (insufficient or locked) and waiting for locked funds.

// sqlxTokensSchema is custody's first migration, the tokens and history tables, so
// that both sides pay on the same tables; sqlxLocksSchema adds the lock table.
const (
	sqlxTokensSchema = "../../../examples/custody/tokens/sql/postgres/tables/0001_tokens.sql"
	sqlxLocksSchema  = `
CREATE TABLE token_locks (
    token_id   text        NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE RESTRICT,
    tx_id      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX token_locks_by_tx ON token_locks (tx_id)`
)

// sqlxCandidatesSQL reads up to 16 unlocked tokens of an owner on one side of the
// pivot ($3): the caller runs it with id >= pivot, then, if short, with id < pivot.
const sqlxCandidatesSQL = `
SELECT id, owner, token_type, identifier, issuer, notary, amount FROM tokens t
WHERE owner = $1 AND identifier = $2 AND id %s $3
  AND NOT EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = t.id)
ORDER BY id LIMIT 16
FOR UPDATE SKIP LOCKED`

// sqlxPath is how the hand-written side's replicas pay: sqlxTwoStep (a locking
// transaction, then a spending one) or sqlxOneStatement.
type sqlxPath func(db *sqlx.DB) payer

// sqlxCustody: replicas are payers of path, each on a *sqlx.DB of its own.
func sqlxCustody(b *testing.B, w workload, path sqlxPath) *custody {
	b.Helper()
	ctx := context.Background()
	c := &custody{work: w}
	dsn := c.tag(b, pgtest.DSN(b))
	var first *sqlx.DB
	for range custodySelectors {
		db, err := sqlx.Open(custodyDriver(), dsn)
		must(b, err)
		db.SetMaxOpenConns(2)
		db.SetMaxIdleConns(2)
		b.Cleanup(func() { db.Close() })
		c.replicas = append(c.replicas, path(db))
		if first == nil {
			first = db
		}
	}
	tables, err := os.ReadFile(sqlxTokensSchema)
	must(b, err)
	_, err = first.ExecContext(ctx, string(tables)+sqlxLocksSchema)
	must(b, err)
	var issued int64
	for o := range w.owners {
		var ids, names []string
		var amounts []int64
		for i := range w.perOwner {
			ids = append(ids, tokens.NewID())
			names = append(names, ownerName(o))
			amounts = append(amounts, w.issued(i))
			issued += w.issued(i)
		}
		_, err := first.ExecContext(ctx, `
WITH issued AS (
	INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount)
	SELECT id, owner, 'fiat', 'GBP', 'bank', 'notary', amount FROM unnest($1::text[], $2::text[], $3::bigint[]) AS i(id, owner, amount)
	RETURNING id, owner, identifier, amount
)
INSERT INTO token_history (token_id, owner, identifier, amount, created_by)
SELECT id, owner, identifier, amount, $4 FROM issued`, pq.Array(ids), pq.Array(names), pq.Array(amounts), fmt.Sprintf("issue-%d", o))
		must(b, err)
	}
	analyzeCustody(b, first, "tokens, token_locks, token_history")
	c.books = func() error {
		var remaining, spent, history, locks, spentButPresent int64
		err := first.QueryRowContext(ctx, `SELECT
			(SELECT COALESCE(sum(amount), 0) FROM tokens),
			(SELECT COALESCE(sum(amount), 0) FROM token_history WHERE spent_by IS NOT NULL),
			(SELECT COALESCE(sum(amount), 0) FROM token_history),
			(SELECT count(*) FROM token_locks),
			(SELECT count(*) FROM token_history h JOIN tokens t ON t.id = h.token_id WHERE h.spent_by IS NOT NULL)`).
			Scan(&remaining, &spent, &history, &locks, &spentButPresent)
		switch {
		case err != nil:
			return err
		case history != issued+spent || remaining != issued || locks != 0 || spentButPresent != 0:
			// Payments create as much as they spend: what remains is what was issued,
			// and the history holds the issue plus every output (as much as was spent).
			return fmt.Errorf("books do not balance: issued %d, history %d, spent %d, remaining %d, %d locks left, %d spent yet present",
				issued, history, spent, remaining, locks, spentButPresent)
		}
		return nil
	}
	return c
}

// sqlxTwoStep pays in two transactions: lock (select and insert locks), then spend.
func sqlxTwoStep(db *sqlx.DB) payer { return &sqlxPayer{db: db} }

type sqlxPayer struct {
	db *sqlx.DB
	sqlxRaces
}

// sqlxRaces counts a hand-written payer's attempts to take tokens and the races they
// lost.
type sqlxRaces struct{ attempts, losses atomic.Int64 }

func (r *sqlxRaces) stats() tokens.LockStats {
	return tokens.LockStats{Attempts: r.attempts.Load(), LostRaces: r.losses.Load()}
}

// sqlxRetry runs once until it needs no other attempt (again false) or has had 30,
// with jittered back-off between them, and returns its last error. With races, each
// attempt counts, and each one tried again as a race lost.
func sqlxRetry(races *sqlxRaces, once func() (again bool, err error)) error {
	for attempt := 1; ; attempt++ {
		if races != nil {
			races.attempts.Add(1)
		}
		again, err := once()
		if !again || attempt == 30 {
			return err
		}
		if races != nil {
			races.losses.Add(1)
		}
		time.Sleep(time.Duration(rand.IntN(1000*attempt)) * time.Microsecond)
	}
}

func (p *sqlxPayer) pay(ctx context.Context, tx string, pm payment) error {
	locked, err := p.lock(ctx, tx, pm.from, pm.amount)
	if err != nil {
		return err
	}
	return p.spend(ctx, tx, locked, pm.outputs(sum(locked)))
}

// lock selects and locks tokens covering amount, retrying a lost race up to 30 times
// with jittered back-off.
func (p *sqlxPayer) lock(ctx context.Context, tx, owner string, amount int64) (locked []tokens.Token, err error) {
	err = sqlxRetry(&p.sqlxRaces, func() (bool, error) {
		locked, err = p.lockOnce(ctx, tx, owner, amount)
		return retryable(err, "23505"), err
	})
	return locked, err
}

// retryable: err is a deadlock or serialization failure, which rolled the transaction
// back and may succeed again, or one of the other SQLSTATE codes given. A lost race
// for a token is a unique violation (23505) on the lock's primary key: the lock was
// committed after the select's snapshot. A deadlock happens when a select whose
// snapshot predates a lock locks the token FOR UPDATE just before the lock's own spend
// deletes it: the spend waits for the row, the select's insert for the spend.
func retryable(err error, codes ...string) bool {
	var se interface{ SQLState() string } // lib/pq's and pgx's errors alike
	if !errors.As(err, &se) {
		return false
	}
	code := se.SQLState()
	return code == "40P01" || code == "40001" || slices.Contains(codes, code)
}

func (p *sqlxPayer) lockOnce(ctx context.Context, txID, owner string, amount int64) ([]tokens.Token, error) {
	tx, err := p.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	pivot := tokens.NewID()
	var candidates []tokens.Token
	if err := tx.SelectContext(ctx, &candidates, fmt.Sprintf(sqlxCandidatesSQL, ">="), owner, "GBP", pivot); err != nil {
		return nil, err
	}
	var sum int64
	var chosen []tokens.Token
	var ids []string
	take := func(cs []tokens.Token) {
		for _, c := range cs {
			if sum >= amount {
				return
			}
			sum += c.Amount
			chosen = append(chosen, c)
			ids = append(ids, c.TokenID)
		}
	}
	take(candidates)
	if sum < amount {
		var wrapped []tokens.Token
		if err := tx.SelectContext(ctx, &wrapped, fmt.Sprintf(sqlxCandidatesSQL, "<"), owner, "GBP", pivot); err != nil {
			return nil, err
		}
		take(wrapped)
	}
	if sum < amount {
		return nil, fmt.Errorf("%w: %s", tokens.ErrInsufficientFunds, owner)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO token_locks (token_id, tx_id, expires_at)
		SELECT unnest($1::text[]), $2, now() + interval '30 seconds'`, pq.Array(ids), txID); err != nil {
		return nil, err
	}
	return chosen, tx.Commit()
}

// spend spends the locked tokens into outputs, retrying a deadlock (see retryable).
func (p *sqlxPayer) spend(ctx context.Context, txID string, locked, outputs []tokens.Token) error {
	return sqlxRetry(nil, func() (bool, error) {
		err := p.spendOnce(ctx, txID, locked, outputs)
		return retryable(err), err
	})
}

func (p *sqlxPayer) spendOnce(ctx context.Context, txID string, locked, outputs []tokens.Token) error {
	tx, err := p.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var unlocked []string
	if err := tx.SelectContext(ctx, &unlocked, `DELETE FROM token_locks WHERE tx_id = $1 RETURNING token_id`, txID); err != nil {
		return err
	}
	var spent []tokens.Token
	if err := tx.SelectContext(ctx, &spent, `DELETE FROM tokens WHERE id = ANY ($1)
		RETURNING id, owner, token_type, identifier, issuer, notary, amount`, pq.Array(unlocked)); err != nil {
		return err
	}
	var in, out int64
	for _, t := range spent {
		in += t.Amount
	}
	var ids, owners []string
	var amounts []int64
	for _, t := range outputs {
		out += t.Amount
		ids = append(ids, tokens.NewID())
		owners = append(owners, t.Owner)
		amounts = append(amounts, t.Amount)
	}
	if len(spent) != len(locked) || in != out {
		return fmt.Errorf("spend %s: %d of %d locked tokens spent, %d in, %d out", txID, len(spent), len(locked), in, out)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount)
		SELECT id, owner, 'fiat', 'GBP', 'bank', 'notary', amount FROM unnest($1::text[], $2::text[], $3::bigint[]) AS o(id, owner, amount)`,
		pq.Array(ids), pq.Array(owners), pq.Array(amounts)); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `UPDATE token_history SET spent_by = $1 WHERE spent_by IS NULL AND token_id = ANY ($2)`, txID, pq.Array(unlocked))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(spent)) {
		return fmt.Errorf("spend %s: %d of %d tokens recorded spent (%v)", txID, n, len(spent), err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO token_history (token_id, owner, identifier, amount, created_by)
		SELECT id, owner, 'GBP', amount, $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS o(id, owner, amount)`,
		pq.Array(ids), pq.Array(owners), pq.Array(amounts), txID); err != nil {
		return err
	}
	return tx.Commit()
}

// sqlxPaySQL pays in one statement, as a careful developer would write it by hand: up
// to 16 of the payer's unlocked tokens from a random pivot, wrapping around; the first
// of them that cover twice the amount locked FOR UPDATE SKIP LOCKED; the first locked
// ones that cover the amount chosen; and, if they do, the chosen deleted and recorded
// spent, the outputs and the change created with their history rows. Placeholders: $1
// the payer, $2 the pivot, $3 the amount, $4 the transaction, $5..$7 the outputs' IDs,
// owners and amounts, $8 the change's ID. It returns whether it paid, and how many
// tokens it wanted and locked (fewer locked: another payment took some).
const sqlxPaySQL = `
WITH candidates AS (
	SELECT * FROM (
		(SELECT 0 AS part, id, amount FROM tokens t WHERE owner = $1 AND identifier = 'GBP' AND id >= $2
		   AND NOT EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = t.id) ORDER BY id LIMIT 16)
		UNION ALL
		(SELECT 1 AS part, id, amount FROM tokens t WHERE owner = $1 AND identifier = 'GBP' AND id < $2
		   AND NOT EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = t.id) ORDER BY id LIMIT 16)
	) c LIMIT 16
),
wanted AS (
	SELECT part, id FROM (SELECT part, id, sum(amount) OVER (ORDER BY part, id) - amount AS before FROM candidates) w
	WHERE before < 2 * $3::bigint
),
locked AS (
	SELECT t.id, t.amount, w.part FROM tokens t JOIN wanted w ON w.id = t.id FOR UPDATE OF t SKIP LOCKED
),
chosen AS (
	SELECT id, amount FROM (SELECT id, amount, sum(amount) OVER (ORDER BY part, id) - amount AS before FROM locked) c
	WHERE before < $3::bigint
),
total AS (SELECT COALESCE(sum(amount), 0) AS covered FROM chosen),
spent AS (
	DELETE FROM tokens WHERE id IN (SELECT id FROM chosen) AND (SELECT covered FROM total) >= $3::bigint
	RETURNING id
),
recorded AS (
	UPDATE token_history SET spent_by = $4 WHERE spent_by IS NULL AND token_id IN (SELECT id FROM spent)
),
outputs AS (
	SELECT o.id, o.owner, o.amount FROM unnest($5::text[], $6::text[], $7::bigint[]) AS o(id, owner, amount)
	UNION ALL
	SELECT $8, $1, covered - $3::bigint FROM total WHERE covered > $3::bigint
),
created AS (
	INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount)
	SELECT id, owner, 'fiat', 'GBP', 'bank', 'notary', amount FROM outputs WHERE (SELECT covered FROM total) >= $3::bigint
),
born AS (
	INSERT INTO token_history (token_id, owner, identifier, amount, created_by)
	SELECT id, owner, 'GBP', amount, $4 FROM outputs WHERE (SELECT covered FROM total) >= $3::bigint
)
SELECT (SELECT covered FROM total) >= $3::bigint, (SELECT count(*) FROM wanted), (SELECT count(*) FROM locked)`

// sqlxOneStatement pays with sqlxPaySQL, retrying a lost race up to 30 times with
// jittered back-off.
func sqlxOneStatement(db *sqlx.DB) payer { return &sqlxOnePayer{db: db} }

type sqlxOnePayer struct {
	db *sqlx.DB
	sqlxRaces
}

func (p *sqlxOnePayer) pay(ctx context.Context, tx string, pm payment) error {
	var ids, owners []string
	var amounts []int64
	for _, t := range pm.outputs(pm.amount) {
		ids, owners, amounts = append(ids, tokens.NewID()), append(owners, t.Owner), append(amounts, t.Amount)
	}
	return sqlxRetry(&p.sqlxRaces, func() (bool, error) {
		var paid bool
		var wanted, locked int
		err := p.db.QueryRowContext(ctx, sqlxPaySQL, pm.from, tokens.NewID(), pm.amount, tx,
			pq.Array(ids), pq.Array(owners), pq.Array(amounts), tokens.NewID()).Scan(&paid, &wanted, &locked)
		switch {
		case err == nil && paid:
			return false, nil
		case err == nil: // short: a race lost if another payment took tokens it wanted
			return locked < wanted, fmt.Errorf("%w: %s", tokens.ErrInsufficientFunds, pm.from)
		default:
			return retryable(err), err
		}
	})
}
