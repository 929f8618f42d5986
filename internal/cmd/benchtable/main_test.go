package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const output = `goos: linux
BenchmarkComplete/postgres/paired-2   2000   700000 ns/op   300000 refset-ns/op   390000 sqlx-ns/op   1.30 throughput-ratio   4390 B/op   127 allocs/op
BenchmarkComplete/postgres/paired-2   2000   700000 ns/op   330000 refset-ns/op   380000 sqlx-ns/op   1.15 throughput-ratio
BenchmarkComplete/sqlite/paired-2     2000   500000 ns/op   200000 refset-ns/op   260000 sqlx-ns/op   1.30 throughput-ratio
    bench_test.go:12: a log line that is not a result
BenchmarkCollect100kOf1M/postgres-2   1   900000000 ns/op
BenchmarkCollect100kOf1M/pgx          1   1200000000 ns/op
BenchmarkSelectAndSpend/refset-2   3000   1 ns/op   2000 cycles/s
BenchmarkBranch/postgres/grown/stored=1M-2   20   9000000 ns/op   4.50 refset-ms/walk   9.00 raw-ms/walk   2.00 throughput-ratio
pgbench/simple/clients=8   1   2400 tps
pgbench/simple/clients=8   1   2600 tps
`

// line returns the table row of path on db.
func line(t *testing.T, table, path, db string) string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "| "+path+" | "+db+" |") {
			return l
		}
	}
	t.Fatalf("no row for %s on %s in\n%s", path, db, table)
	return ""
}

func TestRender(t *testing.T) {
	s, err := parse(strings.NewReader(output))
	if err != nil {
		t.Fatal(err)
	}
	table, missed := render(targets(), s)
	for _, c := range []struct{ path, db, want string }{
		// One run of two misses: a target is met only by every run.
		{"Complete of a two-command hand-over", "postgres", "| 315 µs | 385 µs | 1.23 (1.15–1.30, 2 runs) | ≥ 1.5 | **no** |"},
		{"Complete of a two-command hand-over", "sqlite", "| 200 µs | 260 µs | 1.30 | ≥ 1.2 | yes |"},
		{"Complete of a two-command hand-over", "pgx", "| — | — | — | ≥ 2 | not run |"},
		// Judged on refset's own figure, in seconds.
		{"collect 100k garbage among 1M live", "postgres", "| 0.90 s |  | — | < 1 s | yes |"},
		{"collect 100k garbage among 1M live", "pgx", "| 1.20 s |  | — | < 1 s | **no** |"},
		// A walk on tables grown past their statistics.
		{"Branch over 10k blocks, 1M stored, statistics stale (taken at 1k)", "postgres", "| 4.50 ms | 9.00 ms | 2.00 | refset < 20 ms | yes |"},
		// Beside the median of pgbench's runs before and after.
		{"custody select + spend (two steps), 8 replicas, cycles per pgbench transaction", "postgres", "| 2000 /s | 2500 /s | 0.80 | ≥ 0.75 | yes |"},
	} {
		if got := line(t, table, c.path, c.db); !strings.HasSuffix(got, c.want) {
			t.Errorf("%s on %s:\n got %s\nwant …%s", c.path, c.db, got, c.want)
		}
	}
	if missed != 2 {
		t.Errorf("missed = %d, want 2", missed)
	}
}

// writeRuns is a BENCHMARKS.md that held before once runs were written into it, in
// order, each keeping two runs of its mode.
func writeRuns(t *testing.T, before string, runs ...section) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range runs {
		if err := s.writeInto(path, 2); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUpdateKeepsEarlierRuns(t *testing.T) {
	const before = "# Benchmarks\n\nintro\n\n" + beginMarker + "\n" + endMarker + "\n\n## Earlier\n"
	var runs []section
	for _, date := range []string{"first", "second", "third"} {
		runs = append(runs, section{command: "scripts/bench.sh", machine: "m", date: date, table: "| t |\n"})
	}
	got := writeRuns(t, before, runs...)
	second, third := strings.Index(got, "Run of second"), strings.Index(got, "Run of third")
	if strings.Contains(got, "Run of first") || second < 0 || third < 0 || third > second {
		t.Errorf("want the two newest runs, newest first; got\n%s", got)
	}
	if !strings.HasPrefix(got, "# Benchmarks\n\nintro\n\n"+beginMarker) || !strings.HasSuffix(got, endMarker+"\n\n## Earlier\n") {
		t.Errorf("text outside the markers changed:\n%s", got)
	}
}

// Runs of each mode are kept apart: a durable run leaves the default mode's runs in
// place (and the other way round), each mode keeps its own newest runs, default's
// first, and each run says its mode and settings.
func TestUpdateKeepsEachModesRuns(t *testing.T) {
	// An entry written before modes existed counts as the default mode's.
	const before = "# B\n\n" + beginMarker + "\n<!-- bench.sh: run -->\n\n#### Run of old\n\n| t |\n\n" + endMarker + "\n"
	var runs []section
	for _, r := range []struct{ date, mode string }{
		{"d1", "durable"}, {"f1", "default"}, {"d2", "durable"}, {"d3", "durable"},
	} {
		runs = append(runs, section{command: "scripts/bench.sh", machine: "m", date: r.date, mode: r.mode, settings: "fsync=" + r.mode, table: "| t |\n"})
	}
	got := writeRuns(t, before, runs...)
	var at []int
	for _, want := range []string{"Run of f1 (default mode)", "Run of old", "Run of d3 (durable mode)", "Run of d2 (durable mode)"} {
		i := strings.Index(got, want)
		if i < 0 {
			t.Fatalf("no %q in\n%s", want, got)
		}
		at = append(at, i)
	}
	if !slices.IsSorted(at) || strings.Contains(got, "Run of d1") {
		t.Errorf("want default's two runs, then durable's two newest, newest first; got\n%s", got)
	}
	if !strings.Contains(got, "Settings: fsync=durable.") || strings.Count(got, "<!-- bench.sh: run mode=durable -->") != 2 {
		t.Errorf("durable runs are not marked and labelled:\n%s", got)
	}
}

// A database the table does not know (a new driver's sub-benchmark name) gets the
// rows of every database, after the known ones.
func TestNewDatabaseGetsRows(t *testing.T) {
	s, err := parse(strings.NewReader(output + "BenchmarkAdd/sqlite-wasm/paired-2  100  5 ns/op  200000 refset-ns/op  210000 sqlx-ns/op  1.05 throughput-ratio\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer func(saved []string) { dbs = saved }(dbs)
	dbs = databasesIn(s)
	if want := []string{"sqlite", "sqlite-purego", "postgres", "pgx", "sqlite-wasm"}; !slices.Equal(dbs, want) {
		t.Fatalf("databases = %v, want %v", dbs, want)
	}
	table, _ := render(targets(), s)
	if got := line(t, table, "Add, one object in its own transaction", "sqlite-wasm"); !strings.HasSuffix(got, "| 1.05 | ≥ 1 | yes |") {
		t.Errorf("row of the new database: %s", got)
	}
}
