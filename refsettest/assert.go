package refsettest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/sqlident"
)

// assertTimeout bounds what one assertion asks the database: one that does not
// answer fails the assertion instead of hanging the test (or its cleanup).
const assertTimeout = time.Minute

// assertContext is what an assertion asks the database with. Not tb.Context()
// itself: a test checks what its own deferred work left from a t.Cleanup, and
// tb.Context() is cancelled before cleanups run. assertTimeout bounds it instead.
func assertContext(tb testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(tb.Context()), assertTimeout)
}

// AssertClean checks that c.Check finds the set healthy: no leaked object (one no
// root reaches, which Collect would never delete) and no dangling reference. The
// failure message gives the counts and Check's samples. It reports false after a
// failure.
func AssertClean(tb testing.TB, c *cleanup.Collector) bool {
	tb.Helper()
	ctx, cancel := assertContext(tb)
	defer cancel()
	r, err := c.Check(ctx)
	if err != nil {
		tb.Errorf("refsettest: AssertClean: check: %v", err)
		return false
	}
	if r.OK() {
		return true
	}
	tb.Errorf("refsettest: AssertClean: the set is not clean: %d leaked, %d dangling; samples:\n\t%s",
		r.Leaked, r.Dangling, strings.Join(r.Samples, "\n\t"))
	return false
}

// AssertHeldBy checks that exactly the rows in want keep the object id alive, as
// c.Why lists them. No want means nothing holds it: it is still there, but garbage.
//
// A want names one row, written as "table.column" (any one row of that table that
// references id through that column) or as Why's Holder prints it, "table.column
// (key)", the key's values as SQL literals: "block_id='b1'" on text, "id=7" on a
// number; a failure prints the holders found in that form. A value matches quoted
// or not, since the stores render them apart (PostgreSQL quotes every value, "id='7'",
// SQLite text only), but must be the same text: "id=7" is not "id=07". On Postgres,
// where Why names tables with their schema, a want's table without a schema matches
// the table of that name in any schema, so the same wants serve both stores. Two rows of one
// table are two wants. Why lists at most five rows per referencing table, so a
// want of more than five rows of one table cannot be met.
//
// An object that does not exist fails the assertion: use [AssertGone] for that. So
// does an id of a Go type the set's ID column does not take, which
// cleanup.Collector.Why refuses: pass the ID as the program has it (an int64 for a
// set of integer IDs, not the string "42"), or as text, read as the key's type, in
// a cleanup.TextID. It reports false after a failure.
func AssertHeldBy(tb testing.TB, c *cleanup.Collector, id any, want ...string) bool {
	tb.Helper()
	ctx, cancel := assertContext(tb)
	defer cancel()
	holders, err := c.Why(ctx, id)
	if err != nil {
		tb.Errorf("refsettest: AssertHeldBy(%v): why: %v", id, err)
		return false
	}
	var wants []heldBy
	for _, w := range want {
		h, err := parseHeldBy(w)
		if err != nil {
			tb.Errorf("refsettest: AssertHeldBy(%v): %v", id, err)
			return false
		}
		wants = append(wants, h)
	}
	missing, extra := match(wants, holders)
	if len(missing) == 0 && len(extra) == 0 {
		return true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "refsettest: AssertHeldBy(%v): held by %s; want %s", id, list(holders), quoteAll(want))
	if len(missing) > 0 {
		fmt.Fprintf(&b, "\n\tmissing: %s", quoteAll(missing))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, "\n\tunexpected: %s", list(extra))
	}
	tb.Errorf("%s", b.String())
	return false
}

// AssertGone checks that the object id does not exist any more: clean-up deleted
// it (or it never was). A failure names the rows that still hold it, if any. A nil
// or zero id (a nil pointer, "", 0) fails: no object has one (refset refuses the
// zero ID), so the assertion would pass having checked nothing, as when a test
// read the ID off a nil token. So does an id of a Go type the set's ID column does
// not take (an int for a set of string IDs "obj-42"; a string, "obj-42" or "42",
// for integer IDs), which cleanup.Collector.Why refuses (see its rule) where the
// database would compare it loosely and find nothing, the object there or not; and
// a cleanup.TextID the key's type cannot read ("obj-42" for integer IDs). It
// reports false after a failure.
func AssertGone(tb testing.TB, c *cleanup.Collector, id any) bool {
	tb.Helper()
	if noID(id) {
		tb.Errorf("refsettest: AssertGone(%v): a nil or zero ID names no object: the assertion would pass having checked nothing", id)
		return false
	}
	ctx, cancel := assertContext(tb)
	defer cancel()
	holders, err := c.Why(ctx, id)
	switch {
	case errors.Is(err, refset.ErrNotFound):
		return true
	case errors.Is(err, refset.ErrInvalidID):
		tb.Errorf("refsettest: AssertGone(%v): an ID of type %T names no object of the set, so nothing was checked: %v", id, id, err)
	case err != nil:
		tb.Errorf("refsettest: AssertGone(%v): why: %v", id, err)
	case len(holders) == 0:
		tb.Errorf("refsettest: AssertGone(%v): it still exists, held by nothing (not collected yet: is it due? see cleanup.Config.Grace)", id)
	default:
		tb.Errorf("refsettest: AssertGone(%v): it still exists, held by %s", id, list(holders))
	}
	return false
}

// heldBy is a parsed want of AssertHeldBy.
type heldBy struct {
	text          string // as the caller wrote it
	schema, table string
	column        string
	key           string
	anyKey        bool // "table.column" without a key
}

// parseHeldBy reads "[schema.]table.column" with an optional " (key)".
func parseHeldBy(s string) (heldBy, error) {
	h := heldBy{text: s, anyKey: true}
	name := s
	if open := strings.Index(s, " ("); open >= 0 {
		if !strings.HasSuffix(s, ")") {
			return h, fmt.Errorf("holder %q: want \"table.column\" or \"table.column (key)\"", s)
		}
		name, h.key, h.anyKey = s[:open], s[open+2:len(s)-1], false
	}
	dot := strings.LastIndex(name, ".")
	if dot <= 0 || dot == len(name)-1 {
		return h, fmt.Errorf("holder %q: want \"table.column\" or \"table.column (key)\"", s)
	}
	h.column = name[dot+1:]
	t, err := sqlident.Parse(name[:dot], true)
	if err != nil {
		return h, fmt.Errorf("holder %q: %w", s, err)
	}
	h.schema, h.table = t.Schema, t.Name
	return h, nil
}

// matches reports whether the row h is one w names.
func (w heldBy) matches(h cleanup.Holder) bool {
	if h.Column != w.column || (!w.anyKey && !sameKey(w.key, h.Key)) {
		return false
	}
	t, err := sqlident.Parse(h.Table, true)
	if err != nil {
		return h.Table == w.table && w.schema == ""
	}
	return t.Name == w.table && (w.schema == "" || w.schema == t.Schema)
}

// sameKey reports whether want, a key as a test writes it, names the row whose key
// Why rendered as got: "col=value, ..." with the same columns in the same order and
// each value the same once unquoted (a doubled quote inside read as one), so a test
// writes a key once for both stores. NULL unquoted is no text at all: it is not
// 'NULL'. A key that does not read as column=value pairs must be got exactly.
func sameKey(want, got string) bool {
	w, okW := keyParts(want)
	g, okG := keyParts(got)
	if !okW || !okG {
		return want == got
	}
	return slices.Equal(w, g)
}

// keyPart is one column=value of a row's key, its value unquoted.
type keyPart struct {
	column, value string
	null          bool
}

// keyParts reads key, "col=value, col=value", each value an SQL literal: 'quoted'
// (a quote in it doubled) or bare (a number, NULL). It reports false for anything
// else.
func keyParts(key string) ([]keyPart, bool) {
	var parts []keyPart
	rest := key
	for {
		col, after, ok := strings.Cut(rest, "=")
		if !ok || col == "" {
			return nil, false
		}
		p := keyPart{column: col}
		var tail string
		if quoted, ok := strings.CutPrefix(after, "'"); ok {
			if p.value, tail, ok = cutQuoted(quoted); !ok {
				return nil, false
			}
		} else {
			p.value, tail = after, ""
			if end := strings.Index(after, ", "); end >= 0 {
				p.value, tail = after[:end], after[end:]
			}
			if p.value == "" || strings.Contains(p.value, "'") {
				return nil, false
			}
			p.null = p.value == "NULL"
		}
		parts = append(parts, p)
		if tail == "" {
			return parts, true
		}
		if rest, ok = strings.CutPrefix(tail, ", "); !ok || rest == "" {
			return nil, false
		}
	}
}

// cutQuoted reads the rest of a quoted literal, s being what follows its opening
// quote: it returns the literal's text, with each doubled quote made one, and what
// follows its closing quote.
func cutQuoted(s string) (text, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return b.String(), s[i+1:], true
	}
	return "", "", false
}

// match pairs each want with a row of its own and returns the wants left without
// one and the rows no want took. A want may fit several rows ("heads.block_id" fits
// every row of heads) and a row several wants, so it is a bipartite matching: a want
// that finds its rows taken tries to move the wants holding them elsewhere
// (augmenting paths), and the result does not depend on the order of the wants.
func match(wants []heldBy, holders []cleanup.Holder) (missing []string, extra []cleanup.Holder) {
	owner := make([]int, len(holders)) // the want holding each row, or -1
	for i := range owner {
		owner[i] = -1
	}
	var assign func(w int, seen []bool) bool
	assign = func(w int, seen []bool) bool {
		for i, h := range holders {
			if seen[i] || !wants[w].matches(h) {
				continue
			}
			seen[i] = true
			if owner[i] < 0 || assign(owner[i], seen) {
				owner[i] = w
				return true
			}
		}
		return false
	}
	for w := range wants {
		if !assign(w, make([]bool, len(holders))) {
			missing = append(missing, wants[w].text)
		}
	}
	for i, h := range holders {
		if owner[i] < 0 {
			extra = append(extra, h)
		}
	}
	return missing, extra
}

// list prints holders as Holder.String does, quoted, so they can be pasted as wants.
func list(hs []cleanup.Holder) string {
	if len(hs) == 0 {
		return "nothing"
	}
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	return quoteAll(s)
}

func quoteAll(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

// noID reports whether id is nil (a nil interface, pointer, slice or map, which the
// drivers send as NULL and which matches no row) or the zero value of its type,
// which refset refuses as an object's ID.
func noID(id any) bool {
	if id == nil {
		return true
	}
	v := reflect.ValueOf(id)
	switch v.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Func, reflect.Chan:
		if v.IsNil() {
			return true
		}
	}
	return v.IsZero()
}
