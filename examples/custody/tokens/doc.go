// Package tokens keeps fungible tokens in custody on a refset.RefSet: tokens held by
// their owners, selected and locked for a transaction, and spent into new tokens,
// with several replicas (connection pools or processes) on one database.
//
// A token is an immutable object in the tokens table. Its owner keeps it alive with a
// row of token_owners, custody's own holder table, which references the token ON
// DELETE RESTRICT, as a component built on refset holds objects (clean-up follows it);
// custody runs no SQL on refset's own tables. A transaction locks a token with a row
// of token_locks, which expires by the database's clock and keeps nothing alive (its
// key to the token cascades, so it goes with the token it locked). Its primary key
// allows at most one lock per token, so two replicas can never lock the same token,
// whatever their timing: the database decides every race, and the loser tries other
// tokens.
//
// Select finds the owner's unlocked tokens that match a filter, takes them in random
// order until they cover the amount, and locks them in one transaction; any failure
// releases every lock it took. It tells ErrInsufficientFunds (the owner has too
// little) from ErrLocked (enough, but locked by other transactions). Spend deletes
// the transaction's live locks and the locked tokens and adds the outputs, change
// included, in one transaction; a history table records every token created and the
// one transaction that spent it. Release drops a transaction's locks, and unlocking a
// lock that another transaction has since taken does nothing.
//
// A lock whose time-to-live has passed by the database's clock is no lock: its
// transaction can no longer spend it (Spend refuses, whether or not the token was
// taken since), and the next Select may take its token at once, on either database
// and on either path below, without waiting for clean-up (Collect, which removes the
// expired locks no Select took). The
// takeover replaces the old lock in the statement or transaction that inserts the
// new one, and only if the old one is still expired when that statement meets it
// (compare-and-swap on the lock's primary key), so a token never has two locks, and a
// lock taken over is live again and cannot be taken over in turn.
//
// The database's clock that judges a lock is read as the statement that tests it runs
// (on PostgreSQL clock_timestamp(), not now(), the start of its transaction): a Select,
// Pay or Spend in a unit of work (refset.InTx) begun while a lock lived, or a Spend
// that waited for a token's row, sees the lock expired once it has, as a call made
// later on its own would (sql/postgres/tables/0011_live_clock.sql).
//
// A lock's time-to-live starts when the lock is written, by the database's clock,
// not when the call began, in whole milliseconds rounded up (a ttl under one is one,
// never zero): a Select slowed by a large claim, by a wait for another
// transaction's row lock or by a loaded server still returns locks that live ttl less
// only the commit and the way back. SelectUntil says when they expire.
//
// Pay makes a payment whose outputs are known when it starts in one step: it takes
// the payer's tokens of the outputs' kind until they cover them, spends them and
// creates the outputs and the change, leaving no lock behind.
//
// On Postgres Select, Pay and Spend are each one prepared statement, committed on its
// own (postgres.go), since for statements this small the round trips and the planning
// cost more than the work. They run through the Driver's refsetdriver.OwnCommits: on
// one connection, never twice, and, when the connection is lost once the statement
// was sent, settled (the database waits until it can no longer commit, and custody
// reads the books to tell whether it did: the history records the call that spent
// each token, so it reads this call's outcome, not another's of the same transaction
// ID) rather than left unknown. Select and Pay call plpgsql functions
// (sql/postgres/tables/0006_holders.sql) that claim tokens row by row: from a random
// point of the owner's tokens, each row no live lock holds is locked FOR UPDATE SKIP
// LOCKED as a cursor reaches it, until the rows cover the amount. A token another
// transaction is taking is skipped and the scan goes on past it, so meeting one costs
// nothing but the step; the scan reads as far as the amount needs, not the wallet.
// A claim that has taken 32 tokens and is still short asks once, without locking,
// whether the owner can cover the amount at all, so that a payment of more than the
// wallet holds is refused at that point instead of locking the whole wallet first
// (sql/postgres/tables/0008_claim.sql); the general path asks the same after a page.
// When what it can claim falls short, a fresh snapshot tells funds missing
// (ErrInsufficientFunds) from funds locked (ErrLocked) from funds that payments in
// flight are spending, which it waits for, so a payer never hears of insufficient funds
// because others were paying at the same moment. It gives up on its own (a race lost,
// in LockStats) only when it holds some tokens and finds no more while others take the
// rest: it then releases what it holds rather than sit on it. Select then inserts the locks, taking
// expired ones over (compare-and-swap on the lock's primary key); Pay spends in the same
// call. A Select with a Predicate goes to the general path, a transaction of several
// statements, which SQLite always takes; LockStats.General counts those. On SQLite,
// whose transaction takes the one writer, the general path looks for tokens before it
// begins and only takes them in it (reading them again, to leave those spent or locked
// meanwhile), so a refusal never holds the writer: payers refused back to back do not
// keep others, in this process or another, from writing. The spend
// deletes, records, creates and checks in one statement, in a plpgsql function too
// (custody_spend, sql/postgres/tables/0011_live_clock.sql), so that it is planned once per
// session and by key; a refusal (nothing locked, unbalanced outputs) is raised inside
// it, so it changes nothing. These functions run with jit off and with the planner
// settings that keep every step an index lookup (sql/postgres/tables/0007_service.sql):
// on analyzed tables the estimate of a claim follows the wallet, not the few rows it
// reads, and PostgreSQL would compile the claim on every call (20 – 25 ms from a wallet
// of 100,000 tokens).
//
// The caller's code runs in one place only: a Filter's Predicate, on the general path,
// as it looks for tokens (see Filter). A Predicate that panics has any transaction
// it ran in rolled back (no lock taken, no transaction left open) before the panic
// continues with its own value. The fast paths run no caller code while a statement is open.
//
// Audit reads the books in one snapshot and checks conservation two ways: per
// identifier, what remains must equal what Issue put into circulation (a spend only
// moves value, so this catches value created or lost); and per token, every token
// ever created must be spent once or still unspent. It also counts tokens recorded
// spent yet present, tokens locked twice and tokens their owner does not hold, all of
// which must be zero.
//
// If the connection fails, or the context ends, after a select's statement has run
// but before its result is read, the locks it took may stand: they expire after
// their time-to-live, and Release(txID) drops them at once.
package tokens
