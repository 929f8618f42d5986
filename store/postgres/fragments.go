package postgres

import (
	"strings"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/refsetdriver"
)

var (
	_ refsetdriver.TxLocks    = dialectDriver{}
	_ refsetdriver.BulkWrites = dialectDriver{}
)

// What a component's own statements ask of PostgreSQL (refsetdriver.Driver's
// fragments, and the TxLocks and BulkWrites it offers).

// ColumnIn tests column against a text array: the list is one parameter, declared
// text and cast to text[] (see StringList).
func (dialectDriver) ColumnIn(column string) string { return column + ` = ANY (?::text::text[])` }

// StringList is strings as one array literal, for a parameter the statement
// declares text and casts to text[]. Both drivers pass text through as it is; given
// an array parameter, pgx parsed lib/pq's array literal back into a slice to encode
// it again, a tenth of a blockmanager Put's time on the client.
func (dialectDriver) StringList(values []string) any {
	v, _ := pq.StringArray(values).Value() // strings always encode
	if s, ok := v.(string); ok {
		return s
	}
	return "{}" // nil
}

// InProcess is false: the server works on its own cores.
func (dialectDriver) InProcess() bool { return false }

// TxLock is a transaction-scoped advisory lock on the 64-bit hash of the name.
func (dialectDriver) TxLock(shared bool) string {
	if shared {
		return `pg_advisory_xact_lock_shared(hashtextextended(?, 7262))`
	}
	return `pg_advisory_xact_lock(hashtextextended(?, 7262))`
}

// KeyShare is FOR KEY SHARE, the lock a foreign key's check takes.
func (dialectDriver) KeyShare(alias string) string { return `FOR KEY SHARE OF ` + alias }

// Unnest zips text arrays into rows.
func (dialectDriver) Unnest(n int) string {
	return `unnest(` + strings.TrimSuffix(strings.Repeat(`?::text::text[], `, n), `, `) + `)`
}
