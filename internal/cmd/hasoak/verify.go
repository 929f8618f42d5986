package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/examples/custody/tokens"
	"github.com/refsetdb/refset/store"
)

// verdict is what the checks found on the final primary.
type verdict struct {
	primaryPort int
	// Operations: acknowledged but not there, failed but there, and of the unknown
	// ones those that turned out committed.
	ackedLost, failedPresent, unknownCommitted int
	lost, present                              []string // a few of each, for the report
	audit                                      tokens.Audit
	leaked, dangling                           int64
	chain                                      []string // what is wrong with the chain or clean-up; empty when whole
	books                                      []string // what is wrong with custody's books beyond Audit
}

// verify checks every operation and the invariants on a pool opened now, which the
// multi-host DSN leads to the final primary. It fills in each op's Found.
func (w *workload) verify(ctx context.Context, cfg config, ops []op) (*verdict, error) {
	db, err := w.open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	v := &verdict{}
	var standby bool
	if err := db.Pool().QueryRowContext(ctx, `SELECT inet_server_port(), pg_is_in_recovery()`).Scan(&v.primaryPort, &standby); err != nil {
		return nil, err
	}
	if standby {
		return nil, fmt.Errorf("the DSN led to a standby (port %d)", v.primaryPort)
	}
	m, err := blockmanager.Open(ctx, db, blockmanager.Config{ForkTTL: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	vault, err := tokens.Open(ctx, db, tokens.Config{})
	if err != nil {
		return nil, err
	}
	tokensGC, err := store.NewCollector(ctx, db, cleanup.Config{Table: "tokens", Grace: time.Minute})
	if err != nil {
		return nil, err
	}
	st, err := readState(ctx, db.Pool(), m)
	if err != nil {
		return nil, err
	}
	v.checkOps(ops, st)
	v.chain = st.chainProblems(ctx, m)
	if v.audit, err = vault.Audit(ctx); err != nil {
		return nil, err
	}
	for _, c := range []*cleanup.Collector{m.Collector(), tokensGC} {
		r, err := c.Check(ctx)
		if err != nil {
			return nil, err
		}
		v.leaked += r.Leaked
		v.dangling += r.Dangling
		if !r.OK() {
			v.chain = append(v.chain, fmt.Sprintf("clean-up of %s: %d leaked, %d dangling: %v", c.Table(), r.Leaked, r.Dangling, r.Samples))
		}
	}
	return v, nil
}

// state is what the checks read of the final primary.
type state struct {
	blocks  map[string]storedBlock
	pending map[string]bool
	heads   []string
	forks   map[string]bool
	// Custody, by transaction ID: it created tokens (a payment or spend made), it
	// spent tokens, it holds locks.
	created, spent, locks map[string]bool
}

// storedBlock is a row of blockmanager's blocks table.
type storedBlock struct {
	ID      string         `db:"header_signature"`
	PrevID  string         `db:"previous_block_id"`
	PrevRef sql.NullString `db:"previous_block_ref"`
	Num     int64          `db:"block_num"`
}

func readState(ctx context.Context, db *sqlx.DB, m *blockmanager.Manager) (*state, error) {
	st := &state{blocks: map[string]storedBlock{}, forks: map[string]bool{}}
	var blocks []storedBlock
	if err := db.SelectContext(ctx, &blocks, `SELECT header_signature, previous_block_id, previous_block_ref, block_num FROM blocks`); err != nil {
		return nil, err
	}
	for _, b := range blocks {
		st.blocks[b.ID] = b
	}
	if err := db.SelectContext(ctx, &st.heads, `SELECT chain_head FROM chain_heads`); err != nil {
		return nil, err
	}
	for _, read := range []struct {
		query string
		set   *map[string]bool
	}{
		{`SELECT block_id FROM pending_blocks`, &st.pending},
		{`SELECT DISTINCT created_by FROM token_history WHERE NOT issued`, &st.created},
		{`SELECT DISTINCT spent_by FROM token_history WHERE spent_by IS NOT NULL`, &st.spent},
		{`SELECT DISTINCT substr(holder, 4) FROM token_locks WHERE holder LIKE 'tx:%'`, &st.locks},
	} {
		var ids []string
		if err := db.SelectContext(ctx, &ids, read.query); err != nil {
			return nil, err
		}
		*read.set = make(map[string]bool, len(ids))
		for _, id := range ids {
			(*read.set)[id] = true
		}
	}
	forks, err := m.Controller().Forks(ctx)
	for id := range forks {
		st.forks[id] = true
	}
	return st, err
}

// checkOps compares each operation's outcome with what is there. What "there"
// means per kind:
//
//	receive  the block is stored
//	pay      the payment created tokens
//	select   its locks stand, or its spend spent the tokens it locked
//	spend    it created tokens (and spent the locked ones, leaving no lock)
//	release  the transaction holds no lock
//
// A select is not judged when its transaction's release was acknowledged or may
// have committed (that removed what it did), a failed release only when its
// transaction's select was acknowledged and its spend failed (so the locks must
// still stand), and an unknown outcome never: it is only resolved, for the count of
// unknown operations that committed.
func (v *verdict) checkOps(ops []op, st *state) {
	byID := map[string]outcome{}
	for _, o := range ops {
		byID[o.ID] = o.Outcome
	}
	for i := range ops {
		o := &ops[i]
		var found bool
		judge := true
		switch o.Kind {
		case "receive":
			_, found = st.blocks[o.Key]
		case "pay":
			found = st.created[o.Key] || st.spent[o.Key]
		case "select":
			found = st.locks[o.Key] || st.spent[o.Key]
			if r, ok := byID["release:"+o.Key]; ok && r != failed {
				judge = o.Outcome != acked
			}
		case "spend":
			found = st.created[o.Key]
			if found && (!st.spent[o.Key] || st.locks[o.Key]) {
				v.books = append(v.books, o.ID+" created tokens but spent none, or left locks")
			}
		case "release":
			found = !st.locks[o.Key]
			if o.Outcome == failed {
				judge = byID["select:"+o.Key] == acked && byID["spend:"+o.Key] == failed
			}
		}
		o.Found = &found
		switch {
		case o.Outcome == unknown && found:
			v.unknownCommitted++
		case !judge:
		case o.Outcome == acked && !found:
			v.ackedLost++
			v.lost = append(v.lost, o.ID)
		case o.Outcome == failed && found:
			v.failedPresent++
			v.present = append(v.present, o.ID+": "+o.Err)
		}
	}
}

// chainProblems checks that blockmanager's chain is whole: every block but genesis
// is either pending (unlinked, waiting for a predecessor that is missing or itself
// pending) or linked to its stored predecessor with the next number, never both
// and never neither, so no hand-over was left half done; there is one committed
// head, the one fork choice picks among the handed-over blocks (the highest, then
// the lowest ID), whose branch walks down to genesis; and every other handed-over
// block that no block extends is a fork head in the controller's cache, and
// nothing else is.
func (st *state) chainProblems(ctx context.Context, m *blockmanager.Manager) []string {
	var problems []string
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	g, ok := st.blocks[genesis]
	if !ok || g.PrevRef.Valid || g.Num != 0 || st.pending[genesis] {
		bad("genesis missing or changed: %+v", g)
	}
	extended := map[string]bool{}
	var best *storedBlock
	for id, b := range st.blocks {
		if id == genesis {
			continue
		}
		switch {
		case st.pending[id] && b.PrevRef.Valid:
			bad("block %s is both pending and linked", id)
		case !st.pending[id] && !b.PrevRef.Valid:
			bad("block %s is neither pending nor linked: a hand-over half done", id)
		case st.pending[id]:
			if p, stored := st.blocks[b.PrevID]; stored && !st.pending[p.ID] {
				bad("block %s waits for %s, which is stored and handed over", id, b.PrevID)
			}
		default:
			p, stored := st.blocks[b.PrevRef.String]
			if !stored || b.PrevRef.String != b.PrevID || b.Num != p.Num+1 {
				bad("block %s (number %d) is linked to %q, not to its predecessor %s (number %d)", id, b.Num, b.PrevRef.String, b.PrevID, p.Num)
			}
			extended[b.PrevID] = true
			if best == nil || cmp.Or(cmp.Compare(best.Num, b.Num), cmp.Compare(b.ID, best.ID)) < 0 {
				best = &b
			}
		}
	}
	want := genesis
	if best != nil {
		want = best.ID
	}
	if len(st.heads) != 1 || st.heads[0] != want {
		bad("chain heads %v; fork choice says %s", st.heads, want)
		return problems
	}
	n, next := 0, want
	for b, err := range m.Branch(ctx, want) {
		if err != nil {
			bad("walking the head's branch: %v", err)
			break
		}
		if b.HeaderSignature != next {
			bad("the head's branch has %s where %s should be", b.HeaderSignature, next)
			break
		}
		n, next = n+1, b.PreviousBlockID
	}
	if head := st.blocks[want]; int64(n) != head.Num+1 || next != blockmanager.NullBlockID {
		bad("the head's branch has %d blocks down to %s; its number is %d", n, next, head.Num)
	}
	var tips []string
	for id, b := range st.blocks {
		if !st.pending[id] && !extended[id] && id != want && (b.PrevRef.Valid || id == genesis) {
			tips = append(tips, id)
		}
	}
	slices.Sort(tips)
	for _, id := range tips {
		if !st.forks[id] {
			bad("tip %s is not in the fork cache", id)
		}
	}
	for id := range st.forks {
		if _, isTip := slices.BinarySearch(tips, id); !isTip {
			bad("fork head %s is not a tip of a branch", id)
		}
	}
	return problems
}
