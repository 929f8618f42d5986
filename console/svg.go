package console

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/refsetdb/refset/blockmanager"
)

// This file lays out the SVG the pages draw: line charts of the samples, the graph of
// an object's holders, and a chain's tree. The templates write the SVG from these
// coordinates; every label goes through html/template's escaping.

type point struct {
	At    time.Time
	Value float64
}

// chart is a line chart of points, in a box of Width by Height.
type chart struct {
	Title, Unit   string
	Width, Height int
	Left, Bottom  int    // where the plot's axes are
	Line          string // the polyline's points
	Dots          []dot
	Max, Last     float64
	From, To      time.Time
	// About is what comes before Last in the caption when it is no count: "≈ " (an
	// estimate), "more than ".
	About string
}

type dot struct {
	X, Y  float64
	Title string
}

const (
	chartWidth  = 640
	chartHeight = 200
	chartLeft   = 60
	chartTop    = 10
	chartBottom = 170
	chartRight  = 630
)

// amount is a chart's value as people write it: to a tenth, without a trailing ".0"
// (11 entries, 2.5 objects/min).
func amount(v float64) string {
	r := math.Round(v*10) / 10
	if r == 0 {
		r = 0 // not "-0"
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

func lineChart(title, unit string, pts []point) chart {
	ch := chart{Title: title, Unit: unit, Width: chartWidth, Height: chartHeight, Left: chartLeft, Bottom: chartBottom}
	if len(pts) == 0 {
		return ch
	}
	ch.From, ch.To, ch.Last = pts[0].At, pts[len(pts)-1].At, pts[len(pts)-1].Value
	for _, p := range pts {
		ch.Max = max(ch.Max, p.Value)
	}
	top := max(ch.Max, 1)
	span := ch.To.Sub(ch.From)
	var line strings.Builder
	for _, p := range pts {
		x := float64(chartLeft)
		if span > 0 {
			x += float64(chartRight-chartLeft) * float64(p.At.Sub(ch.From)) / float64(span)
		}
		y := float64(chartBottom) - float64(chartBottom-chartTop)*p.Value/top
		fmt.Fprintf(&line, "%.1f,%.1f ", x, y)
		ch.Dots = append(ch.Dots, dot{X: x, Y: y, Title: fmt.Sprintf("%s: %s %s", p.At.UTC().Format(time.TimeOnly), amount(p.Value), unit)})
	}
	ch.Line = strings.TrimSpace(line.String())
	return ch
}

// node is a box of a graph: an object (linking to its page) or a root row.
type node struct {
	Key    string // unique in the graph
	Label  string
	Object string // the object's ID, "" for a root
	Level  int    // rows from the bottom
	Lane   int    // column, for a layout that places nodes itself
	Class  string
	Focus  bool // the object the page is about
	Root   bool
	X, Y   float64
}

// Short is the label as a page shows it (shown), cut to fit a box.
func (n node) Short() string {
	label := shown(n.Label)
	if r := []rune(label); len(r) > boxChars {
		return string(r[:boxChars-1]) + "…"
	}
	return label
}

type edge struct {
	From, To       string // node keys: the holder, the held (a block, its predecessor)
	FromID, ToID   string // their object IDs, "" for a root
	X1, Y1, X2, Y2 float64
}

// graph is nodes in rows by level, the highest level at the top, and the edges
// between them.
type graph struct {
	Nodes         []node
	Edges         []edge
	Width, Height int
	// Cut counts the objects whose own holders were not followed: beyond the
	// depth, or past the number of nodes a page draws.
	Cut   int
	index map[string]int
	edges map[[2]string]bool
}

const (
	boxWidth  = 200
	boxHeight = 28
	boxChars  = 26
	colWidth  = 220
	rowHeight = 60
	margin    = 10
)

func (g *graph) add(n node) {
	if g.index == nil {
		g.index, g.edges = map[string]int{}, map[[2]string]bool{}
	}
	if _, ok := g.index[n.Key]; ok {
		return
	}
	g.index[n.Key] = len(g.Nodes)
	g.Nodes = append(g.Nodes, n)
}

func (g *graph) link(from, to string) {
	if g.edges[[2]string{from, to}] {
		return
	}
	g.edges[[2]string{from, to}] = true
	g.Edges = append(g.Edges, edge{From: from, To: to})
}

// layout places the nodes of each level side by side, in the order added, and then
// the edges.
func (g *graph) layout() {
	lanes := map[int]int{}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		n.Lane = lanes[n.Level]
		lanes[n.Level]++
	}
	g.place()
}

// place sets the coordinates of nodes from their lanes and levels, and the edges'
// from their nodes'.
func (g *graph) place() {
	top, lanes := 0, 0
	for _, n := range g.Nodes {
		top, lanes = max(top, n.Level), max(lanes, n.Lane+1)
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		n.X = float64(margin + n.Lane*colWidth)
		n.Y = float64(margin + (top-n.Level)*rowHeight)
		n.Class = strings.TrimSpace(n.Class + map[bool]string{true: " focus"}[n.Focus] + map[bool]string{true: " root"}[n.Root])
	}
	for i := range g.Edges {
		e := &g.Edges[i]
		from, to := g.Nodes[g.index[e.From]], g.Nodes[g.index[e.To]]
		e.FromID, e.ToID = from.Object, to.Object
		e.X1, e.Y1 = from.X+boxWidth/2, from.Y+boxHeight
		e.X2, e.Y2 = to.X+boxWidth/2, to.Y
		if to.Y < from.Y { // an edge up (a lower level drawn above): from the box's top
			e.Y1, e.Y2 = from.Y, to.Y+boxHeight
		}
	}
	g.Width = 2*margin + max(lanes, 1)*colWidth
	g.Height = 2*margin + top*rowHeight + boxHeight
}

// chainTree draws a chain's tip: heights from the bottom (From) up, the committed
// chain in the first column and each fork, or run of waiting blocks, in a column of
// its own; an edge from each block to its predecessor when that is drawn too.
func chainTree(tip blockmanager.Tip) graph {
	var g graph
	blocks := slices.Clone(tip.Blocks)
	// Highest first, so that a fork's column starts at its head and its blocks
	// below take the same column.
	slices.SortFunc(blocks, func(a, b blockmanager.TipBlock) int {
		return cmp.Or(cmp.Compare(b.Num, a.Num), strings.Compare(a.ID, b.ID))
	})
	byID := map[string]blockmanager.TipBlock{}
	for _, b := range blocks {
		byID[b.ID] = b
	}
	lane := map[string]int{}
	next := 1
	for _, b := range blocks {
		if _, ok := lane[b.ID]; !ok {
			if b.Committed {
				lane[b.ID] = 0
			} else {
				lane[b.ID], next = next, next+1
			}
		}
		if p, ok := byID[b.Previous]; ok && !p.Committed {
			if _, ok := lane[p.ID]; !ok {
				lane[p.ID] = lane[b.ID]
			}
		}
	}
	low := tip.From
	for _, b := range blocks {
		low = min(low, b.Num)
	}
	for _, b := range blocks {
		class := "block"
		switch {
		case b.Committed:
			class += " committed"
		case b.Pending:
			class += " pending"
		default:
			class += " fork"
		}
		if b.Fork {
			class += " forkhead"
		}
		if b.ID == tip.Head {
			class += " head"
		}
		g.add(node{Key: b.ID, Label: fmt.Sprintf("#%d %s", b.Num, b.ID), Object: b.ID, Level: int(b.Num - low), Lane: lane[b.ID], Class: class})
	}
	for _, b := range blocks {
		if _, ok := byID[b.Previous]; ok {
			g.link(b.ID, b.Previous)
		}
	}
	g.place()
	return g
}
