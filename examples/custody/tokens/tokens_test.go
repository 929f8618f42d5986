package tokens

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openVaults opens n vaults on one fresh database of b, each with its own
// connection pool, as n replicas of a service would.
func openVaults(tb testing.TB, b backend, n int, cfg Config) []*Vault {
	tb.Helper()
	where := b.new(tb)
	vs := make([]*Vault, n)
	for i := range vs {
		vs[i] = openVault(tb, where.open(tb, 4), cfg)
	}
	return vs
}

// openVault opens a vault on db.
func openVault(tb testing.TB, db refset.Database, cfg Config) *Vault {
	tb.Helper()
	v, err := Open(context.Background(), db, cfg)
	require.NoError(tb, err)
	return v
}

// waiting vaults wait up to a minute for funds locked by others.
var waiting = Config{LockWait: time.Minute}

func each(t *testing.T, replicas int, cfg Config, fn func(t *testing.T, vs []*Vault)) {
	eachBackend(t, allBackends(), func(t *testing.T, b backend) {
		vs := openVaults(t, b, replicas, cfg)
		fn(t, vs)
		audit(t, vs[0])
	})
}

// audit checks conservation and every invariant after a test.
func audit(t *testing.T, v *Vault) Audit {
	t.Helper()
	a, err := v.Audit(context.Background())
	require.NoError(t, err)
	assert.True(t, a.Balanced(), "books: %+v", a)
	return a
}

func gbp(owner string, amount int64) Token {
	return Token{Owner: owner, Type: "fiat", Identifier: "GBP", Issuer: "bank", Notary: "notary", Amount: amount}
}

var txSeq atomic.Int64

func newTx() string { return fmt.Sprintf("tx-%d", txSeq.Add(1)) }

// pay selects amount of from's GBP for a new transaction (waiting, as the vaults are
// configured to, while funds are locked by others) and spends it to `to`, the change
// back to from.
func pay(ctx context.Context, v *Vault, from, to string, amount int64) error {
	return payTx(ctx, v, newTx(), from, to, amount)
}

func issue(t *testing.T, v *Vault, owner string, amounts ...int64) {
	t.Helper()
	var toks []Token
	for _, a := range amounts {
		toks = append(toks, gbp(owner, a))
	}
	_, err := v.Issue(t.Context(), newTx(), toks...)
	require.NoError(t, err)
}

func repeat(n int, amount int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = amount
	}
	return out
}

// logRaces logs the replicas' lock attempts and the races they lost.
func logRaces(t *testing.T, vs []*Vault) {
	t.Helper()
	var st LockStats
	for _, v := range vs {
		st.Attempts += v.Stats().Attempts
		st.LostRaces += v.Stats().LostRaces
	}
	t.Logf("lock attempts %d, lost races %d", st.Attempts, st.LostRaces)
}

// run starts fn on every replica, each `each` times, concurrently, and collects the
// errors.
func run(vs []*Vault, each int, fn func(v *Vault) error) []error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, v := range vs {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := fn(v)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return errs
}

func TestTwentyReplicasOfFive(t *testing.T) {
	each(t, 20, waiting, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "alice", repeat(100, 1)...)
		for _, err := range run(vs, 1, func(v *Vault) error { return pay(t.Context(), v, "alice", "bob", 5) }) {
			require.NoError(t, err)
		}
		total, _, err := vs[0].Balance(t.Context(), "bob", "GBP")
		require.NoError(t, err)
		assert.Equal(t, int64(100), total)
	})
}

func TestOneTokenSpentThroughChange(t *testing.T) {
	each(t, 10, waiting, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "alice", 100)
		for _, err := range run(vs, 10, func(v *Vault) error { return pay(t.Context(), v, "alice", "bob", 1) }) {
			require.NoError(t, err)
		}
		alice, _, err := vs[0].Balance(t.Context(), "alice", "GBP")
		require.NoError(t, err)
		bob, _, err := vs[0].Balance(t.Context(), "bob", "GBP")
		require.NoError(t, err)
		assert.Equal(t, int64(0), alice)
		assert.Equal(t, int64(100), bob)
		logRaces(t, vs)
	})
}

// 50 tokens of 2 (100 in all), 40 requests of 3: 33 can be paid, 7 cannot, 1 is left.
func TestFailuresAreThoseTheArithmeticForces(t *testing.T) {
	each(t, 10, waiting, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "alice", repeat(50, 2)...)
		var paid, refused int
		for _, err := range run(vs, 4, func(v *Vault) error { return pay(t.Context(), v, "alice", "bob", 3) }) {
			switch {
			case err == nil:
				paid++
			case errors.Is(err, ErrInsufficientFunds):
				refused++
			default:
				t.Errorf("unexpected: %v", err)
			}
		}
		assert.Equal(t, 33, paid)
		assert.Equal(t, 7, refused)
		alice, _, err := vs[0].Balance(t.Context(), "alice", "GBP")
		require.NoError(t, err)
		assert.Equal(t, int64(1), alice)
	})
}

// Two tokens, two requesters each needing both: one wins within the retry bound.
func TestNoLivelock(t *testing.T) {
	each(t, 2, Config{}, func(t *testing.T, vs []*Vault) {
		for round := range 20 {
			owner := fmt.Sprintf("owner-%d", round)
			issue(t, vs[0], owner, 1, 1)
			var wins, locked atomic.Int64
			run(vs, 1, func(v *Vault) error {
				tx := newTx()
				_, err := v.Select(t.Context(), tx, owner, 2, Filter{}, time.Minute)
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, ErrLocked):
					locked.Add(1)
				default:
					t.Errorf("round %d: %v", round, err)
				}
				return err
			})
			assert.Equal(t, int64(1), wins.Load(), "round %d: exactly one requester gets both tokens", round)
			assert.Equal(t, int64(1), locked.Load(), "round %d: the other is told they are locked", round)
		}
	})
}

func TestErrorsAndRelease(t *testing.T) {
	each(t, 2, Config{}, func(t *testing.T, vs []*Vault) {
		ctx := t.Context()
		a, b := vs[0], vs[1]
		issue(t, a, "carol", 5, 5)
		_, err := a.Select(ctx, newTx(), "carol", 11, Filter{}, time.Minute)
		require.ErrorIs(t, err, ErrInsufficientFunds)

		tx := newTx()
		locked, err := a.Select(ctx, tx, "carol", 6, Filter{}, time.Minute)
		require.NoError(t, err)
		assert.Len(t, locked, 2)
		_, err = b.Select(ctx, newTx(), "carol", 1, Filter{}, time.Minute)
		require.ErrorIs(t, err, ErrLocked, "enough funds, all locked by another transaction")
		total, unlocked, err := b.Balance(ctx, "carol", "GBP")
		require.NoError(t, err)
		assert.Equal(t, []int64{10, 0}, []int64{total, unlocked})

		// An unbalanced spend changes nothing; the locks stay.
		_, _, err = a.Spend(ctx, tx, []Token{gbp("dave", 9)})
		require.ErrorIs(t, err, ErrUnbalanced)
		// The right total of the wrong kinds does not balance either.
		btc := gbp("dave", 4)
		btc.Identifier = "BTC"
		_, _, err = a.Spend(ctx, tx, []Token{gbp("dave", 6), btc})
		require.ErrorIs(t, err, ErrUnbalanced)
		_, _, err = a.Spend(ctx, tx, []Token{{Owner: "dave", Identifier: "GBP", Amount: -10}})
		require.ErrorIs(t, err, ErrInvalid)
		_, unlocked, _ = b.Balance(ctx, "carol", "GBP")
		assert.Zero(t, unlocked)

		n, err := b.Release(ctx, tx)
		require.NoError(t, err)
		assert.Equal(t, int64(2), n, "released by another replica: the locks are in the database")
		_, _, err = a.Spend(ctx, tx, []Token{gbp("dave", 10)})
		require.ErrorIs(t, err, ErrNothingLocked)

		// Filters and predicates.
		_, err = a.Issue(ctx, newTx(), Token{Owner: "carol", Type: "crypto", Identifier: "BTC", Issuer: "mint", Notary: "notary", Amount: 3})
		require.NoError(t, err)
		_, err = a.Select(ctx, newTx(), "carol", 3, Filter{Identifier: "BTC", Issuer: "other"}, time.Minute)
		require.ErrorIs(t, err, ErrInsufficientFunds)
		got, err := a.Select(ctx, newTx(), "carol", 5, Filter{Predicate: func(t Token) bool { return t.Amount == 5 }}, time.Minute)
		require.NoError(t, err)
		assert.Len(t, got, 1)
		assert.Equal(t, int64(5), got[0].Amount)

		for _, bad := range []struct {
			tx, owner string
			amount    int64
		}{{"", "carol", 1}, {"t", "", 1}, {"t", "carol", 0}} {
			_, err := a.Select(ctx, bad.tx, bad.owner, bad.amount, Filter{}, time.Minute)
			require.ErrorIs(t, err, ErrInvalid)
		}
	})
}

// A lock lives in the database: another process sees it; it expires by the
// database's clock, and then another transaction may take the token, after which the
// first transaction's unlock does nothing to the new lock.
func TestLockSurvivesRestartAndExpires(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx := t.Context()
		v := vs[0]
		issue(t, v, "erin", 7)
		first := newTx()
		// Long enough for the reopen below on a busy machine: with 300 ms the lock
		// sometimes expired before the new vault asked for the tokens.
		_, err := v.Select(ctx, first, "erin", 7, Filter{}, 2*time.Second)
		require.NoError(t, err)

		// "A new process": a vault on a new connection to the same database sees the lock.
		restarted := reopen(t, v)
		_, err = restarted.Select(ctx, newTx(), "erin", 7, Filter{}, time.Minute)
		require.ErrorIs(t, err, ErrLocked)

		second := newTx()
		require.Eventually(t, func() bool {
			_, err := restarted.Select(ctx, second, "erin", 7, Filter{}, time.Minute)
			return err == nil
		}, 10*time.Second, 20*time.Millisecond, "the lock expires")

		lostLocks(t, v, first)
		_, _, err = restarted.Spend(ctx, second, []Token{gbp("frank", 7)})
		require.NoError(t, err)
	})
}

// Expired locks that no Select takes over are removed by clean-up.
func TestCleanupRemovesExpiredLocks(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		ctx := t.Context()
		v := vs[0]
		issue(t, v, "gina", 1, 2, 3)
		_, err := v.Select(ctx, newTx(), "gina", 6, Filter{}, 50*time.Millisecond)
		require.NoError(t, err)
		var expired int64
		require.Eventually(t, func() bool {
			s, err := v.Collect(ctx)
			require.NoError(t, err)
			expired += s.HoldsExpired
			return expired == 3
		}, 10*time.Second, 20*time.Millisecond)
		total, unlocked, err := v.Balance(ctx, "gina", "GBP")
		require.NoError(t, err)
		assert.Equal(t, []int64{6, 6}, []int64{total, unlocked}, "the tokens survive, selectable again")
	})
}

// reopen opens a new vault, on new connections, on the database v uses: what a
// restarted process would have.
func reopen(t *testing.T, v *Vault) *Vault {
	t.Helper()
	return openVault(t, placeOf(t, v.db).open(t, 4), Config{})
}

// Issuing more tokens than one statement can carry parameters for.
func TestIssueMany(t *testing.T) {
	each(t, 1, Config{}, func(t *testing.T, vs []*Vault) {
		issue(t, vs[0], "hank", repeat(20_000, 1)...)
		total, unlocked, err := vs[0].Balance(t.Context(), "hank", "GBP")
		require.NoError(t, err)
		assert.Equal(t, []int64{20_000, 20_000}, []int64{total, unlocked})
	})
}

// Audit must catch books that were changed behind custody's back: value created from
// nothing, value lost, a token spent yet present. Each case tampers with the tables
// directly after a few honest payments.
func TestAuditCatchesBrokenBooks(t *testing.T) {
	cases := []struct {
		name   string
		tamper []string // statements with ? placeholders; ? is an unspent token's ID
		check  func(t *testing.T, a Audit)
	}{
		{"value from nothing", []string{
			`INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount) VALUES ('forged', 'mallory', 'fiat', 'GBP', 'bank', 'notary', 50)`,
			`INSERT INTO token_owners (token_id) VALUES ('forged')`,
			`INSERT INTO token_history (token_id, owner, identifier, amount, created_by) VALUES ('forged', 'mallory', 'GBP', 50, 'forger')`,
		}, func(t *testing.T, a Audit) {
			assert.Equal(t, a.Spent+a.Remaining, a.Created, "each token is still spent or unspent")
			assert.Equal(t, a.Issued+50, a.Remaining)
			assert.EqualValues(t, 1, a.Unconserved)
		}},
		{"value lost", []string{
			`DELETE FROM token_owners WHERE token_id = ?`,
			`DELETE FROM tokens WHERE id = ?`,
		}, func(t *testing.T, a Audit) {
			assert.NotEqual(t, a.Created, a.Spent+a.Remaining)
			assert.EqualValues(t, 1, a.Unconserved)
		}},
		{"spent yet present", []string{
			`UPDATE token_history SET spent_by = 'ghost' WHERE token_id = ?`,
		}, func(t *testing.T, a Audit) {
			assert.EqualValues(t, 1, a.SpentButPresent)
		}},
	}
	for _, b := range allBackends() {
		for _, c := range cases {
			t.Run(b.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				v := openVaults(t, b, 1, Config{})[0]
				issue(t, v, "alice", 10, 20, 30)
				require.NoError(t, pay(ctx, v, "alice", "bob", 15))
				a, err := v.Audit(ctx)
				require.NoError(t, err)
				require.True(t, a.Balanced(), "honest books: %+v", a)
				assert.EqualValues(t, 60, a.Issued)
				assert.EqualValues(t, 60, a.Remaining)

				var victim string
				require.NoError(t, v.db.Reader().QueryRowContext(ctx, `SELECT id FROM tokens WHERE owner = 'bob'`).Scan(&victim))
				require.NoError(t, refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
					for _, stmt := range c.tamper {
						var args []any
						if strings.Contains(stmt, "?") {
							args = append(args, victim)
						}
						if _, err := tx.ExecContext(ctx, v.sql(stmt), args...); err != nil {
							return err
						}
					}
					return nil
				}))
				a, err = v.Audit(ctx)
				require.NoError(t, err)
				assert.False(t, a.Balanced(), "tampered books pass: %+v", a)
				c.check(t, a)
			})
		}
	}
}

// Books kept before history recorded issues: the migration that adds the column marks
// the rows of transactions that created tokens but spent none, and the books balance.
func TestIssuedBackfill(t *testing.T) {
	eachBackend(t, allBackends(), func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 10, 20, 30)
		issue(t, v, "bob", 5)
		require.NoError(t, pay(ctx, v, "alice", "bob", 15))
		require.NoError(t, pay(ctx, v, "bob", "carol", 7))

		file := map[bool]string{false: "sql/sqlite/tables/0002_issued.sql", true: "sql/postgres/tables/0003_issued.sql"}[b.postgres]
		text, err := migrations.ReadFile(file)
		require.NoError(t, err)
		_, alter, ok := strings.Cut(string(text), "ALTER TABLE")
		require.True(t, ok, "%s: no ALTER TABLE", file)
		_, backfill, ok := strings.Cut(alter, ";")
		require.True(t, ok, "%s: no statement after the ALTER TABLE", file)
		require.NoError(t, refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE token_history SET issued = false`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, backfill)
			return err
		}))
		a := audit(t, v)
		assert.EqualValues(t, 65, a.Issued)
	})
}

// On Postgres a payment gives clean-up nothing to review: the spent tokens are deleted
// by the statement that deletes their holds, and the outputs are held from the
// statement that creates them. The queue holds only what was issued (Issue adds the
// tokens, then their holds), and Collect deletes none of it.
func TestPaymentsLeaveNothingToReview(t *testing.T) {
	vs := openVaults(t, libpqDB, 1, Config{Grace: time.Millisecond})
	v, ctx := vs[0], t.Context()
	issue(t, v, "erin", 4, 6)
	queued := func() (n int) {
		t.Helper()
		require.NoError(t, v.drv.Pool().QueryRowContext(ctx, `SELECT count(*) FROM tokens_review`).Scan(&n))
		return n
	}
	before := queued()
	for range 5 {
		require.NoError(t, pay(ctx, v, "erin", "frank", 1))
		require.NoError(t, pay(ctx, v, "frank", "erin", 1))
	}
	assert.Equal(t, before, queued(), "payments queued tokens for review")
	time.Sleep(10 * time.Millisecond) // the issued tokens' grace
	stats, err := v.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(before), stats.Reviewed, "the issued tokens were reviewed")
	assert.Zero(t, queued())
	a := audit(t, v)
	assert.Equal(t, int64(10), a.Remaining, "clean-up collected nothing held")
}

// Custody kept its owners' holds and its locks in the tokens set's holds table before
// it had holder tables of its own: on such a database the locks migration moves them,
// so owners keep their tokens and a transaction its locks, which it can still spend.
func TestUpgradeMovesHolds(t *testing.T) {
	eachBackend(t, allBackends(), func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "olga", 1, 2, 3)
		tx := newTx()
		locked, err := v.Select(ctx, tx, "olga", 6, Filter{}, time.Minute)
		require.NoError(t, err)
		// The books as custody kept them before its holder tables.
		require.NoError(t, refset.InTx(ctx, v.db, func(ctx context.Context, q refset.Tx) error {
			for _, stmt := range []string{
				`INSERT INTO tokens_holds (holder, object_id) SELECT 'owner', token_id FROM token_owners`,
				`INSERT INTO tokens_holds (holder, object_id, expires_at) SELECT holder, token_id, expires_at FROM token_locks`,
				`DELETE FROM token_locks`,
				`DELETE FROM token_owners`,
			} {
				if _, err := q.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
			return v.drv.SchemaSQL().SetVersion(ctx, q, "custody-locks", 1)
		}))

		upgraded := reopen(t, v)
		total, unlocked, err := upgraded.Balance(ctx, "olga", "GBP")
		require.NoError(t, err)
		assert.Equal(t, []int64{6, 0}, []int64{total, unlocked}, "the owner's tokens, all locked")
		var left int
		require.NoError(t, v.db.Reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens_holds`).Scan(&left))
		assert.Zero(t, left, "holds left in the set's holds table")
		spent, _, err := upgraded.Spend(ctx, tx, []Token{gbp("oscar", 6)})
		require.NoError(t, err)
		assert.ElementsMatch(t, locked, spent)
		audit(t, upgraded)
	})
}

// A lock belongs to its token (token_locks' key cascades): the database refuses a lock
// on no token, and a token that goes, here deleted behind custody's back, takes its
// lock with it, so no lock ever names a token that is not there.
func TestLocksBelongToTheirTokens(t *testing.T) {
	eachBackend(t, allBackends(), func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		issue(t, v, "alice", 10)
		locked, err := v.Select(ctx, newTx(), "alice", 10, Filter{}, time.Minute)
		require.NoError(t, err)
		require.Len(t, locked, 1)

		err = refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO token_locks (token_id, holder, expires_at)
				SELECT 'no such token', 'tx:forged', expires_at FROM token_locks`)
			return err
		})
		require.Error(t, err, "a lock on no token was stored")

		require.NoError(t, refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
			for _, stmt := range []string{`DELETE FROM token_owners WHERE token_id = ?`, `DELETE FROM tokens WHERE id = ?`} {
				if _, err := tx.ExecContext(ctx, v.sql(stmt), locked[0].TokenID); err != nil {
					return err
				}
			}
			return nil
		}))
		var locks int
		require.NoError(t, v.db.Reader().QueryRowContext(ctx, `SELECT count(*) FROM token_locks`).Scan(&locks))
		assert.Zero(t, locks, "the deleted token's lock is still there")
	})
}

// Open migrates with refset's migrator, in the order custody's migrations need each
// other: its tables, the tokens set's, its locks'. A database it opened is at the
// versions that migrator needs (Validate), a second migration runs nothing, and the
// record holds each component.
func TestOpenMigrates(t *testing.T) {
	eachBackend(t, allBackends(), func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		m, err := v.migrator()
		require.NoError(t, err)
		require.NoError(t, m.Validate(ctx))
		res, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Empty(t, res.Steps, "a second migration ran %s", res)
		for _, c := range []string{"core", "custody-tables", "set:tokens", "custody-locks"} {
			version, err := v.drv.SchemaSQL().Version(ctx, v.db.Reader(), c)
			require.NoError(t, err)
			assert.Positive(t, version, "%s recorded", c)
		}
	})
}
