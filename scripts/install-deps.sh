#!/usr/bin/env bash
# Install (as root) the Debian 12 packages streamguard needs. Idempotent: does
# nothing, not even `apt-get update`, when all packages are already installed.
# Never starts or stops any PostgreSQL cluster.
#
#   install-deps.sh           build and test: what scripts/test.sh needs (the default)
#   install-deps.sh --build   only what building and installing the extension
#                             needs (make, make install): for a user installing it
#   install-deps.sh --demo    what scripts/demo.sh needs: the build packages and
#                             procps (ps), nothing of the test tools
#   install-deps.sh --deb     what building it and its Debian package needs (make deb)
#   install-deps.sh --list [MODE]
#                             print the packages of MODE (all, build, demo, deb),
#                             one per line, and exit (no root needed, installs nothing)
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

# building and installing: make, make install
BUILD_PACKAGES=(
    build-essential            # gcc, make
    "postgresql-${PG_MAJOR}"
    "postgresql-server-dev-${PG_MAJOR}"   # pg_config, PGXS, pg_regress, isolation tester
    libpq-dev                  # sgctl; the extension's remote sources and sinks
    librdkafka-dev             # Kafka sources and sinks (links the extension to librdkafka1)
)
# the test suites, the demo and the benchmarks
TEST_PACKAGES=(
    git                        # test.sh copies the tracked source tree
    perl                       # prove (TAP tests)
    libipc-run-perl            # PostgreSQL's TAP test framework
    libio-pty-perl             # IPC::Run's pseudo-terminals (test/t/130_sgctl.pl: top, progress)
    curl                       # test/t/130_sgctl.pl scrapes sgctl metrics --listen
    kcat                       # test/t/145_kafka_local.pl: the documented local Kafka recipe, both ends
    prometheus-postgres-exporter prometheus   # test/t/135_monitoring.pl: the exporter with docs/monitoring, promtool
    chromium chromium-driver   # test/t/131_console.pl: sgctl serve in headless Chromium (skipped without)
    "postgresql-${PG_MAJOR}-pgq3"         # PgQ, a benchmark baseline
    pgqd
    sqlsmith                   # make fuzz and the fuzz layer of test.sh (test/fuzz/sqlsmith.pl)
    valgrind                   # make valgrind (test/valgrind.sh)
    gnuplot-nox                # make bench: the PNG charts (skipped with a message without it)
)
# the demo, besides the build packages (psql comes with postgresql-NN)
DEMO_PACKAGES=(
    procps                     # ps: the demo checks the pid it kill -9s is its own server's
)
# the Debian package: make deb (dpkg-buildpackage, pg_buildext)
DEB_PACKAGES=(
    git                        # make dist / make deb archive the committed tree
    dpkg-dev
    debhelper
    postgresql-server-dev-all  # pg_buildext
)

usage="usage: install-deps.sh [--build | --demo | --deb | --list [all|build|demo|deb]]"
mode=all list=0
case "${1:-}" in
    "") ;;
    --build) mode=build ;;
    --demo) mode=demo ;;
    --deb) mode=deb ;;
    --list) list=1; mode=${2:-all} ;;
    *) sg_die "$usage" ;;
esac
case $mode in
    all)   PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
    build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
    demo)  PACKAGES=("${BUILD_PACKAGES[@]}" "${DEMO_PACKAGES[@]}") ;;
    deb)   PACKAGES=("${BUILD_PACKAGES[@]}" "${DEB_PACKAGES[@]}") ;;
    *)     sg_die "$usage" ;;
esac
if [ "$list" = 1 ]; then
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi

sg_is_root || sg_die "install-deps.sh must run as root (it installs Debian packages)"

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

missing=()
for p in "${PACKAGES[@]}"; do
    is_installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
    sg_log "install-deps: all required packages are installed"
else
    sg_log "install-deps: installing ${missing[*]}"
    apt-get update -q
    # Recommends are not needed (postgresql-server-dev already depends on clang/llvm).
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
    for p in "${missing[@]}"; do
        is_installed "$p" || sg_die "install-deps: package $p is still not installed"
    done
fi

getent passwd postgres >/dev/null || sg_die "install-deps: OS user 'postgres' is missing (postgresql-common should create it)"
[ -x "$PG_CONFIG" ] || sg_die "install-deps: $PG_CONFIG not found"
tools=(gcc make)
[ $mode = all ] && tools+=(prove)
[ $mode = demo ] && tools+=(ps psql)
for t in "${tools[@]}"; do
    command -v "$t" >/dev/null || sg_die "install-deps: $t not found on PATH"
done
sg_info "$("$PG_CONFIG" --version), $(gcc --version | head -n1)"
