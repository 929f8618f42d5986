package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"io/fs"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
)

//go:embed sql/schema
var schemaFiles embed.FS

// schemaSQL is this store's part of refset's schema (schema.SQL).
type schemaSQL struct{}

func (schemaSQL) Dialect() schema.Dialect { return schema.SQLite }

func (schemaSQL) Migrations() fs.FS {
	sub, err := fs.Sub(schemaFiles, "sql/schema")
	if err != nil {
		panic(err) // the embedded folder is part of this package
	}
	return sub
}

// LockMigrations does nothing: the write transaction itself (BEGIN IMMEDIATE)
// already excludes every other writer.
func (schemaSQL) LockMigrations(context.Context, refset.Tx) error { return nil }

func (schemaSQL) TableExists(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error) {
	var found bool
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE`, table.Name).Scan(&found)
	return found, err
}

func (dialect) SchemaSQL() schema.SQL { return schemaSQL{} }

// ExternalMigrations is false for the bare dialect; a database's driver says what its
// Options said.
func (dialect) ExternalMigrations() bool { return false }

// SchemaSQL is this store's part of refset's schema: its migrations, for
// schema.Pending, schema.SQLText and schema.MigrateDown, which a DBA's tool runs
// where the application's role may not create tables (Options.ExternalMigrations).
func SchemaSQL() schema.SQL { return schemaSQL{} }

func (cleanupDialect) SchemaSQL() schema.SQL { return schemaSQL{} }

// RowAddress names a row of any table, for reports on tables without a primary key.
func (cleanupDialect) RowAddress() string { return "rowid" }

// Clock: refset's tables keep times as Unix milliseconds in INTEGER columns.
func (cleanupDialect) Clock() refsetdriver.Clock {
	return refsetdriver.Clock{
		Now: `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`,
		Scan: func() (any, func() time.Time) {
			var ms sql.NullInt64
			return &ms, func() time.Time {
				if !ms.Valid {
					return time.Time{}
				}
				return time.UnixMilli(ms.Int64).UTC()
			}
		},
	}
}
