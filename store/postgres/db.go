package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq" // registers the "postgres" driver
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store"
)

// Options tune Open and New. The zero value is a safe default.
type Options struct {
	// Options are what every store takes: logging, metrics, the statement cache,
	// external migrations.
	store.Options

	// MaxConns bounds the connection pool Open makes. Zero means 20. New leaves the
	// caller's pool as it is. Every call of refset takes one connection at a time, and
	// a unit of work one for as long as it runs, which the calls made with its context
	// share (see "Sizing a connection pool" in package refset): size the pool for the
	// calls and units that run at once. One connection works, one call at a time: a
	// call made inside a unit's function with a context that does not carry the unit
	// (the one InTx was given, context.Background()) needs a second, and fails at once
	// with refset.ErrInUnitOfWork when the units on its goroutine hold every
	// connection (on a caller's pool too, bounded by SetMaxOpenConns).
	MaxConns int

	// Driver is the database/sql driver Open dials with: "postgres" (lib/pq, the
	// default) or "pgx" (github.com/jackc/pgx/v5/stdlib). Both are registered by
	// this package. New finds the driver of the caller's pool by itself.
	Driver string

	// Isolation is the isolation level of the write transactions refset opens. The
	// zero value is the server's default (READ COMMITTED), under which foreign keys
	// already serialise holds against deletions.
	Isolation sql.IsolationLevel

	// Unprepared is for a connection pooler in transaction mode, such as PgBouncer
	// with pool_mode = transaction, which lends each transaction, and each statement
	// outside one, whichever server connection is free. Stores then prepare nothing,
	// and Open makes the driver send every statement with its arguments in one round
	// trip that names no prepared statement, whatever the DSN says: lib/pq with
	// binary_parameters=yes, pgx in QueryExecModeExec (or simple_protocol, if the DSN
	// asks for it). New refuses, with refset.ErrInvalidConfig, a caller's pool that
	// would not. Without all this, behind such a pooler, prepared statements go
	// missing (PgBouncer keeps none before 1.21) and lib/pq runs statements other
	// clients parsed; see the package documentation. Each statement is then parsed
	// and planned on every call. With binary_parameters, lib/pq sends a []byte
	// argument in binary format: right for bytea and text, but a jsonb parameter wants
	// a string. On pgx, a pipelined Add or hand-over whose context ends while its
	// batch that carries COMMIT runs (the whole unit, when the server checks its
	// counts) sends no cancel request (poolers may mishandle them: PgBouncer before
	// 1.19.1 crashes): it waits up to 5 s for the server's answer instead, and past
	// that the commit's outcome is unknown.
	Unprepared bool

	// Replica is a pool on a hot standby of this database (streaming replication),
	// opened and owned by the caller like New's pool, with lib/pq or pgx's stdlib.
	// Reads that a lagging copy cannot make wrong go there first (see "Reads from a
	// hot standby" in the package doc); nil means every read goes to the primary.
	// Open and New check that it is a standby, of the same cluster, connected to the
	// same database with the same search_path: refset.ErrInvalidConfig otherwise.
	Replica *sql.DB

	// ReplicaDSN is what Open dials for a replica it owns (with Driver, MaxConns and
	// Unprepared, closed by Close), instead of the caller's Replica; like the DSN, it
	// may name several hosts, in either form. Set connect_timeout in it:
	// while the standby does not answer, each read meant for it waits for the dial
	// before it goes to the primary. New ignores it.
	ReplicaDSN string

	// ResolveCommitWait is how long a unit of work whose COMMIT lost its connection
	// (the server crashed, or failed over) may wait to learn from a primary whether it
	// committed: it returns nil if it did, refset.ErrUnavailable if it did not (nothing
	// changed; with store.Options.RetryUnavailable it runs again), and
	// refset.ErrCommitUnknown with ErrUnavailable only when no primary could tell in
	// time. It asks on a new connection of the pool, so with a multi-host DSN it asks
	// the new primary (see "Running on a high-availability cluster" in SCALING.md).
	// The wait goes on past the call's context's end by five seconds at most. To know,
	// each write transaction reads its id: on lib/pq with its BEGIN, in the same round
	// trip (the id is then taken at BEGIN, even by a transaction that writes nothing,
	// which then flushes a commit record, and a small logical decoding message is
	// written: see resolve.go); on pgx before COMMIT, one more statement (in a
	// pipelined hand-over or Add, in the same batch).
	// Zero means 30 seconds; a negative value turns all of this off (ErrCommitUnknown
	// for every lost COMMIT, and no id read). Servers before PostgreSQL 13, which lack
	// pg_xact_status, have it off. It bounds as well how long a statement that commits
	// on its own (refsetdriver.OwnCommits: custody's payments), lost once it was sent,
	// is settled: its server session ended on a primary, then the caller's query asked
	// whether it committed (own.go).
	ResolveCommitWait time.Duration

	// ReplicaWait is how long a report (cleanup's Check, Why, WhyAll, Status) waits
	// for the replica to replay what the primary had committed when the report began,
	// before it reads the primary instead. Zero means one second; a negative value
	// means not at all.
	ReplicaWait time.Duration
}

// Dialect is "postgres", the Name of this store's Driver: store.Open gives these
// options the DSNs of PostgreSQL, a postgres:// or postgresql:// URL or a key=value
// connection string.
func (Options) Dialect() string { return dialectName }

// OpenDSN is Open with these options, as store.Open calls it.
func (o Options) OpenDSN(ctx context.Context, dsn string) (refset.Database, error) {
	return engine.Opened(Open(ctx, dsn, o))
}

var _ store.Opener = Options{}

// DB is a PostgreSQL database opened for refset. It implements refset.Database, so
// several sets and the caller's own SQL can share one unit of work (refset.InTx).
// Open, New and store.Open make one; its fields are unexported because a DB they did
// not make has no pool: every call on one fails with refset.ErrInvalidConfig.
type DB struct {
	pool        *sqlx.DB // the connection pool
	replicaPool *sqlx.DB // the pool on the hot standby, or nil

	*storeEngine // Begin, Close, Driver

	isolation sql.IsolationLevel
	ownsPool  bool // Open made the pool, so Close closes it
	// checksFence is set on a caller's pgx pool, whose connections refset checks
	// itself before a unit of work or a statement that commits on its own
	// (takeConn): Open's pools check them before every reuse (conns.go).
	checksFence bool
	unprepared  bool // Options.Unprepared: behind a pooler, sessions are not the client's
	// unitStatements is how many statements of lib/pq's simple queries
	// (libpqPipeline) a connection keeps prepared with SQL's PREPARE, for this
	// database: Options.StatementCache's size, or 0 (none) on pgx and Unprepared.
	unitStatements int
	replica        replicaState
	stmts          *stmtcache.Cache // of Exec commands' statements; nil: none (pgx, Unprepared)
	// resolveWait is how long the outcome of a lost COMMIT is asked (resolve.go);
	// 0: it is not, and no ticket is read.
	resolveWait time.Duration
	// beginTicket is set on lib/pq when lost commits are resolved: a write
	// transaction's BEGIN reads its commit ticket (beginTicketSQL), unless the
	// server refuses the logical decoding message it writes to a role.
	beginTicket bool
	// ticket is ticketSQL prepared, where statements are (lib/pq, not Unprepared)
	// and BEGIN reads no ticket: read before every COMMIT, it is one Bind and
	// Execute rather than a query the server parses and plans each time. nil: it
	// runs unprepared, or is not read before COMMIT.
	ticket *sql.Stmt
	// poolTag names the pool in the frames of the functions of units of work on it
	// (ownunit.go).
	poolTag refsetdriver.PoolTag
}

// storeEngine is the engine every store's DB embeds, under a name that keeps the
// field out of the DB's API.
type storeEngine = engine.Engine

// Drivers Open can dial with.
const (
	DriverLibPQ = "postgres" // github.com/lib/pq
	DriverPgx   = "pgx"      // github.com/jackc/pgx/v5/stdlib
)

// Open connects to the database named by dsn (a connection string or URL that both
// lib/pq and pgx understand; it may name several hosts, in either form, for a
// high-availability cluster: see "Failover" in the package doc) through opts.Driver.
// On either driver a connection, Open's first or one the pool makes later, is
// waited for until its context ends or the DSN's connect_timeout passes, whichever
// comes first: a server that accepts the connection and never answers holds it no
// longer. Errors: refset.ErrUnavailable (the
// server cannot be reached), refset.ErrInvalidConfig (a malformed DSN, an unknown
// driver, a role, password or database the server refuses), the context's error.
// Once open, a connection the pool makes later that the server refuses so (a
// password rotated, a LOGIN revoked, the database dropped or renamed) fails its call
// with refset.ErrUnavailable, as a server that cannot be reached does.
//
// Neither driver's pool runs a statement again after its connection was lost once
// the statement was sent (the error is then refset.ErrUnavailable, and the
// statement may have run): the connections are wrapped in guards (NewConnector's on
// lib/pq, NewPgxConnector's on pgx). So a connection of the pgx pool, as
// sql.Conn.Raw lends it, is not a *stdlib.Conn, but has its method Conn() *pgx.Conn:
// assert interface{ Conn() *pgx.Conn } to reach pgx. (The replica's pool that Open
// makes on pgx, which only reads, is stdlib's own: a read run again changes nothing.)
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	driver := opts.Driver
	switch driver {
	case "":
		driver = DriverLibPQ
	case DriverLibPQ, DriverPgx:
	default:
		return nil, fmt.Errorf("refset/postgres: open: %w: driver %q (want %q or %q)", refset.ErrInvalidConfig, driver, DriverLibPQ, DriverPgx)
	}
	pool, err := openPool(driver, dsn, opts.Unprepared)
	if err != nil {
		return nil, redactPassword(fmt.Errorf("refset/postgres: open: %w: %w", refset.ErrInvalidConfig, err), dsn)
	}
	conns := opts.MaxConns
	if conns <= 0 {
		conns = 20
	}
	size := func(p *sql.DB) {
		p.SetMaxOpenConns(conns)
		p.SetMaxIdleConns(conns)
		p.SetConnMaxIdleTime(5 * time.Minute)
	}
	size(pool)
	ownsReplica := false
	if opts.ReplicaDSN != "" {
		if opts.Replica != nil {
			pool.Close()
			return nil, fmt.Errorf("refset/postgres: open: %w: both Replica and ReplicaDSN are set", refset.ErrInvalidConfig)
		}
		if opts.Replica, err = openReplicaPool(driver, opts.ReplicaDSN, opts.Unprepared); err != nil {
			pool.Close()
			return nil, redactPassword(fmt.Errorf("refset/postgres: open the replica: %w: %w", refset.ErrInvalidConfig, err), opts.ReplicaDSN)
		}
		size(opts.Replica)
		ownsReplica = true
	}
	db, err := newDB(ctx, pool, opts, true)
	if err != nil {
		pool.Close()
		if ownsReplica {
			opts.Replica.Close()
			err = redactPassword(err, opts.ReplicaDSN)
		}
		return nil, redactPassword(err, dsn)
	}
	db.ownsPool, db.replica.owned = true, ownsReplica
	return db, nil
}

// openPool opens a pool on dsn through driver. Unprepared, it makes the driver send
// every statement with arguments in one round trip that names no prepared statement:
// lib/pq with binary_parameters, pgx in QueryExecModeExec (or the simple protocol, if
// the DSN asks for it). Behind a pooler in transaction mode nothing else is safe
// outside a transaction: the pooler lends a server connection until the end of each
// round trip, so lib/pq's default (parse and describe in one round trip, bind and run
// in the next) runs the statement that another client last parsed on whichever server
// connection it gets next, and pgx's statement cache finds its prepared statements
// missing from it.
//
// Either way the pool drops a connection to a server that no longer takes writes,
// and never runs a statement again after its connection was lost while it ran
// (conns.go): lib/pq and pgx's stdlib both call such a loss driver.ErrBadConn at
// times, which database/sql takes as nothing sent.
func openPool(driver, dsn string, unprepared bool) (*sql.DB, error) {
	switch driver {
	case DriverLibPQ:
		connector, err := libpqConnector(dsn, unprepared)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(guardedConnector{startupConnector: connector}), nil
	default: // DriverPgx
		cfg, err := pgxConfig(dsn, unprepared)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(NewPgxConnector(cfg)), nil
	}
}

// libpqConnector is lib/pq's connector of dsn (see libpqConfig), with
// binary_parameters when unprepared (see openPool), whose connections end their
// startup with the context of Connect (startup.go).
func libpqConnector(dsn string, unprepared bool) (startupConnector, error) {
	cfg, err := libpqConfig(dsn)
	if err != nil {
		return startupConnector{}, err
	}
	cfg.BinaryParameters = cfg.BinaryParameters || unprepared
	return withStartupContext(cfg)
}

// pgxConfig is pgx's configuration of dsn, in QueryExecModeExec when unprepared
// (see openPool).
func pgxConfig(dsn string, unprepared bool) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if unprepared && cfg.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return cfg, nil
}

// libpqConfig is lib/pq's Config of dsn. lib/pq reads several hosts from a key=value
// DSN (host=a,b port=5432,5433), but from a URL (postgres://a:5432,b:5433/db, which
// libpq and pgx read as a list) takes the list for one host's name: here the URL's
// first host goes to lib/pq, and the others to its Config.Multi.
func libpqConfig(dsn string) (pq.Config, error) {
	first, others, ok := urlHosts(dsn)
	if !ok {
		return pq.NewConfig(dsn)
	}
	cfg, err := pq.NewConfig(first)
	if err != nil {
		return cfg, err
	}
	for _, h := range others {
		host, port, err := net.SplitHostPort(h)
		if err != nil { // no port: the first host's, or the default
			host, port = strings.Trim(h, "[]"), strconv.Itoa(int(cfg.Port))
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || host == "" {
			return cfg, fmt.Errorf("the DSN's host %q is not a host and a port", h)
		}
		cfg.Multi = append(cfg.Multi, pq.ConfigMultihost{Host: host, Port: uint16(n)})
	}
	return cfg, nil
}

// urlHosts splits dsn, a postgres:// URL naming several hosts, into the URL with its
// first host alone and the other hosts (host:port each); ok is false for any other
// DSN.
func urlHosts(dsn string) (first string, others []string, ok bool) {
	scheme, rest, found := strings.Cut(dsn, "://")
	if !found || (scheme != "postgres" && scheme != "postgresql") {
		return "", nil, false
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	at := strings.LastIndex(authority, "@") + 1 // 0 without user info
	hosts := strings.Split(authority[at:], ",")
	if len(hosts) < 2 {
		return "", nil, false
	}
	return scheme + "://" + authority[:at] + hosts[0] + rest[end:], hosts[1:], true
}

// redactPassword hides dsn's password in err's message: drivers quote a DSN they
// cannot parse whole, and an error message ends up in logs. errors.Is and errors.As
// still see the driver's error.
func redactPassword(err error, dsn string) error {
	password := ""
	if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
		password, _ = u.User.Password()
	} else if i := strings.Index(dsn, "://"); i >= 0 {
		// A URL too malformed to parse: the password sits between the first ':'
		// after the scheme and the '@'.
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if colon := strings.Index(rest[:at], ":"); colon >= 0 {
				password = rest[colon+1 : at]
			}
		}
	} else {
		for _, field := range strings.Fields(dsn) {
			if v, ok := strings.CutPrefix(field, "password="); ok {
				password = strings.Trim(v, "'")
			}
		}
	}
	if password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return &redacted{err: err, msg: strings.ReplaceAll(err.Error(), password, "xxxxx")}
}

// redacted is an error whose message hides a secret.
type redacted struct {
	err error
	msg string
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// New uses the caller's own pool, configured, shared and traced as the caller likes:
//
//   - lib/pq: a pool of NewConnector's connector, sql.OpenDB(connector). New refuses
//     (refset.ErrInvalidConfig) a lib/pq pool that sql.Open("postgres", dsn) made:
//     database/sql runs a statement on such a pool again, on another connection,
//     when lib/pq lost the connection after sending it, so a statement that commits
//     on its own (a payment) could run twice, and its connections to a server that
//     no longer takes writes are kept. NewConnector's connections prevent both, at
//     no cost, for the caller's own statements too.
//   - pgx's stdlib ("pgx"), opened as the caller likes, best with NewPgxConnector's
//     connector, sql.OpenDB(postgres.NewPgxConnector(cfg)), or a pgxpool user's
//     sql.OpenDB(postgres.NewPgxPoolConnector(pool)) (with SetMaxIdleConns(0)), which
//     have the guard of Open's pgx pools. On a pool without it (stdlib.OpenDB,
//     stdlib.OpenDBFromPool, sql.Open("pgx", dsn)), database/sql runs the caller's
//     own statement again, on another connection, when pgx lost the connection after
//     sending it: pgx v5.12 reports such a loss as safe to retry for every statement
//     sent in the simple protocol, which pgx uses for every statement without
//     arguments (an INSERT of literals, a call of a function that pays), and for
//     every statement when the DSN says default_query_exec_mode=simple_protocol.
//     refset's own work is safe there all the same: its units of work run in
//     transactions, which database/sql never runs again, and a statement that
//     commits on its own (refsetdriver.OwnCommits) runs on one connection, and is
//     settled, not reported as not committed, when pgx calls it safe to retry after
//     its connection was lost. New takes such a pool (a pgxpool shared with other
//     code cannot change its connector) and, when opts.Logger is set, warns once.
//     refset also checks each connection it takes for a unit of work, or for a
//     statement that commits on its own, and discards one whose server reported
//     that it takes no writes.
//
// A *sqlx.DB user passes its DB field. The pool stays the caller's: Close leaves it
// open (and closes the statements refset prepared on it, but for those pgx's
// connections keep for pipelined units: at most 256 a connection, named
// refset_flushed_*, which every DB on the pool shares). Close the DB before the
// pool: on a pool closed first, refset's calls fail with refset.ErrClosed.
// opts.MaxConns and opts.Driver are not used. Errors: those of Open, and
// refset.ErrInvalidConfig for a nil pool, a pool of another driver, or a lib/pq pool
// without NewConnector's guards.
func New(ctx context.Context, pool *sql.DB, opts Options) (*DB, error) {
	return newDB(ctx, pool, opts, false)
}

// newDB is New; opened says that Open made the pool, with its guards (conns.go).
func newDB(ctx context.Context, pool *sql.DB, opts Options, opened bool) (*DB, error) {
	if pool == nil {
		return nil, fmt.Errorf("refset/postgres: new: %w: nil pool", refset.ErrInvalidConfig)
	}
	driverName, err := driverOf(pool)
	if err != nil {
		return nil, sentinel.Wrap(msgPrefix, "new", err)
	}
	if err := pool.PingContext(ctx); err != nil {
		return nil, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "open", openError(err)))
	}
	pgxUnguarded := false
	if driverName == DriverLibPQ && !opened {
		if err := guardedLibPQ(ctx, pool); err != nil {
			return nil, err
		}
	} else if driverName == DriverPgx && !opened {
		guarded, err := connIs[*pgxGuardedConn](ctx, pool)
		if err != nil {
			return nil, err
		}
		pgxUnguarded = !guarded
	}
	if opts.Unprepared {
		if err := checkOneRoundTrip(ctx, pool, driverName); err != nil {
			return nil, err
		}
	}
	db := &DB{pool: sqlx.NewDb(pool, driverName), isolation: opts.Isolation, unprepared: opts.Unprepared,
		checksFence: driverName == DriverPgx && !opened, poolTag: poolTagOf(pool)}
	if db.resolveWait, err = resolveWait(ctx, pool, opts.ResolveCommitWait); err != nil {
		return nil, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "open", openError(err)))
	}
	if opts.Replica != nil {
		if err := db.useReplica(ctx, opts.Replica, opts.ReplicaWait); err != nil {
			return nil, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "open the replica", err))
		}
	}
	if driverName == DriverLibPQ && !opts.Unprepared {
		// pgx keeps its own cache of every statement; lib/pq none.
		db.stmts = stmtcache.New(pool, stmtcache.Size(opts.StatementCache), isStalePlan)
		db.unitStatements = stmtcache.Size(opts.StatementCache)
	}
	settings := opts.Settings()
	settings.Unprepared = opts.Unprepared
	drv := newDriver(db, driverName, refsetdriver.Bind(pool, settings))
	if pgxUnguarded && opts.Logger != nil {
		opts.Logger.LogAttrs(ctx, slog.LevelWarn, "refset/postgres: the pgx pool given to New has no guard against running a statement twice: "+
			"database/sql runs the caller's own statement again on another connection when pgx lost the connection after sending it "+
			"(every statement without arguments, or every statement in simple_protocol mode); refset's own units of work and statements "+
			"that commit on their own are safe; open the pool with sql.OpenDB(postgres.NewPgxConnector(cfg)) or NewPgxPoolConnector(pool)")
	}
	cfg := engine.Config{
		Name:       "refset/postgres",
		DB:         db,
		Driver:     drv,
		Statements: db.stmts,
		Begin: func(ctx context.Context) (context.Context, *sqlx.Tx, error) {
			if db.beginTicket {
				ctx = withTicket(ctx)
			}
			tx, err := db.begin(ctx, &sql.TxOptions{Isolation: db.isolation})
			return ctx, tx, err
		},
		Release:          db.release,
		OwnUnitsHoldPool: db.ownUnitsHoldPool,
	}
	if db.resolveWait > 0 {
		cfg.Tx.Commit = db.commit
		if driverName == DriverLibPQ {
			db.beginTicket = beginTicketAllowed(ctx, pool)
		}
		if db.stmts != nil && !db.beginTicket {
			// Prepared now, on the pool: inside a transaction, preparing on the pool
			// would wait for a second connection, which a pool of one never has.
			if db.ticket, err = pool.PrepareContext(ctx, ticketSQL); err != nil {
				return nil, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "open", openError(err)))
			}
		}
	}
	db.storeEngine = engine.New(cfg)
	return db, nil
}

// resolveWait is how long the outcome of a lost COMMIT is asked on pool's server:
// opt, the option (zero: 30 s; negative: not at all), or 0 when the server is older
// than PostgreSQL 13, which has no pg_xact_status.
func resolveWait(ctx context.Context, pool *sql.DB, opt time.Duration) (time.Duration, error) {
	if opt < 0 {
		return 0, nil
	}
	var version int
	if err := pool.QueryRowContext(ctx, serverVersionSQL).Scan(&version); err != nil {
		return 0, err
	}
	if version < 130000 {
		return 0, nil
	}
	return cmp.Or(opt, 30*time.Second), nil
}

// beginTicketAllowed reports whether the server lets lib/pq's BEGIN read a commit
// ticket (beginTicketSQL): it tries, in a transaction it rolls back. A role refused
// pg_logical_emit_message (revoked from PUBLIC) reads the ticket before COMMIT
// instead. Any other failure (a standby, which refuses a write transaction; a lost
// connection) says nothing of the role, and the BEGIN of a unit of work would meet it
// as any BEGIN would.
func beginTicketAllowed(ctx context.Context, pool *sql.DB) bool {
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return true
	}
	defer tx.Rollback()
	var ticket string
	err = tx.QueryRowContext(ctx, beginTicketSQL).Scan(&ticket)
	return sqlState(err) != codeInsufficientPrivilege
}

// driverOf names the driver of pool: lib/pq or pgx's stdlib, and no other.
func driverOf(pool *sql.DB) (string, error) {
	switch d := pool.Driver().(type) {
	case *pq.Driver:
		return DriverLibPQ, nil
	case *stdlib.Driver:
		return DriverPgx, nil
	default:
		return "", fmt.Errorf("%w: the pool's driver is %T; want lib/pq or pgx's stdlib", refset.ErrInvalidConfig, d)
	}
}

// guardedLibPQ refuses a caller's lib/pq pool whose connections are not
// NewConnector's. Refusing, rather than sending refset's statements on such a pool a
// safer way, is for the caller: the pool would still run the caller's own statements
// twice, and the safe way on it (every statement on a *sql.Conn, prepared anew each
// time, since database/sql keeps no prepared statement of a *sql.Conn) costs a
// payment a round trip more than the one-line change at startup.
func guardedLibPQ(ctx context.Context, pool *sql.DB) error {
	guarded, err := connIs[*guardedConn](ctx, pool)
	if err != nil || guarded {
		return err
	}
	return fmt.Errorf("refset/postgres: new: %w: a lib/pq pool that sql.Open made runs a statement again on another connection "+
		"when its connection was lost after the statement was sent (a payment made twice), and keeps connections to a server that "+
		"no longer takes writes; open it with sql.OpenDB(postgres.NewConnector(dsn)), or let postgres.Open make it", refset.ErrInvalidConfig)
}

// connIs reports whether a connection of pool is a C (a guard's).
func connIs[C any](ctx context.Context, pool *sql.DB) (bool, error) {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return false, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "open", openError(err)))
	}
	defer conn.Close()
	is := false
	_ = conn.Raw(func(dc any) error {
		_, is = dc.(C)
		return nil
	})
	return is, nil
}

// checkOneRoundTrip refuses, for Options.Unprepared, a caller's pool whose driver
// would run a statement with arguments in two round trips or prepare it (see
// openPool): behind a pooler in transaction mode, that runs other clients'
// statements or fails.
func checkOneRoundTrip(ctx context.Context, pool *sql.DB, driverName string) error {
	check := libpqBinaryParameters
	if driverName == DriverPgx {
		check = pgxExecMode
	}
	fix, err := check(ctx, pool)
	if err != nil {
		return ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "open", openError(err)))
	}
	if fix != "" {
		return fmt.Errorf("refset/postgres: new: %w: Options.Unprepared needs every statement sent in one round trip "+
			"that prepares nothing (a pooler in transaction mode may lend each round trip another server connection): %s",
			refset.ErrInvalidConfig, fix)
	}
	return nil
}

// pgxExecMode says what to set unless the pool's pgx sends each statement in one
// round trip without preparing it.
func pgxExecMode(ctx context.Context, pool *sql.DB) (fix string, err error) {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var mode pgx.QueryExecMode
	if err := conn.Raw(func(c any) error {
		pc := pgxConnOf(c)
		if pc == nil {
			return errNotPgx
		}
		mode = pc.Config().DefaultQueryExecMode
		return nil
	}); err != nil {
		return "", err
	}
	if mode == pgx.QueryExecModeExec || mode == pgx.QueryExecModeSimpleProtocol {
		return "", nil
	}
	return fmt.Sprintf("the pool's pgx runs in %q mode; set default_query_exec_mode=exec in its DSN "+
		"(or pgx.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec)", mode), nil
}

// libpqBinaryParameters says what to set unless the pool's lib/pq has
// binary_parameters on. lib/pq does not tell, so a probe does (binaryParametersSQL).
// It runs in a transaction, which a pooler keeps on one server connection.
func libpqBinaryParameters(ctx context.Context, pool *sql.DB) (fix string, err error) {
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, binaryParametersSQL, `\x00`).Scan(&n); err != nil {
		return "", err
	}
	if n != 1 {
		return "open the lib/pq pool with binary_parameters=yes in its DSN", nil
	}
	return "", nil
}

// openError is why the first connection failed: the server's answer or the lost
// connection as a sentinel, and anything else (lib/pq's complaints about the DSN
// itself) as ErrInvalidConfig.
func openError(err error) error {
	if _, ok := refusedLogin(err); ok {
		// Open's first connection: the role, password or database of the caller's
		// DSN (later, a connection of the pool refused so is ErrUnavailable).
		return sentinel.New("", "", refset.ErrInvalidConfig, err)
	}
	if err = translateError(err, ""); sqlstore.Translated(err) {
		return err
	}
	return sentinel.New("", "", refset.ErrInvalidConfig, err)
}

// Pool is the connection pool; use it for your own queries too. On a DB that was not
// opened, every call on it fails with refset.ErrInvalidConfig.
func (db *DB) Pool() *sqlx.DB {
	if db.pool == nil {
		return engine.Unopened(DriverLibPQ)
	}
	return db.pool
}

// Replica is the pool on the hot standby (Options.Replica or ReplicaDSN), or nil.
// Reads of your own may go there too: ReplicaCaughtUp says when it shows your writes.
func (db *DB) Replica() *sqlx.DB { return db.replicaPool }

// Reader is the pool, Pool (refset.Database), on which refset reads outside a unit of
// work; once the database is closed, every call on it fails with refset.ErrClosed, on
// a caller's pool too, which Pool still returns open.
func (db *DB) Reader() refset.Querier { return db.storeEngine.Reading(db.Pool(), DriverLibPQ) }

// release closes the pools Open made, the replica's among them (a pool given to New
// or in Options.Replica stays open: it is the caller's), when the database is closed.
func (db *DB) release() error {
	var err error
	if db.ticket != nil {
		// On a caller's pool, the connections live on: free the statement on them.
		err = db.ticket.Close()
	}
	if db.replica.owned {
		err = errors.Join(err, db.replicaPool.Close())
	}
	if db.ownsPool {
		err = errors.Join(db.pool.Close(), err)
	}
	return err
}
