package pgtest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMissingStandby checks when NewWithStandby and PauseReplay skip and when they
// fail, and HADSN, the HA cluster's: under CI, internal/test/hatest would otherwise pass
// untried. It sets environment variables, so it cannot run in parallel.
func TestMissingStandby(t *testing.T) {
	tests := []struct {
		name, ci string
		wantSkip bool
	}{
		{name: "unset outside CI skips", ci: "", wantSkip: true},
		{name: "unset under CI fails", ci: "true"},
	}
	type call struct {
		env string
		fn  func(testing.TB)
	}
	for _, tc := range tests {
		for name, c := range map[string]call{
			"NewWithStandby": {EnvStandbyDSN, func(tb testing.TB) { NewWithStandby(tb) }},
			"PauseReplay":    {EnvStandbyDSN, func(tb testing.TB) { PauseReplay(tb) }},
			"HADSN":          {EnvHADSN, func(tb testing.TB) { HADSN(tb) }},
		} {
			t.Run(name+" "+tc.name, func(t *testing.T) {
				t.Setenv("CI", tc.ci)
				t.Setenv(c.env, "")
				requireGivesUp(t, c.fn, tc.wantSkip, c.env+" is not set")
			})
		}
	}
}

// TestStandbyReplaysSchema: the schema NewWithStandby made is on the standby, a
// table made in it shows there once replayed, and not while replay is paused.
func TestStandbyReplaysSchema(t *testing.T) {
	primaryDSN, standbyDSN, schema := NewWithStandby(t)
	primary, standby := openAdmin(t, primaryDSN, EnvDSN), openAdmin(t, standbyDSN, EnvStandbyDSN)
	t.Cleanup(func() { primary.Close(); standby.Close() })
	ctx := t.Context()
	var where string
	require.NoError(t, standby.QueryRowContext(ctx, `SELECT (current_schemas(false))[1]`).Scan(&where))
	require.Equal(t, schema, where)

	resume := PauseReplay(t)
	_, err := primary.ExecContext(ctx, `CREATE TABLE t (v text)`)
	require.NoError(t, err)
	require.False(t, tableOn(ctx, t, standby), "paused")
	resume()
	require.Eventually(t, func() bool { return tableOn(ctx, t, standby) }, replayTimeout, 10*time.Millisecond, "resumed")
}

func tableOn(ctx context.Context, t *testing.T, db *sql.DB) bool {
	var found bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT to_regclass('t') IS NOT NULL`).Scan(&found))
	return found
}
