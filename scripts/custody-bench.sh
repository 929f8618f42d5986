#!/usr/bin/env bash
# Measures token custody on PostgreSQL beside pgbench, on the same server in one run:
#
#   REFSET_TEST_POSTGRES=postgres://... scripts/custody-bench.sh [go test flags...]
#
# 1. pgbench's TPC-B-like load, 8 clients, 10 s (scale 10), for scale: once with
#    pgbench's default simple protocol and once with prepared statements (-M prepared,
#    as custody's fast paths use them);
# 2. the custody benchmarks (internal/bench), 8 replicas paying over 100,000 tokens of
#    1,000 owners: two-step (Select then Spend, BenchmarkSelectAndSpend, and the same
#    from one owner) and one statement (Pay, BenchmarkPayOneStatement), each beside the
#    same payments written by hand with sqlx, alone and paired; then wallet sizes,
#    small recycled pools and a hot owner (BenchmarkCustody*);
# 3. pgbench again, to show how much the machine drifted meanwhile;
# 4. a summary: each refset-alone line's cycles/s over pgbench's simple-protocol tps
#    (the mean of before and after), the issue's "cycles per pgbench transaction".
#
# pgbench's tables go into the database of REFSET_TEST_POSTGRES and are dropped at
# the end. BENCH_TIME is each custody benchmark's -benchtime (default 10000x: payments per
# sub-benchmark; 3000x for a quick look); BENCH is the -bench pattern (default: all of
# the above); extra arguments go to go test (-count 3, say). REFSET_BENCH_CUSTODY_PATH=twostep
# runs the BenchmarkCustody* ones with Select then Spend instead of Pay.
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

out=$(mktemp)
trap '"$pgbench" -i -I d "$REFSET_TEST_POSTGRES" >/dev/null 2>&1 || true; rm -f "$out"' EXIT

tpcb() {
	for mode in simple prepared; do
		"$pgbench" -c 8 -j 2 -T 10 -n -M "$mode" "$REFSET_TEST_POSTGRES" 2>&1 |
			grep -E '^(tps|latency average)' | sed "s/^/pgbench -M $mode: /"
	done
}

"$pgbench" -i -s 10 -q "$REFSET_TEST_POSTGRES" >/dev/null 2>&1
tpcb | tee -a "$out"
go test -run '^$' -bench "${BENCH:-^Benchmark(SelectAndSpend|PayOneStatement|Custody)}" \
	-benchtime "${BENCH_TIME:-10000x}" -timeout 120m "$@" ./internal/bench/ | tee -a "$out"
tpcb | tee -a "$out"

# The summary: cycles/s of every refset-alone line over the mean simple-protocol tps.
awk '
	/^pgbench -M simple: tps/ { tps += $6; runs++ }
	/^Benchmark.*\/refset-[0-9]+[ \t]/ || /^BenchmarkCustodyHotOwner-[0-9]+[ \t]/ {
		for (i = 3; i < NF; i++) if ($(i + 1) == "cycles/s") { name[++lines] = $1; rate[lines] = $i }
	}
	END {
		if (runs == 0) exit
		printf "\npgbench simple, mean of %d runs: %.0f tps\n", runs, tps / runs
		for (n = 1; n <= lines; n++)
			printf "%-45s %8.0f cycles/s  %.2f cycles per pgbench transaction\n", name[n], rate[n], rate[n] / (tps / runs)
	}' "$out"
