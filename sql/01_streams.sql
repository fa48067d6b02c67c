-- Streams: creation, bad input, drop, views
SET client_min_messages = warning;

SELECT streamguard.create_stream('orders', 4);
SELECT streamguard.create_stream('audit');
SELECT streamguard.create_stream('metrics', 2, retention => '1 day', dedup_window => '10 minutes');
SELECT stream, partitions, retention, dedup_window, segments, retained_events,
       first_seq, last_seq, readable_horizon, in_flight
FROM streamguard.streams ORDER BY stream;
SELECT stream, partition, first_seq, last_seq, readable_horizon, next_seq, in_flight
FROM streamguard.stream_partitions WHERE stream = 'orders' ORDER BY partition;

-- bad names
SELECT try($$SELECT streamguard.create_stream('')$$);
SELECT try($$SELECT streamguard.create_stream(NULL)$$);
SELECT try($$SELECT streamguard.create_stream(repeat('a', 64))$$);
SELECT try($$SELECT streamguard.create_stream(repeat('a', 63))$$);
SELECT try($$SELECT streamguard.create_stream('x"; DROP TABLE t; --')$$);
SELECT try($$SELECT streamguard.create_stream('Robert''); DROP TABLE students;--')$$);
SELECT try($$SELECT streamguard.create_stream('1abc')$$);
SELECT try($$SELECT streamguard.create_stream('has space')$$);
SELECT try($$SELECT streamguard.create_stream('dotted.name')$$);
SELECT try($$SELECT streamguard.create_stream('orders')$$);
-- bad partitions and intervals
SELECT try($$SELECT streamguard.create_stream('p0', 0)$$);
SELECT try($$SELECT streamguard.create_stream('pneg', -3)$$);
SELECT try($$SELECT streamguard.create_stream('pbig', 1025)$$);
SELECT try($$SELECT streamguard.create_stream('pbig', 2147483647)$$);
SELECT try($$SELECT streamguard.create_stream('pnull', NULL)$$);
SELECT try($$SELECT streamguard.create_stream('r0', 1, retention => '0 seconds')$$);
SELECT try($$SELECT streamguard.create_stream('rneg', 1, retention => '-1 day')$$);
SELECT try($$SELECT streamguard.create_stream('dnull', 1, dedup_window => NULL)$$);
SELECT try($$SELECT streamguard.create_stream('dsmall', 1, dedup_window => '10 ms')$$);
SELECT try($$SELECT streamguard.create_stream('segonly', 1, segment_interval => '1 hour')$$);
SELECT try($$SELECT streamguard.create_stream('wrongtype', 'four')$$);
-- nothing half-created by the failures above
SELECT count(*) AS streams FROM streamguard.stream;
SELECT count(*) AS segment_tables FROM pg_tables WHERE schemaname = 'streamguard_data';

-- drop
SELECT try($$SELECT streamguard.drop_stream('nope')$$);
SELECT try($$SELECT streamguard.drop_stream(NULL)$$);
SELECT try($$SELECT streamguard.drop_stream('audit', NULL)$$);
SELECT streamguard.drop_stream('audit');
SELECT try($$SELECT streamguard.append('audit', '{}')$$);
SELECT stream FROM streamguard.streams ORDER BY stream;
-- a dropped name can be reused and starts again at seq 1
SELECT streamguard.create_stream('audit');
SELECT * FROM streamguard.append('audit', '{"again": true}');

-- a consumer makes drop refuse unless forced
SELECT count(*) FROM streamguard.poll('orders', 'reader');
SELECT try($$SELECT streamguard.drop_stream('orders')$$);
SELECT streamguard.drop_stream('orders', force => true);
SELECT count(*) AS consumers_left FROM streamguard.consumer;

-- the extension's tables are not for direct use
CREATE ROLE sg_nobody;
SET ROLE sg_nobody;
SELECT try($$SELECT * FROM streamguard.stream$$);
SELECT try($$SELECT * FROM streamguard_data.s1_0$$);
SELECT try($$SELECT streamguard.create_stream('mine')$$);
SELECT count(*) > 0 AS views_readable FROM streamguard.streams;
RESET ROLE;
DROP ROLE sg_nobody;
