package refsettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/store/postgres"
)

// EnvPostgres names the environment variable holding the DSN (a URL or key=value
// connection string that lib/pq and pgx both read) of the server [Postgres] creates
// its schemas on. The role must be allowed to create schemas in that database.
const EnvPostgres = "REFSET_TEST_POSTGRES"

// SchemaPrefix starts the name of every schema [Postgres] creates, so leftovers of
// a test binary that was killed before its cleanups ran are easy to find and drop.
const SchemaPrefix = "refsettest_"

const (
	// connectTimeout bounds the first contact with the server: a DSN that does not
	// answer fails the test quickly instead of hanging the suite.
	connectTimeout = 10 * time.Second
	// dropTimeout bounds the drop at cleanup: one blocked by a connection the test
	// left open fails loudly instead of hanging until go test's own timeout.
	dropTimeout = 30 * time.Second
)

// Postgres creates a schema for tb alone on the server named by [EnvPostgres]
// ([PostgresDSN]), opens it with opts (through opts.Driver: lib/pq or pgx) and every
// connection's search_path set to that schema, so unqualified tables the test
// creates, refset's own included, land there. When tb ends the database is closed and
// the schema dropped with everything in it.
//
// Without the variable Postgres skips tb, or fails it when CI=true (see the package
// documentation). With it, a server that cannot be reached or refuses to create the
// schema fails tb.
func Postgres(tb testing.TB, opts postgres.Options) *postgres.DB {
	tb.Helper()
	dsn := PostgresDSN(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), connectTimeout)
	defer cancel()
	db, err := postgres.Open(ctx, dsn, opts)
	if err != nil {
		tb.Fatalf("refsettest: open the test's schema: %v", err)
	}
	// Registered after the drop, so it runs before it: cleanups run last first.
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("refsettest: close the Postgres database: %v", err)
		}
	})
	return db
}

// PostgresDSN creates a schema for tb alone on the server named by [EnvPostgres], as
// [Postgres] does, and returns the DSN of that schema (the server's, with the
// search_path set to it) instead of opening it, for a test that opens several pools
// on one database, as several processes of a program would, or passes the DSN to a
// process it starts. When tb ends the schema is dropped with everything in it:
// close what the test opened on it first, with a cleanup registered after this call
// (cleanups run last first), or the drop waits for it and fails tb.
//
// Without the variable PostgresDSN skips tb, or fails it when CI=true.
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	base := serverDSN(tb)
	schema := SchemaPrefix + randomHex(6)
	// First, so a malformed URL is reported here, without the password the drivers'
	// own errors would quote.
	dsn, err := withSearchPath(base, schema)
	if err != nil {
		tb.Fatalf("refsettest: %v", err)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), connectTimeout)
	defer cancel()

	// One connection does the schema's creation and drop; the test's own pools are
	// opened on the schema's DSN.
	admin, err := postgres.Open(ctx, base, postgres.Options{MaxConns: 1})
	if err != nil {
		tb.Fatalf("refsettest: cannot reach the server in %s: %v", EnvPostgres, err)
	}
	// The name is the prefix and hex digits: quoting cannot go wrong.
	if _, err := admin.Pool().ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		_ = admin.Close()
		tb.Fatalf("refsettest: create schema %s on the server in %s: %v", schema, EnvPostgres, err)
	}
	tb.Cleanup(func() {
		defer admin.Close()
		// Not tb.Context(): it has ended by the time cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if _, err := admin.Pool().ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			tb.Errorf("refsettest: drop schema %s (is a connection of the test still open?): %v", schema, err)
		}
	})
	return dsn
}

// serverDSN is the DSN in EnvPostgres; without one it skips tb, or fails it in CI.
func serverDSN(tb testing.TB) string {
	tb.Helper()
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		return dsn
	}
	giveUp(tb, "refsettest: "+EnvPostgres+" is not set; set it to the DSN of a PostgreSQL server where the role may create schemas")
	return ""
}

// giveUp ends tb for want of the server msg says is missing: it skips tb, or fails it
// when CI=true.
func giveUp(tb testing.TB, msg string) {
	tb.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		// A CI run that skips every database test would pass while testing nothing.
		tb.Fatal(msg + " (CI=true, so this is a failure, not a skip)")
	}
	tb.Skip(msg)
}

// withSearchPath returns dsn with the search_path run-time parameter set to schema
// alone. lib/pq and pgx both send a DSN key they do not know to the server as a
// run-time parameter, so every connection of the pool starts in the schema; a SET
// after connecting would hold for one pooled connection only.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			// Not the url.Error itself: it quotes the DSN, password and all.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return "", fmt.Errorf("%s is not a valid URL: %w", EnvPostgres, err)
		}
		q := u.Query()
		q.Set("search_path", schema) // replaces one the DSN may carry
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// key=value form: a later key overrides an earlier one. The schema's name is the
	// prefix and hex digits, so it needs no escaping inside the quotes.
	return dsn + " search_path='" + schema + "'", nil
}

// randomHex is 2n random lowercase hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return hex.EncodeToString(b)
}
