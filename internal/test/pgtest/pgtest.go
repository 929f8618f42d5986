package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq" // also registers the "postgres" database/sql driver
)

// EnvDSN names the environment variable holding the lib/pq DSN of the
// server tests run against.
const EnvDSN = "REFSET_TEST_POSTGRES"

// schemaPrefix starts every schema this package creates, so leftovers from
// a killed test run are easy to recognise (and drop) by hand.
const schemaPrefix = "refset_t_"

const (
	// pingTimeout bounds the first contact with the server: a DSN that
	// does not answer should fail the test quickly, not hang the suite.
	pingTimeout = 10 * time.Second
	// dropTimeout bounds the cleanup; a DROP blocked by a connection the
	// test leaked should fail loudly rather than hang until go test's
	// global timeout. (The cleanup ends such connections first, when the
	// role may: see dropAtEnd.)
	dropTimeout = 30 * time.Second
)

// DSN returns a DSN for a fresh schema that is dropped when tb ends. See
// [New].
func DSN(tb testing.TB) string {
	tb.Helper()
	dsn, _ := New(tb)
	return dsn
}

// New creates a uniquely named schema on the server named by
// REFSET_TEST_POSTGRES and returns a DSN whose connections use only that
// schema (via search_path), together with the schema's name. The schema is
// dropped, CASCADE, when tb ends.
//
// If REFSET_TEST_POSTGRES is not set, New skips tb, or fails it when CI=true.
// If it is set but the server cannot be reached, New always fails tb.
func New(tb testing.TB) (dsn, schema string) {
	tb.Helper()
	return NewPrefixed(tb, schemaPrefix)
}

// NewPrefixed is [New] with a schema whose name starts with prefix, for a fixture
// of users' tests (refsettest) whose schemas are told apart from refset's own.
func NewPrefixed(tb testing.TB, prefix string) (dsn, schema string) {
	tb.Helper()
	base := baseDSN(tb)
	schema = prefix + randomHex(6)
	// First, so a malformed URL is reported before anything is created.
	dsn, err := withSearchPath(base, schema)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	db := openAdmin(tb, base, EnvDSN)
	ctx, cancel := setupContext(tb)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+pq.QuoteIdentifier(schema)); err != nil {
		_ = db.Close()
		tb.Fatalf("pgtest: create schema %s: %v", schema, err)
	}

	tb.Cleanup(func() {
		defer db.Close()
		dropAtEnd(tb, db, schema, "DROP SCHEMA IF EXISTS "+pq.QuoteIdentifier(schema)+" CASCADE")
	})
	return dsn, schema
}

// setupContext is what a fixture sets up a test's schema with: tb's context, but
// not cancelled with it, since a test may call a fixture from a t.Cleanup
// (tb.Context() is cancelled before cleanups run); pingTimeout bounds it instead.
func setupContext(tb testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(tb.Context()), pingTimeout)
}

// baseDSN returns the server DSN from the environment (see [envDSN]).
func baseDSN(tb testing.TB) string {
	tb.Helper()
	return envDSN(tb, EnvDSN, "run make test (or set it to a lib/pq DSN of a server you can create schemas in)")
}

// envDSN returns the DSN in the environment variable env, skipping tb when there is
// none, or failing it under CI: a CI run that skips every database test would pass
// while testing nothing. hint says how to set it.
func envDSN(tb testing.TB, env, hint string) string {
	tb.Helper()
	if dsn := os.Getenv(env); dsn != "" {
		return dsn
	}
	GiveUp(tb, "pgtest: "+env+" is not set; "+hint)
	return ""
}

// GiveUp ends tb for want of a server or cluster it needs, saying msg: it skips
// tb, or fails it under CI (CI=true), where a skipped suite would pass while
// testing nothing.
func GiveUp(tb testing.TB, msg string) {
	tb.Helper()
	if isCI() {
		tb.Fatal(msg + " (CI=true, so this is a failure, not a skip)")
	}
	tb.Skip(msg)
}

// isCI reports whether we run under CI, which sets CI=true.
func isCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// withSearchPath returns dsn with search_path set to schema. lib/pq sends
// DSN keys it does not know itself to the server as run-time parameters,
// so every connection opened from the result starts with that search_path;
// a SET after connecting would apply to one pooled connection only.
func withSearchPath(dsn, schema string) (string, error) {
	return rewrite(dsn, EnvDSN, func(u *url.URL) {
		q := u.Query()
		q.Set("search_path", schema) // replaces one the base DSN may carry
		u.RawQuery = q.Encode()
	}, "search_path="+quote(schema))
}

// rewrite returns dsn, the DSN in the variable env, changed by inURL if it is a
// URL, or with the keys and values kv appended if it is in key=value form, where a
// later key overrides an earlier one.
func rewrite(dsn, env string, inURL func(*url.URL), kv string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " " + kv, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		// Do not echo the DSN: it may hold a password.
		return "", fmt.Errorf("%s is not a valid URL: %w", env, redact(err))
	}
	inURL(u)
	return u.String(), nil
}

// quote quotes v as a value of a key=value DSN, so the result stays valid whatever
// characters v holds.
func quote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// redact drops the URL (and any password in it) from a *url.Error.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// randomHex returns 2n random lowercase hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error since Go 1.24; it crashes
	// the program instead if the OS has no randomness to give.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openAdmin opens a pool of its own on dsn (the server itself, never PgBouncer),
// for a test's setup statements, failing tb if the server in the variable env does
// not answer: even outside CI, since the variable was set on purpose, a server that
// does not answer is a broken setup, not a reason to skip.
func openAdmin(tb testing.TB, dsn, env string) *sql.DB {
	tb.Helper()
	// sql.Open only validates its arguments; the ping below is the first real
	// contact with the server.
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		tb.Fatalf("pgtest: open %s: %v", env, err)
	}
	// One connection is all the admin work needs; keeping the pool at one avoids
	// eating into max_connections when many tests run in parallel.
	db.SetMaxOpenConns(1)
	ctx, cancel := setupContext(tb)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		tb.Fatalf("pgtest: cannot reach the server in %s: %v", env, err)
	}
	return db
}

// isDeadlock reports whether err is the server's deadlock_detected (40P01).
// dropRetrying runs drop, a DROP of what a test made, again while the server breaks a
// deadlock by aborting it. The drop locks every object it drops, in its own order,
// and a backend of the test still ending (a statement a closed pgx connection left
// running until its cancel arrives, through PgBouncer later still) may lock two of
// them in the other: a drop once that backend is gone goes through. It tries five
// times, waiting 100 ms, then 200, 300 and 400, and returns the last error.
func dropRetrying(ctx context.Context, db *sql.DB, drop string) error {
	_, err := db.ExecContext(ctx, drop)
	for attempt := 1; attempt < 5 && isDeadlock(err); attempt++ {
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		_, err = db.ExecContext(ctx, drop)
	}
	return err
}

func isDeadlock(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// Querier is what AnalyzeSchema runs on: an *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	Execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// AnalyzeSchema updates the planner's statistics of every table in q's current schema.
// A bare ANALYZE would go through every table of the shared server: other tests'
// schemas too, running beside this one, whose "no statistics yet" would then be wrong.
func AnalyzeSchema(tb testing.TB, q Querier) {
	tb.Helper()
	ctx := context.Background()
	var tables string
	err := q.QueryRowContext(ctx, `SELECT COALESCE(string_agg(quote_ident(tablename), ', '), '')
		FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables)
	if err == nil && tables != "" {
		_, err = q.ExecContext(ctx, "ANALYZE "+tables)
	}
	if err != nil {
		tb.Fatalf("pgtest: analyze the schema's tables: %v", err)
	}
}
