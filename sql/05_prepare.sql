-- two-phase commit: a transaction that appended cannot be prepared
SET client_min_messages = warning;
SELECT streamguard.create_stream('tp');
BEGIN;
SELECT seq FROM streamguard.append('tp', '{"n": 1}');
PREPARE TRANSACTION 'sg_appended';
-- the transaction was rolled back: nothing appended, nothing prepared
SELECT count(*) FROM pg_prepared_xacts;
SELECT count(*) FROM streamguard.poll('tp', 'c');
-- a transaction that only polled can be prepared and committed
SELECT seq FROM streamguard.append('tp', '{"n": 2}');
BEGIN;
SELECT seq FROM streamguard.poll('tp', 'c');
PREPARE TRANSACTION 'sg_polled';
COMMIT PREPARED 'sg_polled';
SELECT committed_seq FROM streamguard.consumers WHERE stream = 'tp';
-- the horizon is not held back by the refused transaction
SELECT readable_horizon, in_flight FROM streamguard.stream_partitions WHERE stream = 'tp';
-- nor one that created, dropped or changed a stream (what its commit does
-- to shared memory would not happen at COMMIT PREPARED); the session goes on
CREATE ROLE tp_reader;
BEGIN;
SELECT streamguard.grant_stream('tp', 'tp_reader', 'read');
PREPARE TRANSACTION 'sg_granted';
BEGIN;
SELECT streamguard.create_stream('tp2');
PREPARE TRANSACTION 'sg_created';
BEGIN;
SELECT streamguard.alter_stream('tp', retention => '1 day');
PREPARE TRANSACTION 'sg_altered';
SELECT count(*) FROM pg_prepared_xacts;
SELECT streamguard.create_stream('tp3');
SELECT streamguard.grant_stream('tp3', 'tp_reader', 'read');
SELECT stream FROM streamguard.streams WHERE stream LIKE 'tp%' ORDER BY 1;
SELECT streamguard.drop_stream('tp3', true);
DROP ROLE tp_reader;
