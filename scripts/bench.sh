#!/usr/bin/env bash
# The one benchmark command: every paired benchmark of the speed targets, in one go,
# then one table (path, refset, reference, ratio, target, met) from
# internal/cmd/benchtable.
#
#   scripts/bench.sh            quick mode: each benchmark once, shorter runs (minutes)
#   scripts/bench.sh --full     full mode: BENCH_COUNT runs (default 2) of everything,
#                               and BENCHMARKS.md regenerated from the output
#   scripts/bench.sh --update   (either mode) regenerate BENCHMARKS.md from this run
#   scripts/bench.sh --durable  (with any of the above) durable settings: PostgreSQL
#                               with fsync, synchronous_commit and full_page_writes
#                               on, its data directory on disk (BENCH_DATA_DIR);
#                               SQLite as always (WAL, synchronous=FULL). BENCHMARKS.md
#                               keeps one table per setting: --full --durable
#                               regenerates the durable one, --full the other.
#
# Every benchmark runs on analyzed tables (ANALYZE once its setup rows are in); the
# core paths (Add, Get miss, Complete) run once more on tables grown 100,000 blocks
# past their statistics, and the walks (Branch, BranchDiff) on tables analyzed when
# they held 1,000 blocks (their grown sub-benchmarks, which the walks' pattern
# below takes with the rest). Put and clean-up grow their tables past the
# statistics themselves (BENCHMARKS.md says how). The server keeps its default JIT
# and planner settings.
#
# What runs (each benchmark beside the same work hand-written with sqlx, in the same
# run; see internal/test/bench/doc.go): the core (Add, Get miss, Complete), the block
# manager (Put, Branch, BranchDiff), clean-up (garbage among 10k and 1M live objects,
# 100k of 1M, abandoned chains) and, on PostgreSQL, custody (payments by 8 replicas)
# between two runs of pgbench (TPC-B-like, 8 clients, simple protocol), the server's
# own ceiling on the same machine.
#
# Environment:
#   REFSET_TEST_POSTGRES   lib/pq DSN of a PostgreSQL server where schemas may be
#                          created; the Postgres benchmarks run through lib/pq and pgx.
#                          When unset, a throwaway cluster is started on 127.0.0.1 and
#                          removed again at exit (scripts/lib/cluster.sh: as root the
#                          PostgreSQL packages are installed with apt-get); only where
#                          no server can be had is SQLite measured alone.
#   BENCH_COUNT            runs of everything in full mode (default 2).
#   BENCH_OUT              where the raw go test output goes (default bench.out).
#   BENCH_DATA_DIR         --durable: where the throwaway cluster's data directory
#                          goes (default /var/tmp); it must not be tmpfs.
#   BENCH_ONLY             a go test -bench pattern: run only the benchmarks it
#                          matches (none of pgbench), each for BENCH_TIME (default
#                          1x), e.g. BENCH_ONLY='^BenchmarkAdd$/sqlite/paired$'. The
#                          table shows what ran; --update and --full refuse it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'bench.sh: %s\n' "$*" >&2; }
# The throwaway cluster, and die (log, then exit 1).
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

mode=quick
update=
durable=
for arg in "$@"; do
	case $arg in
	--full) mode=full ;;
	--durable) durable=1 ;;
	--quick) mode=quick ;;
	--update) update=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument $arg (see --help)" ;;
	esac
done
[[ $mode == full ]] && update=1
if [[ -n ${BENCH_ONLY:-} && -n $update ]]; then
	die "BENCH_ONLY runs a subset: it cannot regenerate BENCHMARKS.md (drop --full/--update)"
fi

command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH"
out=${BENCH_OUT:-bench.out}

# Quick mode runs the same benchmarks at the same sizes (the targets are about those
# sizes) but each once, with fewer iterations where a benchmark averages many.
if [[ $mode == full ]]; then
	count=${BENCH_COUNT:-2}
	core_time=2s branch_time=10x collect_time=3x custody_time=10000x
else
	count=1
	core_time=3000x branch_time=5x collect_time=1x custody_time=3000x
fi

# The databases: SQLite through go-sqlite3 ("sqlite") and modernc.org/sqlite
# ("sqlite-purego"), PostgreSQL through lib/pq ("postgres") and pgx.
dbs='(sqlite|sqlite-purego|postgres|pgx)'
pgbench=
cluster_trap_exit
if [[ -z ${REFSET_TEST_POSTGRES:-} ]] && ! cluster_can_start; then
	log "REFSET_TEST_POSTGRES is not set and no PostgreSQL server binaries are installed:"
	log "measuring SQLite only (install PostgreSQL, or set REFSET_TEST_POSTGRES to a server"
	log "of version 13 or later where you may create schemas)"
	dbs='(sqlite|sqlite-purego)'
else
	if [[ -n $durable ]]; then
		if [[ -n ${REFSET_TEST_POSTGRES:-} ]]; then
			log "--durable: measuring the server of REFSET_TEST_POSTGRES with its own settings"
		else
			# The throwaway cluster's files go to a disk: tmpfs would make every
			# fsync free, which is what this mode is not.
			export CLUSTER_PARENT=${BENCH_DATA_DIR:-/var/tmp}
			[[ -d $CLUSTER_PARENT ]] || die "BENCH_DATA_DIR $CLUSTER_PARENT is not a directory"
			fstype=$(stat -f -c %T "$CLUSTER_PARENT")
			[[ $fstype != tmpfs && $fstype != ramfs ]] ||
				die "$CLUSTER_PARENT is $fstype, not a disk: set BENCH_DATA_DIR to a directory on disk"
		fi
		cluster_for_bench fsync=on synchronous_commit=on full_page_writes=on
	else
		# shellcheck disable=SC2119 # no settings beyond the cluster's defaults
		cluster_for_bench
	fi
	if [[ -z ${BENCH_ONLY:-} ]]; then
		pgbench=$(cluster_pgbench) || die "pgbench not found (Debian: apt-get install postgresql-contrib)"
	fi
fi

# bench runs one go test of the benchmarks matching $1 for -benchtime $2.
bench() {
	go test -run '^$' -bench "$1" -benchtime "$2" -benchmem -count 1 -timeout 60m ./internal/test/bench/ 2>&1 |
		tee -a "$out"
	[[ ${PIPESTATUS[0]} -eq 0 ]] || die "go test failed (output above and in $out)"
}

# tpcb runs pgbench's TPC-B-like load for 10 s with 8 clients on the simple protocol
# and prints its tps as a benchmark line the table reads.
tpcb() {
	local tps
	tps=$("$pgbench" -c 8 -j 2 -T 10 -n -M simple "$REFSET_TEST_POSTGRES" 2>&1 |
		sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -n1)
	[[ -n $tps ]] || die "pgbench printed no tps"
	printf 'pgbench/simple/clients=8\t1\t%s tps\n' "$tps" | tee -a "$out"
}

: >"$out"
started=$(date -u '+%Y-%m-%d %H:%M UTC')
if [[ -n $pgbench ]]; then
	pgbench_init "$pgbench" 10 || die "pgbench -i failed"
fi
# One go test per group and run, rather than -count: the two sides of a paired
# benchmark are measured in one loop anyway, and runs spread over time show the
# machine's drift as the range the table prints.
for ((run = 1; run <= count; run++)); do
	log "run $run of $count ($mode mode)"
	if [[ -n ${BENCH_ONLY:-} ]]; then
		bench "$BENCH_ONLY" "${BENCH_TIME:-1x}"
		continue
	fi
	bench "^Benchmark(Add|GetMiss|Complete)\$/$dbs/paired\$" "$core_time"
	bench "^Benchmark(Add|GetMiss|Complete)\$/$dbs/grown/paired\$" "$core_time"
	# Eight goroutines writing at once (SQLite's group commit).
	bench "^Benchmark(Add|Complete)Concurrent\$/$dbs/paired\$" "$core_time"
	bench "^BenchmarkPutPaired\$/$dbs\$" 1x
	bench "^BenchmarkBranch(Diff)?\$/$dbs/" "$branch_time"
	bench "^Benchmark(CollectGarbage|Collect100kOf1M|CollectChain)\$/$dbs" "$collect_time"
	if [[ -n $pgbench ]]; then
		tpcb
		bench '^Benchmark(SelectAndSpend|PayOneStatement)$/(refset|paired)$' "$custody_time"
		bench '^BenchmarkCustody(Wallet|SmallPool|HotOwner|Statistics)$' "$custody_time"
		tpcb
	fi
done

machine="$(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1))"
machine+=", $(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo), $(go env GOVERSION)"
if [[ -n $pgbench ]]; then
	psql=$(dirname "$pgbench")/psql
	machine+=", PostgreSQL $("$psql" -XAtc 'SHOW server_version' "$REFSET_TEST_POSTGRES" 2>/dev/null || echo '?')"
fi
# What the run measured, read from the server rather than assumed, for the table's
# label.
measured='SQLite WAL, synchronous=FULL'
if [[ $dbs != sqlite ]]; then
	psql=${cluster_psql:-psql}
	pg=$("$psql" -XAt -F ' ' "$REFSET_TEST_POSTGRES" -c "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)
		FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'jit', 'shared_buffers')" 2>/dev/null) || pg='?'
	where=
	[[ -n $cluster_data ]] && where=" (data directory on $(stat -f -c %T "$cluster_data" 2>/dev/null || echo '?'))"
	measured="PostgreSQL $pg$where; $measured"
fi
log "measured ($([[ -n $durable ]] && echo durable || echo default) mode): $measured"
table_mode=default
[[ -n $durable ]] && table_mode=durable
args=(-in "$out" -date "$started" -machine "$machine" -command "scripts/bench.sh $*"
	-mode "$table_mode" -settings "$measured")
[[ -n $update ]] && args+=(-update BENCHMARKS.md)
echo
go run ./internal/cmd/benchtable "${args[@]}"
