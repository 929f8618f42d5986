package main

import (
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
