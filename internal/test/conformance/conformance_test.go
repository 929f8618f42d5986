package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// harness is one database the suites run on, and what they must know of it.
type harness struct {
	testdb.Backend
	// Types are the dialect's column types.
	Types testdb.Types
	// SkipCancels, when set, is why the tests that end a context while a statement
	// runs (lib/pq then sends the server a cancel request) are skipped: PgBouncer
	// before 1.19.1 may crash on a cancel request lib/pq sends (pgbouncer#801).
	SkipCancels string
	// notInMain keeps the harness out of TestConformance, the longest suite, where
	// another one takes the same paths: pgx through PgBouncer differs from lib/pq
	// through it in its driver's settings (store/postgres's
	// TestPooledReadsRunTheirOwnStatements) and in cancel requests (the clean-up and
	// promises suites), not in what TestConformance checks.
	notInMain bool
}

// harnesses are the databases the suites run on: a SQLite file through each driver
// (go-sqlite3, modernc.org/sqlite), and Postgres in each way a store reaches it:
// through lib/pq with its statements prepared (the default) and unprepared (for
// connection poolers that lose prepared statements), through pgx's stdlib driver,
// with a hot standby for the reads that may lag, and through PgBouncer in
// transaction mode with each driver, unprepared as a pooler needs. The suites run on
// each, since each takes paths the others never do.
var harnesses = []harness{
	onBackend(testdb.SQLite, false),
	onBackend(testdb.SQLitePureGo, false),
	onBackend(named("prepared", testdb.LibPQ), false),
	onBackend(testdb.Backend{Name: "unprepared", Postgres: true, Driver: postgres.DriverLibPQ, Unprepared: true}, false),
	onBackend(testdb.Pgx, false),
	onBackend(named("standby", testdb.Standby), false),
	onBackend(testdb.Backend{Name: "pgbouncer", Postgres: true, Driver: postgres.DriverLibPQ, Unprepared: true, Pooled: true}, false),
	onBackend(named("pgbouncer-pgx", testdb.PgBouncer), true),
}

func named(name string, b testdb.Backend) testdb.Backend {
	b.Name = name
	return b
}

func onBackend(b testdb.Backend, notInMain bool) harness {
	h := harness{Backend: b, Types: b.Types(), notInMain: notInMain}
	if b.Pooled && b.Driver != postgres.DriverPgx {
		// pgx closes the connection instead of sending a cancel request.
		h.SkipCancels = "PgBouncer 1.18 (the harness's) may crash on lib/pq's cancel requests (pgbouncer#801, fixed in 1.19.1)"
	}
	return h
}

// options are those every harness opens its databases with (MaxConns is
// Postgres's alone).
var options = testdb.Options{MaxConns: 40}

// open returns a new, empty database owned by the test (closed by its cleanup),
// opened with its store package's public Open, as users do: each test has its own
// SQLite file or Postgres schema (internal/test/testdb), so tests run in parallel.
func (h harness) open(tb testing.TB) refset.Database {
	tb.Helper()
	return h.Open(tb, options)
}

// reopen returns a second, independent handle on the same database as db, as
// another process would have (closed by the test's cleanup).
func (h harness) reopen(tb testing.TB, db refset.Database) refset.Database {
	tb.Helper()
	return testdb.PlaceOf(tb, db).Open(tb, options)
}

// TestConformance is the main suite (run_test.go): sets, tokens, hand-overs, holds,
// errors, migrations and races, on every harness but those marked notInMain.
func TestConformance(t *testing.T) { runSuite(t, mainSuite) }

// TestCleanupConformance is the clean-up suite (cleanup_test.go) on every harness.
func TestCleanupConformance(t *testing.T) { runSuite(t, cleanupSuite) }

// TestPromisesConformance (promises_test.go) tries to break refset's one promise as
// a hostile caller would: a hand-over, an Add or Upgrade with commands, and a unit of
// work are one transaction, never half done, whatever the caller's code does (panic,
// end the transaction, pass a pool for a transaction, let its context end), and every
// failure is a typed error that changed nothing. It runs on every harness.
func TestPromisesConformance(t *testing.T) { runSuite(t, promisesSuite) }

// suite is one of the three tests above.
type suite int

const (
	mainSuite suite = iota
	cleanupSuite
	promisesSuite
)

// suiteTest is one test of a suite, run on each harness as a subtest of its name.
type suiteTest struct {
	suite suite
	name  string
	fn    func(t *testing.T, h harness)
}

// suiteTests are every suite's tests.
var suiteTests = []suiteTest{
	{mainSuite, "RoundTripColumnTypes", testRoundTrip},
	{mainSuite, "IDTypes", testIDTypes},
	{mainSuite, "AddDuplicate", testAddDuplicate},
	{mainSuite, "AddAll", testAddAll},
	{mainSuite, "UnknownID", testUnknownID},
	{mainSuite, "ZeroID", testZeroID},
	{mainSuite, "LeaseSharesInstance", testLeaseSharesInstance},
	{mainSuite, "LoadByID", testLoad},
	{mainSuite, "CacheFreesReleasedObjects", testCacheFrees},
	{mainSuite, "ConcurrentMissesLoadOnce", testConcurrentMisses},
	{mainSuite, "ReadsSurviveSchemaChange", testReadsSurviveSchemaChange},
	{mainSuite, "HandOver", testHandOver},
	{mainSuite, "TokenSingleUse", testTokenSingleUse},
	{mainSuite, "DatabaseRefusesDeletingHeld", testRefusesDeletingHeld},
	{mainSuite, "ReferenceToMissingObject", testReferenceToMissing},
	{mainSuite, "ForeignKeyErrorsWhateverTheSQL", testForeignKeyErrorsWhateverTheSQL},
	{mainSuite, "Holds", testHolds},
	{mainSuite, "HoldsRead", testHoldsRead},
	{mainSuite, "CancelledContext", testCancelledContext},
	{mainSuite, "BadIdentifiers", testBadIdentifiers},
	{mainSuite, "SchemaMismatch", testSchemaMismatch},
	{mainSuite, "UnmappedNotNullColumnRefused", testUnmappedNotNull},
	{mainSuite, "UnitOfWork", testUnitOfWork},
	{mainSuite, "PlainCallsJoinTheUnit", testPlainCallsJoinTheUnit},
	{mainSuite, "ReadsInCallersTx", testReadsInCallersTx},
	{mainSuite, "TxFormsKeepCallerTxUsable", testTxFormsKeepCallerTx},
	{mainSuite, "ConcurrentWriters", testConcurrentWriters},
	{mainSuite, "ConcurrentHandOversOfOneToken", testConcurrentComplete},
	{mainSuite, "ReferenceRaceBothWays", testReferenceRaceBothWays},
	{mainSuite, "MigrateTwiceAndConcurrently", testMigrate},
	{mainSuite, "TablesDroppedAndMadeAgain", testTablesDroppedAndMadeAgain},
	{mainSuite, "Closed", testClosed},
	{mainSuite, "CallersPools", testCallersPools},
	{mainSuite, "CallersPoolsClosedFirst", testCallersPoolsClosedFirst},
	{mainSuite, "CloseWhileInUse", testCloseWhileInUse},
	{mainSuite, "TwoDatabasesOnOnePool", testTwoDatabasesOnOnePool},
	{cleanupSuite, "AbandonedForkGoesInOneCall", testAbandonedFork},
	{cleanupSuite, "GracePeriod", testGrace},
	{cleanupSuite, "ExpiringHolds", testExpiringHolds},
	{cleanupSuite, "ExpiryClockStartsAtWrite", testExpiryClockStartsAtWrite},
	{cleanupSuite, "ReReferencedSurvives", testReReferenced},
	{cleanupSuite, "HandOverNeverCollected", testHandOverVersusCollector},
	{cleanupSuite, "InstallTwiceAndAfterNewReference", testInstallAgain},
	{cleanupSuite, "SweepRepairsLostQueue", testSweep},
	{cleanupSuite, "CheckAndWhy", testCheckAndWhy},
	{cleanupSuite, "UnindexedReferenceRefused", testUnindexed},
	{cleanupSuite, "BackgroundRunStopsCleanly", testBackground},
	{cleanupSuite, "SuggestedIndexesAreValidSQL", testSuggestedIndexes},
	{cleanupSuite, "UnfollowedKeysRefused", testUnfollowedKeys},
	{cleanupSuite, "KeyAddedAfterInstallWedgesNothing", testKeyAddedAfterInstall},
	{cleanupSuite, "RefusedObjectWithShortGraceEndsCollect", testRefusedShortGrace},
	{cleanupSuite, "FirstInstallQueuesExistingObjects", testFirstInstallQueuesExisting},
	{cleanupSuite, "FirstInstallEveryIDType", testFirstInstallEveryIDType},
	{cleanupSuite, "FirstInstallBesideWriters", testFirstInstallBesideWriters},
	{cleanupSuite, "HolderTableAddedWhileRunning", testHolderAddedWhileRunning},
	{cleanupSuite, "FollowBesideWriters", testFollowBesideWriters},
	{cleanupSuite, "UndeclaredCascadingKeyReported", testUndeclaredCascade},
	{cleanupSuite, "EndedContextIsAnError", testEndedContext},
	{cleanupSuite, "RunStopsOnClosedDatabase", testRunClosed},
	{cleanupSuite, "RunStopsOnDroppedTables", testRunSchemaGone},
	{cleanupSuite, "RunFailuresAreNeverLost", testRunFailures},
	{cleanupSuite, "RunCallbackPanicLeavesNoTransaction", testRunCallbackPanic},
	{cleanupSuite, "ChainGoesInOneCollect", testChainInOneCollect},
	{cleanupSuite, "ChainStopsAtKeptBlock", testChainStopsAtKeptBlock},
	{cleanupSuite, "ChainAlongTwoEdges", testChainAlongTwoEdges},
	{cleanupSuite, "ChainReReferencedMidCollection", testChainReReferencedMidCollection},
	{cleanupSuite, "CollectedCountedExactly", testCollectedCounted},
	{cleanupSuite, "CollectedCountAfterUpgrade", testCollectedCountAfterUpgrade},
	{cleanupSuite, "CountsPastTheCap", testCountsPastTheCap},
	{promisesSuite, "PanickingCallerCode", testPanics},
	{promisesSuite, "CallerCodeCannotEndTheTransaction", testCannotEndTx},
	{promisesSuite, "PoolIsNotATransaction", testPoolIsNotATx},
	{promisesSuite, "ContextErrors", testContextErrors},
	{promisesSuite, "ErrorsMatchSentinels", testErrorsMatchSentinels},
	{promisesSuite, "Placeholders", testPlaceholders},
	{promisesSuite, "SameMistakeSameSentinel", testSameMistakeSameSentinel},
	{promisesSuite, "FailedCommandSaysWhich", testFailedCommandSaysWhich},
	{promisesSuite, "WrongCountSaysTheCount", testWrongCountSaysTheCount},
	{promisesSuite, "MessagesSayEachThingOnce", testMessagesSayEachThingOnce},
}

// runSuite runs the tests of suite s as parallel subtests of a parallel subtest per
// harness, the suite in parallel with the others: each test has a database of its
// own.
func runSuite(t *testing.T, s suite) {
	t.Parallel()
	for _, h := range harnesses {
		if h.notInMain && s == mainSuite {
			continue
		}
		t.Run(h.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range suiteTests {
				if tc.suite != s {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, h)
				})
			}
		})
	}
}

// sendsCancels marks t as a test that ends contexts while statements run: it is
// skipped where the harness says cancel requests must not be sent.
func (h harness) sendsCancels(t *testing.T) {
	t.Helper()
	if h.SkipCancels != "" {
		t.Skip(h.SkipCancels)
	}
}

// env is one test's database.
type env struct {
	h  harness
	db refset.Database
}

func newEnv(tb testing.TB, h harness) *env {
	tb.Helper()
	return &env{h: h, db: h.open(tb)}
}

// newBlocksEnv is the start of most tests: a fresh env with the blocks set on it,
// and the test's context.
func newBlocksEnv(t *testing.T, h harness) (*env, *refset.RefSet[block, string], context.Context) {
	t.Helper()
	e := newEnv(t, h)
	return e, e.blocks(t), t.Context()
}

// sql rewrites a statement written with ? placeholders and {Text}-style type names
// into the dialect's.
func (e *env) sql(q string) string {
	return e.db.Driver().Rebind(e.h.Types.In(q))
}

// exec runs plain SQL in its own transaction and returns the translated error.
func (e *env) exec(ctx context.Context, q string, args ...any) error {
	return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, e.sql(q), args...)
		return err
	})
}

// mustExec runs plain SQL, the test's own change behind refset's back, and, on a
// database with a replica, waits until the replica shows it: the test's next step,
// a read that may go to the replica, must see the change however far replay lags.
func (e *env) mustExec(tb testing.TB, q string, args ...any) {
	tb.Helper()
	require.NoError(tb, e.exec(context.Background(), q, args...), q)
	e.waitReplica(tb)
}

// waitReplica waits until the database's replica, if it has one, has replayed what
// the primary committed so far.
func (e *env) waitReplica(tb testing.TB) {
	tb.Helper()
	r, ok := e.db.Driver().(refsetdriver.Replicated)
	if !ok || r.Replica() == nil {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for {
		caught, err := r.ReplicaCaughtUp(tb.Context())
		require.NoError(tb, err)
		if caught {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("the replica did not replay the test's change within a minute")
		}
	}
}

func (e *env) count(tb testing.TB, table string, where string, args ...any) int {
	tb.Helper()
	q := "SELECT COUNT(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	require.NoError(tb, e.db.Reader().QueryRowContext(context.Background(), e.sql(q), args...).Scan(&n), q)
	return n
}

// block is the suite's main object: testdb's chained block, as in the RFC.
type block = testdb.Block

// blocks creates the RFC tables and returns a set on them.
func (e *env) blocks(tb testing.TB) *refset.RefSet[block, string] {
	tb.Helper()
	e.createBlocks(tb)
	return refset.New[block, string](openStore[block, string](tb, e, "blocks"))
}

// createBlocks creates the RFC tables only: refset's own tables are not there yet.
func (e *env) createBlocks(tb testing.TB) {
	tb.Helper()
	for _, stmt := range blocksStatements() {
		e.mustExec(tb, stmt)
	}
}

// blocksStatements are the statements of testdb.BlocksSchema, one by one.
func blocksStatements() []string {
	var stmts []string
	for _, stmt := range strings.Split(testdb.BlocksSchema, ";") {
		if strings.TrimSpace(stmt) != "" {
			stmts = append(stmts, stmt)
		}
	}
	return stmts
}

// openStore builds the store of a set on table with the public store.NewStore, the
// way users do: it prepares the store's statements (unless the database was opened
// unprepared), and a store built any other way would leave the prepared paths
// untested.
func openStore[T refset.Identifiable[ID], ID comparable](tb testing.TB, e *env, table string) refset.SetStore[T, ID] {
	tb.Helper()
	s, err := store.NewStore[T, ID](tb.Context(), e.db, store.Config{Table: table})
	require.NoError(tb, err)
	return s
}

func mkBlock(hash string, prev string, height int64) block {
	b := block{Hash: hash, Height: height, Payload: []byte("payload of " + hash)}
	if prev != "" {
		b.Prev = &prev
	}
	return b
}
