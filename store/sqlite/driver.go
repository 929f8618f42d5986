package sqlite

import (
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
)

// driverHandle carries the database's refsetdriver.Driver without a field in its API.
type driverHandle = refsetdriver.Handle

// dialectDriver is this store's refsetdriver.Driver, bound to one database: its statements
// and catalog reads (dialect), its clean-up SQL (cleanupDialect), and the pool and
// options of the database (refsetdriver.Binding).
type dialectDriver struct {
	dialect
	cleanupDialect
	refsetdriver.Binding
}

// Schema and SchemaSQL: dialect and cleanupDialect both have them, so say which.
func (dialectDriver) Schema() schema.Dialect { return schema.SQLite }

func (dialectDriver) SchemaSQL() schema.SQL { return schemaSQL{} }

// ExternalMigrations is the database's option, not the bare dialect's false.
func (d dialectDriver) ExternalMigrations() bool { return d.Binding.ExternalMigrations() }

// Name names the dialect: the folder of per-dialect SQL files.
func (dialectDriver) Name() string { return string(schema.SQLite) }

// Rebind rewrites ? placeholders to the dialect's.
func (dialectDriver) Rebind(query string) string { return schema.SQLite.Rebind(query) }
