package testdb

import (
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// Plain is db as a database of the caller's own would be (the database of a
// SetStore of their own): it passes every call on to db, beginning transactions,
// reading and translating errors, but is none of refset's stores and has no refset
// driver, so code that needs a store's capabilities (refsetdriver.Of) must refuse it.
func Plain(db refset.Database) refset.Database { return plainDatabase{db} }

type plainDatabase struct{ refset.Database }

func (plainDatabase) Driver() refsetdriver.Driver { return nil }
