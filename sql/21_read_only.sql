-- Every entry point that writes refuses a read-only transaction up front,
-- naming itself (25006), instead of failing inside one of its own SQL
-- statements; the functions that only read still work there.
SET client_min_messages = warning;
SELECT streamguard.create_stream('ro', 2);
SELECT count(*) FROM streamguard.append('ro', '{"a": 1}');
CREATE TABLE ro_sink (n int);
CREATE TABLE ro_cap (id int PRIMARY KEY);
SELECT streamguard.create_pipeline('ro_p', 'ro', 'INSERT INTO ro_sink SELECT 1 FROM batch');
SELECT streamguard.pause_pipeline('ro_p');
\set VERBOSITY default
SET default_transaction_read_only = on;
-- the writers
SELECT streamguard.create_stream('ro2', 1);
SELECT streamguard.drop_stream('ro');
SELECT streamguard.grant_stream('ro', current_user::regrole, 'read');
SELECT streamguard.revoke_stream('ro', current_user::regrole, 'read');
SELECT streamguard.alter_stream('ro', retention => '1 day');
SELECT streamguard.set_payload_check('ro', 'object');
SELECT count(*) FROM streamguard.append('ro', '{"a": 2}');
SELECT count(*) FROM streamguard.append_batch('ro', ARRAY['{"a": 3}'::jsonb]);
SELECT count(*) FROM streamguard.poll('ro', 'c', 10);
SELECT count(*) FROM streamguard.poll('ro', 'g', 10, member => 'm');
SELECT streamguard.seek('ro', 'c', 0, 1);
SELECT streamguard.seek('ro', 'c', now());
SELECT streamguard.drop_consumer('ro', 'c');
SELECT streamguard.leave_group('ro', 'g', 'm');
SELECT streamguard.create_pipeline('ro_q', 'ro', 'INSERT INTO ro_sink SELECT 1 FROM batch');
SELECT streamguard.create_window_pipeline('ro_w', 'ro', 'ro_out', '1 s');
SELECT streamguard.alter_pipeline('ro_p', batch_size => 10);
SELECT streamguard.pause_pipeline('ro_p');
SELECT streamguard.resume_pipeline('ro_p');
SELECT streamguard.reset_pipeline('ro_p');
SELECT streamguard.drop_pipeline('ro_p');
SELECT streamguard.skip_event('ro_p', 0, 0);
SELECT streamguard.purge_dead_letters('ro_p');
SELECT streamguard.redrive_dead_letters('ro_p');
SELECT streamguard.capture_table('ro_cap', 'ro', backfill => false);
SELECT streamguard.uncapture_table('ro_cap');
-- the readers
SELECT (SELECT count(*) FROM streamguard.read('ro', 0, 0, 10)) + (SELECT count(*) FROM streamguard.read('ro', 1, 0, 10)) AS events;
SELECT stream, partitions FROM streamguard.streams WHERE stream = 'ro';
SELECT pipeline, state FROM streamguard.pipelines WHERE pipeline = 'ro_p';
RESET default_transaction_read_only;
-- nothing above changed anything
SELECT count(*) FROM streamguard.poll('ro', 'c', 10);
SELECT streamguard.drop_pipeline('ro_p');
SELECT streamguard.drop_stream('ro', force => true);
DROP TABLE ro_sink, ro_cap;
