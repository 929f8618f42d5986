package postgres

import (
	"database/sql"

	"github.com/refsetdb/refset/internal/driver"
	"github.com/refsetdb/refset/schema"
)

// driverHandle carries the database's driver.Driver without a field in its API.
type driverHandle = driver.Handle

// dialectDriver is this store's driver.Driver, bound to one database: its statements
// and catalog reads (dialect), its clean-up SQL (cleanupDialect), and the pool its
// write transactions and prepared statements are on.
type dialectDriver struct {
	dialect
	cleanupDialect
	pool       *sql.DB
	unprepared bool
	external   bool // Options.ExternalMigrations
}

func (dialectDriver) Schema() schema.Dialect { return schema.Postgres }

func (d dialectDriver) Pool() *sql.DB { return d.pool }

func (d dialectDriver) Unprepared() bool { return d.unprepared }

func (d dialectDriver) ExternalMigrations() bool { return d.external }

func (dialectDriver) SchemaSQL() schema.SQL { return schemaSQL{} }
