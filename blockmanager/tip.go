package blockmanager

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// This file reads the top of a chain for an operator (the refset console) without a
// Manager: Open migrates and installs clean-up, which a tool that only reads must not.

// TipBlock is a block near the top of a chain, as ReadTip found it.
type TipBlock struct {
	ID       string
	Previous string // previous_block_id: what the block says its predecessor is
	Linked   bool   // previous_block_ref is set: the predecessor is stored and linked
	Num      int64
	// Committed says the block is on the committed chain (the head or below it),
	// Fork that it heads a fork the fork cache holds (until ForkExpires, by the
	// database's clock), Pending that it waits for its predecessor.
	Committed, Fork, Pending bool
	ForkExpires              time.Time
}

// Tip is the top of a chain: the committed head and the blocks within a depth of it
// on the committed chain, on the forks the cache holds and among those waiting for a
// predecessor, by height then ID.
type Tip struct {
	Head    string // "" before the first block
	HeadNum int64
	// From is the lowest height read: blocks below it are left out, but for fork
	// heads, each read alone.
	From   int64
	Blocks []TipBlock
	// MoreForks counts the fork heads left out beyond the limit ReadTip was given;
	// Waiting counts every block waiting for its predecessor, at any height.
	MoreForks, Waiting int
}

// walkSQL reads a block and its predecessors down to a height, one lookup by key
// per block.
const walkSQL = `WITH RECURSIVE walk(id, previous_id, ref, num) AS (
		SELECT header_signature, previous_block_id, previous_block_ref, block_num FROM blocks WHERE header_signature = ?
		UNION ALL
		SELECT b.header_signature, b.previous_block_id, b.previous_block_ref, b.block_num
		FROM walk JOIN blocks b ON b.header_signature = walk.ref WHERE b.block_num >= ?)
	SELECT id, previous_id, ref IS NOT NULL, num FROM walk`

// pendingSQL reads the waiting blocks from a height up, highest first. pending_blocks
// is the completer's list of blocks waiting for a predecessor, small beside blocks;
// each of its rows finds its block by key.
const pendingSQL = `SELECT b.header_signature, b.previous_block_id, b.previous_block_ref IS NOT NULL, b.block_num
	FROM pending_blocks p JOIN blocks b ON b.header_signature = p.block_id
	WHERE b.block_num >= ? ORDER BY b.block_num DESC, b.header_signature LIMIT ?`

// ReadTip reads the top of the chain that the blockmanager keeps in db (its tables,
// found as Open finds them): the committed head and depth blocks below it, the fork
// heads the cache holds (at most forks of them: those that expire last) with
// their blocks down to the same height, and up to pending waiting blocks at that
// height or above. It writes nothing, reads on the database's reader, and reads
// blocks by key alone, so its cost follows depth and the limits, not the chain's
// length. Errors: refset.ErrInvalidConfig for a database of no store, and the
// database's, translated (refset.ErrSchema when the tables are missing).
func ReadTip(ctx context.Context, db refset.Database, depth, forks, pending int) (_ Tip, err error) {
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	drv, err := refsetdriver.Of(db)
	if err != nil {
		return Tip{}, fmt.Errorf("blockmanager: read tip: %w", err)
	}
	tip, err := readTip(ctx, refsetdriver.ReaderFor(ctx, db), drv, max(depth, 0), max(forks, 0), max(pending, 0))
	if err != nil {
		if !refset.IsSentinel(err) {
			err = db.TranslateError(err, "")
		}
		return Tip{}, fmt.Errorf("blockmanager: read tip: %w", err)
	}
	return tip, nil
}

func readTip(ctx context.Context, q refset.Querier, drv refsetdriver.Driver, depth, forks, pending int) (Tip, error) {
	var tip Tip
	var err error
	cc := &ChainController{}
	if tip.Head, tip.HeadNum, err = cc.head(ctx, q); err != nil {
		return tip, err
	}
	tip.From = max(tip.HeadNum-int64(depth), 0)
	blocks := map[string]*TipBlock{}
	walk := func(from string, mark func(*TipBlock)) error {
		return walkRows(ctx, q, drv.Rebind(walkSQL), []any{from, tip.From}, func(b TipBlock) {
			if blocks[b.ID] == nil {
				blocks[b.ID] = &b
			}
			mark(blocks[b.ID])
		})
	}
	if tip.Head != "" {
		if err := walk(tip.Head, func(b *TipBlock) { b.Committed = true }); err != nil {
			return tip, err
		}
	}
	// The fork cache's holds, latest to expire first: those are the forks an
	// operator still has time to look at. Holds taken within one tick of the
	// database's clock (a millisecond on SQLite) expire together: the one taken last
	// comes first, then the greater ID, so that a page shows the same forks each time.
	_, holds, err := drv.SchemaSQL().ListHolds(ctx, q, forkHolds, refsetdriver.HoldFilter{Holder: ForkHolder})
	if err != nil {
		return tip, err
	}
	slices.SortFunc(holds, func(a, b refsetdriver.Hold) int {
		return cmp.Or(b.ExpiresAt.Compare(a.ExpiresAt), b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ObjectID, a.ObjectID))
	})
	if len(holds) > forks {
		tip.MoreForks, holds = len(holds)-forks, holds[:forks]
	}
	for _, h := range holds {
		first := true
		err := walk(h.ObjectID, func(b *TipBlock) {
			if first {
				b.Fork, b.ForkExpires, first = true, h.ExpiresAt, false
			}
		})
		if err != nil {
			return tip, err
		}
	}
	err = walkRows(ctx, q, drv.Rebind(pendingSQL), []any{tip.From, pending}, func(b TipBlock) {
		if blocks[b.ID] == nil {
			blocks[b.ID] = &b
		}
		blocks[b.ID].Pending = true
	})
	if err != nil {
		return tip, err
	}
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM pending_blocks`).Scan(&tip.Waiting); err != nil {
		return tip, err
	}
	for _, b := range blocks {
		tip.Blocks = append(tip.Blocks, *b)
	}
	slices.SortFunc(tip.Blocks, func(a, b TipBlock) int {
		return cmp.Or(cmp.Compare(a.Num, b.Num), strings.Compare(a.ID, b.ID))
	})
	return tip, nil
}

// walkRows reads the blocks query returns (ID, previous ID, linked, height) and
// hands each to fn.
func walkRows(ctx context.Context, q refset.Querier, query string, args []any, fn func(TipBlock)) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var b TipBlock
		if err := rows.Scan(&b.ID, &b.Previous, &b.Linked, &b.Num); err != nil {
			return err
		}
		fn(b)
	}
	return rows.Err()
}
