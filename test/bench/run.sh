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
#   BENCH_LAT_SECONDS=20     latency benchmark: producer run per contender
#   BENCH_LAT_RATE=1000      latency benchmark: events/s of the producer (pgbench -R)
#   BENCH_LAT_CLIENTS=4      latency benchmark: producer clients (same for every contender)
#   BENCH_LAT_POLL_MS=10     latency benchmark: sleep of the PgQ / naive consumers when idle
#   BENCH_REMOTE_EVENTS=300000  remote benchmark: events drained per contender (multiple of 1000)
#   BENCH_LONG_EVENTS=10000000  long run: events appended (multiple of 1000 x BENCH_LONG_CLIENTS)
#   BENCH_LONG_CLIENTS=2     long run: concurrent append_batch producers
#   BENCH_LONG_RETENTION="10 seconds"  long run: retention of its stream (none: no retention)
#   BENCH_ONLY="single batch drain latency remote long"  subset of benchmarks to run
#   BENCH_OUT=<repo>/bench-results   where latest.md is written
#   BENCH_SHARED_BUFFERS=512MB  shared_buffers of the bench server(s)
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
: "${BENCH_LAT_SECONDS:=20}"
: "${BENCH_LAT_RATE:=1000}"
: "${BENCH_LAT_CLIENTS:=4}"
: "${BENCH_LAT_POLL_MS:=10}"
: "${BENCH_REMOTE_EVENTS:=300000}"
: "${BENCH_LONG_EVENTS:=10000000}"
: "${BENCH_LONG_CLIENTS:=2}"
: "${BENCH_LONG_RETENTION:=10 seconds}"
: "${BENCH_ONLY:=single batch drain latency remote long}"
: "${BENCH_KEEP:=0}"
: "${BENCH_SHARED_BUFFERS:=512MB}"

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
    for v in BENCH_LAT_SECONDS BENCH_LAT_RATE BENCH_LAT_CLIENTS BENCH_LAT_POLL_MS BENCH_LONG_CLIENTS; do
        [[ ${!v} =~ ^[0-9]+$ && ${!v} -ge 1 ]] || die "$v must be a positive integer"
    done
    [[ $BENCH_REMOTE_EVENTS =~ ^[0-9]+$ && $((BENCH_REMOTE_EVENTS % 1000)) -eq 0 && $BENCH_REMOTE_EVENTS -ge 2000 ]] ||
        die "BENCH_REMOTE_EVENTS must be a multiple of 1000, at least 2000"
    [[ $BENCH_LONG_EVENTS =~ ^[0-9]+$ && $BENCH_LONG_EVENTS -ge $((10000 * BENCH_LONG_CLIENTS)) &&
       $((BENCH_LONG_EVENTS % (1000 * BENCH_LONG_CLIENTS))) -eq 0 ]] ||
        die "BENCH_LONG_EVENTS must be a multiple of 1000 x BENCH_LONG_CLIENTS, at least 10 batches per client"
    [[ $BENCH_LONG_RETENTION =~ ^[0-9a-zA-Z\ .:]+$ ]] || die "BENCH_LONG_RETENTION must be an interval like '30 seconds' (or none)"
    [[ $BENCH_SHARED_BUFFERS =~ ^[0-9]+(kB|MB|GB)$ ]] || die "BENCH_SHARED_BUFFERS must be like 512MB"
    for b in $BENCH_ONLY; do
        [[ $b =~ ^(single|batch|drain|latency|remote|long)$ ]] || die "unknown benchmark in BENCH_ONLY: $b"
    done
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
          BENCH_LAT_SECONDS="$BENCH_LAT_SECONDS" BENCH_LAT_RATE="$BENCH_LAT_RATE" BENCH_LAT_CLIENTS="$BENCH_LAT_CLIENTS"
          BENCH_LAT_POLL_MS="$BENCH_LAT_POLL_MS" BENCH_REMOTE_EVENTS="$BENCH_REMOTE_EVENTS"
          BENCH_LONG_EVENTS="$BENCH_LONG_EVENTS" BENCH_LONG_CLIENTS="$BENCH_LONG_CLIENTS" BENCH_LONG_RETENTION="$BENCH_LONG_RETENTION"
          BENCH_SHARED_BUFFERS="$BENCH_SHARED_BUFFERS" BENCH_ONLY="$BENCH_ONLY" PG_CONFIG="$PG_CONFIG" BENCH_REV="$REV"
          PATH="$PATH" LANG=C.UTF-8 LC_ALL=C.UTF-8)

    cleanup_outer() {
        # If the inner part died without stopping its clusters (the bench server and
        # the remote one of the remote benchmark), stop them here.
        local d
        for d in "$WORK/data" "$WORK/data2"; do
            [[ -f $d/postmaster.pid ]] || continue
            if [[ $EUID -eq 0 ]]; then
                runuser -u postgres -- "$("$PG_CONFIG" --bindir)/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 || true
            else
                "$("$PG_CONFIG" --bindir)/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 || true
            fi
        done
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
BG_PIDS=()          # background helpers (pgqd, consumers, samplers): killed by pid at exit
SERVER_STARTED=0
SERVER2_STARTED=0
DATA2=$WORK/data2
cleanup_inner() {
    local p
    for p in "${CLIENT_PIDS[@]}" "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if [[ $SERVER_STARTED == 1 ]]; then
        "$BIN/pg_ctl" -D "$DATA" -m fast -t 60 stop >/dev/null 2>&1 ||
            "$BIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
    fi
    if [[ $SERVER2_STARTED == 1 ]]; then
        "$BIN/pg_ctl" -D "$DATA2" -m fast -t 60 stop >/dev/null 2>&1 ||
            "$BIN/pg_ctl" -D "$DATA2" -m immediate stop >/dev/null 2>&1 || true
    fi
}
bg_forget() {  # <pid>: drop a finished background helper from BG_PIDS
    local p keep=()
    for p in "${BG_PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    BG_PIDS=("${keep[@]}")
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
server_conf() {  # the settings of a bench cluster (the remote one of the remote benchmark too)
    cat <<EOF

# --- streamguard benchmark cluster (2-core box) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
shared_preload_libraries = '$preload'
max_connections = 40
shared_buffers = $BENCH_SHARED_BUFFERS
synchronous_commit = on
max_wal_size = 4GB
checkpoint_timeout = 15min
log_min_messages = warning
log_checkpoints = on
log_autovacuum_min_duration = 0
# latency benchmark: commit times of the append and of the sink transaction
track_commit_timestamp = on
EOF
}
server_conf >>"$DATA/postgresql.conf"

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

medianf() {  # like median, with 2 decimals
    grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END { if (NR==0) exit; if (NR%2) printf "%.2f", a[(NR+1)/2]; else printf "%.2f", (a[NR/2]+a[NR/2+1])/2 }'
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
#                 transaction (the drain shape of the target).
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
# 4. end-to-end latency (append commit -> sink commit) at BENCH_LAT_RATE
#    events/s for BENCH_LAT_SECONDS per contender.  The producer is pgbench -R
#    (Poisson arrivals) with BENCH_LAT_CLIENTS clients, one event per
#    transaction, every event carrying a unique id (a sequence) in its payload;
#    the same producer for every contender.  Each delivered event becomes a sink
#    row (id, clock_timestamp()).  Latency = commit time of the sink row's
#    transaction - commit time of the event's transaction, both read with
#    pg_xact_commit_timestamp(xmin) (track_commit_timestamp = on): commit to
#    commit, on the server's clock, no client involved.
#    - streamguard: an exactly_once pipeline (batch_size 1000) into the sink;
#      the event's xmin is read from the stream's segment tables.
#    - PgQ as its users run it: pgqd with its default settings (ticker_period
#      1 s; queue defaults ticker_max_count 500, ticker_max_lag 3 s) and one
#      consumer looping next_batch / get_batch_events / INSERT into the sink /
#      finish_batch, one transaction per batch, sleeping BENCH_LAT_POLL_MS
#      when there is no batch.
#    - naive "id > last" poller on a plain table (bigserial id, the position
#      saved in a table in the same transaction as the sink rows), sleeping
#      BENCH_LAT_POLL_MS when it finds nothing.  Concurrent producers commit
#      out of id order, so it skips events: they are counted as lost.
#    Contender order rotates from repeat to repeat.
# ---------------------------------------------------------------------------
S4_SG="streamguard pipeline, exactly_once"
S4_PGQ="PgQ: pgqd defaults + consumer loop"
S4_RAW="naive \"id > last\" poller, plain table"
declare -A LAT   # "contender|field" -> per-repeat values (fields: p50 p99 max min appended delivered lost dup rate batches)
declare -A LAT_NOTE
lat_add() { LAT[$1]="${LAT[$1]:-} $2"; }
lat_note() { [[ ${LAT_NOTE[$1]:-} == *"$2"* ]] || LAT_NOTE[$1]="${LAT_NOTE[$1]:+${LAT_NOTE[$1]}; }$2"; }
PGQD=$(command -v pgqd || true)
LAT_SETUP=0

latency_setup() {
    [[ $LAT_SETUP == 1 ]] && return 0
    LAT_SETUP=1
    sql "$(cat <<'EOF'
CREATE SEQUENCE bench_lat_id;
CREATE TABLE bench_lat_ctl (name text PRIMARY KEY, stop_at bigint);
-- (event id, commit time of its append) of every event stored in a stream's segments
CREATE FUNCTION bench_sg_events(stream text) RETURNS TABLE (ev_id bigint, ev_commit timestamptz)
LANGUAGE plpgsql AS $$
DECLARE sid int; sg int;
BEGIN
    SELECT s.id INTO sid FROM streamguard.stream s WHERE s.name = bench_sg_events.stream;
    FOR sg IN SELECT g.seg FROM streamguard.segment g WHERE g.stream_id = sid ORDER BY g.seg LOOP
        RETURN QUERY EXECUTE format('SELECT (payload->>''id'')::bigint, pg_xact_commit_timestamp(xmin) FROM streamguard_data.%I',
                                    's' || sid || '_' || sg);
    END LOOP;
END $$;
-- the same for a PgQ queue (its event tables)
CREATE FUNCTION bench_pgq_events(q text) RETURNS TABLE (ev_id bigint, ev_commit timestamptz)
LANGUAGE plpgsql AS $$
DECLARE pfx text;
BEGIN
    SELECT queue_data_pfx INTO pfx FROM pgq.queue WHERE queue_name = q;
    RETURN QUERY EXECUTE format('SELECT (ev_data::jsonb->>''id'')::bigint, pg_xact_commit_timestamp(xmin) FROM %s', pfx);
END $$;
-- PgQ consumer: one transaction per batch; sleeps poll_ms when there is no batch;
-- returns once it has delivered bench_lat_ctl.stop_at events
CREATE PROCEDURE bench_pgq_consume(q text, c text, poll_ms int, timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE b bigint; n bigint; total bigint := 0; stop bigint; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        b := pgq.next_batch(q, c);
        IF b IS NOT NULL THEN
            INSERT INTO lat_sink_pgq (id, at)
                SELECT (ev_data::jsonb->>'id')::bigint, clock_timestamp() FROM pgq.get_batch_events(b);
            GET DIAGNOSTICS n = ROW_COUNT;
            total := total + n;
            PERFORM pgq.finish_batch(b);
            COMMIT;
        ELSE
            COMMIT;
            SELECT stop_at INTO stop FROM bench_lat_ctl WHERE name = c;
            EXIT WHEN stop IS NOT NULL AND total >= stop;
            IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
                RAISE EXCEPTION 'PgQ consumer: % events delivered, % expected, after % s', total, stop, timeout_s;
            END IF;
            PERFORM pg_sleep(poll_ms / 1000.0);
        END IF;
    END LOOP;
END $$;
-- naive poller: "id > last" on a plain table, position saved with the sink rows;
-- sleeps poll_ms when it finds nothing; returns after an empty poll that began
-- after the producers had finished (bench_lat_ctl.stop_at set)
CREATE PROCEDURE bench_naive_consume(poll_ms int, timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE last bigint; m bigint; n bigint; stop bigint; stopping boolean := false; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        SELECT seq INTO last FROM lat_raw_pos;
        WITH b AS (SELECT id, payload FROM lat_raw WHERE id > last ORDER BY id LIMIT 1000),
             i AS (INSERT INTO lat_sink_raw (id, at) SELECT (payload->>'id')::bigint, clock_timestamp() FROM b)
        SELECT max(id), count(*) INTO m, n FROM b;
        IF n > 0 THEN
            UPDATE lat_raw_pos SET seq = m;
            COMMIT;
        ELSE
            COMMIT;
            EXIT WHEN stopping;
            SELECT stop_at INTO stop FROM bench_lat_ctl WHERE name = 'naive';
            IF stop IS NOT NULL THEN stopping := true; CONTINUE; END IF;
            IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
                RAISE EXCEPTION 'naive poller still running after % s', timeout_s;
            END IF;
            PERFORM pg_sleep(poll_ms / 1000.0);
        END IF;
    END LOOP;
END $$;
EOF
)" >/dev/null
}

LAT_SET=$'\\set k random(1, 1000000)\n\\set a random(1, 10000)'
LAT_PAYLOAD="jsonb_build_object('id', nextval('bench_lat_id'), 'amount', CAST(:a AS int), 'currency', 'EUR')"

# producer: pgbench -R; prints the number of committed events
lat_produce() {  # <logname> <script>
    local j=2
    (( BENCH_LAT_CLIENTS < 2 )) && j=1
    pgb "$1" -c "$BENCH_LAT_CLIENTS" -j "$j" -R "$BENCH_LAT_RATE" -T "$BENCH_LAT_SECONDS" -f "$2" >/dev/null || return 1
    pgb_processed "$1"
}

# latency statistics of one contender: <contender> <events source (SQL relation
# with ev_id, ev_commit)> <sink table> <events committed by the producer>
lat_record() {
    local c=$1 src=$2 sink=$3 produced=$4 out
    local n_ev n_ev_d n_sink n_sink_d n_nots p50 p99 mx mn matched
    out=$(sql "WITH e AS (SELECT * FROM $src),
                    s AS (SELECT id, pg_xact_commit_timestamp(xmin) AS c FROM $sink),
                    j AS (SELECT extract(epoch FROM s.c - e.ev_commit) * 1000 AS ms FROM s JOIN e ON e.ev_id = s.id)
               SELECT (SELECT count(*) FROM e), (SELECT count(DISTINCT ev_id) FROM e),
                      (SELECT count(*) FROM s), (SELECT count(DISTINCT id) FROM s),
                      (SELECT count(*) FROM e WHERE ev_commit IS NULL),
                      round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
                      round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3),
                      round(max(ms)::numeric, 3), round(min(ms)::numeric, 3), count(*)
               FROM j" 2>>"$LOGS/latency.err" | tr '|' ' ') || { lat_add "$c|p50" ERR; lat_note "$c" "statistics query failed"; return; }
    read -r n_ev n_ev_d n_sink n_sink_d n_nots p50 p99 mx mn matched <<<"$out"
    if [[ $n_ev != "$produced" ]]; then
        lat_note "$c" "the source holds $n_ev events, the producer committed $produced"
    fi
    (( n_nots == 0 )) || lat_note "$c" "$n_nots events without a commit timestamp"
    (( n_ev_d == n_ev )) || lat_note "$c" "duplicate ids in the source"
    (( matched == n_sink )) || lat_note "$c" "$((n_sink - matched)) sink rows match no appended event"
    if [[ -z $p50 ]]; then lat_add "$c|p50" ERR; lat_note "$c" "nothing delivered"; return; fi
    lat_add "$c|p50" "$p50"; lat_add "$c|p99" "$p99"; lat_add "$c|max" "$mx"; lat_add "$c|min" "$mn"
    lat_add "$c|appended" "$n_ev"; lat_add "$c|delivered" "$n_sink_d"
    lat_add "$c|lost" "$((n_ev - n_sink_d))"; lat_add "$c|dup" "$((n_sink - n_sink_d))"
    lat_add "$c|rate" "$(awk -v n="$n_ev" -v t="$BENCH_LAT_SECONDS" 'BEGIN { printf "%.0f", n / t }')"
    awk -v m="$mn" 'BEGIN { exit !(m < 0) }' && lat_note "$c" "negative latency $mn ms (clock?)"
    return 0
}

lat_sg() {  # <repeat>
    local r=$1 c=$S4_SG produced st_pid i
    local st="lat_r$r" pn="lat_p_r$r"
    sql "DROP TABLE IF EXISTS lat_sink_sg; CREATE TABLE lat_sink_sg (id bigint, at timestamptz)" >/dev/null
    if ! sg_create "$st" 4; then lat_add "$c|p50" ERR; lat_note "$c" "create_stream failed"; return; fi
    if ! sql "SELECT streamguard.create_pipeline('$pn', '$st',
                'INSERT INTO lat_sink_sg (id, at) SELECT (payload->>''id'')::bigint, clock_timestamp() FROM batch',
                guarantee => 'exactly_once', batch_size => 1000)" >/dev/null 2>>"$LOGS/latency.err"; then
        lat_add "$c|p50" ERR; lat_note "$c" "create_pipeline failed: $(tail -n1 "$LOGS/latency.err")"; sg_drop "$st"; return
    fi
    st_pid=""
    for i in $(seq 1 300); do
        st_pid=$(sql "SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = '$pn' AND state = 'running'")
        [[ -n $st_pid ]] && break
        sleep 0.1
    done
    if [[ -z $st_pid ]]; then
        lat_add "$c|p50" ERR; lat_note "$c" "the pipeline's worker did not start"; sg_drop "$st"; return
    fi
    { echo "$LAT_SET"; echo "SELECT streamguard.append('$st', $LAT_PAYLOAD, 'k' || CAST(:k AS text));"; } >"$SCR/lat_sg.sql"
    checkpoint
    if ! produced=$(lat_produce "lat_sg_r$r" "$SCR/lat_sg.sql"); then
        lat_add "$c|p50" ERR; lat_note "$c" "producer failed"; sg_drop "$st"; return
    fi
    if ! "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -c "CALL bench_wait_pipeline('$st', '$pn', $produced, 60)" \
            >>"$LOGS/latency.err" 2>&1; then
        lat_note "$c" "$(grep -m1 -oE '(ERROR|FATAL): .*' "$LOGS/latency.err" | tail -n1 | cut -c1-160)"
    fi
    lat_add "$c|batches" "$(sql "SELECT batches FROM streamguard.pipelines WHERE pipeline = '$pn'")"
    sqlq "SELECT streamguard.drop_pipeline('$pn')" || true
    lat_record "$c" "bench_sg_events('$st')" lat_sink_sg "$produced"
    sg_drop "$st"
}

lat_pgq() {  # <repeat>
    local r=$1 c=$S4_PGQ produced pgqd_pid cons_pid rc=0 ticks
    local q="lat_q_r$r"
    if [[ -z $PGQD ]]; then lat_add "$c|p50" PENDING; lat_note "$c" "pgqd not installed"; return; fi
    pgq_create "$q"
    sql "SELECT pgq.register_consumer('$q', 'lat');
         DROP TABLE IF EXISTS lat_sink_pgq; CREATE TABLE lat_sink_pgq (id bigint, at timestamptz);
         DELETE FROM bench_lat_ctl WHERE name = 'lat'; INSERT INTO bench_lat_ctl VALUES ('lat', NULL)" >/dev/null
    # pgqd with its defaults; only where to connect, log and keep its pid file are set
    cat >"$WORK/pgqd.ini" <<EOF
[pgqd]
logfile = $LOGS/pgqd.log
pidfile = $WORK/pgqd.pid
base_connstr = host=$SOCK port=$PORT user=$PGUSER
initial_database = bench
database_list = bench
EOF
    "$PGQD" "$WORK/pgqd.ini" >>"$LOGS/pgqd.out" 2>&1 &
    pgqd_pid=$!; BG_PIDS+=("$pgqd_pid")
    "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 \
        -c "CALL bench_pgq_consume('$q', 'lat', $BENCH_LAT_POLL_MS, $((BENCH_LAT_SECONDS + 120)))" >"$LOGS/lat_pgq_consumer_r$r.log" 2>&1 &
    cons_pid=$!; BG_PIDS+=("$cons_pid")
    sleep 2
    if ! kill -0 "$pgqd_pid" 2>/dev/null; then
        lat_add "$c|p50" ERR; lat_note "$c" "pgqd did not start: $(tail -n1 "$LOGS/pgqd.out")"
        kill "$cons_pid" 2>/dev/null || true; wait "$cons_pid" 2>/dev/null || true; bg_forget "$cons_pid"; bg_forget "$pgqd_pid"
        pgq_drop "$q"; return
    fi
    { echo "$LAT_SET"; echo "SELECT pgq.insert_event('$q', 'lat', ($LAT_PAYLOAD)::text, 'k' || CAST(:k AS text), NULL, NULL, NULL);"; } >"$SCR/lat_pgq.sql"
    checkpoint
    if ! produced=$(lat_produce "lat_pgq_r$r" "$SCR/lat_pgq.sql"); then
        lat_add "$c|p50" ERR; lat_note "$c" "producer failed"; produced=-1
    fi
    sql "UPDATE bench_lat_ctl SET stop_at = $produced WHERE name = 'lat'" >/dev/null
    wait "$cons_pid" || rc=$?
    bg_forget "$cons_pid"
    ticks=$(sql "SELECT count(*) FROM pgq.tick t JOIN pgq.queue q ON q.queue_id = t.tick_queue WHERE q.queue_name = '$q'" || echo "?")
    kill -INT "$pgqd_pid" 2>/dev/null || true
    wait "$pgqd_pid" 2>/dev/null || true
    bg_forget "$pgqd_pid"
    if (( rc != 0 )); then
        lat_note "$c" "consumer: $(grep -m1 -oE '(ERROR|FATAL): .*' "$LOGS/lat_pgq_consumer_r$r.log" | cut -c1-160)"
    fi
    if (( produced >= 0 )); then
        lat_add "$c|batches" "$ticks"
        lat_record "$c" "bench_pgq_events('$q')" lat_sink_pgq "$produced"
    fi
    pgq_drop "$q"
}

lat_raw() {  # <repeat>
    local r=$1 c=$S4_RAW produced cons_pid rc=0
    sql "DROP TABLE IF EXISTS lat_raw, lat_raw_pos, lat_sink_raw;
         CREATE TABLE lat_raw (id bigserial PRIMARY KEY, key text, payload jsonb NOT NULL);
         CREATE TABLE lat_raw_pos (seq bigint NOT NULL); INSERT INTO lat_raw_pos VALUES (0);
         CREATE TABLE lat_sink_raw (id bigint, at timestamptz);
         DELETE FROM bench_lat_ctl WHERE name = 'naive'; INSERT INTO bench_lat_ctl VALUES ('naive', NULL)" >/dev/null
    "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 \
        -c "CALL bench_naive_consume($BENCH_LAT_POLL_MS, $((BENCH_LAT_SECONDS + 120)))" >"$LOGS/lat_raw_consumer_r$r.log" 2>&1 &
    cons_pid=$!; BG_PIDS+=("$cons_pid")
    sleep 1
    { echo "$LAT_SET"; echo "INSERT INTO lat_raw (key, payload) VALUES ('k' || CAST(:k AS text), $LAT_PAYLOAD);"; } >"$SCR/lat_raw.sql"
    checkpoint
    if ! produced=$(lat_produce "lat_raw_r$r" "$SCR/lat_raw.sql"); then
        lat_add "$c|p50" ERR; lat_note "$c" "producer failed"; produced=-1
    fi
    sql "UPDATE bench_lat_ctl SET stop_at = 0 WHERE name = 'naive'" >/dev/null
    wait "$cons_pid" || rc=$?
    bg_forget "$cons_pid"
    (( rc == 0 )) || lat_note "$c" "consumer: $(grep -m1 -oE '(ERROR|FATAL): .*' "$LOGS/lat_raw_consumer_r$r.log" | cut -c1-160)"
    if (( produced >= 0 )); then
        lat_record "$c" "(SELECT (payload->>'id')::bigint AS ev_id, pg_xact_commit_timestamp(xmin) AS ev_commit FROM lat_raw) AS ev" \
            lat_sink_raw "$produced"
    fi
    sqlq "DROP TABLE lat_raw, lat_raw_pos, lat_sink_raw"
}

bench_latency() {
    local r=$1 i j fns=()
    latency_setup
    if [[ $pipe_ok == 1 ]]; then fns+=(lat_sg); else lat_add "$S4_SG|p50" PENDING; fi
    if [[ $pgq_ok == 1 ]]; then fns+=(lat_pgq); else lat_add "$S4_PGQ|p50" PENDING; fi
    fns+=(lat_raw)
    for j in $(seq 0 $(( ${#fns[@]} - 1 ))); do
        i=$(( (j + r - 1) % ${#fns[@]} ))
        "${fns[$i]}" "$r"
    done
    sqlq "DROP TABLE IF EXISTS lat_sink_sg, lat_sink_pgq"
    return 0
}

# ---------------------------------------------------------------------------
# 5. remote sinks and sources, against a SECOND throwaway server (same
#    settings, plus max_prepared_transactions = 20) on the same unix socket
#    directory.  The local server reaches it through a foreign server of
#    wrapper streamguard_remote (host = the socket directory) and a user
#    mapping for the bench's superuser with no password (trust on the local
#    socket): a bench shortcut; non-superusers need a password mapping.
#    Per repeat, a local stream (4 partitions) is pre-filled with
#    BENCH_REMOTE_EVENTS events (1,000 per transaction), and a stream on the
#    remote server gets the same events (same partition, seq, key, payload).
#    Then, contenders in a rotating order, each after a CHECKPOINT on both:
#    remote sink (rows = partition, seq, key, payload; remote table with a
#    processed_at DEFAULT now() column, no index):
#    - baseline: COPY of the same rows over one connection, streamed:
#      psql "COPY (SELECT ... FROM <the segment tables>) TO STDOUT" piped into
#      psql -p <remote> "COPY ... FROM STDIN" (one remote transaction); wall time.
#    - reference: the same stream split into COPY blocks of 1,000 rows, one
#      remote transaction each (what a per-batch loader does), one psql session.
#    - pipelines with sink_server/sink_table ('SELECT partition, seq, key,
#      payload FROM batch', batch_size 1000): exactly_once two_phase,
#      exactly_once offsets, at_least_once, at_most_once; timed from the sink
#      like the local pipelines (remote now() = start of each batch's remote
#      transaction).
#    remote source: an exactly_once pipeline reading the remote stream
#    (source_server) into a local sink vs one reading the local stream (the
#    same events) into the same local sink (truncated in between).
# ---------------------------------------------------------------------------
S5_COPY="COPY to the remote, one transaction (baseline)"
S5_COPYB="COPY to the remote, 1,000 rows per transaction"
S5_2PC="pipeline exactly_once, sink_mode two_phase"
S5_OFF="pipeline exactly_once, sink_mode offsets"
S5_ALO="pipeline at_least_once"
S5_AMO="pipeline at_most_once"
S6_LOCAL="pipeline exactly_once, local source (baseline)"
S6_REM="pipeline exactly_once, remote source (source_server)"
R1="remote sink"
R2="remote source"
PORT2=""
SERVER2_FAILED=""
sql2() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -p "$PORT2" -c "$1"; }
sql2q() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -p "$PORT2" -c "$1" >/dev/null 2>&1; }
checkpoint2() { sql2 "CHECKPOINT" >/dev/null; }

start_server2() {
    local i b2
    [[ $SERVER2_STARTED == 1 ]] && return 0
    [[ -n $SERVER2_FAILED ]] && return 1
    SERVER2_FAILED=1
    log "initdb in $DATA2 (remote server)"
    "$BIN/initdb" -D "$DATA2" -U "$PGUSER" -E UTF8 --no-locale --auth-local=trust --auth-host=scram-sha-256 \
        >"$LOGS/initdb2.log" 2>&1 || { log "initdb of the remote server failed"; return 1; }
    { server_conf; echo "max_prepared_transactions = 20"; } >>"$DATA2/postgresql.conf"
    b2=$((PORT + 1000 + RANDOM % 1000))
    for i in $(seq 0 40); do
        PORT2=$((b2 + i * 7))
        port_free "$PORT2" || continue
        if "$BIN/pg_ctl" -D "$DATA2" -l "$LOGS/server2.log" -o "-p $PORT2" -w -t 60 start >/dev/null 2>&1; then
            SERVER2_STARTED=1; break
        fi
    done
    [[ $SERVER2_STARTED == 1 ]] || { log "could not start the remote server: $(tail -n 3 "$LOGS/server2.log" | tr '\n' ' ')"; return 1; }
    log "remote server up on port $PORT2"
    "$BIN/createdb" -p "$PORT2" bench
    sql2 "CREATE EXTENSION streamguard" >/dev/null 2>>"$LOGS/remote.err" || { log "remote: CREATE EXTENSION failed"; return 1; }
    sql "CREATE SERVER bench_remote FOREIGN DATA WRAPPER streamguard_remote
             OPTIONS (host '$SOCK', port '$PORT2', dbname 'bench', application_name 'bench-remote');
         CREATE USER MAPPING FOR CURRENT_USER SERVER bench_remote OPTIONS (user '$PGUSER')" >/dev/null 2>>"$LOGS/remote.err" ||
        { log "remote: CREATE SERVER / USER MAPPING failed: $(tail -n1 "$LOGS/remote.err")"; return 1; }
    SERVER2_FAILED=""
    return 0
}

# rows / time of a pipeline-written table: every batch's rows carry the start of
# its transaction; (rows of all batches but the last) / (last start - first start)
# prints "<rows> <distinct (partition, seq)> <rate or empty>"
sink_stats() {  # <sql function: sql|sql2> <table>
    local out rows dist span early
    out=$("$1" "SELECT count(*), count(DISTINCT (partition, seq)), coalesce(extract(epoch FROM max(processed_at) - min(processed_at)), 0),
                       count(*) FILTER (WHERE processed_at < (SELECT max(processed_at) FROM $2)) FROM $2" | tr '|' ' ')
    read -r rows dist span early <<<"$out"
    if awk -v s="$span" 'BEGIN { exit !(s > 0) }'; then
        echo "$rows $dist $(awk -v e="$early" -v t="$span" 'BEGIN { printf "%.1f", e / t }')"
    else
        echo "$rows $dist"
    fi
}

# waits until <count SQL> (run by sql or sql2) reaches n; fails on timeout or
# when the pipeline fails
wait_count() {  # <sql|sql2> <count SQL> <n> <timeout s> <pipeline>
    local t0 c st
    t0=$(date +%s)
    while :; do
        c=$("$1" "$2" 2>/dev/null || echo 0)
        (( c >= $3 )) && return 0
        st=$(sql "SELECT state || ': ' || coalesce(last_error, '') FROM streamguard.pipelines WHERE pipeline = '$5'" 2>/dev/null || true)
        if [[ $st == failed* ]]; then echo "pipeline failed after $c of $3 rows: ${st#failed: }" | cut -c1-200; return 1; fi
        if (( $(date +%s) - t0 > $4 )); then echo "$c of $3 rows after $4 s (state ${st%%:*}${st#*: })" | cut -c1-200; return 1; fi
        sleep 0.2
    done
}

RS_ST=""; RS_RST=""; RS_SRC=""
rem_copy() {  # <contender> <remote table> <0: one COPY | 1: blocks of 1,000 rows>
    local k="$R1|$1" t=$2 t0 t1 rows ok=1
    checkpoint; checkpoint2
    t0=$(date +%s.%N)
    if [[ $3 == 0 ]]; then
        "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -c "COPY ($RS_SRC) TO STDOUT" |
            "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -p "$PORT2" -c "COPY $t (partition, seq, key, payload) FROM STDIN" \
            >>"$LOGS/remote_copy.log" 2>&1 || ok=0
    else
        "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -c "COPY ($RS_SRC) TO STDOUT" |
            awk -v t="$t" 'NR % 1000 == 1 { print "COPY " t " (partition, seq, key, payload) FROM STDIN;" }
                           { print } NR % 1000 == 0 { print "\\." } END { if (NR % 1000) print "\\." }' |
            "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -p "$PORT2" -f - >>"$LOGS/remote_copy.log" 2>&1 || ok=0
    fi
    t1=$(date +%s.%N)
    rows=$(sql2 "SELECT count(*) FROM $t" || echo "?")
    if [[ $ok != 1 || $rows != "$BENCH_REMOTE_EVENTS" ]]; then
        add_val "$k" ERR; add_note "$k" "COPY failed or incomplete: $rows rows ($(grep -m1 ERROR "$LOGS/remote_copy.log" | cut -c1-120))"
        return
    fi
    add_val "$k" "$(awk -v n="$rows" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }')"
}

rem_sink() {  # <contender> <guarantee> <sink_mode or ""> <remote table> <repeat>
    local k="$R1|$1" g=$2 mode=$3 t=$4 pn="rsink_${4}_r$5" extra="" msg out rows dist rate n=$BENCH_REMOTE_EVENTS
    [[ -n $mode ]] && extra=", sink_mode => '$mode'"
    checkpoint; checkpoint2
    if ! sql "SELECT streamguard.create_pipeline('$pn', '$RS_ST', 'SELECT partition, seq, key, payload FROM batch',
                guarantee => '$g', batch_size => 1000, sink_server => 'bench_remote', sink_table => 'public.$t'$extra)" \
            >/dev/null 2>>"$LOGS/remote.err"; then
        add_val "$k" ERR; add_note "$k" "create_pipeline failed: $(tail -n1 "$LOGS/remote.err" | cut -c1-160)"; return
    fi
    # local positions first, then (two_phase: COMMIT PREPARED; at_most_once: the
    # remote transaction comes after the positions) the remote rows
    if ! msg=$(wait_count sql "SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers
                               WHERE stream = '$RS_ST' AND consumer = 'pipeline:$pn'" "$n" "$BENCH_PIPELINE_TIMEOUT" "$pn") ||
       ! msg=$(wait_count sql2 "SELECT count(*) FROM $t" "$n" 60 "$pn"); then
        add_val "$k" ERR; add_note "$k" "$msg"; sqlq "SELECT streamguard.drop_pipeline('$pn')" || true; return
    fi
    sqlq "SELECT streamguard.drop_pipeline('$pn')" || true
    read -r rows dist rate <<<"$(sink_stats sql2 "$t")"
    if [[ $g == exactly_once && ( $rows != "$n" || $dist != "$n" ) ]] || [[ $dist != "$n" ]]; then
        add_val "$k" ERR; add_note "$k" "remote sink holds $rows rows ($dist distinct) of $n events"; return
    fi
    (( rows == n )) || add_note "$k" "$((rows - n)) duplicate rows"
    if [[ $mode == two_phase ]]; then
        out=$(sql2 "SELECT count(*) FROM pg_prepared_xacts" || echo "?")
        [[ $out == 0 ]] || add_note "$k" "$out prepared transactions left on the remote"
    fi
    if [[ -z $rate ]]; then add_val "$k" ERR; add_note "$k" "a single batch: cannot time it"; return; fi
    add_val "$k" "$rate"
}

rem_src() {  # <contender> <local|remote> <repeat>
    local k="$R2|$1" pn="rsrc_${2}_r$3" src extra="" msg rows dist rate n=$BENCH_REMOTE_EVENTS
    if [[ $2 == remote ]]; then src=$RS_RST; extra=", source_server => 'bench_remote'"; else src=$RS_ST; fi
    sql "TRUNCATE lsink" >/dev/null
    checkpoint; checkpoint2
    if ! sql "SELECT streamguard.create_pipeline('$pn', '$src',
                'INSERT INTO lsink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
                guarantee => 'exactly_once', batch_size => 1000$extra)" >/dev/null 2>>"$LOGS/remote.err"; then
        add_val "$k" ERR; add_note "$k" "create_pipeline failed: $(tail -n1 "$LOGS/remote.err" | cut -c1-160)"; return
    fi
    if ! msg=$(wait_count sql "SELECT count(*) FROM lsink" "$n" "$BENCH_PIPELINE_TIMEOUT" "$pn"); then
        add_val "$k" ERR; add_note "$k" "$msg"; sqlq "SELECT streamguard.drop_pipeline('$pn')" || true; return
    fi
    sqlq "SELECT streamguard.drop_pipeline('$pn')" || true
    read -r rows dist rate <<<"$(sink_stats sql lsink)"
    if [[ $rows != "$n" || $dist != "$n" ]]; then
        add_val "$k" ERR; add_note "$k" "local sink holds $rows rows ($dist distinct) of $n events"; return
    fi
    if [[ -z $rate ]]; then add_val "$k" ERR; add_note "$k" "a single batch: cannot time it"; return; fi
    add_val "$k" "$rate"
}

bench_remote() {
    local r=$1 n=$BENCH_REMOTE_EVENTS nb got c i j
    local all=("$R1|$S5_COPY" "$R1|$S5_COPYB" "$R1|$S5_2PC" "$R1|$S5_OFF" "$R1|$S5_ALO" "$R1|$S5_AMO" "$R2|$S6_LOCAL" "$R2|$S6_REM")
    if [[ $pipe_ok != 1 ]]; then
        for c in "${all[@]}"; do add_val "$c" PENDING; done; return 0
    fi
    if ! start_server2; then
        for c in "${all[@]}"; do add_val "$c" ERR; add_note "$c" "the remote server could not be set up (see remote.err)"; done; return 0
    fi
    RS_ST="rs_r$r"; RS_RST="rsrc_r$r"
    nb=$((n / 1000))
    # local stream, pre-filled 1,000 events per transaction
    if ! sg_create "$RS_ST" 4; then
        for c in "${all[@]}"; do add_val "$c" ERR; add_note "$c" "create_stream failed"; done; return 0
    fi
    batch_sg_script "$RS_ST" >"$SCR/prefill_remote.sql"
    local pf="-c 1 -j 1 -t $nb"
    (( nb % 2 == 0 )) && pf="-c 2 -j 2 -t $((nb / 2))"
    # shellcheck disable=SC2086
    if ! pgb "prefill_remote_r$r" $pf -f "$SCR/prefill_remote.sql" >/dev/null; then
        for c in "${all[@]}"; do add_val "$c" ERR; add_note "$c" "pre-fill failed"; done; sg_drop "$RS_ST"; return 0
    fi
    RS_SRC=$(sql "SELECT string_agg(format('SELECT partition, seq, key, payload FROM streamguard_data.%I', 's' || g.stream_id || '_' || g.seg),
                                     ' UNION ALL ' ORDER BY g.seg)
                  FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$RS_ST'")
    # the same events on the remote: staged by COPY, appended 1,000 per transaction
    # in (seq, partition) order, with their partitions, so seqs are the same too
    sql2 "DROP TABLE IF EXISTS rstage;
          CREATE TABLE rstage (rn bigserial PRIMARY KEY, partition int, seq bigint, key text, payload jsonb);
          SELECT streamguard.create_stream('$RS_RST', 4)" >/dev/null
    "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -c "COPY (SELECT * FROM ($RS_SRC) AS e ORDER BY seq, partition) TO STDOUT" |
        "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -p "$PORT2" -c "COPY rstage (partition, seq, key, payload) FROM STDIN" \
        >/dev/null 2>>"$LOGS/remote.err" || log "remote: staging the events failed: $(tail -n1 "$LOGS/remote.err")"
    sql2 "DO \$\$
          DECLARE b bigint;
          BEGIN
              FOR b IN 0 .. $((nb - 1)) LOOP
                  PERFORM count(*) FROM streamguard.append_batch('$RS_RST',
                      ARRAY(SELECT payload FROM rstage WHERE rn > b * 1000 AND rn <= (b + 1) * 1000 ORDER BY rn),
                      ARRAY(SELECT key FROM rstage WHERE rn > b * 1000 AND rn <= (b + 1) * 1000 ORDER BY rn),
                      partitions => ARRAY(SELECT partition FROM rstage WHERE rn > b * 1000 AND rn <= (b + 1) * 1000 ORDER BY rn));
                  COMMIT;
              END LOOP;
          END \$\$" >/dev/null 2>>"$LOGS/remote.err" || log "remote: filling $RS_RST failed: $(tail -n1 "$LOGS/remote.err")"
    sql2q "DROP TABLE rstage" || true
    got=$(sql2 "SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$RS_RST'" || echo "?")
    [[ $got == "$n" ]] || add_note "$R2|$S6_REM" "remote stream holds $got events, expected $n"
    got=$(sql "SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$RS_ST'" || echo "?")
    [[ $got == "$n" ]] || add_note "$R1|$S5_COPY" "local stream holds $got events, expected $n"
    for t in rsink_copy rsink_copyb rsink_2pc rsink_off rsink_alo rsink_amo; do
        sql2 "$(sink_ddl "$t")" >/dev/null
    done
    sql "$(sink_ddl lsink)" >/dev/null
    sql "VACUUM ANALYZE" >/dev/null; sql2 "VACUUM ANALYZE" >/dev/null

    local runs=("rem_copy '$S5_COPY' rsink_copy 0" "rem_copy '$S5_COPYB' rsink_copyb 1"
                "rem_sink '$S5_2PC' exactly_once two_phase rsink_2pc $r" "rem_sink '$S5_OFF' exactly_once offsets rsink_off $r"
                "rem_sink '$S5_ALO' at_least_once '' rsink_alo $r" "rem_sink '$S5_AMO' at_most_once '' rsink_amo $r"
                "rem_src '$S6_LOCAL' local $r" "rem_src '$S6_REM' remote $r")
    for j in $(seq 0 $(( ${#runs[@]} - 1 ))); do
        i=$(( (j + r - 1) % ${#runs[@]} ))
        eval "${runs[$i]}"
    done

    sg_drop "$RS_ST"
    sql2q "SELECT streamguard.drop_stream('$RS_RST', force => true)" || true
    sql2q "DROP TABLE IF EXISTS rsink_copy, rsink_copyb, rsink_2pc, rsink_off, rsink_alo, rsink_amo"
    sqlq "DROP TABLE IF EXISTS lsink"
    return 0
}

# ---------------------------------------------------------------------------
# 6. long run, SCALED DOWN (target: throughput after 10 M events within 10 %
#    of the start).  Once per suite run, not repeated: BENCH_LONG_CLIENTS
#    producers append BENCH_LONG_EVENTS events with append_batch (1,000 per
#    transaction, as in benchmark 2) to a stream with 4 partitions and
#    retention BENCH_LONG_RETENTION (segments rotate every retention / 4 and
#    are dropped by the maintenance worker), while an exactly_once pipeline
#    (batch_size 1000) copies every event into a sink table.  Autovacuum runs
#    with its defaults.  A sampler records every second: events appended and
#    consumed, segments, their size (pg_total_relation_size), the pipeline's
#    lost_events, the size of streamguard's catalog tables.
#    Throughput in the first vs the last 10 % of the producers' run (the time
#    during which all producers ran: from the first transaction's start to the
#    earliest last commit of a client): producer events/s from pgbench's
#    per-transaction log; pipeline events/s = sink rows whose batch started
#    in the window / window length.
# ---------------------------------------------------------------------------
declare -A LONG
bench_long() {
    local n=$BENCH_LONG_EVENTS cl=$BENCH_LONG_CLIENTS st=long_s pn=long_p per i wp samp_pid rc=0 msg
    local t_start t_end t_all w a1 b1 a2 b2 out log0
    per=$((n / 1000 / cl))
    if [[ $pipe_ok != 1 ]]; then LONG[status]=pending; return 0; fi
    local ret="'$BENCH_LONG_RETENTION'"
    [[ $BENCH_LONG_RETENTION == none ]] && ret=NULL
    if ! sql "SELECT streamguard.create_stream('$st', 4, retention => $ret)" >/dev/null 2>>"$LOGS/long.err"; then
        LONG[status]="error: create_stream failed: $(tail -n1 "$LOGS/long.err")"; return 0
    fi
    LONG[segment_interval]=$(sql "SELECT coalesce(segment_interval::text, 'none') FROM streamguard.stream WHERE name = '$st'")
    sql "$(sink_ddl sink_long)" >/dev/null
    if ! sql "SELECT streamguard.create_pipeline('$pn', '$st',
                'INSERT INTO sink_long (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
                guarantee => 'exactly_once', batch_size => 1000)" >/dev/null 2>>"$LOGS/long.err"; then
        LONG[status]="error: create_pipeline failed: $(tail -n1 "$LOGS/long.err")"; sg_drop "$st"; return 0
    fi
    wp=""
    for i in $(seq 1 300); do
        wp=$(sql "SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = '$pn' AND state = 'running'")
        [[ -n $wp ]] && break
        sleep 0.1
    done
    [[ -n $wp ]] || { LONG[status]="error: the pipeline's worker did not start"; sg_drop "$st"; return 0; }
    batch_sg_script "$st" >"$SCR/long_sg.sql"
    local seg_from="streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$st'"
    cat >"$SCR/long_sample.sql" <<SQL
SELECT extract(epoch FROM clock_timestamp()),
       (SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$st'),
       (SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = '$st' AND consumer = 'pipeline:$pn'),
       (SELECT coalesce(retained_events, 0) FROM streamguard.streams WHERE stream = '$st'),
       (SELECT count(*) FROM $seg_from),
       (SELECT coalesce(sum(pg_total_relation_size(to_regclass(format('streamguard_data.%I', 's' || g.stream_id || '_' || g.seg)))), 0) FROM $seg_from),
       (SELECT coalesce(sum(lost_events), 0) FROM streamguard.consumers WHERE stream = '$st' AND consumer = 'pipeline:$pn'),
       (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
         WHERE ns.nspname = 'streamguard' AND c.relkind = 'r'),
       pg_total_relation_size('sink_long'),
       (SELECT coalesce(max(fetch_ms), 0) FROM streamguard.pipeline_batches WHERE pipeline = '$pn'),
       (SELECT coalesce(max(process_ms + commit_ms), 0) FROM streamguard.pipeline_batches WHERE pipeline = '$pn'),
       (SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database());
SQL
    rm -f "$WORK/long.stop"
    : >"$LOGS/long_samples.txt"
    ( while [[ ! -f $WORK/long.stop ]]; do
          "$BIN/psql" -X -q -At -F ' ' -f "$SCR/long_sample.sql" >>"$LOGS/long_samples.txt" 2>>"$LOGS/long_sampler.err" || true
          sleep 1
      done ) &
    samp_pid=$!; BG_PIDS+=("$samp_pid")
    checkpoint
    log0=$(wc -l <"$LOGS/server.log")
    log "long run: $cl producers x $per transactions of 1,000 events"
    if ! pgb long_producers -c "$cl" -j "$cl" -t "$per" -f "$SCR/long_sg.sql" -l --log-prefix="$LOGS/long_tx" >/dev/null; then
        LONG[status]="error: producers failed"; rc=1
    fi
    LONG[t_producers_done]=$(date +%s.%N)
    if [[ $rc == 0 ]] && ! msg=$(wait_count sql "SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers
                                               WHERE stream = '$st' AND consumer = 'pipeline:$pn'" "$n" "$BENCH_PIPELINE_TIMEOUT" "$pn"); then
        LONG[status]="error: $msg"; rc=1
    fi
    LONG[t_drained]=$(date +%s.%N)
    sleep 1.5   # one more sample after the drain
    touch "$WORK/long.stop"
    wait "$samp_pid" 2>/dev/null || true
    bg_forget "$samp_pid"
    LONG[batches]=$(sql "SELECT batches FROM streamguard.pipelines WHERE pipeline = '$pn'")
    sqlq "SELECT streamguard.drop_pipeline('$pn')" || true
    [[ $rc == 0 ]] || { sg_drop "$st"; sqlq "DROP TABLE sink_long"; return 0; }

    # producer windows from pgbench's per-transaction log
    # (client, txn no, latency us, script, epoch s, epoch us)
    out=$(cat "$LOGS"/long_tx.* | awk '
        { e = $5 + $6 / 1e6; s = e - $3 / 1e6; if (NR == 1 || s < t0) t0 = s
          if (!($1 in last) || e > last[$1]) last[$1] = e; if (e > tall) tall = e; end[NR] = e }
        END { first = 1; for (c in last) { if (first || last[c] < t1) t1 = last[c]; first = 0 }
              w = (t1 - t0) / 10; n1 = 0; n2 = 0
              for (i = 1; i <= NR; i++) { if (end[i] >= t0 && end[i] < t0 + w) n1++; if (end[i] > t1 - w && end[i] <= t1) n2++ }
              printf "%.6f %.6f %.6f %.6f %d %d %d\n", t0, t1, tall, w, n1, n2, NR }')
    read -r t_start t_end t_all w a1 a2 i <<<"$out"
    LONG[txns]=$i
    LONG[prod_first]=$(awk -v n="$a1" -v w="$w" 'BEGIN { printf "%.0f", n * 1000 / w }')
    LONG[prod_last]=$(awk -v n="$a2" -v w="$w" 'BEGIN { printf "%.0f", n * 1000 / w }')
    LONG[prod_all]=$(awk -v n="$BENCH_LONG_EVENTS" -v a="$t_start" -v b="$t_all" 'BEGIN { printf "%.0f", n / (b - a) }')
    LONG[run_s]=$(awk -v a="$t_start" -v b="$t_all" 'BEGIN { printf "%.1f", b - a }')
    LONG[window_s]=$(awk -v w="$w" 'BEGIN { printf "%.1f", w }')
    out=$(sql "SELECT count(*) FILTER (WHERE processed_at >= to_timestamp($t_start) AND processed_at < to_timestamp($t_start + $w)),
                      count(*) FILTER (WHERE processed_at > to_timestamp($t_end - $w) AND processed_at <= to_timestamp($t_end)),
                      count(*), count(DISTINCT (partition, seq)),
                      extract(epoch FROM max(processed_at)) - $t_all
               FROM sink_long" | tr '|' ' ')
    read -r b1 b2 i a1 a2 <<<"$out"
    LONG[pipe_first]=$(awk -v n="$b1" -v w="$w" 'BEGIN { printf "%.0f", n / w }')
    LONG[pipe_last]=$(awk -v n="$b2" -v w="$w" 'BEGIN { printf "%.0f", n / w }')
    LONG[sink_rows]=$i; LONG[sink_distinct]=$a1
    LONG[tail_s]=$(awk -v t="$a2" 'BEGIN { printf "%.2f", t }')
    # storage at 10 %, 50 % of the run, at the end of the producers, after the drain, and the maximum
    # sample: epoch appended consumed retained segments seg_bytes lost catalog_bytes sink_bytes
    for i in 10 50 100; do
        LONG[at$i]=$(awk -v t="$(awk -v a="$t_start" -v b="$t_all" -v p="$i" 'BEGIN { printf "%.3f", a + (b - a) * p / 100 }')" '
            { d = $1 - t; if (d < 0) d = -d; if (NR == 1 || d < best) { best = d; line = $0 } } END { print line }' "$LOGS/long_samples.txt")
    done
    LONG[atdrain]=$(tail -n1 "$LOGS/long_samples.txt")
    LONG[atmax]=$(sort -k6,6g "$LOGS/long_samples.txt" | tail -n1)
    LONG[samples]=$(wc -l <"$LOGS/long_samples.txt")
    LONG[fetch_max]=$(awk '{ print $10 }' "$LOGS/long_samples.txt" | sort -g | tail -n1 | awk '{ printf "%.0f", $1 }')
    LONG[fetch_med]=$(awk '{ print $10 }' "$LOGS/long_samples.txt" | medianf)
    LONG[proc_max]=$(awk '{ print $11 }' "$LOGS/long_samples.txt" | sort -g | tail -n1 | awk '{ printf "%.0f", $1 }')
    LONG[checkpoints]=$(tail -n +"$((log0 + 1))" "$LOGS/server.log" | grep -c 'checkpoint starting: ' || true)
    LONG[t_start]=$t_start
    LONG[status]=ok
    sg_drop "$st"
    sqlq "DROP TABLE sink_long"
    return 0
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
            single|batch|drain|latency|remote) log "repeat $r/$BENCH_REPEAT: $b"; "bench_$b" "$r" ;;
            long) ;;   # once, after the repeats
            *) die "unknown benchmark in BENCH_ONLY: $b" ;;
        esac
    done
done
for b in $BENCH_ONLY; do
    if [[ $b == long ]]; then log "long run (once, scaled down): $BENCH_LONG_EVENTS events"; bench_long; fi
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


# --- latency and long-run reports ------------------------------------------
lat_field() {  # <contender> <field> <median|max|sum>
    local v=${LAT["$1|$2"]:-}
    case $3 in
        median) tr ' ' '\n' <<<"$v" | medianf || true ;;
        max) tr ' ' '\n' <<<"$v" | grep -E '^[0-9.]+$' | sort -g | tail -n1 | awk '{ printf "%.2f", $1 }' || true ;;
        sum) tr ' ' '\n' <<<"$v" | grep -E '^-?[0-9]+$' | awk '{ s += $1 } END { if (NR) printf "%d", s }' || true ;;
    esac
}
lat_ratio() {  # <contender> <base contender>: median over repeats of p50 / base p50
    paste -d' ' <(tr ' ' '\n' <<<"${LAT["$1|p50"]:-}" | sed '/^$/d') <(tr ' ' '\n' <<<"${LAT["$2|p50"]:-}" | sed '/^$/d') |
        awk '$1 ~ /^[0-9.]+$/ && $2 ~ /^[0-9.]+$/ && $2 > 0 { print $1 / $2 }' | sort -g |
        awk '{a[NR]=$1} END { if (NR==0) exit; if (NR%2) v = a[(NR+1)/2]; else v = (a[NR/2]+a[NR/2+1])/2; printf (v < 0.1 ? "%.4f" : "%.2f"), v }'
}
latency_report() {
    local c p50 p99 mx app del lost dup rpg rnv tgt met vals
    echo
    echo "## End-to-end latency, append commit → sink commit"
    echo
    echo "$BENCH_LAT_CLIENTS producer clients offer $BENCH_LAT_RATE events/s (pgbench -R, one event per transaction) for $BENCH_LAT_SECONDS s per contender and repeat; latency = pg_xact_commit_timestamp(sink row xmin) - pg_xact_commit_timestamp(event row xmin). p50 and p99 are medians over the repeats, max the maximum, counts summed over the repeats. PgQ: pgqd with default settings; the PgQ and naive consumers sleep $BENCH_LAT_POLL_MS ms when idle."
    echo
    echo "| contender | p50 ms | p99 ms | max ms | events appended | delivered | lost | duplicates | p50 ÷ PgQ p50 | p50 ÷ naive p50 | target | met? |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
    for c in "$S4_SG" "$S4_PGQ" "$S4_RAW"; do
        vals=${LAT["$c|p50"]:-}
        p50=$(lat_field "$c" p50 median); p99=$(lat_field "$c" p99 median); mx=$(lat_field "$c" max max)
        app=$(lat_field "$c" appended sum); del=$(lat_field "$c" delivered sum)
        lost=$(lat_field "$c" lost sum); dup=$(lat_field "$c" dup sum)
        rpg=$(lat_ratio "$c" "$S4_PGQ"); rnv=$(lat_ratio "$c" "$S4_RAW")
        tgt="reference"; met="—"
        if [[ $c == "$S4_SG" ]]; then
            tgt="p50 ≤ 2 ms, p99 ≤ 20 ms, nothing lost"
            if [[ -z $p50 ]]; then
                if [[ $vals == *PENDING* ]]; then met=pending; else met="no (failed)"; fi
            else
                met=$(awk -v a="$p50" -v b="$p99" -v l="${lost:-1}" -v d="${dup:-1}" -v e="$vals" \
                    'BEGIN { print (a <= 2 && b <= 20 && l == 0 && d == 0 && e !~ /ERR/) ? "yes" : "**no**" }')
            fi
        fi
        if [[ -z $p50 ]]; then
            if [[ $vals == *PENDING* ]]; then p50=pending; elif [[ -n $vals ]]; then p50=error; else p50="not run"; fi
        fi
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$p50" "${p99:-—}" "${mx:-—}" \
            "$(fmt "${app:-}" || true)" "$(fmt "${del:-}" || true)" "${lost:-—}" "${dup:-—}" "${rpg:-—}" "${rnv:-—}" "$tgt" "$met"
    done
    echo
    echo "Per repeat:"
    echo
    echo "| contender | p50 ms | p99 ms | max ms | appended | lost | offered rate ev/s | pipeline batches / PgQ ticks | notes |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for c in "$S4_SG" "$S4_PGQ" "$S4_RAW"; do
        printf '| %s |%s |%s |%s |%s |%s |%s |%s | %s |\n' "$c" "${LAT["$c|p50"]:-}" "${LAT["$c|p99"]:-}" "${LAT["$c|max"]:-}" \
            "${LAT["$c|appended"]:-}" "${LAT["$c|lost"]:-}" "${LAT["$c|rate"]:-}" "${LAT["$c|batches"]:-}" "${LAT_NOTE[$c]:-}"
    done
}
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
long_report() {
    local ratio_p ratio_q met_p met_q p s
    echo
    echo "## Long run — SCALED DOWN: $(fmt "$BENCH_LONG_EVENTS") events (the target is stated for 10 M events, over a production lifetime) in about ${LONG[run_s]:-?} s with retention '$BENCH_LONG_RETENTION', once"
    echo
    if [[ ${LONG[status]:-not run} != ok ]]; then echo "long run: ${LONG[status]:-not run}"; return; fi
    echo "$BENCH_LONG_CLIENTS producers (append_batch, 1,000 events per transaction) and an exactly_once pipeline (batch_size 1000, INSERT into a sink) run concurrently on a stream with 4 partitions, retention '$BENCH_LONG_RETENTION' (segment_interval ${LONG[segment_interval]}). Producers ran ${LONG[run_s]} s (${LONG[txns]} transactions); windows of ${LONG[window_s]} s = 10 % of the time all producers ran. Pipeline: ${LONG[batches]} batches; it finished ${LONG[tail_s]} s after the last append (start of its last batch); sink rows ${LONG[sink_rows]} (${LONG[sink_distinct]} distinct) of $BENCH_LONG_EVENTS."
    echo
    ratio_p=$(awk -v a="${LONG[prod_first]}" -v b="${LONG[prod_last]}" 'BEGIN { if (a > 0) printf "%.2f", b / a }')
    ratio_q=$(awk -v a="${LONG[pipe_first]}" -v b="${LONG[pipe_last]}" 'BEGIN { if (a > 0) printf "%.2f", b / a }')
    met_p=$(awk -v r="$ratio_p" 'BEGIN { print (r + 0 >= 0.9) ? "yes" : "**no**" }')
    met_q=$(awk -v r="$ratio_q" 'BEGIN { print (r + 0 >= 0.9) ? "yes" : "**no**" }')
    echo "| throughput | first 10 % (events/s) | last 10 % (events/s) | last ÷ first | target (scaled) | met? |"
    echo "|---|---:|---:|---:|---|---|"
    echo "| producers, append_batch | $(fmt "${LONG[prod_first]}") | $(fmt "${LONG[prod_last]}") | $ratio_p | ≥ 0.90 | $met_p |"
    echo "| pipeline, exactly_once | $(fmt "${LONG[pipe_first]}") | $(fmt "${LONG[pipe_last]}") | $ratio_q | ≥ 0.90 | $met_q |"
    echo
    echo "Producers over the whole run: $(fmt "${LONG[prod_all]}") events/s."
    if [[ ${LONG[sink_rows]} != "$BENCH_LONG_EVENTS" || ${LONG[sink_distinct]} != "$BENCH_LONG_EVENTS" ]]; then
        echo
        echo "**check failed**: the sink holds ${LONG[sink_rows]} rows (${LONG[sink_distinct]} distinct) of $BENCH_LONG_EVENTS events."
    fi
    echo
    echo "| point | t (s) | events appended | consumed by the pipeline | retained events | segments | segments' size (MB) | lost to retention | streamguard catalog (MB) | sink (MB) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for p in at10:"10 % of the run" at50:"50 % of the run" at100:"end of the producers" atdrain:"pipeline drained" atmax:"largest segments' size"; do
        s=${LONG[${p%%:*}]:-}
        [[ -n $s ]] || continue
        # epoch appended consumed retained segments seg_bytes lost catalog_bytes sink_bytes
        read -r e a c rt sg sb l cb kb <<<"$s"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "${p#*:}" \
            "$(awk -v e="$e" -v t="${LONG[t_start]}" 'BEGIN { printf "%.1f", e - t }')" "$(fmt "$a")" "$(fmt "$c")" "$(fmt "$rt")" \
            "$sg" "$(mb "$sb")" "$l" "$(mb "$cb")" "$(mb "$kb")"
    done
    echo
    echo "(${LONG[samples]} samples, one per second; t from the start of the producers.) Pipeline batches: the longest fetch seen in the checkpoint log (last 64 batches, sampled every second) was ${LONG[fetch_max]} ms, the median of those per-second maxima ${LONG[fetch_med]} ms; the longest SQL + commit ${LONG[proc_max]} ms. Checkpoints started during the run: ${LONG[checkpoints]}."
}

{
    echo "# streamguard benchmark results"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); revision: ${BENCH_REV:-unknown}"
    echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}"), PostgreSQL $SERVER_VERSION"
    echo "- settings: shared_buffers=$BENCH_SHARED_BUFFERS, synchronous_commit=on, max_wal_size=4GB, checkpoint_timeout=15min, fsync on"
    echo "- BENCH_SECONDS=$BENCH_SECONDS BENCH_REPEAT=$BENCH_REPEAT BENCH_SLICES=$BENCH_SLICES BENCH_CLIENTS=$BENCH_CLIENTS BENCH_BATCH_CLIENTS=$BENCH_BATCH_CLIENTS BENCH_DRAIN_EVENTS=$BENCH_DRAIN_EVENTS BENCH_DRAIN_PASSES=$BENCH_DRAIN_PASSES BENCH_LAT_SECONDS=$BENCH_LAT_SECONDS BENCH_LAT_RATE=$BENCH_LAT_RATE BENCH_LAT_CLIENTS=$BENCH_LAT_CLIENTS BENCH_LAT_POLL_MS=$BENCH_LAT_POLL_MS BENCH_REMOTE_EVENTS=$BENCH_REMOTE_EVENTS BENCH_LONG_EVENTS=$BENCH_LONG_EVENTS BENCH_LONG_CLIENTS=$BENCH_LONG_CLIENTS BENCH_LONG_RETENTION=\"$BENCH_LONG_RETENTION\" BENCH_ONLY=\"$BENCH_ONLY\"; wall time $(( (T1 - T0) / 60 ))m$(( (T1 - T0) % 60 ))s"
    echo "- load average (1/5/15 min) at start: $LOAD0; at end: $LOAD1 (the suite itself keeps ~2 cores busy; a start value well above 0 means other work shared the machine)${BENCH_NICE:+; suite run at nice $BENCH_NICE}"
    [[ $sg_ok == 1 ]] || echo "- streamguard: not available in this run (rows marked pending)"
    echo
    if [[ " $BENCH_ONLY " =~ \ (single|batch|drain|remote)\  ]]; then
        echo "events/s are medians over the repeats; a ratio is the median over the repeats of contender / raw PostgreSQL baseline of the same benchmark and repeat (all measured in this run)."
        echo
        echo "| benchmark | contender | events/s (median) | ratio vs raw baseline | target | met? |"
        echo "|---|---|---:|---:|---|---|"
    fi
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
            remote)
                row "$R1" "$S5_COPY" "$S5_COPY" "" "baseline"
                row "$R1" "$S5_COPYB" "$S5_COPY" "" "reference"
                row "$R1" "$S5_2PC" "$S5_COPY" "" "no target"
                row "$R1" "$S5_OFF" "$S5_COPY" "" "no target"
                row "$R1" "$S5_ALO" "$S5_COPY" "" "no target"
                row "$R1" "$S5_AMO" "$S5_COPY" "" "no target"
                row "$R2" "$S6_LOCAL" "$S6_LOCAL" "" "baseline"
                row "$R2" "$S6_REM" "$S6_LOCAL" "" "no target"
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
    [[ " $BENCH_ONLY " == *" latency "* ]] && latency_report
    [[ " $BENCH_ONLY " == *" long "* ]] && long_report
    if [[ ${VALS[*]+set} == set ]]; then
        echo
        echo "## Per-repeat values (events/s)"
        echo
        echo "| benchmark | contender | values | notes |"
        echo "|---|---|---|---|"
    fi
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
