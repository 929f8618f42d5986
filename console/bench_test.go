package console_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
)

// BenchmarkPages times each page of the console on PostgreSQL over a set of
// $REFSET_CONSOLE_BIG objects (default 100,000) and a chain of a tenth as many
// blocks, filled once (bigSet), as an operator's request reaches the handler:
//
//	REFSET_CONSOLE_BIG=1000000 go test -run '^$' -bench BenchmarkPages -benchtime 20x ./console/
//
// Every page, and the sampler's statement, reads by key, by index, or up to a cap
// (TestPlans), so their times stay flat as the set grows: but Check, an audit, and
// refset status --exact, which scan.
func BenchmarkPages(b *testing.B) {
	objects := 100_000
	if v := os.Getenv("REFSET_CONSOLE_BIG"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10_000 {
			b.Fatalf("REFSET_CONSOLE_BIG=%q: want a number of objects, at least 10000", v)
		}
		objects = n
	}
	blocks := objects / 10
	ctx := b.Context()
	dsn := pgtest.DSN(b)
	db, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	plain, err := sql.Open("postgres", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = plain.Close() })
	start := time.Now()
	bigSet(b, db, plain, objects, blocks)
	b.Logf("filled %d objects and %d blocks in %v", objects, blocks, time.Since(start).Round(time.Millisecond))
	h, err := console.New(ctx, db, console.Config{SampleEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	// A sample of the sampler: one statement, the Counter having read the list of
	// sets; and, beside it, the exact counts refset status --exact reads, scanning.
	counter := cleanup.NewCounter(db, cleanup.StatusOptions{})
	for name, read := range map[string]func() error{
		"sampler": func() error { _, err := counter.Counts(ctx); return err },
		"status --exact": func() error {
			_, err := cleanup.StatusWith(ctx, db, cleanup.StatusOptions{Exact: true})
			return err
		},
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// "/?check=notes" is Check, an audit of the whole set, as refset check is.
	for _, p := range append([]string{"/", "/?check=notes", "/cleanup"}, bigPages(objects, blocks)...) {
		b.Run(p, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1"+p, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", p, rec.Code, rec.Body)
				}
			}
		})
	}
}
