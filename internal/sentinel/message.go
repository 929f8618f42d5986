package sentinel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Every error refset makes starts with the package that made it ("refset: ",
// "refset/postgres: "), once: a layer that wraps another's error says what it was
// doing and drops the prefix the inner message starts with, since its own names the
// library already. A message then reads as one sentence from the outermost call in,
// "refset: add n1: duplicate id: pq: duplicate key value ...", not as a stack of
// prefixes ("refset: add n1: refset/postgres: ..."), and the inner errors all stay in
// the chain for errors.Is and errors.As.

// Wrap returns err with prefix and op before its message (op may be empty), and
// without the refset prefix err's message starts with.
func Wrap(prefix, op string, err error) error {
	return &wrapped{prefix: prefix, op: op, cause: err}
}

// New returns an error that matches sentinel and cause (either may be nil), reading
// prefix, op (if any), the sentinel's text unless cause matches the sentinel already
// (cause's message then says it), and cause's message without its refset prefix.
func New(prefix, op string, sentinel, cause error) error {
	if cause != nil && sentinel != nil && errors.Is(cause, sentinel) {
		sentinel = nil
	}
	return &wrapped{prefix: prefix, op: op, sentinel: sentinel, cause: cause}
}

// Trim is msg without the refset prefix it starts with: "refset: " or
// "refset/<package>: ".
func Trim(msg string) string {
	rest, ok := strings.CutPrefix(msg, "refset")
	if !ok {
		return msg
	}
	if pkg, ok := strings.CutPrefix(rest, "/"); ok {
		i := strings.IndexByte(pkg, ':')
		if i <= 0 || strings.ContainsAny(pkg[:i], " \t\n") {
			return msg
		}
		rest = pkg[i:]
	}
	if after, ok := strings.CutPrefix(rest, ": "); ok {
		return after
	}
	return msg
}

// wrapped is the error of Wrap and New. Its message is made when asked for, from
// its parts, so that it reads what its cause reads then.
type wrapped struct {
	prefix, op      string
	sentinel, cause error
}

func (w *wrapped) Error() string {
	var b strings.Builder
	b.WriteString(w.prefix)
	add := func(s string) {
		if s == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(s)
	}
	add(w.op)
	if w.sentinel != nil {
		add(w.sentinel.Error())
	}
	if w.cause != nil {
		add(Trim(w.cause.Error()))
	}
	return b.String()
}

func (w *wrapped) Unwrap() []error {
	switch {
	case w.sentinel == nil:
		return []error{w.cause}
	case w.cause == nil:
		return []error{w.sentinel}
	}
	return []error{w.sentinel, w.cause}
}

// maxID is how many bytes of an ID's text a message shows.
const maxID = 100

// ID is an object's ID as a message shows it: as fmt's %v prints it, but quoted, as
// %q does, when that text is not valid UTF-8 or has a character that does not print
// (a newline in an ID would otherwise start a line of its own in a log, which could
// pass for another entry), and cut after its first maxID bytes, on a character's
// boundary and before it is quoted, with its length in all, when longer (an ID of a
// megabyte would otherwise make each message about it one).
func ID(id any) string {
	s := fmt.Sprintf("%v", id)
	return shown(s, !printable(s))
}

// QuotedID is ID for a string ID that a message always quotes, as %q does: cut as ID
// cuts it.
func QuotedID(s string) string { return shown(s, true) }

// shown is s cut after maxID bytes, if longer, then quoted if quote.
func shown(s string, quote bool) string {
	text, cut := s, len(s) > maxID
	if cut {
		n := maxID
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		text = s[:n]
	}
	if quote {
		text = strconv.Quote(text)
	}
	if cut {
		return fmt.Sprintf("%s... (%d bytes)", text, len(s))
	}
	return text
}

// printable reports whether s is valid UTF-8 of characters that print, spaces
// among them.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
