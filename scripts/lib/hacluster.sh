# shellcheck shell=bash
# A throwaway high-availability PostgreSQL cluster on 127.0.0.1, for the tests
# and soaks of issue 24 that need a real failover: pg_auto_failover (Debian's
# postgresql-15-auto-failover) with a monitor and two data nodes, a primary and
# a synchronous standby, all in one temporary directory. Sourced, never run:
#
#   log() { printf 'my-script: %s\n' "$*" >&2; }
#   source scripts/lib/hacluster.sh   # sources cluster.sh for its helpers
#   ha_trap_exit                      # stop everything however the script ends
#   ha_start                          # exports REFSET_TEST_HA_DSN
#   ha_switchover                     # or ha_kill_primary; both wait for writes
#
# pg_auto_failover rather than Patroni: it needs no consensus store (etcd) and
# no Python stack, its monitor is one more PostgreSQL server started the way
# the nodes are, and with two nodes it runs synchronous replication out of the
# box (synchronous_standby_names = ANY 1, number_sync_standbys = 0), which is
# the mode refset's "nothing acknowledged is lost" needs.
#
# Unlike cluster.sh the servers keep durability on (fsync, synchronous_commit):
# a failover test on a cluster that may lose acknowledged commits would prove
# nothing. The state (directory, ports, DSN) is written to $ha_state_file so
# that scripts/hacluster.sh can start the cluster in one process and switch it
# over or stop it from another.

# shellcheck source=scripts/lib/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

ha_dir=          # the temporary directory holding everything below
ha_monitor_port= # the monitor's port
ha_ports=()      # the data nodes' ports, node1 first
ha_state_file=${REFSET_HA_STATE:-/tmp/refset-ha.state}
ha_nodes=2

# ha_install sets cluster_bindir and makes sure pg_autoctl is there, installing
# the Debian packages (as root) when it is not.
ha_install() {
	cluster_install_server
	command -v pg_autoctl >/dev/null 2>&1 && return 0
	log "pg_autoctl not found; installing pg_auto_failover with apt-get"
	apt_install "postgresql-$(basename "$(dirname "$cluster_bindir")")-auto-failover" pg-auto-failover-cli ||
		die "pg_autoctl not found; install pg_auto_failover (Debian: postgresql-15-auto-failover)"
}

# as_ha runs a pg_autoctl command as the cluster's OS user. pg_autoctl keeps
# its configuration and state under XDG_CONFIG_HOME and XDG_DATA_HOME, and
# pid files under XDG_RUNTIME_DIR: pointing them into the temporary directory
# keeps the postgres user's home clean and lets several clusters run at once.
as_ha() {
	local env=(env "XDG_CONFIG_HOME=$ha_dir/config" "XDG_DATA_HOME=$ha_dir/share"
		"XDG_RUNTIME_DIR=$ha_dir/run" "PG_CONFIG=$cluster_bindir/pg_config"
		"PATH=$cluster_bindir:$PATH" PGHOST=127.0.0.1)
	if is_root; then
		(cd "$ha_dir" && runuser -u postgres -- "${env[@]}" "$@")
	else
		(cd "$ha_dir" && "${env[@]}" "$@")
	fi
}

ha_monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$ha_monitor_port/pg_auto_failover?sslmode=disable"; }

# ha_monitor_sql PSQL_ARGS... runs psql on the monitor's database.
# As the superuser postgres: autoctl_node may not ALTER SYSTEM.
ha_monitor_sql() {
	"$cluster_bindir/psql" -X -q -v ON_ERROR_STOP=1 \
		"host=127.0.0.1 port=$ha_monitor_port user=postgres dbname=pg_auto_failover sslmode=disable connect_timeout=2" "$@"
}

# ha_node_sql PORT PSQL_ARGS... runs psql as postgres on a data node.
ha_node_sql() {
	local port=$1
	shift
	"$cluster_bindir/psql" -X -q -v ON_ERROR_STOP=1 \
		"host=127.0.0.1 port=$port user=postgres dbname=refset_test sslmode=disable connect_timeout=2" "$@"
}

# ha_dsn prints the key=value DSN of database refset_test on every node.
# Both lib/pq (1.12+) and pgx take comma-separated hosts and ports and try
# them in order; target_session_attrs=read-write makes them skip a standby, so
# the same DSN finds whichever node is primary now. connect_timeout bounds
# the wait on a node that is down rather than refusing.
ha_dsn() {
	local hosts ports
	hosts=$(printf '127.0.0.1,%.0s' "${ha_ports[@]}")
	ports=$(printf '%s,' "${ha_ports[@]}")
	echo "host=${hosts%,} port=${ports%,} user=postgres dbname=refset_test sslmode=disable connect_timeout=2 target_session_attrs=read-write"
}

# ha_start starts the monitor and the data nodes, waits until one is primary
# and the other a streaming synchronous standby, creates the table the
# timing probes write, and exports REFSET_TEST_HA_DSN.
ha_start() {
	ha_install
	is_root && { id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' OS user"; }
	if is_root; then
		ha_dir=$(mktemp -d /tmp/refset-ha.XXXXXX)
		chown postgres "$ha_dir"
	else
		ha_dir=$(mktemp -d "${TMPDIR:-/tmp}/refset-ha.XXXXXX")
	fi
	# as_pg (cluster.sh) runs in cluster_dir.
	cluster_dir=$ha_dir
	as_pg mkdir -p "$ha_dir/config" "$ha_dir/share" "$ha_dir/run"
	as_pg chmod 700 "$ha_dir/run"
	local started_at=$SECONDS i

	ha_monitor_port=$(pick_port) || die "no free TCP port"
	ha_save_state
	ha_spawn monitor create monitor --pgdata "$ha_dir/monitor" --pgport "$ha_monitor_port" \
		--hostname 127.0.0.1 --auth trust --no-ssl --pgctl "$cluster_bindir/pg_ctl" --run
	ha_wait "the monitor" 60 ha_monitor_sql -c 'SELECT 1 FROM pgautofailover.formation' || ha_fail monitor
	# The defaults wait 20-30 seconds before calling a node dead, made for
	# real networks; on loopback a node that misses a second of health checks
	# is gone, and a test that waits less runs more failovers. Then the
	# monitor waits primary_demote_timeout (30s) before promoting, for the
	# old primary's keeper to demote itself once it has lost the monitor for
	# network_partition_timeout (20s): both are shortened, keeping the order
	# that prevents two primaries (ha_start sets the keepers' 3s below).
	ha_monitor_sql -c "ALTER SYSTEM SET pgautofailover.health_check_period = 1000" \
		-c "ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000" \
		-c "ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1" \
		-c "ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500" \
		-c "ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000" \
		-c "ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 5000" \
		-c "SELECT pg_reload_conf()" >/dev/null ||
		die "could not shorten the monitor's health checks"
	echo "pg_auto_failover monitor ready on 127.0.0.1:$ha_monitor_port after $((SECONDS - started_at))s"

	local n port
	for ((n = 1; n <= ha_nodes; n++)); do
		port=$(pick_port) || die "no free TCP port"
		while [[ " ${ha_ports[*]} " == *" $port "* || $port == "$ha_monitor_port" ]]; do
			port=$(pick_port) || die "no free TCP port"
		done
		ha_ports+=("$port")
		ha_save_state
		# One at a time: the second node must find the first primary to clone
		# it, and pg_auto_failover refuses two nodes registering at once.
		ha_spawn "node$n" create postgres --pgdata "$ha_dir/node$n" --pgport "$port" \
			--hostname 127.0.0.1 --name "node$n" --dbname refset_test --username postgres \
			--monitor "$(ha_monitor_uri)" --auth trust --no-ssl --pgctl "$cluster_bindir/pg_ctl" --run
		if ((n == 1)); then
			ha_wait node1 120 ha_states_are "single" || ha_fail node1
			ha_tune_primary "$port"
		fi
	done
	ha_wait "the standby" 180 ha_states_are "primary secondary" || ha_fail "node$ha_nodes"
	# The running keepers reload their configuration when it is set.
	for ((n = 1; n <= ha_nodes; n++)); do
		as_ha pg_autoctl config set --pgdata "$ha_dir/node$n" timeout.network_partition_timeout 3 >/dev/null ||
			die "could not set node$n's network_partition_timeout"
	done
	export REFSET_TEST_HA_DSN
	REFSET_TEST_HA_DSN=$(ha_dsn)
	ha_save_state
	"$cluster_bindir/psql" -X -q -v ON_ERROR_STOP=1 "$REFSET_TEST_HA_DSN" \
		-c 'CREATE TABLE IF NOT EXISTS ha_probe (at timestamptz NOT NULL DEFAULT now())' >/dev/null
	echo "HA cluster ready after $((SECONDS - started_at))s: $(ha_states)"
}

# ha_tune_primary PORT sets the first node's settings before the standby
# clones it, so that they travel in its postgresql.auto.conf.
#
# pg_autoctl's pg_basebackup asks for a spread checkpoint, paced over
# checkpoint_completion_target of checkpoint_timeout: 90 seconds of a
# two-minute start. An immediate CHECKPOINT first leaves that one nothing
# to write, and a completion target of 0 stops it pacing what is left.
#
# fsync=off: a kill -9 of a postmaster loses nothing the kernel's page cache
# holds, so a test of process kills does not need fsync, and every commit
# waits for the standby anyway (synchronous_commit stays on).
ha_tune_primary() {
	ha_node_sql "$1" -c "ALTER SYSTEM SET fsync = off" -c "ALTER SYSTEM SET checkpoint_completion_target = 0" \
		-c "ALTER SYSTEM SET lc_messages = 'C'" -c "SELECT pg_reload_conf()" -c "CHECKPOINT" >/dev/null ||
		die "could not set the primary's settings"
}

# ha_spawn NAME PG_AUTOCTL_ARGS... starts `pg_autoctl ARGS` in the
# background, in a session of its own (setsid) so that ha_stop and
# ha_kill_primary can signal the node's whole process tree, logging to
# NAME.log. Its process group id is kept in NAME.pgid.
ha_spawn() {
	local name=$1
	shift
	as_pg touch "$ha_dir/$name.log"
	# The node outlives this script, so it must hold none of its descriptors:
	# bash keeps copies of stdout while a redirected function runs (fd 10+),
	# and a caller reading our output through a pipe would wait for the
	# cluster to end.
	(
		exec >>"$ha_dir/$name.log" 2>&1 </dev/null
		local fd
		for fd in $(ls /proc/$BASHPID/fd 2>/dev/null); do
			((fd > 2)) && eval "exec $fd>&-"
		done 2>/dev/null
		as_ha setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$ha_dir/$name.pgid" pg_autoctl "$@"
	) &
	disown 2>/dev/null || true
}

# ha_wait WHAT SECONDS COMMAND... runs COMMAND every half second until it
# succeeds, at most SECONDS long.
ha_wait() {
	local what=$1 limit=$2 deadline
	shift 2
	deadline=$((SECONDS + limit))
	while ((SECONDS < deadline)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	log "$what not ready within ${limit}s"
	return 1
}

ha_fail() {
	log "pg_autoctl's log of $1 (last lines):"
	tail -n 40 "$ha_dir/$1.log" >&2 2>/dev/null
	die "the HA cluster failed to start"
}

# ha_states prints the nodes' reported states as NAME:STATE, in port order.
ha_states() {
	ha_monitor_sql -At -c "SELECT string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' ' ORDER BY nodename) FROM pgautofailover.node"
}

# ha_states_are "STATE..." succeeds when the nodes' reported states, sorted,
# are those, and each has reached its goal.
ha_states_are() {
	local got
	got=$(ha_monitor_sql -At -c "SELECT string_agg(reportedstate::text, ' ' ORDER BY reportedstate::text) FROM pgautofailover.node WHERE reportedstate = goalstate HAVING count(*) = (SELECT count(*) FROM pgautofailover.node)") || return 1
	[[ $got == "$(tr ' ' '\n' <<<"$1" | sort | xargs)" ]]
}

# ha_primary_port prints the port of the node the monitor has as primary.
ha_primary_port() {
	ha_monitor_sql -At -c "SELECT nodeport FROM pgautofailover.node WHERE reportedstate IN ('primary', 'wait_primary', 'single') AND goalstate = reportedstate LIMIT 1"
}

# ha_probe_write succeeds when a write through the multi-host DSN commits.
ha_probe_write() {
	PGCONNECT_TIMEOUT=2 "$cluster_bindir/psql" -X -q -v ON_ERROR_STOP=1 "$(ha_dsn)" \
		-c 'INSERT INTO ha_probe DEFAULT VALUES' >/dev/null 2>&1
}

# ha_wait_writes SINCE WHAT waits (up to 120s) for a write through the DSN to
# commit, then prints how long after SINCE (epoch seconds, fractional) it did.
ha_wait_writes() {
	local since=$1 what=$2 deadline=$((SECONDS + 120))
	until ha_probe_write; do
		((SECONDS < deadline)) || die "$what: no write committed within 120s ($(ha_states))"
		sleep 0.1
	done
	echo "$what: writes commit again after $(ha_elapsed "$since")s ($(ha_states))"
}

ha_now() { date +%s.%N; }
ha_elapsed() { awk -v a="$1" -v b="$(ha_now)" 'BEGIN { printf "%.1f", b - a }'; }

# ha_switchover has the monitor promote the standby (a planned failover) and
# waits until writes commit on the new primary.
ha_switchover() {
	local before t0
	before=$(ha_primary_port)
	t0=$(ha_now)
	as_ha pg_autoctl perform switchover --pgdata "$ha_dir/node1" --wait 120 >>"$ha_dir/switchover.log" 2>&1 ||
		log "pg_autoctl perform switchover failed or timed out (see $ha_dir/switchover.log)"
	ha_wait_writes "$t0" "switchover from port $before"
	ha_wait "both nodes" 120 ha_states_are "primary secondary" || log "the old primary has not rejoined yet: $(ha_states)"
}

# ha_kill_primary kills the primary node with SIGKILL, as a lost machine: its
# pg_autoctl supervisor first (else it would restart PostgreSQL at once and
# no failover would happen), then its postmaster. Its backends notice the
# postmaster is gone and exit. Waits until writes commit on the new primary;
# the killed node stays down until ha_restart_node.
ha_kill_primary() {
	local port n pid t0
	port=$(ha_primary_port) || die "no primary to kill ($(ha_states))"
	for ((n = 1; n <= ${#ha_ports[@]}; n++)); do
		[[ ${ha_ports[n - 1]} == "$port" ]] && break
	done
	t0=$(ha_now)
	kill -KILL -- "-$(cat "$ha_dir/node$n.pgid")" 2>/dev/null || true
	pid=$(head -n 1 "$ha_dir/node$n/postmaster.pid" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null
	echo "killed node$n (port $port, postmaster $pid) with SIGKILL"
	ha_wait_writes "$t0" "kill -9 of node$n"
	ha_killed_node=$n
}

# ha_restart_node N starts node N's pg_autoctl again (after ha_kill_primary):
# it rejoins as a standby, rewinding its data directory if it must, and
# waits until both nodes are back in sync.
ha_restart_node() {
	local n=$1 t0
	t0=$(ha_now)
	ha_spawn "node$n" run --pgdata "$ha_dir/node$n"
	ha_wait "node$n" 180 ha_states_are "primary secondary" || ha_fail "node$n"
	echo "node$n back as standby after $(ha_elapsed "$t0")s ($(ha_states))"
}

ha_status() {
	echo "monitor 127.0.0.1:$ha_monitor_port, nodes on ports ${ha_ports[*]}, directory $ha_dir"
	echo "states: $(ha_states)"
	as_ha pg_autoctl show state --pgdata "$ha_dir/node1" 2>/dev/null || true
}

# ha_save_state and ha_load_state keep what another process needs to find
# the cluster. The file is sourced, so only values we generated go in it.
ha_save_state() {
	{
		printf 'ha_dir=%q\nha_monitor_port=%q\ncluster_bindir=%q\n' "$ha_dir" "$ha_monitor_port" "$cluster_bindir"
		printf 'ha_ports=(%s)\n' "${ha_ports[*]}"
	} >"$ha_state_file"
}

ha_load_state() {
	[[ -f $ha_state_file ]] || die "no HA cluster running ($ha_state_file not found)"
	# shellcheck disable=SC1090
	source "$ha_state_file"
	cluster_dir=$ha_dir
	[[ -d $ha_dir ]] || die "the HA cluster's directory $ha_dir is gone"
	export REFSET_TEST_HA_DSN
	REFSET_TEST_HA_DSN=$(ha_dsn)
}

# ha_stop stops the nodes and the monitor and removes their files. SIGTERM
# on pg_autoctl is its fast shutdown, which stops its PostgreSQL too; what is
# still there after 10 seconds gets SIGKILL, postmasters included.
ha_stop() {
	[[ -n $ha_dir && -d $ha_dir ]] || return 0
	local f pg i pid
	for f in "$ha_dir"/node*.pgid "$ha_dir"/monitor.pgid; do
		[[ -f $f ]] && kill -TERM -- "-$(cat "$f")" 2>/dev/null
	done
	for ((i = 0; i < 100; i++)); do
		pg=0
		for f in "$ha_dir"/node*/postmaster.pid "$ha_dir"/monitor/postmaster.pid; do
			[[ -f $f ]] && kill -0 "$(head -n 1 "$f" 2>/dev/null)" 2>/dev/null && pg=1
		done
		((pg == 0)) && break
		sleep 0.1
	done
	# The pg_autoctl supervisors exit after their PostgreSQL; give them a
	# moment, so that nothing of the cluster outlives ha_stop.
	for f in "$ha_dir"/node*.pgid "$ha_dir"/monitor.pgid; do
		for ((i = 0; i < 30; i++)); do
			[[ -f $f ]] && kill -0 -- "-$(cat "$f")" 2>/dev/null || break
			sleep 0.1
		done
		[[ -f $f ]] && kill -KILL -- "-$(cat "$f")" 2>/dev/null
	done
	for f in "$ha_dir"/node*/postmaster.pid "$ha_dir"/monitor/postmaster.pid; do
		[[ -f $f ]] && pid=$(head -n 1 "$f" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null
	done
	rm -rf "$ha_dir"
	[[ -f $ha_state_file ]] && grep -qF "ha_dir=$(printf %q "$ha_dir")" "$ha_state_file" && rm -f "$ha_state_file"
	ha_dir='' ha_ports=()
	return 0
}

# ha_trap_exit stops the HA cluster however the script ends, keeping its
# exit status.
ha_trap_exit() {
	trap 'rc=$?; set +e; ha_stop; exit $rc' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}
