package blockmanager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// Completer receives blocks in any order. A block whose predecessor is stored is
// linked to it and handed to the chain controller at once; one whose predecessor is
// missing is stored unlinked, with a pending_blocks row that keeps it alive. When the
// predecessor arrives, every block waiting for it is linked and handed over: the
// release command deletes its pending row and the controller's acquire command
// records it, in one transaction, so a block is always either pending or the
// controller's, never both and never neither, whenever the process stops. A waiting
// block that cannot follow its predecessor once that one is stored (its number is
// not one more) can never be completed: it waits no more (Outcome.Discarded) and
// clean-up takes it, so it never holds up its predecessor's arrival.
type Completer struct {
	m  *Manager
	cc *ChainController
}

// Completer returns a completer that hands completed blocks to the chain controller.
func (m *Manager) Completer() *Completer { return &Completer{m: m, cc: m.Controller()} }

// manager is the Manager c works for; nil for a Completer its Manager did not make.
func (c *Completer) manager() *Manager {
	if c == nil {
		return nil
	}
	return c.m
}

// Outcome is what Receive did with a block.
type Outcome struct {
	Duplicate bool // the block was stored already; nothing changed
	Pending   bool // its predecessor is missing, or itself waits; it waits
	Completed int  // blocks handed to the controller: this one and those that waited for it
	// Discarded are blocks that waited for this one, or for one it completed, but
	// do not follow it (their number is wrong), so they can never be completed, and
	// the blocks that waited for those: they wait no more, and clean-up takes them.
	// This block is among them (and not Pending) when it waits for one of them, as
	// it does when it closes a circle of blocks waiting for each other. A block that
	// does not follow its predecessor never holds up the predecessor's arrival.
	Discarded []string
}

// Receive takes one block, in one transaction. Errors: refset.ErrInvalidID (an empty
// or malformed ID, see Block), ErrBrokenChain (a block that is its own predecessor, a
// genesis block not numbered 0, any other numbered below 1, or a block whose number
// does not follow its stored predecessor's, whether that one is complete or still
// waits), changing nothing; and those of refset.InTx.
func (c *Completer) Receive(ctx context.Context, b Block) (Outcome, error) {
	if err := c.manager().opened("receive"); err != nil {
		return Outcome{}, err
	}
	if err := checkBlock(b); err != nil {
		return Outcome{}, err
	}
	var out Outcome
	err := refset.InTx(ctx, c.m.db, func(ctx context.Context, tx refset.Tx) error {
		var err error
		out, err = c.receive(ctx, tx, b)
		return err
	})
	return out, err
}

func (c *Completer) receive(ctx context.Context, tx refset.Tx, b Block) (Outcome, error) {
	m := c.m
	// Two receivers of one block: the second waits, then finds it stored.
	if err := m.lock(ctx, tx, b.HeaderSignature); err != nil {
		return Outcome{}, err
	}
	already, err := m.storedIDs(ctx, tx, []string{b.HeaderSignature})
	if err != nil {
		return Outcome{}, err
	}
	if already[b.HeaderSignature] {
		return Outcome{Duplicate: true}, nil
	}
	b.PreviousBlockRef = nil
	prev, stored, waiting, err := c.mustWait(ctx, tx, b)
	if err != nil {
		return Outcome{}, err
	}
	if waiting {
		// A decision to wait is checked again behind the arrivals gate (see
		// passGate): the predecessor may be arriving in a transaction not yet
		// committed.
		if err := m.passGate(ctx, tx, true); err != nil {
			return Outcome{}, err
		}
		if prev, stored, waiting, err = c.mustWait(ctx, tx, b); err != nil {
			return Outcome{}, err
		}
	} else if err := m.passGate(ctx, tx, false); err != nil {
		// An arrival passes the gate before it takes anything else (the chain
		// controller's lock), so no lock waits behind it in a circle.
		return Outcome{}, err
	}
	// A stored predecessor, complete or waiting, has the number b must follow.
	if stored {
		if err := follows(b, b.PreviousBlockID, prev.num); err != nil {
			return Outcome{}, err
		}
	}
	if waiting {
		// Wait for the predecessor, held by the pending row, in a segment of its
		// own until it is linked.
		if err := m.insertBlocks(ctx, tx, []storedBlock{{Block: b, Segment: newSegment()}}); err != nil {
			return Outcome{}, err
		}
		if _, err := tx.ExecContext(ctx, m.sql(`INSERT INTO pending_blocks (block_id, pending_previous_block_id) VALUES (?, ?)`),
			b.HeaderSignature, b.PreviousBlockID); err != nil {
			return Outcome{}, err
		}
		// Blocks that waited for b but do not follow it can never be completed: so
		// no block waits behind a predecessor it cannot follow, and none waits in a
		// circle (each block of one would have to be numbered one more than the
		// one before it): b itself, when it closed one, waits no more either.
		discarded, err := c.discardStrays(ctx, tx, b.HeaderSignature, b.BlockNum)
		return Outcome{Pending: !slices.Contains(discarded, b.HeaderSignature), Discarded: discarded}, err
	}
	segment := newSegment()
	if stored {
		ref := b.PreviousBlockID
		b.PreviousBlockRef = &ref
		segment = prev.joins
	}
	if err := m.insertBlocks(ctx, tx, []storedBlock{{Block: b, Segment: segment}}); err != nil {
		return Outcome{}, err
	}
	tok, err := m.blocks.UpgradeTx(ctx, tx, b.HeaderSignature)
	if err != nil {
		return Outcome{}, err
	}
	// Nothing of the completer's to release: the block never waited.
	if err := c.handOver(ctx, tx, tok); err != nil {
		return Outcome{}, err
	}
	waited, discarded, err := c.completeWaiting(ctx, tx, []string{b.HeaderSignature})
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Completed: 1 + waited, Discarded: discarded}, nil
}

// mustWait reports whether b's predecessor is stored and, if so, its number, and
// whether b must wait for it, because it is missing or itself waiting. The
// predecessor is locked against collection while this transaction links to it; if
// a collector took it first, the block waits for it like any other.
func (c *Completer) mustWait(ctx context.Context, tx refset.Tx, b Block) (prev predecessor, stored, waiting bool, err error) {
	if b.PreviousBlockID == NullBlockID {
		return prev, false, false, nil
	}
	prev, err = c.m.keepPredecessor(ctx, tx, b.PreviousBlockID, false)
	if errors.Is(err, refset.ErrNotFound) {
		return prev, false, true, nil
	}
	if err != nil {
		return prev, false, false, err
	}
	// A predecessor that is stored but itself waits is not complete either.
	var n int
	err = tx.QueryRowContext(ctx, c.m.sql(`SELECT COUNT(*) FROM pending_blocks WHERE block_id = ?`), b.PreviousBlockID).Scan(&n)
	return prev, true, n > 0, err
}

// strayWaitersSQL reads the blocks that wait for a block (the first parameter) but
// are not numbered one more than it (the second minus one).
const strayWaitersSQL = `SELECT p.block_id FROM pending_blocks p
	WHERE p.pending_previous_block_id = ?
	AND (SELECT b.block_num FROM blocks b WHERE b.header_signature = p.block_id) <> ?
	ORDER BY p.block_id`

// discardStrays ends the wait of the blocks that wait for id, numbered num, but do
// not follow it, and returns them: nothing keeps them any more, and clean-up takes
// them.
func (c *Completer) discardStrays(ctx context.Context, tx refset.Tx, id string, num int64) ([]string, error) {
	strays, err := queryStrings(ctx, tx, c.m.sql(strayWaitersSQL), id, num+1)
	if err != nil {
		return nil, err
	}
	var discarded []string
	for _, s := range strays {
		gone, err := c.discard(ctx, tx, s)
		if err != nil {
			return nil, err
		}
		discarded = append(discarded, gone...)
	}
	return discarded, nil
}

// discard ends the wait of a pending block that can never be completed, and of every
// block that waits for it, directly or through others, since none of them can be
// either; it returns them all, id first. Nothing keeps them any more, and clean-up
// takes them.
func (c *Completer) discard(ctx context.Context, tx refset.Tx, id string) ([]string, error) {
	gone := []string{id}
	for i := 0; i < len(gone); i++ {
		if _, err := tx.ExecContext(ctx, c.m.sql(`DELETE FROM pending_blocks WHERE block_id = ?`), gone[i]); err != nil {
			return nil, err
		}
		behind, err := queryStrings(ctx, tx, c.m.sql(`SELECT block_id FROM pending_blocks WHERE pending_previous_block_id = ? ORDER BY block_id`), gone[i])
		if err != nil {
			return nil, err
		}
		gone = append(gone, behind...)
	}
	return gone, nil
}

// completeWaiting links every block that waits for one of arrived (blocks tx has
// just stored, linked and not pending, lower blocks first) and hands it over, then
// does the same for whatever waited for those, and returns how many it handed over.
// Put does the same through complete, for the blocks it stores: a block is complete
// once its predecessor is, whoever stored the predecessor. It also returns the
// waiting blocks it discarded (see complete).
func (c *Completer) completeWaiting(ctx context.Context, tx refset.Tx, arrived []string) (int, []string, error) {
	m := c.m
	// A receiver deciding that a child of one of the arrived blocks must wait holds
	// the gate exclusive until it commits: passing it here means that child is seen
	// below, or the receiver sees the arrived blocks (see passGate).
	if err := m.passGate(ctx, tx, false); err != nil {
		return 0, nil, err
	}
	waiting, err := c.waitingFor(ctx, tx, arrived)
	if err != nil {
		return 0, nil, err
	}
	return c.complete(ctx, tx, waiting, nil)
}

// complete links and hands over the blocks of waiting (blocks that wait for one tx
// has just stored, in the order waitingFor returns them), then does the same for
// whatever waited for those, and returns how many it handed over. A waiting block
// that does not follow the block it waited for can never be completed: unless it is
// one of keep (the blocks of the branch a Put stores, which must chain: an error), it
// waits no more, is left to clean-up, and is returned among the discarded. tx has
// passed the arrivals gate.
func (c *Completer) complete(ctx context.Context, tx refset.Tx, waiting []waitingBlock, keep map[string]bool) (int, []string, error) {
	m := c.m
	completed := 0
	var discarded []string
	for len(waiting) > 0 {
		var parents []string
		for _, w := range waiting {
			if err := c.link(ctx, tx, w.child, w.parent); err != nil {
				if !errors.Is(err, ErrBrokenChain) || keep[w.child] {
					return 0, nil, err
				}
				gone, err := c.discard(ctx, tx, w.child)
				if err != nil {
					return 0, nil, err
				}
				discarded = append(discarded, gone...)
				continue
			}
			tok, err := m.blocks.UpgradeTx(ctx, tx, w.child)
			if err != nil {
				return 0, nil, err
			}
			if err := c.handOver(ctx, tx, tok, refset.Exec[string](m.sql(`DELETE FROM pending_blocks WHERE block_id = ?`), 1)); err != nil {
				return 0, nil, err
			}
			completed++
			parents = append(parents, w.child)
		}
		var err error
		if waiting, err = c.waitingFor(ctx, tx, parents); err != nil {
			return 0, nil, err
		}
	}
	return completed, discarded, nil
}

// handOver releases tok with the completer's commands and has the controller
// acquire it, inside tx.
func (c *Completer) handOver(ctx context.Context, tx refset.Tx, tok *refset.RefToken[string], release ...refset.Command[string]) error {
	rel, err := tok.Release(release...)
	if err != nil {
		return err
	}
	acq, err := rel.Acquire(c.cc.Accept())
	if err != nil {
		return err
	}
	_, err = acq.CompleteTx(ctx, tx)
	return err
}

// waitingBlock is a pending block and the predecessor it waits for.
type waitingBlock struct{ child, parent string }

// waitingFor returns the blocks that wait for one of parents, in the order of
// parents, then by ID.
func (c *Completer) waitingFor(ctx context.Context, tx refset.Tx, parents []string) ([]waitingBlock, error) {
	if len(parents) == 0 {
		return nil, nil
	}
	waiting, _, err := c.m.scanPending(ctx, tx, c.m.stmt.waitingFor, c.m.stmt.list(parents))
	if err != nil {
		return nil, err
	}
	return waitingFor(waiting, parents), nil
}

// waitingFor is the blocks of waiting that wait for one of parents, in the order of
// parents, then by ID.
func waitingFor(waiting []waitingBlock, parents []string) []waitingBlock {
	if len(waiting) == 0 {
		return nil
	}
	order := make(map[string]int, len(parents))
	for i, p := range parents {
		order[p] = i
	}
	var out []waitingBlock
	for _, w := range waiting {
		if _, ok := order[w.parent]; ok {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b waitingBlock) int {
		return cmp.Or(order[a.parent]-order[b.parent], strings.Compare(a.child, b.child))
	})
	return out
}

// link sets a waiting block's link to its now stored predecessor, after checking its
// number follows.
func (c *Completer) link(ctx context.Context, tx refset.Tx, child, parent string) error {
	p, err := c.m.readPredecessor(ctx, tx, c.m.stmt.predecessor, parent)
	if err != nil {
		return err
	}
	childNum, err := c.m.blockNum(ctx, tx, child)
	if err != nil {
		return err
	}
	if childNum != p.num+1 {
		return fmt.Errorf("%w: %s has number %d after %s's %d", ErrBrokenChain, shown(child), childNum, shown(parent), p.num)
	}
	// Linked, the block leaves its segment of one for its predecessor's, if it can.
	res, err := tx.ExecContext(ctx, c.m.sql(`UPDATE blocks SET previous_block_ref = previous_block_id, segment = ?
		WHERE header_signature = ? AND previous_block_ref IS NULL`), p.joins, child)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(err, fmt.Errorf("blockmanager: linking %s to %s changed %d rows", shown(child), shown(parent), n))
	}
	return nil
}

// missingSQL reads the predecessors pending blocks wait for that are not stored. The
// test is a lookup by key per pending block, a scalar subquery, not NOT EXISTS:
// Postgres turns NOT EXISTS into an anti-join, which it planned as a hash of the
// whole blocks table while pending_blocks had no statistics (TestPlansOnLargeData).
const missingSQL = `SELECT DISTINCT p.pending_previous_block_id FROM pending_blocks p
	WHERE (SELECT 1 FROM blocks b WHERE b.header_signature = p.pending_previous_block_id) IS NULL
	ORDER BY 1`

// Pending returns how many blocks wait for a predecessor, and the predecessors they
// wait for that are not stored (the ones to request from peers). Errors: those of
// Manager.Get.
func (c *Completer) Pending(ctx context.Context) (waiting int, missing []string, err error) {
	if err := c.manager().opened("pending"); err != nil {
		return 0, nil, err
	}
	defer func() { err = refsetdriver.ContextError(ctx, err) }()
	q := refsetdriver.ReaderFor(ctx, c.m.db)
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM pending_blocks`).Scan(&waiting); err != nil {
		return 0, nil, err
	}
	if missing, err = queryStrings(ctx, q, missingSQL); err != nil {
		return 0, nil, err
	}
	return waiting, missing, nil
}
