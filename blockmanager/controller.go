package blockmanager

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/refsetdb/refset/refset"
)

// ForkHolder is the holder name of the chain controller's fork cache in the blocks'
// holds table.
const ForkHolder = "fork-cache"

// ChainController keeps the committed head in chain_heads and every other fork head
// in a fork cache: a hold with an expiry, renewed while the fork grows. A fork that
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
	err := tx.QueryRowContext(ctx, m.sql(`SELECT block_num, previous_block_ref FROM blocks WHERE header_signature = ?`), id).Scan(&num, &prev)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s: %w", ErrUnknownBlock, id, refset.ErrNotFound)
	}
	if err != nil {
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
		if err := c.commit(ctx, tx, id); err != nil {
			return err
		}
		if head != "" && (!prev.Valid || head != prev.String) {
			// The old committed chain becomes a fork.
			return m.blocks.Hold(ForkHolder, m.forkTTL).Execute(ctx, tx, head)
		}
		return nil
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

func (c *ChainController) commit(ctx context.Context, tx refset.Tx, id string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM chain_heads`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, c.m.sql(`INSERT INTO chain_heads (chain_head) VALUES (?)`), id); err != nil {
		return err
	}
	// A committed head needs no fork-cache hold.
	_, err := tx.ExecContext(ctx, c.m.sql(`DELETE FROM blocks_holds WHERE holder = ? AND object_id = ?`), ForkHolder, id)
	return err
}

// Head returns the committed head's ID, or "" before the first block.
func (c *ChainController) Head(ctx context.Context) (string, error) {
	id, _, err := c.head(ctx, c.m.db.Reader())
	return id, err
}

// Commit makes a stored block the committed head (a node's consensus may decide
// against fork choice); the old head's chain becomes a fork.
func (c *ChainController) Commit(ctx context.Context, id string) error {
	return refset.InTx(ctx, c.m.db, func(tx refset.Tx) error {
		if err := c.m.lock(ctx, tx, "chain-controller"); err != nil {
			return err
		}
		head, _, err := c.head(ctx, tx)
		if err != nil {
			return err
		}
		if head == id {
			return nil
		}
		if err := c.commit(ctx, tx, id); err != nil {
			return err
		}
		if head == "" {
			return nil
		}
		return c.m.blocks.Hold(ForkHolder, c.m.forkTTL).Execute(ctx, tx, head)
	})
}

// Forks returns the fork heads the cache holds, with when each expires.
func (c *ChainController) Forks(ctx context.Context) (map[string]time.Time, error) {
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
