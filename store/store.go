// Package store is what every refset store shares: a set's Config, NewStore and
// NewCollector, which take the database of any store (store/sqlite, store/postgres)
// and find its dialect through the database's driver. A program that runs on both
// databases builds its sets and collectors here, with one code path; the store
// packages open the databases.
package store

import (
	"context"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// Config names the table a set lives in. The table must exist; refset does not
// create the user's tables, since they carry the user's own columns and keys.
type Config struct {
	// Table is the object table, schema-qualified on PostgreSQL if need be
	// ("ledger.blocks").
	Table string
	// IDColumn is the column of the objects' IDs; "" means the table's primary key,
	// which it must be in any case.
	IDColumn string
	// HoldsTable names the set's holds table; "" means Table + "_holds", in the same
	// schema.
	HoldsTable string
}

// NewStore returns the store of a set of T in db, a database of store/sqlite or
// store/postgres (refset.ErrInvalidConfig for anything else). It checks every name
// in cfg, checks that each `db`-tagged field of T has a column and that the primary
// key is mapped to a field of type ID (refset.ErrSchema otherwise), and creates the
// holds table and review queue if they do not exist, also when refset's records say
// it made them before: tables dropped and made again (by hand, or by DROP SCHEMA ...
// CASCADE while refset_schema_version lives in another schema) get a working set.
// With the database's ExternalMigrations option it creates nothing and fails with
// refset.ErrSchema (a *schema.PendingError) when the schema is behind.
func NewStore[T refset.Identifiable[ID], ID comparable](ctx context.Context, db refset.Database, cfg Config) (refset.SetStore[T, ID], error) {
	s, err := refsetdriver.NewStore[T, ID](ctx, db, sqlstore.Config(cfg))
	if err != nil {
		return nil, err // not a nil *Store in a non-nil interface
	}
	return s, nil
}

// NewCollector installs clean-up of cfg's set in db (see cleanup.Config), a database
// of store/sqlite or store/postgres, and returns its Collector.
func NewCollector(ctx context.Context, db refset.Database, cfg cleanup.Config) (*cleanup.Collector, error) {
	return cleanup.Install(ctx, db, cfg)
}
