package refset_test

import (
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
)

type unmadeItem struct{ Key string }

func (i unmadeItem) ID() string { return i.Key }

// TestUnmadeRefSet: a RefSet New did not make of a store compiles (the zero value, a
// nil pointer, New of a nil store) and fails every call with ErrInvalidConfig
// instead of panicking.
func TestUnmadeRefSet(t *testing.T) {
	ctx := t.Context()
	for name, s := range map[string]*refset.RefSet[unmadeItem, string]{
		"zero":      {},
		"nil":       nil,
		"nil store": refset.New[unmadeItem, string](nil),
	} {
		t.Run(name, func(t *testing.T) {
			calls := map[string]func() error{
				"Add":      func() error { _, err := s.Add(ctx, unmadeItem{"a"}); return err },
				"AddTx":    func() error { _, err := s.AddTx(ctx, nil, unmadeItem{"a"}); return err },
				"AddAll":   func() error { _, err := s.AddAll(ctx, []unmadeItem{{"a"}}); return err },
				"Upgrade":  func() error { _, err := s.Upgrade(ctx, "a"); return err },
				"Upgrade+": func() error { _, err := s.Upgrade(ctx, "a", s.Hold("h", 0)); return err },
				"Get":      func() error { _, err := s.Get(ctx, nil); return err },
				"GetTx":    func() error { _, err := s.GetTx(ctx, nil, nil); return err },
				"Load":     func() error { _, err := s.Load(ctx, "a"); return err },
				"LoadTx":   func() error { _, err := s.LoadTx(ctx, nil, "a"); return err },
				"Hold":     func() error { return s.Hold("h", 0).Execute(ctx, nil, "a") },
				"Unhold":   func() error { return s.Unhold("h").Execute(ctx, nil, "a") },
			}
			for call, fn := range calls {
				assert.ErrorIs(t, fn(), refset.ErrInvalidConfig, call)
			}
			assert.Zero(t, s.Cached())
			assert.Nil(t, s.Database())
		})
	}
}
