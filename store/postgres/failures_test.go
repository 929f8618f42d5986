package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/pgtest"
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
		_, err := db.Pool.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	// Another session holds the row lock of 'locked' for the lock_timeout case.
	holder, err := db.Pool.BeginTx(ctx, nil)
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
		{"connection lost while committing", []string{`INSERT INTO doomed VALUES ('x')`}, []error{refset.ErrUnavailable, refset.ErrCommitUnknown}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := refset.InTx(ctx, db, func(tx refset.Tx) error {
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
			if errors.Is(err, refset.ErrCommitUnknown) {
				lost := logs.find("refset: connection lost while committing; the transaction may or may not have committed")
				require.Len(t, lost, 1, "an unknown commit is logged")
				assert.Equal(t, "ERROR", lost[0]["level"])
			}
			assert.Equal(t, 0, count(t, db, `SELECT count(*) FROM items WHERE id = 'written'`), "nothing was committed")
			assert.Equal(t, 0, count(t, db, `SELECT count(*) FROM doomed`), "nothing was committed")
			// The pool drops the lost connection; the next unit of work goes through.
			require.NoError(t, refset.InTx(ctx, db, func(tx refset.Tx) error {
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
		{"53300", "sorry, too many clients already", refset.ErrUnavailable},
		{"53100", "could not extend file: No space left on device", refset.ErrUnavailable},
		{"57014", "canceling statement due to statement timeout", refset.ErrTimeout},
		{"57014", "canceling statement due to user request", context.Canceled},
		{"55P03", "canceling statement due to lock timeout", refset.ErrTimeout},
		{"25P03", "terminating connection due to idle-in-transaction timeout", refset.ErrTimeout},
		{"40001", "could not serialize access", refset.ErrConflict},
		{"40P01", "deadlock detected", refset.ErrConflict},
		{"25P02", "current transaction is aborted", refset.ErrInvalidTx},
		{"42P01", `relation "x" does not exist`, refset.ErrSchema},
		{"23502", "null value in column", refset.ErrConstraint},
		{"23514", "new row violates check constraint", refset.ErrConstraint},
		{"28P01", "password authentication failed", refset.ErrInvalidConfig},
		{"3D000", `database "x" does not exist`, refset.ErrInvalidConfig},
		{"42601", "syntax error", refset.ErrStatement},
		{"22P02", "invalid input syntax for type integer", refset.ErrStatement},
		{"P0001", "raised by a trigger", refset.ErrStatement},
		{"XX000", "internal error", refset.ErrStatement},
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

func count(t *testing.T, db *DB, q string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRowContext(t.Context(), q).Scan(&n))
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
		_, err := db.Pool.ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
		require.NoError(t, err)
		store, err := NewStore[block, string](ctx, db, Config{Table: "blocks"})
		require.NoError(t, err)
		set := refset.New(store)
		c, err := NewCollector(ctx, db, cleanup.Config{Table: "blocks", Grace: time.Millisecond})
		require.NoError(t, err)
		_, err = set.Add(ctx, block{Hash: "a", Height: 1})
		require.NoError(t, err)

		locker, err := db.Pool.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer locker.Rollback()
		_, err = locker.ExecContext(ctx, `LOCK TABLE blocks IN ACCESS EXCLUSIVE MODE`)
		require.NoError(t, err)

		calls := map[string]func(ctx context.Context) error{
			"Collect": func(ctx context.Context) error { _, err := c.Collect(ctx); return err },
			"Check":   func(ctx context.Context) error { _, err := c.Check(ctx); return err },
			"Why":     func(ctx context.Context) error { _, err := c.Why(ctx, "a"); return err },
		}
		for name, call := range calls {
			t.Run(name, func(t *testing.T) {
				short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				require.ErrorIs(t, call(short), context.DeadlineExceeded)
			})
		}
	})
}
