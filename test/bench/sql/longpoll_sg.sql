-- 9. long-poll benchmark producer: one event per transaction into the
-- stream -D stream=<name>.  The event's id is <pgbench client> * 10^9 + <its
-- transaction number> (-D n=0; pgbench keeps a client's variables from one
-- transaction to the next), so that the time pgbench logs (-l) for the
-- transaction's end -- its COMMIT returned -- can be joined to the event.
\set n :n + 1
\set k random(1, 1000000)
\set a random(1, 10000)
SELECT streamguard.append(:stream, jsonb_build_object('id', CAST(:client_id AS bigint) * 1000000000 + :n, 'amount', CAST(:a AS int), 'currency', 'EUR'), 'k' || CAST(:k AS text));
