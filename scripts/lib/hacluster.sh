# shellcheck shell=bash
# A throwaway high-availability PostgreSQL cluster on 127.0.0.1, for the tests
# and soaks of issue 24 that need a real failover: pg_auto_failover (Debian's
# postgresql-15-auto-failover) with a monitor and three data nodes, a primary
# and two standbys, all in one temporary directory. Sourced, never run:
#
#   log() { printf 'my-script: %s\n' "$*" >&2; }
#   source scripts/lib/hacluster.sh   # sources cluster.sh for its helpers
#   ha_trap_exit                      # stop everything however the script ends
#   ha_start                          # exports REFSET_TEST_HA_DSN
#   ha_switchover                     # or ha_kill_primary; both wait for writes
#   ha_restart_killed                 # the killed node rejoins as a standby
#
# pg_auto_failover rather than Patroni: it needs no consensus store (etcd) and
# no Python stack, and its monitor is one more PostgreSQL server started the
# way the nodes are.
#
# Replication is synchronous by default, the mode refset's "nothing
# acknowledged is lost" needs: both standbys are in the replication quorum and
# the formation's number_sync_standbys is 1, so the primary's
# synchronous_standby_names is ANY 1 (standby, standby) and every commit waits
# for one of them. Three data nodes rather than two because with two, losing
# the standby (or promoting it, once the old primary is dead) leaves a primary
# that either stops taking writes or, as pg_auto_failover does with
# number_sync_standbys 0, quietly commits asynchronously; with three, one node
# down still leaves a synchronous standby. REFSET_HA_REPLICATION=async at
# start takes both standbys out of the quorum (number_sync_standbys 0,
# replication-quorum false): synchronous_standby_names is empty and commits do
# not wait, to measure what a failover loses without it.
#
# Unlike cluster.sh the servers keep synchronous_commit on: a failover test on
# a cluster that may lose acknowledged commits would prove nothing.
#
# The state (directory, ports, replication) is written to $ha_state_file so
# that scripts/hacluster.sh can start the cluster in one process and switch it
# over or stop it from another. Every process of the cluster (pg_autoctl,
# PostgreSQL and its backends) has its working directory inside $ha_dir, which
# is how ha_stop finds them all, whatever happened to them meanwhile.

# shellcheck source=scripts/lib/cluster.sh
declare -F cluster_install_server >/dev/null || source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

ha_dir=          # the temporary directory holding everything below
ha_monitor_port= # the monitor's port
ha_ports=()      # the data nodes' ports, node1 first
ha_replication=  # sync or async
ha_state_file=${REFSET_HA_STATE:-/tmp/refset-ha.state}
ha_nodes=3

# ha_install sets cluster_bindir and makes sure pg_autoctl is there, installing
# the Debian packages (as root) when it is not.
ha_install() {
	cluster_install_server
	command -v pg_autoctl >/dev/null 2>&1 && return 0
	log "pg_autoctl not found; installing pg_auto_failover with apt-get"
	apt_install "postgresql-$(basename "$(dirname "$cluster_bindir")")-auto-failover" pg-auto-failover-cli ||
		die "pg_autoctl not found; install pg_auto_failover (Debian: postgresql-15-auto-failover)"
}

# as_ha runs a command as the cluster's OS user (postgres when we are root),
# in $ha_dir. pg_autoctl keeps its configuration and state under
# XDG_CONFIG_HOME and XDG_DATA_HOME, and pid files under XDG_RUNTIME_DIR:
# pointing them into the temporary directory keeps the postgres user's home
# clean and lets several clusters run at once.
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

# ha_sql PORT DATABASE PSQL_ARGS... runs psql as postgres on a server of the
# cluster, stopping at the first error. The superuser postgres, also on the
# monitor: its autoctl_node may not ALTER SYSTEM.
ha_sql() {
	local port=$1 db=$2
	shift 2
	"$cluster_bindir/psql" -X -q -v ON_ERROR_STOP=1 \
		"host=127.0.0.1 port=$port user=postgres dbname=$db sslmode=disable connect_timeout=2" "$@"
}

ha_monitor_sql() { ha_sql "$ha_monitor_port" pg_auto_failover "$@"; }

# ha_node_sql PORT PSQL_ARGS... runs psql on a data node's database.
ha_node_sql() {
	local port=$1
	shift
	ha_sql "$port" refset_test "$@"
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

# ha_free_port prints a free port that no other server of the cluster has
# been given yet.
ha_free_port() {
	local port
	port=$(pick_port) || die "no free TCP port"
	while [[ " ${ha_ports[*]} $ha_monitor_port " == *" $port "* ]]; do
		port=$(pick_port) || die "no free TCP port"
	done
	echo "$port"
}

# ha_start starts the monitor and the data nodes, waits until one is primary
# and the others streaming standbys with the replication asked for, creates
# the table the timing probes write, and exports REFSET_TEST_HA_DSN.
ha_start() {
	ha_replication=${REFSET_HA_REPLICATION:-sync}
	local quorum
	case $ha_replication in
	sync) quorum=true ;;
	async) quorum=false ;;
	*) die "REFSET_HA_REPLICATION must be sync or async, not '$ha_replication'" ;;
	esac
	ha_install
	is_root && { id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' OS user"; }
	if is_root; then
		ha_dir=$(mktemp -d /tmp/refset-ha.XXXXXX)
		chown postgres "$ha_dir"
	else
		ha_dir=$(mktemp -d "${TMPDIR:-/tmp}/refset-ha.XXXXXX")
	fi
	as_ha mkdir -p "$ha_dir/config" "$ha_dir/share" "$ha_dir/run"
	as_ha chmod 700 "$ha_dir/run"
	local started_at=$SECONDS n

	ha_monitor_port=$(ha_free_port)
	for ((n = 1; n <= ha_nodes; n++)); do
		ha_ports+=("$(ha_free_port)")
	done
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

	# node1 first: the others clone it once it is primary ("single").
	ha_spawn_node 1 "$quorum"
	ha_wait node1 120 ha_states_are "single" || ha_fail node1
	ha_tune_primary "${ha_ports[0]}"
	# The standbys at once: the monitor registers one node at a time, and
	# pg_autoctl retries while another holds the lock.
	for ((n = 2; n <= ha_nodes; n++)); do
		ha_spawn_node "$n" "$quorum"
	done
	ha_wait "the standbys" 180 ha_states_are "primary secondary secondary" || ha_fail "node$ha_nodes"
	# The running keepers reload their configuration when it is set.
	for ((n = 1; n <= ha_nodes; n++)); do
		as_ha pg_autoctl config set --pgdata "$ha_dir/node$n" timeout.network_partition_timeout 3 >/dev/null ||
			die "could not set node$n's network_partition_timeout"
	done
	# pg_auto_failover sets number_sync_standbys to 1 itself when the second
	# quorum standby joins; saying so keeps the mode from depending on that.
	if [[ $ha_replication == sync ]]; then
		as_ha pg_autoctl set formation number-sync-standbys 1 --pgdata "$ha_dir/node1" >/dev/null 2>&1 ||
			die "could not set number_sync_standbys to 1"
	fi
	ha_wait "the replication settings" 60 ha_replication_is "$ha_replication" ||
		die "the primary's replication is not $ha_replication: $(ha_replication_state)"
	export REFSET_TEST_HA_DSN
	REFSET_TEST_HA_DSN=$(ha_dsn)
	"$cluster_bindir/psql" -X -q -v ON_ERROR_STOP=1 "$REFSET_TEST_HA_DSN" \
		-c 'CREATE TABLE IF NOT EXISTS ha_probe (at timestamptz NOT NULL DEFAULT now())' >/dev/null
	echo "HA cluster ready after $((SECONDS - started_at))s: $(ha_states); $(ha_replication_state)"
}

# ha_spawn_node N QUORUM starts data node N, its pg_autoctl registering it
# with the monitor; QUORUM (true or false) says whether it takes part in the
# synchronous replication quorum when it is a standby.
ha_spawn_node() {
	local n=$1
	ha_spawn "node$n" create postgres --pgdata "$ha_dir/node$n" --pgport "${ha_ports[n - 1]}" \
		--hostname 127.0.0.1 --name "node$n" --dbname refset_test --username postgres \
		--monitor "$(ha_monitor_uri)" --auth trust --no-ssl --pgctl "$cluster_bindir/pg_ctl" \
		--replication-quorum "$2" --run
}

# ha_tune_primary PORT sets the first node's settings before the standbys
# clone it, so that they travel in its postgresql.auto.conf.
#
# pg_autoctl's pg_basebackup asks for a spread checkpoint, paced over
# checkpoint_completion_target of checkpoint_timeout: 90 seconds of a
# two-minute start. An immediate CHECKPOINT first leaves that one nothing
# to write, and a completion target of 0 stops it pacing what is left.
#
# fsync=off: a kill -9 of a postmaster loses nothing the kernel's page cache
# holds, so a test of process kills does not need fsync, and every commit
# waits for a standby anyway (synchronous_commit stays on).
ha_tune_primary() {
	ha_node_sql "$1" -c "ALTER SYSTEM SET fsync = off" -c "ALTER SYSTEM SET checkpoint_completion_target = 0" \
		-c "ALTER SYSTEM SET lc_messages = 'C'" -c "SELECT pg_reload_conf()" -c "CHECKPOINT" >/dev/null ||
		die "could not set the primary's settings"
}

# ha_spawn NAME PG_AUTOCTL_ARGS... starts `pg_autoctl ARGS` in the
# background, in a session of its own (setsid) so that ha_stop and
# ha_kill_primary can signal the supervisor, its services and its postmaster
# at once, logging to NAME.log. Its process group id is kept in NAME.pgid.
ha_spawn() {
	local name=$1
	shift
	as_ha touch "$ha_dir/$name.log"
	# The node outlives this script, so it must hold none of its descriptors:
	# bash keeps copies of stdout while a redirected function runs (fd 10+),
	# and a caller reading our output through a pipe would wait for the
	# cluster to end.
	(
		exec >>"$ha_dir/$name.log" 2>&1 </dev/null
		local fd
		for fd in "/proc/$BASHPID/fd"/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-"
		done 2>/dev/null
		# shellcheck disable=SC2016 # $$ is the inner bash's
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
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
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

# ha_states prints the nodes' states as NAME:REPORTED/GOAL, by name.
ha_states() {
	ha_monitor_sql -At -c "SELECT string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' ' ORDER BY nodename) FROM pgautofailover.node"
}

# ha_states_are "STATE..." [NODE...] succeeds when the reported states of
# the nodes, sorted, are those, and each has reached its goal. NODEs (node
# names) are left out: nodes that were killed and keep their last state.
ha_states_are() {
	local want=$1 got skip
	shift
	skip=$(printf "'%s'," "$@" "")
	got=$(ha_monitor_sql -At -c "SELECT string_agg(reportedstate::text, ' ' ORDER BY reportedstate::text)
		FROM pgautofailover.node WHERE nodename NOT IN (${skip%,})
		HAVING count(*) FILTER (WHERE reportedstate = goalstate) = count(*)") || return 1
	[[ $got == "$(tr ' ' '\n' <<<"$want" | sort | xargs)" ]]
}

# ha_primary_port prints the port of the node the monitor has as primary.
ha_primary_port() {
	ha_monitor_sql -At -c "SELECT nodeport FROM pgautofailover.node WHERE reportedstate IN ('primary', 'wait_primary', 'single') AND goalstate = reportedstate LIMIT 1"
}

# ha_replication_state prints the formation's number_sync_standbys, the
# standbys in the replication quorum and the primary's
# synchronous_standby_names.
ha_replication_state() {
	local port nsync quorum names
	nsync=$(ha_monitor_sql -At -c "SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default'") || nsync='?'
	quorum=$(ha_monitor_sql -At -c "SELECT count(*) FILTER (WHERE replicationquorum) || ' of ' || count(*) FROM pgautofailover.node") || quorum='?'
	if port=$(ha_primary_port) && [[ -n $port ]]; then
		names=$(ha_node_sql "$port" -At -c 'SHOW synchronous_standby_names') || names='?'
	else
		names='? (no primary)'
	fi
	echo "number_sync_standbys=$nsync, replication-quorum $quorum nodes, synchronous_standby_names='$names'"
}

# ha_replication_is MODE succeeds when the primary's synchronous_standby_names
# says MODE: sync, ANY 1 of the standbys that are up (two of them, or one
# while a node is down); async, empty.
ha_replication_is() {
	local port names
	port=$(ha_primary_port) || return 1
	[[ -n $port ]] || return 1
	names=$(ha_node_sql "$port" -At -c 'SHOW synchronous_standby_names') || return 1
	case $1 in
	sync) [[ $names == "ANY 1 ("* ]] ;;
	async) [[ -z $names ]] ;;
	*) return 1 ;;
	esac
}

# ha_probe_write prints the port of the server on which a write through the
# multi-host DSN committed; it fails when none did. timeout, not
# statement_timeout: a commit whose wait for the synchronous standby is
# canceled has committed locally, and would count as a write.
ha_probe_write() {
	timeout 10 "$cluster_bindir/psql" -X -q -At -v ON_ERROR_STOP=1 "$(ha_dsn)" \
		-c 'INSERT INTO ha_probe DEFAULT VALUES RETURNING inet_server_port()' 2>/dev/null
}

# ha_wait_writes SINCE WHAT OLD_PORT waits (up to 120s) for a write through
# the DSN to commit on a node other than OLD_PORT, then prints how long after
# SINCE (epoch seconds, fractional) it did.
ha_wait_writes() {
	local since=$1 what=$2 old=$3 port deadline=$((SECONDS + 120))
	until port=$(ha_probe_write) && [[ -n $port && $port != "$old" ]]; do
		((SECONDS < deadline)) || die "$what: no write committed on another node within 120s ($(ha_states))"
		sleep 0.1
	done
	echo "$what: writes commit again after $(ha_elapsed "$since")s, on port $port"
}

ha_now() { date +%s.%N; }
ha_elapsed() { awk -v a="$1" -v b="$(ha_now)" 'BEGIN { printf "%.1f", b - a }'; }

# ha_node_of_port PORT prints the number of the data node on PORT.
ha_node_of_port() {
	local n
	for ((n = 1; n <= ${#ha_ports[@]}; n++)); do
		if [[ ${ha_ports[n - 1]} == "$1" ]]; then
			echo "$n"
			return 0
		fi
	done
	return 1
}

# ha_killed_nodes prints the names of the nodes ha_kill_primary killed and
# ha_restart_killed has not restarted yet, one a line.
ha_killed_nodes() { cat "$ha_dir/killed" 2>/dev/null || true; }

# ha_settle WHAT SINCE waits until every node that runs has reached its goal
# state, one primary and the others secondaries, and the primary's
# replication is in the mode of the cluster again.
ha_settle() {
	local what=$1 since=$2 killed want n
	mapfile -t killed < <(ha_killed_nodes)
	want=primary
	for ((n = 1; n < ha_nodes - ${#killed[@]}; n++)); do
		want+=" secondary"
	done
	ha_wait "$what" 120 ha_states_are "$want" ${killed[@]+"${killed[@]}"} ||
		die "$what: the nodes did not settle within 120s ($(ha_states))"
	ha_wait "$what" 30 ha_replication_is "$ha_replication" ||
		die "$what: the primary's replication is not $ha_replication: $(ha_replication_state)"
	echo "$what: settled after $(ha_elapsed "$since")s: $(ha_states); $(ha_replication_state)"
}

# ha_switchover has the monitor promote a standby (a planned failover), waits
# until writes commit on the new primary, and then until the old primary
# follows it as a standby.
ha_switchover() {
	local before t0 pid
	before=$(ha_primary_port) || die "no primary ($(ha_states))"
	t0=$(ha_now)
	# In the background: pg_autoctl returns once the whole formation has
	# settled, after the moment writes resume, which is what is measured.
	as_ha pg_autoctl perform switchover --pgdata "$ha_dir/node$(ha_node_of_port "$before")" --wait 120 \
		>>"$ha_dir/switchover.log" 2>&1 &
	pid=$!
	ha_wait_writes "$t0" "switchover from port $before" "$before"
	wait "$pid" || log "pg_autoctl perform switchover failed or timed out (see $ha_dir/switchover.log)"
	ha_settle "switchover from port $before" "$t0"
}

# ha_kill_primary kills the primary node with SIGKILL, as a lost machine: its
# pg_autoctl supervisor and its postmaster at once (the supervisor alone
# would restart PostgreSQL, and no failover would happen). Its backends
# notice the postmaster is gone and exit. Waits until writes commit on the
# new primary and the two nodes left have settled; the killed node stays
# down until ha_restart_killed.
ha_kill_primary() {
	local port n pid='' t0
	port=$(ha_primary_port) || port=
	[[ -n $port ]] || die "no primary to kill ($(ha_states))"
	n=$(ha_node_of_port "$port") || die "no node on port $port"
	t0=$(ha_now)
	kill -KILL -- "-$(cat "$ha_dir/node$n.pgid")" 2>/dev/null || true
	if pid=$(head -n 1 "$ha_dir/node$n/postmaster.pid" 2>/dev/null); then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	echo "node$n" >>"$ha_dir/killed"
	echo "killed node$n (port $port, postmaster ${pid:-?}) with SIGKILL"
	ha_wait_writes "$t0" "kill -9 of node$n" "$port"
	ha_settle "kill -9 of node$n" "$t0"
}

# ha_restart_killed starts the pg_autoctl of each node ha_kill_primary
# killed: it rejoins as a standby, rewinding its data directory if it must.
# Waits until every node is back in sync.
ha_restart_killed() {
	local name t0 killed
	mapfile -t killed < <(ha_killed_nodes)
	((${#killed[@]} > 0)) || die "no node was killed"
	t0=$(ha_now)
	for name in "${killed[@]}"; do
		ha_spawn "$name" run --pgdata "$ha_dir/$name"
	done
	rm -f "$ha_dir/killed"
	ha_settle "restart of ${killed[*]}" "$t0"
}

ha_status() {
	echo "monitor 127.0.0.1:$ha_monitor_port, nodes on ports ${ha_ports[*]}, directory $ha_dir"
	echo "states: $(ha_states)"
	echo "replication ($ha_replication): $(ha_replication_state)"
	as_ha pg_autoctl show state --pgdata "$ha_dir/node1" 2>/dev/null || true
}

# ha_save_state and ha_load_state keep what another process needs to find
# the cluster. The file is sourced, so only values we generated go in it.
ha_save_state() {
	{
		printf 'ha_dir=%q\nha_monitor_port=%q\ncluster_bindir=%q\nha_replication=%q\n' \
			"$ha_dir" "$ha_monitor_port" "$cluster_bindir" "$ha_replication"
		printf 'ha_ports=(%s)\n' "${ha_ports[*]}"
	} >"$ha_state_file"
}

# ha_load_state reads the state file; it fails, saying why, when there is
# none or its directory is gone (ha_stop still sweeps what is left then).
ha_load_state() {
	if [[ ! -f $ha_state_file ]]; then
		log "no HA cluster ($ha_state_file not found)"
		return 1
	fi
	# shellcheck disable=SC1090
	source "$ha_state_file"
	export REFSET_TEST_HA_DSN
	REFSET_TEST_HA_DSN=$(ha_dsn)
	if [[ ! -d $ha_dir ]]; then
		log "the HA cluster's directory $ha_dir is gone"
		return 1
	fi
}

# ha_pids prints the process ids of the cluster: every pg_autoctl and
# postgres process whose working directory is in $ha_dir (pg_autoctl runs
# in it, PostgreSQL in its data directory), also after the directory was
# removed. Where there is no /proc it prints nothing.
ha_pids() {
	local cwd p comm
	[[ -n $ha_dir && -d /proc/self ]] || return 0
	# One find for all processes; some end while it looks.
	{ find /proc/[0-9]*/cwd -maxdepth 0 \( -lname "$ha_dir" -o -lname "$ha_dir/*" -o -lname "$ha_dir (deleted)" \) 2>/dev/null || true; } |
		while IFS= read -r cwd; do
			p=${cwd#/proc/}
			p=${p%/cwd}
			{ read -r comm <"/proc/$p/comm"; } 2>/dev/null || continue
			if [[ $comm == postgres || $comm == pg_autoctl ]]; then
				echo "$p"
			fi
		done
}

# ha_wait_gone SECONDS waits until no process of the cluster is left.
ha_wait_gone() {
	local deadline=$((SECONDS + $1))
	while [[ -n $(ha_pids) ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# ha_stop stops the nodes and the monitor, removes their files and says what
# it stopped. SIGTERM on pg_autoctl is its fast shutdown, which stops its
# PostgreSQL too; what is still there after 15 seconds gets SIGKILL. It fails
# (and keeps the state file, to try again) only when a process survives that.
ha_stop() {
	[[ -n $ha_dir ]] || return 0
	local f name port running=() left pids pid
	pids=" $(ha_pids | xargs) "
	for f in "$ha_dir"/monitor.pgid "$ha_dir"/node*.pgid; do
		[[ -f $f ]] || continue
		name=$(basename "$f" .pgid)
		if kill -TERM -- "-$(cat "$f")" 2>/dev/null; then
			port=$ha_monitor_port
			[[ $name == monitor ]] || port=${ha_ports[${name#node} - 1]:-?}
			running+=("$name (port $port)")
		fi
	done
	# The supervisors found by their working directory too, when their
	# .pgid files are gone.
	for pid in $pids; do
		if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == pg_autoctl ]]; then
			kill -TERM "$pid" 2>/dev/null || true
		fi
	done
	# A postmaster whose supervisor is gone gets PostgreSQL's fast shutdown;
	# only one of the cluster: the pid in the file of a server that died may
	# belong to another process by now.
	for f in "$ha_dir"/monitor/postmaster.pid "$ha_dir"/node*/postmaster.pid; do
		pid=$(head -n 1 "$f" 2>/dev/null) || continue
		if [[ -n $pid && $pids == *" $pid "* ]]; then
			kill -INT "$pid" 2>/dev/null || true
		fi
	done
	if ! ha_wait_gone 15; then
		left=$(ha_pids | xargs)
		log "still running 15s after SIGTERM, killed with SIGKILL: $left"
		# shellcheck disable=SC2086 # one pid a word
		kill -KILL $left 2>/dev/null || true
		if ! ha_wait_gone 5; then
			log "the HA cluster's processes would not die:"
			ps -o pid,user,args -p "$(ha_pids | paste -sd, -)" >&2 || true
			return 1
		fi
	fi
	pids=$(wc -w <<<"$pids")
	if ((${#running[@]} > 0)); then
		echo "stopped the HA cluster in $ha_dir: ${running[*]}; $pids processes in all"
	elif ((pids > 0)); then
		echo "stopped the HA cluster in $ha_dir: $pids processes its supervisors had left"
	else
		echo "the HA cluster in $ha_dir was not running"
	fi
	rm -rf "$ha_dir"
	if [[ -f $ha_state_file ]] && grep -qxF "ha_dir=$(printf %q "$ha_dir")" "$ha_state_file"; then
		rm -f "$ha_state_file"
	fi
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
