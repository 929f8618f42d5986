package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
)

// The clean-up benchmarks measure that collection costs in proportion to the
// garbage, not to the set: the same garbage is collected from sets of very different
// sizes. Fixtures are bulk-loaded (COPY on Postgres, multi-row inserts in one
// transaction on SQLite) before clean-up is installed, as in a set whose live objects
// were all reviewed long ago.

// gcObj is the clean-up benchmarks' object.
type gcObj struct {
	Key string `db:"id"`
}

func (o gcObj) ID() string { return o.Key }

// gcSchema's roots hold their objects ON DELETE RESTRICT, as refset's own tables and
// cleanup's doc advise: left at NO ACTION, PostgreSQL's check of the key would probe
// objs again for every object collected (Install warns of such keys).
const gcSchema = `
CREATE TABLE objs  (id {Text} NOT NULL PRIMARY KEY);
CREATE TABLE roots (obj_id {Text} NOT NULL PRIMARY KEY REFERENCES objs (id) ON DELETE RESTRICT)`

// gcEnv is one clean-up benchmark's database.
type gcEnv struct {
	db      refset.Database
	pg      bool
	typeMap *strings.Replacer
	// load bulk-inserts rows (each a []any of the columns' values) into table.
	load func(b *testing.B, table string, cols []string, n int, row func(i int) []any)
	// exec runs a statement (written with ? placeholders) on the write side.
	exec func(b *testing.B, q string, args ...any)
}

func gcOpen(b *testing.B, dialect string) *gcEnv {
	b.Helper()
	ctx := context.Background()
	switch dialect {
	case onSQLite, onSQLitePureGo:
		db, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "gc.db"), sqlite.Options{Synchronous: "NORMAL", Driver: sqliteBackends[dialect].Driver})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		e := &gcEnv{db: db, typeMap: strings.NewReplacer("{Text}", "TEXT")}
		e.exec = func(b *testing.B, q string, args ...any) {
			b.Helper()
			if _, err := db.Writer().ExecContext(ctx, q, args...); err != nil {
				b.Fatalf("%s: %v", q, err)
			}
		}
		e.load = func(b *testing.B, table string, cols []string, n int, row func(i int) []any) {
			b.Helper()
			const per = 200
			tx, err := db.Writer().BeginTxx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Rollback()
			one := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
			for start := 0; start < n; start += per {
				end := min(start+per, n)
				args := make([]any, 0, (end-start)*len(cols))
				for i := start; i < end; i++ {
					args = append(args, row(i)...)
				}
				q := fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", table, strings.Join(cols, ", "),
					strings.TrimSuffix(strings.Repeat(one+", ", end-start), ", "))
				if _, err := tx.ExecContext(ctx, q, args...); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		return e
	case onLibPQ, onPgx:
		db, pool := openPool(b, dialect)
		e := &gcEnv{db: db, pg: true, typeMap: strings.NewReplacer("{Text}", "text")}
		e.exec = func(b *testing.B, q string, args ...any) {
			b.Helper()
			if _, err := pool.ExecContext(ctx, sqltext.Dollar(q), args...); err != nil {
				b.Fatalf("%s: %v", q, err)
			}
		}
		e.load = func(b *testing.B, table string, cols []string, n int, row func(i int) []any) {
			b.Helper()
			copyIn := copyLibPQ
			if dialect == onPgx {
				copyIn = copyPgx
			}
			if err := copyIn(ctx, pool, table, cols, n, row); err != nil {
				b.Fatal(err)
			}
		}
		return e
	}
	b.Fatalf("unknown dialect %s", dialect)
	return nil
}

// copyLibPQ loads n rows into table with COPY, through lib/pq's COPY statement.
func copyLibPQ(ctx context.Context, pool *sqlx.DB, table string, cols []string, n int, row func(i int) []any) error {
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, pq.CopyIn(table, cols...))
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := stmt.ExecContext(ctx, row(i)...); err != nil {
			return err
		}
	}
	if _, err := stmt.ExecContext(ctx); err != nil {
		return err
	}
	if err := stmt.Close(); err != nil {
		return err
	}
	return tx.Commit()
}

// copyPgx loads n rows into table with COPY, through pgx's own connection under
// database/sql's: pgx's stdlib driver has no COPY statement.
func copyPgx(ctx context.Context, pool *sqlx.DB, table string, cols []string, n int, row func(i int) []any) error {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		rows := pgx.CopyFromSlice(n, func(i int) ([]any, error) { return row(i), nil })
		_, err := driverConn.(*stdlib.Conn).Conn().CopyFrom(ctx, pgx.Identifier{table}, cols, rows)
		return err
	})
}

// setup creates the tables, loads live rooted objects, builds the store and installs
// clean-up with a long grace period (the benchmark makes its garbage due itself).
func (e *gcEnv) setup(b *testing.B, live int) (*refset.RefSet[gcObj, string], *cleanup.Collector) {
	b.Helper()
	ctx := context.Background()
	for _, stmt := range strings.Split(e.typeMap.Replace(gcSchema), ";") {
		e.exec(b, stmt)
	}
	e.load(b, "objs", []string{"id"}, live, func(i int) []any { return []any{fmt.Sprintf("live-%07d", i)} })
	e.load(b, "roots", []string{"obj_id"}, live, func(i int) []any { return []any{fmt.Sprintf("live-%07d", i)} })
	cfg := cleanup.Config{Table: "objs", Grace: time.Hour, BatchSize: 5000}
	var set *refset.RefSet[gcObj, string]
	var c *cleanup.Collector
	var err error
	if e.pg {
		db := e.db.(*postgres.DB)
		var setStore refset.SetStore[gcObj, string]
		if setStore, err = store.NewStore[gcObj, string](ctx, db, store.Config{Table: "objs"}); err == nil {
			set = refset.New(setStore)
			c, err = store.NewCollector(ctx, db, cfg)
		}
	} else {
		db := e.db.(*sqlite.DB)
		var setStore refset.SetStore[gcObj, string]
		if setStore, err = store.NewStore[gcObj, string](ctx, db, store.Config{Table: "objs"}); err == nil {
			set = refset.New(setStore)
			c, err = store.NewCollector(ctx, db, cfg)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	// The first Install queued the live objects: a set whose objects were all
	// reviewed long ago has none of them queued.
	e.exec(b, "DELETE FROM objs_review")
	e.analyze(b, "objs", "roots", "objs_holds", "objs_review")
	return set, c
}

// BenchmarkFirstInstall: the first Install on a set that already holds objects
// (REFSET_BENCH_INSTALL of them, 1,000,000 by default, half of them rooted) queues
// every one, a page of the default BatchSize per transaction. ns/op is one Install,
// s/install the same in seconds, objects/s its pace. Each iteration loads a new set
// before its timer starts: run it with -benchtime=1x.
func BenchmarkFirstInstall(b *testing.B) {
	n := envInt(b, "REFSET_BENCH_INSTALL", 1_000_000)
	for _, dialect := range databases {
		b.Run(fmt.Sprintf("%s/objects=%d", dialect, n), func(b *testing.B) {
			if warmUp(b) {
				return
			}
			ctx := context.Background()
			for range b.N {
				b.StopTimer()
				e := gcOpen(b, dialect)
				for _, stmt := range strings.Split(e.typeMap.Replace(gcSchema), ";") {
					e.exec(b, stmt)
				}
				id := func(i int) []any { return []any{fmt.Sprintf("old-%07d", i)} }
				e.load(b, "objs", []string{"id"}, n, id)
				e.load(b, "roots", []string{"obj_id"}, n/2, func(i int) []any { return id(2 * i) })
				if _, err := store.NewStore[gcObj, string](ctx, e.db, store.Config{Table: "objs"}); err != nil {
					b.Fatal(err)
				}
				e.analyze(b, "objs", "roots", "objs_holds", "objs_review")
				b.StartTimer()
				if _, err := store.NewCollector(ctx, e.db, cleanup.Config{Table: "objs", Grace: time.Hour}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				var queued int
				if err := e.db.Reader().QueryRowContext(ctx, "SELECT count(*) FROM objs_review").Scan(&queued); err != nil {
					b.Fatal(err)
				}
				if queued != n {
					b.Fatalf("queued %d of %d objects", queued, n)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/install")
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "objects/s")
		})
	}
}

// analyze updates the planner's statistics of the benchmark's own tables. On Postgres
// a bare ANALYZE would go through every table of the shared server, and wait as long
// as any other session holds a lock on one of them.
func (e *gcEnv) analyze(b *testing.B, tables ...string) {
	b.Helper()
	if e.pg {
		e.exec(b, "ANALYZE "+strings.Join(tables, ", "))
	} else {
		e.exec(b, "ANALYZE")
	}
}

// makeDue ends the grace period of everything queued.
func (e *gcEnv) makeDue(b *testing.B) { e.makeDueIn(b, "objs_review") }

// makeDueIn ends the grace period of everything in the review queue named queue.
func (e *gcEnv) makeDueIn(b *testing.B, queue string) {
	b.Helper()
	if e.pg {
		e.exec(b, `UPDATE `+queue+` SET review_after = now() - interval '1 second' WHERE review_after > now()`)
	} else {
		e.exec(b, `UPDATE `+queue+` SET review_after = 0 WHERE review_after > 0`)
	}
}

// collectGarbage times collecting `garbage` unreferenced objects from a set of `live`
// referenced ones, once per iteration.
func collectGarbage(b *testing.B, dialect string, live, garbage int) {
	if warmUp(b) {
		return
	}
	e := gcOpen(b, dialect)
	_, c := e.setup(b, live)
	b.ResetTimer()
	round := 0
	timeCollects(b, e, c, garbage, &round)
}

// timeCollects times b.N Collects of c, each of `garbage` unreferenced objects
// loaded and made due before the timer starts again, and reports ns/object. round
// numbers the loads, so a set that outlives one call (the scale benchmarks') never
// loads an ID twice.
func timeCollects(b *testing.B, e *gcEnv, c *cleanup.Collector, garbage int, round *int) {
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		*round++
		e.load(b, "objs", []string{"id"}, garbage, func(i int) []any { return []any{fmt.Sprintf("garbage-%03d-%07d", *round, i)} })
		e.makeDue(b)
		b.StartTimer()
		s, err := c.Collect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if s.Deleted != int64(garbage) {
			b.Fatalf("deleted %d, want %d (%v)", s.Deleted, garbage, s)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*garbage), "ns/object")
}

// BenchmarkCollectGarbage: the same 10,000 garbage objects collected from 10,000 and
// from 1,000,000 live ones; the cost should not follow the live set.
func BenchmarkCollectGarbage(b *testing.B) {
	for _, dialect := range databases {
		for _, live := range []int{10_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/live=%d/garbage=10000", dialect, live), func(b *testing.B) {
				collectGarbage(b, dialect, live, 10_000)
			})
		}
	}
}

// BenchmarkCollect100kOf1M: 100,000 garbage objects beside 1,000,000 live ones. ns/op
// is one Collect; s/collect says the same in seconds.
func BenchmarkCollect100kOf1M(b *testing.B) {
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			collectGarbage(b, dialect, 1_000_000, 100_000)
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/collect")
		})
	}
}

const chainSchema = `
CREATE TABLE links (id {Text} NOT NULL PRIMARY KEY, prev {Text} REFERENCES links (id) ON DELETE RESTRICT);
CREATE INDEX links_prev ON links (prev);
CREATE TABLE tips  (link_id {Text} NOT NULL PRIMARY KEY REFERENCES links (id))`

// BenchmarkCollectChain: an abandoned chain (each link references the one before it,
// and only its head was referenced) collected, against as many independent garbage
// objects of the same set collected in the same iteration. Deleting a link frees the
// one before it, so a collector that handled one link per batch would pay a
// transaction per link; the target is a cost per object within 3x of independent
// garbage (cost-ratio, chain over independent), whatever the chain's length.
// Independent garbage is shared by the collector's two workers, while a chain is
// freed link by link, batch after batch, by one.
func BenchmarkCollectChain(b *testing.B) {
	for _, dialect := range databases {
		for _, length := range []int{10_000, 50_000} {
			b.Run(fmt.Sprintf("%s/length=%d", dialect, length), func(b *testing.B) { collectChain(b, dialect, length) })
		}
	}
}

// collectChain times, in each iteration, collecting a chain of length links whose
// tip row was just deleted, then collecting length independent garbage objects, in
// a set of 10,000 live ones.
func collectChain(b *testing.B, dialect string, length int) {
	const live = 10_000
	if warmUp(b) {
		return
	}
	e := gcOpen(b, dialect)
	ctx := context.Background()
	for _, stmt := range strings.Split(e.typeMap.Replace(chainSchema), ";") {
		e.exec(b, stmt)
	}
	e.load(b, "links", []string{"id", "prev"}, live, func(i int) []any { return []any{fmt.Sprintf("live-%07d", i), nil} })
	e.load(b, "tips", []string{"link_id"}, live, func(i int) []any { return []any{fmt.Sprintf("live-%07d", i)} })
	cfg := cleanup.Config{Table: "links", Grace: time.Hour, BatchSize: 5000}
	var c *cleanup.Collector
	var err error
	if e.pg {
		db := e.db.(*postgres.DB)
		if _, err = store.NewStore[gcObj, string](ctx, db, store.Config{Table: "links"}); err == nil {
			c, err = store.NewCollector(ctx, db, cfg)
		}
	} else {
		db := e.db.(*sqlite.DB)
		if _, err = store.NewStore[gcObj, string](ctx, db, store.Config{Table: "links"}); err == nil {
			c, err = store.NewCollector(ctx, db, cfg)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	e.exec(b, "DELETE FROM links_review") // the live links were reviewed long ago (see setup)
	e.analyze(b, "links", "tips", "links_holds", "links_review")
	collect := func(want int) time.Duration {
		b.Helper()
		start := time.Now()
		s, err := c.Collect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if s.Deleted != int64(want) {
			b.Fatalf("deleted %d, want %d (%v)", s.Deleted, want, s)
		}
		return time.Since(start)
	}
	var chain, independent time.Duration
	b.ResetTimer()
	for iter := 0; iter < b.N; iter++ {
		b.StopTimer()
		id := func(i int) string { return fmt.Sprintf("chain-%03d-%07d", iter, i) }
		e.load(b, "links", []string{"id", "prev"}, length, func(i int) []any {
			if i == 0 {
				return []any{id(i), nil}
			}
			return []any{id(i), id(i - 1)}
		})
		e.load(b, "tips", []string{"link_id"}, 1, func(int) []any { return []any{id(length - 1)} })
		// Review what loading queued (all of it referenced), as a collector running
		// all along would have, then abandon the chain.
		e.makeDueIn(b, "links_review")
		collect(0)
		e.exec(b, `DELETE FROM tips WHERE link_id = ?`, id(length-1))
		b.StartTimer()
		chain += collect(length)
		b.StopTimer()
		e.load(b, "links", []string{"id", "prev"}, length, func(i int) []any {
			return []any{fmt.Sprintf("loose-%03d-%07d", iter, i), nil}
		})
		e.makeDueIn(b, "links_review")
		b.StartTimer()
		independent += collect(length)
	}
	b.StopTimer()
	perObject := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*length) }
	b.ReportMetric(perObject(chain), "chain-ns/object")
	b.ReportMetric(perObject(independent), "independent-ns/object")
	b.ReportMetric(float64(chain)/float64(independent), "cost-ratio")
}

// BenchmarkExpireHolds: 1,000,000 holds, of which 100,000 have expired; one Collect
// deletes the expired ones and reviews their objects (which roots keep alive).
func BenchmarkExpireHolds(b *testing.B) {
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			const total, expired = 1_000_000, 100_000
			e := gcOpen(b, dialect)
			_, c := e.setup(b, total)
			// The holds that never lapse during the benchmark.
			e.load(b, "objs_holds", []string{"holder", "object_id"}, total-expired, func(i int) []any {
				return []any{"keeper", fmt.Sprintf("live-%07d", i+expired)}
			})
			past := any(int64(1))
			if e.pg {
				past = time.Unix(1, 0)
			}
			ctx := context.Background()
			b.ResetTimer()
			for iter := 0; iter < b.N; iter++ {
				b.StopTimer()
				e.load(b, "objs_holds", []string{"holder", "object_id", "expires_at"}, expired, func(i int) []any {
					return []any{fmt.Sprintf("lock-%d", iter), fmt.Sprintf("live-%07d", i), past}
				})
				b.StartTimer()
				s, err := c.Collect(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if s.HoldsExpired != expired || s.Deleted != 0 {
					b.Fatalf("expired %d holds and deleted %d objects, want %d and 0", s.HoldsExpired, s.Deleted, expired)
				}
			}
		})
	}
}
