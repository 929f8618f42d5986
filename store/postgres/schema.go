package postgres

import (
	"context"
	"embed"
	"time"

	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/storesql"
)

//go:embed sql/schema
var schemaFiles embed.FS

// advisoryLockKey serialises migrations of one database across processes. The value
// spells "refset" in ASCII.
const advisoryLockKey = 0x726566736574

// dialectName names the dialect: the folder of per-dialect SQL files.
const dialectName = "postgres"

// rebind writes the dialect's placeholders into a statement written with ?:
// $1, $2, ... on Postgres.
func rebind(query string) string { return sqltext.Dollar(query) }

// theSchemaSQL is this store's part of refset's schema.
var theSchemaSQL = storesql.NewSchema(storesql.SchemaDialect{Name: dialectName, Files: schemaFiles,
	Rebind: rebind, Clock: cleanupDialect{}.Clock(), LockMigrations: lockMigrations, TableExists: tableExists,
	KeyType: storesql.PostgresKeyType, MaxName: maxName})

// maxName is the longest name PostgreSQL keeps whole (NAMEDATALEN-1); it cuts a
// longer one short, silently.
const maxName = 63

// lockMigrations takes a transaction-scoped advisory lock: a second process waits
// here, then finds everything applied.
func lockMigrations(ctx context.Context, tx refset.Tx) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, advisoryLockKey)
	return err
}

func tableExists(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error) {
	var found bool
	err := q.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table.Quoted()).Scan(&found)
	return found, err
}

// SchemaSQL is this store's part of refset's schema: its migrations, which package
// schema's migrator finds through the database's Driver.
func (cleanupDialect) SchemaSQL() refsetdriver.SchemaSQL { return theSchemaSQL }

// Rebind writes the dialect's placeholders into a statement written with ?.
func (cleanupDialect) Rebind(query string) string { return rebind(query) }

// RowAddress names a row of any table, for reports on tables without a primary key.
func (cleanupDialect) RowAddress() string { return "ctid" }

// Clock: refset's tables keep times as timestamptz.
func (cleanupDialect) Clock() refsetdriver.Clock {
	return storesql.Clock("now()", func(t time.Time) time.Time { return t })
}
