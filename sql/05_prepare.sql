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
