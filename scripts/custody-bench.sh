#!/usr/bin/env bash
# Measures token custody on PostgreSQL beside pgbench, on the same server in one run:
#
#   REFSET_TEST_POSTGRES=postgres://... scripts/custody-bench.sh [go test flags...]
#
# 1. pgbench's TPC-B-like load, 8 clients, 10 s (scale 10), for scale: once with
#    pgbench's default simple protocol and once with prepared statements (-M prepared,
#    as custody's fast paths use them);
# 2. the custody benchmarks (internal/bench): select-and-spend cycles by 8 replicas
#    over 100,000 tokens of 1,000 owners, then all 8 paying from one owner; each
#    beside the same payments written by hand with sqlx, alone and paired;
# 3. pgbench again, to show how much the machine drifted meanwhile.
#
# pgbench's tables go into the database of REFSET_TEST_POSTGRES and are dropped at
# the end. BENCH_TIME is each custody benchmark's -benchtime (default 10000x: payments per
# sub-benchmark); extra arguments go to go test (-count 3, say).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'custody-bench.sh: %s\n' "$*" >&2; }

[[ -n ${REFSET_TEST_POSTGRES:-} ]] || {
	log "REFSET_TEST_POSTGRES must name a PostgreSQL server (a lib/pq URL), e.g."
	log "  REFSET_TEST_POSTGRES='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' $0"
	exit 1
}

pgbench=$(command -v pgbench || true)
if [[ -z $pgbench ]]; then
	pgbench=$(printf '%s\n' /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -rV | head -n1)
fi
[[ -x $pgbench ]] || {
	log "pgbench not found (Debian: apt-get install postgresql-contrib or postgresql)"
	exit 1
}

tpcb() {
	for mode in simple prepared; do
		"$pgbench" -c 8 -j 2 -T 10 -n -M "$mode" "$REFSET_TEST_POSTGRES" 2>&1 |
			grep -E '^(tps|latency average)' | sed "s/^/pgbench -M $mode: /"
	done
}

trap '"$pgbench" -i -I d "$REFSET_TEST_POSTGRES" >/dev/null 2>&1 || true' EXIT
"$pgbench" -i -s 10 -q "$REFSET_TEST_POSTGRES" >/dev/null 2>&1
tpcb
go test -run '^$' -bench '^BenchmarkSelectAndSpend' -benchtime "${BENCH_TIME:-10000x}" -timeout 60m "$@" ./internal/bench/
tpcb
