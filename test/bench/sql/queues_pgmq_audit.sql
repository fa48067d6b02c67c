-- queue benchmark producer of the restart scenarios, pgmq: as queues_pgmq.sql,
-- and the message's id into q_sent in the same transaction
SELECT nextval('q_ids') AS id \gset
BEGIN;
INSERT INTO q_sent (id) VALUES (CAST(:id AS bigint));
SELECT pgmq.send(:queue, jsonb_build_object('id', CAST(:id AS bigint), 't', q_now_us()));
END;
