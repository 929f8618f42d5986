package postgres

import (
	"database/sql"
	"runtime"
	"sync"
	"weak"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// A unit of work holds one connection of the pool from its BEGIN until its function
// returns and it commits. A call made on the unit's goroutine, inside its function,
// with a context that does not carry the unit (the one InTx was given,
// context.Background()) does not join it: it takes a connection of the pool of its
// own. When the pool has none free and may open no more, and units of work on this
// very goroutine hold every one of them (a pool of one, or as many nested units as
// connections), none is freed until the call returns: it would wait until its
// context ends, for ever with context.Background(). Such a call fails at once with
// refset.ErrInUnitOfWork instead, changing nothing (ownUnitsHoldPool): a Begin
// (Add, Complete, InTx, a migration, ...), a read outside a unit (Get, Load,
// refset.Reader, ReaderOutside, store.NewStore's reads of the catalog and of refset's
// registry), a statement prepared on the pool (NewStore's, RefuseOwnPool), a statement
// that commits on its own (queryOwn), and ReplicaCaughtUp's read of the primary. The
// transaction of a stand-alone Add, Complete or Upgrade is a unit of work too: a call
// one of its Commands makes with another context is refused alike.
//
// The units on the goroutine are counted exactly: refset runs a unit's function in
// frames that name its pool (refsetdriver.RunUnitFuncOf, with this pool's tag,
// poolTagOf, shared by every DB made on one *sql.DB), read back from the goroutine's
// stack only when the pool is full (refsetdriver.UnitsOnStack). A pool busy with
// other goroutines' work, which frees its connections, is waited for, as before.
// Not counted, so waited for as before: connections the goroutine holds otherwise (a
// transaction of its own, a *sql.Conn, rows not yet closed), a connection taken by
// another goroutine the call waits for (clean-up's Collect, whose batches run on
// workers of its own), and the bound of a pgxpool under a *sql.DB with no bound of
// its own (NewPgxPoolConnector): give the *sql.DB the pgxpool's bound
// (SetMaxOpenConns) for its calls to be refused too.

// poolTags are the tags of the pools DBs were made on, while the pools live.
var poolTags sync.Map // weak.Pointer[sql.DB] → refsetdriver.PoolTag

// poolTagOf is pool's tag, the same for every DB made on it.
func poolTagOf(pool *sql.DB) refsetdriver.PoolTag {
	key := weak.Make(pool)
	if tag, ok := poolTags.Load(key); ok {
		return tag.(refsetdriver.PoolTag)
	}
	tag, loaded := poolTags.LoadOrStore(key, refsetdriver.NewPoolTag())
	if !loaded {
		runtime.AddCleanup(pool, func(key weak.Pointer[sql.DB]) { poolTags.Delete(key) }, key)
	}
	return tag.(refsetdriver.PoolTag)
}

// ownUnitsHoldPool reports whether a connection taken from the pool now would wait
// for one that only units of work on the calling goroutine could free: the pool has
// no idle connection and may open no more, and units of work on this goroutine hold
// as many as it may open (engine.Config.OwnUnitsHoldPool). A pool with a connection
// to spare costs one look at its counts; only a full one has the stack read.
func (db *DB) ownUnitsHoldPool() bool {
	s := db.pool.Stats()
	if s.MaxOpenConnections <= 0 || s.Idle > 0 || s.OpenConnections < s.MaxOpenConnections {
		return false
	}
	return refsetdriver.UnitsOnStack(db.poolTag) >= s.MaxOpenConnections
}

// PoolTag is the tag of the database's pool (refsetdriver.PoolTagged): refset runs
// the functions of its units of work in frames that name it.
func (d dialectDriver) PoolTag() refsetdriver.PoolTag { return d.db.poolTag }

// ReaderOutside is the database's Reader for a read outside its units of work, or a
// pool that refuses the read when it would wait for a connection that only units of
// work on the calling goroutine could free (refsetdriver.PoolReader).
func (d dialectDriver) ReaderOutside() refset.Querier {
	return d.db.storeEngine.ReaderOutside(d.db.Pool(), DriverLibPQ)
}

// RefuseOwnPool is the refusal of a call (op names it) that would take a connection
// of the database's pool that only units of work on the calling goroutine could free,
// or nil (refsetdriver.PoolReader).
func (d dialectDriver) RefuseOwnPool(op string) error { return d.db.storeEngine.RefuseOwnPool(op) }

var _ refsetdriver.PoolReader = dialectDriver{}
