#!/usr/bin/env bash
# Measures token custody on PostgreSQL beside pgbench, on the same server in one run:
#
#   scripts/custody-bench.sh [go test flags...]
#
# on the server of REFSET_TEST_POSTGRES (a lib/pq DSN) when set, else on a throwaway
# cluster started on 127.0.0.1 and removed again at exit (scripts/lib/cluster.sh;
# with REFSET_BENCH_CUSTODY_STATEMENTS=1 it loads pg_stat_statements for it).
#
# 1. pgbench's TPC-B-like load, 8 clients, 10 s (scale 10), for scale: once with
#    pgbench's default simple protocol and once with prepared statements (-M prepared,
#    as custody's fast paths use them);
# 2. the custody benchmarks (internal/test/bench), 8 replicas paying over 100,000 tokens of
#    1,000 owners: two-step (Select then Spend, BenchmarkSelectAndSpend, and the same
#    from one owner) and one statement (Pay, BenchmarkPayOneStatement), each beside the
#    same payments written by hand with sqlx, alone and paired; then wallet sizes,
#    small recycled pools and a hot owner (BenchmarkCustody*);
# 3. pgbench again, to show how much the machine drifted meanwhile;
# 4. a summary: each refset-alone line's cycles/s over pgbench's simple-protocol tps
#    (the mean of before and after), the issue's "cycles per pgbench transaction".
#
# pgbench's tables go into that database and are dropped at the end. BENCH_TIME is each custody benchmark's -benchtime (default 10000x: payments per
# sub-benchmark; 3000x for a quick look); BENCH is the -bench pattern (default: all of
# the above); extra arguments go to go test (-count 3, say). REFSET_BENCH_CUSTODY_PATH=twostep
# runs the BenchmarkCustody* ones with Select then Spend instead of Pay.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'custody-bench.sh: %s\n' "$*" >&2; }
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

cluster_trap_exit
# shellcheck disable=SC2119 # no settings beyond the cluster's defaults
cluster_for_bench
pgbench=$(cluster_pgbench) || die "pgbench not found (Debian: apt-get install postgresql-contrib or postgresql)"

out=$(mktemp)
remove_out() { rm -f "$out"; }
cluster_at_exit remove_out

tpcb() {
	for mode in simple prepared; do
		"$pgbench" -c 8 -j 2 -T 10 -n -M "$mode" "$REFSET_TEST_POSTGRES" 2>&1 |
			grep -E '^(tps|latency average)' | sed "s/^/pgbench -M $mode: /"
	done
}

pgbench_init "$pgbench" 10
tpcb | tee -a "$out"
go test -run '^$' -bench "${BENCH:-^Benchmark(SelectAndSpend|PayOneStatement|Custody)}" \
	-benchtime "${BENCH_TIME:-10000x}" -timeout 120m "$@" ./internal/test/bench/ | tee -a "$out"
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
