package sqlite

import (
	"context"
	"embed"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/storesql"
)

//go:embed sql/schema
var schemaFiles embed.FS

// dialectName names the dialect: the folder of per-dialect SQL files.
const dialectName = "sqlite"

// rebind writes the dialect's placeholders into a statement written with ?:
// SQLite takes ? as it is.
func rebind(query string) string { return query }

// theSchemaSQL is this store's part of refset's schema. It takes no lock for
// migrations: the write transaction itself (BEGIN IMMEDIATE) already excludes every
// other writer.
var theSchemaSQL = storesql.NewSchema(storesql.SchemaDialect{Name: dialectName, Files: schemaFiles,
	Rebind: rebind, Clock: cleanupDialect{}.Clock(), TableExists: tableExists,
	KeyType: storesql.SQLiteKeyType, FoldsCase: true})

func tableExists(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error) {
	var found bool
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE`, table.Name).Scan(&found)
	return found, err
}

// SchemaSQL is this store's part of refset's schema: its migrations, which package
// schema's migrator finds through the database's Driver.
func (cleanupDialect) SchemaSQL() refsetdriver.SchemaSQL { return theSchemaSQL }

// Rebind writes the dialect's placeholders into a statement written with ?.
func (cleanupDialect) Rebind(query string) string { return rebind(query) }

// RowAddress names a row of any table, for reports on tables without a primary key.
func (cleanupDialect) RowAddress() string { return "rowid" }

// Clock: refset's tables keep times as Unix milliseconds in INTEGER columns.
func (cleanupDialect) Clock() refsetdriver.Clock { return storesql.Clock(nowMillis, time.UnixMilli) }
