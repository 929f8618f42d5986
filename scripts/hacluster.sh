#!/usr/bin/env bash
# The throwaway HA PostgreSQL cluster (scripts/lib/hacluster.sh: a
# pg_auto_failover monitor and three data nodes on 127.0.0.1, a primary and
# two standbys) as one command, for trying failovers by hand and for the
# failover tests:
#
#   scripts/hacluster.sh start          start it (about 10s); prints the export
#                                       line of REFSET_TEST_HA_DSN on stdout
#   scripts/hacluster.sh dsn            print the multi-host DSN
#   scripts/hacluster.sh status         the nodes' states and the replication
#   scripts/hacluster.sh switchover     planned failover; waits until writes
#                                       commit on the new primary, then until
#                                       the nodes have settled
#   scripts/hacluster.sh kill-primary   kill -9 of the primary's pg_autoctl and
#                                       postmaster; waits the same way
#   scripts/hacluster.sh restart-killed bring the killed nodes back as standbys
#   scripts/hacluster.sh stop           stop every process of it, say which,
#                                       and remove its files
#   scripts/hacluster.sh run CMD...     start, run CMD with REFSET_TEST_HA_DSN
#                                       set, stop (also when CMD fails)
#
# Environment:
#   REFSET_HA_STATE        the state file (default /tmp/refset-ha.state):
#                          start leaves the cluster running after it returns,
#                          and the other commands find it there; one cluster
#                          per state file.
#   REFSET_HA_REPLICATION  at start: sync (the default; every commit waits
#                          for one of the two standbys, also while one node is
#                          down) or async (commits wait for none).
#
# Each failover command prints the seconds until a write through the DSN
# committed on another node, and until the nodes settled.
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
		# A state file whose cluster has gone (a machine restarted, a
		# directory removed by hand) is swept; a running cluster is not.
		if ha_load_state 2>/dev/null && [[ -n $(ha_pids) ]]; then
			die "a cluster runs ($ha_state_file): scripts/hacluster.sh stop first"
		fi
		ha_stop >&2 || die "could not clear the cluster of $ha_state_file"
		rm -f "$ha_state_file"
	fi
	# Stop what was started if starting fails half-way; not on success.
	trap 'rc=$?; if ((rc != 0)); then set +e; ha_stop >&2; fi; exit $rc' EXIT
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
	;;
restart-killed)
	ha_load_state
	ha_restart_killed
	;;
stop)
	if [[ ! -f $ha_state_file ]]; then
		log "no HA cluster to stop ($ha_state_file not found)"
		exit 0
	fi
	# Even when its directory is gone: ha_stop finds the processes anyway.
	ha_load_state || true
	ha_stop
	rm -f "$ha_state_file"
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
