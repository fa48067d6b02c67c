#!/usr/bin/env bash
# Install (as root) whatever Debian 12 packages streamguard needs to build, test
# and benchmark. Idempotent: does nothing, not even `apt-get update`, when all
# packages are already installed. Never starts or stops any PostgreSQL cluster.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

PACKAGES=(
    build-essential            # gcc, make
    git                        # test.sh copies the tracked source tree
    perl                       # prove (TAP tests)
    "postgresql-${PG_MAJOR}"
    "postgresql-server-dev-${PG_MAJOR}"   # pg_config, PGXS, pg_regress, isolation tester
    libpq-dev
    librdkafka-dev             # Kafka sources (links the extension to librdkafka1)
    libipc-run-perl            # PostgreSQL's TAP test framework
    libio-pty-perl             # IPC::Run's pseudo-terminals (test/t/130_sgctl.pl: top, progress)
    curl                       # test/t/130_sgctl.pl scrapes sgctl metrics --listen
    prometheus-postgres-exporter prometheus   # test/t/135_monitoring.pl: the exporter with docs/monitoring, promtool
    chromium chromium-driver   # test/t/131_console.pl: sgctl serve in headless Chromium (skipped without)
    "postgresql-${PG_MAJOR}-pgq3"         # PgQ, a benchmark baseline
    pgqd
    sqlsmith                   # make fuzz and the fuzz layer of test.sh (test/fuzz/sqlsmith.pl)
    valgrind                   # make valgrind (test/valgrind.sh)
    gnuplot-nox                # make bench: the PNG charts (skipped with a message without it)
)

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
for t in gcc make prove; do
    command -v "$t" >/dev/null || sg_die "install-deps: $t not found on PATH"
done
sg_info "$("$PG_CONFIG" --version), $(gcc --version | head -n1)"
