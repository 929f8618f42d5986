package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/stretchr/testify/require"
)

// testHoldsRead: the reads of a set's holds the operators' tools make (ListHolds with
// each filter, HolderCounts) select, order and bound the holds as their filters say,
// by the database's clock.
func testHoldsRead(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	for _, b := range []struct {
		id    string
		holds []refset.Command[string]
	}{
		{"a", []refset.Command[string]{set.Hold("alice", 0), set.Hold("bob", time.Hour)}},
		{"b", []refset.Command[string]{set.Hold("alice", time.Millisecond)}},
		{"c", []refset.Command[string]{set.Hold("carol", 2*time.Hour)}},
		{"d", []refset.Command[string]{set.Hold("alice", 90*time.Minute)}},
	} {
		_, err := set.Add(ctx, mkBlock(b.id, "", 0), b.holds...)
		require.NoError(t, err)
	}
	time.Sleep(20 * time.Millisecond) // b's hold expires
	d := e.db.Driver().SchemaSQL()
	reg, err := d.Lookup(ctx, e.db.Reader(), sqlident.Must("blocks"))
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		f    refsetdriver.HoldFilter
		want []string // object/holder, in order
	}{
		{"all, by object and holder", refsetdriver.HoldFilter{}, []string{"a/alice", "a/bob", "b/alice", "c/carol", "d/alice"}},
		{"expired", refsetdriver.HoldFilter{Expired: true}, []string{"b/alice"}},
		{"expiring, soonest first", refsetdriver.HoldFilter{Expiring: true, Soonest: true}, []string{"a/bob", "d/alice", "c/carol"}},
		{"expiring, the first two", refsetdriver.HoldFilter{Expiring: true, Soonest: true, Limit: 2}, []string{"a/bob", "d/alice"}},
		{"of one object", refsetdriver.HoldFilter{Object: "a"}, []string{"a/alice", "a/bob"}},
		{"of no object", refsetdriver.HoldFilter{Object: "zz"}, nil},
		{"of one holder", refsetdriver.HoldFilter{Holder: "alice"}, []string{"a/alice", "b/alice", "d/alice"}},
		{"of one holder, expiring", refsetdriver.HoldFilter{Holder: "alice", Expiring: true}, []string{"d/alice"}},
		{"of one holder, the first", refsetdriver.HoldFilter{Holder: "alice", Limit: 1}, []string{"a/alice"}},
	} {
		_, holds, err := d.ListHolds(ctx, e.db.Reader(), reg.Holds, c.f)
		require.NoError(t, err, c.name)
		var got []string
		for _, h := range holds {
			got = append(got, h.ObjectID+"/"+h.Holder)
			require.Equal(t, h.ObjectID == "b", h.Expired, "%s: %s", c.name, h.ObjectID)
		}
		require.Equal(t, c.want, got, c.name)
	}
	for _, c := range []struct {
		limit, most int
		want        string
	}{
		{10, 10, "[{alice 3} {bob 1} {carol 1}]"},
		{2, 10, "[{alice 3} {bob 1}]"},
		{10, 1, "[{alice 2} {bob 1} {carol 1}]"}, // more than most: most+1
	} {
		counts, err := d.HolderCounts(ctx, e.db.Reader(), reg.Holds, c.limit, c.most)
		require.NoError(t, err)
		require.Equal(t, c.want, fmt.Sprint(counts), "limit %d, most %d", c.limit, c.most)
	}
}
