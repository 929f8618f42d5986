package console_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/stretchr/testify/require"
)

// chromiumPath finds the browser the tests drive: $CHROMIUM, or chromium on PATH.
// Under CI=true a missing browser fails the test; elsewhere it skips it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	name := os.Getenv("CHROMIUM")
	if name == "" {
		name = "chromium"
	}
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no browser (%s: %v): CI=true needs chromium (scripts/test.sh installs it)", name, err)
	}
	t.Skipf("no browser (%s: %v): install chromium, or set CHROMIUM, to run the console in a browser", name, err)
	return ""
}

// screenshotDir is where the tests save each page's screenshot: $REFSET_UI_SCREENSHOTS,
// or testdata/screenshots (which git ignores).
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("REFSET_UI_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("testdata", "screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// tab is a headless chromium tab for t, with every JavaScript dialog that opens
// counted (and dismissed, so that the page goes on).
type tab struct {
	t       *testing.T
	ctx     context.Context
	dialogs *atomic.Int64
	base    string
	shots   string
}

func newTab(t *testing.T, base string) tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	tb := tab{t: t, ctx: ctx, dialogs: new(atomic.Int64), base: base, shots: screenshotDir(t)}
	// The first run starts the browser, which lives as long as its context: no
	// timeout on that one; every later action has one (see act).
	_, err := chromedp.Run(ctx, chromedp.Evaluate[int](`1`))
	require.NoError(t, err, "start chromium")
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			tb.dialogs.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return tb
}

// actTimeout bounds each action on a tab: a selector that matches nothing would
// otherwise wait until the test's deadline.
const actTimeout = 30 * time.Second

// act is the tab's context for one action.
func (tb tab) act() (context.Context, context.CancelFunc) {
	return context.WithTimeout(tb.ctx, actTimeout)
}

// open loads path.
func (tb tab) open(path string) {
	tb.t.Helper()
	ctx, cancel := tb.act()
	defer cancel()
	require.NoError(tb.t, chromedp.Do(ctx, chromedp.Navigate(tb.base+path)), path)
}

// click clicks the element sel names and waits for the page it loads.
func (tb tab) click(sel string) {
	tb.t.Helper()
	ctx, cancel := tb.act()
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel))))
	require.NoError(tb.t, err, "click %s", sel)
}

// eval evaluates a JavaScript expression on the page into a T.
func eval[T any](tb tab, js string) T {
	tb.t.Helper()
	ctx, cancel := tb.act()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(tb.t, err, js)
	return v
}

// location is the page's path and query, without the test server's address.
func (tb tab) location() string {
	tb.t.Helper()
	ctx, cancel := tb.act()
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(tb.t, err)
	return strings.TrimPrefix(loc, tb.base)
}

// query is the query of the page's address, which must be at path.
func (tb tab) query(path string) url.Values {
	tb.t.Helper()
	u, err := url.Parse(tb.location())
	require.NoError(tb.t, err)
	require.Equal(tb.t, path, u.Path)
	return u.Query()
}

// objectQuery is the query of the object page of id in table.
func objectQuery(table, id string) url.Values { return url.Values{"table": {table}, "id": {id}} }

// screenshot saves the whole page as name.png in the screenshot folder.
func (tb tab) screenshot(name string) {
	tb.t.Helper()
	ctx, cancel := tb.act()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(tb.t, err)
	path := filepath.Join(tb.shots, strings.ReplaceAll(tb.t.Name(), "/", "_")+"-"+name+".png")
	require.NoError(tb.t, os.WriteFile(path, png, 0o644))
	tb.t.Logf("screenshot: %s", path)
}

// countCap is where the browser test's counts stop counting: below the fixture's
// sets, whose counts are then estimates.
const countCap = 5

// aboutText is what the pages write before a count of each accuracy.
var aboutText = map[cleanup.Accuracy]string{cleanup.Exact: "", cleanup.Estimated: "≈ ", cleanup.MoreThan: "more than "}

// TestInBrowser loads every page in chromium against a real database and checks what
// it shows against the library's reports: the numbers of refset status and Check,
// the chain's blocks and edges, holds, links that lead where they say, a hostile
// object ID shown as text and never run, and the token.
func TestInBrowser(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		const token = "s3cret token"
		// The blocks set analyzed, the notes set not: past countCap, the Sets page
		// shows the blocks' estimate and "more than" of the notes.
		require.NoError(t, refset.InTx(ctx, f.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `ANALYZE blocks`)
			return err
		}))
		_, srv := serve(t, f.db, console.Config{Token: token, SampleEvery: time.Second, CountCap: countCap})
		tb := newTab(t, srv.URL)

		// Without the token, nothing but the refusal.
		tb.open("/")
		require.Contains(t, eval[string](tb, `document.body.innerText`), "a token is required")
		require.Zero(t, eval[int](tb, `document.querySelectorAll("#sets").length`))
		tb.open("/login?" + url.Values{"token": {token}}.Encode())
		require.Equal(t, "/", tb.location())

		t.Run("sets", func(t *testing.T) {
			tb.t = t
			// Each count's cell carries its number and accuracy; the text is the
			// number as the pages write it.
			type cell struct {
				N        int64
				Accuracy string
				Text     string
			}
			type row struct {
				Table                                                      string
				Objects, HoldsLive, HoldsExpired, Queued, Overdue, Waiting cell
				Collected                                                  int64
			}
			got := eval[[]row](tb, `[...document.querySelectorAll("#sets tr[data-table]")].map(r => {
				const cell = c => { const td = r.querySelector("." + c); return {N: +td.dataset.n, Accuracy: td.dataset.accuracy, Text: td.textContent} };
				return {Table: r.dataset.table, Objects: cell("objects"), HoldsLive: cell("holds-live"), HoldsExpired: cell("holds-expired"),
					Queued: cell("queued"), Overdue: cell("overdue"), Waiting: cell("waiting"), Collected: +r.querySelector(".collected").dataset.n}})`)
			st, err := cleanup.StatusWith(ctx, f.db, cleanup.StatusOptions{Cap: countCap})
			require.NoError(t, err)
			counted := func(c cleanup.Count) cell {
				return cell{N: c.N, Accuracy: c.Accuracy.String(), Text: aboutText[c.Accuracy] + fmt.Sprint(c.N)}
			}
			var want []row
			for _, s := range st.Sets {
				want = append(want, row{s.Table, counted(s.Objects), counted(s.HoldsLive), counted(s.HoldsExpired),
					counted(s.Queued), counted(s.Overdue), counted(s.Waiting()), s.Collected})
			}
			require.Equal(t, want, got)
			// Past the cap: the blocks set's 11 blocks, as its statistics count them.
			require.Equal(t, cleanup.Count{N: 11, Accuracy: cleanup.Estimated}, st.Sets[0].Objects, st.Sets[0].Table)
			require.Equal(t, cleanup.Count{N: countCap, Accuracy: cleanup.MoreThan}, st.Sets[1].Objects, "notes, never analyzed")
			require.Len(t, got, 2)
			versions := eval[int](tb, `document.querySelectorAll("#versions tbody tr").length`)
			require.Equal(t, len(st.Versions), versions)
			tb.screenshot("sets")

			// Check, on demand: the button of the notes row.
			tb.click(`tr[data-table="notes"] form[action="./"] button`)
			col, err := cleanup.Inspect(ctx, f.db, cleanup.Config{Table: "notes"})
			require.NoError(t, err)
			rep, err := col.Check(ctx)
			require.NoError(t, err)
			require.Equal(t, "notes", eval[string](tb, `document.querySelector("#check").dataset.table`))
			require.Equal(t, fmt.Sprint(rep.Leaked), eval[string](tb, `document.querySelector("#check .leaked").textContent`))
			require.Equal(t, fmt.Sprint(rep.Dangling), eval[string](tb, `document.querySelector("#check .dangling").textContent`))
			tb.screenshot("check")

			// The chain link of the blocks set, and no chain link for notes.
			require.Zero(t, eval[int](tb, `document.querySelectorAll('tr[data-table="notes"] a.chain').length`))
			tb.click(`tr[data-table$="blocks"] a.chain`)
			require.True(t, strings.HasPrefix(tb.location(), "/chain?"), tb.location())
		})

		t.Run("chain", func(t *testing.T) {
			tb.t = t
			tb.open("/chain")
			type block struct{ ID, Class string }
			nodes := eval[[]block](tb, `[...document.querySelectorAll("#chain g.node")].map(g => ({ID: g.dataset.id, Class: g.getAttribute("class")}))`)
			edges := eval[[][2]string](tb, `[...document.querySelectorAll("#chain line.edge")].map(l => [l.dataset.from, l.dataset.to])`)
			wantNodes := map[string]string{f.pending: "pending"}
			var wantEdges [][2]string
			for i, id := range f.main {
				wantNodes[id] = "committed"
				if i > 0 {
					wantEdges = append(wantEdges, [2]string{id, f.main[i-1]})
				}
			}
			for i, id := range f.fork {
				wantNodes[id] = "fork"
				prev := f.main[4]
				if i > 0 {
					prev = f.fork[i-1]
				}
				wantEdges = append(wantEdges, [2]string{id, prev})
			}
			gotNodes := map[string]string{}
			for _, n := range nodes {
				for _, kind := range []string{"committed", "fork", "pending"} {
					if slices.Contains(strings.Fields(n.Class), kind) {
						gotNodes[n.ID] = kind
					}
				}
			}
			require.Equal(t, wantNodes, gotNodes)
			require.ElementsMatch(t, wantEdges, edges)
			// The committed chain in one column, the fork in another.
			column := eval[map[string]float64](tb, `Object.fromEntries([...document.querySelectorAll("#chain g.node")].map(g => [g.dataset.id, +g.querySelector("rect").getAttribute("x")]))`)
			for _, id := range f.main {
				require.Equal(t, column[f.main[0]], column[id], id)
			}
			require.Equal(t, column[f.fork[0]], column[f.fork[1]], "the fork's blocks")
			require.NotEqual(t, column[f.main[0]], column[f.fork[0]], "the fork beside the committed chain")
			head := f.main[len(f.main)-1]
			require.Contains(t, eval[string](tb, `document.querySelector("#chain g.head").dataset.id`), head)
			require.Contains(t, eval[string](tb, `document.querySelector("#chain g.forkhead").dataset.id`), f.fork[1])
			tb.screenshot("chain")

			// A block's box links to its object page, which draws the blocks
			// above it up to the roots: the head, kept by chain_heads.
			tb.click(`#chain g.node[data-id="c5"] a`)
			require.Equal(t, objectQuery("blocks", "c5"), tb.query("/object"))
			require.Equal(t, "c5", eval[string](tb, `document.querySelector("#object-id").textContent`))
			why := eval[[]string](tb, `[...document.querySelectorAll("#why g.node")].map(g => g.dataset.id || g.textContent)`)
			require.Contains(t, why, "c6")
			require.Contains(t, why, "c7")
			require.True(t, slices.ContainsFunc(why, func(s string) bool { return strings.Contains(s, "chain_heads") }), "%q", why)
			tb.screenshot("object")
		})

		t.Run("holds", func(t *testing.T) {
			tb.t = t
			tb.open("/holds?table=notes")
			reg, err := f.db.Driver().SchemaSQL().Lookup(ctx, f.db.Reader(), sqlident.Must("notes"))
			require.NoError(t, err)
			_, expired, err := f.db.Driver().SchemaSQL().ListHolds(ctx, f.db.Reader(), reg.Holds, refsetdriver.HoldFilter{Expired: true})
			require.NoError(t, err)
			require.Len(t, expired, 1)
			cells := func(table string) [][]string {
				return eval[[][]string](tb, `[...document.querySelectorAll("#`+table+` tbody tr")].map(r => [...r.cells].slice(0, 2).map(c => c.textContent))`)
			}
			require.Equal(t, [][]string{{expired[0].ObjectID, expired[0].Holder}}, cells("expired"))
			require.Equal(t, [][]string{{"n3", "bob"}}, cells("soonest"))
			holders := cells("holders")
			require.Equal(t, [][]string{{"alice", "1"}, {"bob", "1"}, {"carol", "1"}, {"mallory", "1"}}, holders)
			tb.screenshot("holds")
			tb.click(`#holders a`)
			require.Equal(t, [][]string{{"n2", "alice"}}, cells("of-holder"))
		})

		t.Run("hostile", func(t *testing.T) {
			tb.t = t
			// Reached by its link on the holds page, as an operator would.
			tb.open("/holds?" + url.Values{"table": {"notes"}, "holder": {"mallory"}}.Encode())
			require.Equal(t, hostileID, eval[string](tb, `document.querySelector("#of-holder tbody a").textContent`))
			tb.click(`#of-holder tbody a`)
			require.Equal(t, objectQuery("notes", hostileID), tb.query("/object"))
			require.Equal(t, hostileID, eval[string](tb, `document.querySelector("#object-id").textContent`))
			require.Equal(t, hostileID, eval[string](tb, `document.querySelector("#why g.focus title").textContent`))
			roots := eval[string](tb, `[...document.querySelectorAll("#why g.root title")].map(t => t.textContent).join("\n")`)
			require.Contains(t, roots, "pins.note_id")
			require.Contains(t, roots, "holder='mallory'")
			require.Zero(t, eval[int](tb, `document.querySelectorAll("img").length`), "an element made of the ID")
			require.Zero(t, tb.dialogs.Load(), "a dialog opened")
			tb.screenshot("hostile")
		})

		t.Run("cleanup", func(t *testing.T) {
			tb.t = t
			// Two samples make a line: the sampler takes one a second.
			require.Eventually(t, func() bool {
				tb.open("/cleanup")
				return eval[int](tb, `document.querySelectorAll("section.charts polyline").length`) >= 4
			}, 30*time.Second, 500*time.Millisecond)
			st, err := cleanup.StatusWith(ctx, f.db, cleanup.StatusOptions{Cap: countCap})
			require.NoError(t, err)
			for _, s := range st.Sets {
				caption := eval[string](tb, `document.querySelector('section.charts[data-table="`+s.Table+`"] figcaption').textContent`)
				require.Contains(t, caption, fmt.Sprintf("now %s%d entries", aboutText[s.Queued.Accuracy], s.Queued.N), s.Table)
			}
			tb.screenshot("cleanup")
		})
		require.Zero(t, tb.dialogs.Load(), "a dialog opened")
	})
}
