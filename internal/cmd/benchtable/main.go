// Command table turns the output of scripts/bench.sh (go test -bench lines, and
// pgbench's results in the same format) into one table of the speed targets: path,
// refset, reference, ratio, target, met or not.
//
//	go test -bench ... ./internal/test/bench/ | go run ./internal/cmd/benchtable
//	go run ./internal/cmd/benchtable -in bench.out -update BENCHMARKS.md -command '...' -machine '...'
//
// Each figure is the median of the runs in the input, with the range of the ratio
// beside it; a target is met only when every run meets it. With -update, the table
// goes into the file between the markers
//
//	<!-- bench.sh: begin -->
//	<!-- bench.sh: end -->
//
// as the newest of the runs of its -mode kept there (older ones stay below it, up to
// -keep per mode: by default one, the latest, since the page is for users and git
// keeps the history); the runs of other modes stay as they are. Each mode's runs are
// kept together, the modes in the order of modeOrder, then any other by name, and each
// run is labelled with its -settings.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "-", "the benchmark output to read (- for standard input)")
	update := flag.String("update", "", "a Markdown file whose generated section gets this run's table")
	command := flag.String("command", "scripts/bench.sh", "the command that made the input, for -update")
	machine := flag.String("machine", "", "the machine it ran on, for -update")
	date := flag.String("date", "", "when it ran, for -update")
	keep := flag.Int("keep", 1, "how many runs' tables of each mode -update keeps")
	mode := flag.String("mode", "default", "the run's mode (one word: default, durable), for -update")
	settings := flag.String("settings", "", "the databases' settings the run measured, for -update")
	flag.Parse()

	if strings.ContainsAny(*mode, " \t\n-") || *mode == "" {
		fmt.Fprintln(os.Stderr, "table: -mode must be one word")
		os.Exit(2)
	}
	s := section{command: *command, machine: *machine, date: *date, mode: *mode, settings: *settings}
	if err := run(*in, *update, s, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
}

func run(in, update string, s section, keep int) error {
	r := io.Reader(os.Stdin)
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	samples, err := parse(r)
	if err != nil {
		return err
	}
	dbs = databasesIn(samples)
	table, missed := render(targets(), samples)
	fmt.Print(table)
	fmt.Printf("\n%d of the targets that were measured are missed.\n", missed)
	if update == "" {
		return nil
	}
	s.table = table
	return s.writeInto(update, keep)
}

// samples holds every value the input reported: by benchmark line, then by unit, in
// the order the runs printed them.
type samples map[string]map[string][]float64

// procSuffix is the -GOMAXPROCS suffix go test adds to benchmark names.
var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads the lines that start with "Benchmark" or "pgbench/": a name, an
// iteration count, then value-unit pairs.
func parse(r io.Reader) (samples, error) {
	out := samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !(strings.HasPrefix(fields[0], "Benchmark") || strings.HasPrefix(fields[0], "pgbench/")) {
			continue
		}
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			continue // a benchmark's log line, not its result
		}
		name := procSuffix.ReplaceAllString(fields[0], "")
		if out[name] == nil {
			out[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			out[name][fields[i+1]] = append(out[name][fields[i+1]], v)
		}
	}
	return out, sc.Err()
}

func (s samples) of(line, unit string) []float64 { return s[line][unit] }

// row is one target: the figures it shows and the ratio it judges.
type row struct {
	path, db  string
	refset    metric // refset's figure, shown as a median
	reference metric // the reference's figure (raw SQL, the smaller set, pgbench)
	shown     string // the unit the two figures are shown in
	scale     float64
	ratio     ratio
	ratioUnit string // "%" when the judged figure is a percentage
	target    *target
}

// metric names one unit of one benchmark line.
type metric struct{ line, unit string }

// ratio gives the judged figure, one value per run.
type ratio func(samples) []float64

// ratioOf is a figure the benchmark reports itself.
func ratioOf(line, unit string) ratio {
	return func(s samples) []float64 { return s.of(line, unit) }
}

// quotient divides one line's figure by another's, run by run when both have as many
// runs, or else median by median.
func quotient(line, unit, byLine, byUnit string) ratio {
	return func(s samples) []float64 {
		a, b := s.of(line, unit), s.of(byLine, byUnit)
		if len(a) == 0 || len(b) == 0 {
			return nil
		}
		if len(a) != len(b) {
			a, b = []float64{median(a)}, []float64{median(b)}
		}
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] / b[i]
		}
		return out
	}
}

// target is what a row's figure must be: at least or at most a value.
type target struct {
	want      float64
	atLeast   bool
	inclusive bool
	label     string
}

func atLeast(v float64) *target { return &target{want: v, atLeast: true, inclusive: true} }
func atMost(v float64) *target  { return &target{want: v, inclusive: true} }

// below is a strict upper bound; label, when set, describes it better than the value.
func below(v float64, label string) *target { return &target{want: v, label: label} }

func (t *target) met(v float64) bool {
	switch {
	case t.atLeast && t.inclusive:
		return v >= t.want
	case t.atLeast:
		return v > t.want
	case t.inclusive:
		return v <= t.want
	}
	return v < t.want
}

func (t *target) String() string {
	if t.label != "" {
		return t.label
	}
	op := map[[2]bool]string{{true, true}: "≥", {true, false}: ">", {false, true}: "≤", {false, false}: "<"}[[2]bool{t.atLeast, t.inclusive}]
	return op + " " + strconv.FormatFloat(t.want, 'g', -1, 64)
}

// render prints the rows as a Markdown table and counts the targets missed. A target
// whose row has no absolute figure of its own (refset) is judged on the ratio; one
// with a label ("refset < 20 ms") on refset's figure in the benchmark's own unit.
func render(rows []row, s samples) (string, int) {
	var b strings.Builder
	b.WriteString("| path | database | refset | reference | ratio (median, range) | target | met |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	missed := 0
	for _, r := range rows {
		var judged []float64
		if r.ratio != nil {
			judged = r.ratio(s)
		}
		figureJudged := r.target != nil && r.target.label != ""
		if figureJudged {
			judged = s.of(r.refset.line, r.refset.unit)
		}
		met := "—"
		if figureJudged || r.ratio == nil {
			judged = s.of(r.refset.line, r.refset.unit)
		}
		if r.target != nil && len(judged) > 0 {
			met = "yes"
			for _, v := range judged {
				if !r.target.met(v) {
					met = "**no**"
					missed++
					break
				}
			}
		} else if r.target != nil {
			met = "not run"
		}
		tgt := "(none)"
		if r.target != nil {
			tgt = r.target.String()
		}
		var ratioCell string
		ratioCell = "—"
		if r.ratio != nil {
			if rs := r.ratio(s); len(rs) > 0 {
				ratioCell = spread(rs, r.ratioUnit)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.path, r.db,
			r.figure(s, r.refset), r.figure(s, r.reference), ratioCell, tgt, met)
	}
	return b.String(), missed
}

// figure is a metric's median in the row's unit, with how many runs it is the median of.
func (r row) figure(s samples, m metric) string {
	if m.line == "" {
		return ""
	}
	vs := s.of(m.line, m.unit)
	if len(vs) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s %s", number(median(vs)*r.scale), r.shown)
}

// spread is the median and, with more than one run, the range.
func spread(vs []float64, unit string) string {
	out := number(median(vs)) + unit
	if len(vs) > 1 {
		out += fmt.Sprintf(" (%s–%s, %d runs)", number(slices.Min(vs)), number(slices.Max(vs)), len(vs))
	}
	return out
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// number prints three significant digits, as the figures deserve.
func number(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// section is one run's entry in the generated part of a Markdown file.
type section struct {
	command, machine, date, table string
	mode, settings                string
}

const (
	beginMarker = "<!-- bench.sh: begin -->"
	endMarker   = "<!-- bench.sh: end -->"
)

// runMarker starts a run's entry: <!-- bench.sh: run mode=durable -->, or without
// mode= for a run of the default mode (as runs were marked before modes existed).
var runMarker = regexp.MustCompile(`<!-- bench\.sh: run(?: mode=(\S+))? -->`)

// modeOrder is the order the known modes' runs are shown in.
var modeOrder = []string{"default", "durable"}

func marker(mode string) string {
	if mode == "default" {
		return "<!-- bench.sh: run -->"
	}
	return "<!-- bench.sh: run mode=" + mode + " -->"
}

// writeInto puts the section first among its mode's runs between the file's markers,
// keeping up to keep runs of each mode.
func (s section) writeInto(path string, keep int) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := bytes.Index(text, []byte(beginMarker)), bytes.Index(text, []byte(endMarker))
	if begin < 0 || end < begin {
		return errors.New(path + " has no " + beginMarker + " ... " + endMarker + " section")
	}
	if s.mode == "" {
		s.mode = "default"
	}
	inside := string(text[begin+len(beginMarker) : end])
	runs := map[string][]string{s.mode: {s.markdown()}}
	var modes []string
	for _, m := range runMarker.FindAllStringSubmatchIndex(inside, -1) {
		mode := "default"
		if m[2] >= 0 {
			mode = inside[m[2]:m[3]]
		}
		body := inside[m[1]:]
		if next := runMarker.FindStringIndex(body); next != nil {
			body = body[:next[0]]
		}
		if body = strings.TrimSpace(body); body != "" {
			runs[mode] = append(runs[mode], body)
		}
	}
	for mode := range runs {
		modes = append(modes, mode)
	}
	slices.SortFunc(modes, func(a, b string) int {
		ia, ib := slices.Index(modeOrder, a), slices.Index(modeOrder, b)
		if ia < 0 {
			ia = len(modeOrder)
		}
		if ib < 0 {
			ib = len(modeOrder)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	var b bytes.Buffer
	b.Write(text[:begin+len(beginMarker)])
	for _, mode := range modes {
		kept := runs[mode]
		if len(kept) > keep {
			kept = kept[:keep]
		}
		for _, r := range kept {
			b.WriteString("\n" + marker(mode) + "\n\n" + r + "\n")
		}
	}
	b.WriteString("\n")
	b.Write(text[end:])
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func (s section) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Run of %s (%s mode)\n\n", s.date, s.mode)
	fmt.Fprintf(&b, "`%s` on %s.\n\n", s.command, s.machine)
	if s.settings != "" {
		fmt.Fprintf(&b, "Settings: %s.\n\n", s.settings)
	}
	b.WriteString(s.table)
	return b.String()
}
