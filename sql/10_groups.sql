-- consumer groups: poll(..., member => m), leave_group, consumer_group_members
SET client_min_messages = warning;

SELECT streamguard.create_stream('gq', 4);
SELECT count(*) FROM streamguard.append_batch('gq',
	(SELECT array_agg(jsonb_build_object('i', g)) FROM generate_series(1, 40) g),
	partitions => (SELECT array_agg(g % 4) FROM generate_series(1, 40) g));

CREATE VIEW members AS
SELECT member, partitions, lease_expires_at > now() AS leased, pid = pg_backend_pid() AS mine
FROM streamguard.consumer_group_members WHERE stream = 'gq' AND consumer = 'g' ORDER BY member;
-- the assignment: the member column of the consumer's position rows
CREATE VIEW assignment AS
SELECT c.partition, c.member FROM streamguard.consumer c JOIN streamguard.stream s ON s.id = c.stream_id
WHERE s.name = 'gq' AND c.name = 'g' ORDER BY c.partition;

-- the first member gets every partition
SELECT partition, count(*) FROM streamguard.poll('gq', 'g', 8, member => 'a') GROUP BY 1 ORDER BY 1;
SELECT * FROM members;
-- a second member takes half, from the highest partitions of the first
SELECT partition, count(*) FROM streamguard.poll('gq', 'g', 100, member => 'b') GROUP BY 1 ORDER BY 1;
SELECT * FROM members;
-- a third: 4 partitions over 3 members is 2 + 1 + 1; only one partition moves
SELECT count(*) FROM streamguard.poll('gq', 'g', 1, member => 'c');
SELECT * FROM members;
SELECT * FROM assignment;
-- members read only their own partitions
SELECT DISTINCT partition FROM streamguard.poll('gq', 'g', 100, member => 'a') ORDER BY 1;
-- lag per member
SELECT member, lag_events FROM streamguard.consumer_group_members WHERE consumer = 'g' ORDER BY member;

-- a member that leaves hands its partitions over; the others take them
SELECT streamguard.leave_group('gq', 'g', 'b');
SELECT * FROM members;
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'c');
SELECT * FROM members;
-- leaving twice, or a name that never joined: false
SELECT streamguard.leave_group('gq', 'g', 'b');
SELECT streamguard.leave_group('gq', 'g', 'nobody');

-- a member whose lease runs out is dropped at the next poll of another
SET streamguard.group_lease = '100ms';
SELECT count(*) FROM streamguard.poll('gq', 'g', 1, member => 'a');
SELECT pg_sleep(0.3);
RESET streamguard.group_lease;
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'c');
SELECT * FROM members;

-- an unassigned partition is taken at the next poll of a member below
-- its share
UPDATE streamguard.consumer SET member = NULL WHERE name = 'g' AND partition = 3;
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'c');
SELECT * FROM assignment;

-- every event was delivered once over the whole group
SELECT sum(committed_seq) = (SELECT sum(m) FROM (SELECT max(seq) m FROM generate_series(0, 3) p,
	LATERAL (SELECT seq FROM streamguard.read('gq', p, 0, 1000)) r GROUP BY p) x) AS all_consumed
FROM streamguard.consumers WHERE stream = 'gq' AND consumer = 'g';

-- seek moves a position, not the assignment on the same row
SELECT streamguard.seek('gq', 'g', 0, 1);
SELECT * FROM assignment;
SELECT partition, count(*) FROM streamguard.poll('gq', 'g', 100, member => 'c') GROUP BY 1;

-- the stream gains partitions: the next member poll assigns them, and a
-- second member takes its share, the first keeping what it had
SELECT streamguard.alter_stream('gq', partitions => 6);
SELECT count(*) FROM streamguard.append_batch('gq',
	(SELECT array_agg(jsonb_build_object('j', g)) FROM generate_series(1, 12) g),
	partitions => (SELECT array_agg(g % 6) FROM generate_series(1, 12) g));
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'c');
SELECT * FROM members;
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'd');
SELECT * FROM members;
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'c');
SELECT count(*) FROM streamguard.poll('gq', 'g', 100, member => 'd');
SELECT sum(committed_seq) AS consumed FROM streamguard.consumers WHERE stream = 'gq' AND consumer = 'g';

-- a poll without a member name on a group's consumer is refused
SELECT try($$SELECT * FROM streamguard.poll('gq', 'g', 1)$$);
-- another consumer name is not a group
SELECT count(*) FROM streamguard.poll('gq', 'solo', 100);

-- bad input
SELECT try($$SELECT * FROM streamguard.poll('gq', 'g', 1, member => '')$$);
SELECT try($$SELECT * FROM streamguard.poll('gq', 'g', 1, member => repeat('m', 129))$$);
SELECT count(*) FROM streamguard.poll('gq', 'g', 1, member => repeat('m', 128));
SELECT streamguard.leave_group('gq', 'g', repeat('m', 128));
SELECT try($$SELECT streamguard.leave_group('gq', 'g', NULL)$$);
SELECT try($$SELECT streamguard.leave_group('gq', 'g', '')$$);
SELECT try($$SELECT streamguard.leave_group('gq', 'bad name', 'a')$$);
SELECT try($$SELECT streamguard.leave_group('nosuch', 'g', 'a')$$);
SELECT try($$SELECT * FROM streamguard.poll('nosuch', 'g', 1, member => 'a')$$);

-- a role that may not read the stream can neither join nor leave, nor see
CREATE ROLE sg_groups_outsider;
SET ROLE sg_groups_outsider;
SELECT try($$SELECT * FROM streamguard.poll('gq', 'g', 1, member => 'x')$$);
SELECT try($$SELECT streamguard.leave_group('gq', 'g', 'a')$$);
SELECT count(*) FROM streamguard.consumer_group_members;
SELECT try($$SELECT * FROM streamguard.consumer$$);
RESET ROLE;
SELECT count(*) FROM streamguard.consumer_group_members WHERE stream = 'gq';

-- drop_consumer takes the group with it
SELECT streamguard.drop_consumer('gq', 'g');
SELECT count(*) FROM assignment;
SELECT count(*) FROM streamguard.consumer_group_members;
SELECT count(*) FROM streamguard.poll('gq', 'g', 100);
SELECT streamguard.drop_stream('gq', force => true);
DROP ROLE sg_groups_outsider;
DROP VIEW members;
DROP VIEW assignment;
