package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fruit is kept in two tables of the same shape, so a statement of one table run in
// place of the other's returns a row of the wrong kind rather than an error.
type fruit struct {
	Key  string `db:"id"`
	Kind string `db:"kind"`
}

func (f fruit) ID() string { return f.Key }

// Behind PgBouncer in transaction mode every round trip may get another server
// connection. With Options.Unprepared, Open makes each driver send a statement with
// its arguments in one round trip (lib/pq's binary_parameters, pgx's exec mode), so
// reads outside a transaction run the statement they name: many goroutines read
// apples and pears at once and each gets its own kind. Without it lib/pq parses a
// read on one server connection and binds its arguments on the next, which runs
// whatever statement another client parsed there last (pears for apples), and pgx
// finds the statements it prepared missing.
func TestPooledReadsRunTheirOwnStatements(t *testing.T) {
	for _, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn, _ := pgtest.NewPooled(t)
			db, err := postgres.Open(ctx, dsn, postgres.Options{Driver: driver, Unprepared: true, MaxConns: 16})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })

			const keys = 20
			stores := map[string]refset.SetStore[fruit, string]{}
			for _, kind := range []string{"apple", "pear"} {
				_, err := db.Pool().ExecContext(ctx, `CREATE TABLE `+kind+` (id text PRIMARY KEY, kind text NOT NULL)`)
				require.NoError(t, err)
				s, err := store.NewStore[fruit, string](ctx, db, store.Config{Table: kind})
				require.NoError(t, err)
				set := refset.New(s)
				for i := range keys {
					_, err := set.Add(ctx, fruit{Key: fmt.Sprint("k", i), Kind: kind}, set.Hold("test", 0))
					require.NoError(t, err)
				}
				stores[kind] = s
			}

			var wg sync.WaitGroup
			wrong := make(chan string, 16*100)
			for g := range 16 {
				kind := []string{"apple", "pear"}[g%2]
				wg.Go(func() {
					for i := range 100 {
						id := fmt.Sprint("k", (g+i)%keys)
						got, err := stores[kind].Get(ctx, db.Reader(), id)
						switch {
						case err != nil:
							wrong <- fmt.Sprintf("%s %s: %v", kind, id, err)
						case got.Key != id || got.Kind != kind:
							wrong <- fmt.Sprintf("%s %s: read %+v", kind, id, got)
						}
					}
				})
			}
			wg.Wait()
			close(wrong)
			var failures []string
			for w := range wrong {
				failures = append(failures, w)
			}
			if len(failures) > 0 {
				t.Errorf("%d of %d reads went wrong, among them:\n%s", len(failures), 16*100, strings.Join(failures[:min(5, len(failures))], "\n"))
			}
		})
	}
}

// New cannot set the driver's options of a caller's pool, so with Options.Unprepared
// it refuses one that would split a statement across round trips or prepare it (see
// TestPooledReadsRunTheirOwnStatements), saying which option to set, and takes one
// that does not. It asks the server directly here: the check is of the pool, not of
// a pooler.
func TestNewChecksPoolForPooler(t *testing.T) {
	dsn := pgtest.DSN(t) + "&"
	for _, tc := range []struct {
		name, driver, dsn string
		unprepared        bool
		refused           string // what the error names, or "" when the pool is taken
	}{
		{"lib/pq", postgres.DriverLibPQ, dsn, true, "binary_parameters=yes"},
		{"lib/pq binary_parameters=yes", postgres.DriverLibPQ, dsn + "binary_parameters=yes", true, ""},
		{"lib/pq prepared", postgres.DriverLibPQ, dsn, false, ""},
		{"pgx", postgres.DriverPgx, dsn, true, "default_query_exec_mode=exec"},
		{"pgx describe_exec", postgres.DriverPgx, dsn + "default_query_exec_mode=describe_exec", true, "default_query_exec_mode=exec"},
		{"pgx exec", postgres.DriverPgx, dsn + "default_query_exec_mode=exec", true, ""},
		{"pgx simple_protocol", postgres.DriverPgx, dsn + "default_query_exec_mode=simple_protocol", true, ""},
		{"pgx prepared", postgres.DriverPgx, dsn, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool *sql.DB
			if tc.driver == postgres.DriverLibPQ {
				connector, err := postgres.NewConnector(tc.dsn)
				require.NoError(t, err)
				pool = sql.OpenDB(connector)
			} else {
				var err error
				pool, err = sql.Open(tc.driver, tc.dsn)
				require.NoError(t, err)
			}
			t.Cleanup(func() { pool.Close() })
			db, err := postgres.New(t.Context(), pool, postgres.Options{Unprepared: tc.unprepared})
			if tc.refused == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			assert.Nil(t, db)
			assert.Contains(t, err.Error(), tc.refused)
		})
	}
}

// Open, given Options.Unprepared, configures its own pool: whatever the DSN asks of
// the driver, the pool passes New's check. An explicit prepared mode in the DSN is
// overridden, since Unprepared is for poolers, where it is never safe.
func TestOpenUnpreparedConfiguresDriver(t *testing.T) {
	dsn := pgtest.DSN(t) + "&"
	for _, tc := range []struct{ name, driver, dsn string }{
		{"lib/pq", postgres.DriverLibPQ, dsn},
		{"lib/pq binary_parameters=no", postgres.DriverLibPQ, dsn + "binary_parameters=no"},
		{"pgx", postgres.DriverPgx, dsn},
		{"pgx cache_statement", postgres.DriverPgx, dsn + "default_query_exec_mode=cache_statement"},
		{"pgx simple_protocol", postgres.DriverPgx, dsn + "default_query_exec_mode=simple_protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := postgres.Open(t.Context(), tc.dsn, postgres.Options{Driver: tc.driver, Unprepared: true})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			again, err := postgres.New(context.Background(), db.Pool().DB, postgres.Options{Unprepared: true})
			require.NoError(t, err, "Open's pool passes New's check")
			require.NoError(t, again.Close())
		})
	}
}

// A database that does not exist, named through PgBouncer as a user PgBouncer knows
// itself (its auth_file): the server refuses the login, and PgBouncer 1.18 passes that
// on as a protocol violation (08P01), which refset reads as ErrUnavailable; releases
// that forward the server's own code (pgbouncer/pgbouncer#814) give ErrInvalidConfig,
// as a direct connection does (TestOpenFailures). Either way the message is the
// server's, naming the database. (For a user PgBouncer looks up with its auth_query,
// in the database the client named, it holds the client instead: see
// TestMissingDatabaseEndsWithContext.)
func TestMissingDatabaseThroughPgBouncer(t *testing.T) {
	pgtest.NewPooled(t) // skips, or fails under CI, without a PgBouncer
	for i, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
		t.Run(driver, func(t *testing.T) {
			// A name of its own, so that no other test's failed login makes
			// PgBouncer hold this one for server_login_retry.
			name := fmt.Sprintf("refset_no_such_database_%d_%d", time.Now().UnixNano(), i)
			u, err := url.Parse(os.Getenv(pgtest.EnvPgBouncer))
			require.NoError(t, err)
			u.Path = "/" + name
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			db, err := postgres.Open(ctx, u.String(), postgres.Options{Driver: driver, Unprepared: true})
			if err == nil {
				db.Close()
			}
			require.Error(t, err)
			if !errors.Is(err, refset.ErrUnavailable) && !errors.Is(err, refset.ErrInvalidConfig) {
				t.Fatalf("open: %v, want ErrUnavailable (PgBouncer 1.18) or ErrInvalidConfig", err)
			}
			assert.Contains(t, err.Error(), `database "`+name+`" does not exist`)
			assert.NoError(t, ctx.Err(), "the refusal came before the context's end")
		})
	}
}

// A database that does not exist, named through PgBouncer as a user it looks up with
// its auth_query: PgBouncer runs that query in the database the client named, cannot,
// and holds the client until its query_wait_timeout (two minutes by default), then
// refuses it with 08P01 "query_wait_timeout". Open returns when its context ends, with
// the context's error.
func TestMissingDatabaseEndsWithContext(t *testing.T) {
	for i, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			dsn, _ := pgtest.NewPooled(t) // a role of the test's own, not in PgBouncer's auth_file
			u, err := url.Parse(dsn)
			require.NoError(t, err)
			u.Path = fmt.Sprintf("/refset_no_such_database_%d_%d", time.Now().UnixNano(), i)
			const deadline = time.Second
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			db, err := postgres.Open(ctx, u.String(), postgres.Options{Driver: driver, Unprepared: true})
			took := time.Since(start)
			if err == nil {
				db.Close()
			}
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, took, deadline+3*time.Second, "Open waits past its context")
		})
	}
}
