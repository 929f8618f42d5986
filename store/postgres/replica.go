package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
)

// A replica is a hot standby of the primary: see "Reads from a hot standby" in the
// package doc for what goes there.

// replicaState is what a DB knows of its replica besides the pool.
type replicaState struct {
	owned bool          // Open dialled it, so Close closes it
	wait  time.Duration // how long a report waits for it to catch up (Options.ReplicaWait)
	wal   walLayout     // the primary's WAL page and segment sizes
}

// defaultReplicaWait is ReplicaWait's zero value: a standby streaming from a busy
// primary replays within milliseconds, one with asynchronous commits within a few
// wal_writer_delay (200ms by default).
const defaultReplicaWait = time.Second

// openReplicaPool opens the pool on a hot standby that Open dials
// (Options.ReplicaDSN) as openPool opens the primary's: a DSN of either form naming
// one host or several, and unprepared behind a pooler. It does without the primary's
// checks that a connection's server still takes writes: a standby never does. On
// lib/pq its calls are watched, as the primary's are (watch.go): a standby that
// stops answering holds a read only about as long as its context. Nor does it need
// the guard against running a statement again after its connection was lost
// (conns.go), on either driver: a standby runs only reads, which change nothing
// when run twice, and database/sql's retry then spares the read an error.
func openReplicaPool(driver, dsn string, unprepared bool) (*sql.DB, error) {
	if driver == DriverLibPQ {
		connector, err := libpqConnector(dsn, unprepared)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(guardedConnector{startupConnector: connector, replica: true}), nil
	}
	cfg, err := pgxConfig(dsn, unprepared)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg), nil
}

// useReplica checks that pool is a hot standby of db's primary, serving the same
// database with the same search_path, and makes it db's replica.
func (db *DB) useReplica(ctx context.Context, pool *sql.DB, wait time.Duration) error {
	name, err := driverOf(pool)
	if err != nil {
		return err
	}
	if err := pool.PingContext(ctx); err != nil {
		return openError(err)
	}
	primary, err := describeServer(ctx, db.pool.DB)
	if err != nil {
		return fmt.Errorf("reading the primary: %w", translateError(err, ""))
	}
	standby, err := describeServer(ctx, pool)
	if err != nil {
		return fmt.Errorf("reading the replica: %w", translateError(err, ""))
	}
	if err := standby.replicates(primary); err != nil {
		return err
	}
	switch {
	case wait == 0:
		wait = defaultReplicaWait
	case wait < 0:
		wait = 0
	}
	db.replicaPool = sqlx.NewDb(pool, name)
	db.replica.wait, db.replica.wal = wait, primary.wal
	return nil
}

// server is what useReplica compares between the primary and the replica.
type server struct {
	database, searchPath string
	inRecovery           bool
	// system is the cluster's identifier, which a standby made from the primary's
	// base backup shares; 0 when the role may not read it (pg_control_system is
	// granted to PUBLIC unless a DBA revoked it).
	system uint64
	wal    walLayout
}

func describeServer(ctx context.Context, pool *sql.DB) (server, error) {
	var s server
	err := pool.QueryRowContext(ctx, `SELECT current_database(), current_setting('search_path'), pg_is_in_recovery(),
		current_setting('wal_block_size')::bigint, pg_size_bytes(current_setting('wal_segment_size'))`).
		Scan(&s.database, &s.searchPath, &s.inRecovery, &s.wal.page, &s.wal.segment)
	if err != nil {
		return s, err
	}
	var system sql.NullString // a bigint too large for int64 on some clusters: read as text
	err = pool.QueryRowContext(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&system)
	var se sqlStater
	if errors.As(err, &se) && se.SQLState() == codeInsufficientPrivilege {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	_, err = fmt.Sscan(system.String, &s.system)
	return s, err
}

// replicates says why s, the replica, cannot serve primary's reads, or nil.
func (s server) replicates(primary server) error {
	switch {
	case !s.inRecovery:
		return fmt.Errorf("%w: the replica is not a hot standby (pg_is_in_recovery() is false): "+
			"it may be a primary, which refset would read stale rows from without knowing it", refset.ErrInvalidConfig)
	case s.system != 0 && primary.system != 0 && s.system != primary.system:
		return fmt.Errorf("%w: the replica is a standby of another cluster (system identifier %d, the primary's is %d)",
			refset.ErrInvalidConfig, s.system, primary.system)
	case s.database != primary.database:
		return fmt.Errorf("%w: the replica is connected to database %q, the primary to %q",
			refset.ErrInvalidConfig, s.database, primary.database)
	case s.searchPath != primary.searchPath:
		return fmt.Errorf("%w: the replica's search_path is %q, the primary's %q: names would resolve to other tables",
			refset.ErrInvalidConfig, s.searchPath, primary.searchPath)
	}
	return nil
}

// ReplicaCaughtUp reports whether the replica shows every transaction the primary
// had committed when ReplicaCaughtUp was called, waiting up to Options.ReplicaWait
// for it to replay them: a read on the replica after true sees the caller's own
// writes, as one on the primary would. It is false without a replica, and for a
// replica that is no longer a standby (promoted). It reads the primary's WAL insert
// position once, then the replica's replay position until it is there. Errors:
// refset.ErrUnavailable (either server), refset.ErrClosed, the context's error.
func (db *DB) ReplicaCaughtUp(ctx context.Context) (bool, error) {
	if db.storeEngine == nil {
		return false, engine.NotOpened("replica caught up")
	}
	if db.replicaPool == nil {
		return false, nil
	}
	if db.Closed() {
		return false, fmt.Errorf("refset/postgres: replica caught up: %w", refset.ErrClosed)
	}
	if err := db.storeEngine.RefuseOwnPool("replica caught up"); err != nil {
		return false, err
	}
	var text string
	if err := db.pool.QueryRowContext(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text); err != nil {
		return false, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "reading the primary's WAL position", db.TranslateError(err, "")))
	}
	target, err := parseLSN(text)
	if err != nil {
		return false, err
	}
	target = db.replica.wal.recordEnd(target)
	deadline := time.Now().Add(db.replica.wait)
	pause := time.Millisecond
	for {
		var replayed sql.NullString // NULL once the standby was promoted
		if err := db.replicaPool.QueryRowContext(ctx, `SELECT pg_last_wal_replay_lsn()::text`).Scan(&replayed); err != nil {
			return false, ctxerr.Wrap(ctx, sentinel.Wrap(msgPrefix, "reading the replica's replay position", db.TranslateError(err, "")))
		}
		if !replayed.Valid {
			return false, nil
		}
		at, err := parseLSN(replayed.String)
		if err != nil {
			return false, err
		}
		if at >= target {
			return true, nil
		}
		if time.Until(deadline) < pause {
			return false, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 25*time.Millisecond)
	}
}

// parseLSN reads a WAL position as Postgres writes it ("16/B374D848").
func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("refset/postgres: reading WAL position %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// walLayout is how a cluster cuts its WAL into pages and segments.
type walLayout struct{ page, segment uint64 }

// Page headers: a segment's first page has the long one. Their sizes are those of
// XLogPageHeaderData and XLogLongPageHeaderData on every 64-bit platform.
const (
	shortPageHeader = 24
	longPageHeader  = 40
)

// recordEnd turns the primary's WAL insert position into the end of the last record
// written, which is what a standby reports having replayed. They differ when the
// last record ended on a page boundary: the insert position is then past the next
// page's header, which no record will fill until the primary writes again, and a
// standby on an idle primary would never seem to reach it.
func (w walLayout) recordEnd(lsn uint64) uint64 {
	switch {
	case w.segment > 0 && lsn%w.segment == longPageHeader:
		return lsn - longPageHeader
	case w.page > 0 && lsn%w.page == shortPageHeader:
		return lsn - shortPageHeader
	}
	return lsn
}
