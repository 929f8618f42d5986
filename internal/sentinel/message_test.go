package sentinel

import (
	"errors"
	"strings"
	"testing"
)

// TestMessagesSayEachPartOnce: a layer that wraps another's error says what it did
// and drops the prefix the inner message starts with, and New leaves out a sentinel
// the cause says already; the chain keeps every error.
func TestMessagesSayEachPartOnce(t *testing.T) {
	driver := errors.New("pq: duplicate key value violates unique constraint")
	store := New("refset/postgres", "", ErrDuplicate, driver)
	tests := []struct {
		name string
		err  error
		want string
		is   []error
	}{
		{"a store's translation", store, "refset/postgres: duplicate id: pq: duplicate key value violates unique constraint", []error{ErrDuplicate, driver}},
		{"refset around a store's error", Wrap("refset", "add n1", store), "refset: add n1: duplicate id: pq: duplicate key value violates unique constraint", []error{ErrDuplicate, driver}},
		{"a layer without a prefix", Wrap("", "command 2 of 3 (INSERT ...)", store), "command 2 of 3 (INSERT ...): duplicate id: pq: duplicate key value violates unique constraint", []error{ErrDuplicate}},
		{"a sentinel the cause has", New("refset", "open", ErrDuplicate, store), "refset: open: duplicate id: pq: duplicate key value violates unique constraint", []error{ErrDuplicate}},
		{"a sentinel alone", New("refset", "get x", ErrNotFound, nil), "refset: get x: not found", []error{ErrNotFound}},
		{"the same prefix twice", Wrap("refset/postgres", "open", New("refset/postgres", "", ErrInvalidConfig, driver)), "refset/postgres: open: invalid configuration: pq: duplicate key value violates unique constraint", []error{ErrInvalidConfig}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("message\n got %s\nwant %s", got, tc.want)
			}
			for _, target := range tc.is {
				if !errors.Is(tc.err, target) {
					t.Errorf("%v does not match %v", tc.err, target)
				}
			}
		})
	}
}

func TestTrim(t *testing.T) {
	for in, want := range map[string]string{
		"refset: add n: x":          "add n: x",
		"refset/postgres: open: x":  "open: x",
		"refset/sqlite: x":          "x",
		"refsetter: x":              "refsetter: x",
		"refset/no such thing: x":   "refset/no such thing: x",
		"pq: refset: x":             "pq: refset: x",
		"refset":                    "refset",
		"context deadline exceeded": "context deadline exceeded",
	} {
		if got := Trim(in); got != want {
			t.Errorf("Trim(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIDInMessages: an ID reads as %v prints it when that is short and printable,
// quoted when it is not printable or not UTF-8, and cut, on a character's boundary,
// with its length, when long.
func TestIDInMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   any
		want string
	}{
		{"a plain string", "n1", "n1"},
		{"an integer", int64(-42), "-42"},
		{"spaces print", "a b", "a b"},
		{"a newline is quoted", "a\nb", `"a\nb"`},
		{"a tab is quoted", "a\tb", `"a\tb"`},
		{"invalid UTF-8 is quoted", "a\xffb", `"a\xffb"`},
		{"a right-to-left override is quoted", "a\u202eb", `"a\u202eb"`},
		{"just short enough", strings.Repeat("x", maxID), strings.Repeat("x", maxID)},
		{"long", strings.Repeat("x", 1000), strings.Repeat("x", maxID) + "... (1000 bytes)"},
		{"cut on a character's boundary", "x" + strings.Repeat("é", 100), "x" + strings.Repeat("é", 49) + "... (201 bytes)"},
		{"long and quoted", strings.Repeat("\n", 101), `"` + strings.Repeat(`\n`, maxID) + `"... (101 bytes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ID(tc.id); got != tc.want {
				t.Errorf("ID(%q)\n got %s\nwant %s", tc.id, got, tc.want)
			}
		})
	}
}

// TestQuotedIDInMessages: QuotedID always quotes, and cuts as ID does, before quoting.
func TestQuotedIDInMessages(t *testing.T) {
	for id, want := range map[string]string{
		"n1":                     `"n1"`,
		"a\nb":                   `"a\nb"`,
		strings.Repeat("x", 101): `"` + strings.Repeat("x", maxID) + `"... (101 bytes)`,
	} {
		if got := QuotedID(id); got != want {
			t.Errorf("QuotedID(%q)\n got %s\nwant %s", id, got, want)
		}
	}
}
