package postgres

import (
	"github.com/refsetdb/refset/internal/driver"
	"github.com/refsetdb/refset/schema"
)

// driverHandle carries the database's driver.Driver without a field in its API.
type driverHandle = driver.Handle

// dialectDriver is this store's driver.Driver, bound to one database: its statements
// and catalog reads (dialect), its clean-up SQL (cleanupDialect), and the pool and
// options of the database (driver.Binding).
type dialectDriver struct {
	dialect
	cleanupDialect
	driver.Binding
}

// Schema and SchemaSQL: dialect and cleanupDialect both have them, so say which.
func (dialectDriver) Schema() schema.Dialect { return schema.Postgres }

func (dialectDriver) SchemaSQL() schema.SQL { return schemaSQL{} }

// ExternalMigrations is the database's option, not the bare dialect's false.
func (d dialectDriver) ExternalMigrations() bool { return d.Binding.ExternalMigrations() }
