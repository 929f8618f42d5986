package tokens

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spendBlockedBy starts tx's Spend of 10 to bob, and returns once it waits for a row
// the PostgreSQL backend pid holds: the channel has the Spend's error when it ends.
func spendBlockedBy(t *testing.T, v *Vault, tx string, pid int) <-chan error {
	t.Helper()
	spent := make(chan error, 1)
	go func() {
		_, _, err := v.Spend(context.Background(), tx, []Token{gbp("bob", 10)})
		spent <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := v.drv.Pool().QueryRowContext(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, 5*time.Millisecond, "the spend never waited for the row")
	return spent
}

// A select whose snapshot predates a lock may lock the token's row FOR UPDATE and then
// try to insert its own lock, while the lock's transaction spends the token. The
// spend must wait for the row and the select must lose its race at once (a unique
// violation against the lock), not wait for the spend: that would be a deadlock,
// broken only after deadlock_timeout. The test plays the select by hand, step by step.
func TestSpendDoesNotDeadlockWithStaleSelect(t *testing.T) {
	ctx := t.Context()
	v := openVaults(t, libpqDB, 1, Config{})[0]
	require.True(t, v.fast, "the fast paths run on Postgres")
	issue(t, v, "alice", 10)
	locked, err := v.Select(ctx, "A", "alice", 10, Filter{}, time.Minute)
	require.NoError(t, err)
	require.Len(t, locked, 1)
	token := locked[0].TokenID

	// The stale select: it has locked the token's row, not seeing A's lock.
	conn, err := v.drv.Pool().Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	stale, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = stale.Rollback() }()
	_, err = stale.ExecContext(ctx, `SELECT id FROM tokens WHERE id = $1 FOR UPDATE`, token)
	require.NoError(t, err)
	var stalePID int
	require.NoError(t, stale.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&stalePID))

	spent := spendBlockedBy(t, v, "A", stalePID)

	// The stale select's lock fails at once, against A's lock, still in place. Had the
	// spend deleted that lock first, the insert would wait for the spend: lock_timeout
	// turns such a wait into an error of its own (55P03) long before deadlock_timeout.
	_, err = stale.ExecContext(ctx, `SET LOCAL lock_timeout = '200ms'`)
	require.NoError(t, err)
	_, err = stale.ExecContext(ctx, `INSERT INTO token_locks (token_id, holder, expires_at) VALUES ($1, 'tx:B', now() + interval '1 minute')`, token)
	var pe *pq.Error
	require.True(t, errors.As(err, &pe), "inserting the stale lock: %v", err)
	assert.Equal(t, pq.ErrorCode("23505"), pe.Code, "the stale select must lose its race (unique_violation), not deadlock: %v", err)
	require.NoError(t, stale.Rollback())

	require.NoError(t, <-spent, "the spend must go through once the select gives up")
	total, _, err := v.Balance(ctx, "bob", "GBP")
	require.NoError(t, err)
	assert.EqualValues(t, 10, total)
	audit(t, v)
}

// With postgres.Options.Unprepared (a pooler that keeps no prepared statements),
// payments take the same fast paths, unprepared, and prepare nothing.
func TestPaymentsOnUnpreparedDatabase(t *testing.T) {
	ctx := t.Context()
	db, err := postgres.Open(ctx, refsettest.PostgresDSN(t), postgres.Options{MaxConns: 1, Unprepared: true})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	v, err := Open(ctx, db, Config{})
	require.NoError(t, err)
	issue(t, v, "erin", 4, 6)
	for range 3 {
		require.NoError(t, pay(ctx, v, "erin", "frank", 2))
	}
	var n int
	require.NoError(t, db.Pool().GetContext(ctx, &n, `SELECT count(*) FROM pg_prepared_statements`))
	assert.Zero(t, n, "statements were prepared on the one connection")
	a := audit(t, v)
	assert.Equal(t, int64(10), a.Remaining)
}

// The fast paths' statements are prepared once per connection. A migration that
// changes the type of a column they return makes PostgreSQL refuse them ("cached plan
// must not change result type"); they are prepared again and payments go on.
func TestPaymentsSurviveColumnTypeChange(t *testing.T) {
	ctx := t.Context()
	v := openVaults(t, libpqDB, 1, Config{})[0]
	issue(t, v, "erin", 5, 5, 5, 5)
	require.NoError(t, pay(ctx, v, "erin", "frank", 3))
	_, err := v.drv.Pool().ExecContext(ctx, `ALTER TABLE tokens ALTER COLUMN owner TYPE varchar(200)`)
	require.NoError(t, err)
	for range 4 { // every pooled connection that prepared the statements
		require.NoError(t, pay(ctx, v, "erin", "frank", 1))
	}
	a := audit(t, v)
	assert.Equal(t, int64(20), a.Remaining)
}

// On a vault whose statistics know that nearly every hold is an owner's, the fast
// paths still find their rows by key: a plan made from those statistics reads the
// holds table whole to find one transaction's locks (holder = $1 looks like half the
// table), which is what the two-step spend did, or re-plans the statement on every
// call to avoid it. Every statement of Pay, Select and Spend must leave the tables'
// sequential-scan counters where they were.
func TestFastPathsReadByKey(t *testing.T) {
	ctx := t.Context()
	v := openVaults(t, libpqDB, 1, Config{})[0]
	amounts := make([]int64, 400)
	for i := range amounts {
		amounts[i] = 1 + int64(i%5)
	}
	issue(t, v, "alice", amounts...)
	_, err := v.drv.Pool().ExecContext(ctx, `ANALYZE tokens; ANALYZE token_owners; ANALYZE token_locks; ANALYZE token_history`)
	require.NoError(t, err)

	type counters struct{ seqScans, historyRows int64 }
	read := func() (c counters) {
		t.Helper()
		require.NoError(t, v.drv.Pool().QueryRowContext(ctx, `
			SELECT sum(seq_scan) FILTER (WHERE relname IN ('tokens', 'token_owners', 'token_locks', 'token_history')),
			       sum(n_tup_ins) FILTER (WHERE relname = 'token_history')
			FROM pg_stat_user_tables WHERE schemaname = current_schema()`).Scan(&c.seqScans, &c.historyRows))
		return c
	}
	// Each backend publishes its counters about a second after its last transaction
	// (PostgreSQL 15's idle flush); the history's inserts say when they all have.
	settled := func(historyRows int64) counters {
		t.Helper()
		var c counters
		require.Eventually(t, func() bool {
			c = read()
			return c.historyRows >= historyRows
		}, 30*time.Second, 100*time.Millisecond, "the statistics never showed the payments' history rows")
		return c
	}
	before := settled(int64(len(amounts)))

	created := int64(0)
	for range 12 { // more than the plan cache's five custom plans
		_, out, err := v.Pay(ctx, newTx(), "alice", gbp("bob", 3))
		require.NoError(t, err)
		created += int64(len(out))
		tx := newTx()
		locked, err := v.Select(ctx, tx, "alice", 2, Filter{Identifier: "GBP"}, time.Minute)
		require.NoError(t, err)
		_, out, err = v.Spend(ctx, tx, WithChange(locked, "alice", gbp("carol", 2)))
		require.NoError(t, err)
		created += int64(len(out))
	}
	after := settled(before.historyRows + created)
	assert.Equal(t, before.seqScans, after.seqScans, "the fast paths read tokens, holds or history whole")
}

// A Spend that begins while its locks live and waits for a token's row (another
// transaction holds it) until past their expiry is judged when it spends, not when it
// began: by then its locks are no locks, and it is refused with ErrNothingLocked and
// changes nothing, as a Spend begun after the expiry is. It spent them.
func TestSpendWaitingPastExpiryIsRefused(t *testing.T) {
	for _, b := range []backend{libpqDB, pgxDB} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			v := openVaults(t, b, 1, Config{})[0]
			issue(t, v, "alice", 10)
			tx := newTx()
			locked, expires, err := v.SelectUntil(ctx, tx, "alice", 10, Filter{}, expiringTTL)
			require.NoError(t, err)
			before := readBooks(t, v)

			blocker, err := v.drv.Pool().BeginTx(ctx, nil)
			require.NoError(t, err)
			defer func() { _ = blocker.Rollback() }()
			var blockerPID int
			require.NoError(t, blocker.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&blockerPID))
			_, err = blocker.ExecContext(ctx, `SELECT id FROM tokens WHERE id = $1 FOR UPDATE`, locked[0].TokenID)
			require.NoError(t, err)

			spent := spendBlockedBy(t, v, tx, blockerPID)
			require.True(t, dbClock(t, v).Before(expires), "the lock expired before the spend began: the test proves nothing")
			waitExpired(t, v, "alice")
			require.NoError(t, blocker.Rollback())

			err = <-spent
			require.ErrorIs(t, err, ErrNothingLocked, "a spend that waited past its locks' expiry")
			t.Logf("refused: %v", err)
			after := readBooks(t, v)
			before.Balances[1], after.Balances[1] = 0, 0 // alice's unlocked: the lock expired meanwhile
			require.Equal(t, before, after, "the refused spend changed the books")
			audit(t, v)
		})
	}
}
