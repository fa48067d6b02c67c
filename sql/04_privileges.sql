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
DROP ROLE sg_owner, sg_producer, sg_reader, sg_stranger, sg_team;
