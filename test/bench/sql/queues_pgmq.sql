-- queue benchmark producer, pgmq: one message per transaction into the queue
-- -D queue=<name> (pgmq.send)
SELECT pgmq.send(:queue, jsonb_build_object('id', nextval('q_ids'), 't', q_now_us()));
