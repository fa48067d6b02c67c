-- queue benchmark producer, PgQue: one event per transaction into the queue
-- -D queue=<name> (pgque.send)
SELECT pgque.send(:queue, jsonb_build_object('id', nextval('q_ids'), 't', q_now_us()));
