
# Security attack suite, part 2: database- and role-level settings must not
# reach streamguard's own SQL: every statement streamguard runs, in workers
# and after switching to the data owner, resolves only pg_catalog objects
# whatever the database-, role- or session-level settings (docs/security.md,
# "streamguard's own SQL").
#
# Threats:
#  (a) the owner of a database (an ordinary role) sets the database's
#      search_path to a schema of look-alike operators and functions
#      (StreamguardTest.pm).  Background workers connecting to that database — the
#      maintenance worker (segment rotation, retention, dedup expiry,
#      pipeline supervision) and the pipeline workers — connect as the
#      bootstrap superuser and load the database's settings at connect: an
#      unqualified operator in their SQL runs the attacker's function as
#      the superuser.  Checked while maintenance rounds rotate and drop
#      segments, once with workers started after the ALTER DATABASE, and
#      again after a server restart (a new maintenance worker).
#  (b) a role sets its own search_path for one database (ALTER ROLE ... IN
#      DATABASE ... SET) and then calls every streamguard function in its
#      own sessions: the functions that switch to the data owner (the
#      storage's superuser owner) must not resolve the role's look-alikes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $t_start = time;
my $node = sg_node('sec101', extra => "streamguard.launcher_naptime='1s'\n");
my $pin = sec_pin();

sub sq
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $pin . $sql);
}

# ============================================================ (a) database

$node->safe_psql('postgres', q{
CREATE ROLE attacker LOGIN;
CREATE DATABASE evil_db OWNER attacker;
});
sq('evil_db', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('ret', 2, retention => '1 second', dedup_window => '1 second',
	segment_interval => '1 second');
CREATE TABLE public.ret_sink (seq bigint, who name);
SELECT streamguard.create_pipeline('p_ret', 'ret',
	$$INSERT INTO public.ret_sink SELECT seq, current_user FROM batch$$, dedup => true,
	dedup_window => '1 second');
SELECT count(*) FROM streamguard.poll('ret', 'c1');
});
ok( sec_wait($node,
		q{SELECT count(*) FROM streamguard.pipelines WHERE pipeline = 'p_ret' AND worker_pid IS NOT NULL}, 1, 30,
		dbname => 'evil_db'), '(a) the pipeline of evil_db runs');

# the database owner prepares its traps and poisons the database's settings
expect_ok($node, 'CREATE SCHEMA evil',
	'(a) the database owner creates schema evil', user => 'attacker', dbname => 'evil_db');
sec_install_evil($node, role => 'attacker', schema => 'evil', tag => 'db', dbname => 'evil_db');
expect_ok($node, 'ALTER DATABASE evil_db SET search_path = evil, pg_catalog',
	'(a) the database owner sets the database search_path to evil, pg_catalog', user => 'attacker', dbname => 'evil_db');

# Append a steady trickle (with dedup keys, so that dedup expiry has work)
# until retention has dropped a segment and the consumer lost events to it.
sub trickle_until_dropped
{
	my ($label, $timeout) = @_;
	my $deadline = time + $timeout;
	my $start = sq('evil_db', q{SELECT coalesce(min(first_seq), 0) FROM streamguard.stream_partitions WHERE stream = 'ret'});
	my $i = 0;
	while (time < $deadline)
	{
		$i++;
		sq('evil_db', qq{SELECT count(*) FROM streamguard.append_batch('ret',
			ARRAY['{"n": $i}'::jsonb, '{"n": $i}'::jsonb], dedup_keys => ARRAY['a$i-$label', 'b$i-$label'],
			partitions => ARRAY[0, 1])});
		my $now = sq('evil_db', q{SELECT coalesce(min(first_seq), 0) FROM streamguard.stream_partitions WHERE stream = 'ret'});
		return 1 if $now > $start + 2;
		usleep(250_000);
	}
	diag("$label: no segment was dropped in $timeout s: "
		  . sq('evil_db', q{SELECT stream || ' segments ' || segments || ' first ' || first_seq || ' last ' || last_seq FROM streamguard.streams}));
	return 0;
}

# workers started from now on connect with the poisoned settings: restart
# the pipeline's worker
sq('evil_db', q{SELECT streamguard.pause_pipeline('p_ret'); SELECT streamguard.resume_pipeline('p_ret')});
ok(trickle_until_dropped('before restart', 30), '(a) retention drops segments of evil_db (before a restart)');
ok( sec_wait($node, q{SELECT count(DISTINCT seq) > 4 FROM public.ret_sink}, 't', 30, dbname => 'evil_db'),
	'(a) the pipeline processed batches');
sec_assert_no_escalation($node, role => 'attacker', schema => 'evil', tag => 'db', dbname => 'evil_db',
	name => '(a) database search_path, running workers');

# a restart: the maintenance worker and the pipeline worker connect anew
$node->restart;
ok(sec_wait($node, q{SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = 'evil_db'
	AND backend_type <> 'client backend'}, 't', 30), '(a) evil_db has background workers again');
ok(trickle_until_dropped('after restart', 30), '(a) retention drops segments of evil_db after the restart');
# dedup keys older than the window expire; supervision runs every round
ok( sec_wait($node, q{SELECT count(*) > 0 FROM streamguard.pipelines WHERE pipeline = 'p_ret'
	AND worker_pid IS NOT NULL}, 't', 30, dbname => 'evil_db'), '(a) the pipeline runs after the restart');
sec_assert_no_escalation($node, role => 'attacker', schema => 'evil', tag => 'db', dbname => 'evil_db',
	name => '(a) database search_path, after a restart');

# ================================================================ (b) role

$node->safe_psql('postgres', q{
CREATE ROLE attacker2 LOGIN;
CREATE DATABASE evil_db2;
GRANT CREATE ON DATABASE evil_db2 TO attacker2;
});
sq('evil_db2', q{
CREATE EXTENSION streamguard;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO attacker2;
SELECT streamguard.create_stream('theirs', 2, dedup_window => '1 second');
SELECT streamguard.grant_stream('theirs', 'attacker2', 'all');
SELECT count(*) FROM streamguard.append_batch('theirs', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20) g));
});
expect_ok($node, 'CREATE SCHEMA evil2',
	'(b) attacker2 creates schema evil2', user => 'attacker2', dbname => 'evil_db2');
sec_install_evil($node, role => 'attacker2', schema => 'evil2', tag => 'role', dbname => 'evil_db2');
expect_ok($node, 'ALTER ROLE attacker2 IN DATABASE evil_db2 SET search_path = evil2, pg_catalog',
	'(b) attacker2 sets its own search_path in evil_db2', user => 'attacker2', dbname => 'evil_db2');
is((try_psql($node, 'SHOW search_path', user => 'attacker2', dbname => 'evil_db2'))[1], 'evil2, pg_catalog',
	'(b) ... which its sessions there use');

# every entry point, in attacker2's sessions, on its own stream and on a
# stream of the superuser's that it was granted
my @calls = (
	[ 'create_stream', q{SELECT streamguard.create_stream('mine', 2, retention => '1 hour')} ],
	[ 'grant_stream', q{SELECT streamguard.grant_stream('mine', 'attacker', 'read')} ],
	[ 'revoke_stream', q{SELECT streamguard.revoke_stream('mine', 'attacker', 'read')} ],
	[ 'append', q{SELECT streamguard.append('mine', '{"a": 1}', key => 'k', dedup_key => 'd1')} ],
	[ 'append duplicate', q{SELECT streamguard.append('mine', '{"a": 1}', dedup_key => 'd1')} ],
	[ 'append_batch', q{SELECT count(*) FROM streamguard.append_batch('mine',
		ARRAY['{"a": 2}'::jsonb, '{"a": 3}'::jsonb], keys => ARRAY['x', 'y'], dedup_keys => ARRAY['d2', 'd1'])} ],
	[ 'append to a granted stream', q{SELECT streamguard.append('theirs', '{"a": 1}', dedup_key => 'z1')} ],
	[ 'poll', q{SELECT count(*) FROM streamguard.poll('mine', 'c', 10)} ],
	[ 'poll a granted stream', q{SELECT count(*) FROM streamguard.poll('theirs', 'c', 10)} ],
	[ 'seek by seq', q{SELECT streamguard.seek('theirs', 'c2', 0, 2)} ],
	[ 'seek by time', q{SELECT streamguard.seek('theirs', 'c3', now() - interval '1 hour')} ],
	[ 'read', q{SELECT count(*) FROM streamguard.read('theirs', 0, 0, 10)} ],
	[ 'drop_consumer', q{SELECT streamguard.drop_consumer('theirs', 'c2')} ],
	[ 'create_pipeline', q{CREATE TABLE evil2.psink (seq bigint);
		SELECT streamguard.create_pipeline('p_role', 'theirs', $$INSERT INTO evil2.psink SELECT seq FROM batch$$,
		dedup => true, error_policy => 'dead_letter')} ],
	[ 'alter_pipeline', q{SELECT streamguard.alter_pipeline('p_role', batch_size => 5)} ],
	[ 'pause_pipeline', q{SELECT streamguard.pause_pipeline('p_role')} ],
	[ 'reset_pipeline', q{SELECT streamguard.reset_pipeline('p_role', seq => 1)} ],
	[ 'resume_pipeline', q{SELECT streamguard.resume_pipeline('p_role')} ],
	[ 'purge_dead_letters', q{SELECT streamguard.purge_dead_letters('p_role', interval '1 second')} ],
	[ 'views', q{SELECT count(*) FROM streamguard.streams; SELECT count(*) FROM streamguard.consumers;
		SELECT count(*) FROM streamguard.pipelines; SELECT count(*) FROM streamguard.stream_partitions;
		SELECT count(*) FROM streamguard.pipeline_batches; SELECT count(*) FROM streamguard.dead_letters;
		SELECT count(*) FROM streamguard.remote_status} ],
);
for my $c (@calls)
{
	expect_ok($node, $c->[1], "(b) attacker2 calls $c->[0] with its poisoned search_path",
		user => 'attacker2', dbname => 'evil_db2');
}
ok(sec_wait($node, q{SELECT count(*) > 0 FROM evil2.psink}, 't', 30, dbname => 'evil_db2'),
	'(b) attacker2\'s pipeline runs');
for my $c ([ 'drop_pipeline', q{SELECT streamguard.drop_pipeline('p_role')} ],
	[ 'drop_stream', q{SELECT streamguard.drop_consumer('mine', 'c'); SELECT streamguard.drop_stream('mine')} ])
{
	expect_ok($node, $c->[1], "(b) attacker2 calls $c->[0] with its poisoned search_path",
		user => 'attacker2', dbname => 'evil_db2');
}
is(sec_val($node, q{SELECT count(*) > 0 FROM evil2.evil_calls WHERE who = 'attacker2'}, dbname => 'evil_db2'), 't',
	'(b) the look-alikes were live in attacker2\'s sessions (called as attacker2)');
sec_assert_no_escalation($node, role => 'attacker2', schema => 'evil2', tag => 'role', dbname => 'evil_db2',
	name => '(b) role search_path in its own sessions');

# and the first attack once more, after all of this
sec_assert_no_escalation($node, role => 'attacker', schema => 'evil', tag => 'db', dbname => 'evil_db',
	name => '(a) database search_path, at the end');
is(sec_val($node, q{SELECT coalesce(string_agg(rolname, ','), '') FROM pg_roles WHERE rolsuper AND oid <> 10}),
	'', 'no role but the bootstrap superuser is a superuser');

diag(sprintf('duration %.0f s', time - $t_start));
$node->stop;
done_testing();
