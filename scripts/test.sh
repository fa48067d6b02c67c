#!/usr/bin/env bash
# Run every streamguard test suite: pg_regress (sql/ + expected/), isolation
# specs (test/isolation/), TAP tests (test/t/*.pl) and a short SQLsmith fuzz
# run (test/fuzz/sqlsmith.pl, the layer `make fuzz` runs), all through PGXS
# `make installcheck` on throwaway servers. Benchmarks (test/bench/) are not run.
#
# As root on a fresh Debian 12: installs missing packages, builds and installs
# the extension, copies the source tree to a fresh directory under /tmp owned
# by `postgres` and runs the suites there as `postgres`.
# As another user (with everything installed already): skips the install
# steps and runs the suites as that user.
#
# Then the other PostgreSQL majors (16 and later), each with its own build
# and install: regress, isolation and a TAP compat set (TAP_COMPAT below,
# smaller crash matrices) -- or the whole TAP layer with SG_TAP_ALL=1. The
# majors come from PG_CONFIGS="path/pg_config ..." or, when it is unset and
# ../shared/postgres exists next to the checkout, from the install trees
# there (postgresql-NN-cassert-bookworm-amd64.tar.xz, checked against its
# SHA256SUMS and extracted once into SG_PG_CACHE, default
# /tmp/streamguard-pg-cache). Without either, one line says they are skipped.
#
# The last line of output is "N passed, N failed" (every major), after the
# counts per major and layer; exit status is non-zero if anything failed.
#
# Environment: SG_LAYER_TIMEOUT (seconds per layer, default 3600),
#              SG_KEEP=1 keeps the test directory even when all tests pass,
#              PG_CONFIGS, SG_PG_CACHE, SG_TAP_ALL=1 (above),
#              SG_MAJORS_ONLY=1 skips the default PostgreSQL's layers,
#              SG_MAJOR_JOBS (2): other majors run that many at a time,
#              SG_FUZZ_QUERIES / SG_FUZZ_SEED size the fuzz layer (default
#              2000 queries per role, seed 1: docs/testing.md),
#              SG_UPGRADE_FROM / SG_UPGRADE_TO / SG_PG15_VANILLA for
#              096_pg_upgrade (prepare_pg_upgrade_servers below),
#              SG_LAYERS="regress isolation" runs only those layers (of
#              regress isolation tap fuzz; default all), e.g. a first check
#              of a new machine in minutes instead of the whole run.
set -uo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

ALL_LAYERS=(regress isolation tap fuzz)
read -r -a LAYERS <<<"${SG_LAYERS:-${ALL_LAYERS[*]}}"
[ ${#LAYERS[@]} -gt 0 ] || sg_die "SG_LAYERS is empty; name some of: ${ALL_LAYERS[*]}"
for _l in "${LAYERS[@]}"; do
    case " ${ALL_LAYERS[*]} " in
        *" $_l "*) ;;
        *) sg_die "SG_LAYERS: unknown layer '$_l' (the layers are: ${ALL_LAYERS[*]})" ;;
    esac
done
unset _l

LAYER_TIMEOUT=${SG_LAYER_TIMEOUT:-3600}
LOG_TAIL=${SG_LOG_TAIL:-150}
DIFF_TAIL=${SG_DIFF_TAIL:-400}

finish() {   # finish PASSED FAILED
    echo
    echo "$1 passed, $2 failed"
    [ "$2" -eq 0 ] && exit 0
    exit 1
}

# ---------------------------------------------------------------- build ----
if sg_is_root; then
    sg_log "test: installing dependencies and building (root)"
else
    sg_log "test: running as $(id -un), not root: skipping package installation;" \
           "building in place and installing only if the PostgreSQL directories are writable"
fi
if ! bash "$SG_ROOT/scripts/build.sh"; then
    echo "test: build failed, no test suite was run" >&2
    finish 0 1
fi
if [ ! -f "$("$PG_CONFIG" --pkglibdir)/$SG_EXT.so" ]; then
    echo "test: $SG_EXT is not installed into $("$PG_CONFIG" --pkglibdir); run scripts/build.sh as root" >&2
    finish 0 1
fi

# ------------------------------------------------- copy the source tree ----
WORK=$(mktemp -d /tmp/streamguard-test.XXXXXX)
LOGS="$WORK/_test-logs"
mkdir -p "$LOGS"
sg_log "test: copying the source tree to $WORK"

copy_tree() {   # copy_tree DEST
    local dest=$1
    if command -v git >/dev/null &&
       git -c safe.directory='*' -C "$SG_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        # Tracked files plus untracked, non-ignored ones (work in progress);
        # build outputs are ignored through .gitignore.
        (cd "$SG_ROOT" &&
         git -c safe.directory='*' ls-files -z --cached --others --exclude-standard |
         while IFS= read -r -d '' f; do [ -f "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
         tar --null -T - -cf -) | tar -C "$dest" -xf -
    else
        tar -C "$SG_ROOT" -cf - \
            --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
            --exclude=results --exclude=output_iso --exclude='tmp_check*' \
            --exclude=regression.diffs --exclude=regression.out --exclude=log \
            --exclude=bench-results --exclude=_test-logs . | tar -C "$dest" -xf -
    fi
}
if ! copy_tree "$WORK"; then
    echo "test: could not copy the source tree to $WORK" >&2
    finish 0 1
fi
if sg_is_root; then
    chown -R postgres:postgres "$WORK"
fi
RUN_USER=$(sg_server_user)

# ------------------------------------------ servers for 096_pg_upgrade ----
# prepare_pg_upgrade_servers [PG_CONFIG...]: exports what 096_pg_upgrade.pl
# reads (docs/testing.md), unless already set:
#  - SG_UPGRADE_TO, the bin directories of the newer majors given, from
#    SG_UPGRADE_MIN_MAJOR (18) on (default: PG_CONFIGS, else the install
#    trees extracted under SG_PG_CACHE), each
#    with streamguard built and installed from a copy of $WORK in $WORK/pgNN;
#  - SG_UPGRADE_FROM, as root when this PostgreSQL 15 stamps pg_attver on
#    every column (newer majors refuse it): Debian's postgresql-15 15.18,
#    which does not, fetched once (apt-get download, with its server headers)
#    into SG_PG15_VANILLA (default /tmp/streamguard-pg15-vanilla), with
#    streamguard built against those headers and the client programs of
#    this PostgreSQL linked in.  Unavailable, 096 says it skips.
# Nothing here fails the run: what cannot be prepared is left unset.
prepare_pg_upgrade_servers() {
    local cache=${SG_PG_CACHE:-/tmp/streamguard-pg-cache-$(id -un)}
    local van=${SG_PG15_VANILLA:-/tmp/streamguard-pg15-vanilla}
    local bindir v major pgc d root p
    local -a cfgs=() to=()
    bindir=$("$PG_CONFIG" --bindir)
    if [ -z "${SG_UPGRADE_TO+x}" ]; then
        if [ $# -gt 0 ]; then cfgs=("$@")
        elif [ -n "${PG_CONFIGS:-}" ]; then read -r -a cfgs <<<"$PG_CONFIGS"
        else cfgs=("$cache"/pg[0-9]*/bin/pg_config)
        fi
        for pgc in "${cfgs[@]}"; do
            [ -x "$pgc" ] || continue    # also BAD:... entries and an empty glob
            v=$("$pgc" --version 2>/dev/null | awk '{print $2}'); major=${v%%.*}; major=${major%%[a-z]*}
            # the newest majors (SG_UPGRADE_MIN_MAJOR, 18): each target costs a build and an upgrade
            [ -n "$major" ] && [ "$major" -gt "$PG_MAJOR" ] && [ "$major" -ge "${SG_UPGRADE_MIN_MAJOR:-18}" ] || continue
            d="$WORK/pg$major"
            mkdir -p "$d" &&
                tar -C "$WORK" --exclude=./_test-logs --exclude='./pg[0-9]*' -cf - . | tar -C "$d" -xf - &&
                make -C "$d" -j"$(nproc 2>/dev/null || echo 2)" --no-print-directory PG_CONFIG="$pgc" \
                    >"$LOGS/upgrade-pg$major-build.log" 2>&1 </dev/null &&
                make -C "$d" --no-print-directory PG_CONFIG="$pgc" install \
                    >>"$LOGS/upgrade-pg$major-build.log" 2>&1 </dev/null ||
                { sg_warn "096_pg_upgrade: streamguard does not build for PostgreSQL $major" \
                          "(log: $LOGS/upgrade-pg$major-build.log); not a target"; continue; }
            # run_major builds in the same directory: it finds this and does not build again
            readlink -f "$pgc" > "$d/.sg-built-for"
            sg_is_root && chown -R postgres:postgres "$d"
            to+=("$("$pgc" --bindir)")
        done
        if [ ${#to[@]} -gt 0 ]; then
            export SG_UPGRADE_TO="${to[*]}"
            sg_info "096_pg_upgrade: SG_UPGRADE_TO=$SG_UPGRADE_TO"
        fi
    fi
    [ -z "${SG_UPGRADE_FROM+x}" ] && [ "$PG_MAJOR" = 15 ] || return 0
    grep -qa 'pg_attver' "$bindir/postgres" || return 0
    if ! sg_is_root; then
        sg_info "096_pg_upgrade: $bindir/postgres stamps pg_attver; SG_UPGRADE_FROM is not set (as root, test.sh fetches an unmodified 15)"
        return 0
    fi
    root="$van/root"
    if [ ! -x "$root/usr/lib/postgresql/15/bin/postgres" ] ||
       [ ! -f "$root/usr/include/postgresql/15/server/pg_config.h" ]; then
        sg_log "test: PostgreSQL 15 here stamps pg_attver: fetching Debian's postgresql-15 15.18 for 096_pg_upgrade into $van"
        rm -rf "$root" && mkdir -p "$van/debs" "$root" && chmod 755 "$van" "$van/debs"
        if ! (cd "$van/debs" && timeout 300 apt-get download -q \
                  postgresql-15=15.18-0+deb12u1 postgresql-server-dev-15=15.18-0+deb12u1) >"$LOGS/pg15-vanilla.log" 2>&1; then
            sg_warn "096_pg_upgrade: could not download postgresql-15 15.18 (log: $LOGS/pg15-vanilla.log); its upgrades to newer majors are skipped"
            return 0
        fi
        for p in "$van"/debs/postgresql-15_15.18-*.deb "$van"/debs/postgresql-server-dev-15_15.18-*.deb; do
            dpkg-deb -x "$p" "$root" || { sg_warn "096_pg_upgrade: could not extract $p"; return 0; }
        done
    fi
    # the client programs (psql, pg_dump, pg_config, ...) come from postgresql-client-15
    for p in "$bindir"/*; do
        [ -e "$root/usr/lib/postgresql/15/bin/${p##*/}" ] || ln -s "$p" "$root/usr/lib/postgresql/15/bin/"
    done
    # 15.20's headers inline calls into functions 15.18 does not have:
    # build against 15.18's own
    rm -rf "$van/build" && mkdir -p "$van/build" &&
        tar -C "$WORK" --exclude=./_test-logs --exclude='./pg[0-9]*' -cf - . | tar -C "$van/build" -xf - &&
        make -C "$van/build" -j"$(nproc 2>/dev/null || echo 2)" --no-print-directory PG_CONFIG="$PG_CONFIG" \
            includedir_server="$root/usr/include/postgresql/15/server" \
            pkglibdir="$root/usr/lib/postgresql/15/lib" datadir="$root/usr/share/postgresql/15" \
            bindir="$root/usr/lib/postgresql/15/bin" all install >>"$LOGS/pg15-vanilla.log" 2>&1 </dev/null ||
        { sg_warn "096_pg_upgrade: streamguard does not build for PostgreSQL 15.18 (log: $LOGS/pg15-vanilla.log)"; return 0; }
    chmod -R a+rX "$van"
    export SG_UPGRADE_FROM="$root/usr/lib/postgresql/15/bin"
    sg_info "096_pg_upgrade: SG_UPGRADE_FROM=$SG_UPGRADE_FROM ($("$SG_UPGRADE_FROM/postgres" --version))"
}
# the other majors, found before the default PostgreSQL's layers: 096_pg_upgrade
# upgrades to them
# PG_CONFIGS, or the install trees of ../shared/postgres (extracted once)
major_pg_configs() {
    local shared cache tb name nn sum have
    if [ -n "${PG_CONFIGS:-}" ]; then
        printf '%s\n' $PG_CONFIGS
        return 0
    fi
    shared=$(cd "$SG_ROOT/.." && pwd)/shared/postgres
    [ -d "$shared" ] || return 0
    cache=${SG_PG_CACHE:-/tmp/streamguard-pg-cache-$(id -un)}
    mkdir -p "$cache" || { sg_warn "cannot create $cache (SG_PG_CACHE)"; return 0; }
    for tb in "$shared"/postgresql-[0-9]*-cassert-bookworm-amd64.tar.xz; do
        name=$(basename "$tb")
        nn=${name#postgresql-}; nn=${nn%%-*}
        sum=$(awk -v f="$name" '$2 == f || $2 == "*" f { print $1 }' "$shared/SHA256SUMS" 2>/dev/null)
        have=$(cat "$cache/pg$nn.sha256" 2>/dev/null)
        if [ -z "$sum" ]; then
            sg_warn "$name is not listed in $shared/SHA256SUMS; skipped"
            echo "BAD:pg$nn:not in SHA256SUMS"
            continue
        fi
        if [ "$have" != "$sum" ] || [ ! -x "$cache/pg$nn/bin/pg_config" ]; then
            sg_log "test: checking and extracting $name into $cache" >&2
            if [ "$(sha256sum "$tb" | awk '{print $1}')" != "$sum" ]; then
                sg_warn "$name does not match its SHA256SUMS entry; skipped"
                echo "BAD:pg$nn:checksum mismatch"
                continue
            fi
            rm -rf "$cache/pg$nn" "$cache/pg$nn.sha256" "$cache/tmp.$nn"
            mkdir -p "$cache/tmp.$nn" &&
                tar -C "$cache/tmp.$nn" -xJf "$tb" &&
                mv "$cache/tmp.$nn/pg$nn" "$cache/pg$nn" &&
                rmdir "$cache/tmp.$nn" &&
                echo "$sum" > "$cache/pg$nn.sha256" ||
                { echo "BAD:pg$nn:could not extract"; continue; }
        fi
        echo "$cache/pg$nn/bin/pg_config"
    done
}

mapfile -t OTHER_CONFIGS < <(major_pg_configs)
if [ ${#OTHER_CONFIGS[@]} -eq 0 ]; then
    sg_log "test: other PostgreSQL majors skipped: PG_CONFIGS is not set and there is no ../shared/postgres next to the checkout"
fi
prepare_pg_upgrade_servers "${OTHER_CONFIGS[@]}"

sg_info "suites run as OS user '$RUN_USER' with $PG_BINDIR first on PATH"

# Stop any server a layer left behind in our test directory (a crashed or
# timed-out run); only servers whose data directory lies under $WORK.
# DIR (default $WORK): a layer's own tree only, since the other majors' layers
# may run at the same time in theirs.
stop_leftover_servers() {   # stop_leftover_servers [DIR]
    local pidfile dir top=${1:-$WORK}
    local -a prune=()
    # the default PostgreSQL's tree holds the other majors' trees: not those
    [ "$top" = "$WORK" ] && prune=(-path "$WORK/pg[0-9]*" -prune -o)
    while IFS= read -r -d '' pidfile; do
        dir=$(dirname "$pidfile")
        sg_warn "stopping a server left running in $dir"
        sg_as_server_user pg_ctl -D "$dir" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    done < <(find "$top" "${prune[@]}" -name postmaster.pid -print0 2>/dev/null)
}

# ---------------------------------------------------------- the layers ----
declare -A L_PASS L_FAIL L_STATUS L_SECONDS MAJOR_SECONDS
LAYER_ENV=()
TOTAL_PASS=0
TOTAL_FAIL=0

run_layer() {   # run_layer KEY DIR make-variable-overrides...
    local name=$1 dir=$2; shift 2
    local log="$LOGS/${name//\//-}.log" rc
    sg_log "test: layer '$name': make installcheck $*"
    # No stdin: CI runs us without one, and nothing here may wait for input.
    sg_as_server_user "${LAYER_ENV[@]}" timeout -k 30 "$LAYER_TIMEOUT" \
        make -C "$dir" --no-print-directory PG_CONFIG="$PG_CONFIG" installcheck "$@" \
        </dev/null 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    case $rc in
        124|137) echo "test: layer '$name' timed out after ${LAYER_TIMEOUT}s (SG_LAYER_TIMEOUT)" | tee -a "$log" ;;
    esac
    stop_leftover_servers "$dir"
    return "$rc"
}

# pg_regress / pg_isolation_regress summary: "All N tests passed." or
# "N of M tests failed." (optionally ", K of these failures ignored.")
parse_pg_regress() {   # parse_pg_regress NAME LOG RC
    local name=$1 log=$2 rc=$3 line n m pass=0 fail=0
    line=$(grep -Eo '(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests (failed|passed))' "$log" | tail -n1)
    if [[ $line =~ ^All\ ([0-9]+)\ tests\ passed ]]; then
        pass=${BASH_REMATCH[1]}
    elif [[ $line =~ ^([0-9]+)\ of\ ([0-9]+)\ tests\ failed ]]; then
        n=${BASH_REMATCH[1]}; m=${BASH_REMATCH[2]}; fail=$n; pass=$((m - n))
    elif [[ $line =~ ^([0-9]+)\ of\ ([0-9]+)\ tests\ passed ]]; then
        n=${BASH_REMATCH[1]}; m=${BASH_REMATCH[2]}; pass=$n; fail=$((m - n))
    fi
    if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
        fail=1   # the layer failed before or after its tests (server start, make, timeout)
        echo "test: layer '$name' exited with status $rc without a per-test failure count; counted as 1 failure"
    fi
    L_PASS[$name]=$pass; L_FAIL[$name]=$fail
}

# prove: "Files=F, Tests=T, ..." and "Result: PASS|FAIL"; the "Test Summary
# Report" lists each failing file as "file (Wstat: W ... Tests: T Failed: F)".
parse_prove() {   # parse_prove NAME LOG RC
    local name=$1 log=$2 rc=$3 tests=0 fail_sub=0 bad_files=0 f line
    line=$(grep -E '^Files=[0-9]+, Tests=[0-9]+' "$log" | tail -n1)
    [[ $line =~ Tests=([0-9]+) ]] && tests=${BASH_REMATCH[1]}
    while IFS= read -r f; do
        if [ "$f" -gt 0 ]; then fail_sub=$((fail_sub + f)); else bad_files=$((bad_files + 1)); fi
    done < <(grep -E '\(Wstat: [0-9]+.*Tests: [0-9]+ Failed: [0-9]+\)' "$log" |
             sed -E 's/.*Failed: ([0-9]+)\).*/\1/')
    L_PASS[$name]=$((tests - fail_sub))
    L_FAIL[$name]=$((fail_sub + bad_files))
    if ! grep -q '^Result: PASS' "$log" && [ "${L_FAIL[$name]}" -eq 0 ]; then
        L_FAIL[$name]=1
        echo "test: layer '$name' did not report 'Result: PASS' (exit status $rc); counted as 1 failure"
    elif [ "$rc" -ne 0 ] && [ "${L_FAIL[$name]}" -eq 0 ]; then
        L_FAIL[$name]=1
        echo "test: layer '$name' exited with status $rc; counted as 1 failure"
    fi
}

show_file() {   # show_file PATH LINES
    [ -s "$1" ] || return 0
    echo "----- ${1#"$WORK"/} (last $2 lines) -----"
    tail -n "$2" "$1"
}

show_server_log() {   # the temp instance's postmaster.log, or initdb.log if it never started
    if [ -s "$1/postmaster.log" ]; then
        show_file "$1/postmaster.log" "$LOG_TAIL"
    else
        for f in "$1"/*.log; do show_file "$f" "$LOG_TAIL"; done
    fi
}

show_failure_details() {   # show_failure_details KEY LAYER DIR
    local key=$1 layer=$2 dir=$3
    sg_log "test: layer '$key' failed; details:"
    case $layer in
        regress)     # pg_regress keeps its server's log in <outputdir>/log
            show_file "$dir/regression.diffs" "$DIFF_TAIL"
            show_server_log "$dir/log" ;;
        isolation)
            show_file "$dir/output_iso/regression.diffs" "$DIFF_TAIL"
            show_server_log "$dir/output_iso/log" ;;
        fuzz)        # the driver's log, then the server's (crash lines at its end)
            show_file "$dir/tmp_check/log/regress_log_sqlsmith" "$LOG_TAIL"
            for f in "$dir"/tmp_check/log/sqlsmith_*.log; do show_file "$f" "$LOG_TAIL"; done
            sg_info "every query SQLsmith sent: $dir/tmp_check/log/sqlsmith_<role>.sql" ;;
        tap)         # logs of the failing test files only (all of them if unknown)
            local -a failed logs=()
            local t base
            mapfile -t failed < <(grep -E '\(Wstat: [0-9]+' "$LOGS/${key//\//-}.log" | awk '{print $1}' | sort -u)
            for t in "${failed[@]}"; do
                base=$(basename "$t" .pl)
                logs+=("$dir/tmp_check/log/regress_log_$base" "$dir"/tmp_check/log/"$base"_*.log)
            done
            [ ${#failed[@]} -gt 0 ] || logs=("$dir"/tmp_check/log/*)
            for f in "${logs[@]}"; do [ -f "$f" ] && show_file "$f" "$LOG_TAIL"; done ;;
    esac
    return 0
}

# The TAP compat set run on the other majors: one file per guarantee (the
# pipeline crash matrix, zombie fencing, remote sink and source, upgrade,
# security, capture, windows, Kafka), the crash matrices smaller than on the
# default PostgreSQL (COMPAT_ENV; a variable already set wins).
TAP_COMPAT=(050_pipeline_crash_matrix 065_pipeline_zombie 070_remote_sink 080_remote_source
            095_upgrade 100_security_pipeline 120_capture 150_windows 140_kafka_source)
COMPAT_ENV=(SG_CRASH_MIN_EVENTS=20000 SG_CRASH_ROUNDS=1 SG_REMOTE_MIN_EVENTS=5000 SG_REMOTE_ROUNDS=1)

shopt -s nullglob
MAJORS=()   # labels, in the order run

# run_layers LABEL DIR TAPSET: the three layers in DIR against $PG_CONFIG;
# TAPSET is "all" or "compat".  Results under keys LABEL/layer.
run_layers() {
    local label=$1 dir=$2 tapset=$3 layer key rc t0 f
    local -a inputs overrides
    MAJORS+=("$label")
    for layer in "${LAYERS[@]}"; do
        key="$label/$layer"
        LAYER_ENV=()
        case $layer in
            regress)
                inputs=("$dir"/sql/*.sql)
                overrides=(ISOLATION= TAP_TESTS=) ;;
            isolation)
                inputs=("$dir"/test/isolation/specs/*.spec)
                overrides=(REGRESS= TAP_TESTS=) ;;
            tap)
                overrides=(REGRESS= ISOLATION=)
                if [ "$tapset" = compat ]; then
                    inputs=()
                    for f in "${TAP_COMPAT[@]}"; do
                        [ -f "$dir/test/t/$f.pl" ] && inputs+=("test/t/$f.pl")
                    done
                    overrides+=("PROVE_TESTS=${inputs[*]}")
                    for f in "${COMPAT_ENV[@]}"; do
                        if [ -z "$(printenv "${f%%=*}")" ]; then LAYER_ENV+=("$f"); fi
                    done
                else
                    inputs=("$dir"/test/t/*.pl)
                fi ;;
            fuzz)    # the default PostgreSQL only (SQLsmith is the same everywhere):
                     # no row for the other majors
                [ "$dir" = "$WORK" ] || continue
                inputs=()
                [ "$tapset" = all ] && [ "$dir" = "$WORK" ] && inputs=("$dir"/test/fuzz/*.pl)
                overrides=(REGRESS= ISOLATION= PROVE_TESTS=test/fuzz/sqlsmith.pl)
                # installcheck empties tmp_check: keep the TAP layer's logs
                if [ ${#inputs[@]} -gt 0 ] && [ -d "$dir/tmp_check" ]; then
                    rm -rf "$dir/tmp_check_tap" && mv "$dir/tmp_check" "$dir/tmp_check_tap"
                fi ;;
        esac
        if [ ${#inputs[@]} -eq 0 ]; then
            sg_log "test: layer '$key': no tests found, skipped"
            L_PASS[$key]=0; L_FAIL[$key]=0; L_STATUS[$key]=skipped; L_SECONDS[$key]=0
            continue
        fi
        t0=$SECONDS
        run_layer "$key" "$dir" "${overrides[@]}"
        rc=$?
        L_SECONDS[$key]=$((SECONDS - t0))
        if [ "$layer" = tap ] || [ "$layer" = fuzz ]; then
            parse_prove "$key" "$LOGS/${key//\//-}.log" "$rc"
        else
            parse_pg_regress "$key" "$LOGS/${key//\//-}.log" "$rc"
        fi
        if [ "${L_FAIL[$key]}" -eq 0 ]; then
            L_STATUS[$key]=ok
        else
            L_STATUS[$key]=FAILED
            show_failure_details "$key" "$layer" "$dir"
        fi
    done
}

# a major that could not even be built: one failure, no layers
major_failed() {   # major_failed LABEL WHY
    MAJORS+=("$1")
    L_PASS["$1/build"]=0; L_FAIL["$1/build"]=1; L_STATUS["$1/build"]="FAILED ($2)"; L_SECONDS["$1/build"]=0
    echo "test: $1: $2; counted as 1 failure" >&2
}

major_label() {   # major_label PG_CONFIG -> "pg16" (from its --version)
    local v
    v=$("$1" --version 2>/dev/null | awk '{print $2}')
    v=${v%%.*}; v=${v%%[a-z]*}
    echo "pg${v:-unknown}"
}

# ---------------------------------------------------- default PostgreSQL ----
mkdir -p "$LOGS"
if [ "${SG_MAJORS_ONLY:-0}" = 1 ]; then
    sg_log "test: SG_MAJORS_ONLY=1: the default PostgreSQL ($PG_CONFIG) is skipped"
else
    DEFAULT_LABEL=$(major_label "$PG_CONFIG")
    sg_log "test: $DEFAULT_LABEL ($PG_CONFIG)"
    t_major=$SECONDS
    run_layers "$DEFAULT_LABEL" "$WORK" all
    MAJOR_SECONDS[$DEFAULT_LABEL]=$((SECONDS - t_major))
fi

# ------------------------------------------------------- other majors ----
# The other majors run SG_MAJOR_JOBS (2) at a time, each in a subshell with
# its own tree, output file and result file: most of a TAP test's time is
# waiting (for a worker, a crash recovery, a deadline), and the suite holds on
# a loaded machine (docs/testing.md).  Their clusters share one port-lock
# directory, so that two runs never pick the same port.
export PG_TEST_PORT_DIR="$WORK/_portlock"
mkdir -p "$PG_TEST_PORT_DIR" && { sg_is_root && chown postgres:postgres "$PG_TEST_PORT_DIR"; true; }
MAJOR_JOBS=${SG_MAJOR_JOBS:-2}

# run_built_major LABEL DIR PG_CONFIG: the layers of a major streamguard is
# built and installed for, from DIR
run_built_major() {
    sg_is_root && chown -R postgres:postgres "$2"
    PG_CONFIG=$3
    PG_BINDIR=$("$3" --bindir)
    if [ "${SG_TAP_ALL:-0}" = 1 ]; then
        run_layers "$1" "$2" all
    else
        run_layers "$1" "$2" compat
    fi
}

# run_major LABEL PG_CONFIG: build, install and run the layers of one major
# (in a subshell); its results go to $LOGS/LABEL.result for the summary
run_major() {
    local label=$1 pgc=$2 dir="$WORK/$1" t_major=$SECONDS key
    sg_log "test: $label ($pgc): build, install, regress + isolation + TAP ${SG_TAP_ALL:+(all files)}"
    if [ "$(cat "$dir/.sg-built-for" 2>/dev/null)" = "$(readlink -f "$pgc")" ]; then
        # built and installed for 096_pg_upgrade (prepare_pg_upgrade_servers)
        sg_info "$label: streamguard already built and installed for this PostgreSQL ($LOGS/upgrade-$label-build.log)"
        run_built_major "$label" "$dir" "$pgc"
    elif ! { mkdir -p "$dir" && copy_tree "$dir"; }; then
        major_failed "$label" "could not copy the source tree"
    elif ! make -C "$dir" -j"$(nproc 2>/dev/null || echo 2)" --no-print-directory PG_CONFIG="$pgc" \
            >"$LOGS/$label-build.log" 2>&1 </dev/null ||
         ! make -C "$dir" --no-print-directory PG_CONFIG="$pgc" install \
            >>"$LOGS/$label-build.log" 2>&1 </dev/null; then
        tail -n 60 "$LOGS/$label-build.log"
        major_failed "$label" "build or install failed (log: $LOGS/$label-build.log)"
    else
        run_built_major "$label" "$dir" "$pgc"
    fi
    MAJOR_SECONDS[$label]=$((SECONDS - t_major))
    {
        for key in "${!L_STATUS[@]}"; do
            [[ $key == "$label/"* ]] || continue
            printf 'L_PASS[%q]=%q; L_FAIL[%q]=%q; L_STATUS[%q]=%q; L_SECONDS[%q]=%q\n' \
                "$key" "${L_PASS[$key]}" "$key" "${L_FAIL[$key]}" \
                "$key" "${L_STATUS[$key]}" "$key" "${L_SECONDS[$key]:-0}"
        done
        printf 'MAJOR_SECONDS[%q]=%q\n' "$label" "${MAJOR_SECONDS[$label]}"
    } > "$LOGS/$label.result"
}

declare -A SEEN_LABEL
RUN_LABELS=()
t_majors=$SECONDS
for pgc in "${OTHER_CONFIGS[@]}"; do
    if [[ $pgc == BAD:* ]]; then
        IFS=: read -r _ label why <<<"$pgc"
        major_failed "$label" "$why"
        continue
    fi
    if [ ! -x "$pgc" ]; then
        major_failed "$(basename "$(dirname "$(dirname "$pgc")")")" "no pg_config at $pgc"
        continue
    fi
    [ "$(readlink -f "$pgc")" = "$(readlink -f "$PG_CONFIG")" ] && continue
    label=$(major_label "$pgc")
    [ -n "${SEEN_LABEL[$label]:-}" ] && label="$label-$(echo "$pgc" | md5sum | cut -c1-6)"
    SEEN_LABEL[$label]=1
    while [ "$(jobs -rp | wc -l)" -ge "$MAJOR_JOBS" ]; do wait -n; done
    sg_log "test: $label started (output: $LOGS/$label.out, printed when it ends)"
    ( run_major "$label" "$pgc" ) >"$LOGS/$label.out" 2>&1 </dev/null &
    RUN_LABELS+=("$label")
done
wait
for label in "${RUN_LABELS[@]}"; do
    sg_log "test: ---------------- $label: its output ----------------"
    cat "$LOGS/$label.out"
    MAJORS+=("$label")
    if [ -f "$LOGS/$label.result" ]; then
        # shellcheck disable=SC1090
        . "$LOGS/$label.result"
    else
        L_PASS["$label/build"]=0; L_FAIL["$label/build"]=1
        L_STATUS["$label/build"]="FAILED (no result: the run ended early)"; L_SECONDS["$label/build"]=0
    fi
done
[ ${#RUN_LABELS[@]} -gt 0 ] &&
    sg_info "other majors: $((SECONDS - t_majors)) s for ${#RUN_LABELS[@]}, $MAJOR_JOBS at a time (SG_MAJOR_JOBS)"

# ------------------------------------------------------------- summary ----
echo
sg_log "test: summary"
printf '    %-8s %-10s %7s %7s %8s  %s\n' major layer passed failed seconds status
for m in "${MAJORS[@]}"; do
    for layer in build "${LAYERS[@]}"; do
        key="$m/$layer"
        [ -n "${L_STATUS[$key]:-}" ] || continue
        printf '    %-8s %-10s %7s %7s %8s  %s\n' "$m" "$layer" "${L_PASS[$key]}" "${L_FAIL[$key]}" \
            "${L_SECONDS[$key]}" "${L_STATUS[$key]}"
    done
done
for m in "${MAJORS[@]}"; do
    mp=0; mf=0
    for layer in build "${LAYERS[@]}"; do
        key="$m/$layer"
        [ -n "${L_STATUS[$key]:-}" ] || continue
        mp=$((mp + L_PASS[$key])); mf=$((mf + L_FAIL[$key]))
    done
    echo "$m: $mp passed, $mf failed (${MAJOR_SECONDS[$m]:-0} s)"
    TOTAL_PASS=$((TOTAL_PASS + mp))
    TOTAL_FAIL=$((TOTAL_FAIL + mf))
done
[ $((TOTAL_PASS + TOTAL_FAIL)) -eq 0 ] && sg_warn "no tests were found in any layer"
if [ "$TOTAL_FAIL" -eq 0 ] && [ "${SG_KEEP:-0}" != 1 ]; then
    rm -rf "$WORK"
    sg_info "(test directory removed; SG_KEEP=1 keeps it)"
else
    sg_info "test directory with outputs and logs kept: $WORK"
fi
finish "$TOTAL_PASS" "$TOTAL_FAIL"
