#!/usr/bin/env bash
# The project's single test command (`make test` and CI run it).
#
#   scripts/test.sh [go test flags...]      e.g. scripts/test.sh -run Foo -v
#
# Steps: gofmt check, go vet, go vet with refset's own analyzer (cmd/refsetvet), a
# build of the whole module without cgo (and a check that the Postgres path links
# no SQLite driver), go test -race against PostgreSQL
# (lib/pq and pgx) and SQLite (go-sqlite3 and modernc.org/sqlite), the SQLite
# store's tests once more without cgo (on modernc.org/sqlite, its default there),
# then the same for the user's program in testdata/external, a module of its own.
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
#                          that server (internal/test/pgtest.Pooled, and
#                          refsettest.PgBouncerDSN, which custody's suite
#                          runs through on both drivers). Set, with a
#                          PgBouncer started for it, whenever the throwaway
#                          cluster is; an outside server brings its own or
#                          the pooled tests skip (fail under CI=true).
#   REFSET_TEST_HA_DSN     multi-host DSN of the high-availability cluster the
#                          failover tests (internal/test/hatest) switch over and
#                          kill. When the run includes that package and this
#                          is unset, scripts/hacluster.sh starts one (a
#                          pg_auto_failover monitor and three nodes, about
#                          10s) and stops it on exit; its state file, which
#                          the tests hand to the script, is REFSET_HA_STATE.
#
# As root (CI) the server runs as the `postgres` OS user, because initdb and
# postgres refuse to run as root; missing PostgreSQL or C compiler packages
# are installed with apt-get. As an ordinary user everything runs as you.
# PgBouncer (Debian's pgbouncer package) is installed the same way, and so is
# chromium, for the console's browser tests (CHROMIUM names another browser). The
# throwaway cluster is scripts/lib/cluster.sh, shared with the benchmark scripts.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s ==\n' "$*"; }
log() { printf 'test.sh: %s\n' "$*" >&2; }
# The throwaway cluster: is_root, apt_install and the cluster_* functions; die (log,
# then exit 1).
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH"

packages=(./...)
if [[ -n ${REFSET_TEST_PACKAGES:-} ]]; then
	read -r -a packages <<<"$REFSET_TEST_PACKAGES"
fi
# go test runs its packages -p (the cores) at a time in the order it is given them,
# so the full run names its longest ones first: started last, the conformance suite
# alone would run on after everything else is done, one core of two idle. ./...
# still brings all the rest, each once.
test_packages=("${packages[@]}")
if [[ -z ${REFSET_TEST_PACKAGES:-} ]]; then
	test_packages=(./internal/test/conformance ./examples/custody/tokens ./blockmanager ./store/postgres ./...)
fi

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

# refset's own analyzer (cmd/refsetvet, package analysis/unitctx): a call of refset
# inside a unit of work made with a context other than the unit's runs outside the
# unit. Over the module, and the user's program in testdata/external on the full run.
step "go vet -vettool=refsetvet"
vetdir=$(mktemp -d "${TMPDIR:-/tmp}/refsetvet.XXXXXX")
go build -o "$vetdir/refsetvet" ./cmd/refsetvet
go vet -vettool="$vetdir/refsetvet" "${packages[@]}"
if [[ -z ${REFSET_TEST_PACKAGES:-} ]]; then
	(cd testdata/external && go vet -vettool="$vetdir/refsetvet" ./...)
fi
rm -rf "$vetdir"
echo ok

# Every package builds without a C compiler: store/sqlite then runs on
# modernc.org/sqlite (go-sqlite3 needs cgo). A program links the SQLite driver it
# imports and no other (the main example: modernc.org/sqlite), and a Postgres-only
# program links no SQLite driver at all (neither go-sqlite3's C nor modernc's translated C, some 7 MB of
# binary): nothing on the Postgres path may import store/sqlite. refsettest is the
# Postgres path of the users' test helpers; its SQLite opener, refsettest/sqlitetest,
# is a package of its own. Only the full run checks it.
postgres_path=(./refset ./store/postgres ./cleanup ./otelrefset ./schema ./blockmanager ./examples/custody/tokens ./refsettest)
if [[ -z ${REFSET_TEST_PACKAGES:-} ]]; then
	step "CGO_ENABLED=0 build of the whole module"
	CGO_ENABLED=0 go build ./...
	deps=$(go list -deps "${postgres_path[@]}")
	if sqlite_deps=$(grep -E '^(github\.com/mattn/go-sqlite3|modernc\.org/sqlite)$' <<<"$deps"); then
		die "the Postgres path links a SQLite driver: $sqlite_deps"
	fi
	# A SQLite program links the one driver it imports: the main example, modernc.org/sqlite.
	example_drivers=$(go list -deps ./examples/blockchain | grep -E '^(github\.com/mattn/go-sqlite3|modernc\.org/sqlite)$' || true)
	if [[ $example_drivers != modernc.org/sqlite ]]; then
		die "examples/blockchain must link modernc.org/sqlite alone; it links: ${example_drivers:-no SQLite driver}"
	fi
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

# ----------------------------------------------------------------- chromium
# The console's tests (package console) load its pages in a headless chromium,
# driven by chromedp: Debian's chromium package, installed like PostgreSQL when the
# run includes the console. Without it the tests skip, or fail under CI=true.
if [[ -z ${CHROMIUM:-} ]] && ! command -v chromium >/dev/null 2>&1 &&
	grep -qx 'github.com/refsetdb/refset/console' <<<"$(go list "${packages[@]}" 2>/dev/null || true)"; then
	log "chromium not found (the console's browser tests need it); installing chromium"
	apt_install chromium || if is_ci; then
		die "chromium not found and not installable: the console's browser tests fail under CI=true (set CHROMIUM to a browser)"
	else
		log "chromium not installed: the console's browser tests skip"
	fi
fi

# -------------------------------------------------------------- PostgreSQL
# The throwaway cluster (scripts/lib/cluster.sh) goes away however the script
# ends, keeping its exit status.
cluster_trap_exit

if [[ -n ${REFSET_TEST_POSTGRES:-} ]]; then
	# Do not print the DSN: it may contain a password.
	step "PostgreSQL: using REFSET_TEST_POSTGRES from the environment"
else
	step "PostgreSQL: starting a throwaway cluster"
	cluster_start
	cluster_start_pgbouncer
fi

# A hot standby streaming from the throwaway cluster, for the tests of reads
# from a replica.
if [[ -n $cluster_data ]]; then
	step "PostgreSQL: starting a hot standby"
	cluster_start_standby
elif [[ -n ${REFSET_TEST_POSTGRES_STANDBY:-} ]]; then
	step "PostgreSQL: using REFSET_TEST_POSTGRES_STANDBY from the environment"
fi

# --------------------------------------------------------------- HA cluster
# internal/test/hatest's failover tests need the throwaway HA cluster of
# scripts/hacluster.sh; it is started only when the run includes that package
# (a full run does), with a state file of its own, and stopped at exit with
# the cluster above, however the script ends.
ha_state=
# shellcheck disable=SC2317 # called by cluster_on_exit
stop_ha_cluster() {
	[[ -n $ha_state ]] || return 0
	REFSET_HA_STATE=$ha_state bash scripts/hacluster.sh stop
	ha_state=
}
if [[ -n ${REFSET_TEST_HA_DSN:-} ]]; then
	step "HA cluster: using REFSET_TEST_HA_DSN (and REFSET_HA_STATE) from the environment"
elif grep -qx 'github.com/refsetdb/refset/internal/test/hatest' <<<"$(go list "${packages[@]}" 2>/dev/null || true)"; then
	step "HA cluster: starting scripts/hacluster.sh for internal/test/hatest"
	if ! command -v pg_autoctl >/dev/null 2>&1 && ! { is_root && command -v apt-get >/dev/null 2>&1; } && ! is_ci; then
		# As cluster_start_pgbouncer: outside CI a missing package is a skip.
		log "pg_auto_failover (pg_autoctl) is not installed: internal/test/hatest skips" \
			"(install postgresql-15-auto-failover to run it)"
	else
		ha_state=$(mktemp -u /tmp/refset-ha-state.XXXXXX)
		export REFSET_HA_STATE=$ha_state
		cluster_at_exit stop_ha_cluster
		ha_exports=$(bash scripts/hacluster.sh start) || die "the HA cluster failed to start (its output above)"
		eval "$ha_exports"
	fi
fi

# ----------------------------------------------------------------- go test
step "go test"
# The race detector slows the long concurrency tests (the collector races, the
# 20-second multi-process runs) several times over: allow them time. The output is
# go test's own, kept in a file as well for the summary line at the end.
out=$(mktemp "${TMPDIR:-/tmp}/refset-test.XXXXXX")
status=0
go test -race -count=1 -timeout 30m "$@" "${test_packages[@]}" 2>&1 | tee "$out" || status=$?
# The program of a user outside refset's module (testdata/external, a module of its
# own that ./... does not reach): it builds on refset's exported names alone, and its
# tests run on SQLite, lib/pq and pgx. Only the full run takes it.
if [[ -z ${REFSET_TEST_PACKAGES:-} ]]; then
	(cd testdata/external && go vet ./... && go test -race -count=1 -timeout 10m ./...) 2>&1 | tee -a "$out" || status=$?
	# A program built without cgo runs on SQLite: the SQLite store's own tests and
	# the users' SQLite helper, on modernc.org/sqlite, the default there (no -race:
	# the race detector needs cgo). The suites above ran on both drivers already.
	CGO_ENABLED=0 go test -count=1 -timeout 10m ./store/sqlite/... ./refsettest/sqlitetest/ 2>&1 | tee -a "$out" || status=$?
fi
passed=$(grep -cE '^ok[[:space:]]' "$out" || true)
failed=$(grep -cE '^FAIL[[:space:]]+[^[:space:]]' "$out" || true)
rm -f "$out"
if ((status != 0 && failed == 0)); then
	failed=1 # go test itself failed (a flag, a timeout) before any package's result
fi
echo
echo "packages: $passed passed, $failed failed"
exit "$status"
