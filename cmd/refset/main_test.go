package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/require"
)

// object is the Go type of both the test's sets: the commands read their rows by
// SQL alone, and a store registers a set from the ID column.
type object struct {
	Key string `db:"id"`
}

func (o object) ID() string { return o.Key }

// backend is a database the command is run against, and the SQL times one hour from
// its clock, as the holds and queue tables store them.
type backend struct {
	testdb.Backend
	past, future string
}

// sqliteNow is store/sqlite's database clock, in Unix milliseconds, as its SQL writes it.
const sqliteNow = `CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`

func backends() []backend {
	// Through PgBouncer in transaction mode, which lends each transaction any
	// server connection: the tool must prepare nothing. lib/pq, the tool's default.
	pooled := testdb.PgBouncer
	pooled.Driver = postgres.DriverLibPQ
	all := []backend{{Backend: testdb.SQLite, past: sqliteNow + ` - 3600000`, future: sqliteNow + ` + 3600000`}}
	// With the standby, writes go to --db, status, why and check read --replica.
	for _, b := range []testdb.Backend{testdb.LibPQ, testdb.Pgx, pooled, testdb.Standby} {
		all = append(all, backend{Backend: b, past: `now() - interval '1 hour'`, future: `now() + interval '1 hour'`})
	}
	return all
}

// open makes a fresh database of b for the test to prepare, opened without its
// replica, and returns the flags that name it on the command line.
func (b backend) open(t *testing.T) (refset.Database, []string) {
	t.Helper()
	where := b.New(t)
	args := []string{"--db", where.At}
	if b.Driver == postgres.DriverPgx {
		args = append(args, "--driver", b.Driver)
	}
	if b.Unprepared {
		args = append(args, "--unprepared")
	}
	if where.StandbyAt != "" {
		args = append(args, "--replica", where.StandbyAt)
		where.StandbyAt = ""
	}
	return where.Open(t, testdb.Options{}), args
}

// eachBackend runs fn in a subtest per backend, on a fresh database of it that the
// flags dbArgs name on the command line (see open).
func eachBackend(t *testing.T, fn func(t *testing.T, b backend, db refset.Database, dbArgs []string)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			db, dbArgs := b.open(t)
			fn(t, b, db, dbArgs)
		})
	}
}

// prepare builds two sets as a program would (stores, then clean-up installed) and
// puts in them, by plain SQL, a known state:
//
//	blocks: g <- a <- b, b a chain head; h held by seven live holds; e by one expired
//	        hold; x unreferenced and overdue in the queue, b overdue too; y
//	        unreferenced and not queued (leaked); a queued an hour ahead.
//	tokens: t1 held by its owner; nothing queued.
func prepare(t *testing.T, b backend, db refset.Database) {
	t.Helper()
	ctx := t.Context()
	exec := func(tx refset.Tx, q string) {
		t.Helper()
		_, err := tx.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		exec(tx, `CREATE TABLE blocks (id TEXT PRIMARY KEY, prev TEXT REFERENCES blocks (id))`)
		exec(tx, `CREATE INDEX blocks_prev ON blocks (prev)`)
		exec(tx, `CREATE TABLE chain_heads (block_id TEXT PRIMARY KEY REFERENCES blocks (id))`)
		exec(tx, `CREATE TABLE tokens (id TEXT PRIMARY KEY)`)
		return nil
	}))
	_, err := store.NewStore[object, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	_, err = store.NewStore[object, string](ctx, db, store.Config{Table: "tokens"})
	require.NoError(t, err)
	for _, table := range []string{"blocks", "tokens"} {
		_, err := cleanup.Install(ctx, db, cleanup.Config{Table: table})
		require.NoError(t, err)
	}
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		exec(tx, `INSERT INTO blocks (id, prev) VALUES ('g', NULL), ('a', 'g'), ('b', 'a'), ('x', NULL), ('y', NULL), ('h', NULL), ('e', NULL)`)
		exec(tx, `INSERT INTO chain_heads (block_id) VALUES ('b')`)
		exec(tx, `INSERT INTO blocks_holds (holder, object_id) VALUES ('alice', 'h'), ('h1', 'h'), ('h2', 'h'), ('h3', 'h'), ('h4', 'h'), ('h5', 'h'), ('h6', 'h')`)
		exec(tx, `INSERT INTO blocks_holds (holder, object_id, expires_at) VALUES ('bob', 'e', `+b.past+`)`)
		exec(tx, `INSERT INTO tokens (id) VALUES ('t1')`)
		exec(tx, `INSERT INTO tokens_holds (holder, object_id) VALUES ('owner', 't1')`)
		exec(tx, `DELETE FROM blocks_review`)
		exec(tx, `DELETE FROM tokens_review`)
		exec(tx, `INSERT INTO blocks_review (object_id, review_after) VALUES ('x', `+b.past+`), ('b', `+b.past+`), ('a', `+b.future+`)`)
		return nil
	}))
}

// unqualified drops the schema Postgres names tables with.
func unqualified(table string) string { return table[strings.LastIndex(table, ".")+1:] }

// buildCLI builds the command into a temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "refset")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// runCLI runs the binary and returns its stdout, stderr and exit code.
func runCLI(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIWith(t, nil, bin, args...)
}

// runCLIWith is runCLI, with setup (if not nil) making the process ready before it
// starts.
func runCLIWith(t *testing.T, setup func(*exec.Cmd), bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	if setup != nil {
		setup(cmd)
	}
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return o.String(), e.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return o.String(), e.String(), 0
}

type cliCase struct {
	name   string
	args   []string // before the database's flags
	code   int
	stdout []string // substrings of stdout
	stderr []string // substrings of stderr
	// json, if set, decodes stdout and checks it.
	json func(t *testing.T, out []byte)
}

// runCases runs each case's command line with bin, followed by dbArgs (the
// database's flags), as a subtest, and checks its exit code and what it printed.
func runCases(t *testing.T, bin string, cases []cliCase, dbArgs ...string) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, bin, append(c.args, dbArgs...)...)
			require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			for _, s := range c.stdout {
				require.Contains(t, stdout, s)
			}
			for _, s := range c.stderr {
				require.Contains(t, stderr, s)
			}
			if c.json != nil {
				c.json(t, []byte(stdout))
			}
		})
	}
}

func TestCommands(t *testing.T) {
	bin := buildCLI(t)
	cases := []cliCase{
		{
			name: "status text", args: []string{"status"},
			stdout: []string{"SET", "OVERDUE", "blocks", "tokens", "schema versions", "core", "set:blocks", "ago)"},
		},
		{
			name: "status json", args: []string{"status", "--json"},
			json: func(t *testing.T, out []byte) {
				var s statusJSON
				require.NoError(t, json.Unmarshal(out, &s))
				require.Len(t, s.Sets, 2)
				blocks, tokens := s.Sets[0], s.Sets[1]
				require.NotNil(t, blocks.OldestDue)
				lag := s.Now.Sub(*blocks.OldestDue)
				require.InDelta(t, time.Hour.Seconds(), lag.Seconds(), 60, "the oldest due entry is an hour old")
				blocks.OldestDue = nil
				require.Equal(t, setJSON{Table: "blocks", Objects: 7, HoldsLive: 7, HoldsExpired: 1, Queued: 3, Overdue: 2}, blocks)
				require.Equal(t, setJSON{Table: "tokens", Objects: 1, HoldsLive: 1}, tokens)
				require.Equal(t, []versionJSON{{"core", 2}, {"set:blocks", 3}, {"set:tokens", 3}}, s.Versions)
			},
		},
		{
			// Past --cap, the counts are the database's estimate or, without
			// statistics, a lower bound; the entries due are counted whatever it.
			name: "status json past the cap", args: []string{"status", "--json", "--cap", "2"},
			json: func(t *testing.T, out []byte) {
				var s statusJSON
				require.NoError(t, json.Unmarshal(out, &s))
				blocks := s.Sets[0]
				for _, field := range []string{"objects", "holds_live", "queued"} {
					require.Contains(t, []string{"estimate", "more_than"}, blocks.Inexact[field], field)
				}
				require.NotContains(t, blocks.Inexact, "overdue")
				require.NotContains(t, blocks.Inexact, "holds_expired")
				require.Equal(t, int64(2), blocks.Overdue)
			},
		},
		{
			name: "status text past the cap", args: []string{"status", "--cap", "2"},
			stdout: []string{"more than N rows", "at most 2 rows of a table (--cap); --exact counts every row"},
		},
		{
			name: "status --exact", args: []string{"status", "--json", "--exact", "--cap", "2"},
			json: func(t *testing.T, out []byte) {
				var s statusJSON
				require.NoError(t, json.Unmarshal(out, &s))
				s.Sets[0].OldestDue = nil
				require.Equal(t, setJSON{Table: "blocks", Objects: 7, HoldsLive: 7, HoldsExpired: 1, Queued: 3, Overdue: 2}, s.Sets[0])
			},
		},
		{
			name: "status refuses a cap of 0", args: []string{"status", "--cap", "0"},
			code: exitError, stderr: []string{"--cap must be positive"},
		},
		{
			name: "why lists every hold, past Why's limit", args: []string{"why", "h", "--table", "blocks"},
			stdout: []string{"blocks_holds.object_id", "'alice'", "'h6'"},
			json:   nil,
		},
		{
			name: "why json", args: []string{"why", "--json", "--table", "blocks", "h"},
			json: func(t *testing.T, out []byte) {
				var w whyJSON
				require.NoError(t, json.Unmarshal(out, &w))
				require.Equal(t, stored("h"), w.ID)
				require.Len(t, w.Holders, 7)
				for _, h := range w.Holders {
					require.Equal(t, "blocks_holds", unqualified(h.Table))
					require.Equal(t, "object_id", h.Column)
				}
			},
		},
		{
			name: "why of a predecessor names its successor", args: []string{"why", "--json", "g", "--table", "blocks"},
			json: func(t *testing.T, out []byte) {
				var w whyJSON
				require.NoError(t, json.Unmarshal(out, &w))
				require.Len(t, w.Holders, 1)
				w.Holders[0].Table = unqualified(w.Holders[0].Table)
				require.Equal(t, []holderJSON{{Table: "blocks", Column: "prev", Key: "id='a'"}}, w.Holders)
			},
		},
		{
			name: "why of queued garbage", args: []string{"why", "x", "--table", "blocks"},
			stdout: []string{"x: nothing references it; it is in the clean-up queue, and clean-up deletes it once it is due"},
		},
		{
			name: "why of queued garbage json", args: []string{"why", "--json", "x", "--table", "blocks"},
			json: whyIs(0, true, false),
		},
		{
			// y is in no queue: clean-up never finds it.
			name: "why of a leaked object", args: []string{"why", "y", "--table", "blocks"},
			stdout: []string{"y: nothing references it, and it is not in the clean-up queue: it leaked, and clean-up never deletes it; " +
				"refset sweep --table blocks queues and deletes every such object"},
		},
		{
			name: "why of a leaked object json", args: []string{"why", "--json", "y", "--table", "blocks"},
			json: whyIs(0, false, true),
		},
		{
			// b is referenced, and queued: clean-up will review it, and keep it.
			name: "why of a held object that is queued", args: []string{"why", "--json", "b", "--table", "blocks"},
			json: whyIs(1, true, false),
		},
		{
			name: "a table named in another case", args: []string{"check", "--table", "BLOCKS"},
			code: exitError, stderr: []string{"no set on table BLOCKS; the set on blocks differs only by case"},
		},
		{
			name: "a table named in another case, for why", args: []string{"why", "h", "--table", "Blocks"},
			code: exitError, stderr: []string{"no set on table Blocks; the set on blocks differs only by case"},
		},
		{
			name: "why of a missing object", args: []string{"why", "nope", "--table", "blocks"},
			code: exitError, stderr: []string{"not found"},
		},
		{
			name: "check finds the leaked object", args: []string{"check", "--table", "blocks"},
			code: exitFindings, stdout: []string{"blocks: 1 leaked, 0 dangling", "leaked 'y'"},
		},
		{
			name: "check json", args: []string{"check", "--json", "--table", "blocks"},
			code: exitFindings,
			json: func(t *testing.T, out []byte) {
				var c checkJSON
				require.NoError(t, json.Unmarshal(out, &c))
				require.Equal(t, checkJSON{Table: "blocks", Leaked: 1, Samples: []stored{"leaked 'y'"}}, c)
			},
		},
		{
			name: "check of a healthy set", args: []string{"check", "--json", "--table", "tokens"},
			json: func(t *testing.T, out []byte) {
				var c checkJSON
				require.NoError(t, json.Unmarshal(out, &c))
				require.Equal(t, checkJSON{Table: "tokens", OK: true, Samples: []stored{}}, c)
			},
		},
		{
			name: "check of an unknown set", args: []string{"check", "--table", "nosuch"},
			code: exitError, stderr: []string{"no set on table nosuch"},
		},
		{
			name: "check without --table", args: []string{"check"},
			code: exitError, stderr: []string{"--table is required"},
		},
		{
			name: "why without an ID", args: []string{"why", "--table", "blocks"},
			code: exitError, stderr: []string{"want 1 argument(s)", "Usage: refset why"},
		},
		{
			name: "holds rm refuses without --expired", args: []string{"holds", "rm", "--table", "blocks"},
			code: exitError, stderr: []string{"give --expired"},
		},
		{
			name: "holds ls text", args: []string{"holds", "ls", "--table", "blocks"},
			stdout: []string{"OBJECT", "alice", "(expired)", "8 holds in blocks_holds"},
		},
		{
			name: "holds ls json: every hold, live ones too", args: []string{"holds", "ls", "--json", "--table", "blocks"},
			json: func(t *testing.T, out []byte) {
				var h holdsJSON
				require.NoError(t, json.Unmarshal(out, &h))
				require.Len(t, h.Holds, 8, "holds rm without --expired must have deleted nothing")
				require.Equal(t, "blocks_holds", unqualified(h.Table))
				for _, hold := range h.Holds {
					require.Equal(t, hold.Holder == "bob", hold.Expired, hold.Holder)
					require.Equal(t, hold.Holder == "bob", hold.ExpiresAt != nil, hold.Holder)
					require.InDelta(t, 0, h.Now.Sub(hold.CreatedAt).Seconds(), 600, "created by the database's clock, just now")
				}
			},
		},
		{
			name: "holds ls --expired", args: []string{"holds", "ls", "--expired", "--json", "--table", "blocks"},
			json: func(t *testing.T, out []byte) {
				var h holdsJSON
				require.NoError(t, json.Unmarshal(out, &h))
				require.Len(t, h.Holds, 1)
				bob := h.Holds[0]
				require.Equal(t, []stored{"bob", "e"}, []stored{bob.Holder, bob.ObjectID})
				require.True(t, bob.Expired)
				require.InDelta(t, time.Hour.Seconds(), h.Now.Sub(*bob.ExpiresAt).Seconds(), 60, "expired an hour ago by the database's clock")
			},
		},
		{
			name: "holds ls --holder", args: []string{"holds", "ls", "--holder", "alice", "--json", "--table", "blocks"},
			json: func(t *testing.T, out []byte) {
				var h holdsJSON
				require.NoError(t, json.Unmarshal(out, &h))
				require.Len(t, h.Holds, 1)
				require.Equal(t, []stored{"alice", "h"}, []stored{h.Holds[0].Holder, h.Holds[0].ObjectID})
				require.Nil(t, h.Holds[0].ExpiresAt)
			},
		},
		{
			name: "holds ls of an unknown set", args: []string{"holds", "ls", "--table", "nosuch"},
			code: exitError, stderr: []string{"no set on table nosuch"},
		},
		{
			name: "migrate status of an up-to-date database", args: []string{"migrate", "status", "--json"},
			json: func(t *testing.T, out []byte) {
				var m migrateStatusJSON
				require.NoError(t, json.Unmarshal(out, &m))
				require.Equal(t, migrateStatusJSON{Components: []componentJSON{
					{Component: "core", Recorded: 2, Available: 2},
					{Component: "set:blocks", Recorded: 3, Available: 3},
					{Component: "set:tokens", Recorded: 3, Available: 3},
				}}, m)
			},
		},
		{
			name: "migrate sql with nothing pending", args: []string{"migrate", "sql"},
			stdout: []string{"-- refset schema: nothing pending."},
		},
		{
			name: "migrate down without --component", args: []string{"migrate", "down", "--target", "0"},
			code: exitError, stderr: []string{"--component and --target"},
		},
	}
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		prepare(t, b, db)
		runCases(t, bin, cases, dbArgs...)
		// Last, since it changes the set: the overdue garbage and the object of
		// the expired hold go; the leaked object, which no queue entry leads
		// to, stays.
		t.Run("collect", func(t *testing.T) {
			stdout, stderr, code := runCLI(t, bin, append([]string{"collect", "--until-empty", "--grace", "1h", "--table", "blocks"}, dbArgs...)...)
			require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			require.Contains(t, stdout, "pass 1: reviewed")
			require.Regexp(t, `PASSES +REVIEWED +DELETED +POSTPONED +REFUSED +HOLDS EXPIRED +TIME\n1 +3 +2 +0 +0 +1 `, stdout, "the summary table")
			require.NotContains(t, stdout, "\r", "piped output redraws no progress line")
			for id, want := range map[string]int{"x": exitError, "e": exitError, "y": exitOK, "g": exitOK} {
				_, stderr, code := runCLI(t, bin, append([]string{"why", id, "--table", "blocks"}, dbArgs...)...)
				require.Equal(t, want, code, "why %s: %s", id, stderr)
			}
		})
	})
}

// TestUsage runs what needs no database: help, and the mistakes caught before one is
// opened.
func TestUsage(t *testing.T) {
	bin := buildCLI(t)
	missing := filepath.Join(t.TempDir(), "missing.db")
	cases := []cliCase{
		{name: "no command", code: exitError, stderr: []string{"Usage: refset <command>"}},
		{name: "help", args: []string{"-h"}, stdout: []string{"Usage: refset <command>", "Exit codes"}},
		{name: "unknown command", args: []string{"frob"}, code: exitError, stderr: []string{`unknown command "frob"`}},
		{name: "status -h", args: []string{"status", "-h"}, stdout: []string{"Usage: refset status", "-db", "-json"}},
		{name: "why -h", args: []string{"why", "-h"}, stdout: []string{"Usage: refset why [flags] ID", "-table"}},
		{name: "check -h", args: []string{"check", "-h"}, stdout: []string{"Usage: refset check", "-table"}},
		{name: "collect -h", args: []string{"collect", "-h"}, stdout: []string{"Usage: refset collect", "-until-empty", "-grace"}},
		{name: "sweep -h", args: []string{"sweep", "-h"}, stdout: []string{"Usage: refset sweep", "-table", "-grace"}},
		{name: "migrate status -h", args: []string{"migrate", "status", "-h"}, stdout: []string{"Usage: refset migrate status", "-table", "-json"}},
		{name: "migrate up -h", args: []string{"migrate", "up", "-h"}, stdout: []string{"Usage: refset migrate up", "-table"}},
		{name: "migrate sql -h", args: []string{"migrate", "sql", "-h"}, stdout: []string{"Usage: refset migrate sql", "-table"}},
		{name: "migrate down -h", args: []string{"migrate", "down", "-h"}, stdout: []string{"Usage: refset migrate down", "-component", "-target"}},
		{name: "holds ls -h", args: []string{"holds", "ls", "-h"}, stdout: []string{"Usage: refset holds ls", "-expired", "-holder", "-json"}},
		{name: "holds rm -h", args: []string{"holds", "rm", "-h"}, stdout: []string{"Usage: refset holds rm", "-expired"}},
		{name: "migrate -h", args: []string{"migrate", "-h"}, stdout: []string{"Usage: refset migrate <command> [flags]", "migrate status ", "migrate down ",
			"refset migrate <command> -h shows a command's flags"}},
		{name: "migrate --help", args: []string{"migrate", "--help"}, stdout: []string{"Usage: refset migrate <command> [flags]"}},
		{name: "holds --help", args: []string{"holds", "--help"}, stdout: []string{"Usage: refset holds <command> [flags]", "holds ls ", "holds rm "}},
		{name: "holds -h", args: []string{"holds", "-h"}, stdout: []string{"Usage: refset holds <command> [flags]"}},
		{name: "migrate without an action", args: []string{"migrate"}, code: exitError, stderr: []string{"refset migrate: want one of status, up, sql, down"}},
		{name: "holds with an unknown action", args: []string{"holds", "frob"}, code: exitError, stderr: []string{"refset holds: want one of ls, rm"}},
		{name: "unknown flag", args: []string{"status", "--frob"}, code: exitError, stderr: []string{"flag provided but not defined: -frob", "Usage: refset status"}},
		{name: "no --db", args: []string{"status"}, code: exitError, stderr: []string{"--db is required"}},
		{name: "missing SQLite file", args: []string{"status", "--db", missing}, code: exitError, stderr: []string{"no such file"}},
		{name: "--driver with a SQLite path", args: []string{"status", "--db", missing, "--driver", "pgx"}, code: exitError, stderr: []string{"--driver is for PostgreSQL"}},
		{name: "--replica with a SQLite path", args: []string{"status", "--db", missing, "--replica", "postgres://127.0.0.1:1/x"}, code: exitError, stderr: []string{"--replica is for PostgreSQL"}},
		{name: "--unprepared with a SQLite path", args: []string{"status", "--db", missing, "--unprepared"}, code: exitError, stderr: []string{"--unprepared is for PostgreSQL"}},
		{name: "unknown Postgres driver", args: []string{"status", "--db", "postgres://127.0.0.1:1/x", "--driver", "odbc"}, code: exitError, stderr: []string{`driver "odbc"`}},
		{name: "unreachable Postgres", args: []string{"status", "--db", "postgres://127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, code: exitError, stderr: []string{"database unavailable"}},
		// A flag out of range is refused before the database is opened: on a file that
		// is not there, the flag is what the command says is wrong.
		{name: "ui --sample-every below a second", args: []string{"ui", "--sample-every", "500ms", "--db", missing}, code: exitError, stderr: []string{"--sample-every 500ms is below 1s", "Usage: refset ui"}},
		{name: "ui --sample-every 0", args: []string{"ui", "--sample-every", "0", "--db", missing}, code: exitError, stderr: []string{"--sample-every 0s is below 1s"}},
		{name: "collect --interval 0", args: []string{"collect", "--interval", "0", "--table", "t", "--db", missing}, code: exitError, stderr: []string{"--interval must be positive", "Usage: refset collect"}},
		{name: "collect --grace 0", args: []string{"collect", "--grace", "0", "--table", "t", "--db", missing}, code: exitError, stderr: []string{"--grace must be positive"}},
		{name: "sweep --grace negative", args: []string{"sweep", "--grace", "-1s", "--table", "t", "--db", missing}, code: exitError, stderr: []string{"--grace must be positive"}},
		{name: "migrate down --target negative", args: []string{"migrate", "down", "--component", "core", "--target", "-1", "--db", missing}, code: exitError, stderr: []string{"--target (0 or more)"}},
		{name: "migrate down without --component", args: []string{"migrate", "down", "--target", "0", "--db", missing}, code: exitError, stderr: []string{"--component and --target"}},
	}
	runCases(t, bin, cases)
	require.NoFileExists(t, missing, "refset must not create a SQLite file it was only asked to read")
}

// TestCommandsWithoutRefset: on a database that no store was built on (the
// program's own table alone), every command but migrate's fails (exit 2) with one
// message, which says what migrate up does; migrate status describes what it would
// create.
func TestCommandsWithoutRefset(t *testing.T) {
	bin := buildCLI(t)
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE blocks (id TEXT PRIMARY KEY)`)
			return err
		}))
		for _, args := range [][]string{
			{"status"}, {"why", "x", "--table", "blocks"}, {"check", "--table", "blocks"}, {"collect", "--table", "blocks"},
			{"sweep", "--table", "blocks"}, {"holds", "ls", "--table", "blocks"}, {"holds", "rm", "--expired", "--table", "blocks"},
			{"ui", "--addr", "127.0.0.1:0"},
		} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				_, stderr, code := runCLI(t, bin, append(args, dbArgs...)...)
				require.Equal(t, exitError, code, stderr)
				require.Equal(t, "refset "+args[0], stderr[:len("refset "+args[0])])
				require.Contains(t, stderr, ": not found: no refset tables (refset_sets) in this database: no store was built on it "+
					"(refset migrate up creates them)\n")
			})
		}
		require.Contains(t, cli(t, bin, dbArgs, exitOK, "migrate", "status", "--table", "blocks"), "pending: core 0 -> 2, set:blocks 0 -> 3")
	})
}

// cli runs the binary on one backend's database and fails the test unless it exits
// with code; it returns stdout.
func cli(t *testing.T, bin string, dbArgs []string, code int, args ...string) string {
	t.Helper()
	stdout, stderr, got := runCLI(t, bin, append(args, dbArgs...)...)
	require.Equal(t, code, got, "refset %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout, stderr)
	return stdout
}

func migrateStatus(t *testing.T, bin string, dbArgs []string, args ...string) migrateStatusJSON {
	t.Helper()
	var m migrateStatusJSON
	require.NoError(t, json.Unmarshal([]byte(cli(t, bin, dbArgs, exitOK, append([]string{"migrate", "status", "--json"}, args...)...)), &m))
	return m
}

// TestMigrate takes a database with the program's tables and none of refset's
// through what a DBA does: status, the script (which changes nothing), the script run
// by hand, then down and up again.
func TestMigrate(t *testing.T) {
	bin := buildCLI(t)
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		ctx := t.Context()
		d, err := refsetdriver.Of(db)
		require.NoError(t, err)
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE blocks (id TEXT PRIMARY KEY, prev TEXT REFERENCES blocks (id));
				CREATE TABLE tokens (id BIGINT PRIMARY KEY)`)
			return err
		}))
		sets := []string{"--table", "blocks", "--table", "tokens"}
		refsetTables := func() []string {
			t.Helper()
			var found []string
			for _, name := range []string{"refset_schema_version", "refset_sets", "blocks_holds", "blocks_review", "tokens_holds", "tokens_review"} {
				ok, err := d.SchemaSQL().TableExists(ctx, db.Reader(), sqlident.Ident{Name: name})
				require.NoError(t, err)
				if ok {
					found = append(found, name)
				}
			}
			return found
		}

		require.Equal(t, migrateStatusJSON{Components: []componentJSON{
			{Component: "core", Available: 2, Pending: true},
			{Component: "set:blocks", Available: 3, Pending: true, Register: true},
			{Component: "set:tokens", Available: 3, Pending: true, Register: true},
		}, Pending: "core 0 -> 2, set:blocks 0 -> 3, set:tokens 0 -> 3"}, migrateStatus(t, bin, dbArgs, sets...))
		require.Contains(t, cli(t, bin, dbArgs, exitOK, append([]string{"migrate", "status"}, sets...)...), "pending: core 0 -> 2")

		script := cli(t, bin, dbArgs, exitOK, append([]string{"migrate", "sql"}, sets...)...)
		require.Contains(t, script, "CREATE TABLE IF NOT EXISTS")
		require.Empty(t, refsetTables(), "migrate sql must change nothing")

		// The DBA runs the script in one transaction.
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, script)
			return err
		}))
		require.Len(t, refsetTables(), 6)
		require.Equal(t, migrateStatusJSON{Components: []componentJSON{
			{Component: "core", Recorded: 2, Available: 2},
			{Component: "set:blocks", Recorded: 3, Available: 3},
			{Component: "set:tokens", Recorded: 3, Available: 3},
		}}, migrateStatus(t, bin, dbArgs), "every set the script registered, nothing pending")
		require.Equal(t, "nothing to do: every component is up to date\n", cli(t, bin, dbArgs, exitOK, "migrate", "up"))
		require.Equal(t, "-- refset schema: nothing pending.\n", cli(t, bin, dbArgs, exitOK, "migrate", "sql"))

		// Down and up again.
		require.Equal(t, "applied set:tokens 3 -> 0\n", cli(t, bin, dbArgs, exitOK, "migrate", "down", "--component", "set:tokens", "--target", "0"))
		require.Equal(t, []string{"refset_schema_version", "refset_sets", "blocks_holds", "blocks_review"}, refsetTables())
		require.Len(t, migrateStatus(t, bin, dbArgs).Components, 2, "tokens is no set any more")
		require.Equal(t, "applied set:blocks 3 -> 1\n", cli(t, bin, dbArgs, exitOK, "migrate", "down", "--component", "set:blocks", "--target", "1"))
		require.Equal(t, componentJSON{Component: "set:blocks", Recorded: 1, Available: 3, Pending: true},
			migrateStatus(t, bin, dbArgs).Components[1])
		out := cli(t, bin, dbArgs, exitOK, append([]string{"migrate", "up"}, sets...)...)
		require.Contains(t, out, "applied set:blocks 0 -> 3", "its queue was gone, so its migrations ran again")
		require.Contains(t, out, "applied set:tokens 0 -> 3")
		require.Len(t, refsetTables(), 6)
		require.Empty(t, migrateStatus(t, bin, dbArgs, sets...).Pending)

		// Mistakes change nothing.
		_, stderr, code := runCLI(t, bin, append([]string{"migrate", "down", "--component", "set:blocks", "--target", "5"}, dbArgs...)...)
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "a down migration only goes down")
		_, stderr, code = runCLI(t, bin, append([]string{"migrate", "up", "--table", "nosuch"}, dbArgs...)...)
		require.Equal(t, exitError, code)
		require.Contains(t, stderr, "no table nosuch")
		require.Len(t, refsetTables(), 6)
	})
}

// TestHoldsRemoveAndSweep changes prepare's state: holds rm deletes the expired hold
// only, and sweep collects the leaked object check finds.
func TestHoldsRemoveAndSweep(t *testing.T) {
	bin := buildCLI(t)
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		prepare(t, b, db)
		ls := func(args ...string) []holdJSON {
			t.Helper()
			var h holdsJSON
			require.NoError(t, json.Unmarshal([]byte(cli(t, bin, dbArgs, exitOK, append([]string{"holds", "ls", "--json", "--table", "blocks"}, args...)...)), &h))
			return h.Holds
		}
		require.Equal(t, "deleted 0 expired holds from blocks_holds\n",
			unqualifiedLine(cli(t, bin, dbArgs, exitOK, "holds", "rm", "--expired", "--holder", "alice", "--table", "blocks")))
		require.Equal(t, "deleted 1 expired holds from blocks_holds\n",
			unqualifiedLine(cli(t, bin, dbArgs, exitOK, "holds", "rm", "--expired", "--table", "blocks")))
		require.Empty(t, ls("--expired"))
		require.Len(t, ls(), 7, "live holds stay")

		cli(t, bin, dbArgs, exitFindings, "check", "--table", "blocks")
		out := cli(t, bin, dbArgs, exitOK, "sweep", "--grace", "1h", "--table", "blocks")
		// x (queued already), y (leaked) and e (whose hold rm removed) are
		// unreachable; all three go.
		require.Contains(t, out, "queued 3 unreachable objects")
		require.Regexp(t, `PASSES +REVIEWED +DELETED +POSTPONED +REFUSED +HOLDS EXPIRED +TIME\n1 +\d+ +3 `, out, "the summary table")
		cli(t, bin, dbArgs, exitOK, "check", "--table", "blocks")
		for id, want := range map[string]int{"x": exitError, "y": exitError, "e": exitError, "h": exitOK, "g": exitOK} {
			cli(t, bin, dbArgs, want, "why", id, "--table", "blocks")
		}
	})
}

// unqualifiedLine drops the schema Postgres names the holds table with in a line.
func unqualifiedLine(s string) string {
	from, table, ok := strings.Cut(strings.TrimSuffix(s, "\n"), " from ")
	if !ok {
		return s
	}
	return from + " from " + unqualified(table) + "\n"
}

func TestProgressBar(t *testing.T) {
	for _, tc := range []struct {
		worked, total int64
		want          string
	}{
		{0, 10, "[..............................] 0/10 due entries reviewed"},
		{5, 10, "[###############...............] 5/10 due entries reviewed"},
		{10, 10, "[##############################] 10/10 due entries reviewed"},
		{12, 10, "[##############################] 10/10 due entries reviewed"},
		{-3, 10, "[..............................] 0/10 due entries reviewed"},
	} {
		require.Equal(t, tc.want, progressBar(tc.worked, tc.total))
	}
}

// --unprepared reaches the store: behind a pooler in transaction mode a prepared
// statement may run on a server connection that never saw it, which one process's
// few sequential statements rarely show (the pgbouncer backend of TestCommands
// passes either way), so the option itself is checked.
func TestUnpreparedFlagReachesTheStore(t *testing.T) {
	dsn := testdb.LibPQ.New(t).At
	for _, unprepared := range []bool{false, true} {
		db, err := open(t.Context(), connection{dsn: dsn, unprepared: unprepared})
		require.NoError(t, err)
		pg, ok := db.(*postgres.DB)
		require.True(t, ok, "a Postgres DSN opens a *postgres.DB, not %T", db)
		require.Equal(t, unprepared, pg.Driver().Unprepared())
		require.NoError(t, db.Close())
	}
}

// TestInstallKeepsTheProgramsGrace: collect and sweep install clean-up's triggers
// again, with the grace period the set's program installed (2s here) unless --grace
// says otherwise; a new object is then due that long after it was added.
func TestInstallKeepsTheProgramsGrace(t *testing.T) {
	bin := buildCLI(t)
	cases := []struct {
		name string
		args []string
		want time.Duration
	}{
		{name: "collect", args: []string{"collect"}, want: 2 * time.Second},
		{name: "collect until empty", args: []string{"collect", "--until-empty"}, want: 2 * time.Second},
		{name: "sweep", args: []string{"sweep"}, want: 2 * time.Second},
		{name: "collect with --grace", args: []string{"collect", "--grace", "1h"}, want: time.Hour},
		{name: "sweep with --grace", args: []string{"sweep", "--grace", "1h"}, want: time.Hour},
	}
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		ctx := t.Context()
		exec := func(q string, args ...any) {
			t.Helper()
			require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, db.Driver().Rebind(q), args...)
				return err
			}), q)
		}
		exec(`CREATE TABLE notes (id TEXT PRIMARY KEY)`)
		_, err := store.NewStore[object, string](ctx, db, store.Config{Table: "notes"})
		require.NoError(t, err)
		// How long until a queued object is due, by the database's clock.
		until := `SELECT review_after - ` + sqliteNow + ` FROM notes_review WHERE object_id = ?`
		if b.Postgres {
			until = `SELECT (EXTRACT(EPOCH FROM review_after - now()) * 1000)::bigint FROM notes_review WHERE object_id = $1`
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes", Grace: 2 * time.Second})
				require.NoError(t, err)
				cli(t, bin, dbArgs, exitOK, append(tc.args, "--table", "notes")...)

				id := fmt.Sprintf("n%d", i)
				exec(`INSERT INTO notes (id) VALUES (?)`, id)
				var ms int64
				require.NoError(t, db.Driver().Pool().QueryRowContext(ctx, until, id).Scan(&ms))
				left := time.Duration(ms) * time.Millisecond
				require.LessOrEqual(t, left, tc.want, "a new object's grace period after refset %s", strings.Join(tc.args, " "))
				require.Greater(t, left, tc.want-time.Second, "a new object's grace period after refset %s", strings.Join(tc.args, " "))

				cfg, err := cleanup.Installed(ctx, db, "notes")
				require.NoError(t, err)
				require.Equal(t, cleanup.Config{Table: "notes", Grace: tc.want}, cfg)
			})
		}
	})
}

// TestQualifiedTables: every --table takes the set's table with its schema or
// without, whichever way its store registered it (Postgres), and SQLite's main.
func TestQualifiedTables(t *testing.T) {
	bin := buildCLI(t)
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		prepare(t, b, db)
		ctx := t.Context()
		schema := "main"
		if b.Postgres {
			require.NoError(t, db.Driver().Pool().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema))
			// A set its store registered qualified, named bare below.
			require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `CREATE TABLE `+schema+`.parts (id TEXT PRIMARY KEY)`)
				return err
			}))
			_, err := store.NewStore[object, string](ctx, db, store.Config{Table: schema + ".parts"})
			require.NoError(t, err)
		}
		blocks := schema + ".blocks"
		cases := []struct {
			name     string
			args     []string
			postgres bool // a case of the set registered qualified
			code     int
			stdout   []string
		}{
			{name: "why", args: []string{"why", "h", "--table", blocks}, stdout: []string{"'alice'", "'h6'"}},
			{name: "check", args: []string{"check", "--table", blocks}, code: exitFindings, stdout: []string{"blocks: 1 leaked"}},
			{name: "holds ls", args: []string{"holds", "ls", "--table", blocks}, stdout: []string{"alice"}},
			{name: "migrate status", args: []string{"migrate", "status", "--table", blocks}, stdout: []string{"set:blocks"}},
			{name: "collect", args: []string{"collect", "--table", blocks}, stdout: []string{"pass 1: reviewed"}},
			{name: "sweep", args: []string{"sweep", "--table", blocks}, stdout: []string{"queued"}},
			{name: "bare name of a qualified set", args: []string{"check", "--table", "parts"}, postgres: true, stdout: []string{schema + ".parts: 0 leaked"}},
			{name: "qualified name of a qualified set", args: []string{"check", "--table", schema + ".parts"}, postgres: true, stdout: []string{schema + ".parts: 0 leaked"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.postgres && !b.Postgres {
					t.Skip("SQLite's sets are in main, never qualified")
				}
				out := cli(t, bin, dbArgs, tc.code, tc.args...)
				for _, s := range tc.stdout {
					require.Contains(t, out, s)
				}
				require.NotContains(t, out, "set:"+blocks, "no second registration of blocks")
			})
		}
		// migrate did not register blocks again under its qualified name.
		sets, err := db.Driver().SchemaSQL().SetTables(ctx, db.Driver().Pool())
		require.NoError(t, err)
		require.NotContains(t, sets, blocks)
	})
}

// TestSQLiteFileURLs: --db takes a SQLite database in every form store.Open reads, a
// path or a file: URL (relative or absolute, with a localhost authority, the path
// percent-encoded), and refuses what store.Open refuses, saying why; a file: URL of a
// missing file is refused without creating it, as a missing path is.
func TestSQLiteFileURLs(t *testing.T) {
	bin := buildCLI(t)
	dir := filepath.Join(t.TempDir(), "a dir")
	path := filepath.Join(dir, "ledger.db")
	escaped := (&url.URL{Path: path}).EscapedPath()
	require.NoError(t, os.Mkdir(dir, 0o755))
	db, err := store.Open(t.Context(), "file:"+escaped, sqlite.Options{})
	require.NoError(t, err, "store.Open creates the file")
	require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE blocks (id TEXT PRIMARY KEY)`)
		return err
	}))
	_, err = store.NewStore[object, string](t.Context(), db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	missing := filepath.Join(dir, "missing.db")
	cases := []cliCase{
		{name: "path", args: []string{"status", "--db", path}, stdout: []string{"blocks"}},
		{name: "file: URL", args: []string{"status", "--db", "file:" + escaped}, stdout: []string{"blocks"}},
		{name: "file:/// URL", args: []string{"status", "--db", "file://" + escaped}, stdout: []string{"blocks"}},
		{name: "file://localhost URL", args: []string{"status", "--db", "file://localhost" + escaped}, stdout: []string{"blocks"}},
		{name: "file: URL with parameters", args: []string{"status", "--db", "file:" + escaped + "?mode=ro"}, code: exitError,
			stderr: []string{"a file: URL here names the file alone"}},
		{name: "file: URL of another host", args: []string{"status", "--db", "file://elsewhere" + escaped}, code: exitError,
			stderr: []string{"names a local file"}},
		{name: "file: URL of a missing file", args: []string{"status", "--db", "file:" + (&url.URL{Path: missing}).EscapedPath()}, code: exitError,
			stderr: []string{"no such file"}},
	}
	runCases(t, bin, cases)
	require.NoFileExists(t, missing, "refset must not create a SQLite file it was only asked to read")
}

// TestReportsFollowTheSchema: a holder table added after the program's Install, and
// still without its index, is seen by the read-only commands, which answer and say
// which index to create; a key ON DELETE CASCADE that no program declared a part is
// a warning in check and status.
func TestReportsFollowTheSchema(t *testing.T) {
	bin := buildCLI(t)
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		prepare(t, b, db)
		require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
			for _, q := range []string{
				`CREATE TABLE escrow (id TEXT PRIMARY KEY, block_id TEXT NOT NULL REFERENCES blocks (id) ON DELETE RESTRICT)`,
				`INSERT INTO escrow (id, block_id) VALUES ('deal-1', 'y')`,
				`CREATE TABLE notes (block_id TEXT NOT NULL REFERENCES blocks (id) ON DELETE CASCADE)`,
			} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		}))
		out := cli(t, bin, dbArgs, exitOK, "why", "y", "--table", "blocks")
		require.Contains(t, out, "escrow.block_id (id='deal-1')", "why names the new table")
		require.Contains(t, out, `CREATE INDEX "escrow_block_id_idx" ON `, "and the index it lacks")

		var c checkJSON
		require.NoError(t, json.Unmarshal([]byte(cli(t, bin, dbArgs, exitOK, "check", "--json", "--table", "blocks")), &c))
		require.True(t, c.OK, "y is held by escrow, not leaked: %+v", c)
		require.Len(t, c.MissingIndexes, 1)
		require.Contains(t, c.MissingIndexes[0], "escrow")
		require.Len(t, c.UndeclaredParts, 1)
		require.Contains(t, c.UndeclaredParts[0], "notes")
		out = cli(t, bin, dbArgs, exitOK, "check", "--table", "blocks")
		require.Contains(t, out, "has no index")
		require.Contains(t, out, "not declared a part")

		out = cli(t, bin, dbArgs, exitOK, "status")
		require.Contains(t, out, "not declared a part", "status warns of the cascading key")
		require.Contains(t, out, "notes")
	})
}

// whyIs checks why's JSON: how many holders it lists (an empty list, never null, for
// garbage), and whether the object is queued for clean-up or leaked.
func whyIs(holders int, queued, leaked bool) func(t *testing.T, out []byte) {
	return func(t *testing.T, out []byte) {
		var w whyJSON
		require.NoError(t, json.Unmarshal(out, &w))
		require.NotNil(t, w.Holders)
		require.Len(t, w.Holders, holders)
		require.Equal(t, queued, w.Queued, "queued")
		require.Equal(t, leaked, w.Leaked, "leaked")
	}
}

// counter is an object of a set of integer IDs.
type counter struct {
	N int64 `db:"id"`
}

func (c counter) ID() int64 { return c.N }

// why reads its ID as text of the set's key type (cleanup.TextID): 42 names the
// object 42 of a set of integer IDs, on each store; an ID no integer key can hold is
// refused as an invalid id, not answered as an object that is not there, which
// SQLite, comparing the text loosely, had said of abc.
func TestWhyIntegerKey(t *testing.T) {
	bin := buildCLI(t)
	eachBackend(t, func(t *testing.T, b backend, db refset.Database, dbArgs []string) {
		ctx := t.Context()
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE counters (id BIGINT PRIMARY KEY)`)
			return err
		}))
		_, err := store.NewStore[counter, int64](ctx, db, store.Config{Table: "counters"})
		require.NoError(t, err)
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			for _, q := range []string{
				`CREATE TABLE counter_refs (counter_id BIGINT PRIMARY KEY REFERENCES counters (id))`,
				`INSERT INTO counters (id) VALUES (42), (7)`,
				`INSERT INTO counter_refs (counter_id) VALUES (42)`,
			} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		}))
		runCases(t, bin, []cliCase{
			{name: "why of an integer", args: []string{"why", "42", "--table", "counters"}, code: exitOK, stdout: []string{"counter_refs"}},
			{name: "why of an integer json", args: []string{"why", "--json", "42", "--table", "counters"}, code: exitOK, json: whyIs(1, false, false)},
			{name: "why of an unreferenced integer", args: []string{"why", "--json", "7", "--table", "counters"}, code: exitOK, json: whyIs(0, false, true)},
			{name: "why of no such integer", args: []string{"why", "43", "--table", "counters"}, code: exitError, stderr: []string{"not found"}},
			{name: "why of no integer", args: []string{"why", "abc", "--table", "counters"}, code: exitError,
				stderr: []string{"invalid id", `"abc", given as text`}},
			{name: "why of an integer out of range", args: []string{"why", "99999999999999999999", "--table", "counters"}, code: exitError,
				stderr: []string{"invalid id", `"99999999999999999999", given as text`}},
		}, dbArgs...)
	})
}
