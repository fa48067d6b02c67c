#!/usr/bin/env bash
# The Debian package, installed the way a user installs it, into Debian's own
# PostgreSQL layout (as root, on a Debian 12 machine with postgresql-15):
#
#   1. builds it (make deb), unless given: test-deb.sh path/to/postgresql-15-streamguard_*.deb
#   2. apt-get install ./postgresql-15-streamguard_*.deb; checks the files it
#      put in place (library, control file, SQL scripts, sgctl and the
#      /usr/bin/sgctl alternative)
#   3. pg_createcluster 15 sgpkg (a port of its own; localhost and the unix socket),
#      shared_preload_libraries = 'streamguard', starts it, CREATE EXTENSION,
#      runs a pipeline end to end (append_batch -> exactly_once pipeline ->
#      sink table: every event once) and sgctl against it (verify, tail)
#   4. pg_dropcluster --stop, apt-get purge: no file of the package is left,
#      nor the alternative.
#
# It refuses to run if streamguard is already installed there (by the package
# or by "make install"): it would replace, then remove, someone's install.
# Everything it creates is removed on exit, also after a failure.
# Environment: SG_DEB_PORT (default 5497, or the next free port),
#              SG_DEB_REGRESS=1 also runs the pg_regress suite against the
#              installed package (debian/tests/regress, the autopkgtest).
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/common.sh"

PKG="postgresql-${PG_MAJOR}-${SG_EXT}"
CLUSTER=sgpkg
LIBDIR=/usr/lib/postgresql/${PG_MAJOR}/lib
EXTDIR=/usr/share/postgresql/${PG_MAJOR}/extension

sg_is_root || sg_die "test-deb.sh must run as root (it installs a Debian package)"
[ -x "${PG_BINDIR}/postgres" ] || sg_die "Debian's postgresql-${PG_MAJOR} is not installed"
command -v pg_createcluster >/dev/null || sg_die "pg_createcluster (postgresql-common) not found"

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}
is_installed "$PKG" && sg_die "$PKG is installed already; remove it first (apt-get remove $PKG)"
for f in "$LIBDIR/$SG_EXT.so" "$EXTDIR/$SG_EXT.control" "${PG_BINDIR}/sgctl"; do
    [ -e "$f" ] && sg_die "$f exists (an install with 'make install'?): not replacing it"
done
# (grep -q on a here-string: in a pipeline its early exit would fail the writer under pipefail)
grep -qx "${PG_MAJOR} ${CLUSTER}" <<<"$(pg_lsclusters -h | awk '{print $1 " " $2}')" &&
    sg_die "cluster ${PG_MAJOR}/${CLUSTER} exists already"

installed_by_us=0
cluster_by_us=0
cleanup() {
    local rc=$?
    set +e
    if [ "$cluster_by_us" = 1 ]; then
        pg_dropcluster --stop "$PG_MAJOR" "$CLUSTER"
    fi
    if [ "$installed_by_us" = 1 ] && is_installed "$PKG"; then
        apt-get purge -y -q "$PKG" </dev/null >/dev/null
    fi
    [ $rc -eq 0 ] || echo "test-deb: FAILED" >&2
    exit $rc
}
trap cleanup EXIT

# ------------------------------------------------------------- build ----
if [ $# -ge 1 ]; then
    DEB=$(readlink -f "$1")
else
    sg_log "test-deb: make deb"
    make -C "$SG_ROOT" deb </dev/null
    DEB=""
    for f in "$SG_ROOT"/build/deb/"${PKG}"_*.deb; do DEB=$f; done
fi
[ -f "$DEB" ] || sg_die "no package file: $DEB"
sg_log "test-deb: $(basename "$DEB")"
dpkg-deb -I "$DEB" | sed -n 's/^ \(Package\|Version\|Depends\):/    \1:/p'

# ----------------------------------------------------------- install ----
sg_log "test-deb: apt-get install $DEB"
installed_by_us=1
apt-get install -y -q --no-install-recommends "$DEB" </dev/null
is_installed "$PKG" || sg_die "$PKG is not installed"
mapfile -t FILES < <(dpkg -L "$PKG" | while read -r f; do [ -f "$f" ] && echo "$f"; done)
for f in "$LIBDIR/$SG_EXT.so" "$EXTDIR/$SG_EXT.control" "$EXTDIR/$SG_EXT--0.3.sql" \
         "$EXTDIR/$SG_EXT--0.1--0.2.sql" "$EXTDIR/$SG_EXT--0.2--0.3.sql" "${PG_BINDIR}/sgctl"; do
    grep -qxF -- "$f" <<<"$(printf '%s\n' "${FILES[@]}")" || sg_die "the package lacks $f"
done
[ "$(readlink -f /usr/bin/sgctl)" = "${PG_BINDIR}/sgctl" ] ||
    sg_die "/usr/bin/sgctl does not lead to ${PG_BINDIR}/sgctl"
sg_info "${#FILES[@]} files; /usr/bin/sgctl -> $(readlink /usr/bin/sgctl) -> $(readlink -f /usr/bin/sgctl)"

# ----------------------------------------------------------- cluster ----
PORT=${SG_DEB_PORT:-5497}
for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || break
    PORT=$((PORT + 1))
done
sg_log "test-deb: pg_createcluster ${PG_MAJOR} ${CLUSTER} --port=${PORT}"
cluster_by_us=1
pg_createcluster "$PG_MAJOR" "$CLUSTER" --port="$PORT" --start-conf=manual \
    -o "shared_preload_libraries=streamguard" \
    -o "max_worker_processes=16" -o "streamguard.maintenance_naptime=200ms" >/dev/null
pg_ctlcluster "$PG_MAJOR" "$CLUSTER" start

psql_() {   # psql_ DB SQL: one value
    runuser -u postgres -- env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER \
        psql -X -At -v ON_ERROR_STOP=1 -p "$PORT" -d "$1" -c "$2"
}
wait_value() {   # wait_value DB SQL EXPECTED SECONDS
    local deadline=$((SECONDS + $4)) v=""
    while [ $SECONDS -lt $deadline ]; do
        v=$(psql_ "$1" "$2" 2>/dev/null || true)
        [ "$v" = "$3" ] && return 0
        sleep 0.2
    done
    sg_warn "timed out: [$2] is [$v], not [$3]"
    return 1
}

wait_value postgres "SELECT 1" 1 60 || sg_die "the cluster does not answer"
[ "$(psql_ postgres 'SHOW shared_preload_libraries')" = streamguard ] || sg_die "streamguard is not preloaded"
psql_ postgres "CREATE DATABASE sgpkg" >/dev/null
psql_ sgpkg "CREATE EXTENSION streamguard" >/dev/null
[ "$(psql_ sgpkg "SELECT extversion FROM pg_extension WHERE extname = 'streamguard'")" = 0.3 ] ||
    sg_die "CREATE EXTENSION did not install 0.3"
sg_log "test-deb: a pipeline end to end"
psql_ sgpkg "
SELECT streamguard.create_stream('orders', 4);
CREATE TABLE order_rows (order_id bigint NOT NULL, amount numeric NOT NULL);
SELECT streamguard.create_pipeline('order_rows', 'orders',
    \$\$INSERT INTO order_rows SELECT (payload->>'order_id')::bigint, (payload->>'amount')::numeric FROM batch\$\$);
" >/dev/null
for b in 0 1 2 3 4; do
    psql_ sgpkg "SELECT count(*) FROM streamguard.append_batch('orders',
        ARRAY(SELECT jsonb_build_object('order_id', g, 'amount', g % 100) FROM generate_series($b * 200 + 1, $b * 200 + 200) g),
        ARRAY(SELECT 'c' || (g % 13) FROM generate_series($b * 200 + 1, $b * 200 + 200) g),
        ARRAY(SELECT 'o' || g FROM generate_series($b * 200 + 1, $b * 200 + 200) g))" >/dev/null
done
wait_value sgpkg "SELECT count(*) FROM order_rows" 1000 120 || sg_die "the pipeline did not deliver 1000 events"
got=$(psql_ sgpkg "SELECT count(*) || ' ' || count(DISTINCT order_id) || ' ' || sum(amount) FROM order_rows")
[ "$got" = "1000 1000 49500" ] || sg_die "the sink holds [$got], not [1000 1000 49500]"
sg_info "the sink has 1000 rows, 1000 distinct orders, sum 49500"

sg_log "test-deb: sgctl"
sgctl_() { runuser -u postgres -- env -u PGHOST -u PGPORT /usr/bin/sgctl -p "$PORT" -d sgpkg "$@"; }
sgctl_ verify --stream orders --sink public.order_rows --id "(payload->>'order_id')::bigint" --sink-id order_id ||
    sg_die "sgctl verify failed"
n=$(sgctl_ tail orders --consumer pkgcheck --no-follow --max 2000 2>/dev/null | wc -l) || true
sg_info "sgctl tail printed $n events"
[ "$n" = 1000 ] || sg_die "sgctl tail printed $n events, not 1000"

# with SG_DEB_REGRESS=1 also the package's autopkgtest: the pg_regress
# suite against the installed files (debian/tests/regress)
if [ "${SG_DEB_REGRESS:-0}" = 1 ]; then
    sg_log "test-deb: debian/tests/regress"
    tmp=$(mktemp -d)
    mkdir "$tmp/src" "$tmp/work"
    git -C "$SG_ROOT" archive HEAD | tar -x -C "$tmp/src"
    (cd "$tmp/src" && AUTOPKGTEST_TMP="$tmp/work" sh debian/tests/regress) || { rm -rf "$tmp"; sg_die "debian/tests/regress failed"; }
    rm -rf "$tmp"
fi

# ------------------------------------------------------------ remove ----
sg_log "test-deb: pg_dropcluster --stop ${PG_MAJOR} ${CLUSTER}"
pg_dropcluster --stop "$PG_MAJOR" "$CLUSTER"
cluster_by_us=0
[ ! -e "/etc/postgresql/${PG_MAJOR}/${CLUSTER}" ] && [ ! -e "/var/lib/postgresql/${PG_MAJOR}/${CLUSTER}" ] ||
    sg_die "the cluster's directories are still there"
sg_log "test-deb: apt-get purge $PKG"
apt-get purge -y -q "$PKG" </dev/null >/dev/null
installed_by_us=0
is_installed "$PKG" && sg_die "$PKG is still installed"
[ -z "$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null)" ] || [ "$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null)" = not-installed ] ||
    sg_die "$PKG is not purged: $(dpkg-query -W -f='${db:Status-Status}' "$PKG")"
left=0
for f in "${FILES[@]}" /usr/bin/sgctl; do
    if [ -e "$f" ] || [ -L "$f" ]; then sg_warn "left behind: $f"; left=1; fi
done
update-alternatives --list sgctl >/dev/null 2>&1 && { sg_warn "the sgctl alternative is still registered"; left=1; }
[ $left = 0 ] || sg_die "files of $PKG are left after apt-get purge"
sg_log "test-deb: passed (installed, ran, removed; nothing left)"
