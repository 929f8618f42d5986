package blockmanager

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/driver"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
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
	// PageSize is how many blocks a branch walk reads per query. Zero means 1000.
	PageSize int
	// Logger receives the block tables' clean-up passes (see cleanup.Config.Logger).
	// Nil means the database's logger (the stores' Options.Logger), if any.
	Logger *slog.Logger
}

// Manager is Sawtooth's BlockManager on a RefSet: blocks live in the database,
// linked to their predecessors by a FOREIGN KEY, and it keeps no state of its own,
// so a new process on the same database carries on where the last one stopped.
type Manager struct {
	db        refset.Database
	replica   refset.Querier // the database's replica, or nil: where walks read first
	obs       refset.Observer
	dialect   schema.Dialect
	blocks    *refset.RefSet[Block, string]
	collector *cleanup.Collector
	columns   string // the mapped columns, prefixed "b."
	mapping   *sqlstore.Mapping
	pageSize  int
	forkTTL   time.Duration
}

// Open creates the block tables if needed (on a database of store/sqlite or
// store/postgres; anything else is refset.ErrInvalidConfig),
// installs clean-up on them and returns the manager.
func Open(ctx context.Context, db refset.Database, cfg Config) (*Manager, error) {
	m := &Manager{db: db, replica: refset.ReplicaOf(db), obs: refset.ObserverOf(db), pageSize: cfg.PageSize, forkTTL: cfg.ForkTTL}
	if m.pageSize <= 0 {
		m.pageSize = 1000
	}
	if m.forkTTL <= 0 {
		m.forkTTL = 10 * time.Minute
	}
	grace := cfg.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	collect := cleanup.Config{Table: "blocks", Grace: grace, Logger: cfg.Logger}
	drv, err := driver.Of(db)
	if err != nil {
		return nil, fmt.Errorf("blockmanager: open: %w", err)
	}
	m.dialect = drv.Schema()
	if err = m.migrate(ctx, drv.SchemaSQL()); err != nil {
		return nil, err
	}
	var store *sqlstore.Store[Block, string]
	if store, err = driver.NewStore[Block, string](ctx, db, sqlstore.Config{Table: "blocks"}); err == nil {
		m.blocks = refset.New[Block, string](store)
		m.collector, err = driver.NewCollector(ctx, db, collect)
	}
	if err != nil {
		return nil, fmt.Errorf("blockmanager: open: %w", err)
	}
	if m.mapping, err = sqlstore.NewMapping(reflect.TypeFor[Block]()); err != nil {
		return nil, err
	}
	cols := m.mapping.Columns()
	for i, c := range cols {
		cols[i] = `b."` + c + `"`
	}
	m.columns = strings.Join(cols, ", ")
	return m, nil
}

func (m *Manager) migrate(ctx context.Context, refsetSQL schema.SQL) error {
	sub, err := fs.Sub(migrations, "sql/"+string(m.dialect))
	if err != nil {
		return err
	}
	if err := schema.MigrateFS(ctx, m.db, refsetSQL, "blockmanager", sub); err != nil {
		return fmt.Errorf("blockmanager: creating the tables: %w", err)
	}
	return nil
}

// Blocks is the set the blocks live in.
func (m *Manager) Blocks() *refset.RefSet[Block, string] { return m.blocks }

// Collector is the blocks' clean-up: run its Collect (or Run) to prune what nothing
// references any more.
func (m *Manager) Collector() *cleanup.Collector { return m.collector }

// Database is the database the blocks live in.
func (m *Manager) Database() refset.Database { return m.db }

func (m *Manager) sql(q string) string { return m.dialect.Rebind(q) }

// lock serialises, until tx ends, the transactions that lock the same key: on
// Postgres a transaction-scoped advisory lock; SQLite's one writer already
// serialises every write transaction.
func (m *Manager) lock(ctx context.Context, tx refset.Tx, key string) error {
	if m.dialect != schema.Postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7262))`, "blockmanager:"+key)
	return err
}

// gateKey names the advisory lock of the arrivals gate.
const gateKey = "blockmanager:arrivals-gate"

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
	if m.dialect != schema.Postgres {
		return nil
	}
	fn := "pg_advisory_xact_lock_shared"
	if exclusive {
		fn = "pg_advisory_xact_lock"
	}
	_, err := tx.ExecContext(ctx, `SELECT `+fn+`(hashtextextended($1, 7262))`, gateKey)
	return err
}

// Put stores a branch, oldest block first, in one transaction, and runs cmds on its
// tip in the same transaction (hold it there: a branch nothing references is
// collected after the grace period). Blocks already stored are kept as they are, so
// Put is idempotent and a branch may overlap what is stored, the Completer's pending
// blocks included. A block that waited in the Completer for a block Put stores is
// linked to it and handed to the ChainController in the same transaction, as the
// Completer does when a predecessor arrives, and so is whatever waited for that
// block; otherwise it would wait for a block that will never arrive again. It fails
// with ErrEmptyBranch, ErrMissingPredecessor (the first block's predecessor is not
// stored; NullBlockID always is) or ErrBrokenChain, and then stores nothing; and
// with the errors of refset.InTx (ErrConflict after retries, ErrUnavailable,
// ErrTimeout, ErrClosed, the context's error, what a command returned). A command
// that panics rolls the Put back and the panic goes on.
func (m *Manager) Put(ctx context.Context, branch []Block, cmds ...refset.Command[string]) (*refset.RefToken[string], error) {
	var tip *refset.RefToken[string]
	err := refset.InTx(ctx, m.db, func(tx refset.Tx) error {
		var err error
		tip, err = m.PutTx(ctx, tx, branch, cmds...)
		return err
	})
	return tip, err
}

// PutTx is Put inside the caller's transaction. Errors: those of Put, and
// refset.ErrInvalidTx when tx is nil or a connection pool.
func (m *Manager) PutTx(ctx context.Context, tx refset.Tx, branch []Block, cmds ...refset.Command[string]) (*refset.RefToken[string], error) {
	if len(branch) == 0 {
		return nil, ErrEmptyBranch
	}
	for i := 1; i < len(branch); i++ {
		if err := follows(branch[i], branch[i-1].HeaderSignature, branch[i-1].BlockNum); err != nil {
			return nil, err
		}
	}
	first := branch[0]
	if first.PreviousBlockID == NullBlockID {
		if first.BlockNum != 0 {
			return nil, fmt.Errorf("%w: genesis block %s has number %d", ErrBrokenChain, first.HeaderSignature, first.BlockNum)
		}
	} else {
		num, err := m.keepNum(ctx, tx, first.PreviousBlockID)
		if errors.Is(err, refset.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s, predecessor of %s: %w", ErrMissingPredecessor, first.PreviousBlockID, first.HeaderSignature, refset.ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if err := follows(first, first.PreviousBlockID, num); err != nil {
			return nil, err
		}
	}
	// Which blocks of the branch are stored? A linked block's predecessor is stored
	// (the link is a foreign key), so when the first block is new the only stored
	// ones are blocks waiting in the Completer, stored before their predecessor:
	// look for those in the small pending table, not among every block.
	ids := make([]string, len(branch))
	for i, b := range branch {
		ids[i] = b.HeaderSignature
	}
	stored, err := m.storedIDs(ctx, tx, ids[:1])
	if err == nil {
		if stored[ids[0]] {
			stored, err = m.storedIDs(ctx, tx, ids)
		} else {
			stored, err = m.pendingIDs(ctx, tx, ids)
		}
	}
	if err != nil {
		return nil, err
	}
	var fresh []Block
	for _, b := range branch {
		if stored[b.HeaderSignature] {
			continue
		}
		if b.PreviousBlockID != NullBlockID {
			prev := b.PreviousBlockID
			b.PreviousBlockRef = &prev
		} else {
			b.PreviousBlockRef = nil
		}
		fresh = append(fresh, b)
	}
	if err := m.insertBlocks(ctx, tx, fresh); err != nil {
		return nil, err
	}
	if len(fresh) > 0 {
		arrived := make([]string, len(fresh))
		for i, b := range fresh {
			arrived[i] = b.HeaderSignature
		}
		if _, err := m.Completer().completeWaiting(ctx, tx, arrived); err != nil {
			return nil, err
		}
	}
	return m.blocks.UpgradeTx(ctx, tx, branch[len(branch)-1].HeaderSignature, cmds...)
}

// follows checks that b comes right after the block prevID numbered prevNum.
func follows(b Block, prevID string, prevNum int64) error {
	if b.PreviousBlockID != prevID {
		return fmt.Errorf("%w: %s follows %s, not %s", ErrBrokenChain, b.HeaderSignature, b.PreviousBlockID, prevID)
	}
	if b.BlockNum != prevNum+1 {
		return fmt.Errorf("%w: %s has number %d after %s's %d", ErrBrokenChain, b.HeaderSignature, b.BlockNum, prevID, prevNum)
	}
	return nil
}

// insertBlocks stores new blocks and their batch and transaction index rows.
func (m *Manager) insertBlocks(ctx context.Context, tx refset.Tx, blocks []Block) error {
	if len(blocks) == 0 {
		return nil
	}
	if _, err := m.blocks.AddAllTx(ctx, tx, blocks); err != nil {
		return err
	}
	for _, index := range []struct {
		table, column string
		ids           func(Block) IDs
	}{
		{"block_batches", "batch_id", func(b Block) IDs { return b.BatchIDs }},
		{"block_transactions", "transaction_id", func(b Block) IDs { return b.TransactionIDs }},
	} {
		var args []any
		flush := func() error {
			if len(args) == 0 {
				return nil
			}
			q := fmt.Sprintf(`INSERT INTO %s (%s, block_id) VALUES %s`, index.table, index.column,
				strings.TrimSuffix(strings.Repeat("(?, ?), ", len(args)/2), ", "))
			_, err := tx.ExecContext(ctx, m.sql(q), args...)
			args = args[:0]
			return err
		}
		for _, b := range blocks {
			seen := make(map[string]bool, len(index.ids(b)))
			for _, id := range index.ids(b) {
				if seen[id] { // a block may list an ID twice; its index row is one
					continue
				}
				seen[id] = true
				args = append(args, id, b.HeaderSignature)
				if len(args) >= 1000 {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// keepNum returns a block's number and, on Postgres, takes a KEY SHARE lock on its
// row until tx ends: the lock a reference insert takes, which a collector's FOR
// UPDATE conflicts with, so a block found here cannot be collected before tx links
// to it. SQLite's one writer gives the same guarantee.
func (m *Manager) keepNum(ctx context.Context, tx refset.Tx, id string) (int64, error) {
	q := `SELECT block_num FROM blocks WHERE header_signature = ?`
	if m.dialect == schema.Postgres {
		q += ` FOR KEY SHARE`
	}
	var num int64
	err := tx.QueryRowContext(ctx, m.sql(q), id).Scan(&num)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s: %w", ErrUnknownBlock, id, refset.ErrNotFound)
	}
	return num, err
}

func (m *Manager) blockNum(ctx context.Context, q refset.Querier, id string) (int64, error) {
	var num int64
	err := q.QueryRowContext(ctx, m.sql(`SELECT block_num FROM blocks WHERE header_signature = ?`), id).Scan(&num)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s: %w", ErrUnknownBlock, id, refset.ErrNotFound)
	}
	return num, err
}

// oneOf is the condition that column is one of ids, and its arguments: one array
// on Postgres, a list of parameters on SQLite (so pass at most a thousand).
func (m *Manager) oneOf(column string, ids []string) (string, []any) {
	if m.dialect == schema.Postgres {
		return column + ` = ANY ($1)`, []any{pq.Array(ids)}
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return column + ` IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`, args
}

// storedIDs reports which of ids are stored.
func (m *Manager) storedIDs(ctx context.Context, q refset.Querier, ids []string) (map[string]bool, error) {
	return m.idsIn(ctx, q, "blocks", "header_signature", ids)
}

// pendingIDs is which of ids wait in the Completer.
func (m *Manager) pendingIDs(ctx context.Context, q refset.Querier, ids []string) (map[string]bool, error) {
	return m.idsIn(ctx, q, "pending_blocks", "block_id", ids)
}

// idsIn is which of ids are in column of table (both names fixed by the caller).
func (m *Manager) idsIn(ctx context.Context, q refset.Querier, table, column string, ids []string) (map[string]bool, error) {
	stored := make(map[string]bool)
	for start := 0; start < len(ids); start += 1000 {
		cond, args := m.oneOf(column, ids[start:min(start+1000, len(ids))])
		rows, err := q.QueryContext(ctx, `SELECT `+column+` FROM `+table+` WHERE `+cond, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			stored[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// Get returns the stored blocks with those IDs, in order, nil for each one that is
// not stored. The blocks are the set's shared instances: read them, never modify
// them. Errors: refset.ErrUnavailable, ErrTimeout, ErrClosed, the context's error.
func (m *Manager) Get(ctx context.Context, ids []string) (_ []*Block, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
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
	_, err := m.blocks.Upgrade(ctx, id)
	if errors.Is(err, refset.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Branch walks from tip back to genesis (or to the oldest block whose predecessor
// is not linked yet), reading a page of blocks per query. On a database with a
// replica it reads the replica, and carries on from the primary wherever the walk
// would end short of genesis there: at a tip, link or block the replica has not
// replayed yet. A walk right after a Put of its tip therefore yields the whole
// branch. An unknown tip yields ErrUnknownBlock; a failed read yields the errors of
// Get, and ends the walk.
func (m *Manager) Branch(ctx context.Context, tip string) iter.Seq2[*Block, error] {
	return func(yield func(*Block, error) bool) {
		w := m.walk(ctx, tip)
		for {
			b, err := w.next()
			if err != nil {
				yield(nil, ctxerr.Wrap(ctx, err))
				return
			}
			if b == nil || !yield(b, nil) {
				return
			}
		}
	}
}

// BranchDiff returns the blocks on tip's branch that are not on exclude's, tip
// first, down to (not including) their common ancestor. It walks the higher branch
// down to the other's height first, then both together, reading the replica as
// Branch does, and the primary for whatever the replica lacks. Errors:
// ErrUnknownBlock (either tip is not stored), and those of Get.
func (m *Manager) BranchDiff(ctx context.Context, tip, exclude string) ([]*Block, error) {
	diff, _, err := m.diverge(ctx, tip, exclude)
	return diff, ctxerr.Wrap(ctx, err)
}

// CommonAncestor returns the newest block on both branches, or nil if they share
// none. Errors: those of BranchDiff.
func (m *Manager) CommonAncestor(ctx context.Context, a, b string) (*Block, error) {
	_, common, err := m.diverge(ctx, a, b)
	return common, ctxerr.Wrap(ctx, err)
}

func (m *Manager) diverge(ctx context.Context, tip, exclude string) (diff []*Block, common *Block, err error) {
	// Find the diff with walks that read only links, then read the diff's blocks.
	// Both walks start at their tips' heights and share the pages they read: once at
	// equal height they read the same ranges.
	tops, err := m.heights(ctx, tip, exclude)
	if err != nil {
		return nil, nil, err
	}
	shared := map[pageKey]map[string]*Block{}
	a, b := m.walkLinks(ctx, tip), m.walkLinks(ctx, exclude)
	a.fromNum, a.read, a.pages = tops[tip], true, shared
	b.fromNum, b.read, b.pages = tops[exclude], true, shared
	ta, err := a.next()
	if err != nil {
		return nil, nil, err
	}
	tb, err := b.next()
	if err != nil {
		return nil, nil, err
	}
	var ids []string
	for ta != nil && tb != nil && ta.BlockNum > tb.BlockNum {
		ids = append(ids, ta.HeaderSignature)
		if ta, err = a.next(); err != nil {
			return nil, nil, err
		}
	}
	for ta != nil && tb != nil && tb.BlockNum > ta.BlockNum {
		if tb, err = b.next(); err != nil {
			return nil, nil, err
		}
	}
	for ta != nil && tb != nil && ta.HeaderSignature != tb.HeaderSignature {
		ids = append(ids, ta.HeaderSignature)
		if ta, err = a.next(); err != nil {
			return nil, nil, err
		}
		if tb, err = b.next(); err != nil {
			return nil, nil, err
		}
	}
	var commonID string
	if ta != nil && tb != nil {
		commonID = ta.HeaderSignature
	} else {
		// No common ancestor: the whole of tip's branch differs.
		for ta != nil {
			ids = append(ids, ta.HeaderSignature)
			if ta, err = a.next(); err != nil {
				return nil, nil, err
			}
		}
	}
	if commonID != "" {
		ids = append(ids, commonID)
	}
	blocks, err := m.fetch(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	if commonID != "" {
		common, blocks = blocks[len(blocks)-1], blocks[:len(blocks)-1]
	}
	return blocks, common, nil
}

// heights reads the heights of blocks, failing with ErrUnknownBlock for one that is
// not stored.
func (m *Manager) heights(ctx context.Context, ids ...string) (map[string]int64, error) {
	out := make(map[string]int64, len(ids))
	for _, id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		num, err := m.heightOf(ctx, id)
		if err != nil {
			return nil, err
		}
		out[id] = num
	}
	return out, nil
}

// heightOf reads a block's height: on the replica first, which has it if it has the
// block (a height never changes), and on the primary when the replica does not.
func (m *Manager) heightOf(ctx context.Context, id string) (int64, error) {
	if m.replica != nil {
		num, err := m.blockNum(ctx, m.replica, id)
		if err == nil || ctx.Err() != nil {
			return num, err
		}
		m.obs.ReadFellBack(ctx, "branch", refset.FallbackReason(err))
	}
	return m.blockNum(ctx, m.db.Reader(), id)
}

// fetch reads the blocks with those IDs, in order, a few hundred per query: on the
// replica first, and those it lacks (or all, if it fails) on the primary.
func (m *Manager) fetch(ctx context.Context, ids []string) ([]*Block, error) {
	out := make([]*Block, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	missing := ids
	if m.replica != nil {
		err := m.fetchInto(ctx, m.replica, ids, out, at)
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		missing = nil
		for i, b := range out {
			if b == nil {
				missing = append(missing, ids[i])
			}
		}
		if len(missing) > 0 {
			m.obs.ReadFellBack(ctx, "branch", refset.FallbackReason(err))
		}
	}
	if err := m.fetchInto(ctx, m.db.Reader(), missing, out, at); err != nil {
		return nil, err
	}
	for i, b := range out {
		if b == nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnknownBlock, ids[i], refset.ErrNotFound)
		}
	}
	return out, nil
}

// fetchInto reads the blocks with those IDs on q into out, at the index at gives.
func (m *Manager) fetchInto(ctx context.Context, q refset.Querier, ids []string, out []*Block, at map[string]int) error {
	// Postgres takes the IDs as one array parameter; SQLite as a list of them.
	per := 500
	if m.dialect == schema.Postgres {
		per = 10_000
	}
	for start := 0; start < len(ids); start += per {
		chunk := ids[start:min(start+per, len(ids))]
		sel := `SELECT %s FROM blocks b WHERE b.header_signature = ANY ($1)`
		args := []any{pq.Array(chunk)}
		if m.dialect != schema.Postgres {
			sel = `SELECT %s FROM blocks b WHERE b.header_signature IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ") + `)`
			args = make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
		}
		rows, err := q.QueryContext(ctx, fmt.Sprintf(sel, m.columns), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			b := new(Block)
			if err := m.mapping.Scan(rows, reflect.ValueOf(b)); err != nil {
				rows.Close()
				return err
			}
			out[at[b.HeaderSignature]] = b
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	return nil
}

// ContainsAnyBatches reports whether any of the batches is in a block of tip's
// branch. It reads only the blocks between tip and the oldest block holding one of
// them. NullBlockID, the predecessor of genesis, is a tip whose branch is empty, so
// it contains none (as in Sawtooth); any other tip that is not stored is
// ErrUnknownBlock. Errors: ErrUnknownBlock, and those of Get.
func (m *Manager) ContainsAnyBatches(ctx context.Context, tip string, batchIDs []string) (_ bool, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	return m.containsAny(ctx, tip, "block_batches", "batch_id", batchIDs)
}

// ContainsAnyTransactions reports whether any of the transactions is in a block of
// tip's branch, as ContainsAnyBatches does for batches, with the same errors.
func (m *Manager) ContainsAnyTransactions(ctx context.Context, tip string, txnIDs []string) (_ bool, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	return m.containsAny(ctx, tip, "block_transactions", "transaction_id", txnIDs)
}

func (m *Manager) containsAny(ctx context.Context, tip, table, column string, ids []string) (bool, error) {
	if tip == NullBlockID {
		return false, nil
	}
	q := m.db.Reader()
	if _, err := m.blockNum(ctx, q, tip); err != nil {
		return false, err
	}
	if len(ids) == 0 {
		return false, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	// The oldest block holding any of them bounds the walk.
	var oldest *int64
	err := q.QueryRowContext(ctx, m.sql(fmt.Sprintf(`SELECT MIN(b.block_num) FROM %s x
		JOIN blocks b ON b.header_signature = x.block_id WHERE x.%s IN (%s)`, table, column, in)), args...).Scan(&oldest)
	if err != nil || oldest == nil {
		return false, err
	}
	var found bool
	err = q.QueryRowContext(ctx, m.sql(fmt.Sprintf(`WITH RECURSIVE walk(id, prev) AS (
			SELECT header_signature, previous_block_ref FROM blocks WHERE header_signature = ?
			UNION ALL
			SELECT b.header_signature, b.previous_block_ref FROM walk JOIN blocks b ON b.header_signature = walk.prev
			WHERE b.block_num >= ?)
		SELECT EXISTS (SELECT 1 FROM walk JOIN %s x ON x.block_id = walk.id WHERE x.%s IN (%s))`, table, column, in)),
		append([]any{tip, *oldest}, args...)...).Scan(&found)
	return found, err
}

// walker reads a branch newest first, a page of heights per query. Heights are
// contiguous along a branch (a block's number is its predecessor's plus one), so a
// page is one range scan of the block_num index, and the walk follows the links
// through it in memory; blocks of other forks at those heights are read and passed
// over.
//
// On a database with a replica the walk reads the replica, and trusts what it finds
// there: a block and its link never change once the link is set. Where the walk
// would end anywhere but at genesis (a tip or a block the replica lacks, a block not
// linked to its predecessor, a failed read), the replica may just be behind, so the
// walk goes on from that block on the primary, to the end.
type walker struct {
	m         *Manager
	ctx       context.Context
	q         refset.Querier                // where pages are read: the replica, then the primary
	onReplica bool                          // q is the replica
	links     bool                          // read only ID, link and height (a covering index), not whole blocks
	pages     map[pageKey]map[string]*Block // pages read, shared between walks
	from      string                        // the next block to read; "" when the branch ended
	fromNum   int64                         // its number; -1 before the first page
	page      []*Block
	read      bool // whether anything was read (nothing on the first page: unknown tip)
}

// pageKey names a page two walks may share: its top height, and whether it was read
// on the replica (a walk on the primary must not trust a replica's page).
type pageKey struct {
	top       int64
	onReplica bool
}

func (m *Manager) walk(ctx context.Context, tip string) *walker {
	w := &walker{m: m, ctx: ctx, q: m.db.Reader(), from: tip, fromNum: -1}
	if m.replica != nil {
		w.q, w.onReplica = m.replica, true
	}
	return w
}

// walkLinks walks a branch reading only each block's ID, link and height.
func (m *Manager) walkLinks(ctx context.Context, tip string) *walker {
	w := m.walk(ctx, tip)
	w.links = true
	return w
}

// toPrimary makes the walk read the primary from now on, because of reason (as
// refset.Observer.ReadFellBack names it).
func (w *walker) toPrimary(reason string) {
	w.q, w.onReplica = w.m.db.Reader(), false
	w.m.obs.ReadFellBack(w.ctx, "branch", reason)
}

func (w *walker) next() (*Block, error) {
	// A page read on the replica may end in nothing, the walk then going on from
	// the primary; a page read on the primary yields a block or ends the walk.
	for len(w.page) == 0 {
		if w.from == "" {
			return nil, nil
		}
		if err := w.fill(); err != nil {
			return nil, err
		}
	}
	b := w.page[0]
	w.page = w.page[1:]
	return b, nil
}

// pageSQL reads every block whose height is within pageSize below the start block's.
// The first page finds the start block's height in the same query.
const (
	firstPageSQL = `SELECT %s FROM blocks b, (SELECT block_num AS top FROM blocks WHERE header_signature = ?) t
		WHERE b.block_num BETWEEN t.top - ? AND t.top`
	pageSQL = `SELECT %s FROM blocks b WHERE b.block_num BETWEEN ? AND ?`
)

func (w *walker) fill() error {
	m := w.m
	cols := m.columns
	if w.links {
		cols = `b.header_signature, b.previous_block_ref, b.block_num`
	}
	var q string
	var args []any
	if w.fromNum < 0 {
		q, args = fmt.Sprintf(firstPageSQL, cols), []any{w.from, m.pageSize - 1}
	} else {
		q, args = fmt.Sprintf(pageSQL, cols), []any{w.fromNum - int64(m.pageSize) + 1, w.fromNum}
	}
	key := pageKey{top: w.fromNum, onReplica: w.onReplica}
	byID := w.pages[key]
	if byID == nil {
		var err error
		if byID, err = w.read1(q, args); err != nil {
			if w.onReplica && w.ctx.Err() == nil {
				w.toPrimary("failed") // and next reads this page again there
				return nil
			}
			return err
		}
		if w.pages != nil && w.fromNum >= 0 {
			w.pages[key] = byID
		}
	}
	return w.follow(byID)
}

// read1 reads one page into a map by ID.
func (w *walker) read1(q string, args []any) (map[string]*Block, error) {
	m := w.m
	rows, err := w.q.QueryContext(w.ctx, m.sql(q), args...)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*Block)
	for rows.Next() {
		b := new(Block)
		var err error
		if w.links {
			err = rows.Scan(&b.HeaderSignature, &b.PreviousBlockRef, &b.BlockNum)
		} else {
			err = m.mapping.Scan(rows, reflect.ValueOf(b))
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		byID[b.HeaderSignature] = b
	}
	return byID, rows.Close()
}

// follow walks the links from w.from through a page.
func (w *walker) follow(byID map[string]*Block) error {
	at, ok := byID[w.from]
	if !ok {
		if w.onReplica {
			w.toPrimary("missing") // and next reads this page again there
			return nil
		}
		if !w.read {
			return fmt.Errorf("%w: %s: %w", ErrUnknownBlock, w.from, refset.ErrNotFound)
		}
		w.from = "" // a link to a block that is gone: the branch ends
		return nil
	}
	w.read = true
	for {
		if at.PreviousBlockRef == nil && at.BlockNum != 0 && w.onReplica {
			// Not linked on the replica, which may not have replayed the link yet:
			// read the block again on the primary. (A block numbered 0 is genesis,
			// or one that can never be linked.)
			w.from, w.fromNum = at.HeaderSignature, at.BlockNum
			w.toPrimary("missing")
			return nil
		}
		w.page = append(w.page, at)
		if at.PreviousBlockRef == nil {
			w.from = ""
			return nil
		}
		next, ok := byID[*at.PreviousBlockRef]
		if !ok {
			w.from, w.fromNum = *at.PreviousBlockRef, at.BlockNum-1
			return nil
		}
		at = next
	}
}
