package sqlite

import (
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/refsetdriver"
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

// moderncInsertParams is how many parameters a multi-row insert binds on
// modernc.org/sqlite, which looks each parameter up among all of a statement's
// arguments: binding n of them costs n²/2 steps, most of a 1,000-block Put's CPU in
// statements of 4,000 (500 rows of 8). Statements of 512 made blockmanager's Put 1.5
// times faster there (BenchmarkPutPaired/sqlite-purego); go-sqlite3 binds by
// position, and keeps the default.
const moderncInsertParams = 512

// Statements are the dialect's, with the driver's limit on a multi-row insert.
func (d dialectDriver) Statements(t refsetdriver.SetTable) refsetdriver.Statements {
	s := d.dialect.Statements(t)
	s.MaxInsertParams = d.insertParams
	return s
}

// Name names the dialect: the folder of per-dialect SQL files.
func (dialectDriver) Name() string { return dialectName }

// newDialectDriver is the driver of a database whose writer is writer.
func newDialectDriver(writer *sqlx.DB, opts Options) dialectDriver {
	d := dialectDriver{Binding: refsetdriver.Bind(writer.DB, opts.Settings())}
	if writer.DriverName() == DriverModernc {
		d.insertParams = moderncInsertParams
	}
	return d
}
