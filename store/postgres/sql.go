package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
	"github.com/refsetdb/refset/store/internal/storesql"
)

// All of this store's SQL is here.

// binaryParametersSQL tells whether lib/pq sends arguments with binary_parameters on,
// given the argument `\x00` as a string. With it on, lib/pq sends the string as it
// is, which the server reads as bytea's hex form: one byte. Without it, lib/pq first
// asks the server for the parameter's type and escapes the string as bytea: four.
const binaryParametersSQL = `SELECT octet_length($1::bytea)`

// ticketSQL is what a write transaction reads of itself just before COMMIT where
// BEGIN did not read it (pgx; see resolve.go): its id, where the server's WAL insert position stands after what it
// wrote, and which server it runs on, in one string (one value to scan on every
// commit; it is taken apart only when a COMMIT is lost). A transaction that wrote nothing has no id,
// and is given none: an id would make its COMMIT write (and flush) a commit record.
// The WAL position is read only with an id, so a read-only unit of work on a hot
// standby runs as before.
const ticketSQL = `
SELECT CASE WHEN pg_current_xact_id_if_assigned() IS NULL THEN ''
            ELSE concat_ws('|', pg_current_xact_id_if_assigned(), pg_current_wal_insert_lsn(), ` + serverSQL + `) END`

// beginTicketSQL is what a write transaction on lib/pq reads of itself in the round
// trip of its BEGIN, sent after it in one simple query (BEGIN ...; SELECT ...), instead
// of ticketSQL's round trip before COMMIT: its id, taken now, the end of a WAL record
// that carries the id, and the server. The record, a transactional logical decoding
// message (prefix "refset", empty, ignored by decoders that do not ask for messages),
// stands in for what the transaction writes later: a server that replayed WAL past it
// knows the id as this transaction's, as one that replayed past ticketSQL's position
// does (resolve.go). Every transaction so begun has an id, even one that then writes
// nothing, and its COMMIT writes and flushes a commit record.
const beginTicketSQL = `SELECT concat_ws('|', pg_current_xact_id(), pg_logical_emit_message(true, 'refset', ''), ` + serverSQL + `)`

// beginSQL is BEGIN for a transaction of isolation level iso, as lib/pq writes it
// (READ WRITE, which a standby refuses, unless readOnly), followed by beginTicketSQL
// if ticket; ok is false for a level lib/pq refuses. Each is written once, not on
// every BEGIN.
func beginSQL(iso sql.IsolationLevel, readOnly, ticket bool) (query string, ok bool) {
	if iso < 0 || int(iso) >= len(begins) || begins[iso][0][0] == "" {
		return "", false
	}
	return begins[iso][b2i(readOnly)][b2i(ticket)], true
}

// begins are beginSQL's statements by isolation level, read-only and ticket.
var begins = func() (b [sql.LevelSerializable + 1][2][2]string) {
	for iso, level := range map[sql.IsolationLevel]string{
		sql.LevelDefault:         "",
		sql.LevelReadUncommitted: " ISOLATION LEVEL READ UNCOMMITTED",
		sql.LevelReadCommitted:   " ISOLATION LEVEL READ COMMITTED",
		sql.LevelRepeatableRead:  " ISOLATION LEVEL REPEATABLE READ",
		sql.LevelSerializable:    " ISOLATION LEVEL SERIALIZABLE",
	} {
		for ro, mode := range [2]string{" READ WRITE", " READ ONLY"} {
			b[iso][ro] = [2]string{"BEGIN" + level + mode, "BEGIN" + level + mode + "; " + beginTicketSQL}
		}
	}
	return b
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// serverSQL names the server a session runs on: its address (empty over a Unix
// socket), port and start time, which a restart changes.
const serverSQL = `concat_ws('|', COALESCE(host(inet_server_addr()), ''), inet_server_port(), pg_postmaster_start_time())`

// outcomeSQL asks a server about the transaction of a ticket ($1 its id, $2 its WAL
// position, $3 its server): the transaction's status ("unassigned" for an id not
// given out yet, which pg_xact_status would refuse; "forgotten" when its status is
// no longer kept), whether this is the server that ran it, still running, and
// whether this server replayed WAL past the ticket's position (or started without
// any recovery). The id it takes of its own (pg_current_xact_id, the server's next
// one: every id below it was given out) makes a standby refuse the question and
// makes the COMMIT that follows wait for the synchronous standbys. (A snapshot's
// xmax would not do: it is one past the last transaction that ended, and the one
// asked about may still be running.)
const outcomeSQL = `
SELECT COALESCE(CASE WHEN $1::xid8 < pg_current_xact_id()
                     THEN pg_xact_status($1::xid8) ELSE 'unassigned' END, 'forgotten'),
       ` + serverSQL + ` = $3,
       COALESCE(pg_last_wal_replay_lsn() > $2::pg_lsn, true)`

// rowCountMark opens the text rowCheckedSQL casts to a number, and so fails on,
// when its statement affected another count of rows than it must: the count follows
// it, and the server's error quotes the text (in whatever language it speaks).
const rowCountMark = "refset-rows-affected:"

// rowCheckedSQL is body, a statement sqltext.Modification takes, made to refuse
// itself when it affects other than want rows: it runs as a data-modifying common
// table expression whose rows are counted, and a count other than want is cast to
// bigint as rowCountMark and the count, a text that is no number. The failure aborts
// the transaction, so nothing sent after the statement runs and COMMIT rolls back,
// and it says the count (rowCountRefused reads it). A count of want is the result.
func rowCheckedSQL(body string, want int64) string {
	w := strconv.FormatInt(want, 10)
	return "WITH refset_rows AS (" + body + " RETURNING 1) SELECT CASE WHEN n = " + w +
		" THEN n ELSE ('" + rowCountMark + "' || n)::bigint END FROM (SELECT count(*) AS n FROM refset_rows) AS refset_count"
}

// rowCountedSQL is body, a statement sqltext.Modification takes, made to return the
// count of rows it affected as its one row: how a statement whose count nobody checks
// says it in a simple query (libpqPipeline), where lib/pq reports no count but the
// last statement's.
func rowCountedSQL(body string) string {
	return "WITH refset_rows AS (" + body + " RETURNING 1) SELECT count(*) FROM refset_rows"
}

// beginMarkSQL follows BEGIN in a simple query that reads no commit ticket
// (libpqPipeline, with resolution off): its one row says BEGIN ran, so that what
// fails after it is told from BEGIN's own failure.
const beginMarkSQL = `SELECT ''`

// serverVersionSQL is the server's version as a number (150004 for 15.4).
const serverVersionSQL = `SELECT current_setting('server_version_num')::int`

type dialect struct{}

// byteaCast is the cast an insert's parameter for a column of colType is written
// with: bytea's, or none.
func byteaCast(colType string) string {
	if colType == "bytea" {
		return "::bytea"
	}
	return ""
}

// columnsSQL reads a table's columns; to_regclass resolves an unqualified name through
// search_path as the statements will, and yields no rows for a missing table. A
// column has a default when it has one of its own (serials' nextval, and generated
// columns' expressions, are kept as defaults), is an identity, or is of a domain
// with a default. Its key type (refsetdriver.Column.KeyType) is the type under its
// domains, if it has any (a domain over a domain too), with the collation it compares
// strings by where that is nondeterministic, so may hold two different strings equal.
const columnsSQL = `
SELECT a.attname,
       format_type(a.atttypid, a.atttypmod),
       a.attnotnull,
       COALESCE(a.attnum = ANY (i.indkey), false),
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
         OR (SELECT t.typdefaultbin IS NOT NULL FROM pg_type t WHERE t.oid = a.atttypid),
       (WITH RECURSIVE base (oid, mod, depth) AS (
            SELECT a.atttypid, a.atttypmod, 0
          UNION ALL
            SELECT t.typbasetype, t.typtypmod, base.depth + 1
            FROM base JOIN pg_type t ON t.oid = base.oid
            WHERE t.typtype = 'd')
        SELECT format_type(oid, mod) FROM base ORDER BY depth DESC LIMIT 1)
         || COALESCE((SELECT ' COLLATE ' || quote_ident(c.collname) FROM pg_collation c
                      WHERE c.oid = a.attcollation AND NOT c.collisdeterministic), '')
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

func (dialect) Columns(ctx context.Context, q refset.Querier, table sqlident.Ident) ([]refsetdriver.Column, error) {
	return cleanupsql.Rows(ctx, q, columnsSQL, []any{table.Quoted()}, func(rows *sql.Rows, c *refsetdriver.Column) error {
		return rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Primary, &c.Default, &c.KeyType)
	})
}

// Statements writes the cast of a bytea column's parameter into the insert
// ($1::bytea): the parameter's type then, as the column's, but written where a
// statement sent with its values in it (libpqPipeline) can see that a byte slice is
// bytea's, and not text, whose literal would be another.
func (dialect) Statements(t refsetdriver.SetTable) refsetdriver.Statements {
	return storesql.Statements(t, func(n int) string { return "$" + strconv.Itoa(n) }, func(c string) string { return `"` + c + `"` }, byteaCast, fmt.Sprintf(`INSERT INTO %s (holder, object_id, expires_at)
			VALUES ($1, $2, CASE WHEN $3::bigint > 0 THEN clock_timestamp() + $3::bigint * interval '1 millisecond' END)
			ON CONFLICT (object_id, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at`, t.Holds.Quoted()))
}
