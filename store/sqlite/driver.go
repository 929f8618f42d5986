package sqlite

import (
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
)

// dialectDriver is this store's refsetdriver.Driver, bound to one database: its
// statements and catalog reads (dialect), its clean-up SQL (cleanupDialect), and the
// pool and options of the database (refsetdriver.Binding).
type dialectDriver struct {
	dialect
	cleanupDialect
	refsetdriver.Binding
}

// SchemaSQL: dialect and cleanupDialect both have it, so say which.
func (dialectDriver) SchemaSQL() schema.SQL { return schemaSQL{} }

// ExternalMigrations is the database's option, not the bare dialect's false.
func (d dialectDriver) ExternalMigrations() bool { return d.Binding.ExternalMigrations() }

// Name names the dialect: the folder of per-dialect SQL files.
func (dialectDriver) Name() string { return "sqlite" }

// Rebind leaves ? placeholders as they are: they are SQLite's own.
func (dialectDriver) Rebind(query string) string { return query }
