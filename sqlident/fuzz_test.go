package sqlident

import (
	"errors"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/sentinel"
)

// unquote reads back what Quoted writes: one or two double-quoted parts joined by a
// dot, no quote inside a part. It fails the test on anything else.
func unquote(t *testing.T, quoted string) string {
	t.Helper()
	var parts []string
	rest := quoted
	for {
		if !strings.HasPrefix(rest, `"`) {
			t.Fatalf("quoted %q: a part does not start with a quote", quoted)
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			t.Fatalf("quoted %q: unterminated part", quoted)
		}
		parts = append(parts, rest[1:1+end])
		rest = rest[2+end:]
		if rest == "" {
			break
		}
		if !strings.HasPrefix(rest, ".") {
			t.Fatalf("quoted %q: parts not joined by a dot", quoted)
		}
		rest = rest[1:]
	}
	if len(parts) > 2 {
		t.Fatalf("quoted %q: %d parts", quoted, len(parts))
	}
	return strings.Join(parts, ".")
}

// dangerous are characters that must never reach SQL inside an identifier or a type.
const dangerous = "\"';\x00\n\r\t\\`/*-[]"

// Parse either refuses a name with ErrInvalidIdentifier or accepts one whose quoted
// form is safe and reads back as the same identifier.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"blocks", "_x9", "ledger.blocks", "a.b.c", "", "9lives", "blocks; DROP TABLE x",
		`bl"ocks`, `ledger"."blocks`, "bl ocks", "ledger.", ".blocks", "héllo", "a\x00b", "a\nb", "blocks\n",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "x." + strings.Repeat("b", 63),
	} {
		f.Add(seed, true, "other")
		f.Add(seed, false, seed)
	}
	f.Fuzz(func(t *testing.T, name string, allowSchema bool, other string) {
		id, err := Parse(name, allowSchema)
		if err != nil {
			if !errors.Is(err, sentinel.ErrInvalidIdentifier) {
				t.Fatalf("Parse(%q): error %v is not ErrInvalidIdentifier", name, err)
			}
			return
		}
		if strings.ContainsAny(name, dangerous+" ") {
			t.Fatalf("Parse(%q) accepted a dangerous character", name)
		}
		if id.Schema != "" && !allowSchema {
			t.Fatalf("Parse(%q, false) accepted a schema", name)
		}
		if id.String() != name {
			t.Fatalf("Parse(%q).String() = %q", name, id.String())
		}
		quoted := id.Quoted()
		if strings.Contains(quoted, ";") || strings.Contains(quoted, "\x00") {
			t.Fatalf("Parse(%q).Quoted() = %q", name, quoted)
		}
		back, err := Parse(unquote(t, quoted), true)
		if err != nil || back != id {
			t.Fatalf("Quoted %q of %q parses back as %+v, %v", quoted, name, back, err)
		}
		renamed, err := id.WithName(other)
		if err != nil {
			if !errors.Is(err, sentinel.ErrInvalidIdentifier) {
				t.Fatalf("WithName(%q): error %v is not ErrInvalidIdentifier", other, err)
			}
			return
		}
		if renamed.Schema != id.Schema || renamed.Name != other || strings.ContainsAny(other, dangerous+". ") {
			t.Fatalf("%+v.WithName(%q) = %+v", id, other, renamed)
		}
	})
}

// CheckType refuses with ErrInvalidIdentifier anything that could end or extend the
// DDL it is written into.
func FuzzCheckType(f *testing.F) {
	for _, seed := range []string{
		"text", "bigint", "character varying(128)", "VARCHAR(64)", "numeric(10,2)", "numeric(10, 2)", "BLOB",
		"timestamp with time zone", "", "text; DROP TABLE x", "text)", "int[]", `"quoted"`, "text -- comment",
		"text\n", "numeric(1,2,3)", "a(1)(2)", "text/*", "a\x00", "int4 ", "x(9999999999999999999999)",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, typ string) {
		err := CheckType(typ)
		if err != nil {
			if !errors.Is(err, sentinel.ErrInvalidIdentifier) {
				t.Fatalf("CheckType(%q): error %v is not ErrInvalidIdentifier", typ, err)
			}
			return
		}
		if strings.ContainsAny(typ, dangerous) {
			t.Fatalf("CheckType accepted %q", typ)
		}
		if typ == "" || strings.Count(typ, "(") > 1 || strings.Count(typ, "(") != strings.Count(typ, ")") {
			t.Fatalf("CheckType accepted %q", typ)
		}
		if open := strings.IndexByte(typ, '('); open >= 0 && !strings.HasSuffix(typ, ")") {
			t.Fatalf("CheckType accepted %q: parentheses not at the end", typ)
		}
	})
}
