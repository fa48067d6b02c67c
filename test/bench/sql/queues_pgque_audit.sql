-- queue benchmark producer of the restart scenarios, PgQue: as
-- queues_pgque.sql, and the event's id into q_sent in the same transaction
SELECT nextval('q_ids') AS id \gset
BEGIN;
INSERT INTO q_sent (id) VALUES (CAST(:id AS bigint));
SELECT pgque.send(:queue, jsonb_build_object('id', CAST(:id AS bigint), 't', q_now_us()));
END;
