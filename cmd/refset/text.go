package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable is a value read from the database (an object ID, a holder, a row's key)
// as the text output prints it: as it is when every character of it prints, quoted
// with Go's escapes otherwise. A value is anyone's to write (a holder's name may
// come from a program's user): written raw, a newline in it would forge a line of
// the report, a tab shift its columns, and an escape sequence rewrite the operator's
// terminal (erase the lines above it). A value that begins with a quote is quoted
// too, so that a quoted value is never mistaken for one that was not.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// stored is a value read from the database (an object ID, a holder, a row's key) as
// --json prints it. A JSON string is UTF-8, but a value need not be (SQLite keeps
// whatever bytes were written), and encoding/json would replace each byte that is not
// with U+FFFD, a value no longer told apart from others. So a value that is not valid
// UTF-8, or that begins with a quote, is printed as the text output prints it, quoted
// with Go's escapes (strconv.Quote, "\xff" for a byte that is no character), and every
// other value as it is, JSON-escaped: a string that begins with a quote is
// strconv.Unquote'd to the value, any other string is the value.
type stored string

// jsonQuoted is s as the JSON string of a stored value holds it.
func jsonQuoted(s string) string {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}

func (s stored) MarshalJSON() ([]byte, error) { return json.Marshal(jsonQuoted(string(s))) }

// QuoteError is the error of a JSON string that begins with a quote and is no Go
// quoted string: no stored value is printed so.
type QuoteError struct {
	JSON string // the string, as JSON
	Err  error  // strconv.Unquote's
}

func (e *QuoteError) Error() string {
	return fmt.Sprintf("JSON value %s begins with a quote but is no Go-quoted string: %v", e.JSON, e.Err)
}

func (e *QuoteError) Unwrap() error { return e.Err }

func (s *stored) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if strings.HasPrefix(v, `"`) {
		u, err := strconv.Unquote(v)
		if err != nil {
			return &QuoteError{JSON: string(b), Err: err}
		}
		v = u
	}
	*s = stored(v)
	return nil
}

// storedAll is values as stored values.
func storedAll(values []string) []stored {
	s := make([]stored, len(values))
	for i, v := range values {
		s[i] = stored(v)
	}
	return s
}

// escapeControls is a message for stderr (an error, which may name a value or a
// catalog's name from the database) with each character that does not print, and each
// byte that is no UTF-8, written as Go escapes it (\x1b, \u202e, \xff); its lines
// stay lines. Unlike printable it does not quote the whole message, whose own quotes
// are its words'.
func escapeControls(msg string) string {
	var b strings.Builder
	for i, w := 0, 0; i < len(msg); i += w {
		r, size := utf8.DecodeRuneInString(msg[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, msg[i])
		case r == '\n' || unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}
