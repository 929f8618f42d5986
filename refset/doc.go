// Package refset keeps immutable objects (blocks, batches, tokens) in a SQL database
// and lets the components of a program share them by reference, with the database,
// through foreign keys, guaranteeing that nothing referenced is ever deleted.
//
// # Objects, sets and stores
//
// An object is any struct that is Identifiable: it has an ID that names one immutable
// value forever. A RefSet holds the objects of one table, through a SetStore; the
// stores in store/sqlite and store/postgres map the struct's `db` tags to the table's
// columns.
//
//	type Block struct {
//		Hash   string  `db:"id"`
//		Prev   *string `db:"prev"`
//		Height int64   `db:"height"`
//	}
//	func (b Block) ID() string { return b.Hash }
//
//	store, err := sqlite.NewStore[Block, string](ctx, db, sqlite.Config{Table: "blocks"})
//	blocks := refset.New(store)
//
// # References are rows
//
// A RefToken says an object was in the set when the token was made; it does not keep
// the object alive. What keeps an object alive is a row that references it with a
// FOREIGN KEY: the caller's own tables (chain heads, pending blocks), a predecessor
// link in the object table itself, or a hold in the set's holds table (Hold, Unhold),
// which may expire. The database refuses to delete a referenced object
// (ErrReferenced) and refuses a reference to a missing one (ErrNotFound).
//
// Give a new object its first reference in the same transaction as the object itself
// by passing commands to Add:
//
//	tok, err := blocks.Add(ctx, b, blocks.Hold("completer", 0))
//
// # Hand-overs
//
// A token moves from one component to another in three typed steps. The giver
// releases it with the commands that drop its reference, the taker acquires it with
// the commands that record its own, and Complete runs all of them, releases first, in
// one transaction: either both components' rows change or neither does.
//
//	rel, err := tok.Release(blocks.Unhold("completer"))
//	acq, err := rel.Acquire(refset.Exec[string](`INSERT INTO heads (block_id) VALUES (?)`, 1))
//	tok, err = acq.Complete(ctx)
//
// Each step consumes its input: a second Release, Acquire or Complete fails with
// ErrTokenConsumed and runs nothing. A failed Complete rolls back and leaves the
// Acquired usable, so the caller may fix the cause and retry.
//
// # Units of work
//
// InTx runs a function in one transaction; AddTx, UpgradeTx and CompleteTx do their
// work inside it, under a savepoint, so a block, its batches, the hand-over and the
// caller's own rows (transaction receipts) commit together or not at all. Several sets
// in one database share one unit of work. Transactions refset opens itself are
// retried, a bounded number of times, when the database aborts them to keep concurrent
// ones apart.
//
// # Leases
//
// Get returns a Lease on an object. While any lease on an ID is alive, every Get of
// that ID returns the same instance without a database round trip; when none is, the
// instance is freed. Concurrent Gets that miss on one ID read it once. The value is
// shared: read it, never modify it; a changed object is a new object with a new ID.
//
// # Errors
//
// Every error the package returns matches one of the sentinels (ErrNotFound,
// ErrDuplicate, ErrReferenced, ErrTokenConsumed, ErrConflict, ...) with errors.Is and,
// where a database refused something, also wraps the driver's error. A call that fails
// with a sentinel error changed nothing.
package refset
