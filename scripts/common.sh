# shellcheck shell=bash
# Shared helpers for streamguard's scripts. Sourced, never executed.

PG_MAJOR=15
PG_BINDIR=/usr/lib/postgresql/${PG_MAJOR}/bin
# Honour an explicit PG_CONFIG from the environment, default to Debian's PostgreSQL 15.
PG_CONFIG=${PG_CONFIG:-${PG_BINDIR}/pg_config}
export DEBIAN_FRONTEND=noninteractive

SG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The extension's name, from its control file (streamguard).
SG_EXT=streamguard
for _c in "$SG_ROOT"/*.control; do [ -f "$_c" ] && SG_EXT=$(basename "$_c" .control); done
unset _c

sg_log()  { printf '==> %s\n' "$*"; }
sg_info() { printf '    %s\n' "$*"; }
sg_warn() { printf 'WARNING: %s\n' "$*" >&2; }
sg_die()  { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

sg_is_root() { [ "$(id -u)" -eq 0 ]; }

# The unprivileged OS user that runs PostgreSQL servers: postgres when we are
# root (PostgreSQL refuses to run as root), otherwise ourselves.
sg_server_user() {
    if sg_is_root; then echo postgres; else id -un; fi
}

# Run a command as the server user with PostgreSQL's bin dir first on PATH.
# Usage: sg_as_server_user [VAR=value ...] command args...
# As root it runs from / (the caller's directory, a checkout under /root say,
# may be closed to postgres: PostgreSQL's programs then complain that they
# "could not change directory"), so pass absolute paths.
sg_as_server_user() {
    # A fixed locale keeps pg_regress output stable; stray libpq variables
    # (PGHOST, PGPORT, ...) must not redirect the test servers' clients.
    local -a clean=(-u LC_ALL -u PGHOST -u PGHOSTADDR -u PGPORT -u PGUSER -u PGDATABASE
                    -u PGDATA -u PGPASSWORD -u PGSERVICE -u PGOPTIONS LANG=C.UTF-8)
    if sg_is_root; then
        local home
        home=$(getent passwd postgres | cut -d: -f6)
        (cd / && runuser -u postgres -- env "${clean[@]}" HOME="${home:-/tmp}" \
            PATH="${PG_BINDIR}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin" "$@")
    else
        env "${clean[@]}" PATH="${PG_BINDIR}:$PATH" "$@"
    fi
}
