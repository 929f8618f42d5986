package tokens

import (
	"context"
	"fmt"
	"time"

	"github.com/refsetdb/refset/refset"
)

// Pay makes a payment whose outputs are known when it starts, in one step: it takes
// from's unlocked tokens of the outputs' kind (type, identifier, issuer and notary,
// compared exactly) until they cover the outputs' sum, spends them, and creates the
// outputs and, if the tokens taken add up to more, a change token for from. It returns
// the spent tokens and the created ones (the outputs as given, with their IDs, then
// the change, if any).
//
// Select then Spend does the same in two transactions and leaves locks between them,
// for a payment that needs to look at the tokens, or to ask someone, before it spends.
// Pay leaves no lock: on Postgres it is one statement (custody_pay, postgres.go), which
// claims tokens by locking their rows, skipping rows another payment is spending, so
// it never loses a race for a token by construction; on SQLite it is one transaction
// of the general path's statements. Tokens locked by a two-step transaction are not
// taken; tokens whose lock has expired are, and the expired lock goes with them.
//
// It fails with ErrInvalid (no transaction ID or payer, no output, outputs of more than
// one kind, amounts that overflow, texts ErrInvalid names, an output's ID taken, that
// also beside refset.ErrDuplicate), ErrInsufficientFunds (from's tokens of the kind,
// locked or not, do not cover the sum) or, once Config.LockWait has passed, ErrLocked
// (they do, but locks of other transactions hold too much); it then changes nothing.
// A transaction ID whose Select holds locks may pay: Pay takes other tokens and
// leaves those locks for the transaction's Spend.
// It never reports ErrInsufficientFunds because of payments in flight: it tells funds
// missing from funds being spent by others by a fresh look at the books, and waits for
// the latter.
//
// A transaction ID may name several payments (this one beside its own Select and
// Spend, or a caller's two Pays): each is a payment of its own, and custody does not
// refuse the ID again, so it is no idempotency key (a Pay made again with it pays
// again). The history records each token spent by its transaction and by the call
// that spent it, so what a call reports is its own payment, never another of the same
// ID, even once its connection was lost (below).
//
// If the connection is lost once PostgreSQL's fast path sent its statement (which
// commits on its own), Pay waits until the statement can no longer commit and reads
// the history for what this very call did: it returns as if it had heard the answer
// (what it spent, read back from the history, and what it created) when the payment
// was made, and refset.ErrUnavailable, having changed nothing, when it was not (an
// earlier payment of the same transaction ID, even one that created the very outputs
// given, is not this one: this call's statement, refused on their IDs, did not pay);
// the error matches refset.ErrCommitUnknown, beside ErrUnavailable, only when no primary answered within
// postgres.Options.ResolveCommitWait (or, behind a pooler, never asked). If the
// context ends while the statement runs, the payment may or may not have been made,
// and the error is the context's. The books balance either way, and the history
// records txID as the creator of its outputs if it was.
func (v *Vault) Pay(ctx context.Context, txID, from string, outputs ...Token) (spent, created []Token, err error) {
	amount, err := checkPayment(txID, from, outputs)
	if err != nil {
		return nil, nil, err
	}
	if created, err = prepare(txID, outputs); err != nil {
		return nil, nil, err
	}
	change := created[0]
	change.TokenID, change.Owner, change.Amount = NewID(), from, 0
	err = v.retry(ctx, func() (err error) {
		if v.fast {
			spent, err = v.payFast(ctx, txID, from, amount, created, change.TokenID)
		} else {
			spent, err = v.payStepwise(ctx, txID, from, amount, created, change)
		}
		return err
	})
	if err != nil {
		return nil, nil, takenID(err)
	}
	if change.Amount = changeOf(spent, amount); change.Amount > 0 {
		created = append(created, change)
	}
	return spent, created, nil
}

// checkPayment checks Pay's arguments and returns the outputs' sum.
func checkPayment(txID, from string, outputs []Token) (int64, error) {
	if txID == "" || from == "" || len(outputs) == 0 {
		return 0, fmt.Errorf("%w: Pay needs a transaction ID, a payer and at least one output", ErrInvalid)
	}
	if err := checkText("payer", from); err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range outputs {
		if kindOf(t) != kindOf(outputs[0]) {
			return 0, fmt.Errorf("%w: Pay's outputs are of one kind; %+v and %+v differ", ErrInvalid, outputs[0], t)
		}
		if t.Amount > 0 && sum+t.Amount < sum {
			return 0, fmt.Errorf("%w: Pay's outputs add up past the largest amount", ErrInvalid)
		}
		sum += t.Amount
	}
	return sum, nil
}

// WithChange is what the Spend of a two-step payment creates: outputs and, when the
// tokens Select locked for them hold more than their sum, a token of the change for
// owner, of the first output's kind, as Pay creates it in one step. Locked tokens
// that do not cover the outputs get no change (and Spend refuses them).
func WithChange(locked []Token, owner string, outputs ...Token) []Token {
	out := append([]Token(nil), outputs...)
	if len(outputs) == 0 {
		return out
	}
	var amount int64
	for _, t := range outputs {
		amount += t.Amount
	}
	if change := changeOf(locked, amount); change > 0 {
		c := outputs[0]
		c.TokenID, c.Owner, c.Amount = "", owner, change
		out = append(out, c)
	}
	return out
}

// changeOf is what the spent tokens hold beyond amount. They cover it, and all but
// one of them do not, so their sum is below twice the largest int64: it is added in
// uint64, which does not wrap.
func changeOf(spent []Token, amount int64) int64 {
	var sum uint64
	for _, t := range spent {
		sum += uint64(t.Amount)
	}
	return int64(sum - uint64(amount))
}

// payStepwise is one attempt of Pay on the general path (SQLite): in one transaction,
// the select of the two-step path, with locks that the spend then removes.
func (v *Vault) payStepwise(ctx context.Context, txID, from string, amount int64, outputs []Token, change Token) ([]Token, error) {
	v.general.Add(1)
	k := kindOf(outputs[0])
	exact := Filter{Type: k.typ, Identifier: k.identifier, Issuer: k.issuer, Notary: k.notary,
		Predicate: func(t Token) bool { return kindOf(t) == k }} // empty fields must match too
	found, err := v.lookFirst(ctx, from, amount, exact)
	if err != nil {
		return nil, err
	}
	var spent []Token
	err = refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
		// Its own holder, not txID's: locks an earlier Select of txID holds are not
		// this payment's to spend (custody_pay leaves them alone too).
		holder := "pay:" + txID
		chosen, _, err := v.selectOnce(ctx, tx, found, holder, from, amount, exact, time.Minute)
		if err != nil {
			return err
		}
		all := outputs
		if change.Amount = changeOf(chosen, amount); change.Amount > 0 {
			all = append(outputs[:len(outputs):len(outputs)], change)
		}
		spent, err = v.spendStepwise(ctx, tx, holder, txID, all)
		return err
	})
	return spent, err
}
