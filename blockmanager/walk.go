package blockmanager

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"iter"
	"runtime"
	"strings"
	"sync"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// Branch walks from tip back to genesis (or to the oldest block whose predecessor
// is not linked yet), reading a page of blocks per query: one range scan of a
// segment (see segment.go), however many other blocks are stored. On a database
// with a replica it reads the replica, and carries on from the primary wherever the
// walk would end short of genesis there: at a tip, link, block or segment the
// replica has not replayed yet. A walk right after a Put of its tip therefore
// yields the whole branch. An unknown tip yields ErrUnknownBlock, and so does a
// block of the branch that clean-up deletes during the walk (a branch nothing
// holds), rather than end the walk short of where the branch ends; a failed read
// yields the errors of Get, and ends the walk.
func (m *Manager) Branch(ctx context.Context, tip string) iter.Seq2[*Block, error] {
	return func(yield func(*Block, error) bool) {
		if err := m.opened("branch"); err != nil {
			yield(nil, err)
			return
		}
		w := m.walk(ctx, tip, false)
		for {
			b, err := w.next()
			if err != nil {
				yield(nil, refsetdriver.ContextError(ctx, err))
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
// ErrUnknownBlock (either tip is not stored, or a block of either branch was deleted
// during the walk, as Branch says), and those of Get.
func (m *Manager) BranchDiff(ctx context.Context, tip, exclude string) ([]*Block, error) {
	diff, _, err := m.diverge(ctx, tip, exclude)
	return diff, refsetdriver.ContextError(ctx, err)
}

// CommonAncestor returns the newest block on both branches, or nil if they share
// none. Errors: those of BranchDiff.
func (m *Manager) CommonAncestor(ctx context.Context, a, b string) (*Block, error) {
	_, common, err := m.diverge(ctx, a, b)
	return common, refsetdriver.ContextError(ctx, err)
}

// diverge walks tip's branch, reading whole blocks, beside exclude's, reading only
// links, down to the block both share: the walk that is higher steps down (both, at
// one height), and every block of tip's it steps past differs.
func (m *Manager) diverge(ctx context.Context, tip, exclude string) (diff []*Block, common *Block, err error) {
	if err := m.opened("diverge"); err != nil {
		return nil, nil, err
	}
	a, b := m.walk(ctx, tip, false), m.walk(ctx, exclude, true)
	ta, err := a.next()
	if err != nil {
		return nil, nil, err
	}
	tb, err := b.next()
	if err != nil {
		return nil, nil, err
	}
	for ta != nil {
		if tb != nil && ta.HeaderSignature == tb.HeaderSignature {
			return diff, ta, nil
		}
		// Without a block of exclude's left, the rest of tip's branch differs.
		stepA, stepB := tb == nil || ta.BlockNum >= tb.BlockNum, tb != nil && tb.BlockNum >= ta.BlockNum
		if stepA {
			diff = append(diff, ta)
			if ta, err = a.next(); err != nil {
				return nil, nil, err
			}
		}
		if stepB {
			if tb, err = b.next(); err != nil {
				return nil, nil, err
			}
		}
	}
	return diff, nil, nil
}

// The walker's two ways to read a page, newest block first; %[1]s is the columns
// read (a columns' List), each prefixed "b.", and %[2]s the same without the prefix.
//
// segmentPageSQL reads the blocks of the start block's segment in a range of heights
// at and below its own: one range scan of the (segment, block_num) index. It takes
// the start block's ID twice, how far below its height the range starts, the ID
// again, how far below it the range ends, and the range's length: a page, from 0 to
// the page's size, or a part of one (see readSegment). The segment and height are
// subqueries, not a join: Postgres plans a join of the start block with the segment
// not knowing which segment, and where most blocks share one (segment 0, or a table
// holding one long chain) it chose to hash the whole table and sort it, for every
// page. The heights are bounded below as well as above (a segment holds one block a
// height, so the bound cuts nothing the LIMIT keeps, but where it has gaps): a
// segment newer than the table's statistics, as a branch's newest always is, is
// estimated at a few rows, and Postgres then read the whole segment below the start
// and sorted it, for every page, instead of the page's rows.
//
// linkPageSQL follows the links in the database, one index lookup a block, for
// where segments are short. It takes the start block's ID and the page size.
const (
	segmentPageSQL = `SELECT %[1]s FROM blocks b
		WHERE b.segment = (SELECT segment FROM blocks WHERE header_signature = ?)
		AND b.block_num <= (SELECT block_num FROM blocks WHERE header_signature = ?) - ?
		AND b.block_num > (SELECT block_num FROM blocks WHERE header_signature = ?) - ?
		ORDER BY b.block_num DESC LIMIT ?`
	linkPageSQL = `WITH RECURSIVE walk AS (
			SELECT %[1]s, 1 AS depth FROM blocks b WHERE b.header_signature = ?
			UNION ALL
			SELECT %[1]s, w.depth + 1 FROM walk w JOIN blocks b ON b.header_signature = w.previous_block_ref
			WHERE w.depth < ?)
		SELECT %[2]s FROM walk ORDER BY depth`
)

// minSegmentRun is how many blocks of the branch a segment page must yield for the
// next page to be read by segment again; after a shorter one the walker reads a
// page by links, which costs an index lookup a block but takes a page of them in
// one query, however short the segments.
const minSegmentRun = 32

// maxPageGrowth bounds how many times larger than Config.PageSize a page grows.
const maxPageGrowth = 16

// minPagePart is the fewest blocks a part of a segment page holds on SQLite. Where
// Go may run on more than one core, a segment page of at least two parts' worth of
// the branch's heights is read as two range scans, of its upper and its lower
// heights, at once, on two connections. On SQLite all of a walk's work is the
// walk's own goroutine's (SQLite's stepping and reading of rows, in cgo calls, a
// third of it; the rows' conversion into blocks), which two parts share between
// two cores. On Postgres the server's finding and sending the rows takes about as
// long as the client's decoding them, on other cores already: two parts measured
// no faster there, on two cores (see BENCHMARKS.md), and pages are read whole.
const minPagePart = 500

// walker reads a branch newest first, a page per query (or two: see readSegment),
// and follows the links through each page in memory. Each page that the branch
// fills is followed by one twice as large, up to maxPageGrowth times the first: a
// long walk takes a few queries, and one that stops early has read at most about
// as much again as it used.
//
// On a database with a replica the walk reads the replica, and trusts what it finds
// there: a block and its link never change once the link is set, and its segment
// is only a hint the walk checks. Where the walk would end anywhere but at genesis
// (a tip or block the replica lacks, a block not linked to its predecessor, a
// failed read: a replica that has not replayed the segments' migration fails its
// pages), the replica may just be behind, so the walk goes on from that block on
// the primary, to the end. A block's segment changes only with its link (the
// Completer moves a block it links into its predecessor's segment), so a segment
// the replica has not replayed is one of blocks it lacks or has unlinked, and a
// segment that has other blocks on the replica than on the primary only costs
// reads: the walk checks every link, and starts the next page at the block it
// expects.
type walker struct {
	m         *Manager
	ctx       context.Context
	q         refset.Querier // where pages are read: the replica, then the primary
	onReplica bool           // q is the replica
	inUnit    bool           // q is the transaction of the unit of work ctx carries
	links     bool           // read only ID, link and height, not whole blocks
	from      string         // the next block to read; "" when the branch ended
	height    int64          // the height from's predecessor link implies; -1 unknown
	found     bool           // whether the first block was found (an unknown tip is an error)
	size      int            // the next page's size
	// byLinks says the next page follows links: the last segment page yielded
	// fewer than minSegmentRun blocks of the branch.
	byLinks bool
	page    []*Block
	pages   int // how many pages it read
	parts   int // how many queries it read them with
}

func (m *Manager) walk(ctx context.Context, tip string, links bool) *walker {
	w := &walker{m: m, ctx: ctx, q: refsetdriver.ReaderFor(ctx, m.db), from: tip, height: -1, links: links, size: m.pageSize}
	if _, w.inUnit = refsetdriver.UnitTx(ctx, m.db); w.inUnit {
		return w // the unit's own transaction, which sees what the unit wrote
	}
	if replica := refsetdriver.ReplicaOf(m.drv); replica != nil {
		w.q, w.onReplica = replica, true
	}
	return w
}

// toPrimary makes the walk read the primary from now on, because of reason (as
// refset.Observer.ReadFellBack names it).
func (w *walker) toPrimary(reason string) {
	w.q, w.onReplica = refsetdriver.ReaderFor(w.ctx, w.m.db), false
	w.m.drv.Observer().ReadFellBack(w.ctx, "branch", reason)
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

// fill reads the next page from w.from, and follows the links through it.
func (w *walker) fill() error {
	m := w.m
	query := segmentPageSQL
	if w.byLinks {
		query = linkPageSQL
	}
	cols := wholeBlocks
	if w.links {
		cols = linksOnly
	}
	query = m.sql(fmt.Sprintf(query, cols.prefixed, cols.list))
	var rows []*Block
	var err error
	if w.byLinks {
		rows, err = w.read(cols, query, w.from, w.size)
	} else {
		rows, err = w.readSegment(cols, query)
	}
	if err != nil {
		if w.onReplica && w.ctx.Err() == nil {
			w.toPrimary("failed") // and next reads this page again there
			return nil
		}
		return err
	}
	w.pages++
	if len(rows) == 0 { // w.from is not stored
		if w.onReplica {
			w.toPrimary("missing") // and next reads this page again there
			return nil
		}
		if !w.found {
			return fmt.Errorf("%w: %s: %w", ErrUnknownBlock, shown(w.from), refset.ErrNotFound)
		}
		// A link to a block that is gone: the foreign key keeps a linked block while
		// the block linking to it is stored, so clean-up deleted the branch under the
		// walk (nothing held it). Its end is not the branch's end.
		return fmt.Errorf("%w: %s, linked from a block this walk passed, was deleted during the walk (hold a branch to walk it): %w",
			ErrUnknownBlock, shown(w.from), refset.ErrNotFound)
	}
	w.found = true
	yielded := w.follow(rows)
	if yielded == w.size {
		w.size = min(2*w.size, maxPageGrowth*m.pageSize)
	}
	w.byLinks = !w.byLinks && yielded < min(minSegmentRun, m.pageSize)
	return nil
}

// readSegment reads a segment page whole or, where it spans at least two parts'
// worth of heights (m.pagePart; see minPagePart), in two parts at once: its upper
// heights, then the rest. The link the walk followed to w.from tells its height,
// and so how many heights are left below it to share out. The tip's height is not
// known, and the first page is split as if the branch filled it: where the branch
// is shorter, the lower part costs a query that finds nothing; where it is long,
// the first page takes half the time (it is a fifth of a BranchDiff of two
// 5,000-block forks, whose first pages are of 1,000 blocks each). The parts' rows
// are the page's, in the same order, but where a segment holds more than one block
// a height (writers that raced, blocks stored before segments existed): each
// part's limit may then cut rows off its own bottom, and the walk, finding the
// block it expects missing, starts the next page at it, as at the end of a page.
func (w *walker) readSegment(cols columns, query string) ([]*Block, error) {
	part := func(from, to int) ([]*Block, error) {
		return w.read(cols, query, w.from, w.from, from, w.from, to, to-from)
	}
	w.parts++
	span := w.size
	if w.height >= 0 {
		span = int(min(int64(span), w.height+1))
	}
	// A unit's transaction is one connection, which runs one query at a time.
	if w.m.pagePart == 0 || span < 2*w.m.pagePart || runtime.GOMAXPROCS(0) < 2 || w.inUnit {
		return part(0, w.size)
	}
	w.parts++
	var low []*Block
	var lowErr error
	var wg sync.WaitGroup
	wg.Go(func() { low, lowErr = part(span/2, w.size) })
	rows, err := part(0, span/2)
	wg.Wait()
	if err = cmp.Or(err, lowErr); err != nil {
		return nil, err
	}
	return append(rows, low...), nil
}

// read runs a page's query and scans its rows, which have cols. Every row is
// scanned into the same variables, then copied into a block; the blocks of a page
// are allocated together.
func (w *walker) read(cols columns, query string, args ...any) ([]*Block, error) {
	rows, err := w.q.QueryContext(w.ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var row Block
	var ref sql.NullString
	dest := cols.fields(&row, &ref)
	var out []*Block
	var slab []Block
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if len(slab) == cap(slab) {
			slab = make([]Block, 0, min(64, w.size))
		}
		slab = append(slab, row)
		b := &slab[len(slab)-1]
		if ref.Valid {
			link := ref.String
			b.PreviousBlockRef = &link
		}
		out = append(out, b)
	}
	return out, rows.Close()
}

// columns is what a walk reads of each block.
type columns struct {
	list, prefixed string // the columns, and the same prefixed "b."
	// fields are where Scan puts a row's columns: a block's fields, but the link,
	// which goes to ref (database/sql scans a nullable string into a
	// *string through reflection, into a NullString without).
	fields func(b *Block, ref *sql.NullString) []any
}

var (
	// wholeBlocks reads blocks as the set's store maps them (a test checks the
	// columns against the store's mapping of Block).
	wholeBlocks = newColumns([]string{"header_signature", "previous_block_id", "previous_block_ref", "block_num", "batch_ids", "transaction_ids", "payload"},
		func(b *Block, ref *sql.NullString) []any {
			return []any{&b.HeaderSignature, &b.PreviousBlockID, ref, &b.BlockNum, &b.BatchIDs, &b.TransactionIDs, &b.Payload}
		})
	// linksOnly reads what a walk needs to follow a branch.
	linksOnly = newColumns([]string{"header_signature", "previous_block_ref", "block_num"},
		func(b *Block, ref *sql.NullString) []any { return []any{&b.HeaderSignature, ref, &b.BlockNum} })
)

func newColumns(names []string, fields func(*Block, *sql.NullString) []any) columns {
	prefixed := make([]string, len(names))
	for i, n := range names {
		prefixed[i] = "b." + n
	}
	return columns{list: strings.Join(names, ", "), prefixed: strings.Join(prefixed, ", "), fields: fields}
}

// follow walks the links from w.from through rows, newest first, onto the page, and
// returns how many blocks it took. Rows of other branches (at the heights it
// passes) are passed over; a row below the height of the block it expects means
// that block is not in the page, and the next page starts at it. On the replica, a
// block not linked to its predecessor may only lack a link the replica has not
// replayed: the walk reads it again on the primary.
func (w *walker) follow(rows []*Block) int {
	taken := 0
	expect, height := w.from, int64(-1) // the first row of w.from's height is found below
	for _, b := range rows {
		if b.HeaderSignature != expect {
			if height >= 0 && b.BlockNum < height {
				break
			}
			continue
		}
		if b.PreviousBlockRef == nil && b.BlockNum != 0 && w.onReplica {
			// (A block numbered 0 is genesis, or one that can never be linked.)
			w.from, w.height = expect, height
			w.toPrimary("missing")
			return taken
		}
		w.page = append(w.page, b)
		taken++
		if b.PreviousBlockRef == nil {
			w.from = ""
			return taken
		}
		expect, height = *b.PreviousBlockRef, b.BlockNum-1
	}
	w.from, w.height = expect, height
	return taken
}
