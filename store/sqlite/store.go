package sqlite

import (
	"context"

	"github.com/refsetdb/refset/internal/driver"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
)

// Config names the table a set lives in. The table must exist; refset does not
// create the user's tables, since they carry the user's own columns and keys.
type Config struct {
	// Table is the object table.
	Table string
	// IDColumn is the column of the objects' IDs; "" means the table's primary key,
	// which it must be in any case.
	IDColumn string
	// HoldsTable names the set's holds table; "" means Table + "_holds".
	HoldsTable string
}

// NewStore returns the store of a set of T in db. It checks every name in cfg, checks
// that each `db`-tagged field of T has a column and that the primary key is mapped to
// a field of type ID (refset.ErrSchema otherwise), and creates the holds table and
// review queue if they do not exist, also when refset's records say it made them
// before: tables dropped and made again (by hand) get a working set.
func NewStore[T refset.Identifiable[ID], ID comparable](ctx context.Context, db *DB, cfg Config) (refset.SetStore[T, ID], error) {
	s, err := driver.NewStore[T, ID](ctx, db, sqlstore.Config(cfg))
	if err != nil {
		return nil, err // not a nil *Store in a non-nil interface
	}
	return s, nil
}
