package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// This file gathers each page's data. Every read is one the library's reports make
// (cleanup's Status, Check, Why, Object; the holds reads of the refset command;
// blockmanager.ReadTip), on the replica first where the database has one.

// read runs fn where the console reads what is not a report of cleanup's: on the
// database's replica first, the primary if the replica fails or misses the row.
func read[T any](ctx context.Context, db refset.Database, fn func(q refset.Querier) (T, error)) (T, error) {
	v, err := refsetdriver.ReadReplicaFirst(ctx, db, "console", false, fn)
	if err != nil && !refset.IsSentinel(err) {
		err = db.TranslateError(err, "")
	}
	return v, err
}

// blockmanagerComponent is the schema component blockmanager records: a set on a
// table named blocks in a database that records it is a chain.
const blockmanagerComponent = "blockmanager"

// isChain says whether the set on table is a blockmanager's chain.
func isChain(table string, versions []cleanup.ComponentVersion) bool {
	id, err := sqlident.Parse(table, true)
	if err != nil || id.Name != "blocks" {
		return false
	}
	return slices.ContainsFunc(versions, func(v cleanup.ComponentVersion) bool { return v.Component == blockmanagerComponent })
}

type setsData struct {
	Nav    string
	Cap    int64 // where each count stops counting (cleanup.StatusOptions.Cap)
	Status cleanup.DatabaseStatus
	Sets   []setRow
	Check  *checkResult
}

type setRow struct {
	cleanup.SetStatus
	Chain bool
}

// checkResult is Check's report on one set, asked for with ?check=TABLE.
type checkResult struct {
	Table  string
	Report cleanup.Report
	OK     bool
}

func (c *Console) setsPage(r *http.Request) (any, error) {
	ctx := r.Context()
	st, err := cleanup.StatusWith(ctx, c.db, c.counting())
	if err != nil {
		return nil, err
	}
	d := setsData{Nav: "sets", Cap: c.cfg.CountCap, Status: st}
	for _, s := range st.Sets {
		d.Sets = append(d.Sets, setRow{SetStatus: s, Chain: isChain(s.Table, st.Versions)})
	}
	if table := r.URL.Query().Get("check"); table != "" {
		col, err := cleanup.Inspect(ctx, c.db, cleanup.Config{Table: table})
		if err != nil {
			return nil, err
		}
		rep, err := col.Check(ctx)
		if err != nil {
			return nil, err
		}
		d.Check = &checkResult{Table: table, Report: rep, OK: rep.OK()}
	}
	return d, nil
}

type cleanupData struct {
	Nav    string
	Cap    int64
	Every  time.Duration
	Taken  int
	Now    time.Time
	Err    string
	Charts []setCharts
}

type setCharts struct {
	Table            string
	Queue, Collected chart
}

func (c *Console) cleanupPage(*http.Request) (any, error) {
	samples, lastErr := c.samples.list()
	d := cleanupData{Nav: "cleanup", Cap: c.cfg.CountCap, Every: c.cfg.SampleEvery, Taken: len(samples), Err: lastErr}
	if len(samples) == 0 {
		return d, nil
	}
	d.Now = samples[len(samples)-1].At
	var tables []string
	for _, s := range samples {
		for t := range s.Sets {
			if !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
	}
	slices.Sort(tables)
	for _, t := range tables {
		var queue, collected []point
		for i, s := range samples {
			cur, ok := s.Sets[t]
			if !ok {
				continue
			}
			queue = append(queue, point{At: s.At, Value: float64(cur.Queued.N)})
			if i == 0 {
				continue
			}
			prev, ok := samples[i-1].Sets[t]
			// The count only grows; a fall says it began again (refset's tables
			// migrated down and up): no point for that interval.
			if dt := s.At.Sub(samples[i-1].At); ok && dt > 0 && cur.Collected >= prev.Collected {
				collected = append(collected, point{At: s.At, Value: float64(cur.Collected-prev.Collected) * float64(time.Minute) / float64(dt)})
			}
		}
		ch := setCharts{Table: t,
			Queue:     lineChart("review queue depth of "+t, "entries", queue),
			Collected: lineChart("objects collected per minute in "+t, "objects/min", collected)}
		if last, ok := samples[len(samples)-1].Sets[t]; ok {
			ch.Queue.About = about(last.Queued)
		}
		d.Charts = append(d.Charts, ch)
	}
	return d, nil
}

type objectData struct {
	Nav       string
	Table, ID string
	Now       time.Time
	Fields    []cleanup.Field
	Holders   []cleanup.Holder
	Graph     graph
	Holds     []refsetdriver.Hold
	Unindexed []string
}

// whyNodes bounds the graph of holders the object page draws: each node is one Why.
const whyNodes = 40

func (c *Console) objectPage(r *http.Request) (any, error) {
	ctx := r.Context()
	table, id := r.URL.Query().Get("table"), r.URL.Query().Get("id")
	if table == "" || id == "" {
		return nil, fmt.Errorf("%w: the object page needs ?table=...&id=...", errBadRequest)
	}
	col, err := cleanup.Inspect(ctx, c.db, cleanup.Config{Table: table})
	if err != nil {
		return nil, err
	}
	d := objectData{Nav: "sets", Table: table, ID: id, Unindexed: col.Unindexed()}
	if d.Fields, err = col.Object(ctx, id); err != nil {
		return nil, err
	}
	if d.Holders, err = col.WhyAll(ctx, id); err != nil {
		return nil, err
	}
	reg, err := c.lookup(ctx, table)
	if err != nil {
		return nil, err
	}
	if d.Graph, err = c.holdersGraph(ctx, col, reg.IDColumn, id, d.Holders); err != nil {
		return nil, err
	}
	type holds struct {
		now  time.Time
		list []refsetdriver.Hold
	}
	h, err := read(ctx, c.db, func(q refset.Querier) (holds, error) {
		now, list, err := c.db.Driver().SchemaSQL().ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Object: id})
		return holds{now, list}, err
	})
	if err != nil {
		return nil, err
	}
	d.Now, d.Holds = h.now, h.list
	return d, nil
}

// lookup is the registration of the set on table.
func (c *Console) lookup(ctx context.Context, table string) (refsetdriver.Registered, error) {
	id, err := sqlident.Parse(table, true)
	if err != nil {
		return refsetdriver.Registered{}, err
	}
	return read(ctx, c.db, func(q refset.Querier) (refsetdriver.Registered, error) {
		return c.db.Driver().SchemaSQL().Lookup(ctx, q, id)
	})
}

// holdersGraph follows the holders of id up towards the roots: a holder row in the
// object table itself (an edge, such as a block's link to its predecessor) is an
// object whose own holders are followed in turn, up to whyNodes objects and Depth
// levels; any other holder is a root.
func (c *Console) holdersGraph(ctx context.Context, col *cleanup.Collector, idColumn, id string, first []cleanup.Holder) (graph, error) {
	self := map[string]bool{}
	for _, ref := range col.References() {
		if ref.Self {
			self[ref.Table.String()+"."+ref.Column] = true
		}
	}
	g := graph{}
	g.add(node{Key: "object:" + id, Label: id, Object: id, Level: 0, Focus: true})
	type visit struct {
		id    string
		level int
	}
	queue := []visit{{id, 0}}
	holders := map[string][]cleanup.Holder{id: first}
	seen := map[string]bool{id: true}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		hs, ok := holders[v.id]
		if !ok {
			var err error
			if hs, err = col.Why(ctx, v.id); err != nil {
				return g, err
			}
		}
		for _, h := range hs {
			key, ok := strings.CutPrefix(h.Key, idColumn+"=")
			key = unquote(key)
			if !self[h.Table+"."+h.Column] || !ok {
				k := "root:" + h.String()
				g.add(node{Key: k, Label: h.String(), Level: v.level + 1, Root: true})
				g.link(k, "object:"+v.id)
				continue
			}
			k := "object:" + key
			g.add(node{Key: k, Label: key, Object: key, Level: v.level + 1})
			g.link(k, "object:"+v.id)
			if !seen[key] {
				seen[key] = true
				if len(seen) < whyNodes && v.level+1 < c.cfg.Depth {
					queue = append(queue, visit{key, v.level + 1})
				} else {
					g.Cut++
				}
			}
		}
	}
	g.layout()
	return g, nil
}

type chainData struct {
	Nav   string
	Table string
	Tip   blockmanager.Tip
	Tree  graph
}

// chainForks and chainPending bound the fork heads and waiting blocks the chain
// page draws.
const (
	chainForks   = 20
	chainPending = 50
)

func (c *Console) chainPage(r *http.Request) (any, error) {
	table := r.URL.Query().Get("table")
	if table == "" {
		table = "blocks"
	}
	id, err := sqlident.Parse(table, true)
	if err != nil {
		return nil, err
	}
	if id.Name != "blocks" {
		return nil, fmt.Errorf("%w: %s is not a blockmanager's blocks table", refset.ErrNotFound, table)
	}
	tip, err := blockmanager.ReadTip(r.Context(), c.db, c.cfg.Depth, chainForks, chainPending)
	if err != nil {
		return nil, err
	}
	return chainData{Nav: "sets", Table: table, Tip: tip, Tree: chainTree(tip)}, nil
}

type holdsData struct {
	Nav      string
	Table    string
	Tables   []string
	Holder   string
	Now      time.Time
	Holders  []refsetdriver.HolderCount
	Soonest  []refsetdriver.Hold
	Expired  []refsetdriver.Hold
	OfHolder []refsetdriver.Hold
	Most     int64
}

// Bounds of the holds page's lists.
const (
	holdsListed   = 50
	holdersListed = 100
	holdsCounted  = 10_000
	holderListed  = 200
)

func (c *Console) holdsPage(r *http.Request) (any, error) {
	ctx := r.Context()
	d := holdsData{Nav: "holds", Table: r.URL.Query().Get("table"), Holder: r.URL.Query().Get("holder"), Most: holdsCounted}
	tables, err := read(ctx, c.db, func(q refset.Querier) ([]string, error) { return c.db.Driver().Sets(ctx, q) })
	if err != nil {
		return nil, err
	}
	d.Tables = tables
	if d.Table == "" && len(tables) == 1 {
		d.Table = tables[0]
	}
	if d.Table == "" {
		return d, nil
	}
	reg, err := c.lookup(ctx, d.Table)
	if err != nil {
		return nil, err
	}
	sql := c.db.Driver().SchemaSQL()
	_, err = read(ctx, c.db, func(q refset.Querier) (struct{}, error) {
		var err error
		if d.Holders, err = sql.HolderCounts(ctx, q, reg.Holds, holdersListed, holdsCounted); err != nil {
			return struct{}{}, err
		}
		if d.Now, d.Soonest, err = sql.ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Expiring: true, Soonest: true, Limit: holdsListed}); err != nil {
			return struct{}{}, err
		}
		if _, d.Expired, err = sql.ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Expired: true, Soonest: true, Limit: holdsListed}); err != nil {
			return struct{}{}, err
		}
		if d.Holder != "" {
			_, d.OfHolder, err = sql.ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Holder: d.Holder, Limit: holderListed})
		}
		return struct{}{}, err
	})
	return d, err
}

// unquote is the value of a SQL literal as Why writes a holder's key (quote() on
// SQLite, quote_nullable() on Postgres, which writes E'...' around backslashes); a
// number stays as it is.
func unquote(lit string) string {
	escaped := strings.HasPrefix(lit, "E'")
	body := strings.TrimPrefix(lit, "E")
	if len(body) < 2 || body[0] != '\'' || body[len(body)-1] != '\'' {
		return lit
	}
	body = strings.ReplaceAll(body[1:len(body)-1], "''", "'")
	if escaped {
		body = strings.ReplaceAll(body, `\\`, `\`)
	}
	return body
}
