#!/usr/bin/env bash
# The throwaway HA PostgreSQL cluster (scripts/lib/hacluster.sh) as one
# command, for trying failovers by hand and for the failover tests:
#
#   scripts/hacluster.sh start          start it; prints the export line of
#                                       REFSET_TEST_HA_DSN on stdout
#   scripts/hacluster.sh dsn            print the multi-host DSN
#   scripts/hacluster.sh status         the monitor's view of the nodes
#   scripts/hacluster.sh switchover     planned failover; waits for writes
#   scripts/hacluster.sh kill-primary   kill -9 of the primary node; waits
#                                       for writes on the new primary
#   scripts/hacluster.sh restart-killed bring the killed node back as standby
#   scripts/hacluster.sh stop           stop it and remove its files
#   scripts/hacluster.sh run CMD...     start, run CMD with REFSET_TEST_HA_DSN
#                                       set, stop (also when CMD fails)
#
# start leaves the cluster running after the command returns, so its state
# lives in a file ($REFSET_HA_STATE, default /tmp/refset-ha.state) that the
# other commands read; one cluster per state file.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf 'hacluster.sh: %s\n' "$*" >&2; }
# shellcheck source=scripts/lib/hacluster.sh
source scripts/lib/hacluster.sh

cmd=${1:-}
shift || true
case $cmd in
start)
	if [[ -f $ha_state_file ]]; then
		die "a cluster may already run ($ha_state_file exists): scripts/hacluster.sh stop first"
	fi
	# Stop what was started if starting fails half-way; not on success.
	trap 'rc=$?; if ((rc != 0)); then set +e; ha_stop; fi; exit $rc' EXIT
	ha_start >&2
	printf 'export REFSET_TEST_HA_DSN=%q\n' "$REFSET_TEST_HA_DSN"
	;;
dsn)
	ha_load_state
	echo "$REFSET_TEST_HA_DSN"
	;;
status)
	ha_load_state
	ha_status
	;;
switchover)
	ha_load_state
	ha_switchover
	;;
kill-primary)
	ha_load_state
	ha_kill_primary
	echo "$ha_killed_node" >"$ha_dir/killed"
	;;
restart-killed)
	ha_load_state
	[[ -f $ha_dir/killed ]] || die "no node was killed"
	ha_restart_node "$(cat "$ha_dir/killed")"
	rm -f "$ha_dir/killed"
	;;
stop)
	if [[ -f $ha_state_file ]]; then
		ha_load_state
		ha_stop
	fi
	;;
run)
	(($# > 0)) || die "run: no command given"
	ha_trap_exit
	ha_start >&2
	"$@"
	;;
*)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
