package cleanup_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/stretchr/testify/assert"
)

// Add totals every field of Stats: a pass's counts, its time and the keys it
// followed, each field in turn, so that a field added to Stats and not to Add fails.
func TestStatsAddTotalsEveryField(t *testing.T) {
	typ := reflect.TypeFor[cleanup.Stats]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			var pass cleanup.Stats
			v := reflect.ValueOf(&pass).Elem().Field(i)
			switch {
			case f.Type == reflect.TypeFor[time.Duration]():
				v.SetInt(int64(3 * time.Second))
			case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
				v.SetInt(3)
			case f.Type == reflect.TypeFor[[]string]():
				v.Set(reflect.ValueOf([]string{"pins.note_id"}))
			default:
				t.Fatalf("Stats.%s is a %v: teach this test (and Add) to total it", f.Name, f.Type)
			}
			total := pass
			total.Followed = append([]string(nil), pass.Followed...)
			total.Add(pass)
			got := reflect.ValueOf(total).Field(i)
			if f.Type.Kind() == reflect.Slice {
				assert.Equal(t, []string{"pins.note_id", "pins.note_id"}, got.Interface())
			} else {
				assert.Equal(t, 2*v.Int(), got.Int(), "a second pass doubles it")
			}
			// The other fields stay zero: Add adds each field to itself alone.
			for j := range typ.NumField() {
				if j != i {
					assert.True(t, reflect.ValueOf(total).Field(j).IsZero(), "Stats.%s", typ.Field(j).Name)
				}
			}
		})
	}
}
