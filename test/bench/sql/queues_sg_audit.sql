-- queue benchmark producer of the restart scenarios, streamguard: as
-- queues_sg.sql, and the event's id into q_sent in the same transaction, so
-- q_sent holds exactly the events whose producer got a commit
\set k random(1, 1000000)
SELECT nextval('q_ids') AS id \gset
BEGIN;
INSERT INTO q_sent (id) VALUES (CAST(:id AS bigint));
SELECT streamguard.append(:stream, jsonb_build_object('id', CAST(:id AS bigint), 't', q_now_us()), 'k' || CAST(:k AS text));
END;
