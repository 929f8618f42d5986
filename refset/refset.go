package refset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refsetdriver"
)

// Identifiable is an object with an ID. The ID names one immutable value forever: a
// changed object is a new object with a new ID.
type Identifiable[ID comparable] interface {
	ID() ID
}

// RefSet is a set of immutable objects kept in a SetStore. It hands out RefTokens for
// the objects it holds and Leases to read them, keeping one in-memory instance per ID
// while any lease on it lives. A RefSet is safe for concurrent use.
type RefSet[T Identifiable[ID], ID comparable] struct {
	store SetStore[T, ID]
	db    Database
	caps  capabilities // the database's, found once
	cache *cache[T, ID]
}

// New returns a RefSet kept in store (store.NewStore makes one). A RefSet of a nil
// store, and the zero RefSet, which compiles, fail every call with ErrInvalidConfig.
func New[T Identifiable[ID], ID comparable](store SetStore[T, ID]) *RefSet[T, ID] {
	if store == nil {
		return &RefSet[T, ID]{}
	}
	db := store.Database()
	return &RefSet[T, ID]{store: store, db: db, caps: capabilitiesOf(db), cache: newCache[T, ID]()}
}

// made refuses a RefSet New did not make of a store, before call op touches it.
func (s *RefSet[T, ID]) made(op string) error {
	if s == nil || s.store == nil || s.db == nil || s.cache == nil {
		return opError(op, ErrInvalidConfig, errors.New("the RefSet was not made by refset.New of a store (store.NewStore)"))
	}
	return nil
}

// Database is the database the set lives in, for units of work (InTx) that span it;
// nil for a RefSet New did not make.
func (s *RefSet[T, ID]) Database() Database {
	if s == nil {
		return nil
	}
	return s.db
}

// Add stores obj and returns a token for it. The commands run in the same transaction
// as the insert: give an object its first reference (a Hold, the caller's own row)
// there, and no clean-up can ever see it unreferenced. ErrDuplicate if an object with
// that ID is stored already; nothing changes then. With the context of a unit of work
// (the one InTx gives its function, or a Command gets) Add joins the unit, as AddTx
// with its transaction; so do AddAll, Upgrade and Complete (see "Units of work" in
// the package doc).
//
// Errors: ErrInvalidID (the zero ID), ErrInvalidCommand (a nil command, or one that
// tried to end the transaction), ErrDuplicate, ErrNotFound (a command referenced a
// missing object), ErrConstraint, ErrConflict, ErrUnavailable, ErrTimeout, ErrClosed,
// the context's error, and whatever a command returned. A panicking command rolls
// back and goes on panicking.
func (s *RefSet[T, ID]) Add(ctx context.Context, obj T, cmds ...Command[ID]) (*RefToken[ID], error) {
	return s.add(ctx, false, nil, obj, cmds)
}

// AddTx is Add inside the caller's transaction tx, under a savepoint. A failure (or
// a panicking command) undoes only what AddTx did, and tx stays usable. Errors: those
// of Add, and ErrInvalidTx when tx is nil or a connection pool.
func (s *RefSet[T, ID]) AddTx(ctx context.Context, tx Tx, obj T, cmds ...Command[ID]) (*RefToken[ID], error) {
	return s.add(ctx, true, tx, obj, cmds)
}

// add is Add in a new transaction, or AddTx in tx when inTx.
func (s *RefSet[T, ID]) add(ctx context.Context, inTx bool, tx Tx, obj T, cmds []Command[ID]) (*RefToken[ID], error) {
	if err := s.made("add"); err != nil {
		return nil, err
	}
	id := obj.ID()
	if err := checkCall("add", inTx, tx, id, cmds); err != nil {
		return nil, err
	}
	joined := s.joined(ctx, tx)
	if err := s.persist(ctx, joined, id, obj, cmds); err != nil {
		return nil, wrapOp("add "+idText(id), err)
	}
	s.added(ctx, tx == nil && joined != nil, 1)
	return newToken[ID](id, s), nil
}

// added tells the Observer of n objects stored by an Add or AddAll: Added is told of
// committed objects, so one that joined a unit of work (inUnit) is told once the
// unit commits, and never if it rolls back; one in a transaction of its own has
// committed, and one in the caller's (the Tx forms, whose commit refset does not
// see) is told at once.
func (s *RefSet[T, ID]) added(ctx context.Context, inUnit bool, n int) {
	if inUnit && refsetdriver.AfterCommit(ctx, s.db, func() { s.caps.obs.Added(ctx, n) }) {
		return
	}
	s.caps.obs.Added(ctx, n)
}

// persist inserts obj and runs cmds for it: in a new transaction when tx is nil,
// pipelined when the commands are all Exec commands and the database can pipeline
// them and the store give its insert as a statement, otherwise under a savepoint of tx.
func (s *RefSet[T, ID]) persist(ctx context.Context, tx Tx, id ID, obj T, cmds []Command[ID]) error {
	if ins, ok := s.store.(refsetdriver.Inserter[T]); ok {
		insert := func() (refsetdriver.Statement, error) { return ins.InsertStatement(obj) }
		if ran, err := s.pipelined(ctx, tx, id, insert, cmds); ran {
			return err
		}
	}
	return s.within(ctx, tx, func(ctx context.Context, tx Tx) error {
		if err := s.store.Persist(ctx, tx, obj); err != nil {
			return err
		}
		return s.runAll(ctx, tx, id, cmds)
	})
}

// AddAll stores objs in one transaction, with multi-row inserts, and returns a token
// for each, in order. If any ID is stored already (or repeated in objs) it fails
// with ErrDuplicate and stores none. Errors: those of Add.
func (s *RefSet[T, ID]) AddAll(ctx context.Context, objs []T) ([]*RefToken[ID], error) {
	return s.addAll(ctx, nil, objs)
}

// AddAllTx is AddAll inside the caller's transaction tx, under a savepoint. Errors:
// those of AddTx.
func (s *RefSet[T, ID]) AddAllTx(ctx context.Context, tx Tx, objs []T) ([]*RefToken[ID], error) {
	if err := checkTx(tx); err != nil {
		return nil, err
	}
	return s.addAll(ctx, tx, objs)
}

func (s *RefSet[T, ID]) addAll(ctx context.Context, tx Tx, objs []T) ([]*RefToken[ID], error) {
	if err := s.made("add"); err != nil {
		return nil, err
	}
	toks := make([]*RefToken[ID], len(objs))
	for i, o := range objs {
		if err := checkID("add", o.ID()); err != nil {
			return nil, err
		}
		toks[i] = newToken[ID](o.ID(), s)
	}
	if len(objs) == 0 {
		return toks, nil
	}
	joined := s.joined(ctx, tx)
	err := s.within(ctx, joined, func(ctx context.Context, tx Tx) error { return s.store.PersistAll(ctx, tx, objs) })
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("add %d objects", len(objs)), err)
	}
	s.added(ctx, tx == nil && joined != nil, len(objs))
	return toks, nil
}

// Upgrade returns a token for the object with that ID, or ErrNotFound. The commands
// run in one transaction with the check, so a reference they persist is to an object
// that exists (the database refuses it otherwise).
//
// Without commands it reads the database's replica first, if it has one (see "Reads
// from a replica" in the package doc).
//
// Errors: ErrNotFound, and those of Add but ErrDuplicate.
func (s *RefSet[T, ID]) Upgrade(ctx context.Context, id ID, cmds ...Command[ID]) (*RefToken[ID], error) {
	if err := s.made("upgrade"); err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		if err := checkID("upgrade", id); err != nil {
			return nil, err
		}
		// A replica that does not have the object may not have replayed its Add yet.
		_, err := refsetdriver.ReadReplicaFirst(ctx, s.db, "has", false, func(q Querier) (bool, error) {
			found, err := s.store.Has(ctx, q, id)
			if err == nil && !found {
				err = ErrNotFound
			}
			return found, err
		})
		if errors.Is(err, ErrNotFound) {
			return nil, opError("upgrade "+idText(id), ErrNotFound, nil)
		}
		if err != nil {
			return nil, ctxerr.Wrap(ctx, wrapOp("upgrade "+idText(id), err))
		}
		return newToken[ID](id, s), nil
	}
	return s.upgradeIn(ctx, false, nil, id, cmds)
}

// UpgradeTx is Upgrade inside the caller's transaction tx, under a savepoint.
// Errors: those of Upgrade, and ErrInvalidTx when tx is nil or a connection pool.
func (s *RefSet[T, ID]) UpgradeTx(ctx context.Context, tx Tx, id ID, cmds ...Command[ID]) (*RefToken[ID], error) {
	return s.upgradeIn(ctx, true, tx, id, cmds)
}

// upgradeIn is Upgrade with commands, in a new transaction, or UpgradeTx in tx when
// inTx.
func (s *RefSet[T, ID]) upgradeIn(ctx context.Context, inTx bool, tx Tx, id ID, cmds []Command[ID]) (*RefToken[ID], error) {
	if err := s.made("upgrade"); err != nil {
		return nil, err
	}
	if err := checkCall("upgrade", inTx, tx, id, cmds); err != nil {
		return nil, err
	}
	err := s.within(ctx, s.joined(ctx, tx), func(ctx context.Context, tx Tx) error {
		ok, err := s.store.Has(ctx, tx, id)
		if err != nil {
			return wrapOp("upgrade "+idText(id), err)
		}
		if !ok {
			return opError("upgrade "+idText(id), ErrNotFound, nil)
		}
		if err := s.runAll(ctx, tx, id, cmds); err != nil {
			return wrapOp("upgrade "+idText(id), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return newToken[ID](id, s), nil
}

// Get returns a lease on the referenced object. While any lease on an ID lives, every
// Get of that ID returns the same instance without asking the database; once none
// does, the instance is freed. Concurrent Gets that miss on one ID read it once.
// ErrNotFound if the object is no longer stored (clean-up may remove an object whose
// references are all gone, even while a token for it is in memory).
// A miss reads the database's replica first, if it has one, and the primary when the
// replica does not have the object yet (see "Reads from a replica" in the package
// doc). Inside a unit of work (ctx carries one) a miss reads on the unit's
// transaction, which sees the unit's own writes; the instance it makes is shared by
// the unit's reads until the unit commits, and by every Get after, so an object whose
// Add rolled back is never served from the cache.
//
// Errors: ErrNotFound, ErrInvalidToken (nil, or a token of another set),
// ErrTokenConsumed (a token already released), ErrSchema (a stored row the type
// cannot hold), ErrUnavailable, ErrTimeout, ErrClosed, the context's error.
func (s *RefSet[T, ID]) Get(ctx context.Context, tok *RefToken[ID]) (Lease[T], error) {
	if err := s.made("get"); err != nil {
		return Lease[T]{}, err
	}
	if tok == nil || tok.lin == nil || tok.set != completer[ID](s) {
		return Lease[T]{}, opError("get", ErrInvalidToken, nil)
	}
	if !tok.lin.is(stepHeld) {
		return Lease[T]{}, opError("get "+idText(tok.id), ErrTokenConsumed, nil)
	}
	// The token says the primary had the object, so a replica without it is behind
	// (or the object was collected since).
	return s.lease(ctx, "get", tok.id)
}

// GetTx is Get reading in the caller's transaction tx (a *sql.Tx, or the Tx a unit of
// work gave), which sees tx's own writes and takes no second connection. The instance
// a miss makes is the caller's alone: refset does not see tx commit, so it never
// shares an instance that tx may roll back. Errors: those of Get, and ErrInvalidTx
// when tx is nil or a connection pool.
func (s *RefSet[T, ID]) GetTx(ctx context.Context, tx Tx, tok *RefToken[ID]) (Lease[T], error) {
	if err := cmp.Or(s.made("get"), checkTx(tx)); err != nil {
		return Lease[T]{}, err
	}
	ctx, end := refsetdriver.WithUnit(ctx, s.db, tx)
	defer end(false)
	return s.Get(ctx, tok)
}

// LoadTx is Load reading in the caller's transaction tx, as GetTx. Errors: those of
// Load, and ErrInvalidTx when tx is nil or a connection pool.
func (s *RefSet[T, ID]) LoadTx(ctx context.Context, tx Tx, id ID) (Lease[T], error) {
	if err := cmp.Or(s.made("load"), checkTx(tx)); err != nil {
		return Lease[T]{}, err
	}
	ctx, end := refsetdriver.WithUnit(ctx, s.db, tx)
	defer end(false)
	return s.Load(ctx, id)
}

// Load returns a lease on the object with that ID: Upgrade and Get in one call, and
// one round trip where they take two (none when the object is cached). Like Get it
// fills the cache and shares it: while any lease on the ID lives, a Load and a Get of
// it return the same instance without asking the database, and concurrent misses
// read it once. ErrNotFound if no object with that ID is stored. Use it to read an
// object one knows by its ID; Upgrade gives a token, for a hand-over or a Get later.
//
// Like Get, a miss reads the database's replica first, if it has one, and the primary
// when the replica does not have the object (see "Reads from a replica" in the
// package doc). Load has no token saying the primary had the object, but it needs
// none: objects never change, so a row the replica has is the object, and a row it
// lacks is asked of the primary, so a Load right after the Add that stored the object
// finds it, and ErrNotFound is the primary's answer. An ID that is not stored costs
// a read on each then; a hit, the usual case, costs one on the replica, off the
// primary, as Upgrade and Get do. Inside a unit of work it reads on the unit's
// transaction, as Get does.
//
// Errors: ErrNotFound, ErrInvalidID (the zero ID), ErrSchema (a stored row the type
// cannot hold), ErrUnavailable, ErrTimeout, ErrClosed, the context's error.
func (s *RefSet[T, ID]) Load(ctx context.Context, id ID) (Lease[T], error) {
	if err := cmp.Or(s.made("load"), checkID("load", id)); err != nil {
		return Lease[T]{}, err
	}
	return s.lease(ctx, "load", id)
}

// lease returns a lease on the object id from the cache, or loads it: from the
// replica first, since a row the replica has is the object however far behind it
// is (objects never change), and from the primary when the replica lacks it. op
// names the call in errors.
func (s *RefSet[T, ID]) lease(ctx context.Context, op string, id ID) (Lease[T], error) {
	read := func(ctx context.Context) (T, error) {
		return refsetdriver.ReadReplicaFirst(ctx, s.db, "get", false, func(q Querier) (T, error) { return s.store.Get(ctx, q, id) })
	}
	var b *box[T]
	var err error
	if _, inUnit := refsetdriver.UnitTx(ctx, s.db); inUnit {
		b, err = s.leaseInUnit(ctx, id, read)
	} else {
		b, err = s.cache.get(ctx, id, read)
	}
	if err != nil {
		return Lease[T]{}, ctxerr.Wrap(ctx, wrapOp(op+" "+idText(id), err))
	}
	return Lease[T]{b: b}, nil
}

// unitBox is the key of the instance a unit of work read of an object, among the
// unit's values (refsetdriver.UnitLocal).
type unitBox[ID comparable] struct {
	set any // the set's cache
	id  ID
}

// leaseInUnit is lease's instance inside a unit of work, read on the unit's
// transaction (ReadReplicaFirst reads there). The unit may roll back what it read, so
// an instance it makes is shared by the unit's reads alone until it commits, then by
// the set's cache.
func (s *RefSet[T, ID]) leaseInUnit(ctx context.Context, id ID, read func(context.Context) (T, error)) (*box[T], error) {
	key := unitBox[ID]{set: s.cache, id: id}
	if v, ok := refsetdriver.UnitLocal(ctx, s.db, key); ok {
		return v.(*box[T]), nil
	}
	b, publish, err := s.cache.getOwn(ctx, id, read)
	if err != nil || publish == nil {
		return b, err
	}
	refsetdriver.SetUnitLocal(ctx, s.db, key, b)
	refsetdriver.AfterCommit(ctx, s.db, publish)
	return b, nil
}

// Cached is the number of objects that have a live in-memory instance.
func (s *RefSet[T, ID]) Cached() int {
	if s == nil || s.cache == nil {
		return 0
	}
	return s.cache.len()
}

// Hold returns a command that records holder's hold on the object in the set's holds
// table, expiring ttl after the command writes it, by the database's clock (never
// when ttl is 0): the time the unit of work spent before the command, and a wait for
// its turn to write, do not come off the hold's life; what is left of the unit and its
// commit does. Use it in Add, Upgrade or a hand-over; holding again renews the expiry. The command fails
// with ErrInvalidCommand for an empty holder or a negative ttl, and with ErrNotFound
// if the object does not exist.
func (s *RefSet[T, ID]) Hold(holder string, ttl time.Duration) Command[ID] {
	return &holdCommand[T, ID]{set: s, holder: holder, ttl: ttl}
}

// Unhold returns a command that removes holder's hold on the object. It fails with
// ErrNotFound if holder has none, so a hand-over never releases what it did not hold.
func (s *RefSet[T, ID]) Unhold(holder string) Command[ID] {
	return &unholdCommand[T, ID]{set: s, holder: holder}
}

func (s *RefSet[T, ID]) observer() Observer { return s.caps.obs }

func (s *RefSet[T, ID]) undoScope(ctx context.Context, tx Tx) *undoScope {
	return undoScopeOf(ctx, s.joined(ctx, tx))
}

// runCommands runs a hand-over's commands: in a new transaction when tx is nil,
// pipelined when they are all Exec commands and the database can pipeline them,
// otherwise under a savepoint of tx. A panicking command rolls back and goes on
// panicking.
func (s *RefSet[T, ID]) runCommands(ctx context.Context, tx Tx, id ID, cmds []Command[ID]) error {
	tx = s.joined(ctx, tx)
	if ran, err := s.pipelined(ctx, tx, id, nil, cmds); ran {
		return err
	}
	return s.within(ctx, tx, func(ctx context.Context, tx Tx) error { return s.runAll(ctx, tx, id, cmds) })
}

// joined is the transaction a call runs in: tx, the caller's, when it gave one;
// otherwise that of the unit of work on the set's database that ctx carries (see
// InTx), or nil for a transaction of the call's own.
func (s *RefSet[T, ID]) joined(ctx context.Context, tx Tx) Tx {
	if tx == nil {
		tx, _ = refsetdriver.UnitTx(ctx, s.db)
	}
	return tx
}

// within runs fn in a new unit of work when tx is nil, and under a savepoint of tx
// otherwise; fn's context carries the unit, for the calls its commands make.
func (s *RefSet[T, ID]) within(ctx context.Context, tx Tx, fn func(ctx context.Context, tx Tx) error) error {
	if tx == nil {
		return InTx(ctx, s.db, fn)
	}
	return inSavepoint(ctx, s.db, tx, fn)
}

// Lease gives read access to an object of a set. Value returns the set's one
// instance, shared by every lease on that ID: it must not be modified. Keep the lease
// (or the value) only as long as it is needed; the instance is freed after.
type Lease[T any] struct {
	b *box[T]
}

// Value is the leased object. Read it; never modify it.
func (l Lease[T]) Value() *T {
	if l.b == nil {
		return nil
	}
	return &l.b.value
}

func checkID[ID comparable](op string, id ID) error {
	var zero ID
	if id == zero {
		return opError(op, ErrInvalidID, fmt.Errorf("the zero %T names no object", id))
	}
	return nil
}

// checkCall refuses what a call cannot run with: a tx that is not a transaction,
// for a call in the caller's (inTx); the zero ID; a nil command.
func checkCall[ID comparable](op string, inTx bool, tx Tx, id ID, cmds []Command[ID]) error {
	if inTx {
		if err := checkTx(tx); err != nil {
			return err
		}
	}
	if err := checkID(op, id); err != nil {
		return err
	}
	return checkCommands(cmds)
}

// Arg returns id as database/sql takes a query argument: a byte array such as
// [32]byte becomes a []byte; anything else is returned as it is.
func Arg[ID comparable](id ID) any {
	switch v := any(id).(type) {
	case string, int64, int32, int, uint32, []byte:
		return v
	case [32]byte:
		return v[:]
	}
	rv := reflect.ValueOf(id)
	if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return b
	}
	return id
}
