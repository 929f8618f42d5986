package blockmanager

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// ForkHolder is the holder name of the chain controller's fork cache in the blocks'
// holds table.
const ForkHolder = "fork-cache"

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
		if _, err := tx.ExecContext(ctx, m.sql(`DELETE FROM blocks_holds WHERE holder = ? AND object_id = ?`), ForkHolder, prev.String); err != nil {
			return err
		}
	}
	head, headNum, err := c.head(ctx, tx)
	if err != nil {
		return err
	}
	if head == "" || num > headNum || (num == headNum && id < head) {
		return c.commit(ctx, tx, id, head, headNum, prev.Valid && prev.String == head)
	}
	return m.blocks.Hold(ForkHolder, m.forkTTL).Execute(ctx, tx, id)
}

// head is the committed head and its number, or "" before the first block.
func (c *ChainController) head(ctx context.Context, q refset.Querier) (string, int64, error) {
	var id string
	var num int64
	err := q.QueryRowContext(ctx, `SELECT h.chain_head, b.block_num FROM chain_heads h
		JOIN blocks b ON b.header_signature = h.chain_head`).Scan(&id, &num)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return id, num, err
}

// commit makes id the committed head in place of old (numbered oldNum; "" before the
// first block). The committed chain needs no fork-cache holds, so id and its
// ancestors down to old's height lose theirs; old becomes a fork only if it is not
// one of those ancestors, for a committed block is no fork, and a node that commits
// every block would otherwise add one fork-cache entry per block. extendsOld says
// the caller knows old is id's predecessor, which spares the walk. Only a switch to
// another branch walks further, down to the lowest fork head, since a fork head
// below old's height may be on the branch now committed.
func (c *ChainController) commit(ctx context.Context, tx refset.Tx, id, old string, oldNum int64, extendsOld bool) error {
	m := c.m
	if _, err := tx.ExecContext(ctx, `DELETE FROM chain_heads`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, m.sql(`INSERT INTO chain_heads (chain_head) VALUES (?)`), id); err != nil {
		return err
	}
	if old == "" {
		_, err := tx.ExecContext(ctx, m.sql(`DELETE FROM blocks_holds WHERE holder = ? AND object_id = ?`), ForkHolder, id)
		return err
	}
	// unholdDownTo removes the fork-cache holds of id and its ancestors down to height.
	unholdDownTo := func(height int64) error {
		_, err := tx.ExecContext(ctx, m.sql(ancestorsSQL+`
		DELETE FROM blocks_holds WHERE holder = ? AND object_id IN (SELECT id FROM walk)`), id, height, ForkHolder)
		return err
	}
	if err := unholdDownTo(oldNum); err != nil {
		return err
	}
	if extendsOld {
		return nil
	}
	var ancestor bool
	if err := tx.QueryRowContext(ctx, m.sql(ancestorsSQL+`
		SELECT EXISTS (SELECT 1 FROM walk WHERE id = ?)`), id, oldNum, old).Scan(&ancestor); err != nil {
		return err
	}
	if ancestor {
		return nil
	}
	var lowest int64
	if err := tx.QueryRowContext(ctx, m.sql(`SELECT COALESCE(MIN(b.block_num), ?) FROM blocks_holds h
		JOIN blocks b ON b.header_signature = h.object_id WHERE h.holder = ?`), oldNum, ForkHolder).Scan(&lowest); err != nil {
		return err
	}
	if lowest < oldNum {
		if err := unholdDownTo(lowest); err != nil {
			return err
		}
	}
	// The old committed chain was abandoned: it becomes a fork.
	return m.blocks.Hold(ForkHolder, m.forkTTL).Execute(ctx, tx, old)
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
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	id, _, err := c.head(ctx, c.m.db.Reader())
	return id, err
}

// Commit makes a stored block the committed head (a node's consensus may decide
// against fork choice). When the block extends the old head, the old head is simply
// committed history; otherwise the old head's chain was abandoned and becomes a
// fork, which the fork cache keeps for ForkTTL. Errors: ErrUnknownBlock, and those
// of refset.InTx.
func (c *ChainController) Commit(ctx context.Context, id string) error {
	return refset.InTx(ctx, c.m.db, func(tx refset.Tx) error {
		if err := c.m.lock(ctx, tx, "chain-controller"); err != nil {
			return err
		}
		head, headNum, err := c.head(ctx, tx)
		if err != nil {
			return err
		}
		if head == id {
			return nil
		}
		return c.commit(ctx, tx, id, head, headNum, false)
	})
}

// Forks returns the fork heads the cache holds, with when each expires. Errors:
// those of Manager.Get.
func (c *ChainController) Forks(ctx context.Context) (_ map[string]time.Time, err error) {
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	rows, err := c.m.db.Reader().QueryContext(ctx, c.m.sql(`SELECT object_id, expires_at FROM blocks_holds WHERE holder = ?`), ForkHolder)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	forks := make(map[string]time.Time)
	for rows.Next() {
		var id string
		var exp any
		if err := rows.Scan(&id, &exp); err != nil {
			return nil, err
		}
		switch v := exp.(type) {
		case time.Time:
			forks[id] = v
		case int64: // SQLite keeps Unix milliseconds
			forks[id] = time.UnixMilli(v)
		}
	}
	return forks, rows.Err()
}
