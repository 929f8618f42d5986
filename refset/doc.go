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
//	setStore, err := store.NewStore[Block, string](ctx, db, store.Config{Table: "blocks"})
//	blocks := refset.New(setStore)
//
// Sets are built, on either database, with package store's NewStore, which takes any
// store's Database. A Database is opened by store.Open (either database, by its DSN)
// or by store/sqlite or store/postgres, never implemented by callers (it is package
// refsetdriver's, the stores' unstable API); a store of your own implements SetStore
// instead.
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
// Exec takes further arguments after the ID, for a holder row with more columns:
//
//	refset.Exec[string](`INSERT INTO owned (block_id, owner) VALUES (?, ?)`, 1, "alice")
//
// Each step consumes its input: a second Release, Acquire or Complete fails with
// ErrTokenConsumed and runs nothing. A failed Complete rolls back and leaves the
// Acquired usable, so the caller may fix the cause and retry.
//
// # Units of work
//
// InTx runs a function in one transaction, so a block, its batches, the hand-over and
// the caller's own rows (transaction receipts) commit together or not at all. Several
// sets in one database share one unit of work. Transactions refset opens itself are
// retried, a bounded number of times, when the database aborts them to keep concurrent
// ones apart.
//
// The function gets a context that carries the unit, and every call of refset made
// with it joins the unit: Add, AddAll, Upgrade and Complete run in its transaction
// under a savepoint (a failed one undoes only itself), Get, Load, Upgrade and
// clean-up's reports read on it (they see what the unit wrote and take no second
// connection), Reader gives the caller's own reads the same, and an InTx inside runs
// as a savepoint. Commands get that context too. What commits on its own (clean-up's
// Install, Collect and Sweep, store.NewStore, migrations) fails at once with
// ErrInUnitOfWork. No call waits for the unit's own connection, and none commits
// outside it:
//
//	err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
//		tok, err := blocks.Add(ctx, block, blocks.Hold("node", 0)) // joins the unit
//		if err != nil {
//			return err
//		}
//		_, err = tx.ExecContext(ctx, `INSERT INTO receipts (block_id, note) VALUES (?, ?)`, tok.ID(), "ok")
//		return err
//	})
//
// The *Tx forms (AddTx, UpgradeTx, CompleteTx, AddAllTx) do the same in a transaction
// the caller began itself (a *sql.Tx), and give their commands its unit. Use the
// context the function got, not InTx's own: a call with that is not part of the unit.
// On PostgreSQL it commits apart, on a connection of its own; when the units of work
// on the goroutine hold every connection the pool may open (a pool of one), it fails
// at once with ErrInUnitOfWork instead of waiting for them. On SQLite, whose one
// writer connection the unit holds, a write with it fails at once with
// ErrInUnitOfWork on the function's goroutine, and waits for the unit on another.
//
// # Sizing a connection pool
//
// A unit of work holds one connection until it ends, and every call made with its
// context uses that one, so each call and each unit needs a single connection at a
// time: every call works on a pool of one connection, serialising them (SQLite's
// writer is one connection by design). Size a PostgreSQL pool for the calls and units
// that run at once (postgres.Options.MaxConns, or the caller's pool given to
// postgres.New): a unit waits for a free connection at its start, not inside. A call
// made inside a unit's function with a context that does not carry the unit takes a
// second connection: when the units on its goroutine hold them all, it fails at once
// with ErrInUnitOfWork, since waiting would be for itself. A
// clean-up collector running in the background takes one connection per pass, and a
// database with a replica reads from its own pool too.
//
// # Placeholders
//
// Write ? placeholders in Exec commands and in the statements run on the Tx that
// Commands and InTx functions get: refset writes the database's own ($1, $2, ... on
// PostgreSQL), so one program's SQL runs on both stores. A ? in a literal, a quoted
// name or a comment stays, and so does every ? of a statement with no arguments or
// with numbered ones ($1): PostgreSQL's jsonb operators ?, ?| and ?& (see Tx for the
// rule). SQL sent to a pool directly is sent as it is: db.Driver().Rebind(query)
// writes its placeholders (leaving literals, comments and a statement with $1 as
// they are).
//
// # Leases
//
// Get returns a Lease on an object, through its token; Load, by its ID, in one call
// and one round trip. While any lease on an ID is alive, every Get or Load of that ID
// returns the same instance without a database round trip; when none is, the
// instance is freed. Concurrent misses on one ID read it once. The value is
// shared: read it, never modify it; a changed object is a new object with a new ID.
//
// # Reads from a replica
//
// A database may have a replica beside its primary: a hot standby that replays the
// primary's writes a little later (postgres.Options.Replica). Reads outside a
// transaction whose answer a lagging copy cannot make wrong go there first, to take
// load off the primary:
//
//   - Get and Load (a cache miss) and Upgrade without commands look an object up
//     by ID.
//     Objects never change, so a row the replica has is the object, however far
//     behind the replica is. A row it lacks may not be replicated yet, so the primary
//     is asked then: a Get, a Load or an Upgrade right after the Add that stored
//     the object finds it.
//   - Branch and BranchDiff walks in package blockmanager confirm on the primary
//     every place where a walk on the replica would end.
//   - Reports in package cleanup (Check, Why, WhyAll, Status) read the replica only
//     once it has replayed everything the primary had committed when the report
//     began, and the primary otherwise: they see the caller's own writes.
//
// Writes, everything inside a transaction (the *Tx forms, commands, InTx), and reads
// of what changes (who holds an object, a chain's head, the review queue) go to the
// primary. A read the replica fails is made again on the primary; the database's
// Observer counts each fallback (ReadFellBack). What a replica may show that the
// primary would not is an object collected on the primary since; the primary too
// may collect an object right after a Get returned it. A token never kept an object
// alive: a persisted reference does.
//
// # What caller code cannot break
//
// Commands and functions given to InTx run inside a transaction that refset began,
// and refset alone ends it. They get a Tx that runs statements but has no Commit or
// Rollback; a statement that would end or begin a transaction (COMMIT, ROLLBACK, END,
// BEGIN, ...) is refused with ErrInvalidCommand and the whole unit of work rolls back,
// whatever the caller did with that error. A Command or function that panics rolls
// back what it was part of (the transaction, or a *Tx call's savepoint), its
// connection goes back to the pool, the token or Acquired is left as it was before the
// call, and the panic then goes on with its own value. A Command of a call that runs
// under a savepoint (a *Tx call, or one that joined a unit of work) cannot reach
// that savepoint by name, and one that swallows the error of a statement the
// database refused fails its call on PostgreSQL, which aborts the savepoint then,
// with ErrInvalidTx: the call is undone alone and the transaction stays usable. A
// pool passed where a transaction is required is refused with ErrInvalidTx.
//
// # Errors
//
// Every error the package returns matches one of the sentinels with errors.Is
// (ErrNotFound, ErrDuplicate, ErrReferenced, ErrTokenConsumed, ErrConflict,
// ErrUnavailable, ErrTimeout, ...; IsSentinel tells), or the context's own error
// (context.Canceled, context.DeadlineExceeded) when the call's context ended, or is
// the error the caller's own Command or function returned. Where a database refused
// something the driver's error is wrapped too. A call that fails changed nothing, with
// one exception the errors say: ErrCommitUnknown, a connection lost while committing,
// after which the transaction may or may not have committed (on PostgreSQL, only when
// no server could tell: see ErrUnavailable).
//
// The sentinels group as follows. The caller's mistakes: ErrInvalidID,
// ErrInvalidToken, ErrInvalidCommand, ErrInvalidTx, ErrInvalidIdentifier,
// ErrInvalidConfig, ErrTokenConsumed. What the data says: ErrNotFound, ErrDuplicate,
// ErrReferenced, ErrConstraint, ErrSchema, ErrStatement. What passes and may be
// retried: ErrConflict (already retried by refset where it began the transaction),
// ErrUnavailable, ErrTimeout. And ErrClosed.
//
// A mistake in one's SQL gets the same sentinel on every store and driver, wherever
// refset runs the statement (an Exec command, pipelined or not, a Command's or an
// InTx function's own statement, the store's own statement on a table that changed):
// a table, column or function the database does not have is ErrSchema; a syntax
// error, a wrong number of arguments or a value of the wrong type ErrStatement; NOT
// NULL and CHECK ErrConstraint; a unique key ErrDuplicate; a reference to a missing
// row ErrNotFound. Where a database cannot tell (SQLite stores text in an INTEGER
// column of a table that is not STRICT, and reads a double-quoted name that names no
// column as a string), the statement runs.
//
// A message says each thing once, from the outermost call in: the call and its
// object, then, for a failed command, which it was (its place in the call's list of
// commands, the side of a hand-over, its statement or what it is), then what failed,
// as in "refset: complete n1: acquire command 2 of 3 (UPDATE owners SET block_id = ?
// WHERE owner = ?): affected 0 rows, want 1". A driver's own words for its machinery (pgx's
// "error preprocessing batch") are left out; its error stays reachable with errors.As.
// A statement cut short by its context says whether the deadline ("statement
// interrupted (context deadline exceeded)") or a cancel did it, and matches that
// context error alone, whatever words the driver used (lib/pq reports both as the
// server's "canceling statement due to user request").
package refset
