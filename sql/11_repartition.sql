-- alter_stream(partitions => M): more partitions online, with each key's
-- events delivered in order across the change (a consumer reads the new
-- mapping's events only once it has passed the switch point of every old
-- partition)
SET client_min_messages = warning;
SELECT streamguard.create_stream('rp', 2);
-- a consumer that exists before the change
SELECT count(*) FROM streamguard.poll('rp', 'c1', 10);

-- bad input
SELECT try($$SELECT streamguard.alter_stream('rp', partitions => 1)$$);
SELECT try($$SELECT streamguard.alter_stream('rp', partitions => 0)$$);
SELECT try($$SELECT streamguard.alter_stream('rp', partitions => 1025)$$);
SELECT try($$SELECT streamguard.alter_stream('nosuch', partitions => 3)$$);
SELECT streamguard.alter_stream('rp', partitions => NULL);	-- keeps the count
SELECT streamguard.alter_stream('rp', partitions => 2);		-- the same count: nothing to do
SELECT partitions FROM streamguard.streams WHERE stream = 'rp';
SELECT count(*) FROM streamguard.stream_repartition;
CREATE ROLE rp_other;
SET ROLE rp_other;
SELECT try($$SELECT streamguard.alter_stream('rp', partitions => 3)$$);
RESET ROLE;
-- not in a transaction that appended to the stream
BEGIN;
SELECT partition FROM streamguard.append('rp', '{}', partition => 0);
SELECT try($$SELECT streamguard.alter_stream('rp', partitions => 3)$$);
ROLLBACK;
-- the owner's partition quota counts the partitions added
CREATE ROLE rp_owner;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO rp_owner;
SET streamguard.role_max_partitions = 3;
SET ROLE rp_owner;
SELECT streamguard.create_stream('rpq', 2);
SELECT try($$SELECT streamguard.alter_stream('rpq', partitions => 4)$$);
SELECT streamguard.alter_stream('rpq', partitions => 3);
SELECT partitions FROM streamguard.streams WHERE stream = 'rpq';
RESET ROLE;
RESET streamguard.role_max_partitions;
SELECT streamguard.drop_stream('rpq', true);

-- events before the change: keys k1..k12, n = 1, 2 each; a dedup key;
-- and a rolled-back append last in partition 1 (a gap at the switch point)
CREATE TABLE sent (key text, n int, partition int, seq bigint, phase int);
DO $$
BEGIN
	FOR j IN 1 .. 2 LOOP
		FOR i IN 1 .. 12 LOOP
			INSERT INTO sent SELECT 'k' || i, j, a.partition, a.seq, 0
			FROM streamguard.append('rp', jsonb_build_object('key', 'k' || i, 'n', j), 'k' || i) a;
		END LOOP;
	END LOOP;
END $$;
SELECT partition, seq FROM streamguard.append('rp', '{"key": "kd", "n": 1}', 'kd', 'dk1') \gset dk_
INSERT INTO sent VALUES ('kd', 1, :dk_partition, :dk_seq, 0);
BEGIN;
SELECT partition FROM streamguard.append('rp', '{}', partition => 1);
ROLLBACK;
SELECT count(DISTINCT partition) FROM sent;

-- grow 2 -> 3
SELECT streamguard.alter_stream('rp', partitions => 3);
SELECT partitions FROM streamguard.streams WHERE stream = 'rp';
SELECT partition, readable_horizon IS NOT NULL AS attached FROM streamguard.stream_partitions
WHERE stream = 'rp' ORDER BY partition;
SELECT r.epoch, r.old_partitions, r.new_partitions,
	   r.switch_seqs[1] = (SELECT max(seq) FROM sent WHERE partition = 0) AS switch_0_last_event,
	   r.switch_seqs[2] = (SELECT max(seq) FROM sent WHERE partition = 1) + 1 AS switch_1_rolled_back
FROM streamguard.stream_repartition r JOIN streamguard.stream s ON s.id = r.stream_id
WHERE s.name = 'rp';
SELECT r.switch_seqs AS switch FROM streamguard.stream_repartition r
JOIN streamguard.stream s ON s.id = r.stream_id WHERE s.name = 'rp' \gset
SELECT (:'switch'::bigint[])[1] AS sw0, (:'switch'::bigint[])[2] AS sw1 \gset

-- events after: the same keys, n = 3, 4, by the new mapping
DO $$
BEGIN
	FOR j IN 3 .. 4 LOOP
		FOR i IN 1 .. 12 LOOP
			INSERT INTO sent SELECT 'k' || i, j, a.partition, a.seq, 1
			FROM streamguard.append('rp', jsonb_build_object('key', 'k' || i, 'n', j), 'k' || i) a;
		END LOOP;
	END LOOP;
END $$;
-- each key keeps one partition per mapping; some moved, some to the new one
SELECT count(*) FILTER (WHERE np > 1) AS split_keys FROM
	(SELECT key, phase, count(DISTINCT partition) AS np FROM sent GROUP BY key, phase) x;
SELECT count(*) > 0 AS some_moved FROM
	(SELECT key FROM sent GROUP BY key HAVING min(partition) FILTER (WHERE phase = 0)
	 <> min(partition) FILTER (WHERE phase = 1)) x;
SELECT count(*) > 0 AS some_in_new FROM sent WHERE phase = 1 AND partition = 2;
-- old-mapping seqs at or below the switch point, new ones above it
SELECT bool_and(CASE WHEN phase = 0 THEN seq <= (:'switch'::bigint[])[partition + 1]
					 WHEN partition < 2 THEN seq > (:'switch'::bigint[])[partition + 1]
					 ELSE true END) AS classified FROM sent;
-- an explicit partition in the new range; one past it
SELECT partition FROM streamguard.append('rp', '{"key": "x", "n": 1}', 'x', partition => 2);
SELECT try($$SELECT streamguard.append('rp', '{}', partition => 3)$$);
-- a dedup key sent again after the change is still known, wherever its key goes now
SELECT partition = :dk_partition AND seq = :dk_seq AS same_position
FROM streamguard.append('rp', '{"key": "kd", "n": 2}', 'kd', 'dk1');

-- the hold-back, deterministically: c1 has consumed partition 0 up to its
-- switch point, not partition 1; it gets only partition 1's old events,
-- then moves over the rolled-back seq to the switch point
SELECT streamguard.seek('rp', 'c1', 0, :sw0 + 1);	-- the next seq to read
CREATE TABLE got1 AS SELECT partition, seq, key FROM streamguard.poll('rp', 'c1', 1000);
SELECT partition, count(*), bool_and(seq <= :sw1) AS old_only FROM got1 GROUP BY partition;
SELECT (SELECT count(*) FROM got1) = (SELECT count(*) FROM sent WHERE phase = 0 AND partition = 1) AS all_old_of_p1;
SELECT partition, position = (:'switch'::bigint[])[partition + 1] AS at_switch
FROM streamguard.consumer c JOIN streamguard.stream s ON s.id = c.stream_id
WHERE s.name = 'rp' AND c.name = 'c1' AND partition < 2 ORDER BY partition;
-- now past every switch point: the new mapping's events
SELECT count(*) AS new_events, bool_and(partition = 2 OR seq > (:'switch'::bigint[])[partition + 1]) AS new_only
FROM streamguard.poll('rp', 'c1', 1000);
-- rolled back: the next poll holds back again
BEGIN;
SELECT streamguard.seek('rp', 'c1', 1, 1);
SELECT count(*) AS n, bool_and(partition = 1) AS p1_only FROM streamguard.poll('rp', 'c1', 1000);
ROLLBACK;

-- a consumer created after the change, a few events per poll: every key in order
CREATE TABLE got (ord serial, key text, n int, partition int, seq bigint);
CREATE FUNCTION drain(consumer text, per_poll int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE total int := 0; k int;
BEGIN
	FOR i IN 1 .. 1000 LOOP
		INSERT INTO got (key, n, partition, seq)
		SELECT key, (payload->>'n')::int, partition, seq FROM streamguard.poll('rp', consumer, per_poll);
		GET DIAGNOSTICS k = ROW_COUNT;
		EXIT WHEN k = 0;
		total := total + k;
	END LOOP;
	RETURN total;
END $$;
SELECT drain('c2', 3);
SELECT count(*) AS out_of_order FROM got a JOIN got b ON a.key = b.key AND a.n < b.n AND a.ord > b.ord;
SELECT count(*) AS missing FROM sent s WHERE NOT EXISTS
	(SELECT 1 FROM got g WHERE g.partition = s.partition AND g.seq = s.seq);

-- a second change, 3 -> 5, and a consumer from the start across both
SELECT streamguard.alter_stream('rp', partitions => 5);
DO $$
BEGIN
	FOR j IN 5 .. 6 LOOP
		FOR i IN 1 .. 12 LOOP
			INSERT INTO sent SELECT 'k' || i, j, a.partition, a.seq, 2
			FROM streamguard.append('rp', jsonb_build_object('key', 'k' || i, 'n', j), 'k' || i) a;
		END LOOP;
	END LOOP;
END $$;
SELECT epoch, old_partitions, new_partitions FROM streamguard.stream_repartition r
JOIN streamguard.stream s ON s.id = r.stream_id WHERE s.name = 'rp' ORDER BY epoch;
-- the view, for any role
SET ROLE rp_other;
SELECT stream, epoch, old_partitions, new_partitions, cardinality(switch_seqs) AS switch_points
FROM streamguard.stream_repartitions ORDER BY stream, epoch;
RESET ROLE;
TRUNCATE got;
SELECT drain('c3', 2);
SELECT count(*) AS out_of_order FROM got a JOIN got b ON a.key = b.key AND a.n < b.n AND a.ord > b.ord;
SELECT count(*) AS missing FROM sent s WHERE NOT EXISTS
	(SELECT 1 FROM got g WHERE g.partition = s.partition AND g.seq = s.seq);
-- c2 goes on from where it was, through the second change
TRUNCATE got;
SELECT drain('c2', 4);
SELECT count(*) AS out_of_order FROM got a JOIN got b ON a.key = b.key AND a.n < b.n AND a.ord > b.ord;
SELECT try($$SELECT streamguard.alter_stream('rp', partitions => 4)$$);

-- a change rolled back (whole, or its subtransaction) leaves no trace in
-- this session's view of the stream either; one committed is seen at once
-- by the transaction's own appends
SELECT streamguard.create_stream('rp2', 2);
BEGIN;
SELECT streamguard.alter_stream('rp2', partitions => 3);
SELECT partition FROM streamguard.append('rp2', '{}', partition => 2);
ROLLBACK;
SELECT try($$SELECT streamguard.append('rp2', '{}', partition => 2)$$);
BEGIN;
SAVEPOINT s;
SELECT streamguard.alter_stream('rp2', partitions => 4);
ROLLBACK TO SAVEPOINT s;
SELECT try($$SELECT streamguard.append('rp2', '{}', partition => 2)$$);
COMMIT;
SELECT partitions FROM streamguard.streams WHERE stream = 'rp2';
-- not in a transaction that is prepared
BEGIN;
SELECT streamguard.alter_stream('rp2', partitions => 3);
PREPARE TRANSACTION 'rp2_grow';
SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'rp2_grow';
SELECT partitions FROM streamguard.streams WHERE stream = 'rp2';
SELECT streamguard.drop_stream('rp2', true);

-- change capture picks partitions as append does, over the new count, and
-- a captured row's events stay in order across the change
CREATE TABLE rp_acc (id int PRIMARY KEY, balance int NOT NULL);
SELECT streamguard.create_stream('rpc', 2);
SELECT streamguard.create_stream('rpc3', 3);
SELECT streamguard.capture_table('rp_acc', 'rpc', backfill => false);
INSERT INTO rp_acc SELECT g, 0 FROM generate_series(1, 12) g;
SELECT streamguard.alter_stream('rpc', partitions => 3);
UPDATE rp_acc SET balance = 1;
CREATE TABLE rpc_got (ord serial, key text, partition int, seq bigint, op text);
DO $$
BEGIN
	FOR i IN 1 .. 100 LOOP
		INSERT INTO rpc_got (key, partition, seq, op)
		SELECT key, partition, seq, payload->>'op' FROM streamguard.poll('rpc', 'cc', 3);
		EXIT WHEN NOT FOUND;
	END LOOP;
END $$;
SELECT op, count(*) FROM rpc_got GROUP BY op ORDER BY op;
SELECT count(*) AS out_of_order FROM rpc_got a JOIN rpc_got b ON a.key = b.key
WHERE a.op = 'insert' AND b.op = 'update' AND a.ord > b.ord;
SELECT count(*) AS not_as_append FROM rpc_got g
WHERE g.op = 'update' AND g.partition <> (SELECT partition FROM streamguard.append('rpc3', '{}', g.key));
SELECT streamguard.uncapture_table('rp_acc');
SELECT streamguard.drop_stream('rpc', true);
SELECT streamguard.drop_stream('rpc3', true);
DROP TABLE rp_acc, rpc_got;

-- retention: a change is forgotten once every event below its switch
-- points is dropped; the seqs go on above them
SELECT streamguard.create_stream('rpr', 2, retention => '1 s', segment_interval => '1 s');
SELECT count(*) FROM streamguard.append_batch('rpr', ARRAY['{}', '{}', '{}', '{}']::jsonb[], partitions => ARRAY[0, 0, 1, 1]);
SELECT streamguard.alter_stream('rpr', partitions => 3);
SELECT wait_for($$NOT EXISTS (SELECT 1 FROM streamguard.stream_repartition r
	JOIN streamguard.stream s ON s.id = r.stream_id WHERE s.name = 'rpr')$$);
SELECT partition, seq FROM streamguard.append('rpr', '{}', partition => 0);
SELECT partition, seq FROM streamguard.poll('rpr', 'late', 10);
SELECT streamguard.drop_stream('rpr', true);

-- a drop takes the changes with it
SELECT streamguard.drop_stream('rp', true);
SELECT count(*) FROM streamguard.stream_repartition;
DROP TABLE sent, got, got1;
DROP FUNCTION drain(text, int);
DROP ROLE rp_other;
REVOKE ALL ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) FROM rp_owner;
DROP ROLE rp_owner;
