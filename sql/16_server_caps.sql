-- server-wide resources (docs/security.md): the worker caps, the
-- database's share of the slots, the consumer group lease bound
SET client_min_messages = warning;

-- max_worker_processes = 8 here: streamguard may hold 6, leaving 2
SELECT name, setting, context FROM pg_settings
WHERE name IN ('max_worker_processes', 'streamguard.reserved_worker_processes',
	'streamguard.database_max_workers', 'streamguard.role_max_workers',
	'streamguard.max_group_lease', 'streamguard.role_max_group_members',
	'streamguard.database_max_group_members', 'streamguard.database_max_streams',
	'streamguard.database_max_partitions', 'streamguard.database_max_pipelines')
ORDER BY name;
SELECT scope, name, cap, reserved FROM streamguard.worker_slots WHERE scope = 'server';

SELECT streamguard.create_stream('caps', 2);
CREATE TABLE caps_sink (seq bigint);
-- more workers than the caps could ever run: refused (4 = 6 less the
-- launcher and this database's maintenance worker)
SELECT try($$SELECT streamguard.create_pipeline('caps_p', 'caps', 'INSERT INTO caps_sink SELECT seq FROM batch', workers => 5)$$);
SELECT try($$SELECT streamguard.create_pipeline('caps_p', 'caps', 'INSERT INTO caps_sink SELECT seq FROM batch', workers => 2)$$);
SELECT try($$SELECT streamguard.alter_pipeline('caps_p', workers => 5)$$);
SELECT workers FROM streamguard.pipelines WHERE pipeline = 'caps_p';
SELECT streamguard.drop_pipeline('caps_p');

-- the database's share: lowered for this session by the superuser
SET streamguard.database_max_streams = 1;
SELECT try($$SELECT streamguard.create_stream('caps2', 1)$$);
RESET streamguard.database_max_streams;
SET streamguard.database_max_partitions = 3;
SELECT try($$SELECT streamguard.create_stream('caps2', 2)$$);
SELECT try($$SELECT streamguard.alter_stream('caps', partitions => 4)$$);
RESET streamguard.database_max_partitions;
SET streamguard.database_max_pipelines = 1;
SELECT try($$SELECT streamguard.create_pipeline('caps_p', 'caps', 'INSERT INTO caps_sink SELECT seq FROM batch', workers => 2)$$);
RESET streamguard.database_max_pipelines;

-- a lease beyond the superuser's bound
SELECT try($$SET streamguard.group_lease = '2min'$$);
SET streamguard.group_lease = '1min';
SHOW streamguard.group_lease;
RESET streamguard.group_lease;
SET streamguard.max_group_lease = '5min';
SET streamguard.group_lease = '2min';
SHOW streamguard.group_lease;
RESET streamguard.group_lease;
RESET streamguard.max_group_lease;

-- an ordinary role cannot move the bounds
CREATE ROLE caps_user;
SET ROLE caps_user;
SELECT try($$SET streamguard.max_group_lease = '1h'$$);
SELECT try($$SET streamguard.role_max_group_members = -1$$);
SELECT try($$SET streamguard.database_max_streams = 1000$$);
SELECT try($$SET streamguard.role_max_workers = 100$$);
-- the view: counts for everyone
SELECT scope, cap FROM streamguard.worker_slots WHERE scope = 'server';
RESET ROLE;
DROP ROLE caps_user;

SELECT streamguard.drop_stream('caps');
DROP TABLE caps_sink;
