#!/usr/bin/env bash
# Runs the refset-versus-raw-sqlx benchmarks (internal/test/bench) and summarises them.
#
#   scripts/benchstat.sh [go test flags...]     e.g. scripts/benchstat.sh -benchtime 2s
#
# (scripts/bench.sh is the one command for every speed target; this script is the
# older, finer look at the core alone, through benchstat.)
#
# Each benchmark compares refset with raw sqlx doing the same SQL on the same
# database (see internal/test/bench/doc.go). The go test output goes to bench.out (and
# the terminal); then, when benchstat can be run (installed, or through
# `go run golang.org/x/perf/cmd/benchstat@latest`), a summary with sqlx and
# refset side by side.
#
# Environment:
#   REFSET_TEST_POSTGRES   DSN (one lib/pq and pgx both read) of a PostgreSQL
#                          server for the Postgres benchmarks, which run once
#                          per driver (Benchmark<Op>/postgres/... on lib/pq,
#                          Benchmark<Op>/pgx/... on pgx); each benchmark works
#                          in a schema of its own, dropped afterwards. When
#                          unset, only the SQLite benchmarks run. (scripts/test.sh starts a throwaway
#                          server, but only around its own test run.)
#   BENCH                  which benchmarks to run (go test -bench); default
#                          ".", all of internal/test/bench. The refset-versus-sqlx
#                          comparison alone is
#                          BENCH='^Benchmark(Add|GetHit|GetMiss|Complete)$'.
#   BENCH_COUNT            how often each benchmark runs; default 6, the
#                          fewest benchstat needs for a confidence interval.
#   BENCH_OUT              where the go test output goes; default bench.out.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'benchstat.sh: %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
	log "Go is not installed or not on PATH"
	exit 1
}

count=${BENCH_COUNT:-6}
out=${BENCH_OUT:-bench.out}

pattern=${BENCH:-.}
# Never print REFSET_TEST_POSTGRES: it may hold a password.
if [[ -z ${REFSET_TEST_POSTGRES:-} ]]; then
	log "REFSET_TEST_POSTGRES is not set: running the SQLite benchmarks only."
	log "For PostgreSQL too, point it at a server where you may create schemas, e.g."
	log "  (any PostgreSQL 13 or later; make test starts a throwaway one only around the tests)"
	log "  REFSET_TEST_POSTGRES='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' $0"
	# Sub-benchmarks are named Benchmark<Op>/<database>/...
	pattern=$pattern/sqlite
fi

# One go test run per count, rather than -count: with -count, go test repeats each
# sub-benchmark back to back, so all refset samples would come from one stretch of
# time and all sqlx samples from another, and any drift in the machine (other load,
# the disk) would show up as a difference between them. Run by run, the two sides of
# a pair stay seconds apart. Extra flags go to every run.
: >"$out"
for ((run = 1; run <= count; run++)); do
	log "run $run of $count"
	go test -run '^$' -bench "$pattern" -benchmem -count 1 "$@" ./internal/test/bench/ | tee -a "$out"
done

# benchstat can only put key=value parts of a benchmark name in columns, so the
# summary reads a copy named Benchmark<Op>/db=<database>/impl=<side>, where the
# raw side (sqlx here; other benchmarks of the package call it raw) is impl=raw.
if command -v benchstat >/dev/null 2>&1; then
	benchstat=(benchstat)
else
	benchstat=(go run golang.org/x/perf/cmd/benchstat@latest)
fi
keyed=$(mktemp "${TMPDIR:-/tmp}/refset-bench.XXXXXX")
trap 'rm -f "$keyed"' EXIT
sed -E -e 's#^(Benchmark[^/[:space:]]+)/([^/[:space:]]+)/(refset|sqlx|raw|paired)([-[:space:]])#\1/db=\2/impl=\3\4#' \
	-e 's#/impl=sqlx([-[:space:]])#/impl=raw\1#' "$out" >"$keyed"
summary() {
	printf '\n== benchstat: raw sqlx (baseline) and refset, each run alone ==\n'
	"${benchstat[@]}" -col '/impl@(raw refset)' "$keyed" || return
	printf '\n== benchstat: paired (both sides in one loop; throughput-ratio = refset/sqlx) ==\n'
	"${benchstat[@]}" -filter '/impl:paired' "paired=$keyed"
}
if ! summary; then
	log "benchstat failed; the results are in $out"
	log "(install it with: go install golang.org/x/perf/cmd/benchstat@latest)"
fi
