-- Objects of the queue benchmark (queues), on its own server, created once.
-- Every event carries {"id": <unique>, "t": <send time, epoch microseconds>};
-- a consumer writes a receipt per event it receives in the transaction that
-- acknowledges it (commits a streamguard position, deletes the pgmq messages,
-- acks the PgQue batch), so a receipt exists exactly for every acknowledged
-- delivery: the audit counts ids never receipted (lost) and receipted twice
-- (delivered twice).
CREATE SEQUENCE q_ids;
CREATE FUNCTION q_now_us() RETURNS bigint LANGUAGE sql VOLATILE
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint $$;
CREATE TABLE q_recv (id bigint NOT NULL, sent_us bigint NOT NULL, recv_us bigint NOT NULL);
-- the restart scenarios' producers: an id per committed event, written in
-- the event's transaction
CREATE TABLE q_sent (id bigint PRIMARY KEY, at_us bigint NOT NULL DEFAULT q_now_us());
CREATE TABLE q_ctl (stop boolean NOT NULL);
INSERT INTO q_ctl VALUES (false);


-- The consumers: one transaction per batch; they return after an empty poll
-- once q_ctl.stop is set, or after limit_s seconds.
CREATE PROCEDURE q_consume_sg(st text, limit_s int)
LANGUAGE plpgsql AS $$
DECLARE n bigint; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        INSERT INTO q_recv (id, sent_us, recv_us)
            SELECT (payload->>'id')::bigint, (payload->>'t')::bigint, q_now_us()
            FROM streamguard.poll(st, 'c', 1000, wait => '200 ms');
        GET DIAGNOSTICS n = ROW_COUNT;
        COMMIT;
        EXIT WHEN n = 0 AND (SELECT stop FROM q_ctl);
        EXIT WHEN clock_timestamp() > t0 + make_interval(secs => limit_s);
    END LOOP;
END $$;

-- pgmq as its users consume: read with a visibility timeout (30 s), delete
-- what was processed; read_with_poll is its server-side wait (10 ms steps)
CREATE PROCEDURE q_consume_pgmq(q text, limit_s int)
LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        WITH m AS (SELECT msg_id, message FROM pgmq.read_with_poll(q, 30, 1000, 1, 10)),
             r AS (INSERT INTO q_recv (id, sent_us, recv_us)
                   SELECT (message->>'id')::bigint, (message->>'t')::bigint, q_now_us() FROM m)
        SELECT array_agg(msg_id) INTO ids FROM m;
        IF ids IS NOT NULL THEN
            PERFORM pgmq.delete(q, ids);
        END IF;
        COMMIT;
        EXIT WHEN ids IS NULL AND (SELECT stop FROM q_ctl);
        EXIT WHEN clock_timestamp() > t0 + make_interval(secs => limit_s);
    END LOOP;
END $$;

-- PgQue as its README consumes: receive a batch, ack its batch_id; sleep
-- 10 ms when there is no batch (a batch exists once the ticker cut one)
CREATE PROCEDURE q_consume_pgque(q text, limit_s int)
LANGUAGE plpgsql AS $$
DECLARE b bigint; n bigint; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        WITH m AS (SELECT batch_id, payload FROM pgque.receive(q, 'c', 100000)),
             r AS (INSERT INTO q_recv (id, sent_us, recv_us)
                   SELECT (payload::jsonb->>'id')::bigint, (payload::jsonb->>'t')::bigint, q_now_us() FROM m)
        SELECT max(batch_id), count(*) INTO b, n FROM m;
        IF b IS NOT NULL THEN
            PERFORM pgque.ack(b);
        END IF;
        COMMIT;
        IF n = 0 THEN
            EXIT WHEN (SELECT stop FROM q_ctl);
            PERFORM pg_sleep(0.01);
        END IF;
        EXIT WHEN clock_timestamp() > t0 + make_interval(secs => limit_s);
    END LOOP;
END $$;

-- PgQue's ticker as pgque.start() schedules it through pg_cron: ticker_loop()
-- every second (it ticks every tick_period_ms inside), maint() and
-- maint_rotate_tables_step2() every 10 s; until q_ctl.stop or limit_s
CREATE PROCEDURE q_pgque_ticker(limit_s int)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); last_maint timestamptz := clock_timestamp();
BEGIN
    LOOP
        CALL pgque.ticker_loop();
        COMMIT;
        IF clock_timestamp() > last_maint + interval '10 s' THEN
            PERFORM pgque.maint();
            COMMIT;
            PERFORM pgque.maint_rotate_tables_step2();
            COMMIT;
            last_maint := clock_timestamp();
        END IF;
        EXIT WHEN (SELECT stop FROM q_ctl);
        EXIT WHEN clock_timestamp() > t0 + make_interval(secs => limit_s);
    END LOOP;
END $$;

-- the `RR readers` scenario: counts the rows of every table of the schemas
-- (the contender's), in the caller's snapshot; a table dropped meanwhile
-- is skipped
CREATE FUNCTION q_scan(schemas text[]) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE r record; n bigint; total bigint := 0;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
             WHERE s.nspname = ANY (schemas) AND c.relkind IN ('r', 'p') LOOP
        BEGIN
            EXECUTE format('SELECT count(*) FROM %s', r.rel) INTO n;
            total := total + n;
        EXCEPTION WHEN undefined_table THEN NULL;
        END;
    END LOOP;
    RETURN total;
END $$;
