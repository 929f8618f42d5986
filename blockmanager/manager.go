package blockmanager

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"reflect"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
)

//go:embed sql
var migrations embed.FS

// Config tunes a Manager. The zero value is a sane default.
type Config struct {
	// Grace is how long a new block may stay unreferenced before clean-up may take
	// it. Zero means one minute.
	Grace time.Duration
	// ForkTTL is how long the chain controller keeps a fork head that is not
	// extended; then clean-up prunes the fork down to the committed chain. Zero means
	// ten minutes.
	ForkTTL time.Duration
	// PageSize is how many blocks a branch walk reads in its first query. Each
	// page the branch fills is followed by one twice as large, up to 16 times
	// PageSize. Zero means 1000; more than 1<<20 (1,048,576) means 1<<20.
	PageSize int
	// Parts names the program's own tables whose rows are parts of a block, declared
	// REFERENCES blocks (header_signature) ON DELETE CASCADE (a block's receipts):
	// deleted with their block, they keep nothing alive. The manager declares its own
	// (block_batches, block_transactions); a cascading key from any other table is
	// taken for a holder declared CASCADE by mistake, and warned of at every Open (see
	// cleanup.Config.Parts, and "Tables of your own" in the package doc).
	Parts []string
	// Logger receives the block tables' clean-up passes (see cleanup.Config.Logger).
	// Nil means the database's logger (the stores' Options.Logger), if any.
	Logger *slog.Logger
}

// maxPageSize is the largest Config.PageSize: a walk's pages, up to 16 times as
// large, stay within what the databases take as a row count (PostgreSQL binds a
// LIMIT of a 32-bit integer), and their doubling within an int.
const maxPageSize = 1 << 20

// Manager is Sawtooth's BlockManager on a RefSet: blocks live in the database,
// linked to their predecessors by a FOREIGN KEY, and it keeps no state of its own,
// so a new process on the same database carries on where the last one stopped.
type Manager struct {
	db        refset.Database
	drv       refsetdriver.Driver
	stmt      statements
	blocks    *refset.RefSet[Block, string]
	writes    refset.SetStore[storedBlock, string] // the set's table, with each block's segment
	collector *cleanup.Collector
	pageSize  int
	pagePart  int // the fewest blocks a part of a segment page holds; 0: pages are read whole
	forkTTL   time.Duration
	// locks prefixes the names of the manager's locks (see lock) with its blocks
	// table, qualified with its schema where the database has schemas.
	locks string
}

// Open creates the block tables if needed (on a database of store/sqlite or
// store/postgres; anything else is refset.ErrInvalidConfig),
// installs clean-up on them and returns the manager.
func Open(ctx context.Context, db refset.Database, cfg Config) (*Manager, error) {
	m := &Manager{db: db, pageSize: cfg.PageSize, forkTTL: cfg.ForkTTL}
	if m.pageSize <= 0 {
		m.pageSize = 1000
	}
	m.pageSize = min(m.pageSize, maxPageSize)
	if m.forkTTL <= 0 {
		m.forkTTL = 10 * time.Minute
	}
	grace := cfg.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	collect := cleanup.Config{Table: "blocks", Grace: grace, Logger: cfg.Logger,
		Parts: append([]string{"block_batches", "block_transactions"}, cfg.Parts...)}
	drv, err := refsetdriver.Of(db)
	if err != nil {
		return nil, fmt.Errorf("blockmanager: open: %w", err)
	}
	m.drv, m.stmt = drv, newStatements(drv)
	if drv.InProcess() {
		m.pagePart = minPagePart
	}
	if err = m.migrate(ctx); err != nil {
		return nil, err
	}
	var blocks refset.SetStore[Block, string]
	if blocks, err = store.NewStore[Block, string](ctx, db, store.Config{Table: "blocks"}); err == nil {
		m.blocks = refset.New(blocks)
		m.writes, err = store.NewStore[storedBlock, string](ctx, db, store.Config{Table: "blocks"})
	}
	if err == nil {
		m.collector, err = store.NewCollector(ctx, db, collect)
	}
	if err != nil {
		return nil, fmt.Errorf("blockmanager: open: %w", err)
	}
	m.locks = "blockmanager:" + m.collector.Table() + ":"
	return m, nil
}

func (m *Manager) migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrations, "sql/"+m.drv.Name())
	if err != nil {
		return err
	}
	migrator, err := schema.New(m.db, schema.Config{Components: []schema.Component{{Name: "blockmanager", Migrations: sub}}})
	if err == nil {
		_, err = migrator.Migrate(ctx, schema.DirectionUp, nil)
	}
	if err != nil {
		return fmt.Errorf("blockmanager: creating the tables: %w", err)
	}
	return nil
}

// Blocks is the set the blocks live in.
func (m *Manager) Blocks() *refset.RefSet[Block, string] {
	if m == nil {
		return nil
	}
	return m.blocks
}

// Collector is the blocks' clean-up: run its Collect (or Run) to prune what nothing
// references any more.
func (m *Manager) Collector() *cleanup.Collector {
	if m == nil {
		return nil
	}
	return m.collector
}

// Database is the database the blocks live in.
func (m *Manager) Database() refset.Database {
	if m == nil || m.db == nil {
		return nil // not a nil interface holding nil
	}
	return m.db
}

func (m *Manager) sql(q string) string { return m.drv.Rebind(q) }

// opened fails op on a Manager that Open did not make (the zero value, or nil), which
// has no database or set to work on: a typed error rather than a nil pointer's panic.
// Its Completer and ChainController fail through it too.
func (m *Manager) opened(op string) error {
	if m == nil || m.db == nil {
		return fmt.Errorf("refset/blockmanager: %s: %w: the Manager was not opened; make it with blockmanager.Open", op, refset.ErrInvalidConfig)
	}
	return nil
}

// lock serialises, until tx ends, the transactions that lock the same key on the
// same blocks table: with a lock of the database's (refsetdriver.TxLocks), where it
// runs write transactions side by side; SQLite's one writer already serialises
// every write transaction. The lock's name holds the schema-qualified table: the
// database's locks are one namespace, which managers of other tables (in other
// schemas) must not wait in.
func (m *Manager) lock(ctx context.Context, tx refset.Tx, key string) error {
	if m.stmt.lock == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, m.stmt.lock, m.locks+key)
	return err
}

// gateKey names the lock of the arrivals gate, among the manager's (see lock).
const gateKey = "arrivals-gate"

// The arrivals gate keeps a block from waiting for a predecessor that has just
// arrived. Two kinds of transaction meet at it, until they end:
//
//   - an arrival (Put, a Receive that links its block) stores blocks and then looks
//     for blocks waiting for them: it passes the gate shared, before that look;
//   - a decision that a block must wait (its predecessor is missing or itself
//     waiting) is made exclusive, and checked again once the gate is held.
//
// So either the waiting block committed before the arrival looked (and is found), or
// the arrival committed before the decision was checked again (and the block does
// not wait). One lock a transaction, whatever the number of blocks, where a lock per
// block made a Put of a thousand blocks take a thousand. On SQLite the one writer
// already serialises both.
func (m *Manager) passGate(ctx context.Context, tx refset.Tx, exclusive bool) error {
	if exclusive {
		return m.lock(ctx, tx, gateKey)
	}
	if m.stmt.gateShared == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, m.stmt.gateShared, m.locks+gateKey)
	return err
}

// Put stores a branch, oldest block first, in one transaction, and runs cmds on its
// tip in the same transaction (hold it there: a branch nothing references is
// collected after the grace period). Blocks already stored are kept as they are, so
// Put is idempotent and a branch may overlap what is stored, the Completer's pending
// blocks included, even while other callers store the same blocks. A block that
// waited in the Completer for a block Put stores is linked to it and handed to the
// ChainController in the same transaction, as the Completer does when a predecessor
// arrives, and so is whatever waited for that block; otherwise it would wait for a
// block that will never arrive again. A waiting block that is not in the branch and
// does not follow the block it waited for (its number is wrong) is no longer pending,
// and left to clean-up, rather than fail the Put. It fails with ErrEmptyBranch,
// refset.ErrInvalidID (an empty or malformed ID, see Block), ErrMissingPredecessor
// (the first block's predecessor is not stored; NullBlockID always is),
// ErrBrokenChain (a block does not follow the one before it, is its own predecessor,
// is in the branch twice, or is stored with another number or predecessor) or refset.ErrInvalidCommand (a nil command), and then stores
// nothing; and with the errors of refset.InTx (ErrConflict after retries,
// ErrUnavailable, ErrTimeout, ErrClosed, the context's error, what a command
// returned). A command that panics rolls the Put back and the panic goes on.
func (m *Manager) Put(ctx context.Context, branch []Block, cmds ...refset.Command[string]) (*refset.RefToken[string], error) {
	if err := m.opened("put"); err != nil {
		return nil, err
	}
	var tip *refset.RefToken[string]
	full := false
	put := func(ctx context.Context, tx refset.Tx) error {
		var err error
		tip, err = m.putTx(ctx, tx, branch, full, cmds)
		// A block found stored when written: look for the blocks stored among every
		// block when InTx runs the Put again (see insertBlocks).
		full = full || errors.Is(err, errStoredMeanwhile)
		return err
	}
	err := refset.InTx(ctx, m.db, put)
	// Each time a block is found stored when written, another transaction stored
	// it, and committed: the next run finds it stored, and one block fewer to write.
	// So callers racing to store one branch all get through, however many they are,
	// where InTx's few retries of a conflict would leave some failing.
	for range branch {
		if !errors.Is(err, errStoredMeanwhile) || ctx.Err() != nil {
			break
		}
		err = refset.InTx(ctx, m.db, put)
	}
	return tip, err
}

// PutTx is Put inside the caller's transaction. Errors: those of Put, and
// refset.ErrInvalidTx when tx is nil or a connection pool. After any error but
// ErrEmptyBranch, ErrInvalidID, ErrMissingPredecessor, ErrBrokenChain and
// refset.ErrInvalidCommand for a nil command, which PutTx finds before it writes
// (tx is then as it was), roll tx back: part of the branch may be written in
// it. ErrConflict says another transaction stored one of the branch's blocks first:
// run the transaction again (refset.InTx does).
func (m *Manager) PutTx(ctx context.Context, tx refset.Tx, branch []Block, cmds ...refset.Command[string]) (*refset.RefToken[string], error) {
	if err := m.opened("put"); err != nil {
		return nil, err
	}
	return m.putTx(ctx, tx, branch, false, cmds)
}

// checkTx refuses what is not a transaction, as refset's *Tx calls do: nil (a nil
// pointer too), and a connection pool or connection, on which each statement would
// commit on its own.
func checkTx(op string, tx refset.Tx) error {
	switch tx.(type) {
	case nil:
		return fmt.Errorf("blockmanager: %s: %w: nil transaction", op, refset.ErrInvalidTx)
	case interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}:
		return fmt.Errorf("blockmanager: %s: %w: %T is a connection pool, not a transaction: pass the *sql.Tx you began on it", op, refset.ErrInvalidTx, tx)
	}
	if v := reflect.ValueOf(tx); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("blockmanager: %s: %w: nil %T", op, refset.ErrInvalidTx, tx)
	}
	return nil
}

// checkBranch refuses, before anything is read or written, a branch no chain can
// hold: each block must pass checkBlock, follow the one before it, and be in the
// branch once.
func checkBranch(branch []Block) error {
	if len(branch) == 0 {
		return ErrEmptyBranch
	}
	seen := make(map[string]int, len(branch))
	for i, b := range branch {
		if err := checkBlock(b); err != nil {
			return err
		}
		if j, ok := seen[b.HeaderSignature]; ok {
			return fmt.Errorf("%w: %s is in the branch twice, at %d and %d", ErrBrokenChain, shown(b.HeaderSignature), j, i)
		}
		seen[b.HeaderSignature] = i
		if i > 0 {
			if err := follows(b, branch[i-1].HeaderSignature, branch[i-1].BlockNum); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkCommands refuses, before anything is written, a nil command (a nil interface,
// or one holding a nil function or pointer), which the set would refuse only once
// the branch is written: in a caller's transaction (PutTx), one it might commit.
func checkCommands(cmds []refset.Command[string]) error {
	for i, c := range cmds {
		nilCmd := c == nil
		if v := reflect.ValueOf(c); !nilCmd && (v.Kind() == reflect.Func || v.Kind() == reflect.Pointer) {
			nilCmd = v.IsNil()
		}
		if nilCmd {
			return fmt.Errorf("blockmanager: put: %w: command %d is nil", refset.ErrInvalidCommand, i)
		}
	}
	return nil
}

// putTx is PutTx; with full, it looks for the branch's stored blocks among every
// block, not only the pending ones, even when its first block is new (see lookUp).
func (m *Manager) putTx(ctx context.Context, tx refset.Tx, branch []Block, full bool, cmds []refset.Command[string]) (*refset.RefToken[string], error) {
	if err := checkTx("put", tx); err != nil {
		return nil, err
	}
	if err := checkBranch(branch); err != nil {
		return nil, err
	}
	if err := checkCommands(cmds); err != nil {
		return nil, err
	}
	// An arrival passes the arrivals gate (see passGate) before it looks for what
	// waits for its blocks, and before it takes any other lock: with the first
	// block's predecessor, or on its own before a genesis block.
	first := branch[0]
	segment := newSegment()
	if first.PreviousBlockID == NullBlockID {
		if err := m.passGate(ctx, tx, false); err != nil {
			return nil, err
		}
	} else {
		prev, err := m.keepPredecessor(ctx, tx, first.PreviousBlockID, true)
		if errors.Is(err, refset.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s, predecessor of %s: %w", ErrMissingPredecessor, shown(first.PreviousBlockID), shown(first.HeaderSignature), refset.ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if err := follows(first, first.PreviousBlockID, prev.num); err != nil {
			return nil, err
		}
		segment = prev.joins
	}
	ids := make([]string, len(branch))
	inBranch := make(map[string]bool, len(branch))
	for i, b := range branch {
		ids[i] = b.HeaderSignature
		inBranch[b.HeaderSignature] = true
	}
	seen, err := m.lookUp(ctx, tx, ids, full)
	if err != nil {
		return nil, err
	}
	if err := m.checkStored(ctx, tx, branch, seen.stored); err != nil {
		return nil, err
	}
	fresh, arrived := make([]storedBlock, 0, len(branch)), make([]string, 0, len(branch))
	for i, b := range branch {
		if seen.stored[b.HeaderSignature] {
			continue
		}
		if i > 0 && seen.stored[b.PreviousBlockID] {
			// The first new block after stored ones: it joins its predecessor's
			// segment, if it can, as the first block of the branch does.
			prev, err := m.readPredecessor(ctx, tx, m.stmt.predecessor, b.PreviousBlockID)
			if err != nil {
				return nil, err
			}
			segment = prev.joins
		}
		if b.PreviousBlockID != NullBlockID {
			prev := b.PreviousBlockID
			b.PreviousBlockRef = &prev
		} else {
			b.PreviousBlockRef = nil
		}
		fresh = append(fresh, storedBlock{Block: b, Segment: segment})
		arrived = append(arrived, b.HeaderSignature)
	}
	if err := m.insertBlocks(ctx, tx, fresh); err != nil {
		return nil, err
	}
	if _, _, err := m.Completer().complete(ctx, tx, waitingFor(seen.waiting, arrived), inBranch); err != nil {
		return nil, err
	}
	return m.blocks.UpgradeTx(ctx, tx, branch[len(branch)-1].HeaderSignature, cmds...)
}

// checkStored fails with ErrBrokenChain, before anything is written, when a block of
// the branch is stored with another number or predecessor than the branch gives it:
// it is another block than the branch's, so the branch, which chains as it is given
// (checkBranch), does not chain as stored. Kept as it is, a new block after it would
// make numbers that skip or repeat, on which every walk that stops at a height
// (CommonAncestor, BranchDiff) goes wrong; a block waiting in the Completer that
// cannot follow the new block it waits for would fail the Put once the branch is
// written, where PutTx promises ErrBrokenChain before it writes; and a stray the
// Completer discarded, unlinked, would be the tip Put returns. One lookup, only when
// the branch holds stored blocks.
func (m *Manager) checkStored(ctx context.Context, tx refset.Tx, branch []Block, stored map[string]bool) error {
	if len(stored) == 0 {
		return nil
	}
	ids := make([]string, 0, len(stored))
	for id := range stored {
		ids = append(ids, id)
	}
	rows, err := tx.QueryContext(ctx, m.stmt.storedLinks, m.stmt.list(ids))
	if err != nil {
		return err
	}
	defer rows.Close()
	type link struct {
		num  int64
		prev string
	}
	links := make(map[string]link, len(ids))
	for rows.Next() {
		var id string
		var l link
		if err := rows.Scan(&id, &l.num, &l.prev); err != nil {
			return err
		}
		links[id] = l
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, b := range branch {
		l, ok := links[b.HeaderSignature]
		if !ok {
			continue
		}
		if l.num != b.BlockNum || l.prev != b.PreviousBlockID {
			return fmt.Errorf("%w: %s is stored numbered %d after %s, not %d after %s as in the branch",
				ErrBrokenChain, shown(b.HeaderSignature), l.num, shown(l.prev), b.BlockNum, shown(b.PreviousBlockID))
		}
	}
	return nil
}

// branchLookUp is what Put needs to know, before it writes, of the blocks of a
// branch: which are stored, and which pending blocks wait for them.
type branchLookUp struct {
	stored  map[string]bool
	waiting []waitingBlock
}

// lookUpSQL reads the pending blocks, as many as there are blocks in a branch and
// one more, and whether the branch's first block is stored: its row has a NULL
// predecessor.
const lookUpSQL = `SELECT block_id, pending_previous_block_id FROM (SELECT block_id, pending_previous_block_id FROM pending_blocks LIMIT ?) p
	UNION ALL SELECT header_signature, NULL FROM blocks WHERE header_signature = ?`

// lookUp tells which blocks of a branch (ids, in order) are stored, and which
// pending blocks wait for them. A linked block's predecessor is stored (the link
// is a foreign key), so when the first block is new the only stored ones are
// blocks waiting in the Completer, stored before their predecessor. Those are few
// (a block waits only while its predecessor is missing), so one query reads them
// all with the first block's row, and only when there are more than the branch has
// blocks does a second look them up by ID. tx has passed the arrivals gate, so no
// block can start waiting for one of ids before tx ends. With full, it looks among
// every block whether the first is stored or not: a Put run again after it found one
// of its blocks stored when it wrote it (see insertBlocks).
func (m *Manager) lookUp(ctx context.Context, tx refset.Tx, ids []string, full bool) (branchLookUp, error) {
	var l branchLookUp
	waiting, firstStored, err := m.scanPending(ctx, tx, m.stmt.lookUp, len(ids)+1, ids[0])
	if err != nil {
		return l, err
	}
	if len(waiting) > len(ids) {
		// More pending blocks than the branch has: look up the branch's.
		list := m.stmt.list(ids)
		if waiting, _, err = m.scanPending(ctx, tx, m.stmt.pendingOf, list, list); err != nil {
			return l, err
		}
	}
	l.waiting = waiting
	if firstStored || full {
		// The branch overlaps what is stored: look among every block.
		l.stored, err = m.storedIDs(ctx, tx, ids)
		return l, err
	}
	l.stored = make(map[string]bool)
	if len(l.waiting) == 0 {
		return l, nil
	}
	inBranch := make(map[string]bool, len(ids))
	for _, id := range ids {
		inBranch[id] = true
	}
	for _, w := range l.waiting {
		if inBranch[w.child] {
			l.stored[w.child] = true
		}
	}
	return l, nil
}

// scanPending runs query, which reads (block ID, predecessor ID) pairs: the pending
// blocks it read, and whether a row had no predecessor (lookUpSQL's row of a stored
// block, which is no pending block).
func (m *Manager) scanPending(ctx context.Context, tx refset.Tx, query string, args ...any) (waiting []waitingBlock, unlinked bool, err error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var child string
		var parent sql.NullString
		if err := rows.Scan(&child, &parent); err != nil {
			return nil, false, err
		}
		if !parent.Valid {
			unlinked = true
			continue
		}
		waiting = append(waiting, waitingBlock{child: child, parent: parent.String})
	}
	return waiting, unlinked, rows.Err()
}

// follows checks that b comes right after the block prevID numbered prevNum.
func follows(b Block, prevID string, prevNum int64) error {
	if b.PreviousBlockID != prevID {
		return fmt.Errorf("%w: %s follows %s, not %s", ErrBrokenChain, shown(b.HeaderSignature), shown(b.PreviousBlockID), shown(prevID))
	}
	if b.BlockNum != prevNum+1 {
		return fmt.Errorf("%w: %s has number %d after %s's %d", ErrBrokenChain, shown(b.HeaderSignature), b.BlockNum, shown(prevID), prevNum)
	}
	return nil
}

// errStoredMeanwhile is in insertBlocks' error when a block it was to store was
// stored already, with refset.ErrConflict, so that the transaction runs again.
var errStoredMeanwhile = errors.New("one of them was stored meanwhile")

// insertBlocks stores new blocks, each in its segment, and their batch and
// transaction index rows. It writes through a store of the set's table, with the
// set's statements and one more column, and tells the database's observer the
// blocks were added, as the set would. It takes no savepoint of its own, as the
// set's AddAllTx would: a Put that fails fails its whole transaction.
func (m *Manager) insertBlocks(ctx context.Context, tx refset.Tx, blocks []storedBlock) error {
	if len(blocks) == 0 {
		return nil
	}
	if err := m.writes.PersistAll(ctx, tx, blocks); err != nil {
		if errors.Is(err, refset.ErrDuplicate) {
			// The caller found none of them stored, in tx: another transaction stored
			// one since (on Postgres, where writers run side by side), or it is stored
			// where the caller did not look (lookUp). Either way, running tx again
			// finds it stored and keeps it as it is.
			return fmt.Errorf("blockmanager: storing %d blocks: %w: %w: %w", len(blocks), refset.ErrConflict, errStoredMeanwhile, err)
		}
		return fmt.Errorf("blockmanager: storing %d blocks: %w", len(blocks), err)
	}
	m.drv.Observer().Added(ctx, len(blocks))
	return m.insertIndexes(ctx, tx, blocks)
}

func (m *Manager) blockNum(ctx context.Context, q refset.Querier, id string) (int64, error) {
	var num int64
	err := scanBlock(ctx, q, m.sql(`SELECT block_num FROM blocks WHERE header_signature = ?`), []any{id}, &num)
	return num, err
}

// scanBlock scans into dest the row that query, with args, reads of a block, whose
// ID is the last of args: ErrUnknownBlock when there is none.
func scanBlock(ctx context.Context, q refset.Querier, query string, args []any, dest ...any) error {
	err := q.QueryRowContext(ctx, query, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s: %w", ErrUnknownBlock, shown(args[len(args)-1]), refset.ErrNotFound)
	}
	return err
}

// storedIDs reports which of ids are stored.
func (m *Manager) storedIDs(ctx context.Context, q refset.Querier, ids []string) (map[string]bool, error) {
	found, err := queryStrings(ctx, q, m.stmt.storedIDs, m.stmt.list(ids))
	stored := make(map[string]bool, len(found))
	for _, id := range found {
		stored[id] = true
	}
	return stored, err
}

// queryStrings runs query, which reads one column of strings, on q, and returns
// them.
func queryStrings(ctx context.Context, q refset.Querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// holders returns the blocks that hold any of ids in an index table (block_batches
// or block_transactions, with its ID column), and the lowest of their heights. Each
// height is a subquery, one lookup by key, not a join: Postgres planned the join,
// before the tables' first ANALYZE, as a hash of the whole blocks table. Where the
// list is a table expression (PostgreSQL's unnest), the index table is read once an
// ID of it, one lookup by key: compared with the list (= ANY), a validator's thousands of
// batch IDs were planned as a scan of the whole index table before its first ANALYZE,
// and as a bitmap of thousands of pages after (TestPlansOnLargeData).
func (m *Manager) holders(ctx context.Context, q refset.Querier, table, column string, ids []string) (blocks []string, oldest int64, err error) {
	from := fmt.Sprintf(`%s x WHERE %s`, table, m.drv.ColumnIn("x."+column))
	if bulk, ok := m.drv.(refsetdriver.BulkWrites); ok {
		// OFFSET 0 keeps the subquery from being flattened into a join, which the
		// planner, before the first ANALYZE, guessed a match of hundreds of rows an ID
		// and made a hash of the whole table.
		from = fmt.Sprintf(`%s AS l (id), LATERAL (SELECT block_id FROM %s WHERE %s = l.id OFFSET 0) x`, bulk.Unnest(1), table, column)
	}
	rows, err := q.QueryContext(ctx, m.sql(`SELECT x.block_id,
		(SELECT b.block_num FROM blocks b WHERE b.header_signature = x.block_id) FROM `+from), m.stmt.list(ids))
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var num int64
		if err := rows.Scan(&id, &num); err != nil {
			return nil, 0, err
		}
		if len(blocks) == 0 || num < oldest {
			oldest = num
		}
		blocks = append(blocks, id)
	}
	return blocks, oldest, rows.Err()
}

// Get returns the stored blocks with those IDs, in order, nil for each one that is
// not stored. The blocks are the set's shared instances: read them, never modify
// them. Errors: refset.ErrUnavailable, ErrTimeout, ErrClosed, the context's error.
func (m *Manager) Get(ctx context.Context, ids []string) (_ []*Block, err error) {
	if err := m.opened("get"); err != nil {
		return nil, err
	}
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	out := make([]*Block, len(ids))
	for i, id := range ids {
		tok, err := m.blocks.Upgrade(ctx, id)
		if errors.Is(err, refset.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		lease, err := m.blocks.Get(ctx, tok)
		if errors.Is(err, refset.ErrNotFound) {
			continue // collected between the two reads
		}
		if err != nil {
			return nil, err
		}
		out[i] = lease.Value()
	}
	return out, nil
}

// Contains reports whether the block is stored. Errors: those of Get.
//
// Get and Contains read as RefSet's Get and Upgrade do: on a database with a replica,
// a block stored on the primary is always found, and one that clean-up deleted there
// within the replica's replay lag may still be.
func (m *Manager) Contains(ctx context.Context, id string) (bool, error) {
	if err := m.opened("contains"); err != nil {
		return false, err
	}
	_, err := m.blocks.Upgrade(ctx, id)
	if errors.Is(err, refset.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ContainsAnyBatches reports whether any of the batches is in a block of tip's
// branch. It reads only the blocks between tip and the oldest block holding one of
// them. NullBlockID, the predecessor of genesis, is a tip whose branch is empty, so
// it contains none (as in Sawtooth); any other tip that is not stored is
// ErrUnknownBlock. Errors: ErrUnknownBlock, and those of Get.
func (m *Manager) ContainsAnyBatches(ctx context.Context, tip string, batchIDs []string) (bool, error) {
	return m.containsAny(ctx, tip, "block_batches", "batch_id", batchIDs)
}

// ContainsAnyTransactions reports whether any of the transactions is in a block of
// tip's branch, as ContainsAnyBatches does for batches, with the same errors.
func (m *Manager) ContainsAnyTransactions(ctx context.Context, tip string, txnIDs []string) (bool, error) {
	return m.containsAny(ctx, tip, "block_transactions", "transaction_id", txnIDs)
}

func (m *Manager) containsAny(ctx context.Context, tip, table, column string, ids []string) (_ bool, err error) {
	if err := m.opened("contains any"); err != nil {
		return false, err
	}
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	if tip == NullBlockID {
		return false, nil
	}
	q := refsetdriver.ReaderFor(ctx, m.db)
	if _, err := m.blockNum(ctx, q, tip); err != nil {
		return false, err
	}
	if len(ids) == 0 {
		return false, nil
	}
	// The blocks holding any of them, and the oldest one's height, which bounds the
	// walk. The list is one argument (ColumnIn), so the statements' text is the same
	// whatever the number of IDs.
	holders, oldest, err := m.holders(ctx, q, table, column, ids)
	if err != nil || len(holders) == 0 {
		return false, err
	}
	// The walk looks for those blocks, not for the IDs: a join of the walk with the
	// index table was planned, before its first ANALYZE, as a scan of all of it
	// (TestPlansOnLargeData).
	var found bool
	err = q.QueryRowContext(ctx, m.sql(ancestorsSQL+`
		SELECT EXISTS (SELECT 1 FROM walk WHERE `+m.drv.ColumnIn("walk.id")+`)`),
		tip, oldest, m.stmt.list(holders)).Scan(&found)
	return found, err
}
