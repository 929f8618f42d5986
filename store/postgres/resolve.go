package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// A COMMIT whose connection is lost (the server crashed, was killed, failed over)
// may or may not have run. Rather than leave the caller to guess (ErrCommitUnknown),
// refset asks: the transaction reads its own id, a WAL position past a record that
// carries the id, and its server (a commitTicket); after a lost COMMIT, a new
// connection from the pool, which a multi-host DSN with target_session_attrs=read-write
// leads to whichever server is primary now, asks pg_xact_status about that id.
//
// Where the ticket is read:
//
//   - lib/pq: in BEGIN's round trip (BEGIN; SELECT ..., beginTicketSQL, in one simple
//     query: no round trip of its own). The id is taken there, and a transactional
//     logical decoding message written, whose end is the ticket's WAL position: the
//     record carries the id, as every record the transaction writes later does. So
//     everything below holds of it as of a position read after the transaction's
//     writes, and a server that replayed past the position before COMMIT replayed
//     past this one. The cost: every transaction so begun has an id and one small
//     WAL record, even one that writes nothing, whose COMMIT then writes and flushes
//     a commit record; under REPEATABLE READ or SERIALIZABLE, its snapshot is taken
//     at BEGIN rather than at its first statement of its own.
//   - pgx, and lib/pq for a role refused pg_logical_emit_message: just before COMMIT
//     (ticketSQL, one more statement; a pipelined unit sends it at the end of its last
//     batch, and COMMIT in a batch of its own once it is read, since a server sends a
//     batch's answers only at its end: pipeline.go), where a transaction that wrote
//     nothing has no id and takes none.
//
// An id is only a number, and a new primary may give it to another transaction: one
// whose WAL never reached the standby it promoted, it does not know, and hands out
// again. So the answer is taken as the transaction's own only from a server that
// cannot have done that:
//
//   - the server that ran the transaction, still running (same address, port and
//     start time): it gave the id out and never gives it again;
//   - another server, or the same one restarted, that replayed WAL past the ticket's
//     position: it replayed a record of the transaction's (what it wrote before
//     the ticket was read, or the message of its BEGIN), which carries the id, so
//     its next id is past it. (One that started without recovery
//     at all, after a clean shutdown, saved its next id at shutdown.)
//
// Any other server that says "committed" speaks of another transaction: this one's
// WAL did not reach it, so it did not commit there. A transaction that wrote nothing
// has no id and nothing to lose.
//
// "Committed" on a server is not yet durable on its synchronous standbys: the server
// marks the transaction committed before it waits for them. So the question is asked
// in a transaction that takes an id of its own (which a standby refuses: only a
// primary answers) and commits, which waits, with synchronous replication, until the
// standbys have everything up to its own commit, the asked-about one's included.
//
// What remains unknown (ErrCommitUnknown): no primary answered within
// Options.ResolveCommitWait, the server no longer keeps the transaction's status, or
// two failovers came so fast that the server asked had been rewound past the
// transaction and promoted again before the question reached it.

// commitTicket is what a write transaction learns of itself at BEGIN (lib/pq) or
// just before COMMIT: raw is beginTicketSQL's or ticketSQL's value, taken apart only
// when a COMMIT is lost.
type commitTicket struct {
	read bool   // the ticket was read before the connection was lost
	raw  string // "" when the transaction has no id (it wrote nothing)
}

// fields are the ticket's parts: the transaction's id, a WAL position past a record
// that carries it, and the server (address, port and start time).
func (t commitTicket) fields() (xid, lsn, server string, err error) {
	parts := strings.SplitN(t.raw, "|", 3)
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("a commit ticket of another form: %q", t.raw)
	}
	return parts[0], parts[1], parts[2], nil
}

// outcome is what a server says became of a transaction.
type outcome int

const (
	outcomeCommitted outcome = iota
	outcomeNotCommitted
	outcomeCommitting // still running, on the server that ran it: ask again
	outcomeForgotten  // too old: the server no longer keeps its status
)

// decideOutcome reads a server's answer about a transaction: status is
// pg_xact_status's ("committed", "aborted", "in progress"), or "unassigned" for an id
// the server has not given out yet, or "forgotten"; sameServer is whether the server
// is the one that ran the transaction, still running; replayedPast is whether it
// replayed WAL past the transaction's ticket (or started without recovery). reason
// says why, for the error or the log.
func decideOutcome(status string, sameServer, replayedPast bool) (o outcome, reason string) {
	switch status {
	case "committed":
		if sameServer || replayedPast {
			return outcomeCommitted, "the server says it committed"
		}
		return outcomeNotCommitted, "the primary never received its writes (the id it knows is another transaction's)"
	case "aborted":
		return outcomeNotCommitted, "the server says it did not commit"
	case "unassigned":
		return outcomeNotCommitted, "the primary never received its writes"
	case "in progress":
		if sameServer {
			return outcomeCommitting, "still committing on the server"
		}
		return outcomeNotCommitted, "the primary never received its commit"
	}
	return outcomeForgotten, "the server no longer keeps the status of its id"
}

// ticketKey marks the context of a transaction whose commit ticket lib/pq's BEGIN
// reads (withTicket).
type ticketKey struct{}

// withTicket is ctx, for a write transaction about to begin on lib/pq: its BEGIN
// (a guardedConn's) reads the transaction's commit ticket in the same round trip
// (beginTicketSQL), and commit finds it there. One ticket per transaction: ctx is
// the one it begins and commits with.
func withTicket(ctx context.Context) context.Context {
	return &ticketContext{Context: ctx}
}

// ticketContext is a context with a place for its transaction's ticket: one
// allocation, where context.WithValue and the ticket would take two.
type ticketContext struct {
	context.Context
	ticket commitTicket
}

func (c *ticketContext) Value(key any) any {
	if key == (ticketKey{}) {
		return &c.ticket
	}
	return c.Context.Value(key)
}

// ticketOf is the ticket ctx (of withTicket) has a place for, or nil.
func ticketOf(ctx context.Context) *commitTicket {
	t, _ := ctx.Value(ticketKey{}).(*commitTicket)
	return t
}

// commit commits tx, which began with ctx: with the commitTicket its BEGIN read
// (lib/pq), or one it reads first, and, when COMMIT loses its connection, asks what
// became of it (resolveCommit).
func (db *DB) commit(ctx context.Context, tx *sql.Tx) error {
	var t commitTicket
	if begun := ticketOf(ctx); begun != nil && begun.read {
		t = *begun
	} else {
		var err error
		if t, err = readTicket(db.ticketRow(ctx, tx)); err != nil {
			if lostConnection(err) {
				// COMMIT was never sent: the server rolls back a transaction whose
				// connection ends. The *sql.Tx must end here all the same: refset
				// counts a transaction handed to Commit as ended, and one left open
				// keeps its connection out of the pool until its context ends (never,
				// for context.Background()). Rollback on a lost connection fails, and
				// database/sql then discards the connection rather than pool it.
				_ = tx.Rollback()
				return refsetdriver.NotCommitted(err)
			}
			// The ticket's failure leaves the transaction aborted (or the context
			// ended): COMMIT then says so as it always did.
			return tx.Commit()
		}
	}
	sent := ctx.Err() == nil // else database/sql refuses to commit, sending nothing
	err := tx.Commit()
	if err != nil && sent && db.pool.DriverName() == DriverPgx && pgxGaveUp(err) {
		err = sentinel.New("", "", refset.ErrUnavailable, fmt.Errorf("the context ended while COMMIT awaited its answer, and pgx closed the connection: %w", err))
	}
	if err == nil || !lostConnection(err) {
		return err
	}
	return db.resolveCommit(ctx, t, err)
}

// pgxGaveUp reports whether err, the error of a COMMIT sent on pgx, is pgx giving up
// on the answer because the transaction's context ended: pgx then closes the
// connection, and, unless it says COMMIT was not sent (safe to retry), the server
// may run it. So its outcome is asked, as a lost COMMIT's is, rather than reported
// as the context's end, which says nothing of whether it committed (as for a
// pipelined unit: commitGivenUp). pgx reports a deadline as a timeout, and a cancel
// as the context's error itself.
func pgxGaveUp(err error) bool {
	return (pgconn.Timeout(err) || errors.Is(err, context.Canceled)) && !pgconn.SafeToRetry(err)
}

// ticketRow reads ticketSQL in tx: prepared if it is (db.ticket).
func (db *DB) ticketRow(ctx context.Context, tx *sql.Tx) *sql.Row {
	if db.ticket == nil {
		return tx.QueryRowContext(ctx, ticketSQL)
	}
	return tx.StmtContext(ctx, db.ticket).QueryRowContext(ctx)
}

// readTicket scans a ticket from the row of ticketSQL.
func readTicket(row interface{ Scan(...any) error }) (commitTicket, error) {
	t := commitTicket{read: true}
	err := row.Scan(&t.raw)
	return t, err
}

// lostConnection reports whether err, a driver's error, is the loss of the
// connection or the server (ErrUnavailable) rather than the server's answer.
func lostConnection(err error) bool {
	return errors.Is(translateError(err, "COMMIT"), refset.ErrUnavailable)
}

// resolveCommit is the outcome of the transaction of t, whose COMMIT failed with
// lost: nil when it committed, an error marked refsetdriver.NotCommitted (with
// ErrUnavailable) when it did not, or ErrCommitUnknown (with ErrUnavailable) when no
// server could tell within Options.ResolveCommitWait. It asks again, with back-off,
// while no primary answers and while the server that ran the transaction is still
// committing it.
func (db *DB) resolveCommit(ctx context.Context, t commitTicket, lost error) error {
	cause := translateError(lost, "COMMIT")
	if !t.read {
		return commitUnknown(cause, "the transaction's id was not read before the connection was lost")
	}
	if t.raw == "" {
		return refsetdriver.NotCommitted(sentinel.Wrap(msgPrefix, "commit",
			fmt.Errorf("the connection was lost while committing a transaction that wrote nothing, so nothing changed: %w", cause)))
	}
	if db.resolveWait <= 0 {
		return commitUnknown(cause, "Options.ResolveCommitWait is negative: the outcome was not asked")
	}
	xid, lsn, server, err := t.fields()
	if err != nil {
		return commitUnknown(cause, err.Error())
	}
	var o outcome
	var reason string
	asked, why, told := db.askUntilTold(ctx, func(ctx context.Context) (bool, string) {
		var err error
		o, reason, err = db.askOutcome(ctx, xid, lsn, server)
		switch {
		case err != nil:
			return false, fmt.Sprintf("no primary answered (last: %v)", err)
		case o == outcomeCommitting:
			return false, reason
		}
		return true, ""
	})
	log := db.Driver().Logger()
	switch {
	case !told:
		return commitUnknown(cause, why)
	case o == outcomeCommitted:
		log.LogAttrs(ctx, slog.LevelWarn, "refset/postgres: connection lost while committing; the transaction committed",
			slog.String("xid", xid), slog.Duration("asked_for", asked.Round(time.Millisecond)), slog.Any("cause", cause))
		return nil
	case o == outcomeNotCommitted:
		log.LogAttrs(ctx, slog.LevelWarn, "refset/postgres: connection lost while committing; the transaction did not commit",
			slog.String("xid", xid), slog.String("reason", reason), slog.Any("cause", cause))
		return refsetdriver.NotCommitted(sentinel.Wrap(msgPrefix, "commit",
			fmt.Errorf("the connection was lost while committing, and %s: nothing changed: %w", reason, cause)))
	default: // forgotten
		return commitUnknown(cause, reason)
	}
}

// commitUnknown is the error of a lost COMMIT whose outcome no server told.
func commitUnknown(cause error, why string) error {
	return sentinel.New(msgPrefix, "commit", refset.ErrCommitUnknown, fmt.Errorf("the connection was lost while committing, and whether the transaction committed is unknown (%s): %w", why, cause))
}

// askOutcome asks the primary the pool leads to about the transaction of a ticket's
// fields. The question
// runs in a transaction with an id of its own: a standby refuses it, and its COMMIT
// waits for the synchronous standbys to have the asked-about commit too. err is the
// server's refusal or a lost connection: ask again.
func (db *DB) askOutcome(ctx context.Context, xid, lsn, server string) (o outcome, reason string, err error) {
	tx, err := db.pool.BeginTx(ctx, nil)
	if err != nil {
		return 0, "", err
	}
	defer tx.Rollback()
	var status string
	var sameServer, replayedPast bool
	if err := tx.QueryRowContext(ctx, outcomeSQL, xid, lsn, server).Scan(&status, &sameServer, &replayedPast); err != nil {
		return 0, "", err
	}
	if err := tx.Commit(); err != nil {
		return 0, "", err
	}
	o, reason = decideOutcome(status, sameServer, replayedPast)
	return o, reason, nil
}

// resolveContext is the context the outcome of a lost COMMIT is asked in: up to
// wait, even past ctx's end (the connection is often lost because ctx ended, and
// the caller is better served by an answer than by ErrCommitUnknown), but no more
// than resolveGrace once ctx has ended.
func resolveContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	askCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(resolveGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-askCtx.Done():
		}
	})
	return askCtx, func() {
		stop()
		cancel()
	}
}

// resolveGrace is how long the outcome of a lost COMMIT is still asked once the
// call's context has ended.
const resolveGrace = 5 * time.Second

// askUntilTold calls ask, in the context resolveContext gives for db.resolveWait,
// and again with back-off (from 50ms, doubling up to a second) until it is told the
// outcome of a lost COMMIT or of a statement that commits on its own. asked is how
// long it asked; told is false when the wait ended first, and why then says how long
// that was and ask's last reason to ask again (notYet).
func (db *DB) askUntilTold(ctx context.Context, ask func(ctx context.Context) (told bool, notYet string)) (asked time.Duration, why string, told bool) {
	askCtx, stop := resolveContext(ctx, db.resolveWait)
	defer stop()
	start := time.Now()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		told, notYet := ask(askCtx)
		if told {
			return time.Since(start), "", true
		}
		if ctxerr.Sleep(askCtx, wait) != nil {
			asked = time.Since(start)
			return asked, fmt.Sprintf("asked for %s: %s", asked.Round(time.Millisecond), notYet), false
		}
	}
}
