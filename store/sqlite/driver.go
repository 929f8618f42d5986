package sqlite

import (
	"github.com/refsetdb/refset/refsetdriver"
)

// dialectDriver is this store's refsetdriver.Driver, bound to one database: its
// statements and catalog reads (dialect), its clean-up SQL (cleanupDialect), and the
// pool and options of the database (refsetdriver.Binding).
type dialectDriver struct {
	dialect
	cleanupDialect
	refsetdriver.Binding
}

// Name names the dialect: the folder of per-dialect SQL files.
func (dialectDriver) Name() string { return dialectName }
