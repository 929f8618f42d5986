package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/refsetdb/refset/refsetdriver"
)

// The last segment of a pipelined unit whose lost commit is to be resolved must let
// the commit's ticket reach refset before the server commits, or a connection lost
// at COMMIT loses the ticket with COMMIT's answer (see pgxPipeline). A server sends
// what it has answered when it reaches a Sync or a Flush message, so the segment is
// sent, in one round trip, as
//
//	[BEGIN] statements, ticket, Flush, COMMIT, Sync
//
// through pgx's pipeline (pgx's Batch sends no Flush): the ticket leaves the server
// before COMMIT runs. Where the connection's query mode does not allow it (see
// flushable), or it has prepared as many statements as it may keep (flushedMost),
// the ticket ends the statements' batch and COMMIT goes in a batch of its own, one
// round trip more.

// flushedMost is how many statements one connection keeps prepared for flushed
// segments, as pgx's own statement cache bounds its: a program that makes its
// statements' text anew (values written into it) fills it, and its units then take
// the round trip more.
const flushedMost = 256

// keyFlushed is where a pgx connection keeps the statements it prepared for flushed
// segments (PgConn.CustomData): their descriptions, by SQL text (flushedStatements).
const keyFlushed = "refset.flushed"

// flushable reports whether c's query mode sends statements as flushed segments do:
// prepared once by name (QueryExecModeCacheStatement, pgx's default), or with their
// arguments as text, unprepared (QueryExecModeExec, behind a pooler). The others
// (describing each statement first, or the simple protocol, which has no Flush) take
// the two batches.
func flushable(c *pgx.Conn) (prepares, ok bool) {
	switch c.Config().DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement:
		return true, true
	case pgx.QueryExecModeExec:
		return false, true
	}
	return false, false
}

// flushedSegment is one statement of a flushed segment, its arguments encoded.
type flushedSegment struct {
	sql string
	sd  *pgconn.StatementDescription // prepared; nil: sent unprepared
	eqb pgx.ExtendedQueryBuilder
}

// flushed runs seg, the last segment of a unit whose ticket is to be read, as one
// round trip (see above), reading the ticket into ticket; ok is false when c cannot,
// nothing sent, and the caller sends it in two batches. Errors are those of
// readSegment: a statement's, the ticket's (BEGIN: the unit did not commit), or
// COMMIT's, which runOn resolves with the ticket when it was read.
func (p pgxPipeline) flushed(ctx context.Context, c *pgx.Conn, seg segment, stmts []refsetdriver.Statement, sent []string, ticket *commitTicket, result refsetdriver.ResultFunc) (err error, ok bool) {
	prepares, ok := flushable(c)
	if !ok {
		return nil, false
	}
	// [BEGIN] statements, ticket, COMMIT: each prepared once per connection where the
	// connection prepares, its arguments encoded before anything is sent.
	queries := make([]flushedSegment, 0, seg.end-seg.start+3)
	add := func(q string, args []any) (prepareErr, encodeErr error, kept bool) {
		f := flushedSegment{sql: q}
		if prepares {
			if f.sd, prepareErr, kept = prepareFlushed(ctx, c, q); !kept || prepareErr != nil {
				return prepareErr, nil, kept
			}
		}
		if encodeErr = f.eqb.Build(c.TypeMap(), f.sd, args); encodeErr == nil {
			queries = append(queries, f)
		}
		return nil, encodeErr, true
	}
	// refset's own statements: a failure is the transaction's, and nothing was sent.
	own := func(q string) (err error, kept bool) {
		prepareErr, encodeErr, kept := add(q, nil)
		if err = orError(prepareErr, encodeErr); err != nil {
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}, kept
		}
		return nil, kept
	}
	if seg.sendsBegin() {
		if err, kept := own(p.begin); !kept || err != nil {
			return err, kept
		}
	}
	for i := seg.start; i < seg.end; i++ {
		prepareErr, encodeErr, kept := add(sent[i], stmts[i].Args)
		switch {
		case !kept:
			return nil, false
		case prepareErr != nil:
			return statementFailed(stmts, sent, i, prepareErr, result), true
		case encodeErr != nil:
			// An argument pgx cannot encode, the statement's mistake.
			return orError(result(i, 0, encodeErr), encodeErr), true
		}
	}
	for _, q := range []string{ticketSQL, "commit"} {
		if err, kept := own(q); !kept || err != nil {
			return err, kept
		}
	}

	segCtx, endSegment := watchCommit(ctx, c, p.cancels)
	watching := true
	defer func() {
		if watching {
			// A panic (the caller's tracer, or result): the watch ends with the
			// segment, or it would outlive the call, and once ctx ends send a
			// cancel request for the connection and wait cancelGrace for nothing.
			// The panic goes on; segments rolls back, or closes a connection left
			// in the pipeline's middle, whose segment may then commit whole.
			endSegment()
		}
	}()
	tr := traceFlushed(segCtx, c, queries, stmts[seg.start:seg.end], seg.sendsBegin())
	pl := c.PgConn().StartPipeline(segCtx)
	for i, f := range queries {
		if i == len(queries)-1 {
			pl.SendFlushRequest() // the ticket's answer leaves the server before COMMIT runs
		}
		if f.sd != nil {
			pl.SendQueryStatement(f.sd, f.eqb.ParamValues, f.eqb.ParamFormats, f.eqb.ResultFormats)
		} else {
			pl.SendQueryParams(f.sql, f.eqb.ParamValues, nil, f.eqb.ParamFormats, f.eqb.ResultFormats)
		}
	}
	if err = pl.Sync(); err != nil {
		// Sending failed: what went, COMMIT with it, may have reached the server.
		err = &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
	} else {
		err = readFlushed(c, pl, seg, stmts, sent, ticket, result, tr)
	}
	tr.end(err)
	// Close reads what is left up to the Sync (after a refused statement), or closes
	// a connection whose answers cannot be read.
	if closeErr := pl.Close(); err == nil && closeErr != nil {
		err = &refsetdriver.PipelineError{Query: "COMMIT", Err: closeErr}
	}
	if goneFlushed(c, err) {
		// A statement prepared for flushed segments is gone from the server (the
		// caller's DEALLOCATE ALL or DISCARD ALL on this connection): forgotten, all
		// of them, to be prepared again, and the unit runs again (runOn); the server
		// skipped the rest of the segment, COMMIT included.
		forgetFlushed(c)
		err = &staleFlushed{err: err}
	}
	watching = false
	if endSegment() {
		// As for a batch that commits (send): the connection is done, and a COMMIT
		// it may have run is resolved.
		rollback(ctx, c)
		_ = c.Close(context.WithoutCancel(ctx))
		err = givenUp(ctx, commitGivenUp(err))
	}
	return err, true
}

// staleFlushed is the failure of a segment whose prepared statement the server no
// longer had, one of refset's flushed segments' or of pgx's statement cache
// (pgxCache): the unit ran nothing it keeps, and runs again (runOn).
type staleFlushed struct {
	err      error
	pgxCache bool
}

// goneFromPgxCache reports whether err is the server's word that a statement pgx
// prepared, which a batch ran, is gone (SQLSTATE 26000 naming one of the statements
// of pgx's cache, stmtcache_..., or one database/sql prepared through pgx, stmt_...,
// which pgx's batches reuse for the same text): not a caller's own statement's
// failure.
func goneFromPgxCache(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeInvalidSQLStatementName &&
		(strings.Contains(pgErr.Message, `"stmtcache_`) || strings.Contains(pgErr.Message, `"stmt_`))
}

func (e *staleFlushed) Error() string { return e.err.Error() }
func (e *staleFlushed) Unwrap() error { return e.err }

// readFlushed reads a flushed segment's answers in order, as readSegment reads a
// batch's: BEGIN's, the statements', the ticket's, COMMIT's, and the Sync's. After a
// statement the server refused it skipped the rest, COMMIT included, up to the Sync.
func readFlushed(c *pgx.Conn, pl *pgconn.Pipeline, seg segment, stmts []refsetdriver.Statement, sent []string, ticket *commitTicket, result refsetdriver.ResultFunc, tr *flushTrace) error {
	// next is the tag of the next statement's answer, read to its end.
	next := func() (pgconn.CommandTag, error) {
		res, err := pl.GetResults()
		if err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			if !ok {
				return pgconn.CommandTag{}, fmt.Errorf("refset/postgres: a pipeline's answer of another kind: %T", res)
			}
			var tag pgconn.CommandTag
			tag, err = rr.Close()
			tr.query(tag, err)
			return tag, err
		}
		tr.query(pgconn.CommandTag{}, err)
		return pgconn.CommandTag{}, err
	}
	// lost is the error of a result that never came: the whole segment, COMMIT
	// included, was sent, and may have run.
	lost := func(err error) error {
		if unanswered(c, err) {
			return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
		}
		return err
	}
	if seg.sendsBegin() {
		if _, err := next(); err != nil {
			if isServerError(err) {
				return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
			}
			return lost(err)
		}
	}
	for i := seg.start; i < seg.end; i++ {
		tag, err := next()
		if err != nil {
			if isServerError(err) {
				return statementFailed(stmts, sent, i, err, result)
			}
			return lost(err)
		}
		rows := tag.RowsAffected()
		if serverChecks(stmts, sent, i) {
			rows = stmts[i].Rows // the statement's one row, the count it checked
		}
		if err := result(i, rows, nil); err != nil {
			return err
		}
	}
	t, err := readFlushedTicket(pl)
	tr.query(pgconn.NewCommandTag("SELECT 1"), err)
	if err == nil {
		*ticket = t
	} else {
		if isServerError(err) {
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: err} // refused: COMMIT rolls back
		}
		return lost(err)
	}
	if _, err := next(); err != nil {
		return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
	}
	if _, err := pl.GetResults(); err != nil {
		return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
	}
	return nil
}

// readFlushedTicket reads the ticket's answer, its one row of one column (text, in
// either format).
func readFlushedTicket(pl *pgconn.Pipeline) (commitTicket, error) {
	res, err := pl.GetResults()
	if err != nil {
		return commitTicket{}, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return commitTicket{}, fmt.Errorf("refset/postgres: a pipeline's answer of another kind: %T", res)
	}
	t := commitTicket{read: true}
	for rr.NextRow() {
		t.raw = string(rr.Values()[0])
	}
	_, err = rr.Close()
	return t, err
}

// prepareFlushed is the description of q prepared on c under a name of refset's, once
// per connection; kept is false when c keeps flushedMost of them already and q is not
// one (nothing sent).
func prepareFlushed(ctx context.Context, c *pgx.Conn, q string) (sd *pgconn.StatementDescription, err error, kept bool) {
	data := c.PgConn().CustomData()
	known, _ := data[keyFlushed].(*flushedStatements)
	if known == nil {
		known = &flushedStatements{}
		data[keyFlushed] = known
	}
	if sd, ok := known.byText[q]; ok {
		return sd, nil, true
	}
	if len(known.byText) >= flushedMost {
		return nil, nil, false
	}
	if known.byText == nil {
		known.byText = map[string]*pgconn.StatementDescription{}
	}
	sum := sha256.Sum256([]byte(q))
	sd, err = c.Prepare(ctx, flushedPrefix(known.generation)+hex.EncodeToString(sum[:12]), q)
	if err != nil {
		return nil, err, true
	}
	known.byText[q] = sd
	return sd, nil, true
}

// flushedPrefix begins the names of the statements prepared for flushed segments in
// generation gen.
func flushedPrefix(gen int) string { return fmt.Sprintf("refset_flushed_%d_", gen) }

// goneFlushed reports whether err is the server's word that a statement c prepared
// for flushed segments is gone: SQLSTATE 26000 naming it ("prepared statement ... does
// not exist", the name quoted in any language). A statement of the caller's may fail
// with the same SQLSTATE (its own EXECUTE of a statement it never prepared, a function
// raising it): that is its failure, and the unit must not run again, nor refset's
// statements, still on the server, be prepared anew beside them.
func goneFlushed(c *pgx.Conn, err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeInvalidSQLStatementName {
		return false
	}
	known, _ := c.PgConn().CustomData()[keyFlushed].(*flushedStatements)
	return known != nil && strings.Contains(pgErr.Message, `"`+flushedPrefix(known.generation))
}

// flushedStatements are the statements a connection prepared for flushed segments,
// by SQL text, named for their generation: once they are found gone from the server,
// they are forgotten (forgetFlushed) and prepared again under new names, which pgx,
// which remembers what it prepared by name, prepares anew.
type flushedStatements struct {
	byText     map[string]*pgconn.StatementDescription
	generation int
}

// forgetFlushed forgets the statements c prepared for flushed segments.
func forgetFlushed(c *pgx.Conn) {
	if known, ok := c.PgConn().CustomData()[keyFlushed].(*flushedStatements); ok {
		known.byText = nil
		known.generation++
	}
}

// flushTrace tells the connection's pgx.BatchTracer, if it has one, of a flushed
// segment, as pgx tells it of a batch: nil, it tells nothing.
type flushTrace struct {
	ctx    context.Context
	c      *pgx.Conn
	tracer pgx.BatchTracer
	b      *pgx.Batch
	at     int // the query whose answer comes next
}

func traceFlushed(ctx context.Context, c *pgx.Conn, queries []flushedSegment, stmts []refsetdriver.Statement, begins bool) *flushTrace {
	tracer, ok := c.Config().Tracer.(pgx.BatchTracer)
	if !ok {
		return nil
	}
	b := &pgx.Batch{}
	for i, f := range queries {
		var args []any
		if at := i - b2i(begins); at >= 0 && at < len(stmts) {
			args = stmts[at].Args
		}
		b.Queue(f.sql, args...)
	}
	return &flushTrace{ctx: tracer.TraceBatchStart(ctx, c, pgx.TraceBatchStartData{Batch: b}), c: c, tracer: tracer, b: b}
}

// query tells of the next query's answer.
func (t *flushTrace) query(tag pgconn.CommandTag, err error) {
	if t == nil || t.at >= len(t.b.QueuedQueries) {
		return
	}
	q := t.b.QueuedQueries[t.at]
	t.at++
	t.tracer.TraceBatchQuery(t.ctx, t.c, pgx.TraceBatchQueryData{SQL: q.SQL, Args: q.Arguments, CommandTag: tag, Err: err})
}

func (t *flushTrace) end(err error) {
	if t != nil {
		t.tracer.TraceBatchEnd(t.ctx, t.c, pgx.TraceBatchEndData{Err: err})
	}
}
