package sqlite

import (
	"context"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
)

// Config names the table a set lives in: store.Config, shared by every store.
type Config = store.Config

// NewStore is store.NewStore on a database of this package.
func NewStore[T refset.Identifiable[ID], ID comparable](ctx context.Context, db *DB, cfg Config) (refset.SetStore[T, ID], error) {
	return store.NewStore[T, ID](ctx, db, cfg)
}
