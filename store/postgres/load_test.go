package postgres

import (
	"runtime"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Load reads an object by its ID with one statement, where Upgrade and Get send two,
// and with none once it is cached: counted at pgx, under database/sql and refset.
func TestLoadSendsOneStatement(t *testing.T) {
	ctx := t.Context()
	db, tracer := tracedPgx(t)
	e := newHandOverEnv(t, db)
	for _, id := range []string{"a", "b"} {
		_, err := e.set.Add(ctx, block{Hash: id, Height: 1})
		require.NoError(t, err)
	}
	var keep []refset.Lease[block]
	for _, tc := range []struct {
		name    string
		read    func() (refset.Lease[block], error)
		want    int // statements sent
		wantErr error
	}{
		{"Load, a miss", func() (refset.Lease[block], error) { return e.set.Load(ctx, "a") }, 1, nil},
		{"Load, a hit", func() (refset.Lease[block], error) { return e.set.Load(ctx, "a") }, 0, nil},
		{"Upgrade and Get, a miss", func() (refset.Lease[block], error) {
			tok, err := e.set.Upgrade(ctx, "b")
			if err != nil {
				return refset.Lease[block]{}, err
			}
			return e.set.Get(ctx, tok)
		}, 2, nil},
		{"Load, not stored", func() (refset.Lease[block], error) { return e.set.Load(ctx, "nope") }, 1, refset.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tracer.reset()
			lease, err := tc.read()
			batches, alone := tracer.reset()
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				keep = append(keep, lease)
			}
			assert.Empty(t, batches)
			assert.Len(t, alone, tc.want, "%q", alone)
		})
	}
	runtime.KeepAlive(keep)
}
