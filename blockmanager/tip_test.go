package blockmanager

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ReadTip reads the head and the blocks within depth below it, the forks the cache
// holds (the latest to expire first, up to its limit) and the waiting blocks near the
// tip, each marked for what it is.
func TestReadTip(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		receive := func(id, prev string, num int64) {
			t.Helper()
			_, err := c.Receive(ctx, Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num})
			require.NoError(t, err)
		}
		prev := NullBlockID
		for i := range 10 {
			id := fmt.Sprintf("c%d", i)
			receive(id, prev, int64(i))
			prev = id
		}
		receive("f5", "c4", 5) // a fork, then another, whose hold expires later:
		// a tick of the database's clock later (a millisecond on SQLite), for within
		// one they would expire together.
		time.Sleep(2 * time.Millisecond)
		receive("g7", "c6", 7)
		receive("p12", "missing", 12)

		// describe writes each block as id:flags (c committed, f fork head, p waiting).
		describe := func(tip Tip) string {
			var out []string
			for _, b := range tip.Blocks {
				flags := ""
				for _, f := range []struct {
					on bool
					c  string
				}{{b.Committed, "c"}, {b.Fork, "f"}, {b.Pending, "p"}} {
					if f.on {
						flags += f.c
					}
				}
				out = append(out, b.ID+":"+flags)
			}
			return strings.Join(out, " ")
		}
		for _, tc := range []struct {
			name                  string
			depth, forks, pending int
			from                  int64
			blocks                string
			moreForks             int
		}{
			{"the top", 3, 1, 5, 6, "c6:c c7:c g7:f c8:c c9:c p12:p", 1},
			{"everything", 100, 10, 10, 0, "c0:c c1:c c2:c c3:c c4:c c5:c f5:f c6:c c7:c g7:f c8:c c9:c p12:p", 0},
			{"no waiting block, no fork", 1, 0, 0, 8, "c8:c c9:c", 2},
		} {
			tip, err := ReadTip(ctx, m.Database(), tc.depth, tc.forks, tc.pending)
			require.NoError(t, err, tc.name)
			require.Equal(t, "c9", tip.Head, tc.name)
			require.Equal(t, int64(9), tip.HeadNum, tc.name)
			require.Equal(t, tc.from, tip.From, tc.name)
			require.Equal(t, tc.blocks, describe(tip), tc.name)
			require.Equal(t, tc.moreForks, tip.MoreForks, tc.name)
			require.Equal(t, 1, tip.Waiting, tc.name)
		}
	})
}
