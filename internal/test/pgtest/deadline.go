package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
)

// deadlineWait is how long a call held by DeadlinesUnderLock waits before its
// context's deadline passes.
const deadlineWait = 200 * time.Millisecond

// DeadlinesUnderLock runs each call, in a subtest of t named by its key, while a
// transaction of its own on pool holds table's ACCESS EXCLUSIVE lock, with a context
// whose deadline passes while the lock holds the call's statements, and fails the
// subtest unless the call's error matches context.DeadlineExceeded: a statement the
// server cancelled at the deadline (lib/pq reports it as the server's 57014) must
// still say so. The lock is released when the calls are done.
func DeadlinesUnderLock(t *testing.T, pool *sql.DB, table string, calls map[string]func(ctx context.Context) error) {
	t.Helper()
	ctx := t.Context()
	locker, err := pool.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("pgtest: begin the locking transaction: %v", err)
	}
	defer locker.Rollback()
	if _, err := locker.ExecContext(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatalf("pgtest: lock %s: %v", table, err)
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			short, cancel := context.WithTimeout(ctx, deadlineWait)
			defer cancel()
			if err := call(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("held past its deadline, %s returned %v, which does not match context.DeadlineExceeded", name, err)
			}
		})
	}
}
