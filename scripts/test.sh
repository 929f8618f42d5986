#!/usr/bin/env bash
# The project's single test command (`make test` and CI run it).
#
#   scripts/test.sh [go test flags...]      e.g. scripts/test.sh -run Foo -v
#
# Steps: gofmt check, go vet, a build of the Postgres path without cgo, go test
# -race against PostgreSQL (lib/pq and pgx).
#
# Environment:
#   REFSET_TEST_POSTGRES   lib/pq DSN of a server to test against. When unset,
#                          a throwaway cluster is started on 127.0.0.1 and
#                          removed again on exit.
#   REFSET_TEST_POSTGRES_STANDBY
#                          lib/pq DSN of a hot standby streaming from that
#                          server, for the tests of reads from a replica. With
#                          the throwaway cluster, one is started beside it.
#   REFSET_TEST_PACKAGES   space-separated package patterns to check and test
#                          instead of ./... (gofmt is limited to them too).
#   REFSET_TEST_PGBOUNCER  DSN of a PgBouncer in transaction mode in front of
#                          that server (internal/pgtest.Pooled). Set, with a
#                          PgBouncer started for it, whenever the throwaway
#                          cluster is; an outside server brings its own or
#                          the pooled tests skip (fail under CI=true).
#
# As root (CI) the server runs as the `postgres` OS user, because initdb and
# postgres refuse to run as root; missing PostgreSQL or C compiler packages
# are installed with apt-get. As an ordinary user everything runs as you.
# PgBouncer (Debian's pgbouncer package) is installed the same way.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s ==\n' "$*"; }
log() { printf 'test.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
is_root() { [[ $(id -u) -eq 0 ]]; }

command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH"

packages=(./...)
if [[ -n ${REFSET_TEST_PACKAGES:-} ]]; then
	read -r -a packages <<<"$REFSET_TEST_PACKAGES"
fi

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

# ---------------------------------------------------------------- gofmt, vet
# Static checks run before any server starts: they fail fast and do not need
# PostgreSQL to be installed.

# go_files prints, NUL-separated, the .go files the gofmt check covers.
go_files() {
	if [[ -n ${REFSET_TEST_PACKAGES:-} ]]; then
		# go list expands the patterns to package directories (-e: even
		# if some do not build); check the .go files directly in each.
		local dir
		go list -e -f '{{.Dir}}' "${packages[@]}" | while IFS= read -r dir; do
			if [[ -n $dir ]]; then
				find "$dir" -maxdepth 1 -type f -name '*.go' -print0
			fi
		done
	elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		# Tracked and new (not ignored) files: new files are exactly the
		# ones most likely to be unformatted.
		git ls-files -z --cached --others --exclude-standard -- '*.go'
	else
		find . -name .git -prune -o -type f -name '*.go' -print0
	fi
}

step gofmt
go version
files=()
while IFS= read -r -d '' f; do
	case "/$f" in
	# testdata may hold deliberately malformed Go; vendor is not ours.
	*/testdata/* | */vendor/*) continue ;;
	esac
	# Skip tracked files deleted from the working tree.
	if [[ -f $f ]]; then
		files+=("$f")
	fi
done < <(go_files)
if ((${#files[@]} > 0)); then
	unformatted=$(gofmt -l -- "${files[@]}") || die "gofmt failed (see errors above)"
	if [[ -n $unformatted ]]; then
		log "these files need gofmt -w:"
		sed 's/^/  /' <<<"$unformatted" >&2
		exit 1
	fi
fi
echo "ok (${#files[@]} files)"

step "go vet"
go vet "${packages[@]}"

# A Postgres-only program must build without a C compiler: nothing on the Postgres
# path may import store/sqlite (go-sqlite3 needs cgo). Only the full run checks it.
if [[ -z ${REFSET_TEST_PACKAGES:-} ]]; then
	step "CGO_ENABLED=0 build of the Postgres path"
	CGO_ENABLED=0 go build ./refset ./store/postgres ./cleanup ./otelrefset ./schema ./blockmanager ./examples/custody/tokens
	echo ok
fi

# -------------------------------------------------------------- C compiler
# -race (and cgo packages such as go-sqlite3) need a C compiler; without
# one the go command quietly disables cgo and -race fails.
cc=$(go env CC)
if ! command -v "${cc%% *}" >/dev/null 2>&1; then
	log "C compiler '$cc' not found (needed for -race); installing gcc"
	apt_install gcc libc6-dev ||
		die "C compiler '$cc' not found; install gcc (go test -race needs cgo)"
fi

# -------------------------------------------------------------- PostgreSQL
tmp=
pg_bindir=
pg_data=

# as_pg runs a server command as the OS user that owns the cluster.
as_pg() {
	if is_root; then
		# cd: postgres may not be allowed into the caller's directory,
		# and initdb/pg_ctl want a usable working directory.
		(cd "$tmp" && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# cleanup stops the server and removes its files however the script ends,
# and keeps the script's exit status.
cleanup() {
	local rc=$?
	set +e
	stop_pgbouncer
	stop_standby
	if [[ -n $pg_data && -f $pg_data/postmaster.pid ]]; then
		if ! as_pg "$pg_bindir/pg_ctl" -D "$pg_data" -m fast -w -t 30 stop >/dev/null 2>&1; then
			# Still there: SIGQUIT is PostgreSQL's immediate shutdown.
			local pid
			pid=$(head -n 1 "$pg_data/postmaster.pid" 2>/dev/null)
			[[ -n $pid ]] && kill -QUIT "$pid" 2>/dev/null && sleep 1
		fi
	fi
	[[ -n $tmp ]] && rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap runs.
trap 'exit 130' INT
trap 'exit 143' TERM

# find_pg_bindir prints the directory holding initdb, pg_ctl and friends.
find_pg_bindir() {
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
# start_server retries for that case.
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

start_server() {
	local attempt started_at=$SECONDS
	for attempt in 1 2 3 4 5; do
		pg_port=$(pick_port) || die "no free TCP port found on 127.0.0.1"
		pg_log=$tmp/server-$attempt.log
		# Durability is pointless for a cluster deleted at exit; turning
		# it off makes the tests much faster. Many tests run in parallel,
		# each with its own pool, hence max_connections.
		local opts="-c listen_addresses=127.0.0.1 -c port=$pg_port"
		opts+=" -c unix_socket_directories='$tmp/sock'"
		opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
		opts+=" -c max_connections=300 -c shared_buffers=256MB -c lc_messages=C"
		if as_pg "$pg_bindir/pg_ctl" -D "$pg_data" -l "$pg_log" -o "$opts" -w -t 30 start >/dev/null; then
			break
		fi
		if grep -q 'Address already in use' "$pg_log" 2>/dev/null; then
			log "port $pg_port was taken before the server could bind it; retrying"
			continue
		fi
		cat "$pg_log" >&2 2>/dev/null
		die "PostgreSQL failed to start (server log above)"
	done
	[[ -f $pg_data/postmaster.pid ]] || die "PostgreSQL failed to start: no free port after 5 attempts"

	local i
	for ((i = 0; i < 300; i++)); do
		if "$pg_bindir/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres; then
			echo "$("$pg_bindir/postgres" -V) ready on 127.0.0.1:$pg_port after $((SECONDS - started_at))s"
			return 0
		fi
		sleep 0.1
	done
	cat "$pg_log" >&2
	die "PostgreSQL did not become ready within 30s (server log above)"
}

# -------------------------------------------------------------- PgBouncer
# A PgBouncer in transaction mode in front of the throwaway cluster: the
# suites that must survive transaction pooling run through it
# (internal/pgtest.Pooled). Version 1.18 (Debian 12) keeps no prepared
# statements and passes no search_path, so each pooled test logs in as a role
# of its own whose search_path is its schema (ALTER ROLE ... SET), and PgBouncer
# looks roles up in the server (auth_user) instead of a file of users.
bouncer_dir=
bouncer_port=
bouncer_log=

# is_ci reports whether we run under CI (CI=true), where a suite that cannot
# run must fail rather than skip.
is_ci() { [[ ${CI:-} == true || ${CI:-} == 1 ]]; }

# find_pgbouncer prints the pgbouncer binary (Debian puts it in /usr/sbin,
# which an ordinary user's PATH may lack).
find_pgbouncer() {
	command -v pgbouncer 2>/dev/null && return 0
	[[ -x /usr/sbin/pgbouncer ]] && echo /usr/sbin/pgbouncer && return 0
	return 1
}

# write_pgbouncer_ini writes PgBouncer's configuration for port $1 (readable
# by the server's user, who runs PgBouncer too: it refuses to run as root).
write_pgbouncer_ini() {
	# Pools are per role, so per test: a pool of 20 covers the concurrency of
	# any one test; max_db_connections keeps them all within the server's
	# max_connections beside the direct tests. A pool that would pass it
	# waits until idle server connections of other pools close, so
	# server_idle_timeout is short; it also closes those of ended tests
	# soon, after which pgtest drops their roles.
	cat >"$bouncer_dir/pgbouncer.ini" <<-EOF
		[databases]
		* = host=127.0.0.1 port=$pg_port

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
		log_connections = 0
		log_disconnections = 0
		logfile = $bouncer_log
		pidfile = $bouncer_dir/pgbouncer.pid
	EOF
	echo '"postgres" ""' >"$bouncer_dir/users.txt"
}

# start_pgbouncer starts PgBouncer in front of the cluster on a free port and
# exports REFSET_TEST_PGBOUNCER. Without PgBouncer (and no apt-get to install
# it) it only warns, unless under CI.
start_pgbouncer() {
	local bin
	if ! bin=$(find_pgbouncer); then
		log "PgBouncer not found; installing it with apt-get"
		if apt_install pgbouncer; then
			bin=$(find_pgbouncer) || die "pgbouncer was installed but is still not found"
		elif is_ci; then
			die "PgBouncer is needed under CI (the pooled tests fail without it); install pgbouncer"
		else
			log "PgBouncer is not installed: the tests through it skip (install pgbouncer to run them)"
			return 0
		fi
	fi
	bouncer_dir=$tmp/pgbouncer
	as_pg mkdir "$bouncer_dir"
	local attempt i started_at=$SECONDS
	for attempt in 1 2 3 4 5; do
		bouncer_port=$(pick_port) || die "no free TCP port found on 127.0.0.1"
		bouncer_log=$bouncer_dir/pgbouncer-$attempt.log
		write_pgbouncer_ini "$bouncer_port"
		# Every test's pool is a client connection: allow PgBouncer the file
		# descriptors max_client_conn needs, as far as the hard limit goes.
		as_pg bash -c 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$0" -d -q "$1"' "$bin" "$bouncer_dir/pgbouncer.ini" ||
			true # a failure is in its log, read below
		for ((i = 0; i < 100; i++)); do
			if "$psql" -X -q -t -c 'SELECT 1' >/dev/null 2>&1 \
				"host=127.0.0.1 port=$bouncer_port user=postgres dbname=refset_test sslmode=disable connect_timeout=2"; then
				echo "$("$bin" --version | head -n 1) in transaction mode ready on 127.0.0.1:$bouncer_port after $((SECONDS - started_at))s"
				export REFSET_TEST_PGBOUNCER="postgres://postgres@127.0.0.1:$bouncer_port/refset_test?sslmode=disable"
				return 0
			fi
			sleep 0.1
		done
		stop_pgbouncer
		if grep -q 'Address already in use' "$bouncer_log" 2>/dev/null; then
			log "port $bouncer_port was taken before PgBouncer could bind it; retrying"
			continue
		fi
		cat "$bouncer_log" >&2 2>/dev/null
		die "PgBouncer did not start within 10s (its log above)"
	done
	die "PgBouncer failed to start: no free port after 5 attempts"
}

stop_pgbouncer() {
	local pid
	[[ -n $bouncer_dir && -f $bouncer_dir/pgbouncer.pid ]] || return 0
	pid=$(cat "$bouncer_dir/pgbouncer.pid" 2>/dev/null)
	# SIGTERM: immediate shutdown; its clients are gone by now.
	[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
	rm -f "$bouncer_dir/pgbouncer.pid"
}

if [[ -n ${REFSET_TEST_POSTGRES:-} ]]; then
	# Do not print the DSN: it may contain a password.
	step "PostgreSQL: using REFSET_TEST_POSTGRES from the environment"
else
	step "PostgreSQL: starting a throwaway cluster"
	if ! pg_bindir=$(find_pg_bindir); then
		if is_root && command -v apt-get >/dev/null 2>&1; then
			log "PostgreSQL server not found; installing it with apt-get"
			# We only want the binaries: stop the package from creating
			# (and starting) a system-wide "main" cluster on port 5432.
			mkdir -p /etc/postgresql-common/createcluster.d
			echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/refset-test.conf
			apt_install postgresql
			pg_bindir=$(find_pg_bindir) || die "PostgreSQL was installed but initdb is still not found"
		else
			die "PostgreSQL server binaries (initdb, pg_ctl) not found. Install PostgreSQL" \
				"(e.g. 'sudo apt-get install postgresql' or 'brew install postgresql')," \
				"or set REFSET_TEST_POSTGRES to a lib/pq DSN of a server you can use."
		fi
	fi

	if is_root; then
		id postgres >/dev/null 2>&1 ||
			die "running as root but there is no 'postgres' OS user to run the server as (initdb refuses root)"
		command -v runuser >/dev/null 2>&1 || die "running as root but runuser (util-linux) is missing"
		# Under /tmp, not $TMPDIR: postgres must be able to reach the
		# directory, and root's TMPDIR may be private.
		tmp=$(mktemp -d /tmp/refset-pg.XXXXXX)
		chown postgres "$tmp"
	else
		tmp=$(mktemp -d "${TMPDIR:-/tmp}/refset-pg.XXXXXX")
	fi
	pg_data=$tmp/data
	as_pg mkdir "$tmp/sock"

	started_at=$SECONDS
	as_pg "$pg_bindir/initdb" -D "$pg_data" -A trust -U postgres --no-sync -E UTF8 --locale=C >"$tmp/initdb.log" 2>&1 || {
		cat "$tmp/initdb.log" >&2
		die "initdb failed (output above)"
	}
	echo "initdb done after $((SECONDS - started_at))s ($pg_bindir)"
	start_server

	psql=$pg_bindir/psql
	[[ -x $psql ]] || psql=psql
	# A full connection string, so PG* variables in the caller's
	# environment (PGSSLMODE, PGDATABASE, ...) cannot redirect it.
	"$psql" -X -q -v ON_ERROR_STOP=1 \
		"host=127.0.0.1 port=$pg_port user=postgres dbname=postgres sslmode=disable" \
		-c 'CREATE DATABASE refset_test'
	export REFSET_TEST_POSTGRES="postgres://postgres@127.0.0.1:$pg_port/refset_test?sslmode=disable"
	start_pgbouncer
fi

# ------------------------------------------------------- PostgreSQL standby
# A hot standby streaming from the throwaway cluster (pg_basebackup -R), for the
# tests of reads from a replica: they get REFSET_TEST_POSTGRES_STANDBY, and pause
# its replay to make a lag they can count on.
standby_data=

# stop_standby stops the standby, if one runs; the EXIT trap calls it.
stop_standby() {
	if [[ -n $standby_data && -f $standby_data/postmaster.pid ]]; then
		if ! as_pg "$pg_bindir/pg_ctl" -D "$standby_data" -m fast -w -t 30 stop >/dev/null 2>&1; then
			local pid
			pid=$(head -n 1 "$standby_data/postmaster.pid" 2>/dev/null)
			[[ -n $pid ]] && kill -QUIT "$pid" 2>/dev/null && sleep 1
		fi
	fi
}

start_standby() {
	local started_at=$SECONDS attempt port log
	local primary="host=127.0.0.1 port=$pg_port user=postgres dbname=postgres sslmode=disable"
	# Asynchronous commits reach the standby when the WAL writer flushes them:
	# every 10ms rather than 200ms, so reports that wait for the standby to catch
	# up wait little.
	"$psql" -X -q -v ON_ERROR_STOP=1 "$primary" \
		-c "ALTER SYSTEM SET wal_writer_delay = '10ms'" -c 'SELECT pg_reload_conf()' >/dev/null
	# A hot standby needs at least the primary's max_connections.
	local max_conns
	max_conns=$("$psql" -X -qAt "$primary" -c 'SHOW max_connections')
	standby_data=$tmp/standby
	as_pg "$pg_bindir/pg_basebackup" -h 127.0.0.1 -p "$pg_port" -U postgres -D "$standby_data" \
		-R -X stream -c fast --no-sync >"$tmp/basebackup.log" 2>&1 || {
		cat "$tmp/basebackup.log" >&2
		die "pg_basebackup of the standby failed (output above)"
	}
	as_pg mkdir -p "$tmp/sock-standby"
	for attempt in 1 2 3 4 5; do
		port=$(pick_port) || die "no free TCP port found on 127.0.0.1"
		log=$tmp/standby-$attempt.log
		# hot_standby_feedback keeps the primary's vacuum from removing rows a
		# standby query still reads, which would cancel that query.
		local opts="-c listen_addresses=127.0.0.1 -c port=$port"
		opts+=" -c unix_socket_directories='$tmp/sock-standby'"
		opts+=" -c fsync=off -c full_page_writes=off -c hot_standby=on -c hot_standby_feedback=on"
		opts+=" -c max_connections=$max_conns -c shared_buffers=128MB -c lc_messages=C"
		if as_pg "$pg_bindir/pg_ctl" -D "$standby_data" -l "$log" -o "$opts" -w -t 60 start >/dev/null; then
			break
		fi
		if grep -q 'Address already in use' "$log" 2>/dev/null; then
			log "port $port was taken before the standby could bind it; retrying"
			continue
		fi
		cat "$log" >&2 2>/dev/null
		die "the PostgreSQL standby failed to start (server log above)"
	done
	[[ -f $standby_data/postmaster.pid ]] || die "the PostgreSQL standby failed to start: no free port after 5 attempts"
	local standby="host=127.0.0.1 port=$port user=postgres dbname=refset_test sslmode=disable" i
	for ((i = 0; i < 300; i++)); do
		if [[ $("$psql" -X -qAt "$standby" -c 'SELECT pg_is_in_recovery()' 2>/dev/null) == t ]]; then
			echo "standby streaming on 127.0.0.1:$port after $((SECONDS - started_at))s"
			export REFSET_TEST_POSTGRES_STANDBY="postgres://postgres@127.0.0.1:$port/refset_test?sslmode=disable"
			return 0
		fi
		sleep 0.1
	done
	cat "$log" >&2
	die "the PostgreSQL standby did not accept connections within 30s (server log above)"
}

if [[ -n $pg_data ]]; then
	step "PostgreSQL: starting a hot standby"
	start_standby
elif [[ -n ${REFSET_TEST_POSTGRES_STANDBY:-} ]]; then
	step "PostgreSQL: using REFSET_TEST_POSTGRES_STANDBY from the environment"
fi

# ----------------------------------------------------------------- go test
step "go test"
# The race detector slows the long concurrency tests (the collector races, the
# 20-second multi-process runs) several times over: allow them time. The output is
# go test's own, kept in a file as well for the summary line at the end.
out=$(mktemp "${TMPDIR:-/tmp}/refset-test.XXXXXX")
status=0
go test -race -count=1 -timeout 30m "$@" "${packages[@]}" 2>&1 | tee "$out" || status=$?
passed=$(grep -cE '^ok[[:space:]]' "$out" || true)
failed=$(grep -cE '^FAIL[[:space:]]+[^[:space:]]' "$out" || true)
rm -f "$out"
if ((status != 0 && failed == 0)); then
	failed=1 # go test itself failed (a flag, a timeout) before any package's result
fi
echo
echo "packages: $passed passed, $failed failed"
exit "$status"
