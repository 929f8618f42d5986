#!/usr/bin/env bash
# Measures refset with many replicas on one PostgreSQL and on large sets:
#
#   scripts/scale-bench.sh quick|full [go test flags...]
#
# on the server of REFSET_TEST_POSTGRES (a lib/pq DSN) when set, else on a throwaway
# cluster started on 127.0.0.1 and removed again at exit (scripts/lib/cluster.sh),
# with max_connections enough for the replicas below.
#
# 1. BenchmarkReplicasCustody and BenchmarkReplicasReceive (internal/test/bench/replicas_test.go):
#    custody payers (Select then Spend) and blockmanager receivers (Put), each replica
#    an OS process with its own pool, for each replica count: throughput, lost lock
#    races, deadlocks and retries, and the CPU the server spends (server-cores: where
#    it nears the machine's cores, the server is saturated);
# 2. BenchmarkScaleSet and BenchmarkScaleBranch (internal/test/bench/scale_test.go): Add,
#    Get miss, a collect of garbage and a Branch walk on sets of each size, bulk-loaded
#    with COPY.
#
# quick: a check that everything runs, cheap enough for a loaded laptop (1 and 2
#        replicas, 10,000 tokens, sets of 10,000 and 100,000); its figures mean little.
# full:  what SCALING.md records: 1, 2, 4, 8 and 16 replicas on 100,000 tokens of 1,000
#        owners, sets of 1,000,000 and 10,000,000 (loading 10,000,000 takes minutes and
#        about 5 GB of disk). Run it on a quiet machine.
#
# Every setting can be overridden from the environment: REFSET_BENCH_REPLICAS,
# REFSET_BENCH_WORKERS (goroutines per replica), REFSET_BENCH_OWNERS,
# REFSET_BENCH_TOKENS, REFSET_BENCH_BRANCH (blocks per Put), REFSET_BENCH_SCALE,
# REFSET_BENCH_GARBAGE, REFSET_BENCH_WALK; REPLICA_OPS and SCALE_OPS are the
# -benchtime of each part. Extra arguments go to go test (-count 3, say). The
# benchmarks need max_connections of at least replicas x workers + a few (an outside
# server must have them; the throwaway cluster gets them).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'scale-bench.sh: %s\n' "$*" >&2; }
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

mode=${1:-}
case $mode in
quick)
	: "${REFSET_BENCH_REPLICAS:=1,2}" "${REFSET_BENCH_OWNERS:=100}" "${REFSET_BENCH_TOKENS:=10000}"
	: "${REFSET_BENCH_SCALE:=10000,100000}" "${REFSET_BENCH_GARBAGE:=5000}" "${REFSET_BENCH_WALK:=1000}"
	: "${REPLICA_OPS:=500x}" "${SCALE_OPS:=20x}"
	;;
full)
	: "${REFSET_BENCH_REPLICAS:=1,2,4,8,16}" "${REFSET_BENCH_OWNERS:=1000}" "${REFSET_BENCH_TOKENS:=100000}"
	: "${REFSET_BENCH_SCALE:=1000000,10000000}" "${REFSET_BENCH_GARBAGE:=100000}" "${REFSET_BENCH_WALK:=10000}"
	: "${REPLICA_OPS:=20000x}" "${SCALE_OPS:=10s}"
	;;
*)
	log "usage: $0 quick|full [go test flags...]"
	exit 2
	;;
esac
shift

# needed_connections prints max_connections for the largest replica count, each
# replica with REFSET_BENCH_WORKERS connections (default 2), plus room for the
# benchmark's own pools and the superuser; never below the cluster's default 300.
needed_connections() {
	local most=0 n
	for n in ${REFSET_BENCH_REPLICAS//,/ }; do
		if ((n > most)); then most=$n; fi
	done
	n=$((most * ${REFSET_BENCH_WORKERS:-2} + 50))
	echo $((n > 300 ? n : 300))
}

cluster_trap_exit
cluster_for_bench "max_connections=$(needed_connections)"

export REFSET_BENCH_REPLICAS REFSET_BENCH_OWNERS REFSET_BENCH_TOKENS \
	REFSET_BENCH_SCALE REFSET_BENCH_GARBAGE REFSET_BENCH_WALK
log "$mode: replicas $REFSET_BENCH_REPLICAS, $REFSET_BENCH_TOKENS tokens of $REFSET_BENCH_OWNERS owners, sets of $REFSET_BENCH_SCALE"

go test -run '^$' -bench '^BenchmarkReplicas' -benchtime "$REPLICA_OPS" -timeout 120m "$@" ./internal/test/bench/
# A duration, not a count, in full mode: one Collect of 100,000 objects (loaded and made
# due before each) takes seconds, a Get miss a fraction of a millisecond, and a count
# high enough for the one would make the other run for hours.
go test -run '^$' -bench '^BenchmarkScale' -benchtime "$SCALE_OPS" -timeout 240m "$@" ./internal/test/bench/
