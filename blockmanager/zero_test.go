package blockmanager

import (
	"context"
	"strings"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Manager that Open did not make (the zero value, or nil), and the Completer and
// ChainController it hands out, have no database: each method fails with
// ErrInvalidConfig naming blockmanager.Open, and none panics.
func TestUnopenedManager(t *testing.T) {
	ctx := context.Background()
	for name, m := range map[string]*Manager{"zero": {}, "nil": nil} {
		for method, call := range map[string]func() error{
			"Put": func() error { _, err := m.Put(ctx, []Block{{HeaderSignature: "a"}}); return err },
			"PutTx": func() error {
				_, err := m.PutTx(ctx, nil, []Block{{HeaderSignature: "a"}})
				return err
			},
			"Get":                     func() error { _, err := m.Get(ctx, []string{"a"}); return err },
			"Contains":                func() error { _, err := m.Contains(ctx, "a"); return err },
			"ContainsAnyBatches":      func() error { _, err := m.ContainsAnyBatches(ctx, "a", []string{"b"}); return err },
			"ContainsAnyTransactions": func() error { _, err := m.ContainsAnyTransactions(ctx, "a", []string{"t"}); return err },
			"BranchDiff":              func() error { _, err := m.BranchDiff(ctx, "a", "b"); return err },
			"CommonAncestor":          func() error { _, err := m.CommonAncestor(ctx, "a", "b"); return err },
			"Branch": func() error {
				for _, err := range m.Branch(ctx, "a") {
					return err
				}
				return nil
			},
			"Completer.Receive":         func() error { _, err := m.Completer().Receive(ctx, Block{HeaderSignature: "a"}); return err },
			"Completer.Pending":         func() error { _, _, err := m.Completer().Pending(ctx); return err },
			"ChainController.Head":      func() error { _, err := m.Controller().Head(ctx); return err },
			"ChainController.Commit":    func() error { return m.Controller().Commit(ctx, "a") },
			"ChainController.Forks":     func() error { _, err := m.Controller().Forks(ctx); return err },
			"ChainController.Accept":    func() error { return m.Controller().Accept().Execute(ctx, nil, "a") },
			"zero Completer.Receive":    func() error { _, err := (&Completer{}).Receive(ctx, Block{HeaderSignature: "a"}); return err },
			"zero ChainController.Head": func() error { _, err := (&ChainController{}).Head(ctx); return err },
			"Collector.Collect":         func() error { _, err := m.Collector().Collect(ctx); return err },
		} {
			t.Run(name+"/"+method, func(t *testing.T) {
				var err error
				require.NotPanics(t, func() { err = call() })
				require.ErrorIs(t, err, refset.ErrInvalidConfig)
				want := "blockmanager.Open"
				if strings.HasPrefix(method, "Collector.") {
					want = "cleanup.Install"
				}
				assert.Contains(t, err.Error(), want)
			})
		}
		t.Run(name+"/accessors", func(t *testing.T) {
			assert.Nil(t, m.Blocks())
			assert.Nil(t, m.Database(), "a nil interface, not one holding nil")
		})
	}
}
