package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refsetdriver"
)

// Group makes a store's units of work share write transactions (group commit, see
// the package doc). The zero value takes the defaults.
type Group struct {
	// MaxUnits: a group takes no more units once this many ran in it. Zero: 64.
	MaxUnits int
	// MaxAge: a group takes no more units once it has been open this long. Zero:
	// 10 ms.
	MaxAge time.Duration
	// Evict: a unit that joined a group holding other units' work, and has sent no
	// statement for this long (it blocks, perhaps on the return of a unit before it,
	// which waits for the group's commit), is rolled back (ErrConflict, which
	// refset.InTx runs again), so the units before it commit without it. A unit busy
	// with statements is never evicted, however long it takes. Zero: 250 ms.
	Evict time.Duration
	// InterruptRollsBack says the database rolls the whole transaction back when a
	// statement is cut short by its context (SQLite's sqlite3_interrupt does, for a
	// write in an explicit transaction). A unit's statements then run whatever its
	// context while the transaction holds other units' work; its context ends it
	// between statements instead.
	InterruptRollsBack bool
	// Conn takes the connection a group's transaction begins on (SQLite's one
	// writer), waiting for it while ctx lasts: reads may hold it, on a database whose
	// reads and writes share one pool. Required.
	Conn func(ctx context.Context) (*sqlx.Conn, error)
	// Watch, if not nil, is called on a group's connection once its transaction
	// began, and returns what reports whether the database has since ended that
	// transaction on its own, which database/sql does not see: SQLite rolls the
	// whole transaction back when a write in it is interrupted, and may on a full
	// disk or an I/O error. Statements sent after that would each commit on their
	// own. nil: the database never does.
	Watch func(conn *sql.Conn) (ended func() bool)
	// Classify, if not nil, tells what a statement of a unit does to the
	// transaction (Statement); nil: every statement may write (StatementWrites).
	// It is called for every statement of a unit, before it is sent: it must not
	// query.
	Classify func(query string) Statement
	// Apart, if not nil, is asked on a group's transaction before the writer first
	// passes on inside it to another unit, and again after a unit sent a
	// StatementSchema: true, and the group takes no other unit (it commits, and the
	// next unit begins a group of its own). changed says a unit sent a
	// StatementSchema since Apart was last asked, in this group or an earlier one.
	// SQLite's says so while the schema has a deferred foreign key: a violation one
	// unit leaves is checked only at COMMIT, and a later unit of the group could make
	// the reference good before it, the unit told it committed when, alone, it
	// would have failed. An error counts as true.
	Apart func(ctx context.Context, tx *sqlx.Tx, changed bool) (bool, error)
}

// Statement is what a statement of a unit does to the transaction it shares
// (Group.Classify).
type Statement int

const (
	// StatementWrites may write: with Group.InterruptRollsBack it runs to its end
	// whatever its context, once other units' work is in the transaction.
	StatementWrites Statement = iota
	// StatementReads only reads: cut short by its context it fails alone, and the
	// transaction stands (SQLite rolls the whole transaction back only for an
	// interrupted write), so it runs with its context.
	StatementReads
	// StatementSchema may change the schema (DDL): Group.Apart is asked again
	// before the writer passes on, told the schema changed.
	StatementSchema
	// StatementAlone leaves the transaction in a state every later unit would
	// inherit, and that would let another unit's work decide this one's outcome
	// (SQLite's PRAGMA defer_foreign_keys, DDL that declares a deferred foreign
	// key): it runs only in a unit that has the transaction to itself. Sent by a
	// group's first unit, it ends the group after that unit. Sent by a unit that
	// joined a group holding others' work, it is not sent: the unit is rolled back
	// with ErrConflict marked refsetdriver.RunAlone, which refset.InTx runs again in
	// a transaction of its own.
	StatementAlone
)

// groupSavepoint names the savepoint each unit of a group runs in. A unit's own
// statements may not name it (Enter refuses them): releasing it early, or rolling back
// to it twice, would leave the unit's failure nothing to undo but the whole group.
const groupSavepoint = "refset_group_unit"

// grouper hands the writer to one unit at a time and commits their work in groups.
// The unit that has the writer holds the turn; every other waits for it. A unit that
// ends passes the turn on: to a unit already waiting, inside the same transaction,
// while the group may grow; otherwise it ends the group itself and frees the writer,
// for a waiting unit to begin a new group.
type grouper struct {
	e   *Engine
	cfg Group

	// free holds the writer while no unit has it, nor ends a group: the unit that
	// takes it begins a group.
	free chan struct{}
	// handOff passes the writer, inside its group's transaction, to a unit waiting
	// for it. It is unbuffered: only a unit already waiting can take it, and when
	// none is, the group ends.
	handOff chan *batch

	// schema: a unit sent a StatementSchema since Group.Apart was last asked.
	schema  atomic.Bool
	waiting atomic.Int64 // units waiting for the writer
	joiners atomic.Int64 // of them, those that may join a group (not alone)
	commits atomic.Int64 // groups committed
	units   atomic.Int64 // units they committed
}

// GroupStats is what a database's group commit did so far: the groups it committed
// and the units of work in them, and the units now waiting for the writer. All are
// zero without group commit.
type GroupStats struct{ Commits, Units, Waiting int64 }

// Stats is e's GroupStats.
func Stats(e *Engine) GroupStats {
	if e == nil || e.group == nil {
		return GroupStats{}
	}
	g := e.group
	return GroupStats{Commits: g.commits.Load(), Units: g.units.Load(), Waiting: g.waiting.Load()}
}

// batch is one group: its transaction and what its units learn of its end. Only the
// turn's holder touches it, until done is closed; err is set before.
type batch struct {
	conn    *sqlx.Conn // Group.Conn's, closed once tx ended
	tx      *sqlx.Tx
	ended   func() bool // Group.Watch's: the database ended tx on its own
	started time.Time
	units   int   // units that ran in it
	kept    int   // units whose work stands in it, waiting for its commit
	lost    error // why the transaction is lost, if it is
	alone   bool  // its unit runs alone, or Group.Apart said so: no other joins it
	checked bool  // Group.Apart was asked in it
	// isolated: its first unit sent a StatementAlone, so no other joins it. Set by
	// Enter, which a unit's goroutines may call together.
	isolated atomic.Bool
	done     chan struct{}
	err      error // the group's outcome, for its kept units
}

func newGrouper(e *Engine, cfg Group) *grouper {
	if cfg.MaxUnits <= 0 {
		cfg.MaxUnits = 64
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 10 * time.Millisecond
	}
	if cfg.Evict <= 0 {
		cfg.Evict = 250 * time.Millisecond
	}
	g := &grouper{e: e, cfg: cfg, free: make(chan struct{}, 1), handOff: make(chan *batch)}
	g.free <- struct{}{}
	return g
}

// begin waits for the turn and gives the unit its savepoint in the group's
// transaction, beginning that transaction when the unit is a group's first.
func (g *grouper) begin(ctx context.Context) (refsetdriver.DatabaseTx, error) {
	b, alone, err := g.turn(ctx)
	if err != nil {
		return nil, err
	}
	// The shared transaction and the unit's own bookkeeping outlive the unit's
	// context: database/sql would roll back a transaction whose context ended, with
	// every other unit's work in it.
	bg := context.WithoutCancel(ctx)
	if b == nil {
		if b, err = g.open(ctx, alone); err != nil {
			g.release()
			return nil, err
		}
	}
	b.units++
	shared := b.kept > 0
	// A group's first unit runs without a savepoint: if it fails, the whole
	// transaction is rolled back (abandon), which loses nothing else, and the group
	// is passed to no one. Every later unit so finds the first one's work kept. A
	// unit alone, the common case without contention, pays nothing for group commit
	// but the turn.
	if shared {
		if _, err := b.tx.ExecContext(bg, "SAVEPOINT "+groupSavepoint); err != nil {
			b.lose(err)
			g.finish(b)
			return nil, err
		}
	}
	m := &member{g: g, b: b, ctx: ctx, shared: shared, before: b.kept}
	m.mu.Lock() // what ends the unit later waits until it is set up
	m.stopCtx = context.AfterFunc(ctx, func() { m.abandon(ctx.Err()) })
	if m.shared {
		m.touch()
		m.evict = time.AfterFunc(g.cfg.Evict, m.watch)
	}
	m.mu.Unlock()
	return sqlstore.NewMemberTx(ctx, b.tx, g.e.c.DB, g.e.c.Statements, g.e.c.Tx, m), nil
}

// open begins a group's transaction. It waits for the writer's connection while ctx
// lasts, as a unit without group commit does; the transaction itself outlives ctx
// (see begin). Its BEGIN waits at most the database's busy timeout, for another
// process's write.
func (g *grouper) open(ctx context.Context, alone bool) (*batch, error) {
	conn, err := g.cfg.Conn(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTxx(context.WithoutCancel(ctx), nil)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	ended := func() bool { return false }
	if g.cfg.Watch != nil {
		ended = g.cfg.Watch(conn.Conn)
	}
	return &batch{conn: conn, tx: tx, ended: ended, started: time.Now(), alone: alone, done: make(chan struct{})}, nil
}

// turn waits for the turn: the group to join, or nil to begin one. alone says the
// unit must run in a transaction of its own: its context was marked by
// refsetdriver.Alone when the commit it shared before was refused. Such a unit takes
// only the free writer, never a group handed off.
func (g *grouper) turn(ctx context.Context) (b *batch, alone bool, err error) {
	alone = refsetdriver.MustRunAlone(ctx)
	select {
	case <-g.free:
		return nil, alone, nil
	default:
	}
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	join := g.handOff
	if alone {
		join = nil // never ready
	} else {
		g.joiners.Add(1)
		defer g.joiners.Add(-1)
	}
	select {
	case <-g.free:
		return nil, alone, nil
	case b := <-join:
		return b, alone, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// finish passes the turn on once a unit of b ended: to a unit already waiting, in
// b, while b stands and may grow; otherwise it ends b and frees the writer.
func (g *grouper) finish(b *batch) {
	if b.lost == nil && b.ended() {
		// Passed on, the transaction would be a new one: the next unit's SAVEPOINT
		// would begin it and its RELEASE commit it there and then.
		b.lose(errEndedByDatabase)
	}
	if b.lost == nil && !b.alone && !b.isolated.Load() && b.units < g.cfg.MaxUnits && time.Since(b.started) < g.cfg.MaxAge {
		// A unit counted as a joiner is in turn's select, or a few instructions
		// from it (on its way in, or out once its context ended): wait those out,
		// so that a unit Stats counts as waiting when the group may grow joins it.
		for g.joiners.Load() > 0 && !g.apart(b) {
			select {
			case g.handOff <- b:
				return
			default:
				runtime.Gosched()
			}
		}
	}
	g.end(b)
	g.release()
}

// apart reports whether b must take no other unit (Group.Apart), asked (by finish)
// only when a unit waits to join it, once per group and again after a unit's
// StatementSchema. A unit alone, the common case without contention, pays nothing
// for it.
func (g *grouper) apart(b *batch) bool {
	if g.cfg.Apart == nil {
		return false
	}
	// Taken before Apart reads the schema: a StatementSchema after it is seen next
	// time.
	changed := g.schema.Swap(false)
	if b.checked && !changed {
		return false
	}
	b.checked = true
	if apart, err := g.cfg.Apart(context.Background(), b.tx, changed); apart || err != nil {
		b.alone = true
		return true
	}
	return false
}

// end commits b's transaction, or rolls it back when no unit's work stands in it or
// it is lost, and tells its units.
func (g *grouper) end(b *batch) {
	switch {
	case b.lost != nil:
		_ = b.tx.Rollback()
		b.err = fmt.Errorf("%s: group commit: %w: the transaction of this unit's group was rolled back (%w); nothing of the unit committed, and refset.InTx runs it again", g.e.c.Name, sentinel.ErrConflict, b.lost)
	case b.kept == 0:
		_ = b.tx.Rollback()
	default:
		if err := b.tx.Commit(); err != nil {
			b.err = fmt.Errorf("%s: group commit of %d units: %w", g.e.c.Name, b.kept, err)
			if b.kept > 1 && refusedWrite(g.e.c.DB.TranslateError(err, "COMMIT")) {
				// What one unit wrote, checked only at COMMIT (a deferred foreign
				// key), failed every unit's: each runs again alone, so that the one
				// that wrote it fails, and only it.
				b.err = refsetdriver.RunAlone(fmt.Errorf("%s: group commit: %w: the COMMIT this unit shared with %d others was refused (%v) for what one of them wrote; nothing of the unit committed, and refset.InTx runs it again in a transaction of its own",
					g.e.c.Name, sentinel.ErrConflict, b.kept-1, err))
			}
			break
		}
		g.commits.Add(1)
		g.units.Add(int64(b.kept))
	}
	_ = b.conn.Close()
	close(b.done)
}

// release frees the writer, for a waiting unit, or the next to come, to begin a group.
func (g *grouper) release() { g.free <- struct{}{} }

// errUnitRolledBack is why a group's transaction ends when its only unit so far,
// which runs without a savepoint, is rolled back: no kept unit ever sees it.
var errUnitRolledBack = errors.New("its only unit was rolled back")

// errEndedByDatabase is why a group's transaction is lost when the database ended it
// on its own (Group.Watch).
var errEndedByDatabase = errors.New("the database rolled it back: a write of it was interrupted, or failed with a full disk or an I/O error")

// refusedWrite reports whether err, translated, refuses what was written (a
// constraint), rather than the transaction (a conflict) or the database.
func refusedWrite(err error) bool {
	for _, s := range []error{sentinel.ErrConstraint, sentinel.ErrReferenced, sentinel.ErrNotFound, sentinel.ErrDuplicate} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// lose marks b's transaction as lost: a statement that was to keep a unit's work
// apart failed, which on SQLite means the database rolled the whole transaction back.
func (b *batch) lose(err error) {
	if b.lost == nil {
		b.lost = err
	}
}

// member is one unit of work in a group: sqlstore.Tx runs its statements through it.
type member struct {
	g      *grouper
	b      *batch
	ctx    context.Context
	shared bool // other units' work was in the transaction when it began
	before int  // how many units' work

	// mu is held for reading while a statement of the unit runs, and for writing
	// while the unit ends, which waits for the statement.
	mu      sync.RWMutex
	ended   bool
	why     error // what statements fail with once the unit ended
	stopCtx func() bool
	evict   *time.Timer // a shared unit's watch for idleness

	active   atomic.Int64 // when a statement of the unit last began or ended (UnixNano)
	inFlight atomic.Int32 // statements of the unit running
}

// touch notes that the unit is active now.
func (m *member) touch() { m.active.Store(time.Now().UnixNano()) }

// watch evicts the unit if it has been idle for Group.Evict, and looks again later
// otherwise.
func (m *member) watch() {
	evict := m.g.cfg.Evict
	idle := time.Since(time.Unix(0, m.active.Load()))
	if m.inFlight.Load() > 0 || idle < evict || m.reading() {
		m.mu.RLock()
		if !m.ended {
			m.evict.Reset(evict - min(idle, evict/2))
		}
		m.mu.RUnlock()
		return
	}
	m.abandon(fmt.Errorf("%s: group commit: %w: the unit sent no statement for %v while %d units before it waited for their commit; it was rolled back, and refset.InTx runs it again", m.g.e.c.Name, sentinel.ErrConflict, evict, m.before))
}

// reading reports whether the database is busy with a query of the unit that
// returned its rows but is still computing them: a query's statement ends, for the
// unit, when its rows are handed over, and the database works on them as the caller
// reads them (SQLite computes an aggregate's one row in its first step, inside
// Scan). While a driver works on a row it holds the connection, so a statement sent
// to it then waits: a probe that waits longer than a statement takes on an idle
// connection says the unit is reading, and counts as activity.
func (m *member) reading() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.ended {
		return false
	}
	start := time.Now()
	if _, err := m.b.tx.ExecContext(context.WithoutCancel(m.ctx), "SELECT 1"); err != nil {
		return false
	}
	if time.Since(start) < probeWait {
		return false
	}
	m.touch()
	return true
}

// probeWait is how long a probe of the connection (unit.reading) may take before it
// is taken to have waited for a query's rows: far more than SELECT 1 takes on an idle
// connection, little beside Group.Evict.
const probeWait = 2 * time.Millisecond

var _ sqlstore.Member = (*member)(nil)

// Enter lets a statement of the unit run: not once it ended, nor when its context
// has, nor one that would end the shared transaction or touch the unit's savepoint.
func (m *member) Enter(ctx context.Context, query string) (context.Context, func(), error) {
	m.mu.RLock()
	err := m.why
	switch {
	case m.ended:
	case ctx.Err() != nil:
		err = ctx.Err()
	case sqltext.EndingStatement(query) != "" || mentions(query, groupSavepoint):
		err = fmt.Errorf("%s: %w: %q: the unit of work shares its transaction with others (group commit); only refset ends it, and the name %s is refset's", m.g.e.c.Name, sentinel.ErrInvalidCommand, query, groupSavepoint)
	case m.b.lost == nil && m.b.ended():
		// Sent now, the statement would commit on its own.
		m.b.lose(errEndedByDatabase)
		fallthrough
	case m.b.lost != nil:
		err = fmt.Errorf("%s: group commit: %w: the unit's transaction is lost (%w); nothing of the unit will commit, and refset.InTx runs it again", m.g.e.c.Name, sentinel.ErrConflict, m.b.lost)
	default:
		kind := StatementWrites
		if m.g.cfg.Classify != nil {
			kind = m.g.cfg.Classify(query)
		}
		switch kind {
		case StatementSchema:
			m.g.schema.Store(true)
		case StatementAlone:
			if !m.shared {
				// The group's first unit: the group takes no other.
				m.b.isolated.Store(true)
				m.g.schema.Store(true) // DDL that declares a deferred key, perhaps
				break
			}
			m.mu.RUnlock()
			err := refsetdriver.RunAlone(fmt.Errorf("%s: group commit: %w: %q must run in a transaction of the unit's own, and the unit joined one holding %d other units' work; it was rolled back, and refset.InTx runs it again alone", m.g.e.c.Name, sentinel.ErrConflict, query, m.before))
			m.abandon(err)
			return nil, nil, err
		}
		if !m.shared {
			return ctx, m.mu.RUnlock, nil
		}
		if m.g.cfg.InterruptRollsBack && kind != StatementReads {
			// Cut short, the statement would take the other units' work with it. A
			// read cut short fails alone.
			ctx = context.WithoutCancel(ctx)
		}
		m.inFlight.Add(1)
		m.touch()
		return ctx, func() {
			m.touch()
			m.inFlight.Add(-1)
			m.mu.RUnlock()
		}, nil
	}
	m.mu.RUnlock()
	return nil, nil, err
}

// Commit keeps the unit's work in the group and returns once the group's commit
// did: nil only when it committed.
func (m *member) Commit() error {
	// As database/sql's Tx.Commit: a unit whose context ended rolls back.
	if err := m.ctx.Err(); err != nil && m.abandon(err) {
		return err
	}
	m.mu.Lock()
	if m.ended {
		defer m.mu.Unlock()
		return m.why
	}
	m.end(sql.ErrTxDone)
	b := m.b
	if !m.shared {
		b.kept++
	} else if _, err := b.tx.ExecContext(context.WithoutCancel(m.ctx), "RELEASE "+groupSavepoint); err != nil {
		b.lose(err)
	} else {
		b.kept++
	}
	m.mu.Unlock()
	m.g.finish(b)
	<-b.done
	if b.err != nil {
		return b.err
	}
	return nil
}

// Rollback undoes the unit's work alone; the group goes on without it.
func (m *member) Rollback() error {
	if !m.abandon(sql.ErrTxDone) {
		return sql.ErrTxDone
	}
	return nil
}

// abandon rolls the unit back to its savepoint unless it ended; why is what its
// statements fail with from then on. It reports whether it rolled back.
func (m *member) abandon(why error) bool {
	m.mu.Lock()
	if m.ended {
		m.mu.Unlock()
		return false
	}
	m.end(why)
	b := m.b
	undo := context.WithoutCancel(m.ctx)
	if !m.shared {
		// No savepoint, and no other unit's work: the transaction goes, and the next
		// unit begins a new one.
		b.lose(errUnitRolledBack)
	} else if _, err := b.tx.ExecContext(undo, "ROLLBACK TO "+groupSavepoint); err != nil {
		b.lose(err)
	} else if _, err := b.tx.ExecContext(undo, "RELEASE "+groupSavepoint); err != nil {
		b.lose(err)
	}
	m.mu.Unlock()
	m.g.finish(b)
	return true
}

// end marks the unit ended and stops what would end it later; m.mu is held.
func (m *member) end(why error) {
	m.ended, m.why = true, why
	m.stopCtx()
	if m.evict != nil {
		m.evict.Stop()
	}
}

// mentions reports whether s holds name, in any case (SQLite's names ignore case).
func mentions(s, name string) bool {
	for i := 0; i+len(name) <= len(s); i++ {
		if s[i]|0x20 == name[0] && strings.EqualFold(s[i:i+len(name)], name) {
			return true
		}
	}
	return false
}
