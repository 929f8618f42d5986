package sentinel

import (
	"errors"
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
