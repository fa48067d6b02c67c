-- 1. single-event appends, streamguard: one append to the stream -D stream=<name>.
\set k random(1, 1000000)
\set a random(1, 10000)
SELECT streamguard.append(:stream, jsonb_build_object('id', CAST(:k AS int), 'amount', CAST(:a AS int), 'currency', 'EUR'), 'k' || CAST(:k AS text));
