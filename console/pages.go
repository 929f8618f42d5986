package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	// NoTables says the database has no refset tables yet.
	NoTables bool
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
	if errors.Is(err, refset.ErrNotFound) && r.URL.Query().Get("check") == "" {
		// No refset tables: no store was built on this database yet. The page says
		// so, as refset status does, rather than fail.
		return setsData{Nav: "sets", Cap: c.cfg.CountCap, NoTables: true}, nil
	}
	if err != nil {
		return nil, err
	}
	d := setsData{Nav: "sets", Cap: c.cfg.CountCap, Status: st}
	for _, s := range st.Sets {
		d.Sets = append(d.Sets, setRow{SetStatus: s, Chain: isChain(s.Table, st.Versions)})
	}
	if table := r.URL.Query().Get("check"); table != "" {
		if err := c.mayCheck(r); err != nil {
			return nil, err
		}
		defer func() { <-c.checking }()
		if table, err = c.setTable(ctx, table); err != nil {
			return nil, err
		}
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

// errBusy is a request the console turns away for now: 429.
var errBusy = errors.New("busy")

// mayCheck takes the console's one check slot for r, or says why r may not run a
// check. A check reads the set's tables whole, so a page of another site (an <img>
// pointed at the console on 127.0.0.1) must not start one, nor may checks pile up:
// one runs at a time. A browser says where a request comes from (Sec-Fetch-Site): a
// check is run for the console's own pages and for an address typed or bookmarked,
// and for a client that is no browser.
func (c *Console) mayCheck(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("%w: a check is started from the console's own page, not from another site's (Sec-Fetch-Site: %s)",
			errForbidden, r.Header.Get("Sec-Fetch-Site"))
	}
	select {
	case c.checking <- struct{}{}:
		return nil
	default:
		return fmt.Errorf("%w: another check is running; try again once it is done", errBusy)
	}
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
	// HoldersCut names the tables with more rows holding the object than the page
	// lists (objectHolders); HoldsCut says it has more holds than it lists.
	HoldersCut []string
	HoldsCut   bool
}

// whyNodes bounds the graph of holders the object page draws: each node is one Why.
const whyNodes = 40

func (c *Console) objectPage(r *http.Request) (any, error) {
	ctx := r.Context()
	table := r.URL.Query().Get("table")
	id, err := param(r, "id")
	if err != nil {
		return nil, err
	}
	if table == "" || id == "" {
		return nil, fmt.Errorf("%w: the object page needs ?table=...&id=...", errBadRequest)
	}
	if table, err = c.setTable(ctx, table); err != nil {
		return nil, err
	}
	col, err := cleanup.Inspect(ctx, c.db, cleanup.Config{Table: table})
	if err != nil {
		return nil, err
	}
	d := objectData{Nav: "sets", Table: table, ID: id, Unindexed: col.Unindexed()}
	if d.Fields, err = col.Object(ctx, cleanup.TextID(id)); err != nil {
		if errors.Is(err, refset.ErrInvalidID) || errors.Is(err, refset.ErrStatement) && dataException(err) {
			// The id is text the id column's type cannot read (abc, or
			// 99999999999999999999, for a BIGINT id column): cleanup refuses it, or the
			// database does as data in the library's own statement. Any other refusal
			// (permission denied for the table) is the server's to fix: 500.
			return nil, fmt.Errorf("%w: %s's id column cannot hold the id %s: %v", errBadRequest, table, shown(id), err)
		}
		return nil, err
	}
	// One more than shown, per table: a table that has it held more than that says
	// so rather than fill the page.
	holders, err := col.WhyUpTo(ctx, cleanup.TextID(id), objectHolders+1)
	if err != nil {
		return nil, err
	}
	d.Holders, d.HoldersCut = cutPerTable(holders, objectHolders)
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
		now, list, err := c.db.Driver().SchemaSQL().ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Object: id, Limit: objectHolds + 1})
		return holds{now, list}, err
	})
	if err != nil {
		return nil, err
	}
	d.Now, d.Holds = h.now, h.list
	d.Holds, d.HoldsCut = firstOf(d.Holds, objectHolds)
	return d, nil
}

// The object page lists at most objectHolders rows of each table that references the
// object, and objectHolds holds of it: its cost follows what it shows, however many
// hold it (refset why lists them all).
const (
	objectHolders = 100
	objectHolds   = 100
)

// cutPerTable keeps the first n holders of each table, in order, and names the
// tables it cut.
func cutPerTable(holders []cleanup.Holder, n int) (kept []cleanup.Holder, cut []string) {
	count := map[string]int{}
	for _, h := range holders {
		count[h.Table]++
		switch {
		case count[h.Table] <= n:
			kept = append(kept, h)
		case count[h.Table] == n+1:
			cut = append(cut, h.Table)
		}
	}
	return kept, cut
}

// setTable is the object table of the set that asked names, as its store registered
// it (and as the console's links name it): asked itself, or the registered name of
// the same table with its schema or without (public.notes for a set on notes, or
// notes for one on public.notes, on PostgreSQL; main.notes on SQLite), as refset
// --table takes them. A name that no set's table resolves to is returned as it is,
// for the page's read to say there is no such set.
func (c *Console) setTable(ctx context.Context, asked string) (string, error) {
	want, err := sqlident.Parse(asked, true)
	if err != nil {
		return "", err
	}
	d := c.db.Driver()
	return read(ctx, c.db, func(q refset.Querier) (string, error) {
		sets, err := d.Sets(ctx, q)
		if errors.Is(err, refset.ErrNotFound) {
			return asked, nil // no refset tables: the page says so
		}
		if err != nil || slices.Contains(sets, want.String()) {
			return want.String(), err
		}
		qualified, err := d.Qualify(ctx, q, want)
		if err != nil {
			return asked, nil // no such table: the page says there is no set on it
		}
		for _, s := range sets {
			id, err := sqlident.Parse(s, true)
			if err != nil {
				continue
			}
			if got, err := d.Qualify(ctx, q, id); err == nil && got == qualified {
				return s, nil
			}
		}
		return asked, nil
	})
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
			if hs, err = col.Why(ctx, cleanup.TextID(v.id)); err != nil {
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
	ctx := r.Context()
	table := r.URL.Query().Get("table")
	if table != "" {
		var err error
		if table, err = c.setTable(ctx, table); err != nil {
			return nil, err
		}
	}
	table, err := c.chainTable(ctx, table)
	if err != nil {
		return nil, err
	}
	tip, err := blockmanager.ReadTip(ctx, c.db, c.cfg.Depth, chainForks, chainPending)
	if err != nil {
		return nil, err
	}
	return chainData{Nav: "sets", Table: table, Tip: tip, Tree: chainTree(tip)}, nil
}

// chainTable is the set's table the chain page asked for (asked, the database's one
// chain when it names none) as refset's records name it, once it is sure it is a
// blockmanager's chain: a page must not draw the chain under another table's name.
// Errors: refset.ErrNotFound, naming the chains there are.
func (c *Console) chainTable(ctx context.Context, asked string) (string, error) {
	var want sqlident.Ident
	if asked != "" {
		var err error
		if want, err = sqlident.Parse(asked, true); err != nil {
			return "", err
		}
	}
	chains, err := read(ctx, c.db, func(q refset.Querier) ([]string, error) {
		sets, err := c.db.Driver().Sets(ctx, q)
		if err != nil {
			return nil, err
		}
		versions, err := c.db.Driver().Versions(ctx, q)
		if err != nil {
			return nil, err
		}
		var chains []string
		for _, s := range sets {
			if isChain(s, versions) {
				chains = append(chains, s)
			}
		}
		return chains, nil
	})
	if err != nil {
		return "", err
	}
	for _, chain := range chains {
		got, _ := sqlident.Parse(chain, true) // isChain parsed it
		// A name without its schema (the default "blocks") names the chain of that
		// name in whichever schema refset's records put it.
		if asked == "" || got == want || want.Schema == "" && got.Name == want.Name {
			return chain, nil
		}
	}
	if len(chains) == 0 {
		return "", fmt.Errorf("%w: no blockmanager chain in this database", refset.ErrNotFound)
	}
	return "", fmt.Errorf("%w: %s is not a blockmanager's chain (the chain here: %s)", refset.ErrNotFound, asked, strings.Join(chains, ", "))
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
	// Each list's Cut says it holds more than the page lists.
	HoldersCut, SoonestCut, ExpiredCut, OfHolderCut bool
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
	holder, err := param(r, "holder")
	if err != nil {
		return nil, err
	}
	d := holdsData{Nav: "holds", Table: r.URL.Query().Get("table"), Holder: holder, Most: holdsCounted}
	tables, err := read(ctx, c.db, func(q refset.Querier) ([]string, error) { return c.db.Driver().Sets(ctx, q) })
	if errors.Is(err, refset.ErrNotFound) && d.Table == "" {
		return d, nil // no refset tables, so no sets to choose from: the page says so
	}
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
	if d.Table, err = c.setTable(ctx, d.Table); err != nil {
		return nil, err
	}
	reg, err := c.lookup(ctx, d.Table)
	if err != nil {
		return nil, err
	}
	sql := c.db.Driver().SchemaSQL()
	_, err = read(ctx, c.db, func(q refset.Querier) (struct{}, error) {
		var err error
		// Each list is read one longer than it is shown, to say whether it is cut.
		if d.Holders, err = sql.HolderCounts(ctx, q, reg.Holds, holdersListed+1, holdsCounted); err != nil {
			return struct{}{}, err
		}
		if d.Now, d.Soonest, err = sql.ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Expiring: true, Soonest: true, Limit: holdsListed + 1}); err != nil {
			return struct{}{}, err
		}
		if _, d.Expired, err = sql.ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Expired: true, Soonest: true, Limit: holdsListed + 1}); err != nil {
			return struct{}{}, err
		}
		if d.Holder != "" {
			_, d.OfHolder, err = sql.ListHolds(ctx, q, reg.Holds, refsetdriver.HoldFilter{Holder: d.Holder, Limit: holderListed + 1})
			if dataException(err) {
				// The holder is what the database refused (PostgreSQL: bytes that are
				// not UTF-8, or a NUL, spelled quoted): the visitor's mistake.
				return struct{}{}, fmt.Errorf("%w: no holder column holds the holder %s: %v", errBadRequest, shown(d.Holder), err)
			}
		}
		return struct{}{}, err
	})
	d.Holders, d.HoldersCut = firstOf(d.Holders, holdersListed)
	d.Soonest, d.SoonestCut = firstOf(d.Soonest, holdsListed)
	d.Expired, d.ExpiredCut = firstOf(d.Expired, holdsListed)
	d.OfHolder, d.OfHolderCut = firstOf(d.OfHolder, holderListed)
	return d, err
}

// firstOf is the first n of list, and whether list had more.
func firstOf[T any](list []T, n int) ([]T, bool) {
	if len(list) > n {
		return list[:n], true
	}
	return list, false
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

// param is the value of a page's parameter name (an object's id, a holder) that a
// request carries: as it is, when it does not begin with a quote and is text
// (checkText); or, when it begins with one, the value it spells quoted with Go's
// escapes (strconv.Unquote), which is how the console's links and forms write a value
// that shown quotes: one with a character that does not print, or a byte that is no
// UTF-8 (which SQLite keeps as written), or one that begins with a quote itself. So
// every value a page shows links to its own page, byte for byte. A value spelled
// quoted that the database cannot hold (PostgreSQL: a NUL, or bytes that are not
// UTF-8) is refused by the database: 400 as well.
func param(r *http.Request, name string) (string, error) {
	v := r.URL.Query().Get(name)
	if !strings.HasPrefix(v, `"`) {
		return v, checkText(name, v)
	}
	u, err := strconv.Unquote(v)
	if err != nil {
		return "", fmt.Errorf("%w: the %s %s begins with a quote but is not quoted with Go's escapes, as the console writes "+
			"a value that does not print as it is (a value that begins with a quote among them): %v", errBadRequest, name, shown(v), err)
	}
	return u, nil
}

// shown is a value read from the database (an object's id, a holder, a field) as a
// page shows it and its links and forms carry it: as it is when every character of it
// prints, and quoted with Go's escapes (strconv.Quote) otherwise, or when it begins
// with a quote, as the refset command's text output prints it. A control character
// (a terminal's escape sequence for a page fetched with curl), a bidirectional
// override that shows a name backwards, or a byte that is no UTF-8 (which a page,
// UTF-8 by its Content-Type, cannot carry) is seen as what it is. param reads the
// quoted form back.
func shown(s string) string {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// checkText refuses a parameter no text column holds (PostgreSQL refuses a NUL
// character and bytes that are not UTF-8), so that such a request is the visitor's
// mistake, answered 400, not the database's error.
func checkText(name, value string) error {
	if !utf8.ValidString(value) || strings.ContainsRune(value, 0) {
		return fmt.Errorf("%w: the %s %q is not text (UTF-8 without NUL characters)", errBadRequest, name, value)
	}
	return nil
}

// dataException reports whether err is the database's refusal of a value
// (SQLSTATE class 22, data exception: invalid input syntax, out of range), as lib/pq's
// and pgx's errors say it.
func dataException(err error) bool {
	var se interface{ SQLState() string }
	return errors.As(err, &se) && strings.HasPrefix(se.SQLState(), "22")
}
