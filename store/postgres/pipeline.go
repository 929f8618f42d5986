package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// pgxPipeline runs a hand-over made only of refset.Exec commands on pgx in segments,
// each one pgx.Batch, one round trip: the first begins the transaction, the last
// commits it, and no statement runs before the row count of the one before it was
// checked. The server checks the counts of the statements it can (an INSERT, UPDATE
// or DELETE: rowcheck.go), so a hand-over of those is one segment, where database/sql
// takes four round trips; a segment ends after any other statement whose count is
// checked, read before the next is sent. The statements run in the connection's own
// query mode, prepared through pgx's statement cache by default.
//
// Where lost commits are resolved (Options.ResolveCommitWait, on by default), the
// commit's ticket (resolve.go) must reach refset before the transaction commits: a
// server sends a batch's answers only when it reaches the batch's Sync, or a Flush
// message, and pgx's batches send no Flush, so a ticket read in the batch that
// commits is lost with the commit's answer, and the lost commit could never be
// resolved. So the last segment goes through pgx's pipeline, a Flush after the
// ticket: [BEGIN, DELETE, INSERT, ticket, Flush, COMMIT] for a hand-over, still one
// round trip (flushed.go). A connection whose query mode cannot send it so (the
// simple protocol, or a mode that describes every statement first) sends the ticket
// at the end of the statements' batch and COMMIT alone once it is read, one round
// trip more; a connection lost before that COMMIT was sent lost a transaction that did
// not commit (ErrUnavailable). A commit lost once the ticket was read is resolved with
// it.
//
// Without resolution, a unit of one segment at the session's own isolation level (an
// Add, a hand-over of INSERTs, UPDATEs and DELETEs) sends no BEGIN and no COMMIT:
// [DELETE, INSERT], then the batch's one Sync. What a batch sends before its Sync
// runs as one implicit transaction, which the server commits when it reaches the
// Sync, once every statement ran, or rolls back after any failure, skipping the
// statements after it (PostgreSQL's extended query protocol, and its simple
// protocol's multi-statement query; pgx's SendBatch sends either so). A unit of
// several segments, or at another level, begins and commits as database/sql would:
// [BEGIN ..., statements], ..., [statements, COMMIT].
//
// The batch goes over the pool's connection itself (sql.Conn.Raw): database/sql's
// transactions have no way to send BEGIN with the statements after it.
type pgxPipeline struct {
	db   *DB
	opts pgx.TxOptions
	// cancels is whether a call whose context ends while its COMMIT segment runs
	// sends the server a cancel request (see watchCommit). Not behind a pooler
	// (Options.Unprepared): a pooler may mishandle cancel requests (PgBouncer before
	// 1.19.1 crashes on them), so the segment is waited for instead.
	cancels bool
	// checks are the statements whose row counts the server checks, as sent.
	checks *rowChecks
	// begin is BEGIN with opts, as pgx writes it (flushed.go).
	begin string
}

// newPgxPipeline is the pipeline of db, opened on pgx, whose transactions have the
// isolation level iso, or nil when pgx's stdlib would refuse the level (the
// transaction then begins as before, and fails as before). Unprepared (behind a
// pooler) it sends no cancel request.
func newPgxPipeline(db *DB, iso sql.IsolationLevel, unprepared bool) (pgxPipeline, bool) {
	var opts pgx.TxOptions
	switch iso {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		opts.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		opts.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		opts.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		opts.IsoLevel = pgx.Serializable
	default:
		return pgxPipeline{}, false
	}
	var b pgx.Batch
	b.BeginTx(opts)
	return pgxPipeline{db: db, opts: opts, cancels: !unprepared, checks: newRowChecks(), begin: b.QueuedQueries[0].SQL}, true
}

// run is refsetdriver.Pipeliner.RunPipeline.
func (p pgxPipeline) run(ctx context.Context, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc) error {
	conn, ticket, err := p.db.pipelineConn(ctx)
	if err != nil {
		return err
	}
	err = conn.Raw(func(dc any) error {
		c, ok := stdlibOf(dc).(*stdlib.Conn)
		if !ok {
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: sentinel.New(msgPrefix, "", refset.ErrInvalidConfig, fmt.Errorf("the pool's connection is a %T, not pgx's", dc))}
		}
		settleRaw(ctx, dc)
		return p.runOn(ctx, c.Conn(), stmts, result, ticket)
	})
	// The unit's connection goes back to the pool (dropped, if lost) before a lost
	// commit is resolved: resolveCommit asks on a connection of the pool, which on
	// a pool of one is that one, and would otherwise wait for it in vain until
	// ResolveCommitWait ran out (ErrCommitUnknown for a commit it could have told).
	_ = conn.Close()
	var pe *refsetdriver.PipelineError
	if ticket != nil && errors.As(err, &pe) && pe.Query == "COMMIT" && lostConnection(pe.Err) {
		if err := p.db.resolveCommit(ctx, *ticket, pe.Err); err != nil {
			return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
		}
		return nil
	}
	return err
}

// runOn runs stmts on c, segment by segment, reading the commit's ticket into
// ticket unless it is nil (run resolves a lost COMMIT with it). Every way out but a
// commit rolls back, a panic too; a connection that cannot roll back is closed by
// pgx, and database/sql drops it (and one whose Raw panicked).
//
// A statement the server refused to run with its count checked (a table's rules:
// rowCheckedInvalid) is sent as it is from then on, and the unit runs again: it had
// run nothing it keeps, and ran nothing after that statement. So does a unit that
// found a statement prepared for it gone (staleFlushed: the caller's DEALLOCATE ALL
// or DISCARD ALL on the connection), once.
func (p pgxPipeline) runOn(ctx context.Context, c *pgx.Conn, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc, ticket *commitTicket) error {
	sent := make([]string, len(stmts))
	for i, s := range stmts {
		sent[i] = p.checks.sent(s)
	}
	err := p.segments(ctx, c, stmts, sent, result, ticket)
	for {
		var unchecked *uncheckable
		if !errors.As(err, &unchecked) {
			break
		}
		i := unchecked.i
		p.checks.refuse(stmts[i])
		sent[i] = stmts[i].Query
		if ctx.Err() != nil || c.IsClosed() {
			err = orError(result(i, 0, unchecked.err), unchecked.err)
			break
		}
		err = p.segments(ctx, c, stmts, sent, result, ticket)
	}
	var stale *staleFlushed
	if errors.As(err, &stale) && ctx.Err() == nil && !c.IsClosed() {
		if stale.pgxCache {
			// pgx's statement cache keeps what the server forgot, and would send
			// its names for ever: it forgets them too (the server has none left
			// but those refset's flushed segments prepare anew).
			if dropErr := c.DeallocateAll(ctx); dropErr != nil {
				return err
			}
			forgetFlushed(c)
		}
		err = p.segments(ctx, c, stmts, sent, result, ticket) // once: its statements prepared anew
	}
	return err // a lost commit is resolved by run, once the connection is released
}

// pipelineConn is the connection a pipelined unit runs on, and where its commit ticket
// is read (see resolve.go) if lost commits are resolved, else nil: one per run, never
// shared between runs. err is the unit's failure to begin.
func (db *DB) pipelineConn(ctx context.Context) (*sqlx.Conn, *commitTicket, error) {
	var ticket *commitTicket
	if db.resolveWait > 0 {
		ticket = new(commitTicket)
	}
	if db.Closed() {
		return nil, nil, &refsetdriver.PipelineError{Query: "BEGIN", Err: fmt.Errorf("refset/postgres: begin: %w", refset.ErrClosed)}
	}
	if err := db.storeEngine.RefuseOwnPool("begin"); err != nil {
		return nil, nil, &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
	}
	conn, err := db.takeConn(ctx, nil)
	if err != nil {
		return nil, nil, &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
	}
	return conn, ticket, nil
}

// segments runs stmts on c, segment by segment, sending sent[i] for stmts[i] (the
// statement, or the statement that checks its count: rowChecks.sent), and reading the
// commit's ticket (see resolve.go) into ticket with the last unless ticket is nil.
func (p pgxPipeline) segments(ctx context.Context, c *pgx.Conn, stmts []refsetdriver.Statement, sent []string, result refsetdriver.ResultFunc, ticket *commitTicket) error {
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, c)
		}
	}()
	for start := 0; ; {
		end := segmentEnd(stmts, sent, start)
		last := end == len(stmts) && (end == start || !readBeforeNext(stmts, sent, end-1))
		if err := ctx.Err(); err != nil && start > 0 {
			return err // given up on between segments: COMMIT was never sent
		}
		// The last segment commits, or, to resolve a lost commit, reads the ticket
		// and leaves COMMIT to a batch of its own (see pgxPipeline).
		seg := segment{start: start, end: end, begins: start == 0, commits: last && ticket == nil, ticket: last && ticket != nil}
		seg.implicit = seg.begins && seg.commits && p.opts == pgx.TxOptions{}
		if seg.ticket {
			if err, ok := p.flushed(ctx, c, seg, stmts, sent, ticket, result); ok {
				committed = err == nil
				return err
			}
		}
		var b pgx.Batch
		if seg.sendsBegin() {
			b.BeginTx(p.opts)
		}
		for i := start; i < end; i++ {
			b.Queue(sent[i], stmts[i].Args...)
		}
		if seg.ticket {
			b.Queue(ticketSQL)
		}
		if seg.sendsCommit() {
			b.Queue("commit")
		}
		err := p.send(ctx, c, &b, seg.commits, func(br pgx.BatchResults) error {
			return readSegment(c, br, seg, stmts, sent, ticket, result)
		}, func(closeErr error) error {
			if seg.commits {
				return &refsetdriver.PipelineError{Query: "COMMIT", Err: closeErr}
			}
			if seg.ticket {
				return &refsetdriver.PipelineError{Query: "BEGIN", Err: closeErr}
			}
			return orError(result(end-1, 0, closeErr), closeErr)
		})
		if goneFromPgxCache(err) {
			return &staleFlushed{err: err, pgxCache: true}
		}
		if err == nil && seg.ticket {
			if err = ctx.Err(); err != nil {
				return err // given up on before COMMIT was sent
			}
			var commit pgx.Batch
			commit.Queue("commit")
			err = p.send(ctx, c, &commit, true, func(br pgx.BatchResults) error {
				if _, err := br.Exec(); err != nil {
					return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
				}
				return nil
			}, func(closeErr error) error { return &refsetdriver.PipelineError{Query: "COMMIT", Err: closeErr} })
		}
		if err != nil {
			return err
		}
		if last {
			committed = true
			return nil
		}
		start = end
	}
}

// send sends b on c and reads its results with read; closed is the error of a batch
// whose results read well but whose close failed. A batch that commits runs watched
// (watchCommit): given up on, its connection is closed, and a COMMIT it may have run is
// resolved as a lost one.
func (p pgxPipeline) send(ctx context.Context, c *pgx.Conn, b *pgx.Batch, commits bool, read func(pgx.BatchResults) error, closed func(error) error) error {
	segCtx, endSegment := ctx, func() bool { return false }
	if commits {
		segCtx, endSegment = watchCommit(ctx, c, p.cancels)
	}
	watching := true
	defer func() {
		if watching {
			endSegment() // a panic (a tracer's, or read's): the watch ends with the call (see flushed)
		}
	}()
	br := c.SendBatch(segCtx, b)
	err := read(br)
	if closeErr := br.Close(); err == nil && closeErr != nil {
		err = closed(closeErr)
	}
	watching = false
	if endSegment() {
		// A cancel request went out, and could reach the server late, when the
		// connection runs someone else's statement (or, without cancels, the
		// segment may have been cut short): the connection is done.
		rollback(ctx, c)
		_ = c.Close(context.WithoutCancel(ctx))
		if commits {
			err = commitGivenUp(err)
		}
		err = givenUp(ctx, err)
	}
	return err
}

// cancelGrace is how long the segment that carries COMMIT waits for the server to
// answer, once the call's context ended and a cancel request was sent, before it
// closes the connection and the commit's outcome is unknown.
const cancelGrace = 5 * time.Second

// watchCommit is the context the segment that carries COMMIT runs in, on c, and what
// ends the watch. Had pgx closed the connection when ctx ended, as it does, the server
// could still run the COMMIT it had received: a hand-over given up on might then
// commit. So the segment's context does not end with ctx; when ctx ends, a cancel
// request makes the server refuse the statement it runs (the transaction then rolls
// back and says so) or, if it is committing already, lets the commit end, and the
// segment reads which. Only a server that does not answer within cancelGrace has the
// connection closed, and the COMMIT it may still run is resolved as a lost one
// (commitGivenUp). Without cancels (behind a pooler), no cancel request is sent:
// the segment has cancelGrace to end on its own. end reports whether ctx ended while
// the segment ran, when the connection may be left with a cancel request in flight
// or a segment cut short.
func watchCommit(ctx context.Context, c *pgx.Conn, cancels bool) (segCtx context.Context, end func() (cancelled bool)) {
	segCtx, giveUp := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		wait, cancel := context.WithTimeout(segCtx, cancelGrace)
		defer cancel()
		if cancels {
			_ = c.PgConn().CancelRequest(wait)
		}
		<-wait.Done() // the segment ended, or the grace did
		giveUp()
	})
	return segCtx, func() bool {
		stopped := stop()
		giveUp()
		if stopped {
			return false
		}
		<-done
		return true
	}
}

// commitGivenUp is err, the error of the segment that carries COMMIT, which ran on
// past the call's context by cancelGrace and was given up on (watchCommit), its
// connection closed: when the server had not answered the COMMIT it was sent, the
// commit is as lost as if the server had gone, and so resolved (runOn), not reported
// as the context's end, which says nothing of whether it committed. A server's answer
// (the transaction refused, or cancelled by the cancel request) is left as it is.
// The commit's ticket was read before COMMIT was sent (see pgxPipeline), so the
// commit is resolved; without resolution, the outcome is ErrCommitUnknown.
func commitGivenUp(err error) error {
	var pe *refsetdriver.PipelineError
	if !errors.As(err, &pe) || pe.Query != "COMMIT" || isServerError(pe.Err) {
		return err
	}
	// No prefix of its own: resolveCommit and refset's layers above say it.
	return &refsetdriver.PipelineError{Query: "COMMIT", Err: sentinel.New("", "", refset.ErrUnavailable,
		fmt.Errorf("the server had not answered COMMIT %s after the call's context ended, and the connection was closed", cancelGrace))}
}

// givenUp is err, the error of the segment that carries COMMIT, which ran on while
// the call's context ended: where pgx reports the segment cut short by refset giving
// up on it (watchCommit cancels the segment's own context), it is an interrupted
// statement, which the call's context says the cause of, deadline or cancel, as for
// any statement. The segment's own context.Canceled is left out of the chain: it is
// refset's, and would say cancel for a deadline.
func givenUp(ctx context.Context, err error) error {
	cause := ctx.Err()
	if err == nil || cause == nil || !errors.Is(err, context.Canceled) || errors.Is(err, cause) {
		return err
	}
	detached := func(err error) error { return ctxerr.Interrupted(errors.New(err.Error())) }
	var pe *refsetdriver.PipelineError
	if errors.As(err, &pe) {
		return &refsetdriver.PipelineError{Query: pe.Query, Err: detached(pe.Err)}
	}
	return detached(err)
}

// segmentEnd is where the segment that starts at start ends: after the first
// statement from start whose result must be read before the next is sent, or at the
// end.
func segmentEnd(stmts []refsetdriver.Statement, sent []string, start int) int {
	for i := start; i < len(stmts); i++ {
		if readBeforeNext(stmts, sent, i) {
			return i + 1
		}
	}
	return len(stmts)
}

// readBeforeNext reports whether stmts[i]'s result must be read before the next
// statement is sent: its count is checked, by refset (it is sent as it is).
func readBeforeNext(stmts []refsetdriver.Statement, sent []string, i int) bool {
	return stmts[i].Checked && sent[i] == stmts[i].Query
}

// serverChecks reports whether the server checks stmts[i]'s count (sent[i] is the
// statement that does).
func serverChecks(stmts []refsetdriver.Statement, sent []string, i int) bool {
	return stmts[i].Checked && sent[i] != stmts[i].Query
}

// uncheckable is the failure of stmts[i], sent to have its count checked by the
// server, that the server may not have given the statement sent as it is
// (rowCheckedInvalid): the unit is to run again without the check (runOn).
type uncheckable struct {
	i   int
	err error
}

func (e *uncheckable) Error() string { return e.err.Error() }
func (e *uncheckable) Unwrap() error { return e.err }

// statementFailed is the error of stmts[i], which failed with err: the count the
// server refused, as a count, or the failure.
func statementFailed(stmts []refsetdriver.Statement, sent []string, i int, err error, result refsetdriver.ResultFunc) error {
	if serverChecks(stmts, sent, i) {
		if refused, ok := checkRefused(true, i, err, result); ok {
			return refused
		}
	}
	return orError(result(i, 0, err), err)
}

// checkRefused is the error of stmts[i], which the server ran as the statement that
// checks or returns its row count (rowChecks) and which failed with err, when the
// failure is that statement's: the count it refused, if checked, given to result as
// a count; or the server refusing to run it so (rowCheckedInvalid), which makes the
// unit run again with the statement as it is (uncheckable). ok is false for any other
// failure.
func checkRefused(checked bool, i int, err error, result refsetdriver.ResultFunc) (refused error, ok bool) {
	if checked {
		if n, counted := rowCountRefused(err); counted {
			return orError(result(i, n, nil), err), true
		}
	}
	if rowCheckedInvalid(err) {
		return &uncheckable{i: i, err: err}, true
	}
	return nil, false
}

// segment is one batch of a pipelined unit: stmts[start:end], after BEGIN if it
// begins the transaction, followed by COMMIT if it commits it, or by the commit's
// ticket if it is the last, COMMIT then sent alone; with neither BEGIN nor COMMIT if
// it is implicit (it both begins and commits: the batch's Sync commits).
type segment struct {
	start, end      int
	begins, commits bool
	ticket          bool // it ends with the commit's ticket (and does not commit)
	implicit        bool
}

// sendsBegin and sendsCommit report whether the segment sends BEGIN and COMMIT.
func (s segment) sendsBegin() bool  { return s.begins && !s.implicit }
func (s segment) sendsCommit() bool { return s.commits && !s.implicit }

// readSegment reads the results of one segment in order: BEGIN's if it sent one, those
// of stmts[seg.start:seg.end] (sent as sent[seg.start:seg.end]), the ticket's if it
// reads it, and COMMIT's if it commits. After a statement the server refused it skipped the rest of
// the segment, COMMIT included (an implicit transaction: it rolled back at the Sync).
// The server's answer to an implicit transaction's commit, or a commit it never
// answered, is the batch's Close (segments).
func readSegment(c *pgx.Conn, br pgx.BatchResults, seg segment, stmts []refsetdriver.Statement, sent []string, ticket *commitTicket, result refsetdriver.ResultFunc) error {
	start, end, last := seg.start, seg.end, seg.commits
	if seg.sendsBegin() {
		if _, err := br.Exec(); err != nil {
			// A statement that does not prepare fails the whole batch before
			// anything runs, BEGIN's result included: it is that statement's error.
			if i, ok := failedToPrepare(err, sent, start, end); ok {
				return statementFailed(stmts, sent, i, err, result)
			}
			if last && unanswered(c, err) && c.IsClosed() {
				// The segment carries COMMIT too, and was sent: it may have run. (A
				// failure that left the connection open is pgx's before it sent
				// anything: an argument it cannot encode, in some query modes.)
				return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
			}
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
		}
	}
	for i := start; i < end; i++ {
		tag, err := br.Exec()
		if err != nil {
			if j, ok := failedToPrepare(err, sent, start, end); ok {
				return statementFailed(stmts, sent, j, err, result)
			}
			if !seg.sendsBegin() && i == start && !c.IsClosed() && !isServerError(err) {
				// The first result of a segment without BEGIN (an implicit one, or
				// one after the first segment) is the first of its batch: as at
				// BEGIN's above, a failure that is not the server's and left the
				// connection open is pgx's, before it sent anything (an argument it
				// cannot encode, in exec mode), the batch's; not a lost COMMIT.
				return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
			}
			if last && unanswered(c, err) {
				// No answer, the connection lost: COMMIT was sent (or the Sync that
				// commits), and may have run.
				return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
			}
			return statementFailed(stmts, sent, i, err, result)
		}
		rows := tag.RowsAffected()
		if serverChecks(stmts, sent, i) {
			rows = stmts[i].Rows // the statement's one row, the count it checked
		}
		if err := result(i, rows, nil); err != nil {
			return err
		}
	}
	if seg.ticket {
		t, err := readTicket(br.QueryRow())
		if err != nil {
			// COMMIT was not sent: the transaction did not commit.
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
		}
		*ticket = t
	}
	if !seg.sendsCommit() {
		return nil
	}
	if _, err := br.Exec(); err != nil {
		return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
	}
	return nil
}

// isServerError reports whether err is the server's answer.
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// unanswered reports whether err, the failure to read a result of a batch on c, is no
// answer from the server (the connection lost, or given up on: watchCommit) once
// the batch may have reached it. pgx's word that it sent nothing (SafeToRetry) is
// taken only while c is open: pgx v5.12, reading a simple protocol's answer (the
// batch of a pool in simple_protocol mode) from a connection that was lost, reports
// the connection it then closed as "conn closed", safe to retry, though the batch was
// sent.
func unanswered(c *pgx.Conn, err error) bool {
	return !isServerError(err) && (c.IsClosed() || !pgconn.SafeToRetry(err))
}

// failedToPrepare is the statement of sent[start:end] that err, a batch's failure
// before it ran, says did not prepare.
func failedToPrepare(err error, sent []string, start, end int) (int, bool) {
	var pe pgx.ErrPreprocessingBatch
	if !errors.As(err, &pe) {
		return 0, false
	}
	for i := start; i < end; i++ {
		if sent[i] == pe.SQL() {
			return i, true
		}
	}
	return 0, false
}

// orError is err, or fallback if err is nil: a ResultFunc refusing a failed
// statement is expected, but the failure must end the unit either way.
func orError(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

// rollback ends c's transaction, if it has one open, even when ctx has ended. A
// connection that cannot roll back is closed, so that database/sql discards it
// rather than lend it again inside the transaction given up on.
func rollback(ctx context.Context, c *pgx.Conn) {
	if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
		return
	}
	if _, err := c.Exec(context.WithoutCancel(ctx), "rollback"); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
	}
}
