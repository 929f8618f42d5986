package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
)

// After a failover, the old primary may still answer on connections a pool keeps:
// fenced (default_transaction_read_only) or, through a proxy or a virtual address,
// restarted as a standby. Every write there fails with SQLSTATE 25006
// (read_only_sql_transaction), which refset reports as ErrUnavailable; the pools
// that Open makes also drop such a connection, so that the next unit of work dials
// again, and a multi-host DSN with target_session_attrs=read-write leads it to the
// new primary. (A demotion proper restarts the server, which ends its connections
// anyway.)
//
//   - pgx: before a connection is reused, the server's last word on it (the
//     in_hot_standby and default_transaction_read_only parameters, which servers
//     from PostgreSQL 14 report as they change) says whether it still takes writes.
//   - lib/pq keeps those parameters to itself, so each connection is wrapped
//     (guardedConn), and one whose statement the server refused with 25006, or
//     whose BEGIN READ WRITE a standby refused, is reported invalid to
//     database/sql, which then closes it. (A fence of default_transaction_read_only
//     does not stop lib/pq's writes: it begins every transaction READ WRITE.)
//
// A pool given to New is the caller's. A lib/pq pool must have these guards, which a
// caller's pool can have only through its connector: New refuses one that sql.Open
// made and names NewConnector, which makes the connector Open's pools use (see
// guardedLibPQ in db.go for why it refuses rather than work around it). A caller's
// pgx pool checks its connections before reuse only if its connector does
// (NewPgxConnector's, NewPgxPoolConnector's), which New cannot tell, so refset checks
// each connection it takes for a unit of work or a statement that commits on its
// own itself (takeConn): one whose server reported that it takes no writes is
// discarded, and another taken. Reads outside a unit of work go to the pool as
// database/sql lends them: a read changes nothing, and a fenced server answers
// it as of its last write.

// takesWrites is pgx's check, before a connection of a pool that Open made (or of
// NewPgxConnector's) is reused: a connection whose server says it is a standby, or
// read-only, is dropped.
func takesWrites(_ context.Context, c *pgx.Conn) error {
	pc := c.PgConn()
	if pc.ParameterStatus("in_hot_standby") == "on" || pc.ParameterStatus("default_transaction_read_only") == "on" {
		return driver.ErrBadConn
	}
	return nil
}

// withTakesWrites is opts after the check that drops, before reuse, a connection
// whose server takes no writes (takesWrites): an OptionResetSession of opts
// replaces it.
func withTakesWrites(opts []stdlib.OptionOpenDB) []stdlib.OptionOpenDB {
	return append([]stdlib.OptionOpenDB{stdlib.OptionResetSession(takesWrites)}, opts...)
}

// A statement sent on a connection that is then lost may have run, and, outside a
// transaction, committed. lib/pq reports such a loss (the server's end of file, a
// FATAL error) as driver.ErrBadConn, which tells database/sql that nothing was sent:
// database/sql then runs the statement again on another connection, a second time.
// So the lib/pq connections of the pools Open makes (guardedConn) report the loss
// of a connection that was sound when the statement began as the loss it is
// (lostDuring), which database/sql does not run again, and refset reports as
// ErrUnavailable. A connection already known bad before the statement sent nothing,
// and keeps database/sql's retry on another.

// NewConnector is lib/pq's connector of dsn with the guards of the pools Open
// makes: sql.OpenDB(connector) is a lib/pq pool that New takes. Its connections never
// run a statement again after the connection was lost while it ran (database/sql
// would, on lib/pq: a payment made twice), and are dropped once their server refuses
// writes (a fenced primary, a standby); a connection is waited for only as long as
// the context of the call that needs it, and a call on one only a second longer
// than its context, when the server does not answer (watch.go). dsn is what Open
// takes, several hosts included. The pool is the caller's, to size and close; the
// guards cost next to nothing on a connection that is not lost.
func NewConnector(dsn string) (driver.Connector, error) {
	cfg, err := libpqConfig(dsn)
	var connector driver.Connector
	if err == nil {
		connector, err = newGuardedConnector(cfg)
	}
	if err != nil {
		return nil, redactPassword(fmt.Errorf("refset/postgres: connector: %w: %w", refset.ErrInvalidConfig, err), dsn)
	}
	return connector, nil
}

// newGuardedConnector is the guarded lib/pq connector of cfg, whose connections
// also end their startup with the context of Connect (startup.go).
func newGuardedConnector(cfg pq.Config) (driver.Connector, error) {
	connector, err := withStartupContext(cfg)
	if err != nil {
		return nil, err
	}
	return guardedConnector{startupConnector: connector}, nil
}

// guardedConnector makes the lib/pq connections of a pool that Open made, or that
// NewConnector's connector opens, guardedConns. Those of the replica's pool that
// Open makes only read: they are watched, and nothing more (replica).
type guardedConnector struct {
	startupConnector
	replica bool
}

func (c guardedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, l, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	return &guardedConn{conn: conn.(libpqConn), l: l, replica: c.replica}, nil
}

// pgx's stdlib reports a statement it sent as driver.ErrBadConn too, when the
// connection was lost before the answer came: pgx v5.12 reads the answer to a
// statement sent in the simple protocol (every statement without arguments, and
// every statement of a pool in simple_protocol mode) without heeding the read's
// error, closes the connection, and then calls it "conn closed", safe to retry;
// stdlib turns that into ErrBadConn, and database/sql runs the statement again on
// another connection. So the connections of the pgx pools Open makes, and of
// NewPgxConnector's and NewPgxPoolConnector's, are wrapped (pgxGuardedConn): an
// ErrBadConn from a statement that began on a connection pgx held open, with a
// context that had not ended, is lostDuring, as on lib/pq. One that pgx knew closed
// before the statement, or whose context had already ended, sent nothing: stdlib's
// ErrBadConn stays, and database/sql's retry on another connection with it.

// NewPgxConnector is pgx's stdlib connector of cfg with opts
// (stdlib.GetConnector), whose connections report a statement whose connection
// was lost after it was sent as the loss it is (refset.ErrUnavailable once
// translated), which database/sql does not run again, as the pgx pools Open makes
// do: sql.OpenDB(connector) is then a pgx pool on which the caller's own statements
// never run twice (stdlib.OpenDB's would, for a statement without arguments, or
// any in simple_protocol mode: see New). Its connections, lent through
// sql.Conn.Raw, are not *stdlib.Conn, but have its Conn() *pgx.Conn method. As on
// Open's pools, a connection whose server reported that it takes no writes (a
// fenced primary, a standby) is dropped before it is lent again, unless opts has
// an OptionResetSession of its own, which replaces that check. The pool is the
// caller's, to size and close; the guard costs next to nothing.
func NewPgxConnector(cfg *pgx.ConnConfig, opts ...stdlib.OptionOpenDB) driver.Connector {
	return pgxGuardedConnector{Connector: stdlib.GetConnector(*cfg, withTakesWrites(opts)...)}
}

// NewPgxPoolConnector is NewPgxConnector for a pgxpool user: stdlib's connector of
// pool (stdlib.GetPoolConnector) with the same guard. As stdlib.OpenDBFromPool
// does, set the *sql.DB's idle connections to zero (SetMaxIdleConns(0)), so that
// the pgxpool manages them.
func NewPgxPoolConnector(pool *pgxpool.Pool, opts ...stdlib.OptionOpenDB) driver.Connector {
	return pgxGuardedConnector{Connector: stdlib.GetPoolConnector(pool, withTakesWrites(opts)...)}
}

// pgxGuardedConnector is a connector of pgx's stdlib whose connections it wraps in
// pgxGuardedConn. Its Driver is stdlib's, so that the pool is pgx's to New.
type pgxGuardedConnector struct{ driver.Connector }

func (c pgxGuardedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxGuardedConn{stdlibConn: dc.(*stdlib.Conn)}, nil // stdlib's connectors make no other
}

// stdlibConn is stdlib.Conn under a name that, embedded, leaves its Conn method
// promoted (a field named Conn would hide it).
type stdlibConn = stdlib.Conn

// pgxGuardedConn is a connection of pgx's stdlib that reports a connection lost
// during a statement as lostDuring (see above). Embedding keeps what stdlib's
// connection offers database/sql (sessions reset, named values, transactions) and
// the Conn() *pgx.Conn method the package's pgx paths use (pgxConnOf).
type pgxGuardedConn struct{ *stdlibConn }

// sound reports whether a statement that begins now on c with ctx may be sent: pgx
// holds the connection open, and ctx has not ended (pgx sends nothing on a context
// already ended, and calls that safe to retry too).
func (c *pgxGuardedConn) sound(ctx context.Context) bool {
	return ctx.Err() == nil && !c.Conn().IsClosed()
}

// seen is err, the error of a statement that began on c sound or not: lostDuring if
// stdlib called the loss of a sound connection nothing sent (ErrBadConn).
func (c *pgxGuardedConn) seen(sound bool, err error) error {
	if sound && errors.Is(err, driver.ErrBadConn) {
		return &lostDuring{err: err}
	}
	return err
}

func (c *pgxGuardedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	_ = c.settle(ctx)
	sound := c.sound(ctx)
	r, err := c.stdlibConn.ExecContext(ctx, query, args)
	if err == nil && dropsPrepared(query) {
		c.dropped(ctx)
	}
	if err != nil {
		var again bool
		if again, err = c.gone(ctx, query, err); again {
			r, err = c.stdlibConn.ExecContext(ctx, query, args)
		}
	}
	return r, c.seen(sound, err)
}

func (c *pgxGuardedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	_ = c.settle(ctx)
	sound := c.sound(ctx)
	r, err := c.stdlibConn.QueryContext(ctx, query, args)
	if err == nil && dropsPrepared(query) {
		c.dropped(ctx)
	}
	if err != nil {
		var again bool
		if again, err = c.gone(ctx, query, err); again {
			r, err = c.stdlibConn.QueryContext(ctx, query, args)
		}
	}
	return r, c.seen(sound, err)
}

// BeginTx begins a transaction once the statements a caller dropped are dropped
// from pgx too (settle).
func (c *pgxGuardedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	_ = c.settle(ctx)
	return c.stdlibConn.BeginTx(ctx, opts)
}

// ResetSession drops the statements a caller dropped from pgx too (settle) before
// the connection is lent again; one on which that fails is not.
func (c *pgxGuardedConn) ResetSession(ctx context.Context) error {
	if c.settle(ctx) != nil {
		return driver.ErrBadConn
	}
	return c.stdlibConn.ResetSession(ctx)
}

// As on lib/pq (guardedConn.dropped), a caller may drop the statements prepared on
// a connection: pgx would go on sending those of its statement cache, and those
// database/sql prepared through it, by their names, for the rest of the
// connection's life (SQLSTATE 26000; pgx forgets only the one refused each time).
// pgx forgets them all, and the server drops the rest (pgx.Conn.DeallocateAll), so
// that pgx, whose names are its statements' text's digests, prepares none again
// under a name the server still holds: at once after the caller's statement, if it
// went through this connection, and otherwise when the server first refuses one
// (gone), outside the transaction that refusal aborted.

// dropped follows a caller's statement that dropped prepared statements on c.
func (c *pgxGuardedConn) dropped(ctx context.Context) {
	c.Conn().PgConn().CustomData()[keyDropPending] = true
	_ = c.settle(ctx)
}

// keyDropPending marks a pgx connection (PgConn.CustomData) on which pgx may know
// statements the server dropped, or the server hold statements pgx forgot: it
// outlives the wrapper, which a pgxpool's connector makes anew each time
// database/sql takes the connection.
const keyDropPending = "refset.dropPending"

// settle has pgx forget every statement it prepared on c, and the server drop
// them, once some are known gone, unless c's transaction was aborted (the server
// then refuses DEALLOCATE ALL): the next statement after it does. It forgets the
// statements refset prepared for flushed segments too.
func (c *pgxGuardedConn) settle(ctx context.Context) error {
	return settlePgx(ctx, c.Conn())
}

// settleRaw settles dc, a connection database/sql lends to refset's own use of pgx
// (sql.Conn.Raw), which no wrapper of its sees: see settle.
func settleRaw(ctx context.Context, dc any) {
	if pc := pgxConnOf(dc); pc != nil {
		_ = settlePgx(ctx, pc)
	}
}

// settlePgx drops what pgx prepared on pc, if it is marked (keyDropPending) or may
// be stale (unguardedDrops), and its transaction, if any, was not aborted, and
// unmarks it once done.
func settlePgx(ctx context.Context, pc *pgx.Conn) error {
	data := pc.PgConn().CustomData()
	pending, _ := data[keyDropPending].(bool)
	seen, _ := data[keyDropsSeen].(uint64)
	drops := unguardedDrops.Load()
	if !pending && seen == drops || pc.PgConn().TxStatus() == 'E' {
		return nil
	}
	if err := pc.DeallocateAll(ctx); err != nil {
		return err
	}
	forgetFlushed(pc)
	delete(data, keyDropPending)
	data[keyDropsSeen] = drops
	return nil
}

// On a caller's pgx pool without refset's guard (stdlib.OpenDB), no wrapper sees
// which connection the server refused a statement pgx prepared on: translateError
// counts such refusals (unguardedDrops), and each connection refset takes for a
// unit of work (takeConn) or its own use of pgx (settleRaw) drops what pgx prepared
// once it has not since the last. The unit the refusal failed runs again
// (stmtcache.ErrStale), on a connection that has; a read outside one fails once for
// each statement pgx prepared, which pgx then forgets.
var unguardedDrops atomic.Uint64

// keyDropsSeen is unguardedDrops as a pgx connection (PgConn.CustomData) last
// settled at.
const keyDropsSeen = "refset.dropsSeen"

// gone is what follows err, the failure of query on c: whether query is to run
// again, the server having said that the statement pgx prepared for query is gone
// (query then ran nothing, and pgx forgot them all), and the error to return
// otherwise. Inside a transaction, which the refusal aborted, query fails
// (goneStatement: refset runs its unit of work again).
func (c *pgxGuardedConn) gone(ctx context.Context, query string, err error) (again bool, _ error) {
	if !goneFromPgx(query, err) {
		return false, err
	}
	c.Conn().PgConn().CustomData()[keyDropPending] = true
	if ctx.Err() == nil && c.Conn().PgConn().TxStatus() == 'I' && c.settle(ctx) == nil {
		return true, nil
	}
	return false, &goneStatement{err: err}
}

// goneFromPgx reports whether err says that the statement pgx prepared for query,
// in its statement cache (stmtcache_...) or for database/sql (stmt_...), does not
// exist: names pgx makes of query's SHA-256, which no failure of query itself (a
// function of the caller's that raises SQLSTATE 26000) names.
func goneFromPgx(query string, err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeInvalidSQLStatementName {
		return false
	}
	sum := sha256.Sum256([]byte(query))
	digest := hex.EncodeToString(sum[:24])
	return strings.Contains(pgErr.Message, `"stmtcache_`+digest+`"`) || strings.Contains(pgErr.Message, `"stmt_`+digest+`"`)
}

// dropsPrepared reports whether query, a caller's, drops statements prepared on its
// connection: DEALLOCATE, or DISCARD (ALL; the others drop none, and cost a DEALLOCATE
// ALL of refset's for nothing).
func dropsPrepared(query string) bool {
	switch sqltext.Verb(query) {
	case "DEALLOCATE", "DISCARD":
		return true
	}
	return false
}

// PrepareContext prepares query (which runs nothing: its errors stay stdlib's); the
// statement runs guarded, since stdlib's runs on stdlib's connection, not on c.
func (c *pgxGuardedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	_ = c.settle(ctx)
	s, err := c.stdlibConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &pgxGuardedStmt{Stmt: s.(*stdlib.Stmt), c: c, query: query}, nil
}

func (c *pgxGuardedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// IsValid lets database/sql close at once a connection pgx closed (a lost one),
// rather than find it closed when it next lends it.
func (c *pgxGuardedConn) IsValid() bool { return !c.Conn().IsClosed() }

// pgxGuardedStmt is a statement prepared on a pgxGuardedConn, run guarded.
type pgxGuardedStmt struct {
	*stdlib.Stmt
	c     *pgxGuardedConn
	query string
}

// ExecContext runs the statement, which stdlib runs by its text: once pgx forgot
// it (settle), pgx prepares the text again as its query mode says.
func (s *pgxGuardedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	c := s.c
	_ = c.settle(ctx)
	sound := c.sound(ctx)
	r, err := s.Stmt.ExecContext(ctx, args)
	if err != nil {
		var again bool
		if again, err = c.gone(ctx, s.query, err); again {
			r, err = s.Stmt.ExecContext(ctx, args)
		}
	}
	return r, c.seen(sound, err)
}

func (s *pgxGuardedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	c := s.c
	_ = c.settle(ctx)
	sound := c.sound(ctx)
	r, err := s.Stmt.QueryContext(ctx, args)
	if err != nil {
		var again bool
		if again, err = c.gone(ctx, s.query, err); again {
			r, err = s.Stmt.QueryContext(ctx, args)
		}
	}
	return r, c.seen(sound, err)
}

// stdlibOf is the connection of pgx's stdlib that dc, a connection database/sql
// lends (sql.Conn.Raw), wraps if it is a pgxGuardedConn, and dc itself otherwise.
func stdlibOf(dc any) any {
	if g, ok := dc.(*pgxGuardedConn); ok {
		return g.stdlibConn
	}
	return dc
}

// pgxConnOf is the pgx connection of dc, a connection database/sql lends: stdlib's
// own, or one a pgxGuardedConn wraps; nil for any other (lib/pq's).
func pgxConnOf(dc any) *pgx.Conn {
	if c, ok := stdlibOf(dc).(*stdlib.Conn); ok {
		return c.Conn()
	}
	return nil
}

// lostDuring is the error of a statement whose connection was lost while it ran.
type lostDuring struct{ err error }

func (e *lostDuring) Error() string {
	return "the connection was lost while the statement ran (" + e.err.Error() + ")"
}

// Unwrap makes it a lost connection to refset (io.ErrUnexpectedEOF), not the
// driver's ErrBadConn (lib/pq's, or pgx stdlib's), which database/sql takes as
// nothing sent.
func (e *lostDuring) Unwrap() error { return io.ErrUnexpectedEOF }

// libpqConn is what lib/pq's connections implement, and database/sql uses.
type libpqConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// guardedConn is a lib/pq connection that reports a connection lost during a
// statement as lostDuring, and turns invalid, so that database/sql closes it, once
// the server refused one of its statements as read-only, or once a call's context
// ended and the server did not answer (watch.go).
type guardedConn struct {
	conn     libpqConn
	readOnly atomic.Bool
	// l is the connection's line, which a watch cuts.
	l *line
	// replica is set on a connection of the replica's pool, which only reads: a
	// read lost there may run again (database/sql's retry, on lib/pq's ErrBadConn),
	// and nothing of its server's refusals is noted.
	replica bool
	// idle are the watchers kept for the next calls; txDone is the Done channel of
	// the context of the open transaction, whose watch is kept in tx; rows are the
	// rows of a query, kept here, reused, rather than allocated on every query.
	idle   []*watcher
	txDone <-chan struct{}
	rows   guardedRows
	// kept are the statements prepared once on this connection for statements
	// that commit on their own (keepPrepared): database/sql, which serialises a
	// connection's use, is their only user.
	kept map[string]*guardedStmt
	// who is the server session of the connection, once asked (identify).
	who backendID
	// tx is the connection's transaction, once begun, and row where its ticket is
	// read: kept here, one transaction at a time, rather than allocated on every
	// BEGIN.
	tx  watchedTx
	row [1]driver.Value
	// units are the statements libpqPipeline prepared on this connection with SQL's
	// PREPARE, by the database that prepared them and their text, named refset_u1,
	// refset_u2, ... (unitSeq): its simple queries EXECUTE them. They are deallocated
	// once that database is closed, when the connection is next lent (ResetSession).
	units   map[unitKey]string
	unitSeq int
	// prepGen is the generation of the statements prepared on this connection: it
	// moves on once a caller dropped some (dropped) and once all were dropped
	// (settle), and a statement prepared in an earlier one is prepared again
	// before it runs (guardedStmt.ready). dropPending is set while the server may
	// hold statements this connection forgot, or lack some it knows: all are
	// dropped before the next statement outside a transaction (settle).
	prepGen     int
	dropPending bool
	inTx        bool // a transaction BeginTx began is open
}

// unitKey is a statement libpqPipeline prepared on a connection: the database that
// prepared it, and its text.
type unitKey struct {
	db    *DB
	query string
}

// dropClosedUnits deallocates the statements that closed databases prepared on c.
func (c *guardedConn) dropClosedUnits(ctx context.Context) error {
	for k, name := range c.units {
		if !k.db.Closed() {
			continue
		}
		if _, err := c.exec(ctx, "DEALLOCATE "+name, nil); err != nil {
			return driver.ErrBadConn // the statement is left: the connection is not lent again
		}
		delete(c.units, k)
	}
	return nil
}

var _ libpqConn = (*guardedConn)(nil)

// seen notes err, the error of a statement that began on a connection that was
// sound or not, and returns it: as lostDuring if a sound connection was lost.
func (c *guardedConn) seen(sound bool, err error) error {
	if c.replica {
		return err
	}
	if refusesWrites(err, codeReadOnlySQLTransaction) {
		c.readOnly.Store(true)
	}
	if sound && errors.Is(err, driver.ErrBadConn) {
		return &lostDuring{err: err}
	}
	return err
}

// refusesWrites reports whether err is the server's refusal with code.
func refusesWrites(err error, code string) bool {
	return err != nil && sqlState(err) == code
}

func (c *guardedConn) IsValid() bool {
	return !c.readOnly.Load() && !c.l.isCut.Load() && c.conn.IsValid()
}

func (c *guardedConn) ResetSession(ctx context.Context) error {
	if c.readOnly.Load() || c.l.isCut.Load() {
		return driver.ErrBadConn
	}
	if c.settle(ctx) != nil {
		return driver.ErrBadConn // what the server keeps prepared is unknown
	}
	if err := c.dropClosedUnits(ctx); err != nil {
		return err
	}
	return c.conn.ResetSession(ctx)
}

// The statements' calls note whether the connection was sound before them (see
// seen, and cutShort), and are watched (watch.go). No closure: these run on every
// statement.

func (c *guardedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	_ = c.settle(ctx)
	r, err := c.exec(ctx, query, args)
	if err == nil && dropsPrepared(query) {
		c.dropped()
		_ = c.settle(ctx)
	}
	return r, err
}

// exec is ExecContext, for the caller's statements and refset's own alike, but for
// what a caller's DEALLOCATE or DISCARD leaves to do (dropped).
func (c *guardedConn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	sound, uncut := c.conn.IsValid(), !c.l.isCut.Load()
	w := c.watch(ctx)
	r, err := c.conn.ExecContext(ctx, query, args)
	c.unwatch(w)
	if err != nil {
		err = c.cutShort(err, uncut, isCommit(query))
	}
	return r, c.seen(sound, err)
}

func (c *guardedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	_ = c.settle(ctx)
	sound := c.conn.IsValid()
	w := c.watch(ctx)
	r, err := c.conn.QueryContext(ctx, query, args)
	if err != nil {
		c.unwatch(w)
		return nil, c.seen(sound, c.cutShort(err, false, false))
	}
	if dropsPrepared(query) {
		c.dropped() // settled by the next statement: its rows are open
	}
	return c.watchedRows(r, w), nil
}

// A caller may drop the statements prepared on a connection of refset's pool
// (DEALLOCATE, DISCARD ALL), through refset.InTx's Tx or a connection of the pool,
// and go on using refset on it. What lib/pq and database/sql prepared there (refset's
// own writes and reads, the statement cache of Exec commands, the statements of
// lib/pq's simple queries) would otherwise be sent by their names for the rest of the
// connection's life, and refused (SQLSTATE 26000). So all of them are dropped and
// prepared again: at once when the caller's statement went through this connection,
// and otherwise when the server first refuses one of them (goneLibPQ), before the
// next statement outside the transaction that refusal aborted.

// dropped is what follows a caller's statement that dropped prepared statements on
// c: every statement is prepared again, under a new name, before it next runs (in
// the caller's transaction too), and the rest are dropped (settle), so that the
// server holds none that c does not know of.
func (c *guardedConn) dropped() {
	c.dropPending = true
	c.forgetPrepared()
}

// forgetPrepared has every statement prepared on c prepared again before it runs.
func (c *guardedConn) forgetPrepared() {
	clear(c.units)
	c.prepGen++
}

// settle drops every statement prepared on c, when some are known gone, unless a
// transaction is open, which a refused statement may have aborted: it then waits
// for the next statement after the transaction. A connection lost meanwhile fails
// the statement that follows.
func (c *guardedConn) settle(ctx context.Context) error {
	if !c.dropPending || c.inTx {
		return nil
	}
	if _, err := c.exec(ctx, "DEALLOCATE ALL", nil); err != nil {
		return err
	}
	c.dropPending = false
	c.forgetPrepared()
	return nil
}

// goneLibPQ reports whether err is the server's word that a statement lib/pq
// prepared, which it was asked to run, does not exist (FetchPreparedStatement's
// SQLSTATE 26000): not a failure of the statement itself, such as a function of the
// caller's raising that SQLSTATE.
func goneLibPQ(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && string(pqErr.Code) == codeInvalidSQLStatementName && pqErr.Routine == "FetchPreparedStatement"
}

// goneStatement is the failure of a statement whose prepared statement, one a driver
// or database/sql prepared, the server no longer had, in a transaction it then
// aborted: nothing ran, and refset runs the unit of work again (translateError marks
// it stmtcache.ErrStale), once the connection's statements are prepared anew.
type goneStatement struct{ err error }

func (e *goneStatement) Error() string { return e.err.Error() }
func (e *goneStatement) Unwrap() error { return e.err }

// PrepareContext prepares query; preparing runs nothing, so a connection lost
// meanwhile stays lib/pq's ErrBadConn, which database/sql may retry. Asked with a
// context of keepPrepared, it prepares query once on this connection and keeps it
// (closing it is then a no-op): a statement run on a *sql.Conn, one call at a time,
// is then one round trip, as one prepared on the pool is.
func (c *guardedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	_ = c.settle(ctx)
	keep, _ := ctx.Value(keepPreparedKey{}).(bool)
	if s := c.kept[query]; keep && s != nil {
		return s, nil
	}
	w := c.watch(ctx)
	s, err := c.conn.PrepareContext(ctx, query)
	c.unwatch(w)
	if err != nil {
		return nil, c.seen(false, c.cutShort(err, false, false))
	}
	gs := &guardedStmt{Stmt: s, conn: c, kept: keep, query: query, gen: c.prepGen}
	if keep {
		if c.kept == nil {
			c.kept = map[string]*guardedStmt{}
		}
		c.kept[query] = gs
	}
	return gs, nil
}

// forget closes and drops the statement kept for query, which the server no longer
// runs as prepared (a migration changed its result's type).
func (c *guardedConn) forget(query string) {
	if s := c.kept[query]; s != nil {
		delete(c.kept, query)
		_ = s.Stmt.Close()
	}
}

// keepPreparedKey marks a context whose prepares a guardedConn keeps.
type keepPreparedKey struct{}

// keepPrepared is ctx, marked so that a statement prepared with it on a *sql.Conn
// stays prepared on its connection.
func keepPrepared(ctx context.Context) context.Context {
	return context.WithValue(ctx, keepPreparedKey{}, true)
}

func (c *guardedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// BeginTx begins a transaction; BEGIN changes nothing, so a connection lost
// meanwhile stays lib/pq's ErrBadConn, which database/sql may retry. With a context
// of withTicket, it reads the commit ticket (beginTicketSQL) in BEGIN's round trip.
//
// It sends BEGIN itself, as lib/pq writes it, rather than through lib/pq's BeginTx,
// which cannot send anything with it; and it does so for every transaction: lib/pq
// calls the watch of a transaction's context that its BeginTx set again at the end
// of every later transaction of the connection, until its BeginTx sets another, and
// a watch called twice panics. The watch here is the BEGIN query's own, which lib/pq
// ends when its rows are closed: they are kept open until the transaction ends
// (watchedTx), as lib/pq's BeginTx keeps its watch.
//
// refset watches the transaction too, from BEGIN to its end, with the context it
// began with (watch.go), as database/sql ends the transaction with that context.
func (c *guardedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	_ = c.settle(ctx)
	w := c.watch(ctx)
	tx, err := c.begin(ctx, opts)
	if err == nil && tx != &c.tx {
		c.unwatch(w) // lib/pq's own (none, as lib/pq refuses what begin leaves to it)
		return tx, nil
	}
	if err != nil {
		c.unwatch(w)
		if refusesWrites(err, codeFeatureNotSupported) && !c.replica {
			// lib/pq begins READ WRITE, which a standby refuses: "cannot set
			// transaction read-write mode during recovery".
			c.readOnly.Store(true)
		}
		return nil, c.seen(false, c.cutShort(err, false, false))
	}
	c.tx.w, c.txDone, c.inTx = w, ctx.Done(), true
	return tx, nil
}

// begin is BeginTx's BEGIN, and its ticket's.
func (c *guardedConn) begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	t := ticketOf(ctx)
	if opts.ReadOnly {
		t = nil // it writes nothing: nothing to lose
	}
	begin, ok := beginSQL(sql.IsolationLevel(opts.Isolation), opts.ReadOnly, t != nil)
	tx, isTx := c.conn.(driver.Tx) // a transaction lib/pq began is its connection
	if !ok || !isTx {
		return c.conn.BeginTx(ctx, opts) // which refuses the level, sending nothing
	}
	rows, err := c.conn.QueryContext(ctx, begin, nil)
	if err == nil && t != nil {
		if err = c.scanTicket(rows, t); err != nil {
			_ = rows.Close()
		}
	}
	if err == nil {
		c.tx = watchedTx{tx: tx, watch: rows, c: c}
		return &c.tx, nil
	}
	if t != nil && c.conn.IsValid() && !c.l.isCut.Load() {
		// BEGIN may have run and the ticket failed: the transaction, open on the
		// server, ends here (outside one, the server only warns), even once ctx
		// ended, while the server answers.
		rollback, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
		defer cancel()
		_, _ = c.ExecContext(rollback, "ROLLBACK", nil)
	}
	return nil, err
}

// scanTicket reads t from rows, beginTicketSQL's, to their end.
func (c *guardedConn) scanTicket(rows driver.Rows, t *commitTicket) error {
	v := c.row[:]
	defer clear(v)
	if err := rows.Next(v); err != nil {
		return err
	}
	switch raw := v[0].(type) {
	case string:
		t.raw = raw
	case []byte:
		t.raw = string(raw)
	}
	switch err := rows.Next(v); err {
	case io.EOF:
		t.read = true
		return nil
	case nil:
		return errors.New("refset/postgres: begin: the commit ticket's query returned more than one row")
	default:
		return err
	}
}

// watchedTx is a transaction a guardedConn began: lib/pq's, and the watches of its
// context, lib/pq's (watch) and refset's (w), which end with it.
type watchedTx struct {
	tx    driver.Tx
	watch driver.Rows
	c     *guardedConn
	w     *watcher
}

// Commit commits. A COMMIT cut short by the watch may have reached the server: it
// is a lost connection, whose outcome refset asks (resolve.go).
func (tx *watchedTx) Commit() error {
	uncut := !tx.c.l.isCut.Load()
	err := tx.tx.Commit()
	_ = tx.watch.Close() // read to their end already: no round trip
	return tx.c.ended(err, uncut, true)
}

func (tx *watchedTx) Rollback() error {
	err := tx.tx.Rollback()
	_ = tx.watch.Close()
	return tx.c.ended(err, false, false)
}

// ended ends the watch of c's transaction, which ended with err.
func (c *guardedConn) ended(err error, sound, commit bool) error {
	c.unwatch(c.tx.w)
	c.tx.w, c.txDone, c.inTx = nil, nil, false
	return c.cutShort(err, sound, commit)
}

// Begin is driver.Conn's; database/sql calls BeginTx.
func (c *guardedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *guardedConn) Close() error { return c.conn.Close() }

func (c *guardedConn) Ping(ctx context.Context) error {
	w := c.watch(ctx)
	err := c.conn.Ping(ctx)
	c.unwatch(w)
	return c.cutShort(err, false, false)
}
func (c *guardedConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.conn.CheckNamedValue(nv)
}

// guardedStmt is a statement prepared on a guardedConn, whose errors it notes.
type guardedStmt struct {
	driver.Stmt
	conn  *guardedConn
	kept  bool   // kept on the connection: Close leaves it prepared
	query string // what was prepared, to prepare again
	gen   int    // the connection's prepGen when it was prepared
}

// renewed prepares s again if the server dropped it (its generation is past), or
// says why it cannot.
func (s *guardedStmt) renewed(ctx context.Context) error {
	c := s.conn
	if s.gen == c.prepGen {
		return nil
	}
	w := c.watch(ctx)
	st, err := c.conn.PrepareContext(ctx, s.query)
	c.unwatch(w)
	if err != nil {
		return c.seen(false, c.cutShort(err, false, false))
	}
	_ = s.Stmt.Close() // gone from the server already: lib/pq forgets it
	s.Stmt, s.gen = st, c.prepGen
	return nil
}

// ready readies s to run: its connection's statements dropped, if some were found
// gone, and s prepared again, if it was dropped.
func (s *guardedStmt) ready(ctx context.Context) error {
	if err := s.conn.settle(ctx); err != nil {
		return err
	}
	return s.renewed(ctx)
}

// gone is what follows err, the error of s run on its connection: whether it is to
// run again, now that its connection's statements were dropped and it is prepared
// anew (it ran nothing, outside a transaction), and the error to return otherwise.
func (s *guardedStmt) gone(ctx context.Context, err error) (again bool, _ error) {
	c := s.conn
	if !goneLibPQ(err) {
		return false, err
	}
	c.dropPending = true
	if c.inTx || ctx.Err() != nil {
		return false, &goneStatement{err: err}
	}
	if c.settle(ctx) != nil || s.renewed(ctx) != nil {
		return false, err
	}
	return true, nil
}

// Close closes the statement, unless its connection keeps it.
func (s *guardedStmt) Close() error {
	if s.kept {
		return nil
	}
	return s.Stmt.Close()
}

func (s *guardedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	r, err := s.runExec(ctx, args)
	if err != nil {
		var again bool
		if again, err = s.gone(ctx, err); again {
			r, err = s.runExec(ctx, args)
		}
	}
	return r, err
}

func (s *guardedStmt) runExec(ctx context.Context, args []driver.NamedValue) (r driver.Result, err error) {
	c := s.conn
	sound := c.conn.IsValid()
	w := c.watch(ctx)
	if ec, ok := s.Stmt.(driver.StmtExecContext); ok {
		r, err = ec.ExecContext(ctx, args)
	} else {
		r, err = s.Stmt.Exec(values(args)) //nolint:staticcheck // a statement without the context form (lib/pq's COPY)
	}
	c.unwatch(w)
	if err != nil {
		err = c.cutShort(err, false, false)
	}
	return r, c.seen(sound, err)
}

func (s *guardedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	r, err := s.runQuery(ctx, args)
	if err != nil {
		var again bool
		if again, err = s.gone(ctx, err); again {
			r, err = s.runQuery(ctx, args)
		}
	}
	return r, err
}

func (s *guardedStmt) runQuery(ctx context.Context, args []driver.NamedValue) (r driver.Rows, err error) {
	c := s.conn
	sound := c.conn.IsValid()
	w := c.watch(ctx)
	if qc, ok := s.Stmt.(driver.StmtQueryContext); ok {
		r, err = qc.QueryContext(ctx, args)
	} else {
		r, err = s.Stmt.Query(values(args)) //nolint:staticcheck // as ExecContext
	}
	if err != nil {
		c.unwatch(w)
		return nil, c.seen(sound, c.cutShort(err, false, false))
	}
	return c.watchedRows(r, w), nil
}

// values are args' values, for a statement that takes them without names.
func values(args []driver.NamedValue) []driver.Value {
	v := make([]driver.Value, len(args))
	for i, a := range args {
		v[i] = a.Value
	}
	return v
}
