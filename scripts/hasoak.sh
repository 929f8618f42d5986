#!/usr/bin/env bash
# The failover soak of issue 24: block hand-overs and custody payments by 8
# clients on a throwaway HA PostgreSQL cluster (scripts/hacluster.sh) while its
# primary is killed and switched over, then the checks of internal/cmd/hasoak
# on the final primary.
#
#   scripts/hasoak.sh [--driver postgres|pgx] [--async] [--minutes N]
#                     [--kills K] [--switchovers S] [-- SOAK_FLAGS...]
#
#   --driver       the database/sql driver: postgres (lib/pq, default) or pgx
#   --async        asynchronous replication (REFSET_HA_REPLICATION=async): the
#                  soak then measures the acknowledged operations a failover
#                  loses instead of failing on them
#   --minutes      how long the clients work at least (default 4); the events
#                  are spread evenly over it, and the soak goes on until the
#                  last one is through, plus 10 seconds
#   --kills        kill -9 of the primary (default 3), each followed half an
#                  interval later by the restart of the killed node as standby
#   --switchovers  planned switchovers (default 3), alternating with the kills
#   -- FLAGS       passed on to the soak program (go run ./internal/cmd/hasoak -h),
#                  e.g. -- -retry 30s for store.Options.RetryUnavailable
#
# The soak prints, per failover, the seconds without a successful write and the
# unknown commits it left, then the row of the soak's table (SCALING.md,
# "The failover soak"). The exit status is non-zero when the cluster could not do
# what was asked or an invariant broke: an acknowledged operation lost (under
# synchronous replication), an operation reported failed yet there, books that
# do not balance, a token spent or locked twice, a chain not whole, clean-up
# finding something leaked or dangling. The cluster is stopped however the
# script ends; the soak's operation log, the event log and the cluster
# commands' output are kept in a directory it names when it fails, removed
# when it passes.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf 'hasoak.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
}

args=("$@")
driver=postgres replication=sync minutes=4 kills=3 switchovers=3
soak_flags=()
while (($# > 0)); do
	case $1 in
	--driver) driver=${2:?--driver needs a value} && shift ;;
	--async) replication=async ;;
	--minutes) minutes=${2:?--minutes needs a value} && shift ;;
	--kills) kills=${2:?--kills needs a value} && shift ;;
	--switchovers) switchovers=${2:?--switchovers needs a value} && shift ;;
	--)
		shift
		soak_flags=("$@")
		break
		;;
	*) usage ;;
	esac
	shift
done
[[ $driver == postgres || $driver == pgx ]] || die "--driver is postgres or pgx, not $driver"
[[ $minutes =~ ^[0-9]+$ && $kills =~ ^[0-9]+$ && $switchovers =~ ^[0-9]+$ ]] ||
	die "--minutes, --kills and --switchovers take whole numbers"

# ------------------------------------------------------------ outside
# The script runs twice. As given (HASOAK_WORK unset) it builds the soak, then
# has `scripts/hacluster.sh run` start the cluster, run this script again
# inside it, and stop the cluster however that ends, Ctrl-C included. The
# cluster's chatter goes to hacluster.log; our messages and the soak's report
# reach the terminal through fd 3.
if [[ -z ${HASOAK_WORK:-} ]]; then
	command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH"
	work=$(mktemp -d "${TMPDIR:-/tmp}/refset-hasoak.XXXXXX")
	# A state file of our own: another cluster of scripts/hacluster.sh (the
	# default state file's) may be running, and must be left alone.
	export REFSET_HA_STATE=$work/cluster.state HASOAK_WORK=$work
	# shellcheck disable=SC2317 # run by the EXIT trap
	keep_or_remove() {
		local rc=$?
		if ((rc == 0)); then
			rm -rf "$work"
		else
			log "kept $work: the soak's operations (ops.jsonl), the event log (events.log), the cluster's output (hacluster.log)"
		fi
		exit "$rc"
	}
	trap keep_or_remove EXIT
	log "building the soak"
	go build -o "$work/soak" ./internal/cmd/hasoak
	if [[ $replication == async ]]; then
		export REFSET_HA_REPLICATION=async
	fi
	log "starting the HA cluster ($replication replication); its output goes to $work/hacluster.log"
	exec 3>&2
	scripts/hacluster.sh run "${BASH_SOURCE[0]}" "${args[@]}" 2>>"$work/hacluster.log"
	exit 0
fi

# ------------------------------------------------------------ inside
# REFSET_TEST_HA_DSN is set; stderr is hacluster.log, fd 3 the terminal.
log() { printf 'hasoak.sh: %s\n' "$*" >&3; }
work=$HASOAK_WORK
[[ -n ${REFSET_TEST_HA_DSN:-} ]] || die "scripts/hacluster.sh run set no REFSET_TEST_HA_DSN"
events=$work/events.log
: >"$events"
"$work/soak" -driver "$driver" -duration "${minutes}m" -events "$events" -replication "$replication" \
	-ops "$work/ops.jsonl" "${soak_flags[@]}" 2>&3 &
soak_pid=$!
# Should this script end first (an error, a signal), the soak goes with it.
trap 'rc=$?; [[ -n $soak_pid ]] && kill "$soak_pid" 2>/dev/null; exit $rc' EXIT

# event KIND COMMAND runs scripts/hacluster.sh COMMAND and appends its line to
# the event log: KIND, when it began and ended (epoch seconds), ok or failed.
event() {
	local kind=$1 cmd=$2 t0 status=ok
	t0=$(date +%s.%N)
	scripts/hacluster.sh "$cmd" >&2 || status=failed
	printf '%s %s %s %s\n' "$kind" "$t0" "$(date +%s.%N)" "$status" >>"$events"
	log "$kind done ($status) after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s"
	[[ $status == ok ]]
}

# wait_until SECONDS sleeps until SECONDS after the soak started, or fails
# when the soak has ended early (it could not set up, or was killed).
started=$SECONDS
wait_until() {
	while ((SECONDS - started < $1)); do
		kill -0 "$soak_pid" 2>/dev/null || return 1
		sleep 1
	done
}

# Kills and switchovers alternate, a kill first, evenly spread over the run;
# the node a kill took down comes back half an interval later, so that the
# cluster also runs a while short of a node.
total=$((kills + switchovers))
interval=$((minutes * 60 / (total + 1)))
((interval >= 20)) || log "warning: only ${interval}s between events; a kill and its restart take about 15s"
k=0 s=0 complete=
for ((i = 1; i <= total; i++)); do
	wait_until $((i * interval)) || break
	if ((k < kills && (k <= s || s >= switchovers))); then
		k=$((k + 1))
		event kill kill-primary || break
		wait_until $((i * interval + interval / 2)) || break
		event restart restart-killed || break
	else
		s=$((s + 1))
		event switchover switchover || break
	fi
	((i < total)) || complete=1
done
((total > 0)) || complete=1
echo 'done' >>"$events"

rc=0
wait "$soak_pid" || rc=$?
soak_pid=
[[ -n $complete ]] || die "the events stopped early: the soak ended or a cluster command failed (see $work/hacluster.log)"
((rc == 0)) || die "the soak failed (exit status $rc)"
log "passed: $k kills, $s switchovers, $replication replication, $driver"
