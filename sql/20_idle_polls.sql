-- What a poll writes (src/stream/consumer.c): the position row of each
-- partition it read events from, nothing else.  ip_round polls with a plain
-- consumer (c) and as a member of a consumer group (g, member m1), n times
-- each, in one transaction, and returns the events read, the rows of
-- streamguard.consumer it inserted and updated (the backend's counts, read
-- before and after: no stats timing) and whether it took a transaction ID,
-- which a row lock would.
SET client_min_messages = warning;
SELECT streamguard.create_stream('ip', 4);
CREATE FUNCTION ip_round(n int, OUT events_c bigint, OUT events_g bigint,
                         OUT inserted bigint, OUT updated bigint, OUT took_xid boolean)
LANGUAGE plpgsql AS $$
DECLARE got bigint;
        ins0 bigint := pg_stat_get_xact_tuples_inserted('streamguard.consumer'::regclass);
        upd0 bigint := pg_stat_get_xact_tuples_updated('streamguard.consumer'::regclass);
BEGIN
    events_c := 0;
    events_g := 0;
    FOR i IN 1 .. n LOOP
        SELECT count(*) INTO got FROM streamguard.poll('ip', 'c', 100);
        events_c := events_c + got;
        SELECT count(*) INTO got FROM streamguard.poll('ip', 'g', 100, member => 'm1');
        events_g := events_g + got;
    END LOOP;
    inserted := pg_stat_get_xact_tuples_inserted('streamguard.consumer'::regclass) - ins0;
    updated := pg_stat_get_xact_tuples_updated('streamguard.consumer'::regclass) - upd0;
    took_xid := pg_current_xact_id_if_assigned() IS NOT NULL;
END $$;
-- the first polls create the position rows, and m1 takes the 4 partitions
SELECT * FROM ip_round(1);
-- 100 idle polls each: nothing written, no row locked
SELECT * FROM ip_round(100);
-- events in one partition: one position row moved per consumer
SELECT count(*) FROM (SELECT streamguard.append('ip', '{}', partition => 2) FROM generate_series(1, 5)) a;
SELECT * FROM ip_round(3);
SELECT name, partition, position, member FROM streamguard.consumer
    WHERE stream_id = (SELECT id FROM streamguard.stream WHERE name = 'ip') ORDER BY name, partition;
-- an append that rolled back leaves a readable seq with no event: the
-- first poll reads it under the row's lock, later ones neither lock nor write
BEGIN;
SELECT streamguard.append('ip', '{}', partition => 1);
ROLLBACK;
SELECT * FROM ip_round(1);
SELECT * FROM ip_round(100);
-- the next event there is read as before
SELECT (streamguard.append('ip', '{"n": 1}', partition => 1)).seq;
SELECT partition, seq, payload FROM streamguard.poll('ip', 'c', 100);
SELECT partition, seq, payload FROM streamguard.poll('ip', 'g', 100, member => 'm1');
SELECT * FROM ip_round(100);
SELECT name, partition, position, member FROM streamguard.consumer
    WHERE stream_id = (SELECT id FROM streamguard.stream WHERE name = 'ip') ORDER BY name, partition;
SELECT streamguard.leave_group('ip', 'g', 'm1');
SELECT streamguard.drop_stream('ip', force => true);
DROP FUNCTION ip_round(int);
