-- privileges: a role needs a grant to append, read or poll a stream
SET client_min_messages = warning;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;

CREATE ROLE sg_owner;
CREATE ROLE sg_producer;
CREATE ROLE sg_reader;
CREATE ROLE sg_stranger;
CREATE ROLE sg_team;
GRANT sg_team TO sg_stranger;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO sg_owner;

SET ROLE sg_owner;
SELECT streamguard.create_stream('private', 2);
SELECT owner FROM streamguard.streams WHERE stream = 'private';
SELECT partition FROM streamguard.append('private', '{"secret": 1}', partition => 0);
SELECT streamguard.grant_stream('private', 'sg_producer', 'append');
SELECT streamguard.grant_stream('private', 'sg_reader', 'read');
RESET ROLE;

-- no grant: nothing
SET ROLE sg_stranger;
SELECT try($$SELECT streamguard.append('private', '{}')$$);
SELECT try($$SELECT streamguard.append_batch('private', ARRAY['{}']::jsonb[])$$);
SELECT try($$SELECT * FROM streamguard.poll('private', 'x')$$);
SELECT try($$SELECT streamguard.seek('private', 'x', 0, 1)$$);
SELECT try($$SELECT streamguard.seq_at_time('private', 0, now())$$);
SELECT try($$SELECT streamguard.drop_stream('private')$$);
SELECT try($$SELECT streamguard.grant_stream('private', 'sg_stranger')$$);
SELECT try($$SELECT streamguard.create_stream('mine')$$);
RESET ROLE;

-- append only
SET ROLE sg_producer;
SELECT try($$SELECT streamguard.append('private', '{"from": "producer"}', partition => 0)$$);
SELECT try($$SELECT * FROM streamguard.poll('private', 'x')$$);
SELECT try($$SELECT streamguard.drop_stream('private')$$);
RESET ROLE;

-- read only
SET ROLE sg_reader;
SELECT try($$SELECT streamguard.append('private', '{}')$$);
SELECT payload FROM streamguard.poll('private', 'reader', 10) ORDER BY seq;
RESET ROLE;

-- membership in a granted role counts
SET ROLE sg_owner;
SELECT streamguard.grant_stream('private', 'sg_team', 'read');
RESET ROLE;
SET ROLE sg_stranger;
SELECT count(*) FROM streamguard.poll('private', 'team', 10);
RESET ROLE;

-- revoke takes effect at once, also in a session that used the stream
SET ROLE sg_owner;
SELECT streamguard.revoke_stream('private', 'sg_team');
SELECT streamguard.revoke_stream('private', 'sg_producer', 'append');
RESET ROLE;
SET ROLE sg_stranger;
SELECT try($$SELECT * FROM streamguard.poll('private', 'team', 10)$$);
RESET ROLE;
SET ROLE sg_producer;
SELECT try($$SELECT streamguard.append('private', '{}')$$);
RESET ROLE;

-- watch: the stream's consumers and their lag, never an event, no consumer moved
CREATE ROLE sg_watcher;
CREATE ROLE sg_monitoring IN ROLE pg_monitor;
SET ROLE sg_watcher;
SELECT count(*) AS consumers_seen FROM streamguard.consumers WHERE stream = 'private';
RESET ROLE;
SET ROLE sg_owner;
SELECT streamguard.grant_stream('private', 'sg_watcher', 'watch');
RESET ROLE;
SET ROLE sg_watcher;
SELECT consumer, partition, committed_seq, lag_events FROM streamguard.consumers
WHERE stream = 'private' ORDER BY 1, 2;
SELECT try($$SELECT * FROM streamguard.poll('private', 'reader')$$);
SELECT try($$SELECT streamguard.seek('private', 'reader', 0, 0)$$);
SELECT try($$SELECT * FROM streamguard.read('private', 0, 0, 10)$$);
SELECT try($$SELECT streamguard.drop_consumer('private', 'reader')$$);
SELECT try($$SELECT streamguard.append('private', '{}')$$);
RESET ROLE;
-- pg_monitor (through pg_read_all_stats) sees every stream's consumers, and
-- reads nothing either
SET ROLE sg_monitoring;
SELECT consumer, partition, committed_seq, lag_events FROM streamguard.consumers
WHERE stream = 'private' ORDER BY 1, 2;
SELECT try($$SELECT * FROM streamguard.poll('private', 'reader')$$);
RESET ROLE;
-- the grants as stored: by role name; 'all' includes watch, a revoke of
-- read leaves it, a revoke of watch ends it
SET ROLE sg_owner;
SELECT streamguard.grant_stream('private', 'sg_stranger', 'all');
SELECT streamguard.revoke_stream('private', 'sg_stranger', 'read');
SELECT streamguard.revoke_stream('private', 'sg_watcher', 'watch');
RESET ROLE;
SELECT grantee, pg_typeof(grantee), can_append, can_read, can_watch FROM streamguard.stream_grant
WHERE stream_id = (SELECT id FROM streamguard.stream WHERE name = 'private') ORDER BY 1::text;
SET ROLE sg_watcher;
SELECT count(*) AS consumers_seen FROM streamguard.consumers WHERE stream = 'private';
RESET ROLE;
SET ROLE sg_stranger;
SELECT count(*) AS consumers_seen FROM streamguard.consumers WHERE stream = 'private';
SELECT try($$SELECT * FROM streamguard.poll('private', 'reader')$$);
RESET ROLE;

-- bad grants
SET ROLE sg_owner;
SELECT try($$SELECT streamguard.grant_stream('private', 'sg_reader', 'delete')$$);
SELECT try($$SELECT streamguard.grant_stream('private', 'no_such_role')$$);
SELECT try($$SELECT streamguard.grant_stream('private', NULL)$$);
SELECT try($$SELECT streamguard.grant_stream('nope', 'sg_reader')$$);
-- the owner drops
SELECT streamguard.drop_stream('private', force => true);
RESET ROLE;

REVOKE EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) FROM sg_owner;
DROP ROLE sg_owner, sg_producer, sg_reader, sg_stranger, sg_team, sg_watcher, sg_monitoring;
