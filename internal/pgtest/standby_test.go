package pgtest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMissingStandby checks when NewWithStandby and PauseReplay skip and when they
// fail. It sets environment variables, so it cannot run in parallel.
func TestMissingStandby(t *testing.T) {
	tests := []struct {
		name, ci string
		wantSkip bool
	}{
		{name: "unset outside CI skips", ci: "", wantSkip: true},
		{name: "unset under CI fails", ci: "true"},
	}
	for _, tc := range tests {
		for call, fn := range map[string]func(testing.TB){
			"NewWithStandby": func(tb testing.TB) { NewWithStandby(tb) },
			"PauseReplay":    func(tb testing.TB) { PauseReplay(tb) },
		} {
			t.Run(call+" "+tc.name, func(t *testing.T) {
				t.Setenv("CI", tc.ci)
				t.Setenv(EnvStandbyDSN, "")
				requireGivesUp(t, fn, tc.wantSkip, EnvStandbyDSN+" is not set")
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
