#!/usr/bin/env bash
# streamguard benchmark suite (`make bench`).  See docs/benchmarks.md.
#
# Starts a throwaway PostgreSQL cluster (fresh initdb in a temp dir, unix socket
# + 127.0.0.1 on a free port), measures streamguard against raw PostgreSQL and
# PgQ in ONE run, prints a results table and writes it to bench-results/latest.md.
# Only the cluster and the client processes this script starts are stopped.
#
# Assumes the extension is built and installed (`make install`).  If it is not
# (or a streamguard call fails), the raw PostgreSQL and PgQ contenders still run
# and the streamguard rows are reported as "pending" / "error".
#
# Environment knobs:
#   BENCH_SECONDS=15         duration of each timed pgbench / COPY run
#   BENCH_REPEAT=3           repeats per contender; the median is reported
#   BENCH_SLICES=3           benchmarks 1 and 2 run each contender's BENCH_SECONDS in this
#                            many slices, round-robin over the contenders
#   BENCH_CLIENTS=8          clients of the single-event benchmark (-j 2)
#   BENCH_BATCH_CLIENTS=2    clients of the 1,000-events-per-transaction benchmark
#   BENCH_DRAIN_EVENTS=500000  events pre-filled for the drain benchmark (multiple of 1000)
#   BENCH_DRAIN_PASSES=3     drain passes over that backlog per kind and repeat
#   BENCH_PIPELINE_TIMEOUT=300  seconds a pipeline may take to drain the backlog
#   BENCH_ONLY="single batch drain"  subset of benchmarks to run
#   BENCH_OUT=<repo>/bench-results   where latest.md is written
#   BENCH_KEEP=0             1 keeps the temp dir (cluster, logs, scripts) for inspection
#   BENCH_NICE=              nice value for everything the suite starts (negative: root only)
#   PG_CONFIG=pg_config      selects the PostgreSQL installation (PG 15)
#
# Run as root (the server work is re-executed as the `postgres` OS user via
# runuser) or as an unprivileged user that can run PostgreSQL.

set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")

: "${BENCH_SECONDS:=15}"
: "${BENCH_REPEAT:=3}"
: "${BENCH_SLICES:=3}"
: "${BENCH_CLIENTS:=8}"
: "${BENCH_BATCH_CLIENTS:=2}"
: "${BENCH_DRAIN_EVENTS:=500000}"
: "${BENCH_DRAIN_PASSES:=3}"
: "${BENCH_PIPELINE_TIMEOUT:=300}"
: "${BENCH_ONLY:=single batch drain}"
: "${BENCH_KEEP:=0}"

die() { echo "bench: $*" >&2; exit 1; }

resolve_pg_config() {
    if [[ -n ${PG_CONFIG:-} ]] && command -v "$PG_CONFIG" >/dev/null 2>&1; then
        command -v "$PG_CONFIG"
    elif [[ -x /usr/lib/postgresql/15/bin/pg_config ]]; then
        echo /usr/lib/postgresql/15/bin/pg_config
    elif command -v pg_config >/dev/null 2>&1; then
        command -v pg_config
    else
        die "pg_config not found (set PG_CONFIG)"
    fi
}

# ---------------------------------------------------------------------------
# Outer part: prepare a temp dir, run the inner part (as postgres if root),
# publish the results, clean up.
# ---------------------------------------------------------------------------
if [[ ${1:-} != --inner ]]; then
    REPO=$(cd "$(dirname "$SELF")/../.." && pwd)
    PG_CONFIG=$(resolve_pg_config)
    [[ $BENCH_SECONDS =~ ^[0-9]+$ && $BENCH_SECONDS -ge 1 ]] || die "BENCH_SECONDS must be a positive integer"
    [[ $BENCH_REPEAT =~ ^[0-9]+$ && $BENCH_REPEAT -ge 1 ]] || die "BENCH_REPEAT must be a positive integer"
    [[ $BENCH_SLICES =~ ^[0-9]+$ && $BENCH_SLICES -ge 1 ]] || die "BENCH_SLICES must be a positive integer"
    [[ $BENCH_DRAIN_EVENTS =~ ^[0-9]+$ && $((BENCH_DRAIN_EVENTS % 1000)) -eq 0 && $BENCH_DRAIN_EVENTS -ge 1000 ]] ||
        die "BENCH_DRAIN_EVENTS must be a positive multiple of 1000"
    [[ $BENCH_DRAIN_PASSES =~ ^[0-9]+$ && $BENCH_DRAIN_PASSES -ge 1 ]] || die "BENCH_DRAIN_PASSES must be a positive integer"
    : "${BENCH_OUT:=$REPO/bench-results}"

    WORK=$(mktemp -d "${TMPDIR:-/tmp}/streamguard-bench.XXXXXX")
    cp "$SELF" "$WORK/run.sh"
    REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "uncommitted")
    if [[ -n $(git -C "$REPO" status --porcelain -- src 'streamguard--*.sql' 2>/dev/null) ]]; then
        REV="$REV+dirty"
    fi

    envs=(BENCH_SECONDS="$BENCH_SECONDS" BENCH_REPEAT="$BENCH_REPEAT" BENCH_SLICES="$BENCH_SLICES" BENCH_CLIENTS="$BENCH_CLIENTS"
          BENCH_BATCH_CLIENTS="$BENCH_BATCH_CLIENTS" BENCH_DRAIN_EVENTS="$BENCH_DRAIN_EVENTS"
          BENCH_DRAIN_PASSES="$BENCH_DRAIN_PASSES" BENCH_PIPELINE_TIMEOUT="$BENCH_PIPELINE_TIMEOUT"
          BENCH_ONLY="$BENCH_ONLY" PG_CONFIG="$PG_CONFIG" BENCH_REV="$REV"
          PATH="$PATH" LANG=C.UTF-8 LC_ALL=C.UTF-8)

    cleanup_outer() {
        # If the inner part died without stopping its cluster, stop it here.
        if [[ -f $WORK/data/postmaster.pid ]]; then
            if [[ $EUID -eq 0 ]]; then
                runuser -u postgres -- "$("$PG_CONFIG" --bindir)/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
            else
                "$("$PG_CONFIG" --bindir)/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
            fi
        fi
        if [[ $BENCH_KEEP == 1 ]]; then
            echo "bench: kept $WORK"
        else
            rm -rf "$WORK"
        fi
    }
    trap cleanup_outer EXIT
    trap 'exit 130' INT TERM

    # BENCH_NICE: scheduling priority of everything the suite starts (server,
    # background workers, clients); a negative value (root only) shields the
    # measurement from other CPU work on a shared machine, for all contenders alike.
    nicecmd=()
    if [[ -n ${BENCH_NICE:-} && ${BENCH_NICE:-0} != 0 ]]; then
        [[ $BENCH_NICE =~ ^-?[0-9]+$ ]] || die "BENCH_NICE must be an integer"
        (( BENCH_NICE > 0 || EUID == 0 )) || die "a negative BENCH_NICE needs root"
        nicecmd=(nice -n "$BENCH_NICE")
        envs+=(BENCH_NICE="$BENCH_NICE")
    fi

    rc=0
    if [[ $EUID -eq 0 ]]; then
        id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' OS user"
        chown -R postgres: "$WORK"
        (cd "$WORK" && "${nicecmd[@]}" runuser -u postgres -- env "${envs[@]}" bash "$WORK/run.sh" --inner "$WORK") || rc=$?
    else
        (cd "$WORK" && "${nicecmd[@]}" env "${envs[@]}" bash "$WORK/run.sh" --inner "$WORK") || rc=$?
    fi

    if [[ -f $WORK/latest.md ]]; then
        if mkdir -p "$BENCH_OUT" 2>/dev/null && cp "$WORK/latest.md" "$BENCH_OUT/latest.md" 2>/dev/null; then
            echo "bench: results written to $BENCH_OUT/latest.md"
        else
            alt="${TMPDIR:-/tmp}/streamguard-bench-latest.md"
            cp "$WORK/latest.md" "$alt"
            echo "bench: cannot write $BENCH_OUT; results written to $alt"
        fi
    fi
    exit "$rc"
fi

# ---------------------------------------------------------------------------
# Inner part: runs as the OS user that owns the cluster.
# ---------------------------------------------------------------------------
WORK=$2
BIN=$("$PG_CONFIG" --bindir)
PKGLIB=$("$PG_CONFIG" --pkglibdir)
SHAREDIR=$("$PG_CONFIG" --sharedir)
DATA=$WORK/data
SOCK=$WORK/sock
LOGS=$WORK/logs
SCR=$WORK/scripts
mkdir -p "$SOCK" "$LOGS" "$SCR"
chmod 700 "$SOCK"

PGUSER=$(id -un)
export PGHOST=$SOCK PGDATABASE=bench PGUSER PGAPPNAME=streamguard-bench
unset PGPASSWORD PGSERVICE 2>/dev/null || true
export PGOPTIONS="-c client_min_messages=warning"

CLIENT_PIDS=()
SERVER_STARTED=0
cleanup_inner() {
    local p
    for p in "${CLIENT_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if [[ $SERVER_STARTED == 1 ]]; then
        "$BIN/pg_ctl" -D "$DATA" -m fast -t 60 stop >/dev/null 2>&1 ||
            "$BIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
    fi
}
trap cleanup_inner EXIT
trap 'exit 130' INT TERM

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

have_sg_lib=0
[[ -f $PKGLIB/streamguard.so && -f $SHAREDIR/extension/streamguard.control ]] && have_sg_lib=1
have_pgq=0
[[ -f $SHAREDIR/extension/pgq.control ]] && have_pgq=1

log "initdb in $DATA"
"$BIN/initdb" -D "$DATA" -U "$PGUSER" -E UTF8 --no-locale --auth-local=trust --auth-host=scram-sha-256 \
    >"$LOGS/initdb.log" 2>&1 || { cat "$LOGS/initdb.log" >&2; die "initdb failed"; }

preload=""
[[ $have_sg_lib == 1 ]] && preload="streamguard"
cat >>"$DATA/postgresql.conf" <<EOF

# --- streamguard benchmark cluster (2-core box) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
shared_preload_libraries = '$preload'
max_connections = 40
shared_buffers = 512MB
synchronous_commit = on
max_wal_size = 4GB
checkpoint_timeout = 15min
log_min_messages = warning
log_checkpoints = on
log_autovacuum_min_duration = 0
EOF

started=0
base=$((20000 + RANDOM % 30000))
for i in $(seq 0 40); do
    PORT=$((base + i * 7))
    port_free "$PORT" || continue
    if "$BIN/pg_ctl" -D "$DATA" -l "$LOGS/server.log" -o "-p $PORT" -w -t 60 start >/dev/null 2>&1; then
        started=1; SERVER_STARTED=1; break
    fi
    # A failed start may be a port race; anything else will fail again: retry a few times.
done
[[ $started == 1 ]] || { tail -n 30 "$LOGS/server.log" >&2 || true; die "could not start the server"; }
export PGPORT=$PORT
log "server up on port $PORT (socket dir $SOCK), preload='$preload'"

sql() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
sqlq() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -c "$1" >/dev/null 2>&1; }

"$BIN/createdb" bench
SERVER_VERSION=$(sql "SHOW server_version")

sg_ok=0
if [[ $have_sg_lib == 1 ]]; then
    if sql "CREATE EXTENSION streamguard" >"$LOGS/create_extension.log" 2>&1; then
        sg_ok=1
    else
        log "CREATE EXTENSION streamguard failed: $(tail -n 3 "$LOGS/create_extension.log" | tr '\n' ' ')"
    fi
else
    log "streamguard is not installed ($PKGLIB/streamguard.so missing): its rows will be pending"
fi
pipe_ok=0
if [[ $sg_ok == 1 && $(sql "SELECT to_regproc('streamguard.create_pipeline') IS NOT NULL") == t ]]; then
    pipe_ok=1
    # waits (without holding a snapshot) until a pipeline consumed n events; fails
    # when the pipeline fails or after timeout_s seconds
    sql "$(cat <<'EOF'
CREATE PROCEDURE bench_wait_pipeline(stream text, pipeline text, n bigint, timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); done bigint; st text; err text;
BEGIN
    LOOP
        SELECT coalesce(sum(committed_seq), 0) INTO done FROM streamguard.consumers c
         WHERE c.stream = bench_wait_pipeline.stream AND c.consumer = 'pipeline:' || bench_wait_pipeline.pipeline;
        EXIT WHEN done >= n;
        SELECT p.state, p.last_error INTO st, err FROM streamguard.pipelines p
         WHERE p.pipeline = bench_wait_pipeline.pipeline;
        IF st = 'failed' THEN
            RAISE EXCEPTION 'pipeline % failed after % events: %', pipeline, done, err;
        END IF;
        IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
            RAISE EXCEPTION 'pipeline % consumed % of % events in % s (state %)', pipeline, done, n, timeout_s, st;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
EOF
)" >/dev/null 2>"$LOGS/bench_wait_pipeline.err" ||
        { pipe_ok=0; log "could not create the pipeline wait procedure: $(head -n1 "$LOGS/bench_wait_pipeline.err")"; }
else
    log "streamguard pipelines not available: their rows will be pending"
fi
pgq_ok=0
if [[ $have_pgq == 1 ]] && sql "CREATE EXTENSION pgq" >"$LOGS/create_pgq.log" 2>&1; then
    pgq_ok=1
else
    log "PgQ not available: its rows will be pending"
fi

# Helper functions shared by the contenders (created once, cheap).
sql "$(cat <<'EOF'
CREATE FUNCTION bench_pgq_drain(q text, c text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE b bigint; n int;
BEGIN
    b := pgq.next_batch(q, c);
    IF b IS NULL THEN RETURN 0; END IF;
    SELECT count(*) INTO n FROM pgq.get_batch_events(b);
    PERFORM pgq.finish_batch(b);
    RETURN n;
END $$;
CREATE FUNCTION bench_pgq_drain_sink(q text, c text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE b bigint; n int;
BEGIN
    b := pgq.next_batch(q, c);
    IF b IS NULL THEN RETURN 0; END IF;
    INSERT INTO sink_pgq (partition, seq, key, payload) SELECT 0, ev_id, ev_extra1, ev_data::jsonb FROM pgq.get_batch_events(b);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pgq.finish_batch(b);
    RETURN n;
END $$;
EOF
)" >/dev/null 2>&1 || true

# ---------------------------------------------------------------------------
# Result bookkeeping
# ---------------------------------------------------------------------------
declare -A VALS     # "bench|contender" -> space separated per-repeat events/s (or ERR)
declare -A NOTES    # "bench|contender" -> note
add_val() { VALS[$1]="${VALS[$1]:-} $2"; }
add_note() { [[ ${NOTES[$1]:-} == *"$2"* ]] || NOTES[$1]="${NOTES[$1]:+${NOTES[$1]}; }$2"; }

median() {  # numbers on stdin (ERR ignored) -> median, or empty
    grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END { if (NR==0) exit; if (NR%2) printf "%.0f", a[(NR+1)/2]; else printf "%.0f", (a[NR/2]+a[NR/2+1])/2 }'
}

# pgbench wrapper: pgb <logname> <pgbench args...>; prints tps, returns non-zero on failure
pgb() {
    local name=$1; shift
    local out=$LOGS/$name.log
    if ! "$BIN/pgbench" -n -M prepared "$@" >"$out" 2>&1; then
        log "pgbench $name failed: $(grep -m3 -iE 'error|abort' "$out" | tr '\n' ' ')"
        return 1
    fi
    if grep -qE 'number of failed transactions: [1-9]' "$out"; then
        log "pgbench $name: failed transactions: $(grep -m1 'failed transactions' "$out")"
        return 1
    fi
    local tps
    tps=$(sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)/\1/p' "$out")
    [[ -n $tps ]] || { log "pgbench $name: no tps in output"; return 1; }
    echo "$tps"
}

checkpoint() { sql "CHECKPOINT" >/dev/null; }

# transactions a pgbench run committed
pgb_processed() { sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$LOGS/$1.log"; }

# ---------------------------------------------------------------------------
# Workload scripts (pgbench custom scripts).  Every contender of a benchmark
# builds the same event: a random key among 1M and a small JSON payload
# (about 50 bytes: {"id":..., "amount":..., "currency":"EUR"}).
# ---------------------------------------------------------------------------
PAYLOAD1="jsonb_build_object('id', CAST(:k AS int), 'amount', CAST(:a AS int), 'currency', 'EUR')"
KEY1="'k' || CAST(:k AS text)"
SET1=$'\\set k random(1, 1000000)\n\\set a random(1, 10000)'

# plain INSERT: same columns and keys as a stream event, seq from a sequence,
# partition = hash(key) mod partitions
single_raw_script() {  # $1 table $2 partitions
    cat <<EOF
$SET1
INSERT INTO $1 (partition, key, payload)
  VALUES (mod(abs(hashtext($KEY1)::bigint), $2), $KEY1, $PAYLOAD1);
EOF
}
single_sg_script() {  # $1 stream
    cat <<EOF
$SET1
SELECT streamguard.append('$1', $PAYLOAD1, $KEY1);
EOF
}
single_pgq_script() {  # $1 queue
    cat <<EOF
$SET1
SELECT pgq.insert_event('$1', 'bench', ($PAYLOAD1)::text, $KEY1, NULL, NULL, NULL);
EOF
}

ROWS1000="SELECT 'k' || (1 + floor(random() * 1000000))::int AS k,
         jsonb_build_object('id', g, 'amount', (1 + floor(random() * 10000))::int, 'currency', 'EUR') AS p
    FROM generate_series(1, 1000) AS g"
batch_raw_script() {  # $1 table $2 partitions
    cat <<EOF
INSERT INTO $1 (partition, key, payload)
  SELECT mod(abs(hashtext(k)::bigint), $2), k, p FROM ($ROWS1000) AS s;
EOF
}
batch_sg_script() {  # $1 stream
    cat <<EOF
SELECT count(*) FROM (SELECT array_agg(p) AS ps, array_agg(k) AS ks FROM ($ROWS1000) AS s) AS a,
  LATERAL streamguard.append_batch('$1', a.ps, a.ks);
EOF
}
batch_pgq_script() {  # $1 queue
    cat <<EOF
SELECT count(pgq.insert_event('$1', 'bench', p::text, k, NULL, NULL, NULL)) FROM ($ROWS1000) AS s;
EOF
}

raw_table_ddl() {  # $1 table: the event columns, PK (partition, seq)
    cat <<EOF
DROP TABLE IF EXISTS $1;
CREATE TABLE $1 (
    partition   int         NOT NULL,
    seq         bigserial,
    key         text,
    payload     jsonb       NOT NULL,
    dedup_key   text,
    appended_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition, seq));
EOF
}

sg_create() {  # $1 name $2 partitions
    sql "SELECT streamguard.create_stream('$1', $2)" >/dev/null 2>>"$LOGS/streamguard.err"
}
sg_drop() { sqlq "SELECT streamguard.drop_stream('$1', force => true)" || true; }
pgq_create() { sql "SELECT pgq.create_queue('$1')" >/dev/null; }
pgq_drop() { sqlq "SELECT pgq.drop_queue('$1', true)" || true; }

# ---------------------------------------------------------------------------
# Time-sliced, rotating schedule for the fixed-duration benchmarks (1 and 2).
# Each contender gets BENCH_SECONDS per repeat, split into NSLICE slices; the
# slices run round-robin over the contenders, the starting contender rotating
# from slice to slice and repeat to repeat, each slice after a CHECKPOINT.
# A load burst on a shared machine then hits every contender alike instead
# of whichever happened to run during it.  A repeat's events/s of a
# contender = its events in all slices / their time (pgbench: transactions /
# tps, i.e. without connection time; COPY: committed rows / wall time).
# ---------------------------------------------------------------------------
NSLICE=$BENCH_SLICES
(( NSLICE > BENCH_SECONDS )) && NSLICE=$BENCH_SECONDS
SLICE_SECONDS=$((BENCH_SECONDS / NSLICE))

C_LABEL=(); C_KIND=(); C_SCRIPT=(); C_PER=()   # the contenders of the running benchmark
declare -A SL_N SL_T SL_BAD

contender() {  # <label> <pgbench|copy> <script or COPY table> <events per transaction>
    C_LABEL+=("$1"); C_KIND+=("$2"); C_SCRIPT+=("$3"); C_PER+=("$4")
}

# COPY: pgbench cannot COPY, so each client is a psql session fed an endless
# stream of "COPY ... FROM STDIN" blocks of 1,000 rows (one transaction each),
# stopped after the slice; prints "<committed rows> <seconds>".
make_copy_blocks() {  # <file> <table>: 20 psql COPY blocks of 1,000 rows each
    local f=$1 i
    : >"$f"
    for i in $(seq 1 20); do
        echo "COPY $2 (partition, key, payload) FROM STDIN;" >>"$f"
        sql "COPY (SELECT mod(abs(hashtext(k)::bigint), 4), k, p FROM ($ROWS1000) AS s) TO STDOUT" >>"$f"
        printf '\\.\n' >>"$f"
    done
}
copy_slice() {  # <table> <blocks file> <log>
    local i start end before after pids=()
    before=$(sql "SELECT count(*) FROM $1")
    start=$(date +%s.%N)
    for i in $(seq 1 "$BENCH_BATCH_CLIENTS"); do
        ( while :; do cat "$2" 2>/dev/null || exit 0; done ) |
            timeout -s TERM "$SLICE_SECONDS" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -f - \
                >/dev/null 2>>"$3" &
        pids+=($!)
    done
    CLIENT_PIDS=("${pids[@]}")
    for i in "${pids[@]}"; do wait "$i" || true; done
    CLIENT_PIDS=()
    end=$(date +%s.%N)
    if grep -q ERROR "$3" 2>/dev/null; then
        log "COPY: $(grep -m1 ERROR "$3")"; return 1
    fi
    after=$(sql "SELECT count(*) FROM $1")
    awk -v n="$((after - before))" -v s="$start" -v e="$end" 'BEGIN { printf "%d %.6f", n, e - s }'
}

run_sliced() {  # <bench> <repeat> <pgbench args without -T/-f...>
    local b=$1 r=$2; shift 2
    local n=${#C_LABEL[@]} s j i k tps out rows secs
    SL_N=(); SL_T=(); SL_BAD=()
    for s in $(seq 0 $((NSLICE - 1))); do
        for j in $(seq 0 $((n - 1))); do
            i=$(( (j + s + r - 1) % n ))
            k="$b|${C_LABEL[$i]}"
            [[ -n ${SL_BAD[$k]:-} ]] && continue
            checkpoint
            if [[ ${C_KIND[$i]} == copy ]]; then
                if out=$(copy_slice "${C_SCRIPT[$i]}" "$SCR/copy_blocks.sql" "$LOGS/${b}_copy_r${r}.log"); then
                    read -r rows secs <<<"$out"
                    SL_N[$k]=$(( ${SL_N[$k]:-0} + rows ))
                    SL_T[$k]=$(awk -v a="${SL_T[$k]:-0}" -v t="$secs" 'BEGIN { printf "%.6f", a + t }')
                else SL_BAD[$k]=1; fi
            else
                local lg
                lg="${b}_$(basename "${C_SCRIPT[$i]}" .sql)_r${r}_s$((s + 1))"
                if tps=$(pgb "$lg" "$@" -T "$SLICE_SECONDS" -f "${C_SCRIPT[$i]}"); then
                    rows=$(( $(pgb_processed "$lg") * C_PER[i] ))
                    SL_N[$k]=$(( ${SL_N[$k]:-0} + rows ))
                    SL_T[$k]=$(awk -v a="${SL_T[$k]:-0}" -v p="$(pgb_processed "$lg")" -v t="$tps" 'BEGIN { printf "%.6f", a + p / t }')
                else SL_BAD[$k]=1; fi
            fi
        done
    done
    for i in $(seq 0 $((n - 1))); do
        k="$b|${C_LABEL[$i]}"
        if [[ -n ${SL_BAD[$k]:-} || -z ${SL_N[$k]:-} ]]; then
            add_val "$k" ERR
        else
            add_val "$k" "$(awk -v e="${SL_N[$k]}" -v t="${SL_T[$k]}" 'BEGIN { printf "%.1f", e / t }')"
        fi
    done
}

# streamguard check after a run: the stream holds exactly the events committed
sg_check_count() {  # <result key> <stream>
    local stored
    [[ -n ${SL_BAD[$1]:-} || -z ${SL_N[$1]:-} ]] && return
    stored=$(sql "SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$2'" 2>/dev/null || echo "?")
    [[ $stored == "${SL_N[$1]}" ]] ||
        add_note "$1" "check failed: stream holds $stored events, clients committed ${SL_N[$1]}"
}

# ---------------------------------------------------------------------------
# 1. single-event appends: 8 clients, one event per transaction
# ---------------------------------------------------------------------------
S1_RAW="plain INSERT (baseline)"
S1_SG1="streamguard.append, 1 partition"
S1_SG4="streamguard.append, 4 partitions"
S1_PGQ="PgQ pgq.insert_event"

bench_single() {
    local r=$1
    local sg1="s1p1r$r" sg4="s1p4r$r" q="q1r$r"
    C_LABEL=(); C_KIND=(); C_SCRIPT=(); C_PER=()

    sql "$(raw_table_ddl raw_single)" >/dev/null
    single_raw_script raw_single 4 >"$SCR/single_raw.sql"
    contender "$S1_RAW" pgbench "$SCR/single_raw.sql" 1
    if [[ $sg_ok == 1 ]]; then
        if sg_create "$sg1" 1; then
            single_sg_script "$sg1" >"$SCR/single_sg1.sql"
            contender "$S1_SG1" pgbench "$SCR/single_sg1.sql" 1
        else add_val "single|$S1_SG1" ERR; add_note "single|$S1_SG1" "create_stream failed"; fi
        if sg_create "$sg4" 4; then
            single_sg_script "$sg4" >"$SCR/single_sg4.sql"
            contender "$S1_SG4" pgbench "$SCR/single_sg4.sql" 1
        else add_val "single|$S1_SG4" ERR; add_note "single|$S1_SG4" "create_stream failed"; fi
    else
        add_val "single|$S1_SG1" PENDING; add_val "single|$S1_SG4" PENDING
    fi
    if [[ $pgq_ok == 1 ]]; then
        pgq_create "$q"
        single_pgq_script "$q" >"$SCR/single_pgq.sql"
        contender "$S1_PGQ" pgbench "$SCR/single_pgq.sql" 1
    else add_val "single|$S1_PGQ" PENDING; fi

    run_sliced single "$r" -c "$BENCH_CLIENTS" -j 2

    sqlq "DROP TABLE raw_single"
    if [[ $sg_ok == 1 ]]; then
        sg_check_count "single|$S1_SG1" "$sg1"; sg_check_count "single|$S1_SG4" "$sg4"
        sg_drop "$sg1"; sg_drop "$sg4"
    fi
    [[ $pgq_ok == 1 ]] && pgq_drop "$q"
    return 0
}

# ---------------------------------------------------------------------------
# 2. batched appends, 1,000 events per transaction, BENCH_BATCH_CLIENTS clients
# ---------------------------------------------------------------------------
S2_RAW="INSERT ... SELECT (baseline)"
S2_COPY="COPY (raw PostgreSQL)"
S2_SG="streamguard.append_batch, 4 partitions"
S2_PGQ="PgQ 1,000 x pgq.insert_event"

bench_batch() {
    local r=$1
    local sg="s2r$r" q="q2r$r"
    C_LABEL=(); C_KIND=(); C_SCRIPT=(); C_PER=()

    sql "$(raw_table_ddl raw_batch) $(raw_table_ddl raw_copy)" >/dev/null
    batch_raw_script raw_batch 4 >"$SCR/batch_raw.sql"
    [[ -f $SCR/copy_blocks.sql ]] || make_copy_blocks "$SCR/copy_blocks.sql" raw_copy
    contender "$S2_RAW" pgbench "$SCR/batch_raw.sql" 1000
    contender "$S2_COPY" copy raw_copy 1000
    if [[ $sg_ok == 1 ]]; then
        if sg_create "$sg" 4; then
            batch_sg_script "$sg" >"$SCR/batch_sg.sql"
            contender "$S2_SG" pgbench "$SCR/batch_sg.sql" 1000
        else add_val "batch|$S2_SG" ERR; add_note "batch|$S2_SG" "create_stream failed"; fi
    else add_val "batch|$S2_SG" PENDING; fi
    if [[ $pgq_ok == 1 ]]; then
        pgq_create "$q"
        batch_pgq_script "$q" >"$SCR/batch_pgq.sql"
        contender "$S2_PGQ" pgbench "$SCR/batch_pgq.sql" 1000
    else add_val "batch|$S2_PGQ" PENDING; fi

    run_sliced batch "$r" -c "$BENCH_BATCH_CLIENTS" -j "$BENCH_BATCH_CLIENTS"

    sqlq "DROP TABLE raw_batch; DROP TABLE raw_copy"
    if [[ $sg_ok == 1 ]]; then sg_check_count "batch|$S2_SG" "$sg"; sg_drop "$sg"; fi
    [[ $pgq_ok == 1 ]] && pgq_drop "$q"
    return 0
}

# ---------------------------------------------------------------------------
# 3. poll-drain: every contender is pre-filled with BENCH_DRAIN_EVENTS events
#    (1,000 per transaction; 4 partitions), then VACUUM ANALYZE + CHECKPOINT.
#    Then ONE client drains the whole backlog in transactions of (up to) 1,000
#    events, one statement per batch, with a fresh consumer per pass:
#    "drain"      the batch is only read and acknowledged (count(*) of the batch);
#    "drain→sink" each batch is also inserted into a sink table in the same
#                 transaction (the SPEC §8 drain shape).
#    BENCH_DRAIN_PASSES passes of each kind, contenders interleaved pass by
#    pass (raw, streamguard, PgQ, raw, ...) so that load bursts hit them alike;
#    events/s of a repeat = events drained in all its passes / their time.
#    Pre-fill, VACUUM ANALYZE and CHECKPOINT are not timed.
# ---------------------------------------------------------------------------
S3_RAW="raw bound: seq-range SELECT + position UPDATE"
S3_SG="streamguard.poll, 4 partitions"
S3_PGQ="PgQ next_batch/get_batch_events/finish_batch"
S3_PEO="streamguard pipeline, exactly_once"
S3_PALO="streamguard pipeline, at_least_once"
D1="drain"
D2="drain→sink"

NBATCH=$((BENCH_DRAIN_EVENTS / 1000))
prefill_pgbench_args() {  # 1,000-event transactions, 2 clients when the count splits evenly
    if (( NBATCH % 2 == 0 )); then echo "-c 2 -j 2 -t $((NBATCH / 2))"; else echo "-c 1 -j 1 -t $NBATCH"; fi
}
settle() { sql "VACUUM ANALYZE" >/dev/null; checkpoint; }
sink_ddl() { echo "DROP TABLE IF EXISTS $1; CREATE TABLE $1 (partition int, seq bigint, key text, payload jsonb, processed_at timestamptz DEFAULT now());"; }

declare -A DR_EV DR_T DR_BAD   # per "bench|contender" within one repeat

# drain_pass <bench> <contender> <logname> <script> <SQL counting the events the
#            consumer has consumed> <command printing the count still unconsumed>
# One pgbench run of NBATCH transactions.  The consumed count (positions) is
# cross-checked with what is left: consumed + left must equal the pre-fill.
drain_pass() {
    local k="$1|$2" name=$3 script=$4 donesql=$5 remcmd=$6 tps remaining drained
    [[ -n ${DR_BAD[$k]:-} ]] && return
    checkpoint
    if ! tps=$(pgb "$name" -c 1 -j 1 -t "$NBATCH" -f "$script"); then DR_BAD[$k]=1; return; fi
    drained=$(sql "$donesql" 2>>"$LOGS/$name.log" || true)
    remaining=$(eval "$remcmd" 2>>"$LOGS/$name.log" | grep -E '^[0-9]+$' | tail -n1 || true)
    if ! [[ $drained =~ ^[0-9]+$ && $remaining =~ ^[0-9]+$ ]]; then
        DR_BAD[$k]=1; add_note "$k" "could not count consumed/remaining events"; return
    fi
    if (( drained + remaining != BENCH_DRAIN_EVENTS )); then
        DR_BAD[$k]=1; add_note "$k" "accounting mismatch: consumed $drained + left $remaining != $BENCH_DRAIN_EVENTS"; return
    fi
    (( remaining == 0 )) ||
        add_note "$k" "short batches: a pass drained $drained of $BENCH_DRAIN_EVENTS in $NBATCH transactions"
    DR_EV[$k]=$(( ${DR_EV[$k]:-0} + drained ))
    DR_T[$k]=$(awk -v a="${DR_T[$k]:-0}" -v n="$NBATCH" -v t="$tps" 'BEGIN { printf "%.6f", a + n / t }')
}

# sink rows must match what the sink passes consumed
check_sink() {  # <contender> <sink table>
    local k="$D2|$1" rows
    [[ -n ${DR_BAD[$k]:-} || -z ${DR_EV[$k]:-} ]] && return
    rows=$(sql "SELECT count(*) FROM $2" || echo "?")
    if [[ $rows != "${DR_EV[$k]}" ]]; then
        DR_BAD[$k]=1; add_note "$k" "sink holds $rows rows, consumers consumed ${DR_EV[$k]}"
    fi
}

# pipeline_pass <contender> <guarantee> <pipeline name> <sink table> <stream>
# A pipeline drains the backlog in the background (batch_size 1000, SQL
# "INSERT INTO sink ... FROM batch").  Its rate comes from the sink: every
# batch's rows carry now() = the start of the batch's transaction, so
# (rows of all batches but the last) / (last batch start - first batch start)
# is the drain rate without the worker's start-up delay.
pipeline_pass() {
    local k="$D2|$1" g=$2 pn=$3 sink=$4 stream=$5 out rows span early
    [[ -n ${DR_BAD[$k]:-} ]] && return
    sql "TRUNCATE $sink" >/dev/null
    checkpoint
    if ! sql "SELECT streamguard.create_pipeline('$pn', '$stream',
                'INSERT INTO $sink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
                guarantee => '$g', batch_size => 1000)" >/dev/null 2>>"$LOGS/pipeline_$pn.log"; then
        DR_BAD[$k]=1; add_note "$k" "create_pipeline failed: $(tail -n1 "$LOGS/pipeline_$pn.log")"; return
    fi
    if ! "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 \
            -c "CALL bench_wait_pipeline('$stream', '$pn', $BENCH_DRAIN_EVENTS, $BENCH_PIPELINE_TIMEOUT)" \
            >>"$LOGS/pipeline_$pn.log" 2>&1; then
        DR_BAD[$k]=1; add_note "$k" "$(grep -m1 -oE '(ERROR|FATAL): .*' "$LOGS/pipeline_$pn.log" | cut -c1-160)"
    fi
    sqlq "SELECT streamguard.drop_pipeline('$pn')" || true
    [[ -n ${DR_BAD[$k]:-} ]] && return
    out=$(sql "SELECT count(*), extract(epoch FROM max(processed_at) - min(processed_at)),
                      count(*) FILTER (WHERE processed_at < (SELECT max(processed_at) FROM $sink))
               FROM $sink" | tr '|' ' ')
    read -r rows span early <<<"$out"
    if [[ $rows != "$BENCH_DRAIN_EVENTS" ]]; then
        DR_BAD[$k]=1; add_note "$k" "sink holds $rows rows after the pipeline consumed $BENCH_DRAIN_EVENTS"; return
    fi
    if ! awk -v s="$span" 'BEGIN { exit !(s > 0) }'; then
        DR_BAD[$k]=1; add_note "$k" "a single batch: cannot time it (raise BENCH_DRAIN_EVENTS)"; return
    fi
    DR_EV[$k]=$(( ${DR_EV[$k]:-0} + early ))
    DR_T[$k]=$(awk -v a="${DR_T[$k]:-0}" -v t="$span" 'BEGIN { printf "%.6f", a + t }')
}

bench_drain() {
    local r=$1 p c k prefilled sinkcte
    local sgname="s3r$r" qname="q3r$r"
    local raw_ok=0 sg_ready=0 pgq_ready=0 cons=()
    DR_EV=(); DR_T=(); DR_BAD=()
    for p in $(seq 1 "$BENCH_DRAIN_PASSES"); do cons+=("cnt$p" "snk$p"); done
    local conlist
    conlist=$(IFS=,; echo "${cons[*]}")

    # --- raw: an outbox table with a global seq (PK), one position row per consumer
    sql "$(raw_table_ddl raw_drain | sed 's/PRIMARY KEY (partition, seq)/PRIMARY KEY (seq)/')
         DROP TABLE IF EXISTS raw_drain_pos;
         CREATE TABLE raw_drain_pos (consumer text PRIMARY KEY, seq bigint NOT NULL);
         INSERT INTO raw_drain_pos SELECT c, 0 FROM unnest('{$conlist}'::text[]) AS c;
         $(sink_ddl sink_raw)" >/dev/null
    batch_raw_script raw_drain 4 >"$SCR/prefill_raw.sql"
    for c in "${cons[@]}"; do
        sinkcte=""
        [[ $c == snk* ]] && sinkcte=",
     i AS (INSERT INTO sink_raw (partition, seq, key, payload) SELECT partition, seq, key, payload FROM b)"
        cat >"$SCR/drain_raw_$c.sql" <<SQL
WITH b AS (SELECT e.* FROM raw_drain e
            WHERE e.seq > (SELECT seq FROM raw_drain_pos WHERE consumer = '$c')
            ORDER BY e.seq LIMIT 1000),
     u AS (UPDATE raw_drain_pos SET seq = m.s FROM (SELECT max(seq) AS s FROM b) AS m
            WHERE consumer = '$c' AND m.s IS NOT NULL)$sinkcte
SELECT count(*) FROM b;
SQL
    done
    # shellcheck disable=SC2046
    if pgb "prefill_raw_r$r" $(prefill_pgbench_args) -f "$SCR/prefill_raw.sql" >/dev/null; then
        raw_ok=1
    else DR_BAD["$D1|$S3_RAW"]=1; DR_BAD["$D2|$S3_RAW"]=1; add_note "$D1|$S3_RAW" "prefill failed"; fi

    # --- streamguard
    if [[ $sg_ok == 1 ]]; then
        if sg_create "$sgname" 4; then
            sql "$(sink_ddl sink_sg)" >/dev/null
            [[ $pipe_ok == 1 ]] && sql "$(sink_ddl sink_peo) $(sink_ddl sink_palo)" >/dev/null
            batch_sg_script "$sgname" >"$SCR/prefill_sg.sql"
            for c in "${cons[@]}"; do
                if [[ $c == snk* ]]; then
                    cat >"$SCR/drain_sg_$c.sql" <<SQL
WITH b AS (SELECT * FROM streamguard.poll('$sgname', '$c', 1000)),
     i AS (INSERT INTO sink_sg (partition, seq, key, payload) SELECT partition, seq, key, payload FROM b)
SELECT count(*) FROM b;
SQL
                else
                    echo "SELECT count(*) FROM streamguard.poll('$sgname', '$c', 1000);" >"$SCR/drain_sg_$c.sql"
                fi
            done
            # shellcheck disable=SC2046
            if pgb "prefill_sg_r$r" $(prefill_pgbench_args) -f "$SCR/prefill_sg.sql" >/dev/null; then
                sg_ready=1
                prefilled=$(sql "SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$sgname'" || echo "?")
                [[ $prefilled == "$BENCH_DRAIN_EVENTS" ]] ||
                    add_note "$D1|$S3_SG" "pre-fill: stream reports $prefilled events, expected $BENCH_DRAIN_EVENTS"
            else DR_BAD["$D1|$S3_SG"]=1; DR_BAD["$D2|$S3_SG"]=1; add_note "$D1|$S3_SG" "prefill failed"; fi
        else DR_BAD["$D1|$S3_SG"]=1; DR_BAD["$D2|$S3_SG"]=1; add_note "$D1|$S3_SG" "create_stream failed"; fi
    fi

    # --- PgQ: ticks every 1,000 events during pre-fill (ticker_max_count = 1000 and a
    # pgq.ticker() call after each 1,000-event transaction), so batches hold 1,000 events.
    if [[ $pgq_ok == 1 ]]; then
        pgq_create "$qname"
        sql "SELECT pgq.set_queue_config('$qname', 'ticker_max_count', '1000');
             SELECT pgq.register_consumer('$qname', c) FROM unnest('{$conlist}'::text[]) AS c;
             $(sink_ddl sink_pgq)" >/dev/null
        { batch_pgq_script "$qname"; echo "SELECT pgq.ticker('$qname');"; } >"$SCR/prefill_pgq.sql"
        for c in "${cons[@]}"; do
            if [[ $c == snk* ]]; then
                echo "SELECT bench_pgq_drain_sink('$qname', '$c');" >"$SCR/drain_pgq_$c.sql"
            else
                echo "SELECT bench_pgq_drain('$qname', '$c');" >"$SCR/drain_pgq_$c.sql"
            fi
        done
        if pgb "prefill_pgq_r$r" -c 1 -j 1 -t "$NBATCH" -f "$SCR/prefill_pgq.sql" >/dev/null; then
            sql "SELECT pgq.ticker('$qname')" >/dev/null
            pgq_ready=1
        else DR_BAD["$D1|$S3_PGQ"]=1; DR_BAD["$D2|$S3_PGQ"]=1; add_note "$D1|$S3_PGQ" "prefill failed"; fi
    fi

    settle

    # --- passes, interleaved
    for c in "${cons[@]}"; do
        local b=$D1
        [[ $c == snk* ]] && b=$D2
        if [[ $raw_ok == 1 ]]; then
            drain_pass "$b" "$S3_RAW" "drain_raw_${c}_r$r" "$SCR/drain_raw_$c.sql" \
                "SELECT count(*) FROM raw_drain WHERE seq <= (SELECT seq FROM raw_drain_pos WHERE consumer = '$c')" \
                "sql \"SELECT count(*) FROM raw_drain WHERE seq > (SELECT seq FROM raw_drain_pos WHERE consumer = '$c')\""
        fi
        if [[ $sg_ready == 1 ]]; then
            # what is left: read (and roll back) up to 100k remaining events
            drain_pass "$b" "$S3_SG" "drain_sg_${c}_r$r" "$SCR/drain_sg_$c.sql" \
                "SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = '$sgname' AND consumer = '$c'" \
                "\"\$BIN/psql\" -X -q -At -v ON_ERROR_STOP=1 -c BEGIN -c \"SELECT count(*) FROM streamguard.poll('$sgname', '$c', 100000)\" -c ROLLBACK"
        fi
        if [[ $sg_ready == 1 && $pipe_ok == 1 && $c == snk* ]]; then
            pipeline_pass "$S3_PEO" exactly_once "peo_${c}" sink_peo "$sgname"
            pipeline_pass "$S3_PALO" at_least_once "palo_${c}" sink_palo "$sgname"
        fi
        if [[ $pgq_ready == 1 ]]; then
            drain_pass "$b" "$S3_PGQ" "drain_pgq_${c}_r$r" "$SCR/drain_pgq_$c.sql" \
                "SELECT $BENCH_DRAIN_EVENTS - coalesce(pending_events, 0) FROM pgq.get_consumer_info('$qname', '$c')" \
                "sql \"SELECT coalesce(pending_events, 0) FROM pgq.get_consumer_info('$qname', '$c')\""
        fi
    done
    [[ $raw_ok == 1 ]] && check_sink "$S3_RAW" sink_raw
    [[ $sg_ready == 1 ]] && check_sink "$S3_SG" sink_sg
    [[ $pgq_ready == 1 ]] && check_sink "$S3_PGQ" sink_pgq

    # --- record one value per contender and kind for this repeat
    for b in "$D1" "$D2"; do
        for c in "$S3_RAW" "$S3_SG" "$S3_PEO" "$S3_PALO" "$S3_PGQ"; do
            k="$b|$c"
            [[ $b == "$D1" && ( $c == "$S3_PEO" || $c == "$S3_PALO" ) ]] && continue
            if [[ $c == "$S3_SG" && $sg_ok != 1 ]] || [[ $c == "$S3_PGQ" && $pgq_ok != 1 ]] ||
               [[ ( $c == "$S3_PEO" || $c == "$S3_PALO" ) && $pipe_ok != 1 ]]; then
                add_val "$k" PENDING
            elif [[ -n ${DR_BAD[$k]:-} || -z ${DR_EV[$k]:-} ]]; then
                add_val "$k" ERR
            else
                add_val "$k" "$(awk -v e="${DR_EV[$k]}" -v t="${DR_T[$k]}" 'BEGIN { printf "%.1f", e / t }')"
            fi
        done
    done

    # --- clean up
    sqlq "DROP TABLE raw_drain; DROP TABLE raw_drain_pos; DROP TABLE sink_raw"
    if [[ $sg_ok == 1 ]]; then sg_drop "$sgname"; sqlq "DROP TABLE sink_sg"; sqlq "DROP TABLE IF EXISTS sink_peo, sink_palo"; fi
    if [[ $pgq_ok == 1 ]]; then pgq_drop "$qname"; sqlq "DROP TABLE sink_pgq"; fi
}

# ---------------------------------------------------------------------------
# Run: repeats interleave the contenders (raw, streamguard, PgQ) so slow drift
# of the machine affects all of them alike.
# ---------------------------------------------------------------------------
T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$BENCH_REPEAT"); do
    for b in $BENCH_ONLY; do
        case $b in
            single|batch|drain) log "repeat $r/$BENCH_REPEAT: $b"; "bench_$b" "$r" ;;
            *) die "unknown benchmark in BENCH_ONLY: $b" ;;
        esac
    done
done
T1=$(date +%s)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
fmt() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN { s = sprintf("%d", v); n = length(s); o = ""; for (i = 1; i <= n; i++) { o = o substr(s, i, 1); if ((n - i) % 3 == 0 && i < n) o = o "," } print o }'; }

row() {  # bench contender baseline-contender target(ratio or empty) target-text [label [data bench]]
    local b=$1 c=$2 base=$3 tgt=$4 ttext=$5 label=${6:-$2} vals m ratio met
    [[ -n ${7:-} ]] && b=$7
    vals=${VALS["$b|$c"]:-}
    m=$(tr ' ' '\n' <<<"$vals" | median || true)
    if [[ -z $m ]]; then
        if [[ $vals == *PENDING* ]]; then m_txt="pending"; elif [[ -n $vals ]]; then m_txt="error"; else m_txt="not run"; fi
        ratio="—"; met="—"
        [[ -n $tgt ]] && met="pending"
        [[ $m_txt == error && -n $tgt ]] && met="no (failed)"
    else
        m_txt=$(fmt "$m")
        # ratio: median over repeats of contender/baseline of the same repeat
        # (paired: they ran minutes apart at most, so slow machine drift cancels)
        ratio=$(paste -d' ' <(tr ' ' '\n' <<<"${vals# }") <(tr ' ' '\n' <<<"${VALS["$b|$base"]:-}" | sed '/^$/d') |
            awk '$1 ~ /^[0-9.]+$/ && $2 ~ /^[0-9.]+$/ && $2 > 0 { print $1 / $2 }' | sort -g |
            awk '{a[NR]=$1} END { if (NR==0) exit; if (NR%2) printf "%.2f", a[(NR+1)/2]; else printf "%.2f", (a[NR/2]+a[NR/2+1])/2 }')
        [[ -n $ratio ]] || ratio="—"
        met="—"
        if [[ -n $tgt && $ratio != "—" ]]; then
            met=$(awk -v r="$ratio" -v t="$tgt" 'BEGIN{ print (r + 0 >= t + 0) ? "yes" : "**no**" }')
        fi
    fi
    [[ $c == "$base" ]] && ratio="1.00"
    if [[ -n ${7:-} ]]; then  # a ratio between two contenders: no events/s of its own
        printf '| %s | %s | — | %s | %s | %s |\n' "$1" "$label" "$ratio" "$ttext" "$met"
    else
        printf '| %s | %s | %s | %s | %s | %s |\n' "$b" "$label" "$m_txt" "$ratio" "$ttext" "$met"
    fi
}

{
    echo "# streamguard benchmark results"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); revision: ${BENCH_REV:-unknown}"
    echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}"), PostgreSQL $SERVER_VERSION"
    echo "- settings: shared_buffers=512MB, synchronous_commit=on, max_wal_size=4GB, checkpoint_timeout=15min, fsync on"
    echo "- BENCH_SECONDS=$BENCH_SECONDS BENCH_REPEAT=$BENCH_REPEAT BENCH_SLICES=$BENCH_SLICES BENCH_CLIENTS=$BENCH_CLIENTS BENCH_BATCH_CLIENTS=$BENCH_BATCH_CLIENTS BENCH_DRAIN_EVENTS=$BENCH_DRAIN_EVENTS BENCH_DRAIN_PASSES=$BENCH_DRAIN_PASSES BENCH_ONLY=\"$BENCH_ONLY\"; wall time $(( (T1 - T0) / 60 ))m$(( (T1 - T0) % 60 ))s"
    echo "- load average (1/5/15 min) at start: $LOAD0; at end: $LOAD1 (the suite itself keeps ~2 cores busy; a start value well above 0 means other work shared the machine)${BENCH_NICE:+; suite run at nice $BENCH_NICE}"
    [[ $sg_ok == 1 ]] || echo "- streamguard: not available in this run (rows marked pending)"
    echo
    echo "events/s are medians over the repeats; a ratio is the median over the repeats of contender / raw PostgreSQL baseline of the same benchmark and repeat (all measured in this run)."
    echo
    echo "| benchmark | contender | events/s (median) | ratio vs raw baseline | SPEC §8 target | met? |"
    echo "|---|---|---:|---:|---|---|"
    for b in $BENCH_ONLY; do
        case $b in
            single)
                row single "$S1_RAW" "$S1_RAW" "" "baseline"
                row single "$S1_SG1" "$S1_RAW" 0.9 "≥ 0.90 × plain INSERT"
                row single "$S1_SG4" "$S1_RAW" 0.9 "≥ 0.90 × plain INSERT"
                row single "$S1_PGQ" "$S1_RAW" "" "reference"
                ;;
            batch)
                row batch "$S2_RAW" "$S2_RAW" "" "baseline"
                row batch "$S2_COPY" "$S2_RAW" "" "baseline of a COPY path"
                row batch "$S2_SG" "$S2_RAW" 0.7 "≥ 0.70 × INSERT … SELECT"
                printf '| batch | streamguard COPY path | n/a | — | ≥ 0.90 × COPY | n/a (no COPY path in this version) |\n'
                row batch "$S2_PGQ" "$S2_RAW" "" "reference"
                ;;
            drain)
                row "$D1" "$S3_RAW" "$S3_RAW" "" "baseline"
                row "$D1" "$S3_SG" "$S3_RAW" 0.7 "≥ 0.70 × raw bound (drain target applied to poll)"
                row "$D1" "$S3_PGQ" "$S3_RAW" "" "reference"
                row "$D2" "$S3_RAW" "$S3_RAW" "" "baseline"
                row "$D2" "$S3_SG" "$S3_RAW" 0.7 "≥ 0.70 × raw bound (drain target applied to poll)"
                row "$D2" "$S3_PEO" "$S3_RAW" 0.7 "≥ 0.70 × raw bound"
                row "$D2" "$S3_PALO" "$S3_RAW" "" "reference"
                row "$D2" "$S3_PGQ" "$S3_RAW" "" "reference"
                row "pipeline" "$S3_PEO" "$S3_PALO" 0.95 "≥ 0.95 × at_least_once" "exactly_once vs at_least_once (drain→sink)" "$D2"
                ;;
        esac
    done
    echo
    echo "## Per-repeat values (events/s)"
    echo
    echo "| benchmark | contender | values | notes |"
    echo "|---|---|---|---|"
    for k in $(printf '%s\n' "${!VALS[@]}" | sort | tr ' ' '\001'); do
        k=${k//$'\001'/ }
        vs=""
        for v in ${VALS[$k]}; do
            if [[ $v =~ ^[0-9.]+$ ]]; then vs="$vs $(fmt "$v")"; else vs="$vs $v"; fi
        done
        printf '| %s | %s |%s | %s |\n' "${k%%|*}" "${k#*|}" "$vs" "${NOTES[$k]:-}"
    done
} >"$WORK/latest.md"

echo
cat "$WORK/latest.md"
