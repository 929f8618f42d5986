package blockmanager

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// ForkHolder is the holder name of the chain controller's fork cache in the blocks'
// holds table.
const ForkHolder = "fork-cache"

// forkHolds is the blocks set's holds table, which is refset's: the controller keeps
// and drops its fork-cache holds with the set's Hold and Unhold commands and reads
// them with the store's ListHolds, never with SQL of its own on that table.
var forkHolds = sqlident.Must("blocks_holds")

// ChainController keeps the committed head in chain_heads and the head of every
// other branch in a fork cache: a hold with an expiry, renewed while the fork grows.
// Blocks of the committed chain are never in the cache: the head keeps them. A fork that
// stops growing for ForkTTL loses its hold, and clean-up prunes it down to the
// committed chain. All of it is in the database: a restarted controller picks up
// exactly where the last one stopped.
type ChainController struct {
	m *Manager
}

// Controller returns the manager's chain controller.
func (m *Manager) Controller() *ChainController { return &ChainController{m: m} }

// manager is the Manager c works for; nil for a ChainController its Manager did not
// make.
func (c *ChainController) manager() *Manager {
	if c == nil {
		return nil
	}
	return c.m
}

// Accept is the chain controller's acquire command in a hand-over: it records the
// block as a fork head (its predecessor, now kept by the link, no longer needs to
// be one), and commits it as the new head if fork choice prefers it: the longest
// chain wins, then the lowest block ID.
func (c *ChainController) Accept() refset.Command[string] {
	return refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, id string) error {
		return c.accept(ctx, tx, id)
	})
}

func (c *ChainController) accept(ctx context.Context, tx refset.Tx, id string) error {
	if err := c.manager().opened("accept"); err != nil {
		return err
	}
	m := c.m
	// Fork choice reads the head and replaces it: one decision at a time.
	if err := m.lock(ctx, tx, "chain-controller"); err != nil {
		return err
	}
	var num int64
	var prev sql.NullString
	if err := scanBlock(ctx, tx, m.sql(`SELECT block_num, previous_block_ref FROM blocks WHERE header_signature = ?`), []any{id}, &num, &prev); err != nil {
		return err
	}
	if prev.Valid {
		if err := c.unfork(ctx, tx, prev.String); err != nil {
			return err
		}
	}
	head, headNum, err := c.head(ctx, tx)
	if err != nil {
		return err
	}
	if id == head {
		return nil // committed already (Commit took it as the head): no fork
	}
	if head == "" || num > headNum || (num == headNum && id < head) {
		return c.commit(ctx, tx, id, head, headNum, prev.Valid && prev.String == head)
	}
	return m.blocks.Hold(ForkHolder, m.forkTTL).Execute(ctx, tx, id)
}

// headSQL reads the committed head and its number. The number is a subquery, one
// lookup by key, not a join: Postgres, not knowing chain_heads holds one row (before
// its first ANALYZE it guesses thousands), planned the join as a hash of the whole
// blocks table (TestPlansOnLargeData).
const headSQL = `SELECT h.chain_head,
		(SELECT b.block_num FROM blocks b WHERE b.header_signature = h.chain_head)
	FROM chain_heads h`

// head is the committed head and its number, or "" before the first block.
func (c *ChainController) head(ctx context.Context, q refset.Querier) (string, int64, error) {
	var id string
	var num int64
	err := q.QueryRowContext(ctx, headSQL).Scan(&id, &num)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return id, num, err
}

// commit makes id the committed head in place of old (numbered oldNum; "" before the
// first block). The committed chain needs no fork-cache holds, so the fork heads
// among id and its ancestors lose theirs; old becomes a fork only if it is not one of
// those ancestors, for a committed block is no fork, and a node that commits every
// block would otherwise add one fork-cache entry per block. extendsOld says the
// caller knows old is id's predecessor, which spares the walk: then id is the only
// one of the two that can be a fork head (old, the head, never is), as when there was
// no head. Otherwise the walk goes down to old's height or the lowest fork head's,
// whichever is lower, since a fork head below old's height may be on the branch now
// committed (below old, the committed chain it passes holds no fork heads).
func (c *ChainController) commit(ctx context.Context, tx refset.Tx, id, old string, oldNum int64, extendsOld bool) error {
	m := c.m
	if _, err := tx.ExecContext(ctx, `DELETE FROM chain_heads`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, m.sql(`INSERT INTO chain_heads (chain_head) VALUES (?)`), id); err != nil {
		return err
	}
	if old == "" || extendsOld {
		return c.unfork(ctx, tx, id)
	}
	_, forks, err := m.drv.SchemaSQL().ListHolds(ctx, tx, forkHolds, refsetdriver.HoldFilter{Holder: ForkHolder})
	if err != nil {
		return err
	}
	heads := make([]string, len(forks))
	for i, f := range forks {
		heads[i] = f.ObjectID
	}
	lowest := oldNum
	if err := tx.QueryRowContext(ctx, m.sql(`SELECT COALESCE(MIN(block_num), ?) FROM blocks WHERE `+m.drv.ColumnIn("header_signature")),
		oldNum, m.stmt.list(heads)).Scan(&lowest); err != nil {
		return err
	}
	walk, err := queryStrings(ctx, tx, m.sql(ancestorsSQL+` SELECT id FROM walk`), id, min(lowest, oldNum))
	if err != nil {
		return err
	}
	for _, h := range heads {
		if slices.Contains(walk, h) {
			if err := c.unfork(ctx, tx, h); err != nil {
				return err
			}
		}
	}
	if slices.Contains(walk, old) {
		return nil
	}
	// The old committed chain was abandoned: it becomes a fork.
	return m.blocks.Hold(ForkHolder, m.forkTTL).Execute(ctx, tx, old)
}

// unfork drops id's fork-cache hold, if it has one.
func (c *ChainController) unfork(ctx context.Context, tx refset.Tx, id string) error {
	err := c.m.blocks.Unhold(ForkHolder).Execute(ctx, tx, id)
	if errors.Is(err, refset.ErrNotFound) {
		return nil
	}
	return err
}

// ancestorsSQL walks from a block (the first parameter) through its ancestors down to
// a height (the second): usually a step or two, from a new head to the old one's
// height.
const ancestorsSQL = `WITH RECURSIVE walk(id, prev) AS (
		SELECT header_signature, previous_block_ref FROM blocks WHERE header_signature = ?
		UNION ALL
		SELECT b.header_signature, b.previous_block_ref FROM walk JOIN blocks b ON b.header_signature = walk.prev
		WHERE b.block_num >= ?)`

// Head returns the committed head's ID, or "" before the first block. Errors:
// those of Manager.Get.
func (c *ChainController) Head(ctx context.Context) (_ string, err error) {
	if err := c.manager().opened("head"); err != nil {
		return "", err
	}
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	id, _, err := c.head(ctx, refsetdriver.ReaderFor(ctx, c.m.db))
	return id, err
}

// Commit makes a stored block the committed head (a node's consensus may decide
// against fork choice). When the block extends the old head, the old head is simply
// committed history; otherwise the old head's chain was abandoned and becomes a
// fork, which the fork cache keeps for ForkTTL. Only a complete block can be
// committed: one linked to its predecessor, down to genesis. Errors, changing
// nothing: refset.ErrInvalidID (an empty id), ErrUnknownBlock (id is not stored),
// ErrMissingPredecessor (id is stored but not linked to its predecessor: it waits
// in the Completer), and those of refset.InTx.
func (c *ChainController) Commit(ctx context.Context, id string) error {
	if err := c.manager().opened("commit"); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("blockmanager: commit: %w: the empty block ID names no block", refset.ErrInvalidID)
	}
	return refset.InTx(ctx, c.m.db, func(ctx context.Context, tx refset.Tx) error {
		m := c.m
		if err := m.lock(ctx, tx, "chain-controller"); err != nil {
			return err
		}
		var prevID string
		var prev sql.NullString
		if err := scanBlock(ctx, tx, m.sql(`SELECT previous_block_id, previous_block_ref FROM blocks WHERE header_signature = ?`),
			[]any{id}, &prevID, &prev); err != nil {
			return err
		}
		if !prev.Valid && prevID != NullBlockID {
			// Committed, it would be both the Completer's and the controller's, and
			// the head of a chain that does not reach genesis.
			return fmt.Errorf("%w: cannot commit %s: it is not linked to its predecessor %s (it waits in the Completer): %w",
				ErrMissingPredecessor, shown(id), shown(prevID), refset.ErrNotFound)
		}
		head, headNum, err := c.head(ctx, tx)
		if err != nil {
			return err
		}
		if head == id {
			return nil
		}
		err = c.commit(ctx, tx, id, head, headNum, false)
		if errors.Is(err, refset.ErrNotFound) && !errors.Is(err, ErrUnknownBlock) {
			// chain_heads' foreign key: a collector deleted the block since.
			err = fmt.Errorf("%w: %s: %w", ErrUnknownBlock, shown(id), err)
		}
		return err
	})
}

// Forks returns the fork heads the cache holds, with when each expires. Errors:
// those of Manager.Get.
func (c *ChainController) Forks(ctx context.Context) (_ map[string]time.Time, err error) {
	if err := c.manager().opened("forks"); err != nil {
		return nil, err
	}
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	_, holds, err := c.m.drv.SchemaSQL().ListHolds(ctx, refsetdriver.ReaderFor(ctx, c.m.db), forkHolds, refsetdriver.HoldFilter{Holder: ForkHolder})
	if err != nil {
		return nil, err
	}
	forks := make(map[string]time.Time, len(holds))
	for _, h := range holds {
		forks[h.ObjectID] = h.ExpiresAt
	}
	return forks, nil
}
