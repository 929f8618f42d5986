package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInducedFailures makes the server fail a unit of work the ways a production
// Postgres does (a terminated backend, statement and lock timeouts, a connection lost
// while committing) and checks that each failure is the sentinel the docs promise,
// that it changed nothing, and that the database works right after.
func TestInducedFailures(t *testing.T) {
	forEachDriver(t, testInducedFailures)
}

func testInducedFailures(t *testing.T, driver string) {
	logs := newLogRecorder()
	db := openWith(t, pgtest.DSN(t), Options{Driver: driver, Options: store.Options{Logger: logs.logger()}})
	ctx := t.Context()
	for _, q := range []string{
		`CREATE TABLE items (id text PRIMARY KEY)`,
		`INSERT INTO items VALUES ('locked')`,
		// At COMMIT this trigger ends the committing backend, as a server crash or a
		// failover would: the client loses its connection mid-commit.
		`CREATE TABLE doomed (id text PRIMARY KEY)`,
		`CREATE FUNCTION end_backend() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER end_backend AFTER INSERT ON doomed
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_backend()`,
	} {
		_, err := db.Pool().ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	// Another session holds the row lock of 'locked' for the lock_timeout case.
	holder, err := db.Pool().BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Rollback() })
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM items WHERE id = 'locked' FOR UPDATE`)
	require.NoError(t, err)

	cases := []struct {
		name  string
		stmts []string
		want  []error
	}{
		{"terminated backend (57P01)", []string{`SELECT pg_terminate_backend(pg_backend_pid())`}, []error{refset.ErrUnavailable}},
		{"statement_timeout (57014)", []string{`SET LOCAL statement_timeout = '50ms'`, `SELECT pg_sleep(5)`}, []error{refset.ErrTimeout}},
		{"lock_timeout (55P03)", []string{`SET LOCAL lock_timeout = '50ms'`, `UPDATE items SET id = 'moved' WHERE id = 'locked'`}, []error{refset.ErrTimeout}},
		// The server, asked on a new connection, says it did not commit: nothing
		// changed, and the caller is told so (TestLostCommitIsResolved has the rest).
		{"connection lost while committing", []string{`INSERT INTO doomed VALUES ('x')`}, []error{refset.ErrUnavailable}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO items VALUES ('written')`); err != nil {
					return err
				}
				for _, q := range tc.stmts {
					if _, err := tx.ExecContext(ctx, q); err != nil {
						return err
					}
				}
				return nil
			})
			for _, want := range tc.want {
				require.ErrorIs(t, err, want)
			}
			require.NotErrorIs(t, err, refset.ErrConflict, "not retried as a conflict")
			require.NotErrorIs(t, err, refset.ErrCommitUnknown, "the server tells what became of a lost COMMIT")
			assert.Equal(t, 0, count(t, db, `SELECT count(*) FROM items WHERE id = 'written'`), "nothing was committed")
			assert.Equal(t, 0, count(t, db, `SELECT count(*) FROM doomed`), "nothing was committed")
			// The pool drops the lost connection; the next unit of work goes through.
			require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `SELECT 1`)
				return err
			}))
		})
	}
}

// TestOpenFailures: what Open says when it cannot get a first connection.
func TestOpenFailures(t *testing.T) {
	forEachDriver(t, testOpenFailures)
}

func testOpenFailures(t *testing.T, driver string) {
	good, err := url.Parse(pgtest.DSN(t))
	require.NoError(t, err)

	// A port nothing listens on: take one, then free it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	refused := *good
	refused.Host = fmt.Sprintf("127.0.0.1:%d", closedPort)
	noDB := *good
	noDB.Path = "/refset_no_such_database"
	badRole := *good
	badRole.User = url.User("refset_no_such_role")

	cases := []struct {
		name string
		dsn  string
		want error
	}{
		{"connection refused", refused.String(), refset.ErrUnavailable},
		{"no such database", noDB.String(), refset.ErrInvalidConfig},
		{"no such role", badRole.String(), refset.ErrInvalidConfig},
		{"malformed DSN", "host=127.0.0.1 port=notaport", refset.ErrInvalidConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			db, err := Open(ctx, tc.dsn, Options{Driver: driver})
			if err == nil {
				db.Close()
			}
			require.ErrorIs(t, err, tc.want)
		})
	}

	// A DSN the driver cannot parse is quoted in its error; the password is not.
	for _, dsn := range []string{
		"postgres://u:s3cret-pw@127.0.0.1:notaport/x",
		"postgres://u:s3cret-pw@" + refused.Host + "/x?sslmode=disable",
		"host=127.0.0.1 port=notaport user=u password=s3cret-pw",
	} {
		_, err := Open(t.Context(), dsn, Options{Driver: driver})
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "s3cret-pw", "the password is redacted")
	}
}

// TestLoginRefusedAfterOpen: the server's refusal of a connection's login (SQLSTATE
// 28000: a role whose LOGIN was revoked) or of its database (3D000: renamed) is the
// caller's DSN at Open, ErrInvalidConfig, but on a store that opened it is a change
// under the running service: a call that needs a new connection fails with
// ErrUnavailable, which replicas retry on, saying the server's code and words, and
// goes through once the operator puts it right.
func TestLoginRefusedAfterOpen(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		ctx := t.Context()
		asURL, _ := pgtest.Forms(t, pgtest.DSN(t))
		admin, err := sql.Open(DriverLibPQ, asURL)
		require.NoError(t, err)
		t.Cleanup(func() { admin.Close() })
		name := fmt.Sprintf("refset_login_%s_%d", driver, time.Now().UnixNano())
		exec := func(q string) {
			t.Helper()
			_, err := admin.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		exec(`CREATE ROLE ` + name + ` LOGIN PASSWORD 'pw1'`)
		exec(`CREATE DATABASE ` + name)
		t.Cleanup(func() { // after the store's pool closed (cleanups run last first)
			for _, q := range []string{`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`,
				`DROP DATABASE IF EXISTS ` + name + `_moved WITH (FORCE)`, `DROP ROLE IF EXISTS ` + name} {
				_, err := admin.ExecContext(context.Background(), q)
				assert.NoError(t, err, q)
			}
		})
		u, err := url.Parse(asURL)
		require.NoError(t, err)
		u.User, u.Path = url.UserPassword(name, "pw1"), "/"+name
		u.RawQuery = url.Values{"sslmode": {u.Query().Get("sslmode")}}.Encode()
		db := openWith(t, u.String(), Options{Driver: driver})
		db.Pool().SetMaxIdleConns(0) // every call dials anew
		unit := func() error {
			return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `SELECT 1`)
				return err
			})
		}
		require.NoError(t, unit())

		for _, tc := range []struct {
			name, refuse, allow, code, words string
		}{
			{"LOGIN revoked", `ALTER ROLE ` + name + ` NOLOGIN PASSWORD 'pw2'`, `ALTER ROLE ` + name + ` LOGIN PASSWORD 'pw1'`,
				"28000", "is not permitted to log in"},
			{"database renamed", `ALTER DATABASE ` + name + ` RENAME TO ` + name + `_moved`, `ALTER DATABASE ` + name + `_moved RENAME TO ` + name,
				"3D000", "does not exist"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				exec(tc.refuse)
				allowed := false
				defer func() { // a failed check leaves the next case its login
					if !allowed {
						_, _ = admin.ExecContext(context.Background(), tc.allow)
					}
				}()
				err := unit()
				require.ErrorIs(t, err, refset.ErrUnavailable, "a running store's new connection refused")
				require.NotErrorIs(t, err, refset.ErrInvalidConfig)
				assert.Contains(t, err.Error(), "refused a new connection")
				assert.Contains(t, err.Error(), tc.code, "the SQLSTATE")
				assert.Contains(t, err.Error(), tc.words, "the server's words")
				assert.Equal(t, tc.code, sqlState(err), "the driver's error stays in the chain")

				// At Open, and at New's first connection, the DSN is wrong.
				_, err = Open(ctx, u.String(), Options{Driver: driver})
				require.ErrorIs(t, err, refset.ErrInvalidConfig, "Open")
				require.NotErrorIs(t, err, refset.ErrUnavailable, "Open")
				_, err = New(ctx, callersPool(t, driver, u.String()), Options{})
				require.ErrorIs(t, err, refset.ErrInvalidConfig, "New")

				exec(tc.allow)
				allowed = true
				require.NoError(t, unit(), "the same store goes on once the operator put it right")
			})
		}
	})
}

// TestTranslateSQLStates: every server error maps to a sentinel, by SQLSTATE, for the
// codes that the server sends in situations no test here can stage (a restart, a
// crash, a full disk).
func TestTranslateSQLStates(t *testing.T) {
	cases := []struct {
		code string
		msg  string
		want error
	}{
		{"57P01", "terminating connection due to administrator command", refset.ErrUnavailable},
		{"57P02", "terminating connection because of crash of another server process", refset.ErrUnavailable},
		{"57P03", "the database system is starting up", refset.ErrUnavailable},
		{"08006", "connection failure", refset.ErrUnavailable},
		{"08P01", "server login has been failing", refset.ErrUnavailable},
		{"08P01", `bind message supplies 1 parameters, but prepared statement "" requires 2`, refset.ErrStatement},
		{"53300", "sorry, too many clients already", refset.ErrUnavailable},
		{"53100", "could not extend file: No space left on device", refset.ErrUnavailable},
		{"57014", "canceling statement due to statement timeout", refset.ErrTimeout},
		{"57014", "canceling statement due to user request", context.Canceled},
		{"55P03", "canceling statement due to lock timeout", refset.ErrTimeout},
		{"25P03", "terminating connection due to idle-in-transaction timeout", refset.ErrTimeout},
		{"40001", "could not serialize access", refset.ErrConflict},
		{"40P01", "deadlock detected", refset.ErrConflict},
		{"25P02", "current transaction is aborted", refset.ErrInvalidTx},
		{"25006", "cannot execute INSERT in a read-only transaction", refset.ErrUnavailable},
		{"42P01", `relation "x" does not exist`, refset.ErrSchema},
		{"23502", "null value in column", refset.ErrConstraint},
		{"23514", "new row violates check constraint", refset.ErrConstraint},
		// A new connection's login refused (TestLoginRefusedAfterOpen; Open's first
		// is ErrInvalidConfig), or a statement that names no database.
		{"28P01", "password authentication failed", refset.ErrUnavailable},
		{"3D000", `database "x" does not exist`, refset.ErrStatement},
		{"42601", "syntax error", refset.ErrStatement},
		{"22P02", "invalid input syntax for type integer", refset.ErrStatement},
		{"P0001", "raised by a trigger", refset.ErrStatement},
		{"XX000", "internal error", refset.ErrStatement},
	}
	// No server of a multi-host DSN takes writes (a failover before the promotion):
	// each driver's refusal to connect.
	for _, err := range []error{
		fmt.Errorf("pq: could not connect to any of the hosts:\n%w", errors.Join(
			fmt.Errorf("connecting to 127.0.0.1:5432: %w", errors.New("server is in hot standby mode")),
			fmt.Errorf("connecting to 127.0.0.1:5433: %w", errors.New("session is read-only")))),
		fmt.Errorf("failed to connect: ValidateConnect failed: %w", pgconn.ErrReadOnlyConnection),
	} {
		require.ErrorIs(t, translateError(err, ""), refset.ErrUnavailable, err.Error())
	}
	// A standby refuses lib/pq's BEGIN READ WRITE as a feature it lacks: the primary
	// is elsewhere.
	readWrite := &pq.Error{Code: "0A000", Message: "cannot set transaction read-write mode during recovery"}
	require.ErrorIs(t, translateError(readWrite, "BEGIN"), refset.ErrUnavailable)
	// The server ends the session with 3D000 when a connection's database is gone,
	// and with class 28 when its login is refused: the DSN's mistake at Open only.
	for _, err := range []error{
		&pq.Error{Severity: "FATAL", Code: "3D000", Message: `database "x" does not exist`},
		&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "3D000", Message: `database "x" does not exist`},
		&pgconn.PgError{Severity: "FATAL", Code: "28000", Message: `role "x" is not permitted to log in`},
		// lib/pq reads the severity in the server's lc_messages: refset's connector
		// marks a refusal of the connections it makes.
		&startupError{&pq.Error{Severity: "ВАЖНО", Code: "3D000", Message: `база данных "x" не существует`}},
	} {
		require.ErrorIs(t, translateError(err, ""), refset.ErrUnavailable, err.Error())
		require.ErrorIs(t, openError(err), refset.ErrInvalidConfig, err.Error())
	}
	for _, tc := range cases {
		t.Run(tc.code+" "+tc.msg, func(t *testing.T) {
			driverErr := &pq.Error{Code: pq.ErrorCode(tc.code), Message: tc.msg}
			err := translateError(driverErr, "")
			require.ErrorIs(t, err, tc.want)
			var pe *pq.Error
			require.True(t, errors.As(err, &pe), "the driver's error stays reachable")
		})
	}
}

// TestCommitOfAnAbortedUnit: a unit whose function swallowed the error of a statement
// the server refused, and returned nil, commits nothing, and InTx says why with
// ErrInvalidTx, on each driver (each has its own word for the COMMIT the server turned
// into a rollback).
func TestCommitOfAnAbortedUnit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		db := openWith(t, pgtest.DSN(t), Options{Driver: driver})
		ctx := t.Context()
		_, err := db.Pool().ExecContext(ctx, `CREATE TABLE t (v text PRIMARY KEY)`)
		require.NoError(t, err)
		err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES ('kept?')`); err != nil {
				return err
			}
			_, _ = tx.ExecContext(ctx, `INSERT INTO t VALUES (NULL)`) // refused; swallowed
			return nil
		})
		require.ErrorIs(t, err, refset.ErrInvalidTx)
		assert.True(t, refset.IsSentinel(err), "%v", err)
		assert.Equal(t, 0, count(t, db, `SELECT count(*) FROM t`), "nothing committed")
	})
}

func count(t *testing.T, db *DB, q string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool().QueryRowContext(t.Context(), q).Scan(&n))
	return n
}

// Clean-up's reads and passes cut short by their context's deadline say so: lib/pq
// reports the cancelled statement as the server's 57014, which must still match
// context.DeadlineExceeded. Another session's exclusive lock on the set's table holds
// them until the deadline passes.
func TestCleanupReportsItsDeadline(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		db := openWith(t, pgtest.DSN(t), Options{Driver: driver})
		ctx := t.Context()
		set := newBlocks(t, db)
		c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "blocks", Grace: time.Millisecond})
		require.NoError(t, err)
		_, err = set.Add(ctx, block{Hash: "a", Height: 1})
		require.NoError(t, err)

		pgtest.DeadlinesUnderLock(t, db.Pool().DB, "blocks", map[string]func(ctx context.Context) error{
			"Collect": func(ctx context.Context) error { _, err := c.Collect(ctx); return err },
			"Check":   func(ctx context.Context) error { _, err := c.Check(ctx); return err },
			"Why":     func(ctx context.Context) error { _, err := c.Why(ctx, "a"); return err },
		})
	})
}

// Under SERIALIZABLE, concurrent units of work that each read the whole ledger and
// append the next sequence number conflict (write skew): Postgres aborts all but one
// with SQLSTATE 40001. InTx runs the aborted ones again, so every unit commits, each
// exactly once, and the sequence has no gaps and no duplicates.
func TestInTxRetriesSerializationFailures(t *testing.T) {
	forEachDriver(t, testInTxRetriesSerializationFailures)
}

func testInTxRetriesSerializationFailures(t *testing.T, driver string) {
	dsn := pgtest.DSN(t)
	logs := newLogRecorder()
	db, err := Open(t.Context(), dsn, Options{Isolation: sql.LevelSerializable, MaxConns: 8, Driver: driver, Options: store.Options{Logger: logs.logger()}})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := t.Context()
	_, err = db.Pool().ExecContext(ctx, `CREATE TABLE ledger (seq bigint NOT NULL, writer int NOT NULL)`)
	require.NoError(t, err)

	const writers, units = 4, 10
	var attempts, conflicts atomic.Int64
	// In each round every writer's first attempt reads, then waits until all have
	// read before it writes, so the round's transactions certainly overlap.
	rounds := make([]sync.WaitGroup, units)
	for r := range rounds {
		rounds[r].Add(writers)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*units)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range units {
				first := true
				errs <- refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					attempts.Add(1)
					var next int64
					if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM ledger`).Scan(&next); err != nil {
						return err
					}
					if first {
						first = false
						rounds[r].Done()
						rounds[r].Wait()
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO ledger (seq, writer) VALUES ($1, $2)`, next, w)
					return err
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			conflicts.Add(1)
			t.Errorf("unit of work failed: %v", err)
		}
	}
	var rows, distinct, top int64
	require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT seq), COALESCE(MAX(seq), 0) FROM ledger`).Scan(&rows, &distinct, &top))
	assert.Equal(t, int64(writers*units), rows, "every unit committed once")
	assert.Equal(t, rows, distinct, "no sequence number twice")
	assert.Equal(t, rows, top, "no gaps")
	assert.Greater(t, attempts.Load(), rows, "the workload produced conflicts, so retries were exercised")
	retries := logs.find("refset: transaction aborted by the database; retrying")
	assert.Len(t, retries, int(attempts.Load()-rows), "every retry is logged")
	for _, r := range retries {
		assert.Contains(t, r["cause"], "40001", "with its cause")
	}
	t.Logf("%d units, %d attempts", rows, attempts.Load())
}

// logRecorder keeps the records a test's logger writes, as decoded JSON.
type logRecorder struct {
	out testlog.Buffer
}

func newLogRecorder() *logRecorder { return &logRecorder{} }

func (r *logRecorder) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&r.out, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records is every record written so far.
func (r *logRecorder) records() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.out.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// find is every record whose message is msg.
func (r *logRecorder) find(msg string) []map[string]any {
	var out []map[string]any
	for _, rec := range r.records() {
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestLogging: with a logger, refset says what an operator wants to know, with
// structured attributes: slow statements (the caller's and the store's own), a commit
// whose outcome is unknown, clean-up's passes. Retries are checked by
// TestInTxRetriesSerializationFailures.
func TestLogging(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		logs := newLogRecorder()
		db := openWith(t, pgtest.DSN(t), Options{Driver: driver, Options: store.Options{Logger: logs.logger(), SlowStatement: 50 * time.Millisecond}})
		ctx := t.Context()
		_, err := db.Pool().ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
		require.NoError(t, err)

		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_sleep(0.1)`)
			return err
		}))
		slow := logs.find("refset: slow statement")
		require.Len(t, slow, 1)
		assert.Equal(t, "SELECT pg_sleep(0.1)", slow[0]["statement"])
		assert.Equal(t, "WARN", slow[0]["level"])

		setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
		require.NoError(t, err)
		set := refset.New(setStore)
		c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "blocks", Grace: time.Millisecond})
		require.NoError(t, err)
		_, err = set.Add(ctx, block{Hash: "gone", Height: 1})
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		s, err := c.Collect(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Deleted)
		collected := logs.find("refset/cleanup: collected")
		require.NotEmpty(t, collected)
		last := collected[len(collected)-1]
		assert.EqualValues(t, 1, last["deleted"])
		assert.Equal(t, "blocks", last["table"])

		// The store's own statements are timed too: a lock another session holds
		// makes the insert wait past the threshold.
		locker, err := db.Pool().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = locker.ExecContext(ctx, `LOCK TABLE blocks IN EXCLUSIVE MODE`)
		require.NoError(t, err)
		time.AfterFunc(150*time.Millisecond, func() { _ = locker.Rollback() })
		_, err = set.Add(ctx, block{Hash: "late", Height: 2})
		require.NoError(t, err)
		var storeSlow bool
		for _, r := range logs.find("refset: slow statement") {
			storeSlow = storeSlow || strings.Contains(r["statement"].(string), `INSERT INTO`)
		}
		assert.True(t, storeSlow, "the store's insert was logged as slow")
	})
}

// Without a logger refset logs nothing, not even to slog's default logger.
func TestNoLoggerIsSilent(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{})
	assert.Equal(t, slog.DiscardHandler, db.Driver().Logger().Handler(), "a logger that drops everything")
}
