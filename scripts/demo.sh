#!/usr/bin/env bash
# streamguard demo: installs what is missing, builds and installs the extension,
# starts a throwaway PostgreSQL server with streamguard preloaded (unix socket in
# its own /tmp directory + 127.0.0.1, never the default cluster) and shows
# streams at work: transactional producers (some rolling back, one holding a
# transaction open), an exactly-once SQL consumer, the progress views, dedup,
# and a check that every committed event was consumed exactly once. Then
# pipelines: two exactly_once pipelines (per-customer totals, and one row per
# event in a table without a unique constraint) run while producers append
# 50,000 events with append_batch under a progress bar; mid-way the demo
# kill -9s one pipeline worker (the server restarts and recovers, producers
# retry their batch idempotently, the workers resume), and at the end it
# verifies the output against the committed orders: nothing lost, 0 duplicates.
# Exits non-zero if a check fails.
#
# Run as root on Debian 12 (or as a user with everything installed already).
# Environment: SG_DEMO_PORT (first port to try, default 5499).
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

PORT_FIRST=${SG_DEMO_PORT:-5499}
PRODUCERS=3
TXNS_PER_PRODUCER=30     # every 5th transaction rolls back
SLOW_SECONDS=6           # how long the slow producer keeps its transaction open

if [ -t 1 ]; then BOLD=$'\033[1m' NORM=$'\033[0m'; else BOLD="" NORM=""; fi
step() { printf '\n%s=== %s%s\n' "$BOLD" "$*" "$NORM"; }
say()  { printf '    %s\n' "$*"; }

# ------------------------------------------------------------- build ----
step "1. Install dependencies, build and install streamguard"
bash "$SG_ROOT/scripts/build.sh" --demo
SERVER_USER=$(sg_server_user)

# ------------------------------------------------ throwaway server ----
step "2. Start a throwaway PostgreSQL ${PG_MAJOR} server with shared_preload_libraries='streamguard'"

# Remove directories of earlier demos, but only those whose server is down.
shopt -s nullglob
for old in /tmp/streamguard-demo-*; do
    [ -f "$old/.streamguard-demo" ] || continue
    if [ -f "$old/data/postmaster.pid" ] &&
       sg_as_server_user pg_ctl -D "$old/data" status >/dev/null 2>&1; then
        say "an earlier demo server is still running in $old (left alone)"
    else
        rm -rf "$old" && say "removed the stopped earlier demo $old"
    fi
done
shopt -u nullglob

port_in_use() {   # something accepts TCP connections on 127.0.0.1:$1
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}
PORT=""
for ((p = PORT_FIRST; p < PORT_FIRST + 20; p++)); do
    if port_in_use "$p"; then say "port $p is in use, trying the next one"; else PORT=$p; break; fi
done
[ -n "$PORT" ] || sg_die "no free TCP port in ${PORT_FIRST}..$((PORT_FIRST + 19)) on 127.0.0.1"

DIR=$(mktemp -d /tmp/streamguard-demo-XXXXXX)
touch "$DIR/.streamguard-demo"
chmod 755 "$DIR"
PGDATA_DIR="$DIR/data"
PASSWORD="demo-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$PASSWORD" >"$DIR/.pwfile"
chmod 600 "$DIR/.pwfile"
[ "$SERVER_USER" = postgres ] && sg_is_root && chown -R postgres:postgres "$DIR"

SERVER_STARTED=0
BG_PIDS=()
KEEP_RUNNING=0
on_exit() {
    local rc=$?
    for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ "$rc" -ne 0 ]; then
        echo
        echo "demo FAILED (exit $rc). Logs are in $DIR" >&2
        if [ -f "$DIR/server.log" ]; then
            echo "----- last 60 lines of $DIR/server.log -----" >&2
            tail -n 60 "$DIR/server.log" >&2
        fi
        if [ "$SERVER_STARTED" = 1 ] && [ "$KEEP_RUNNING" = 0 ]; then
            sg_as_server_user pg_ctl -D "$PGDATA_DIR" -m fast -w -t 30 stop >/dev/null 2>&1 || true
            echo "the demo server was stopped" >&2
        fi
    fi
    exit "$rc"
}
trap on_exit EXIT

say "data directory : $PGDATA_DIR (owned by OS user $SERVER_USER)"
say "listening on   : unix socket in $DIR and 127.0.0.1:$PORT"
sg_as_server_user initdb -D "$PGDATA_DIR" -U postgres --pwfile="$DIR/.pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync \
    >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log"; sg_die "initdb failed"; }
rm -f "$DIR/.pwfile"
cat >>"$PGDATA_DIR/postgresql.conf" <<EOF

# --- streamguard demo ---
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
unix_socket_permissions = 0770
shared_preload_libraries = 'streamguard'
streamguard.maintenance_naptime = '1s'
max_connections = 40
# room for the pipelines of README.md and docs/*.md too, tried on this server
# (streamguard takes at most three quarters of the slots: 24 of 32)
max_worker_processes = 32
log_line_prefix = '%m [%p] %q%a '
EOF
sg_as_server_user pg_ctl -D "$PGDATA_DIR" -l "$DIR/server.log" -w -t 30 start >/dev/null ||
    sg_die "the demo server did not start"
SERVER_STARTED=1
say "server started (pid $(head -n1 "$PGDATA_DIR/postmaster.pid"))"

export PGCONNECT_TIMEOUT=10
PSQL=("$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -P pager=off -h "$DIR" -p "$PORT" -U postgres)
"${PSQL[@]}" -d postgres -c 'CREATE DATABASE demo' >/dev/null
sql()      { "${PSQL[@]}" -d demo "$@"; }               # tables
sql_echo() { "${PSQL[@]}" -d demo -e "$@"; }            # echo the SQL, then tables
sql_val()  { "${PSQL[@]}" -d demo -At "$@"; }           # bare values

# Wait (bounded) for a background pid; returns its exit status.
wait_bounded() {   # wait_bounded PID SECONDS WHAT
    local pid=$1 limit=$2 what=$3 i
    for ((i = 0; i < limit * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid"; return $?; }
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    sg_die "$what did not finish within ${limit}s"
}

# ------------------------------------------------------ extension ----
step "3. Create the extension, a stream 'orders' with 4 partitions, and two ordinary tables"
say "shop_orders  : the business table producers write to (outbox pattern: row + event in one transaction)"
say "billing_seen : what the consumer 'billing' received, written in the same transaction as its poll"
sql_echo <<'SQL'
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('orders', partitions => 4);
CREATE TABLE shop_orders (order_id int PRIMARY KEY, customer text NOT NULL, amount numeric NOT NULL);
CREATE TABLE billing_seen (id bigserial PRIMARY KEY, order_id int NOT NULL,
                           partition int NOT NULL, seq bigint NOT NULL);
SQL
sql -c 'SELECT stream, owner, partitions, retention, dedup_window, readable_horizon FROM streamguard.streams'

# The consumer: one poll and the write of what it got commit together (exactly once).
POLLS=0
CONSUMED_TOTAL=0
poll_once() {   # poll_once [MAX] -> prints one line, sets LAST_POLLED
    local max=${1:-25} out n ranges
    out=$(sql_val <<SQL
BEGIN;
WITH polled AS (SELECT * FROM streamguard.poll('orders', 'billing', $max)),
     ins AS (INSERT INTO billing_seen (order_id, partition, seq)
             SELECT (payload->>'order_id')::int, partition, seq FROM polled
             RETURNING partition, seq),
     per_part AS (SELECT partition, count(*) AS n, min(seq) AS lo, max(seq) AS hi
                  FROM ins GROUP BY partition)
SELECT coalesce(sum(n), 0) || '|' ||
       coalesce(string_agg(format('p%s: seq %s..%s', partition, lo, hi), ', ' ORDER BY partition), '')
FROM per_part;
COMMIT;
SQL
)
    n=${out%%|*}; ranges=${out#*|}
    POLLS=$((POLLS + 1)); CONSUMED_TOTAL=$((CONSUMED_TOTAL + n)); LAST_POLLED=$n
    printf '    consumer billing, poll #%-3s got %3s events%s\n' "$POLLS" "$n" "${ranges:+  ($ranges)}"
}

# ------------------------------------------------------ producers ----
step "4. $PRODUCERS producers append concurrently, one order per transaction; every 5th transaction rolls back"
ROLLED_BACK_IDS=()
COMMITTED_EXPECTED=0
for ((p = 1; p <= PRODUCERS; p++)); do
    f="$DIR/producer-$p.sql"
    : >"$f"
    for ((i = 1; i <= TXNS_PER_PRODUCER; i++)); do
        id=$((p * 1000 + i)); cust="customer-$(( (id * 7) % 11 ))"; amount="$((i * 3 + p)).50"
        if ((i % 5 == 0)); then end=ROLLBACK; ROLLED_BACK_IDS+=("$id")
        else end=COMMIT; COMMITTED_EXPECTED=$((COMMITTED_EXPECTED + 1)); fi
        cat >>"$f" <<SQL
BEGIN;
INSERT INTO shop_orders VALUES ($id, '$cust', $amount);
SELECT format('producer $p: order $id -> partition %s, seq %s, then $end', partition, seq)
FROM streamguard.append('orders', jsonb_build_object('order_id', $id, 'customer', '$cust', 'amount', $amount),
                        key => '$cust');
$end;
SELECT pg_sleep(0.02);
SQL
    done
    PGAPPNAME="sg-demo-producer-$p" "${PSQL[@]}" -d demo -At -f "$f" >"$DIR/producer-$p.log" 2>&1 &
    BG_PIDS+=($!)
done
say "producers started (pids ${BG_PIDS[*]}); the consumer polls meanwhile:"
for ((k = 0; k < 40; k++)); do
    running=0
    for pid in "${BG_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    poll_once 25
    [ "$running" = 0 ] && break
    sleep 0.3
done
for pid in "${BG_PIDS[@]}"; do
    wait_bounded "$pid" 30 "producer (pid $pid)" || {
        cat "$DIR"/producer-*.log; sg_die "a producer failed"; }
done
BG_PIDS=()
say "producers done. A few lines of producer 1's output ($DIR/producer-1.log):"
grep -v '^$' "$DIR/producer-1.log" | sed -n '1,6p' | sed 's/^/      /'
say "committed transactions: $COMMITTED_EXPECTED, rolled back: ${#ROLLED_BACK_IDS[@]} (their seqs are gaps, never delivered)"
sql -c "SELECT * FROM streamguard.stream_partitions WHERE stream = 'orders' ORDER BY partition"
sql -c "SELECT * FROM streamguard.consumers WHERE stream = 'orders' ORDER BY consumer, partition"

# ------------------------------------------------- readable horizon ----
step "5. The readable horizon: a transaction left open holds back what consumers may read"
say "a slow producer appends order 9000 to partition 0 and keeps its transaction open for ${SLOW_SECONDS}s"
PGAPPNAME=sg-demo-slow-producer "${PSQL[@]}" -d demo -At >"$DIR/slow-producer.log" 2>&1 <<SQL &
BEGIN;
INSERT INTO shop_orders VALUES (9000, 'customer-slow', 90.00);
SELECT format('slow producer: order 9000 -> partition %s, seq %s (transaction still open)', partition, seq)
FROM streamguard.append('orders', '{"order_id": 9000, "customer": "customer-slow", "amount": 90.00}',
                        key => 'customer-slow', partition => 0);
SELECT pg_sleep($SLOW_SECONDS);
COMMIT;
SQL
SLOW_PID=$!
BG_PIDS+=("$SLOW_PID")
COMMITTED_EXPECTED=$((COMMITTED_EXPECTED + 1))
for ((k = 0; k < 50; k++)); do   # until it sleeps with its append done (<= 5 s)
    [ "$(sql_val -c "SELECT count(*) FROM pg_stat_activity
                      WHERE application_name = 'sg-demo-slow-producer' AND query LIKE '%pg_sleep%'")" = 1 ] && break
    kill -0 "$SLOW_PID" 2>/dev/null || break
    sleep 0.1
done
say "meanwhile a fast producer appends orders 9001..9005 to partition 0 and commits each:"
for id in 9001 9002 9003 9004 9005; do
    sql_val <<SQL | sed 's/^/      /'
BEGIN;
INSERT INTO shop_orders VALUES ($id, 'customer-fast', 10.00);
SELECT format('fast producer: order $id -> partition %s, seq %s, COMMIT', partition, seq)
FROM streamguard.append('orders', '{"order_id": $id, "customer": "customer-fast", "amount": 10.00}',
                        key => 'customer-fast', partition => 0);
COMMIT;
SQL
    COMMITTED_EXPECTED=$((COMMITTED_EXPECTED + 1))
done
say "partition 0: next_seq is past the fast orders, but the readable horizon stops at the open append:"
sql -c "SELECT * FROM streamguard.stream_partitions WHERE stream = 'orders' AND partition = 0"
say "so the consumer gets nothing from partition 0 yet (the committed fast orders wait behind the open one):"
poll_once 100
sql -c "SELECT stream, consumer, partition, committed_seq, readable_horizon, lag_events
        FROM streamguard.consumers WHERE consumer = 'billing' AND partition = 0"
say "waiting for the slow producer to commit ..."
wait_bounded "$SLOW_PID" $((SLOW_SECONDS + 20)) "the slow producer" || {
    cat "$DIR/slow-producer.log"; sg_die "the slow producer failed"; }
BG_PIDS=()
sed 's/^/      /' "$DIR/slow-producer.log" | grep -v '^ *$' || true
say "committed: the horizon moves past it, and the consumer receives order 9000 and the fast orders, in seq order:"
poll_once 100
sql -c "SELECT partition, seq, order_id FROM billing_seen
        WHERE partition = 0 AND order_id >= 9000 ORDER BY id"

# ----------------------------------------------------- redelivery ----
step "6. poll() advances positions inside the caller's transaction: ROLLBACK redelivers"
say "a second consumer 'audit' polls everything, rolls back, then polls again and commits:"
sql <<'SQL'
BEGIN;
SELECT count(*) AS n1, md5(string_agg(partition || ':' || seq, ',' ORDER BY partition, seq)) AS h1
FROM streamguard.poll('orders', 'audit', 1000) \gset
ROLLBACK;
BEGIN;
SELECT count(*) AS n2, md5(string_agg(partition || ':' || seq, ',' ORDER BY partition, seq)) AS h2
FROM streamguard.poll('orders', 'audit', 1000) \gset
COMMIT;
SELECT :'h1' = :'h2' AS same_events,
       format('    first poll (rolled back): %s events; second poll (committed): %s events; same (partition, seq) set: %s',
              :n1, :n2, CASE WHEN :'h1' = :'h2' THEN 'yes' ELSE 'NO' END) AS msg \gset
\echo :msg
\if :same_events
\else
DO $$ BEGIN RAISE EXCEPTION 'ROLLBACK of a poll did not redeliver the same events'; END $$;
\endif
SQL
sql -c "SELECT consumer, partition, committed_seq, lag_events FROM streamguard.consumers
        WHERE consumer = 'audit' ORDER BY partition"

# ----------------------------------------------------------- dedup ----
step "7. Idempotent appends: a retried append with the same dedup_key returns the original position"
dedup_txn() {
    sql_val <<'SQL'
BEGIN;
INSERT INTO shop_orders VALUES (9100, 'customer-retry', 42.00) ON CONFLICT (order_id) DO NOTHING;
SELECT format('(partition %s, seq %s)', partition, seq)
FROM streamguard.append('orders', '{"order_id": 9100, "customer": "customer-retry", "amount": 42.00}',
                        key => 'customer-retry', dedup_key => 'order-9100');
COMMIT;
SQL
}
say "SELECT streamguard.append('orders', '{\"order_id\": 9100, ...}', key => 'customer-retry', dedup_key => 'order-9100');"
first=$(dedup_txn); say "  first attempt  -> $first"
second=$(dedup_txn); say "  producer retry -> $second"
COMMITTED_EXPECTED=$((COMMITTED_EXPECTED + 1))
[ "$first" = "$second" ] || sg_die "the duplicate append returned $second, expected the original position $first"
say "same position: the retry appended nothing"

# ----------------------------------------------------------- verify ----
step "8. Drain the consumer and verify: every committed event exactly once, no rolled-back event"
empty=0
for ((k = 0; k < 30 && empty < 2; k++)); do
    poll_once 100
    if [ "$LAST_POLLED" = 0 ]; then empty=$((empty + 1)); sleep 0.2; else empty=0; fi
done
sql -c "SELECT * FROM streamguard.streams"
sql -c "SELECT * FROM streamguard.consumers ORDER BY stream, consumer, partition"

rolled_list=$(IFS=,; echo "${ROLLED_BACK_IDS[*]}")
verify=$(sql_val <<SQL
SELECT (SELECT count(*) FROM shop_orders),
       (SELECT count(*) FROM billing_seen),
       (SELECT count(DISTINCT order_id) FROM billing_seen),
       (SELECT count(*) FROM (SELECT order_id FROM billing_seen GROUP BY order_id HAVING count(*) > 1) d),
       (SELECT count(*) FROM billing_seen b WHERE NOT EXISTS (SELECT 1 FROM shop_orders o WHERE o.order_id = b.order_id)),
       (SELECT count(*) FROM shop_orders o WHERE NOT EXISTS (SELECT 1 FROM billing_seen b WHERE b.order_id = o.order_id)),
       (SELECT count(*) FROM billing_seen WHERE order_id = ANY ('{$rolled_list}'::int[])),
       (SELECT count(*) FROM (SELECT seq <= lag(seq) OVER (PARTITION BY partition ORDER BY id) AS bad
                              FROM billing_seen) s WHERE bad)
SQL
)
IFS='|' read -r in_table seen distinct dups phantoms missing rolled_seen order_bad <<<"$verify"
printf '    %-44s %s\n' \
    "expected committed events (script's count)" "$COMMITTED_EXPECTED" \
    "committed business rows (shop_orders)" "$in_table" \
    "events consumed by 'billing'" "$seen" \
    "distinct orders consumed" "$distinct" \
    "duplicates" "$dups" \
    "rolled-back events consumed (of ${#ROLLED_BACK_IDS[@]})" "$rolled_seen" \
    "consumed events without a committed row" "$phantoms" \
    "committed events never consumed" "$missing" \
    "per-partition seq order violations" "$order_bad"

ok=1
[ "$in_table" = "$COMMITTED_EXPECTED" ] || ok=0
[ "$seen" = "$COMMITTED_EXPECTED" ] && [ "$distinct" = "$COMMITTED_EXPECTED" ] || ok=0
for v in "$dups" "$phantoms" "$missing" "$rolled_seen" "$order_bad"; do [ "$v" = 0 ] || ok=0; done
if [ "$ok" = 1 ]; then
    printf '\n    %sOK: all %s committed events were consumed exactly once; none of the %s rolled-back ones%s\n' \
        "$BOLD" "$COMMITTED_EXPECTED" "${#ROLLED_BACK_IDS[@]}" "$NORM"
else
    KEEP_RUNNING=1
    echo
    echo "    MISMATCH: the consumer did not see exactly the committed events (server left running for inspection)" >&2
fi

# ------------------------------------------------------- pipelines ----
PIPE_PRODUCERS=2
PIPE_BATCHES=50          # append_batch calls per producer
PIPE_BATCH=500           # events per append_batch
PIPE_EVENTS=$((PIPE_PRODUCERS * PIPE_BATCHES * PIPE_BATCH))
PIPE_HOLD=0.1            # seconds a batch transaction stays open after its append (other work)
PIPE_PACE=0.1            # seconds a producer waits between its batches
PIPE_KILL_PCT=45         # kill the worker once this share of the events is appended
PIPE_DEADLINE=60         # bound on the whole produce/kill/catch-up phase, seconds
ID_BASE=100000           # the batch producers' order ids are ID_BASE+1 ..
PIPE_OK=1

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

# Bounded wait for a SQL condition (a fresh snapshot each time).
wait_sql() {   # wait_sql SECONDS WHAT CONDITION
    local limit=$1 what=$2 cond=$3 i
    for ((i = 0; i < limit * 5; i++)); do
        [ "$(sql_val -c "SELECT ($cond)" 2>/dev/null)" = t ] && return 0
        sleep 0.2
    done
    sg_die "timed out after ${limit}s waiting for: $what"
}

step "9. Pipelines: two exactly-once background workers that turn 'orders' into tables"
say "order_totals: per-customer totals, upserted by each batch (an aggregate; a replayed batch would double it)"
say "order_events: one row per event id, deliberately WITHOUT a unique constraint, so a duplicate would show"
sql_echo <<'SQL'
CREATE TABLE order_totals (customer text PRIMARY KEY, amount numeric NOT NULL, events bigint NOT NULL);
CREATE TABLE order_events (id bigint NOT NULL);
SELECT streamguard.create_pipeline('order_totals', 'orders',
  $$INSERT INTO order_totals
      SELECT key, sum((payload->>'amount')::numeric), count(*) FROM batch GROUP BY key
    ON CONFLICT (customer) DO UPDATE
      SET amount = order_totals.amount + excluded.amount,
          events = order_totals.events + excluded.events$$,
  guarantee => 'exactly_once', batch_size => 1000);
SELECT streamguard.create_pipeline('order_events', 'orders',
  $$INSERT INTO order_events SELECT (payload->>'order_id')::bigint FROM batch$$,
  guarantee => 'exactly_once', batch_size => 1000);
SQL
say "each pipeline gets its own background worker and starts at the beginning of the stream,"
say "so it first catches up with the $COMMITTED_EXPECTED orders of the steps above:"
wait_sql 15 "both pipelines running with a worker and caught up with the existing orders" \
    "SELECT count(*) = 2 AND bool_and(state = 'running' AND worker_pid IS NOT NULL AND lag_events = 0)
       FROM streamguard.pipelines WHERE pipeline IN ('order_totals', 'order_events')"
sql -c "SELECT pipeline, state, guarantee, worker_pid, batches, events_in, rows_out, lag_events, epoch
        FROM streamguard.pipelines ORDER BY pipeline"
BASE_IN=$(sql_val -c "SELECT min(events_in) FROM streamguard.pipelines")

# One producer batch: the business rows and their events in one transaction.
# Re-running it is harmless: ON CONFLICT skips rows that exist, and the dedup
# keys make append_batch return the original positions instead of appending.
# Prints "<new rows> <positions returned> <md5 of the positions>" after COMMIT.
batch_sql() {   # batch_sql LO HI
    local gs="generate_series($1, $2) g" cust="'customer-' || (g % 20)"
    local amt="round(1 + (g * 7919 % 9900) / 100.0, 2)"
    cat <<SQL
BEGIN;
WITH ins AS (INSERT INTO shop_orders (order_id, customer, amount)
             SELECT g, $cust, $amt FROM $gs
             ON CONFLICT (order_id) DO NOTHING RETURNING 1)
SELECT count(*) AS new_rows FROM ins \gset
SELECT count(*) AS positions, md5(string_agg(partition || ':' || seq, ',' ORDER BY n)) AS pos_hash
FROM streamguard.append_batch('orders',
       ARRAY(SELECT jsonb_build_object('order_id', g, 'customer', $cust, 'amount', $amt) FROM $gs ORDER BY g),
       keys       => ARRAY(SELECT $cust FROM $gs ORDER BY g),
       dedup_keys => ARRAY(SELECT 'order-' || g FROM $gs ORDER BY g))
     WITH ORDINALITY AS a(partition, seq, n) \gset
SELECT 1 AS held FROM pg_sleep($PIPE_HOLD) \gset
COMMIT;
\echo :new_rows :positions :pos_hash
SQL
}
batch_range() {   # batch_range P B -> "LO HI"
    local lo=$((ID_BASE + (($1 - 1) * PIPE_BATCHES + $2 - 1) * PIPE_BATCH + 1))
    echo "$lo $((lo + PIPE_BATCH - 1))"
}
# A producer: retries a failed batch (new connection) until it commits.
# Log lines: "ok B ATTEMPT NEW_ROWS POSITIONS HASH" and "retry B ATTEMPT MESSAGE".
pipe_producer() {   # pipe_producer P
    local p=$1 b attempt out msg range t0=$SECONDS
    for ((b = 1; b <= PIPE_BATCHES; b++)); do
        range=$(batch_range "$p" "$b")
        for ((attempt = 1; ; attempt++)); do
            # shellcheck disable=SC2086
            if out=$(batch_sql $range | PGAPPNAME="sg-demo-batch-producer-$p" "${PSQL[@]}" -d demo -At 2>&1); then
                echo "ok $b $attempt $out"
                break
            fi
            msg=$(printf '%s\n' "$out" | grep -m1 -E 'FATAL|ERROR|closed|refused|terminat' || printf '%s\n' "$out" | tail -n1)
            msg=${msg##*FATAL:  }; msg=${msg##*ERROR:  }; msg=${msg##*WARNING:  }; msg=${msg#psql:*: }
            echo "retry $b $attempt $msg"
            ((SECONDS - t0 < PIPE_DEADLINE)) || { echo "giving up on batch $b"; return 1; }
            sleep 0.3
        done
        sleep "$PIPE_PACE"
    done
}

step "10. $PIPE_PRODUCERS producers append $PIPE_EVENTS orders with append_batch while the pipelines run; the worker gets kill -9"
say "each batch: $PIPE_BATCH rows into shop_orders + their $PIPE_BATCH events (dedup_key 'order-<id>'), one transaction"
say "that stays open ${PIPE_HOLD}s after the append (as if the producer did more work before COMMIT);"
say "a batch that fails (connection lost, server in recovery) is retried on a new connection."
say "bar: # = processed by both pipelines, + = appended, not yet processed, . = not yet appended"
POSTMASTER_PID=$(head -n1 "$PGDATA_DIR/postmaster.pid")
PROD_PIDS=()
for ((p = 1; p <= PIPE_PRODUCERS; p++)); do
    pipe_producer "$p" >"$DIR/batch-producer-$p.log" 2>&1 &
    PROD_PIDS+=($!)
    BG_PIDS+=($!)
done

TTY=0; [ -t 1 ] && TTY=1
COLS=120; [ "$TTY" = 1 ] && { COLS=$(tput cols 2>/dev/null || echo 80); [ "$COLS" -ge 40 ] 2>/dev/null || COLS=80; }
bar_line=""
note() {   # a message on its own line, above the progress bar
    [ "$TTY" = 1 ] && printf '\r\033[K'
    printf '    %s\n' "$*"
    [ "$TTY" = 1 ] && [ -n "$bar_line" ] && printf '%s' "$bar_line"
    return 0
}
draw() {   # draw APPENDED PROCESSED TOTALS_IN EVENTS_IN STATUS ELAPSED_MS
    local a=$1 d=$2 text bar w i na nd
    text=$(printf 'appended %5d  processed %5d/%5d  %2d.%ds  %-17s' \
        "$a" "$3" "$4" $(($6 / 1000)) $(($6 % 1000 / 100)) "$5")
    w=$((COLS - 1 - 7 - ${#text}))     # the bar takes what the terminal width leaves
    ((w > 40)) && w=40; ((w < 10)) && w=10
    na=$((a * w / PIPE_EVENTS)); nd=$((d * w / PIPE_EVENTS))
    ((na > w)) && na=$w; ((nd > na)) && nd=$na; ((nd < 0)) && nd=0
    bar=""
    for ((i = 0; i < w; i++)); do
        if ((i < nd)); then bar+="#"; elif ((i < na)); then bar+="+"; else bar+="."; fi
    done
    bar_line="    [$bar] $text"
    bar_line=${bar_line%"${bar_line##*[! ]}"}
    bar_line=${bar_line:0:$((COLS - 1))}
    if [ "$TTY" = 1 ]; then printf '\r\033[K%s' "$bar_line"; fi
}
say "processed = events committed by order_totals / order_events, counted from streamguard.pipelines.events_in"

T0=$(now_ms)
KILLED_PID=""; KILL_T=0; UP_T=0; SERVER_DOWN=0; EPOCH_BEFORE=""; RESTARTED=""
KILL_LOG_OFFSET=0
declare -A SEEN_LINES=()
appended=0; tot_in=$BASE_IN; ev_in=$BASE_IN; tot_lag=0; ev_lag=0; tot_pid=""; ev_pid=""
last_plain=0
while :; do
    elapsed=$(($(now_ms) - T0))
    ((elapsed < PIPE_DEADLINE * 1000)) || {
        echo; sg_die "the pipeline phase did not finish within ${PIPE_DEADLINE}s (appended $appended of $PIPE_EVENTS, processed $tot_in / $ev_in; see $DIR/server.log and $DIR/batch-producer-*.log)"; }
    q=$(sql_val -c "
        SELECT (SELECT count(*) FROM shop_orders WHERE order_id > $ID_BASE),
               max(events_in) FILTER (WHERE pipeline = 'order_totals'),
               max(events_in) FILTER (WHERE pipeline = 'order_events'),
               coalesce(max(lag_events) FILTER (WHERE pipeline = 'order_totals'), -1),
               coalesce(max(lag_events) FILTER (WHERE pipeline = 'order_events'), -1),
               coalesce(max(worker_pid) FILTER (WHERE pipeline = 'order_totals'), 0),
               coalesce(max(worker_pid) FILTER (WHERE pipeline = 'order_events'), 0),
               max(epoch) FILTER (WHERE pipeline = 'order_totals'),
               string_agg(pipeline || ' ' || state, ', ') FILTER (WHERE state <> 'running')
        FROM streamguard.pipelines" 2>&1) && rc=0 || rc=$?
    if [ "$rc" = 0 ]; then
        IFS='|' read -r appended tot_in ev_in tot_lag ev_lag tot_pid ev_pid epoch not_running <<<"$q"
        [ -z "$not_running" ] || { echo; sg_die "a pipeline is not running: $not_running"; }
        if [ "$SERVER_DOWN" = 1 ]; then
            SERVER_DOWN=0; UP_T=$(now_ms)
            t=$(( (UP_T - KILL_T) / 100 ))
            note "server is back, about $((t / 10)).$((t % 10)) s after the kill: crash recovery is done, every committed transaction is there"
        fi
        # restarted = a new worker that has taken ownership (its start bumps the epoch; the pid
        # shows in shared memory a moment before that transaction commits)
        if [ -n "$KILLED_PID" ] && [ -z "$RESTARTED" ] && [ "$tot_pid" != 0 ] && [ "$tot_pid" != "$KILLED_PID" ] &&
           [ "$ev_pid" != 0 ] && [ "$epoch" -gt "$EPOCH_BEFORE" ]; then
            RESTARTED=$tot_pid
            note "pipeline workers restarted: order_totals pid $tot_pid, order_events pid $ev_pid (epoch of order_totals $EPOCH_BEFORE -> $epoch);"
            note "they resume from their committed positions and catch up"
        fi
        if [ -n "$KILLED_PID" ] && [ -z "$RESTARTED" ] && [ "$SERVER_DOWN" = 0 ] && ((UP_T > 0)) &&
           (($(now_ms) - UP_T > 15000)); then
            echo; sg_die "15s after recovery order_totals has no new owning worker (worker_pid $tot_pid, killed $KILLED_PID, epoch $epoch, before the kill $EPOCH_BEFORE)"
        fi
        status="worker $tot_pid"; [ "$tot_pid" = 0 ] && status="worker restarting"
    else
        if [ "$SERVER_DOWN" = 0 ] && [ -n "$KILLED_PID" ]; then
            SERVER_DOWN=1
            msg=$(printf '%s\n' "$q" | grep -m1 -oE '(FATAL|ERROR): .*' | sed 's/^[A-Z]*: *//' || true)
            [ -n "$msg" ] || msg=${q%%$'\n'*}
            note "server restarting: monitor query failed (${msg:0:90})"
        elif [ -z "$KILLED_PID" ]; then
            echo; sg_die "the progress query failed before the kill: $q"
        fi
        status="server restarting"
    fi
    d=$(( (tot_in < ev_in ? tot_in : ev_in) - BASE_IN ))
    draw "$appended" "$d" $((tot_in - BASE_IN)) $((ev_in - BASE_IN)) "$status" "$elapsed"
    if [ "$TTY" = 0 ] && ((elapsed - last_plain >= 1000)); then
        printf '%s\n' "$bar_line"; last_plain=$elapsed
    fi

    # producers' retries, as they happen
    for ((p = 1; p <= PIPE_PRODUCERS; p++)); do
        while IFS= read -r line; do
            [ -n "${SEEN_LINES[$p:$line]:-}" ] && continue
            SEEN_LINES[$p:$line]=1
            read -r kind b att rest <<<"$line"
            case "$kind" in   # the first failure of a batch, and its eventual commit
                retry) [ "$att" = 1 ] && note "producer $p: batch $b failed (${rest:0:90}); retrying on a new connection" ;;
                ok) note "producer $p: batch $b committed on attempt $att (${rest%% *} of $PIPE_BATCH rows new)" ;;
            esac
        done < <(grep -E '^(retry|ok [0-9]+ ([2-9]|[1-9][0-9]+) )' "$DIR/batch-producer-$p.log" 2>/dev/null || true)
    done

    # the kill, mid-way
    if [ -z "$KILLED_PID" ] && [ "$rc" = 0 ] && ((appended * 100 >= PIPE_EVENTS * PIPE_KILL_PCT)) && [ "$tot_pid" != 0 ]; then
        # only that pid, and only if it is still a child of this demo's postmaster
        ppid=$(ps -o ppid= -p "$tot_pid" 2>/dev/null | tr -d ' ' || true)
        pargs=$(ps -o args= -p "$tot_pid" 2>/dev/null | sed 's/ *$//' || true)
        if [ "$ppid" = "$POSTMASTER_PID" ]; then
            EPOCH_BEFORE=$epoch
            KILL_LOG_OFFSET=$(stat -c %s "$DIR/server.log")
            note ""
            note "${BOLD}kill -9 $tot_pid${NORM}   (\"$pargs\": the order_totals worker; $appended events appended so far)"
            kill -9 "$tot_pid"
            KILLED_PID=$tot_pid; KILL_T=$(now_ms)
            note "a server process died by a signal, so the postmaster assumes shared memory may be damaged: it"
            note "terminates EVERY backend (both pipeline workers, the producers' sessions, this monitor's), runs crash"
            note "recovery from the WAL and restarts. Uncommitted transactions are gone, committed ones stay."
            note "The producers reconnect and retry their batch; the launcher restarts the pipeline workers."
        else
            note "worker_pid $tot_pid is not (or no longer) a child of the demo postmaster $POSTMASTER_PID; checking again"
        fi
    fi

    running=0
    for pid in "${PROD_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    if [ "$running" = 0 ] && [ "$rc" = 0 ] && [ -n "$RESTARTED" ] && [ "$tot_lag" = 0 ] && [ "$ev_lag" = 0 ]; then
        break
    fi
    if [ "$running" = 0 ] && [ -z "$KILLED_PID" ]; then
        echo; sg_die "the producers finished before the worker was killed (appended $appended)"
    fi
    sleep 0.25
done
[ "$TTY" = 1 ] && echo
[ "$TTY" = 0 ] && printf '%s\n' "$bar_line"
for ((p = 1; p <= PIPE_PRODUCERS; p++)); do
    wait "${PROD_PIDS[$((p - 1))]}" || { cat "$DIR/batch-producer-$p.log"; sg_die "batch producer $p failed"; }
done
BG_PIDS=()
say "all $PIPE_EVENTS orders appended and both pipelines caught up (lag 0) after $(( ($(now_ms) - T0) / 1000 )) s"

step "11. What happened"
say "the server log around the kill ($DIR/server.log):"
tail -c +"$((KILL_LOG_OFFSET + 1))" "$DIR/server.log" |
    grep -E 'terminated by signal|terminating any other|all server processes terminated|was interrupted|redo (starts|done)|ready to accept' |
    sed -E 's/^[0-9-]+ ([0-9:]+)\.[0-9]+ [A-Z]+ \[[0-9]+\] /\1  /' | head -n 10 | cut -c1-150 | sed 's/^/      /'
retries=0; reconciled=0
for ((p = 1; p <= PIPE_PRODUCERS; p++)); do
    while read -r _ b attempt new_rows positions _; do
        [ "$positions" = "$PIPE_BATCH" ] || { PIPE_OK=0; say "producer $p batch $b: append_batch returned $positions positions, expected $PIPE_BATCH"; }
        if [ "$attempt" -gt 1 ]; then
            retries=$((retries + 1))
            if [ "$new_rows" = 0 ]; then
                reconciled=$((reconciled + 1))
                say "producer $p, batch $b: the interrupted attempt HAD committed; the retry inserted no rows and append_batch returned the original positions (dedup keys): nothing appended twice"
            elif [ "$new_rows" = "$PIPE_BATCH" ]; then
                say "producer $p, batch $b: the failed attempt(s) had not committed; attempt $attempt committed the whole batch"
            else
                PIPE_OK=0; say "producer $p, batch $b: the retry found $new_rows of $PIPE_BATCH rows new: a partially committed batch!"
            fi
        fi
    done < <(grep '^ok ' "$DIR/batch-producer-$p.log")
done
[ "$retries" -gt 0 ] || say "no producer batch needed a retry (the kill hit between their transactions)"
say "the pipelines (restarts and epoch went up: the killed worker's epoch can no longer commit anything):"
sql -c "SELECT pipeline, state, worker_pid, batches, events_in, rows_out, lag_events, restarts, epoch,
               round(events_per_sec) AS events_per_sec, last_error
        FROM streamguard.pipelines ORDER BY pipeline"
say "the checkpoint log of order_totals, first and last batches it holds: a table written in each batch's"
say "transaction, so it survives the crash (epoch 2: the killed worker's batches, 3: its successor's;"
say "commit_ms, measured after the commit, is kept in shared memory and empty for batches before the crash):"
sql -c "SELECT batch_id, epoch, to_char(committed_at, 'HH24:MI:SS.MS') AS committed_at, events_in, rows_out,
               partitions, first_seq, last_seq, round(fetch_ms::numeric, 2) AS fetch_ms,
               round(process_ms::numeric, 2) AS process_ms, round(commit_ms::numeric, 2) AS commit_ms
        FROM (SELECT *, row_number() OVER (ORDER BY batch_id) AS a, row_number() OVER (ORDER BY batch_id DESC) AS z
              FROM streamguard.pipeline_batches WHERE pipeline = 'order_totals') b
        WHERE a <= 3 OR z <= 3 ORDER BY batch_id"
say "the pipelines' positions (consumer 'pipeline:<name>' of the stream), committed with each batch's output:"
sql -c "SELECT consumer, partition, committed_seq, readable_horizon, lag_events
        FROM streamguard.consumers WHERE consumer LIKE 'pipeline:%' ORDER BY consumer, partition"

step "12. Verify the pipelines' output against the committed orders"
say "first, producer 1 re-sends its batch 1, as a client unsure whether its COMMIT went through would:"
# shellcheck disable=SC2046
resend=$(batch_sql $(batch_range 1 1) | "${PSQL[@]}" -d demo -At)
read -r r_new r_pos r_hash <<<"$resend"
orig_hash=$(awk '$1 == "ok" && $2 == 1 { print $6 }' "$DIR/batch-producer-1.log")
if [ "$r_new" = 0 ] && [ "$r_pos" = "$PIPE_BATCH" ] && [ "$r_hash" = "$orig_hash" ]; then
    say "  0 new rows, $r_pos positions returned, identical to the first commit's (md5 ${r_hash:0:12}...): nothing appended"
else
    PIPE_OK=0
    say "  UNEXPECTED: $r_new new rows, $r_pos positions, hash $r_hash (first commit: $orig_hash)"
fi
wait_sql 15 "both pipelines idle (lag 0)" \
    "SELECT bool_and(lag_events = 0) FROM streamguard.pipelines WHERE pipeline IN ('order_totals', 'order_events')"
sleep 0.5   # a re-sent duplicate, had it been appended, would have been processed by now
sql -c "SELECT customer, amount, events FROM order_totals ORDER BY customer LIMIT 5"

verify=$(sql_val <<'SQL'
WITH ref AS (SELECT customer, sum(amount) AS amount, count(*) AS events FROM shop_orders GROUP BY customer)
SELECT (SELECT count(DISTINCT order_id) FROM shop_orders),
       (SELECT count(*) FROM shop_orders WHERE order_id > 100000),
       (SELECT count(*) FROM order_events),
       (SELECT count(DISTINCT id) FROM order_events),
       (SELECT count(*) - count(DISTINCT id) FROM order_events),
       (SELECT count(*) FROM shop_orders o WHERE NOT EXISTS (SELECT 1 FROM order_events e WHERE e.id = o.order_id)),
       (SELECT count(*) FROM order_events e WHERE NOT EXISTS (SELECT 1 FROM shop_orders o WHERE o.order_id = e.id)),
       (SELECT sum(amount) FROM order_totals),
       (SELECT sum(amount) FROM shop_orders),
       (SELECT sum(amount) FROM order_totals) = (SELECT sum(amount) FROM shop_orders),
       (SELECT sum(events) FROM order_totals),
       (SELECT count(*) FROM ref FULL JOIN order_totals t USING (customer)
        WHERE t.amount IS DISTINCT FROM ref.amount OR t.events IS DISTINCT FROM ref.events),
       (SELECT string_agg(pipeline || '=' || events_in, ' ' ORDER BY pipeline) FROM streamguard.pipelines)
SQL
)
IFS='|' read -r expected phase_rows ev_rows ev_distinct ev_dups ev_missing ev_phantoms \
    tot_sum ref_sum sums_equal tot_events cust_bad events_in <<<"$verify"
printf '    %-60s %s\n' \
    "expected events: distinct committed order ids (shop_orders)" "$expected" \
    "  of which appended by the batch producers (of $PIPE_EVENTS sent)" "$phase_rows" \
    "rows in order_events" "$ev_rows" \
    "duplicates in order_events (count(*) - count(DISTINCT id))" "$ev_dups" \
    "committed orders missing from order_events" "$ev_missing" \
    "ids in order_events without a committed order" "$ev_phantoms" \
    "sum(amount) in order_totals" "$tot_sum" \
    "reference sum(amount) of the committed orders" "$ref_sum" \
    "sum(events) in order_totals" "$tot_events" \
    "customers whose total or count differs from the reference" "$cust_bad" \
    "events_in reported by streamguard.pipelines" "$events_in"
[ "$phase_rows" = "$PIPE_EVENTS" ] || PIPE_OK=0
[ "$ev_rows" = "$expected" ] && [ "$ev_distinct" = "$expected" ] && [ "$tot_events" = "$expected" ] || PIPE_OK=0
for v in "$ev_dups" "$ev_missing" "$ev_phantoms" "$cust_bad"; do [ "$v" = 0 ] || PIPE_OK=0; done
[ "$sums_equal" = t ] || PIPE_OK=0
if [ "$PIPE_OK" = 1 ]; then
    printf '\n    %sOK: through kill -9 and crash recovery, both exactly-once pipelines processed each of the\n    %s committed events exactly once: 0 duplicates, 0 lost, totals equal to the reference%s\n' \
        "$BOLD" "$expected" "$NORM"
else
    ok=0
    KEEP_RUNNING=1
    echo
    echo "    MISMATCH: the pipelines' output differs from the committed orders (server left running for inspection)" >&2
fi

# ------------------------------------------------- sgctl verify ----
# The same exactly-once check as users run it after an incident: every event
# of the stream against the sink's rows (duplicates, lost, phantoms), exit
# status 3 on any.
if [ -x "$PG_BINDIR/sgctl" ]; then
    step "The same check from the shell: sgctl verify"
    say "sgctl verify --stream orders --sink order_events --id \"(payload->>'order_id')::bigint\" --sink-id id"
    if "$PG_BINDIR/sgctl" -h "$DIR" -p "$PORT" -U postgres -d demo verify --stream orders \
        --sink order_events --id "(payload->>'order_id')::bigint" --sink-id id | sed 's/^/    /'; then
        :
    else
        ok=0
        KEEP_RUNNING=1
        echo "    sgctl verify found a difference (server left running for inspection)" >&2
    fi
fi

# ------------------------------------------------------------ done ----
step "The demo server keeps running"
say "connect:   psql -h $DIR -p $PORT -U postgres demo"
say "           (as root or postgres; over TCP: PGPASSWORD='$PASSWORD' psql -h 127.0.0.1 -p $PORT -U postgres demo)"
say "or point psql and sgctl at it for this shell, so that the README's commands run as written:"
say "           export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=demo"
say "           sgctl top --once"
say "the README's quick tour creates its own stream 'orders': run it in a new database"
say "           psql -c 'CREATE DATABASE tour' && psql tour"
if sg_is_root; then
    say "stop:      runuser -u postgres -- $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop"
else
    say "stop:      $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop"
fi
say "server log: $DIR/server.log"
[ "$ok" = 1 ] || exit 1
