package blockmanager

import (
	"context"
	"math/rand/v2"

	"github.com/refsetdb/refset/refset"
)

// Segments are how a walk reads a branch in a few range scans, however many other
// blocks are stored. Every block carries a segment number (the blocks table's
// segment column), and the manager keeps the blocks of one segment on one line of
// a branch, one block per height: a block joins its predecessor's segment when the
// predecessor is the highest block of that segment, and otherwise (a fork off the
// middle of a segment, a block that waits for its predecessor, a genesis block)
// starts a segment of its own, numbered at random. A walk then reads a page of a
// segment, below the block it has reached, with one range scan of the (segment,
// block_num) index, and follows the links through it.
//
// The segment is a hint, never trusted: the walk checks every link. Two writers
// that extend the highest block of a segment at once both join it, and a walk
// through it then passes over the other writer's blocks; where the block the walk
// expects next is not in the page (it is in another segment), the walk starts the
// next page at it. Either costs reads, never a wrong answer. Blocks stored before segments existed,
// and rows written by anything but the manager, are all in segment 0, where a page
// is a range of heights, as walks read them before segments.

// storedBlock is a block as the manager writes it: with its segment. The set's
// store maps Block, which has no segment, so reads through the set never see it.
type storedBlock struct {
	Block
	Segment int64 `db:"segment"`
}

// newSegment numbers a new segment: at random, so writers need not agree on
// numbers, and never 0, the segment of blocks stored before segments existed.
func newSegment() int64 {
	for {
		if s := rand.Int64(); s != 0 {
			return s
		}
	}
}

// predecessor is what a block about to be linked needs of its stored predecessor.
type predecessor struct {
	num int64
	// joins is the segment the block joins: the predecessor's, when the
	// predecessor is the highest block of it, or else a new one.
	joins int64
}

// predecessorSQL reads a block's number and segment, and the height of its
// segment's highest block. The height is a max(), which both databases read at the
// end of the (segment, block_num) index; Postgres planned the same test written as
// NOT EXISTS (a higher block of the segment) as a scan of the whole table, seconds
// at a million blocks.
const predecessorSQL = `SELECT p.block_num, p.segment,
		(SELECT max(s.block_num) FROM blocks s WHERE s.segment = p.segment)
	FROM blocks p WHERE p.header_signature = ?`

// keepPredecessor reads the predecessor id of a block tx is about to link and,
// where the database runs write transactions side by side, takes a KEY SHARE lock
// on its row until tx ends (refsetdriver.TxLocks): the lock a reference insert
// takes, which a collector's FOR UPDATE conflicts with, so a block found here
// cannot be collected before tx links to it. SQLite's one writer gives the same
// guarantee. An id that is not stored is ErrUnknownBlock.
//
// With gate, the same statement passes the arrivals gate (shared; see passGate)
// first, which spares Put a round trip: the gate is taken as the statement joins
// the predecessor's row, before the row lock above the join, and when no row is
// found Put fails and looks for nothing.
func (m *Manager) keepPredecessor(ctx context.Context, tx refset.Tx, id string, gate bool) (predecessor, error) {
	if gate && m.stmt.keepGated != "" {
		return m.readPredecessor(ctx, tx, m.stmt.keepGated, m.locks+gateKey, id)
	}
	return m.readPredecessor(ctx, tx, m.stmt.keep, id)
}

// readPredecessor reads a predecessor with query (one of m.stmt's) and args.
func (m *Manager) readPredecessor(ctx context.Context, q refset.Querier, query string, args ...any) (predecessor, error) {
	var p predecessor
	var segment, highest int64
	if err := scanBlock(ctx, q, query, args, &p.num, &segment, &highest); err != nil {
		return p, err
	}
	p.joins = newSegment()
	if highest == p.num {
		p.joins = segment
	}
	return p, nil
}
