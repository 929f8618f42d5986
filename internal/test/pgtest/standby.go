package pgtest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// EnvStandbyDSN names the environment variable holding the lib/pq DSN of a hot
// standby streaming from the server in EnvDSN. scripts/test.sh starts one beside its
// throwaway cluster.
const EnvStandbyDSN = "REFSET_TEST_POSTGRES_STANDBY"

// replayTimeout bounds the wait for the standby to replay a schema: normally
// milliseconds, but as long as another test keeps replay paused (PauseReplay).
const replayTimeout = 2 * time.Minute

// pauseLockKey is the advisory lock PauseReplay takes on the primary, so that one
// test at a time, across every test process, pauses the standby.
const pauseLockKey = 7262_0001

// NewWithStandby is New, and the DSN of the same schema on the standby
// (EnvStandbyDSN), once the standby has replayed its creation.
//
// Without EnvStandbyDSN it skips tb, or fails it when CI=true: the reads from a
// replica would otherwise go untested. A standby that does not answer, or does not
// replay the schema within two minutes, fails tb.
func NewWithStandby(tb testing.TB) (primary, standby, schema string) {
	tb.Helper()
	base := standbyBaseDSN(tb)
	primary, schema = New(tb)
	db := openAdmin(tb, base, EnvStandbyDSN)
	defer db.Close()
	ctx, cancel := context.WithTimeout(tb.Context(), replayTimeout)
	defer cancel()
	for {
		var exists bool
		err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists)
		if err == nil && exists {
			break
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			var state string
			_ = db.QueryRowContext(context.Background(), `SELECT pg_get_wal_replay_pause_state()`).Scan(&state)
			tb.Fatalf("pgtest: the standby in %s has not replayed schema %s (replay: %s): %v", EnvStandbyDSN, schema, state, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	standby, err := withSearchPath(base, schema)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return primary, standby, schema
}

// PauseReplay pauses WAL replay on the standby until resume is called or tb ends,
// whichever comes first: what the primary commits meanwhile is not on the standby,
// a lag a test can count on. Replay is the whole standby's, so pauses are taken one
// at a time across every test process (an advisory lock on the primary), and a
// schema created meanwhile does not reach the standby: NewWithStandby waits. Keep
// pauses short.
func PauseReplay(tb testing.TB) (resume func()) {
	tb.Helper()
	standbyDSN := standbyBaseDSN(tb)
	primary := openAdmin(tb, baseDSN(tb), EnvDSN)
	standby := openAdmin(tb, standbyDSN, EnvStandbyDSN)
	ctx, cancel := context.WithTimeout(tb.Context(), replayTimeout)
	defer cancel()
	// A session-level advisory lock lives as long as its connection: keep one.
	lock, err := primary.Conn(ctx)
	if err == nil {
		_, err = lock.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pauseLockKey)
	}
	if err != nil {
		primary.Close()
		standby.Close()
		tb.Fatalf("pgtest: waiting for other tests to resume replay: %v", err)
	}
	if _, err := standby.ExecContext(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		lock.Close()
		primary.Close()
		standby.Close()
		tb.Fatalf("pgtest: pausing replay on the standby: %v", err)
	}
	resume = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		_, err := standby.ExecContext(ctx, `SELECT pg_wal_replay_resume()`)
		_, _ = lock.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, pauseLockKey) // closing the pool ends it anyway
		lock.Close()
		primary.Close()
		standby.Close()
		if err != nil {
			tb.Errorf("pgtest: resuming replay on the standby: %v", err)
		}
	})
	tb.Cleanup(resume)
	return resume
}

// standbyBaseDSN returns the standby's DSN from the environment (see [envDSN]).
func standbyBaseDSN(tb testing.TB) string {
	tb.Helper()
	return envDSN(tb, EnvStandbyDSN, "run make test (or set it to a lib/pq DSN of a hot standby of the server in "+EnvDSN+")")
}
