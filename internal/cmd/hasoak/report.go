package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// event is one line of the event log: a kill of the primary, a switchover, or the
// restart of a killed node, with when the script began it and when it returned.
type event struct {
	kind       string // kill, switchover, restart
	start, end time.Time
	ok         bool // the script's command succeeded
}

// failover reports whether the event is one: a restart is not.
func (e event) failover() bool { return e.kind == "kill" || e.kind == "switchover" }

// readEvents reads the event log at path, and whether it says done.
func readEvents(path string) (events []event, done bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
			continue
		case len(fields) == 1 && fields[0] == "done":
			done = true
			continue
		case len(fields) != 4:
			return nil, false, fmt.Errorf("%s:%d: want KIND START END STATUS or done, got %q", path, line, sc.Text())
		}
		e := event{kind: fields[0], ok: fields[3] == "ok"}
		if e.kind != "kill" && e.kind != "switchover" && e.kind != "restart" {
			return nil, false, fmt.Errorf("%s:%d: unknown event %q", path, line, e.kind)
		}
		for i, t := range []*time.Time{&e.start, &e.end} {
			secs, err := strconv.ParseFloat(fields[1+i], 64)
			if err != nil {
				return nil, false, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			*t = time.Unix(0, int64(secs*1e9))
		}
		events = append(events, e)
	}
	return events, done, sc.Err()
}

// recovery is what the soak saw of one event.
type recovery struct {
	event
	// outage is the longest time without a successful write from the event's start
	// until the next event's (or the soak's end); when the last write of that
	// window came before the script saw the event through, the wait for the next
	// write counts too, wherever it falls: a kill's outage may outlast the script's
	// wait for the cluster to settle, and so run into the restart that follows.
	outage time.Duration
	// recovered: a write succeeded after the outage, before the soak ended.
	recovered bool
	// Operations that ended in that window with an unknown commit, and failed.
	unknown, failed int
}

// recoveries measures each event in ops, the operations of a soak from start to
// end: the successful writes (acknowledged operations) around it, and the
// outcomes of the operations that ended in its window.
func recoveries(events []event, ops []op, start, end time.Time) []recovery {
	var acks []time.Time
	for _, o := range ops {
		if o.Outcome == acked {
			acks = append(acks, o.End)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	var out []recovery
	for i, e := range events {
		until := end
		if i+1 < len(events) {
			until = events[i+1].start
		}
		r := recovery{event: e, recovered: true}
		prev := e.start
		for _, a := range acks {
			if a.After(until) {
				break
			}
			if a.After(e.start) {
				r.outage = max(r.outage, a.Sub(prev))
				prev = a
			}
		}
		if prev.Before(e.end) {
			next := slices.IndexFunc(acks, prev.Before)
			if next < 0 {
				// No write after the last one: down until the soak's end.
				r.outage, r.recovered = max(r.outage, end.Sub(prev)), false
			} else {
				r.outage = max(r.outage, acks[next].Sub(prev))
			}
		}
		for _, o := range ops {
			if o.End.After(e.start) && !o.End.After(until) {
				switch o.Outcome {
				case unknown:
					r.unknown++
				case failed:
					r.failed++
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// result is a soak's outcome: what it did, what the checks found.
type result struct {
	driver, replication string
	ops                 []op
	verdict             *verdict
	failovers           []recovery
	collector           [2]int64 // clean-up passes that succeeded, failed
}

// survived counts the kills and switchovers after which writes succeeded again.
func (r *result) survived() (kills, switchovers int) {
	for _, f := range r.failovers {
		if f.failover() && f.ok && f.recovered {
			if f.kind == "kill" {
				kills++
			} else {
				switchovers++
			}
		}
	}
	return kills, switchovers
}

// broken lists the invariants the soak saw broken. Acknowledged operations lost
// break one only under synchronous replication: with asynchronous replication a
// failover may lose them, and the soak measures how many.
func (r *result) broken() []string {
	v := r.verdict
	var b []string
	if v.ackedLost > 0 && r.replication == "sync" {
		b = append(b, fmt.Sprintf("%d acknowledged operations lost under synchronous replication: %s", v.ackedLost, sample(v.lost)))
	}
	if v.failedPresent > 0 {
		b = append(b, fmt.Sprintf("%d operations reported failed are there: %s", v.failedPresent, sample(v.present)))
	}
	if !v.audit.Balanced() {
		b = append(b, fmt.Sprintf("custody's books do not balance: %+v", v.audit))
	}
	b = append(b, v.books...)
	b = append(b, v.chain...)
	for i, f := range r.failovers {
		if !f.ok || !f.recovered {
			b = append(b, fmt.Sprintf("event %d (%s): the script's command failed, or no write succeeded after it", i+1, f.kind))
		}
	}
	return b
}

func sample(s []string) string {
	if len(s) > 5 {
		return strings.Join(s[:5], ", ") + ", ..."
	}
	return strings.Join(s, ", ")
}

// tableHeader is the soak's markdown table, whose rows print prints.
const tableHeader = `| driver | replication | failovers survived (kills/switchovers) | acknowledged ops | acknowledged lost | failed yet present | double spends | double locks | leaked/dangling | recovery s (max/median) | unknown commits |
|---|---|---|---|---|---|---|---|---|---|---|`

func (r *result) print(out io.Writer, start time.Time) {
	v := r.verdict
	type count struct{ acked, failed, unavailable, unknown int }
	counts := map[string]*count{}
	var kinds []string
	total := count{}
	for _, o := range r.ops {
		c := counts[o.Kind]
		if c == nil {
			c = &count{}
			counts[o.Kind] = c
			kinds = append(kinds, o.Kind)
		}
		for _, c := range []*count{c, &total} {
			switch o.Outcome {
			case acked:
				c.acked++
			case unknown:
				c.unknown++
			default:
				c.failed++
				if o.Unavailable {
					c.unavailable++
				}
			}
		}
	}
	slices.Sort(kinds)
	fmt.Fprintf(out, "operations (acknowledged / failed, of which unavailable / unknown):\n")
	for _, k := range kinds {
		c := counts[k]
		fmt.Fprintf(out, "  %-8s %7d / %5d, %5d / %d\n", k, c.acked, c.failed, c.unavailable, c.unknown)
	}
	// Failures other than the server going away say most about a failover (a
	// demoted server's 25006, a timeout): a few of each kind of message.
	others := map[string]int{}
	for _, o := range r.ops {
		if o.Outcome == failed && !o.Unavailable {
			others[o.Kind+": "+strings.ReplaceAll(o.Err, "\n", " | ")]++
		}
	}
	msgs := slices.Sorted(maps.Keys(others))
	for _, msg := range msgs[:min(len(msgs), 10)] {
		fmt.Fprintf(out, "  %dx %s\n", others[msg], msg)
	}
	if len(msgs) > 10 {
		fmt.Fprintf(out, "  and %d other messages\n", len(msgs)-10)
	}
	fmt.Fprintf(out, "clean-up passes during the soak: %d, %d failed\n", r.collector[0], r.collector[1])
	var outages []float64
	for i, f := range r.failovers {
		fmt.Fprintf(out, "event %d: %-10s at +%5.1fs (script %4.1fs, %s): %5.1fs without a successful write, %d unknown commits, %d failed ops\n",
			i+1, f.kind, f.start.Sub(start).Seconds(), f.end.Sub(f.start).Seconds(), map[bool]string{true: "ok", false: "FAILED"}[f.ok],
			f.outage.Seconds(), f.unknown, f.failed)
		if f.failover() {
			outages = append(outages, f.outage.Seconds())
		}
	}
	fmt.Fprintf(out, "final primary: port %d\n", v.primaryPort)
	fmt.Fprintf(out, "acknowledged lost %d, failed yet present %d, unknown %d (%d of them committed)\n",
		v.ackedLost, v.failedPresent, total.unknown, v.unknownCommitted)
	fmt.Fprintf(out, "books: %+v (balanced: %v)\n", v.audit, v.audit.Balanced())
	for _, p := range append(slices.Clone(v.books), v.chain...) {
		fmt.Fprintf(out, "problem: %s\n", p)
	}
	for _, l := range v.lost[:min(len(v.lost), 10)] {
		fmt.Fprintf(out, "lost: %s\n", l)
	}
	for _, p := range v.present[:min(len(v.present), 10)] {
		fmt.Fprintf(out, "failed yet present: %s\n", p)
	}
	kills, switchovers := r.survived()
	rec := "-"
	if len(outages) > 0 {
		slices.Sort(outages)
		median := outages[len(outages)/2]
		if len(outages)%2 == 0 {
			median = (outages[len(outages)/2-1] + median) / 2
		}
		rec = fmt.Sprintf("%.1f/%.1f", outages[len(outages)-1], median)
	}
	fmt.Fprintln(out, tableHeader)
	fmt.Fprintf(out, "| %s | %s | %d (%d/%d) | %d | %d | %d | %d | %d | %d/%d | %s | %d |\n",
		map[string]string{"postgres": "lib/pq", "pgx": "pgx"}[r.driver], r.replication, kills+switchovers, kills, switchovers,
		total.acked, v.ackedLost, v.failedPresent, v.audit.SpentButPresent, v.audit.LockedTwice,
		v.leaked, v.dangling, rec, total.unknown)
}
