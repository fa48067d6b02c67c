#!/usr/bin/env bash
# streamguard demo: installs what is missing, builds and installs the extension,
# starts a throwaway PostgreSQL server with streamguard preloaded (unix socket in
# its own /tmp directory + 127.0.0.1, never the default cluster) and shows
# streams at work: transactional producers (some rolling back, one holding a
# transaction open), an exactly-once SQL consumer, the progress views, dedup,
# and a final check that every committed event was consumed exactly once.
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
bash "$SG_ROOT/scripts/build.sh"
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

# ------------------------------------------------------------ done ----
step "The demo server keeps running"
say "connect:   psql -h $DIR -p $PORT -U postgres demo"
say "           (as root or postgres; over TCP: PGPASSWORD='$PASSWORD' psql -h 127.0.0.1 -p $PORT -U postgres demo)"
if sg_is_root; then
    say "stop:      runuser -u postgres -- $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop"
else
    say "stop:      $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop"
fi
say "server log: $DIR/server.log"
[ "$ok" = 1 ] || exit 1
