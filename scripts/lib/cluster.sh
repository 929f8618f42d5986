# shellcheck shell=bash
# A throwaway PostgreSQL cluster for the test and benchmark commands: a primary
# on 127.0.0.1, optionally a PgBouncer in transaction mode in front of it and a
# hot standby streaming from it, all in one temporary directory that is removed
# again when the script ends. Sourced, never run:
#
#   log() { printf 'my-script: %s\n' "$*" >&2; }   # the caller's own prefix
#   source scripts/lib/cluster.sh
#   cluster_trap_exit              # stop everything however the script ends
#   cluster_start max_connections=500 shared_preload_libraries=pg_stat_statements
#   cluster_start_pgbouncer        # optional: exports REFSET_TEST_PGBOUNCER
#   cluster_start_standby          # optional: exports REFSET_TEST_POSTGRES_STANDBY
#
# cluster_start exports REFSET_TEST_POSTGRES, a lib/pq DSN of the database
# refset_test. Every "ready" line goes to stdout; DSNs are never printed.
#
# As root (CI) the servers run as the `postgres` OS user, because initdb and
# postgres refuse to run as root, and missing packages (PostgreSQL, PgBouncer)
# are installed with apt-get. As an ordinary user everything runs as you.
#
# The cluster is for tests and benchmarks only: durability is off (fsync,
# synchronous_commit, full_page_writes), which makes it much faster and loses
# nothing worth keeping, since it is deleted at exit. Benchmarks compare both of
# their sides on this one server, so both see the same settings.

# The caller's log writes messages with its own prefix; die is log and exit 1,
# unless the caller has its own.
declare -F log >/dev/null || {
	echo "scripts/lib/cluster.sh: define log before sourcing it" >&2
	exit 1
}
if ! declare -F die >/dev/null; then
	die() {
		log "$*"
		exit 1
	}
fi

# is_root reports whether the script runs as root.
is_root() { [[ $(id -u) -eq 0 ]]; }

# is_ci reports whether we run under CI (CI=true), where a suite that cannot
# run must fail rather than skip.
is_ci() { [[ ${CI:-} == true || ${CI:-} == 1 ]]; }

# apt_install installs Debian packages, running `apt-get update` once first
# (a fresh CI machine has empty package lists). Fails unless root with apt.
apt_updated=
apt_install() {
	is_root && command -v apt-get >/dev/null 2>&1 || return 1
	if [[ -z $apt_updated ]]; then
		apt-get update
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

# ------------------------------------------------------------------ state
cluster_dir=     # the temporary directory holding everything below
cluster_bindir=  # where initdb, pg_ctl, psql, pgbench live
cluster_data=    # the primary's data directory
cluster_port=    # the primary's TCP port
cluster_psql=    # psql, to talk to the servers
standby_data=    # the standby's data directory, once one runs
bouncer_dir=     # PgBouncer's directory, once one runs
primary_settings=() # the primary's server settings, NAME=VALUE
cluster_exit_hooks=()

# ------------------------------------------------------- server binaries

# cluster_find_bindir prints the directory holding initdb, pg_ctl and friends.
cluster_find_bindir() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		# On Debian pg_config may come from libpq-dev without a server,
		# so check that initdb is really there.
		d=$(pg_config --bindir 2>/dev/null) || d=
		if [[ -n $d && -x $d/initdb ]]; then
			echo "$d"
			return 0
		fi
	fi
	# Debian/Ubuntu keep server binaries off PATH, one directory per major
	# version; prefer the newest.
	if [[ -d /usr/lib/postgresql ]]; then
		for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV); do
			if [[ -x $d/initdb ]]; then
				echo "$d"
				return 0
			fi
		done
	fi
	if d=$(command -v initdb 2>/dev/null); then
		# Follow symlinks (e.g. /usr/local/bin/initdb) to where pg_ctl lives.
		d=$(dirname "$(readlink -f "$d" 2>/dev/null || echo "$d")")
		if [[ -x $d/pg_ctl ]]; then
			echo "$d"
			return 0
		fi
	fi
	return 1
}

# cluster_can_start reports whether cluster_start could start a cluster: the
# server binaries are here, or apt-get (as root) can install them.
cluster_can_start() {
	cluster_find_bindir >/dev/null || { is_root && command -v apt-get >/dev/null 2>&1; }
}

# cluster_install_server sets cluster_bindir, installing PostgreSQL with apt-get
# (as root) when its server binaries are missing.
cluster_install_server() {
	cluster_bindir=$(cluster_find_bindir) && return 0
	if is_root && command -v apt-get >/dev/null 2>&1; then
		log "PostgreSQL server not found; installing it with apt-get"
		# We only want the binaries: stop the package from creating
		# (and starting) a system-wide "main" cluster on port 5432.
		mkdir -p /etc/postgresql-common/createcluster.d
		echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/refset-test.conf
		apt_install postgresql
		cluster_bindir=$(cluster_find_bindir) || die "PostgreSQL was installed but initdb is still not found"
	else
		die "PostgreSQL server binaries (initdb, pg_ctl) not found. Install PostgreSQL" \
			"(e.g. 'sudo apt-get install postgresql' or 'brew install postgresql')," \
			"or set REFSET_TEST_POSTGRES to a lib/pq DSN of a server you can use."
	fi
}

# cluster_pgbench prints pgbench: the cluster's own when one runs, else the
# one on PATH, else the newest of Debian's. Fails when there is none.
cluster_pgbench() {
	local p
	if [[ -n $cluster_bindir && -x $cluster_bindir/pgbench ]]; then
		echo "$cluster_bindir/pgbench"
		return 0
	fi
	p=$(command -v pgbench || printf '%s\n' /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -rV | head -n1)
	[[ -x $p ]] && echo "$p"
}

# as_pg runs a server command as the OS user that owns the cluster.
as_pg() {
	if is_root; then
		# cd: postgres may not be allowed into the caller's directory,
		# and initdb/pg_ctl want a usable working directory.
		(cd "$cluster_dir" && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# ------------------------------------------------------------------ ports

# port_in_use reports whether something listens on 127.0.0.1:$1.
port_in_use() {
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
	else
		# Bash's /dev/tcp: the connect succeeds only if someone listens.
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

# pick_port prints a random free TCP port. The range stays below the
# ephemeral ports (Linux: 32768+, macOS: 49152+) handed out to outgoing
# connections. Another process may still grab it before the server binds;
# start_on_free_port retries for that case.
pick_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 12000))
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# start_on_free_port WHAT LOG_PREFIX START runs `START PORT LOG` on a free
# port, with LOG_PREFIX-N.log as the log of attempt N, until it succeeds: when
# START fails and its log says the port was taken meanwhile, on another port,
# up to 5 times; on any other failure it shows the log and dies. On success
# bound_port and bound_log name the port and the log of the attempt that won.
bound_port=
bound_log=
start_on_free_port() {
	local what=$1 log_prefix=$2 start=$3 attempt
	for attempt in 1 2 3 4 5; do
		bound_port=$(pick_port) || die "no free TCP port found on 127.0.0.1"
		bound_log=$log_prefix-$attempt.log
		if "$start" "$bound_port" "$bound_log"; then
			return 0
		fi
		if grep -q 'Address already in use' "$bound_log" 2>/dev/null; then
			log "port $bound_port was taken before $what could bind it; retrying"
			continue
		fi
		cat "$bound_log" >&2 2>/dev/null
		die "$what failed to start (its log above)"
	done
	die "$what failed to start: no free port after 5 attempts"
}

# -------------------------------------------------------- the primary

# cluster_start [NAME=VALUE...] starts the primary, with the server settings
# given (they win over the defaults below; no spaces or quotes in them), creates
# the database refset_test and exports REFSET_TEST_POSTGRES. Its files go to a new
# directory under CLUSTER_PARENT when that is set (bench.sh --durable: a disk, not
# tmpfs), else under /tmp (root) or TMPDIR.
cluster_start() {
	cluster_install_server
	if is_root; then
		id postgres >/dev/null 2>&1 ||
			die "running as root but there is no 'postgres' OS user to run the server as (initdb refuses root)"
		command -v runuser >/dev/null 2>&1 || die "running as root but runuser (util-linux) is missing"
		# Under /tmp, not $TMPDIR: postgres must be able to reach the
		# directory, and root's TMPDIR may be private.
		cluster_dir=$(mktemp -d "${CLUSTER_PARENT:-/tmp}/refset-pg.XXXXXX")
		chown postgres "$cluster_dir"
	else
		cluster_dir=$(mktemp -d "${CLUSTER_PARENT:-${TMPDIR:-/tmp}}/refset-pg.XXXXXX")
	fi
	cluster_data=$cluster_dir/data
	as_pg mkdir "$cluster_dir/sock"

	local started_at=$SECONDS
	as_pg "$cluster_bindir/initdb" -D "$cluster_data" -A trust -U postgres --no-sync -E UTF8 --locale=C >"$cluster_dir/initdb.log" 2>&1 || {
		cat "$cluster_dir/initdb.log" >&2
		die "initdb failed (output above)"
	}
	echo "initdb done after $((SECONDS - started_at))s ($cluster_bindir)"

	# Durability is pointless for a cluster deleted at exit; turning it off
	# makes the tests much faster. Many tests run in parallel, each with its
	# own pool, hence max_connections.
	primary_settings=(fsync=off synchronous_commit=off full_page_writes=off
		max_connections=300 shared_buffers=256MB lc_messages=C "$@")
	started_at=$SECONDS
	start_on_free_port PostgreSQL "$cluster_dir/server" start_primary_on
	cluster_port=$bound_port
	local i
	for ((i = 0; i < 300; i++)); do
		if "$cluster_bindir/pg_isready" -q -h 127.0.0.1 -p "$cluster_port" -U postgres -d postgres; then
			break
		fi
		sleep 0.1
	done
	if ((i == 300)); then
		cat "$bound_log" >&2
		die "PostgreSQL did not become ready within 30s (server log above)"
	fi
	echo "$("$cluster_bindir/postgres" -V) ready on 127.0.0.1:$cluster_port after $((SECONDS - started_at))s"

	cluster_psql=$cluster_bindir/psql
	[[ -x $cluster_psql ]] || cluster_psql=psql
	cluster_sql postgres -c 'CREATE DATABASE refset_test'
	export REFSET_TEST_POSTGRES="postgres://postgres@127.0.0.1:$cluster_port/refset_test?sslmode=disable"
}

# start_primary_on PORT LOG starts the primary on PORT (start_on_free_port's
# START), with primary_settings.
start_primary_on() {
	local opts="-c listen_addresses=127.0.0.1 -c port=$1 -c unix_socket_directories='$cluster_dir/sock'" s
	for s in "${primary_settings[@]}"; do
		opts+=" -c '$s'"
	done
	as_pg "$cluster_bindir/pg_ctl" -D "$cluster_data" -l "$2" -o "$opts" -w -t 30 start >/dev/null
}

# cluster_sql DATABASE PSQL_ARGS... runs psql as postgres on the primary's
# DATABASE, stopping at the first error. A full connection string, so PG*
# variables in the caller's environment (PGSSLMODE, PGDATABASE, ...) cannot
# redirect it.
cluster_sql() {
	local db=$1
	shift
	"$cluster_psql" -X -q -v ON_ERROR_STOP=1 \
		"host=127.0.0.1 port=$cluster_port user=postgres dbname=$db sslmode=disable" "$@"
}

# stop_server DATA stops the server of data directory DATA, if it runs.
stop_server() {
	local data=$1 pid
	[[ -n $data && -f $data/postmaster.pid ]] || return 0
	if ! as_pg "$cluster_bindir/pg_ctl" -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1; then
		# Still there: SIGQUIT is PostgreSQL's immediate shutdown.
		pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null)
		[[ -n $pid ]] && kill -QUIT "$pid" 2>/dev/null && sleep 1
	fi
	return 0
}

# -------------------------------------------------------------- PgBouncer
# A PgBouncer in transaction mode in front of the throwaway cluster: the
# suites that must survive transaction pooling run through it
# (internal/test/pgtest.Pooled). Version 1.18 (Debian 12) keeps no prepared
# statements and passes no search_path, so each pooled test logs in as a role
# of its own whose search_path is its schema (ALTER ROLE ... SET), and PgBouncer
# looks roles up in the server (auth_user) instead of a file of users.
bouncer_bin=
bouncer_started_at=

# find_pgbouncer prints the pgbouncer binary (Debian puts it in /usr/sbin,
# which an ordinary user's PATH may lack).
find_pgbouncer() {
	command -v pgbouncer 2>/dev/null && return 0
	[[ -x /usr/sbin/pgbouncer ]] && echo /usr/sbin/pgbouncer && return 0
	return 1
}

# write_pgbouncer_ini PORT LOG writes PgBouncer's configuration (readable by
# the server's user, who runs PgBouncer too: it refuses to run as root).
write_pgbouncer_ini() {
	# Pools are per role, so per test: a pool of 20 covers the concurrency of
	# any one test; max_db_connections keeps them all within the server's
	# max_connections beside the direct tests. A pool that would pass it
	# waits until idle server connections of other pools close, so
	# server_idle_timeout is short; it also closes those of ended tests
	# soon, after which pgtest drops their roles. After a failed login (the
	# tests open a database that does not exist on purpose) PgBouncer holds the
	# next clients of that pool until it tries again, server_login_retry later
	# (15 s by default, and a client stuck behind failures waits up to
	# query_wait_timeout, 120 s): the tests want the failure at once.
	cat >"$bouncer_dir/pgbouncer.ini" <<-EOF
		[databases]
		* = host=127.0.0.1 port=$cluster_port

		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $1
		unix_socket_dir =
		pool_mode = transaction
		auth_type = trust
		auth_file = $bouncer_dir/users.txt
		auth_user = postgres
		max_client_conn = 4000
		default_pool_size = 20
		max_db_connections = 120
		server_idle_timeout = 2
		server_login_retry = 1
		log_connections = 0
		log_disconnections = 0
		logfile = $2
		pidfile = $bouncer_dir/pgbouncer.pid
	EOF
	echo '"postgres" ""' >"$bouncer_dir/users.txt"
}

# cluster_start_pgbouncer starts PgBouncer in front of the cluster on a free
# port and exports REFSET_TEST_PGBOUNCER. Without PgBouncer (and no apt-get to
# install it) it only warns, unless under CI.
cluster_start_pgbouncer() {
	if ! bouncer_bin=$(find_pgbouncer); then
		log "PgBouncer not found; installing it with apt-get"
		if apt_install pgbouncer; then
			bouncer_bin=$(find_pgbouncer) || die "pgbouncer was installed but is still not found"
		elif is_ci; then
			die "PgBouncer is needed under CI (the pooled tests fail without it); install pgbouncer"
		else
			log "PgBouncer is not installed: the tests through it skip (install pgbouncer to run them)"
			return 0
		fi
	fi
	bouncer_dir=$cluster_dir/pgbouncer
	as_pg mkdir "$bouncer_dir"
	bouncer_started_at=$SECONDS
	start_on_free_port PgBouncer "$bouncer_dir/pgbouncer" start_pgbouncer_on
	echo "$("$bouncer_bin" --version | head -n 1) in transaction mode ready on 127.0.0.1:$bound_port after $((SECONDS - bouncer_started_at))s"
	export REFSET_TEST_PGBOUNCER="postgres://postgres@127.0.0.1:$bound_port/refset_test?sslmode=disable"
}

# start_pgbouncer_on PORT LOG starts PgBouncer on PORT and waits up to 10s
# until a query goes through it (start_on_free_port's START).
start_pgbouncer_on() {
	local i
	write_pgbouncer_ini "$1" "$2"
	# Every test's pool is a client connection: allow PgBouncer the file
	# descriptors max_client_conn needs, as far as the hard limit goes.
	# shellcheck disable=SC2016 # expanded by the inner bash
	as_pg bash -c 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$0" -d -q "$1"' "$bouncer_bin" "$bouncer_dir/pgbouncer.ini" ||
		true # a failure is in its log, read by start_on_free_port
	for ((i = 0; i < 100; i++)); do
		if "$cluster_psql" -X -q -t -c 'SELECT 1' >/dev/null 2>&1 \
			"host=127.0.0.1 port=$1 user=postgres dbname=refset_test sslmode=disable connect_timeout=2"; then
			return 0
		fi
		sleep 0.1
	done
	stop_pgbouncer
	log "PgBouncer did not answer on port $1 within 10s"
	return 1
}

stop_pgbouncer() {
	local pid
	[[ -n $bouncer_dir && -f $bouncer_dir/pgbouncer.pid ]] || return 0
	pid=$(cat "$bouncer_dir/pgbouncer.pid" 2>/dev/null)
	# SIGTERM: immediate shutdown; its clients are gone by now.
	if [[ -n $pid ]]; then
		kill -TERM "$pid" 2>/dev/null || true
	fi
	rm -f "$bouncer_dir/pgbouncer.pid"
}

# ------------------------------------------------------------- the standby
# A hot standby streaming from the primary (pg_basebackup -R), for the tests of
# reads from a replica: they get REFSET_TEST_POSTGRES_STANDBY, and pause its
# replay to make a lag they can count on.
standby_max_connections=

# cluster_start_standby starts the standby on a free port and exports
# REFSET_TEST_POSTGRES_STANDBY once it streams.
cluster_start_standby() {
	local started_at=$SECONDS
	# Asynchronous commits reach the standby when the WAL writer flushes them:
	# every 10ms rather than 200ms, so reports that wait for the standby to catch
	# up wait little.
	cluster_sql postgres -c "ALTER SYSTEM SET wal_writer_delay = '10ms'" -c 'SELECT pg_reload_conf()' >/dev/null
	# A hot standby needs at least the primary's max_connections.
	standby_max_connections=$(cluster_sql postgres -At -c 'SHOW max_connections')
	standby_data=$cluster_dir/standby
	as_pg "$cluster_bindir/pg_basebackup" -h 127.0.0.1 -p "$cluster_port" -U postgres -D "$standby_data" \
		-R -X stream -c fast --no-sync >"$cluster_dir/basebackup.log" 2>&1 || {
		cat "$cluster_dir/basebackup.log" >&2
		die "pg_basebackup of the standby failed (output above)"
	}
	as_pg mkdir -p "$cluster_dir/sock-standby"
	start_on_free_port "the PostgreSQL standby" "$cluster_dir/standby" start_standby_on
	local standby="host=127.0.0.1 port=$bound_port user=postgres dbname=refset_test sslmode=disable" i
	for ((i = 0; i < 300; i++)); do
		if [[ $("$cluster_psql" -X -qAt "$standby" -c 'SELECT pg_is_in_recovery()' 2>/dev/null) == t ]]; then
			echo "standby streaming on 127.0.0.1:$bound_port after $((SECONDS - started_at))s"
			export REFSET_TEST_POSTGRES_STANDBY="postgres://postgres@127.0.0.1:$bound_port/refset_test?sslmode=disable"
			return 0
		fi
		sleep 0.1
	done
	cat "$bound_log" >&2
	die "the PostgreSQL standby did not accept connections within 30s (server log above)"
}

# start_standby_on PORT LOG starts the standby on PORT (start_on_free_port's
# START).
start_standby_on() {
	# hot_standby_feedback keeps the primary's vacuum from removing rows a
	# standby query still reads, which would cancel that query.
	local opts="-c listen_addresses=127.0.0.1 -c port=$1"
	opts+=" -c unix_socket_directories='$cluster_dir/sock-standby'"
	opts+=" -c fsync=off -c full_page_writes=off -c hot_standby=on -c hot_standby_feedback=on"
	opts+=" -c max_connections=$standby_max_connections -c shared_buffers=128MB -c lc_messages=C"
	as_pg "$cluster_bindir/pg_ctl" -D "$standby_data" -l "$2" -o "$opts" -w -t 60 start >/dev/null
}

# ----------------------------------------------------------------- the end

# cluster_stop stops PgBouncer, the standby and the primary, whichever run,
# and removes their files. It does nothing when no cluster was started.
cluster_stop() {
	stop_pgbouncer
	stop_server "$standby_data"
	stop_server "$cluster_data"
	[[ -n $cluster_dir ]] && rm -rf "$cluster_dir"
	cluster_dir='' cluster_data='' standby_data='' bouncer_dir=''
}

# cluster_at_exit FUNCTION has cluster_trap_exit's handler call FUNCTION at
# exit, before the cluster stops (to drop benchmark tables, say).
cluster_at_exit() { cluster_exit_hooks+=("$1"); }

# cluster_trap_exit makes the script stop the cluster however it ends, keeping
# its exit status; INT and TERM become a normal exit (130, 143) so the EXIT
# trap runs.
cluster_trap_exit() {
	trap cluster_on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

cluster_on_exit() {
	local rc=$? hook
	set +e
	# (The ${a[@]+...} form: an empty array is "unbound" to set -u in bash 3.)
	for hook in ${cluster_exit_hooks[@]+"${cluster_exit_hooks[@]}"}; do
		"$hook"
	done
	cluster_stop
	exit "$rc"
}

# ------------------------------------------------------------ benchmarks

# pgbench_init PGBENCH SCALE creates pgbench's tables (-i -s SCALE) in the
# database of REFSET_TEST_POSTGRES and has them dropped at exit.
pgbench_for_exit=
pgbench_init() {
	pgbench_for_exit=$1
	cluster_at_exit drop_pgbench_tables
	"$1" -i -s "$2" -q "$REFSET_TEST_POSTGRES" >/dev/null 2>&1
}

drop_pgbench_tables() {
	"$pgbench_for_exit" -i -I d "$REFSET_TEST_POSTGRES" >/dev/null 2>&1
}

# cluster_for_bench [NAME=VALUE...] leaves REFSET_TEST_POSTGRES alone when it is
# set; otherwise it starts the throwaway cluster with the settings given (and
# pg_stat_statements, which REFSET_BENCH_CUSTODY_STATEMENTS=1 reads) and exports
# it. The caller has called cluster_trap_exit.
cluster_for_bench() {
	if [[ -n ${REFSET_TEST_POSTGRES:-} ]]; then
		# Do not print the DSN: it may contain a password.
		log "using the PostgreSQL server of REFSET_TEST_POSTGRES"
		return 0
	fi
	log "REFSET_TEST_POSTGRES is not set: starting a throwaway PostgreSQL cluster (removed at exit)"
	local settings=("$@")
	if [[ -n ${REFSET_BENCH_CUSTODY_STATEMENTS:-} ]]; then
		settings+=(shared_preload_libraries=pg_stat_statements)
	fi
	cluster_start ${settings[@]+"${settings[@]}"}
	if [[ -n ${REFSET_BENCH_CUSTODY_STATEMENTS:-} ]]; then
		cluster_sql refset_test -c 'CREATE EXTENSION pg_stat_statements SCHEMA public'
	fi
}
