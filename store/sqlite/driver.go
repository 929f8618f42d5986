package sqlite

import (
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store/sqlite/internal/drivers"
)

// dialectDriver is this store's refsetdriver.Driver, bound to one database: its
// statements and catalog reads (dialect), its clean-up SQL (cleanupDialect), and the
// pool and options of the database (refsetdriver.Binding).
type dialectDriver struct {
	dialect
	cleanupDialect
	refsetdriver.Binding
	insertParams int // Statements' MaxInsertParams
}

// Statements are the dialect's, with the driver's limit on a multi-row insert.
func (d dialectDriver) Statements(t refsetdriver.SetTable) refsetdriver.Statements {
	s := d.dialect.Statements(t)
	s.MaxInsertParams = d.insertParams
	return s
}

// Name names the dialect: the folder of per-dialect SQL files.
func (dialectDriver) Name() string { return dialectName }

// newDialectDriver is the driver of a database whose writer is writer, with the
// SQLite driver's own limit on a multi-row insert (modernc.org/sqlite binds in n²/2
// steps: see store/sqlite/modernc).
func newDialectDriver(writer *sqlx.DB, opts Options) dialectDriver {
	d := dialectDriver{Binding: refsetdriver.Bind(writer.DB, opts.Settings())}
	if sd, ok := drivers.Of(writer.Driver()); ok {
		d.insertParams = sd.MaxInsertParams
	}
	return d
}
