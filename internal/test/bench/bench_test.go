package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
)

// block is the benchmarks' object: testdb's chained block, with a small payload.
type block = testdb.Block

// payload is every block's payload.
var payload = func() []byte {
	p := make([]byte, 100)
	for i := range p {
		p[i] = byte(i * 7)
	}
	return p
}()

// The statements, written with ? placeholders (rewritten for Postgres by env.q).
// insertSQL and selectSQL are, byte for byte, what the store runs for this table.
const (
	schemaSQL  = testdb.BlocksSchema
	insertSQL  = `INSERT INTO "blocks" ("id", "prev", "height", "payload") VALUES (?, ?, ?, ?)`
	selectSQL  = `SELECT "id", "prev", "height", "payload" FROM "blocks" WHERE "id" = ?`
	releaseSQL = `DELETE FROM pending WHERE block_id = ?`
	acquireSQL = `INSERT INTO heads (block_id) VALUES (?)`
)

// missPool is how many rows BenchmarkGetMiss preloads; it adds more (before the
// timer) if a run needs more IDs than are left unread.
const missPool = 200_000

// dialect is what differs between the databases: how one is opened, its column
// types and its placeholders.
type dialect struct {
	name   string
	types  testdb.Types
	dollar bool // $1, $2, ... instead of ?
	open   func(tb testing.TB, d dialect) *env
}

// The databases every benchmark runs on, by sub-benchmark name. SQLite and
// PostgreSQL run once per driver refset supports; go-sqlite3's and lib/pq's runs keep
// the names "sqlite" and "postgres" they had before the other drivers were measured,
// so that earlier figures stay comparable.
const (
	onSQLite       = "sqlite"
	onSQLitePureGo = "sqlite-purego" // modernc.org/sqlite
	onLibPQ        = "postgres"
	onPgx          = "pgx"
)

var databases = []string{onSQLite, onSQLitePureGo, onLibPQ, onPgx}

// sqliteBackends are the SQLite databases in databases, by name (testdb links both
// drivers).
var sqliteBackends = map[string]testdb.Backend{onSQLite: testdb.SQLite, onSQLitePureGo: testdb.SQLitePureGo}

// pgDrivers is the database/sql driver of each PostgreSQL database in databases.
var pgDrivers = map[string]string{onLibPQ: postgres.DriverLibPQ, onPgx: postgres.DriverPgx}

var dialects = []dialect{
	{name: onSQLite, types: testdb.SQLite.Types(), open: openSQLite},
	{name: onSQLitePureGo, types: testdb.SQLitePureGo.Types(), open: openSQLite},
	{name: onLibPQ, types: testdb.LibPQ.Types(), dollar: true, open: openPostgres},
	{name: onPgx, types: testdb.Pgx.Types(), dollar: true, open: openPostgres},
}

// env is one benchmark's database, shared by its refset and sqlx sides.
type env struct {
	d      dialect
	close  func() error
	writer *sqlx.DB // where refset runs its write transactions
	reader *sqlx.DB // where refset reads outside a transaction
	store  refset.SetStore[block, string]

	height int64 // height of the newest block; IDs are made from it

	// grown: the tables were analyzed when the env opened and have grown past those
	// statistics since (autovacuum off on them, so they stay stale); otherwise they
	// are analyzed once each side's setup rows are in, just before it is timed.
	grown bool
}

// grownBy is how many blocks a grown env stores after its statistics were taken: far
// more than the genesis block they were taken on.
const grownBy = 100_000

// settle gives the tables the statistics of the env's kind, once the rows of a
// measurement's setup are in: fresh ones, as autovacuum gives a table in service
// (ANALYZE), unless the env is grown, whose statistics stay those of the empty tables.
func (e *env) settle(tb testing.TB) {
	tb.Helper()
	if !e.grown {
		analyzeTables(tb, e.writer, e.d.dollar)
	}
}

// grow makes e a grown env: its tables analyzed while they hold the genesis block
// only, autovacuum kept off them (Postgres), then grownBy blocks stored.
func (e *env) grow(tb testing.TB) {
	tb.Helper()
	e.grown = true
	if e.d.dollar {
		for _, table := range []string{"blocks", "pending", "heads"} {
			_, err := e.writer.ExecContext(context.Background(), `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`)
			must(tb, err)
		}
	}
	analyzeTables(tb, e.writer, e.d.dollar)
	e.insert(tb, e.newBlocks(grownBy), false)
}

// analyzeTables updates the planner's statistics of every table in the connection's
// current schema (Postgres, pg set) or database (SQLite, sqlite_stat1): on Postgres a
// bare ANALYZE would go through every table of the shared server, other schemas'
// and pgbench's too.
func analyzeTables(tb testing.TB, db refset.Querier, pg bool) {
	tb.Helper()
	if pg {
		pgtest.AnalyzeSchema(tb, db)
		return
	}
	_, err := db.ExecContext(context.Background(), `ANALYZE`)
	must(tb, err)
}

func openSQLite(tb testing.TB, d dialect) *env {
	tb.Helper()
	ctx := context.Background()
	db := sqliteBackends[d.name].Open(tb, testdb.Options{}).(*sqlite.DB)
	e := &env{close: db.Close, writer: db.Writer(), reader: db.Readers()}
	e.setUp(tb, d, func() (refset.SetStore[block, string], error) {
		return store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	})
	return e
}

func openPostgres(tb testing.TB, d dialect) *env {
	tb.Helper()
	ctx := context.Background()
	db, pool := openPool(tb, d.name)
	e := &env{close: func() error { return errors.Join(db.Close(), pool.Close()) }, writer: pool, reader: pool}
	e.setUp(tb, d, func() (refset.SetStore[block, string], error) {
		return store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	})
	return e
}

// openPool opens a pool of its own on a fresh schema through the driver of database
// (onLibPQ or onPgx), as a user with a pool of their own would, and hands it to
// refset with postgres.New: the raw side runs on that pool and the refset side on
// the same connections, so each ratio compares the same driver with itself, and the
// stores' prepared statements are measured on a pool that is not refset's. The pool
// is sized as postgres.Open would size it, so figures stay comparable with runs made
// through Open. A lib/pq pool is opened with postgres.NewConnector, as New requires.
func openPool(tb testing.TB, database string) (*postgres.DB, *sqlx.DB) {
	tb.Helper()
	ctx := context.Background()
	var pool *sqlx.DB
	if driver := pgDrivers[database]; driver == postgres.DriverLibPQ {
		connector, err := postgres.NewConnector(pgtest.DSN(tb))
		must(tb, err)
		pool = sqlx.NewDb(sql.OpenDB(connector), driver)
	} else {
		var err error
		pool, err = sqlx.Open(driver, pgtest.DSN(tb))
		must(tb, err)
	}
	pool.SetMaxOpenConns(20)
	pool.SetMaxIdleConns(20)
	db, err := postgres.New(ctx, pool.DB, postgres.Options{ResolveCommitWait: resolveCommitWait()})
	must(tb, err)
	// Registered after pgtest's, so it runs first: the schema is dropped with no
	// connection left open.
	tb.Cleanup(func() { _ = db.Close(); _ = pool.Close() })
	return db, pool
}

// resolveCommitWait is the stores' Options.ResolveCommitWait: the default, or with
// REFSET_BENCH_RESOLVE=off none (-1), so that a scratch run can measure what asking
// for a commit's ticket costs each write transaction (on lib/pq an id and a WAL
// record taken in BEGIN's round trip; on pgx a statement before COMMIT).
func resolveCommitWait() time.Duration {
	if os.Getenv("REFSET_BENCH_RESOLVE") == "off" {
		return -1
	}
	return 0
}

// setUp creates the tables, opens the store and stores the genesis block.
func (e *env) setUp(tb testing.TB, d dialect, newStore func() (refset.SetStore[block, string], error)) {
	tb.Helper()
	e.d = d
	ctx := context.Background()
	ddl := d.types.In(schemaSQL)
	for _, stmt := range strings.Split(ddl, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		_, err := e.writer.ExecContext(ctx, stmt)
		must(tb, err)
	}
	store, err := newStore()
	must(tb, err)
	e.store = store
	e.insert(tb, []block{{Hash: genesis, Payload: payload}}, false)
}

// genesis is the ID of the block every chain of new blocks starts from.
const genesis = "genesis"

// q rewrites a statement's ? placeholders into the dialect's.
func (e *env) q(query string) string {
	if !e.d.dollar {
		return query
	}
	return sqltext.Dollar(query)
}

// newBlocks returns n new blocks, not yet stored, with new IDs: a chain from the
// genesis block, each the previous one's successor. Stored in order, every block's
// predecessor is there before it.
func (e *env) newBlocks(n int) []block {
	blocks := make([]block, n)
	prev := genesis
	for i := range blocks {
		e.height++
		blocks[i] = block{Hash: fmt.Sprintf("block-%012d", e.height), Prev: new(string), Height: e.height, Payload: payload}
		*blocks[i].Prev = prev
		prev = blocks[i].Hash
	}
	return blocks
}

// insert stores blocks in bulk, in one transaction with multi-row INSERTs, and with
// pending set a pending row for each.
func (e *env) insert(tb testing.TB, blocks []block, pending bool) {
	tb.Helper()
	const batch = 500
	ctx := context.Background()
	tx, err := e.writer.BeginTxx(ctx, nil)
	must(tb, err)
	defer func() { _ = tx.Rollback() }()
	for start := 0; start < len(blocks); start += batch {
		chunk := blocks[start:min(start+batch, len(blocks))]
		rows := strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", len(chunk)), ", ")
		args := make([]any, 0, 4*len(chunk))
		for _, b := range chunk {
			args = append(args, b.Hash, b.Prev, b.Height, b.Payload)
		}
		_, err := tx.ExecContext(ctx, e.q(`INSERT INTO blocks (id, prev, height, payload) VALUES `+rows), args...)
		must(tb, err)
		if !pending {
			continue
		}
		rows = strings.TrimSuffix(strings.Repeat("(?), ", len(chunk)), ", ")
		args = args[:0]
		for _, b := range chunk {
			args = append(args, b.Hash)
		}
		_, err = tx.ExecContext(ctx, e.q(`INSERT INTO pending (block_id) VALUES `+rows), args...)
		must(tb, err)
	}
	must(tb, tx.Commit())
}

// upgrade returns set's tokens for blocks, which must be stored.
func upgrade(tb testing.TB, set *refset.RefSet[block, string], blocks []block) []*refset.RefToken[string] {
	tb.Helper()
	toks := make([]*refset.RefToken[string], len(blocks))
	for i, b := range blocks {
		tok, err := set.Upgrade(context.Background(), b.Hash)
		must(tb, err)
		toks[i] = tok
	}
	return toks
}

// forEachDB runs bench under a sub-benchmark per database, each with a fresh
// database of its own that bench's refset and sqlx sub-benchmarks share, analyzed
// once their setup rows are in (env.settle); and again under grown
// (BenchmarkAdd/sqlite/grown/paired) on a database whose statistics were taken before
// it grew by grownBy blocks, as a table's are between two autovacuum runs.
func forEachDB(b *testing.B, bench func(b *testing.B, e *env)) {
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			bench(b, d.open(b, d))
			b.Run("grown", func(b *testing.B) {
				e := d.open(b, d)
				e.grow(b)
				bench(b, e)
			})
		})
	}
}

// side is one side of a comparison.
type side int

const (
	refsetSide side = iota
	sqlxSide
)

// prepareFunc readies n operations of one side, before the timer starts, and returns
// them as op: op(i), for i in [0, n), runs the i-th.
type prepareFunc func(b *testing.B, s side, n int) (op func(i int) error)

// compare runs the sub-benchmarks of one comparison:
//
//   - refset and sqlx: each side alone, the numbers to put side by side;
//   - paired: both sides in one loop, one operation of each per iteration (taking
//     turns at going first), each timed on its own and reported as refset-ns/op and
//     sqlx-ns/op, with throughput-ratio = refset's throughput / sqlx's (sqlx time /
//     refset time). Both sides then see the same machine at the same moment, which
//     keeps drift (other load, the disk's mood) out of the ratio; the garbage
//     collector's work, though, is charged to whichever side it interrupts.
//
// Each side's setup rows are in before e's tables get their statistics (env.settle).
func compare(b *testing.B, e *env, prepare prepareFunc) {
	prepared := func(b *testing.B, s side) func(int) error {
		op := prepare(b, s, b.N)
		e.settle(b)
		return op
	}
	b.Run("refset", func(b *testing.B) { measure(b, prepared(b, refsetSide)) })
	b.Run("sqlx", func(b *testing.B) { measure(b, prepared(b, sqlxSide)) })
	b.Run("paired", func(b *testing.B) {
		refsetOp, sqlxOp := prepare(b, refsetSide, b.N), prepare(b, sqlxSide, b.N)
		e.settle(b)
		b.ReportAllocs()
		b.ResetTimer()
		pairedOps(b, refsetOp, sqlxOp)
	})
}

// pairedOps runs b.N operations of each side, one of each per iteration, taking turns at
// going first, and reports each side's ns/op and throughput-ratio (refset's
// throughput over sqlx's): both sides see the machine in the same moments.
func pairedOps(b *testing.B, refsetOp, sqlxOp func(i int) error) {
	b.Helper()
	var spent [2]time.Duration // by side
	sides := [2]func(int) error{refsetSide: refsetOp, sqlxSide: sqlxOp}
	for i := range b.N {
		for k := range 2 {
			s := (i + k) % 2
			start := time.Now()
			if err := sides[s](i); err != nil {
				b.Fatal(err)
			}
			spent[s] += time.Since(start)
		}
	}
	b.StopTimer()
	reportPaired(b, spent)
}

// reportPaired reports what each side spent on b.N operations: its ns/op
// (refset-ns/op, sqlx-ns/op) and the throughput-ratio, refset's throughput over
// sqlx's.
func reportPaired(b *testing.B, spent [2]time.Duration) {
	b.ReportMetric(float64(spent[refsetSide].Nanoseconds())/float64(b.N), "refset-ns/op")
	b.ReportMetric(float64(spent[sqlxSide].Nanoseconds())/float64(b.N), "sqlx-ns/op")
	b.ReportMetric(float64(spent[sqlxSide])/float64(spent[refsetSide]), "throughput-ratio")
}

// measure times op(0) ... op(b.N-1).
func measure(b *testing.B, op func(i int) error) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// sinkInt keeps results alive so the compiler cannot drop the work.
var sinkInt int64

// BenchmarkAdd: one new object in its own transaction.
func BenchmarkAdd(b *testing.B) {
	forEachDB(b, func(b *testing.B, e *env) {
		ctx := context.Background()
		set := refset.New[block, string](e.store)
		insert := e.q(insertSQL)
		compare(b, e, func(b *testing.B, s side, n int) func(int) error {
			// The table holds as many blocks as the measurement adds before its
			// statistics are taken, as a table in service does. Grown from a few rows
			// to thousands within the measurement, PostgreSQL's check of each insert's
			// prev (the block added just before, at the table's end) keeps the plan it
			// took while the table was small, a sequential scan, until autovacuum
			// analyzes it: both sides then measure that scan, not an Add.
			e.insert(b, e.newBlocks(n), false)
			blocks := e.newBlocks(n)
			if s == refsetSide {
				return func(i int) error {
					_, err := set.Add(ctx, blocks[i])
					return err
				}
			}
			return func(i int) error { return rawAdd(ctx, e, insert, &blocks[i]) }
		})
	})
}

// completeHandOver is refset's hand-over of tok: released with release, acquired
// with acquire, completed in one transaction.
func completeHandOver(ctx context.Context, tok *refset.RefToken[string], release, acquire refset.Command[string]) error {
	rel, err := tok.Release(release)
	if err != nil {
		return err
	}
	acq, err := rel.Acquire(acquire)
	if err != nil {
		return err
	}
	_, err = acq.Complete(ctx)
	return err
}

// rawAdd is an Add written by hand: blk inserted with insert (e.q(insertSQL)) in a
// transaction of its own.
func rawAdd(ctx context.Context, e *env, insert string, blk *block) error {
	tx, err := e.writer.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, insert, blk.Hash, blk.Prev, blk.Height, blk.Payload); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// BenchmarkGetHit: Get while a lease on the object is alive. The database is closed
// before the timer starts, so a Get that reached it would fail.
func BenchmarkGetHit(b *testing.B) {
	forEachDB(b, func(b *testing.B, e *env) {
		ctx := context.Background()
		set := refset.New[block, string](e.store)
		tok, err := set.Add(ctx, e.newBlocks(1)[0])
		must(b, err)
		held, err := set.Get(ctx, tok) // a miss: loads the object
		must(b, err)
		must(b, e.close())
		var got *block
		b.Run("refset", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				lease, err := set.Get(ctx, tok)
				if err != nil {
					b.Fatal(err)
				}
				got = lease.Value()
			}
		})
		if got != nil && got != held.Value() {
			b.Fatal("a hit returned another instance than the live one")
		}
		runtime.KeepAlive(held)
	})
}

// BenchmarkGetMiss: Get of an object not in memory, against a SELECT by primary key.
func BenchmarkGetMiss(b *testing.B) {
	forEachDB(b, func(b *testing.B, e *env) {
		ctx := context.Background()
		pool := e.newBlocks(missPool)
		e.insert(b, pool, false)
		set := refset.New[block, string](e.store)
		query := e.q(selectSQL)

		read := 0 // pool[:read] have been read through set
		next := 0 // where the sqlx side reads on, walking the same rows in the same order
		compare(b, e, func(b *testing.B, s side, n int) func(int) error {
			if s == refsetSide {
				if more := read + n - len(pool); more > 0 {
					blocks := e.newBlocks(more)
					e.insert(b, blocks, false)
					pool = append(pool, blocks...)
				}
				// Tokens for IDs this set has never read: none can be in its cache.
				toks := upgrade(b, set, pool[read:read+n])
				read += n
				return func(i int) error {
					lease, err := set.Get(ctx, toks[i])
					if err != nil {
						return err
					}
					sinkInt = lease.Value().Height
					return nil
				}
			}
			rows, start := pool, next
			next = (next + n) % len(rows)
			return func(i int) error {
				var blk block
				err := e.reader.GetContext(ctx, &blk, query, rows[(start+i)%len(rows)].Hash)
				sinkInt = blk.Height
				return err
			}
		})
	})
}

// BenchmarkComplete: a hand-over of two commands, a DELETE released and an INSERT
// acquired, committed in one transaction.
func BenchmarkComplete(b *testing.B) {
	forEachDB(b, func(b *testing.B, e *env) {
		h := newHandOvers(e)
		compare(b, e, func(b *testing.B, s side, n int) func(int) error {
			blocks := e.newBlocks(n)
			e.insert(b, blocks, true)
			if s == refsetSide {
				return h.refset(b, blocks)
			}
			return h.sqlx(blocks)
		})
	})
}

// handOvers are the hand-overs of BenchmarkComplete and its concurrent twin, on
// both sides: the pending row of a block deleted and a head row inserted.
type handOvers struct {
	e                *env
	set              *refset.RefSet[block, string]
	release, acquire refset.Command[string]
	del, ins         string
}

func newHandOvers(e *env) handOvers {
	return handOvers{
		e:       e,
		set:     refset.New[block, string](e.store),
		release: refset.Exec[string](e.q(releaseSQL), 1),
		acquire: refset.Exec[string](e.q(acquireSQL), -1),
		del:     e.q(releaseSQL),
		ins:     e.q(acquireSQL),
	}
}

// refset readies refset's hand-overs of blocks, stored and pending: op(i) completes
// the i-th one's.
func (h handOvers) refset(tb testing.TB, blocks []block) (op func(int) error) {
	toks := upgrade(tb, h.set, blocks)
	return func(i int) error { return completeHandOver(context.Background(), toks[i], h.release, h.acquire) }
}

// sqlx is refset's hand-overs written by hand: op(i) runs the i-th one's raw
// transaction.
func (h handOvers) sqlx(blocks []block) (op func(int) error) {
	return func(i int) error { return handOver(context.Background(), h.e.writer, h.del, h.ins, blocks[i].Hash) }
}

// handOver is the raw transaction a Complete of the two commands amounts to.
func handOver(ctx context.Context, db *sqlx.DB, del, ins, id string) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, del, id)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n != 1 {
			err = fmt.Errorf("release of %s affected %d rows, want 1", id, n)
		}
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, ins, id)
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
