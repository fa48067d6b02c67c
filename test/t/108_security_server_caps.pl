
# Security attack suite, part 8: server-wide resources (docs/security.md,
# "Server-wide resources").  Background worker slots and the consumer group
# member table are shared by every database of the server; one role must
# not take them from the others.
#
# Threats and cases (max_worker_processes = 16, so streamguard may hold 12
# slots, a database 9, a role 6):
#  (workers) role A, with read on one stream of db1, asks for a pipeline
#           of 8 workers (refused: more than its cap could ever run), then
#           runs 2 pipelines x 6 workers: 6 run, the other pipeline waits
#           and says why (pipelines.worker_status, the server log).  Role
#           B's pipeline in db2 still gets its worker.  Role C's pipeline
#           of 4 workers in db1 gets what the server cap leaves (2) and the
#           rest waits.  Parallel query in db1 still gets workers (the
#           reserve).  worker_slots shows the use against the caps, to
#           every role.  Pausing A's running pipeline lets its waiting one
#           start.  A backfill of a table A captures waits while A's
#           pipelines hold its cap, and runs once they are gone.
#  (groups) streamguard.max_group_members = 16 (a role may hold 4, a
#           database 8): role A sets a lease beyond streamguard.max_group_lease
#           (refused), then joins with as many member names as it can under
#           a long lease; role C in db1 fills the database's share; role B's
#           group poll in db2 still works.
#  (tables) the stream, partition and pipeline slots: one database takes
#           at most three quarters of each, superusers included; another
#           database still creates and runs; ALTER DATABASE ... SET raises
#           a database's share.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time);

my $t_start = time;

my $node = sg_node('sec107', extra => "max_worker_processes = 16\n"
	  . "max_parallel_workers = 8\n"
	  . "streamguard.max_group_members = 16\n"
	  . "streamguard.max_group_lease = '10min'\n");

for my $db (qw(db1 db2))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
CREATE EXTENSION streamguard;
CREATE TABLE public.sink (seq bigint);
GRANT INSERT ON public.sink TO PUBLIC;
SELECT streamguard.create_stream('s', 8);
});
}
$node->safe_psql('postgres', q{CREATE ROLE role_a LOGIN; CREATE ROLE role_b LOGIN; CREATE ROLE role_c LOGIN; CREATE ROLE role_d LOGIN});
$node->safe_psql('db1', q{SELECT streamguard.grant_stream('s', 'role_a', 'read');
SELECT streamguard.grant_stream('s', 'role_c', 'read');
SELECT streamguard.grant_stream('s', 'role_d', 'read')});
$node->safe_psql('db2', q{SELECT streamguard.grant_stream('s', 'role_b', 'read')});

# open_session($db, $user, $sql): a psql session that runs $sql (going on
# after errors) and stays open (what it joined stays joined); {ready} once
# it ran it
sub open_session
{
	my ($db, $user, $sql) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=0', '-d', $node->connstr($db) . " user=$user" ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(300));
	$in .= $sql . "SELECT 'ready';\n";
	my $deadline = time + 120;
	$h->pump while $out !~ /^ready$/m && $h->pumpable && time < $deadline;
	return { h => $h, in => \$in, out => \$out, err => \$err, ready => scalar($out =~ /^ready$/m) };
}

# ================================================================ (workers)

my $sink = q{$$INSERT INTO public.sink SELECT seq FROM batch$$};
my $server = q{SELECT workers || '/' || cap || '/' || reserved FROM streamguard.worker_slots WHERE scope = 'server'};

is($node->safe_psql('db1', q{SELECT cap || ' ' || reserved FROM streamguard.worker_slots WHERE scope = 'server'}),
	'12 4', '(workers) streamguard may hold 12 of 16 slots, 4 are reserved');
for my $g (qw(reserved_worker_processes database_max_workers role_max_workers))
{
	is($node->safe_psql('db1', "SELECT context FROM pg_settings WHERE name = 'streamguard.$g'"), 'sighup',
		"(workers) streamguard.$g is set in the server's configuration");
}

expect_error($node, qq{SELECT streamguard.create_pipeline('a_big', 's', $sink, workers => 8)},
	'53400', qr/8 workers could never run.*per-role cap is 6/s,
	'(workers) role A: a pipeline of 8 workers, over its cap of 6', dbname => 'db1', user => 'role_a');
expect_ok($node, qq{SELECT streamguard.create_pipeline('a1', 's', $sink, workers => 6)},
	'(workers) role A creates a1, 6 workers', dbname => 'db1', user => 'role_a');
ok(wait_for_value($node, q{SELECT count(worker_pid) FROM streamguard.pipeline_workers WHERE pipeline = 'a1'},
		'6', 120, dbname => 'db1'), '(workers) a1 runs its 6 workers');
my $off = log_offset($node);
expect_ok($node, qq{SELECT streamguard.create_pipeline('a2', 's', $sink, workers => 6)},
	'(workers) role A creates a2, 6 more workers (its pipeline quota allows 16)', dbname => 'db1', user => 'role_a');
ok(wait_for_value($node, q{SELECT worker_status FROM streamguard.pipelines WHERE pipeline = 'a2'},
		'waiting for a worker slot: per-role cap 6 reached', 120, dbname => 'db1', user => 'role_a'),
	'(workers) a2 waits and says so: per-role cap 6 reached');
ok(wait_log($node, qr/streamguard pipeline \d+ waits for a worker slot: per-role cap 6 reached/, $off, 60),
	'(workers) ... and the server log says so');
is($node->safe_psql('db1', q{SELECT count(worker_pid) FROM streamguard.pipeline_workers WHERE pipeline = 'a2'}),
	'0', '(workers) a2 has no worker');

expect_ok($node, qq{SELECT streamguard.create_pipeline('b1', 's', $sink)},
	'(workers) role B creates b1 in db2', dbname => 'db2', user => 'role_b');
ok(wait_for_value($node, q{SELECT worker_status FROM streamguard.pipelines WHERE pipeline = 'b1'},
		'running', 120, dbname => 'db2', user => 'role_b'),
	"(workers) role B's pipeline in another database gets its worker");

expect_ok($node, qq{SELECT streamguard.create_pipeline('c1', 's', $sink, workers => 4)},
	'(workers) role C creates c1 in db1, 4 workers', dbname => 'db1', user => 'role_c');
ok(wait_for_value($node, q{SELECT count(worker_pid) || ' ' || count(*) FILTER (WHERE worker_status LIKE 'waiting for a worker slot: server cap 12 reached%')
	FROM streamguard.pipeline_workers WHERE pipeline = 'c1'}, '2 2', 120, dbname => 'db1'),
	'(workers) c1 gets the 2 slots the server cap leaves; 2 workers wait on the server cap');
is($node->safe_psql('db1', $server), '12/12/4', '(workers) streamguard holds its 12 slots, no more');

# parallel query in db1 still finds workers: the 4 reserved slots, less the
# logical replication launcher's
{
	my ($ok, $out, $err) = try_psql($node, q{CREATE TABLE public.big AS SELECT g FROM generate_series(1, 200000) g;
ANALYZE public.big;
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM public.big}, dbname => 'db1');
	my ($launched) = ($out // '') =~ /Workers Launched: (\d+)/;
	ok($ok && defined $launched && $launched >= 1,
		'(workers) parallel query in db1 still launches workers (' . ($launched // 'none') . ')')
	  or diag("$out\n$err");
}

# the view: counts for everyone, against the caps
{
	my ($ok, $out, $err) = try_psql($node, q{SELECT scope || ':' || coalesce(name, '') || ':' || workers || ':' || coalesce(cap::text, '')
	FROM streamguard.worker_slots WHERE scope <> 'server' ORDER BY scope, name}, dbname => 'db2', user => 'role_b');
	is($out, join("\n", 'database:db1:8:9', 'database:db2:1:9', 'role:role_a:6:6', 'role:role_b:1:6', 'role:role_c:2:6'),
		'(workers) worker_slots shows every database and role against its cap, to role B in db2') or diag($err);
}

# a slot frees: the waiting pipeline starts
expect_ok($node, q{SELECT streamguard.pause_pipeline('a1')}, '(workers) role A pauses a1',
	dbname => 'db1', user => 'role_a');
ok(wait_for_value($node, q{SELECT count(worker_pid) FROM streamguard.pipeline_workers WHERE pipeline = 'a2'},
		'6', 120, dbname => 'db1'), '(workers) a2 starts its 6 workers once a1 let go of them');
is($node->safe_psql('db1', $server), '12/12/4', '(workers) ... and streamguard still holds 12 slots, no more');

# backfill workers count too: with A at its cap, the backfill of a table A
# captures waits, and runs once A's pipeline is gone
$node->safe_psql('db1', q{GRANT CREATE ON SCHEMA public TO role_a; SELECT streamguard.grant_stream('s', 'role_a', 'append')});
$off = log_offset($node);
expect_ok($node, q{CREATE TABLE public.acct (id int PRIMARY KEY, v int);
INSERT INTO public.acct SELECT g, g FROM generate_series(1, 100) g;
SELECT streamguard.capture_table('public.acct', 's');}, '(workers) role A captures a table of 100 rows',
	dbname => 'db1', user => 'role_a');
ok(wait_log($node, qr/streamguard backfill \d+ waits for a worker slot: per-role cap 6 reached/, $off, 60),
	"(workers) its backfill waits for a worker slot: the role's pipelines hold its cap");
is($node->safe_psql('db1', q{SELECT backfill_state FROM streamguard.captures}), 'pending',
	'(workers) ... and has not started');
$node->safe_psql('db1', q{SELECT streamguard.drop_pipeline('a2')});
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures}, 'done', 120, dbname => 'db1'),
	'(workers) the backfill runs once the pipeline gave its slots back');

# a pipeline that fits but finds the cap full waits; alter beyond the cap is refused
expect_error($node, q{SELECT streamguard.alter_pipeline('c1', workers => 7)},
	'53400', qr/7 workers could never run.*per-role cap is 6/s,
	'(workers) alter_pipeline to 7 workers, over the per-role cap of 6', dbname => 'db1', user => 'role_c');

for my $p (qw(a1 c1))
{
	$node->safe_psql('db1', "SELECT streamguard.drop_pipeline('$p')");
}
$node->safe_psql('db2', "SELECT streamguard.drop_pipeline('b1')");
ok(wait_for_value($node, q{SELECT count(*) FROM streamguard.worker_slots WHERE scope <> 'server'}, '0', 120,
		dbname => 'db1'), '(workers) dropped pipelines give their units back');

# ================================================================= (groups)

expect_error($node, q{SET streamguard.group_lease = '20min'}, '22023', qr/max_group_lease/,
	'(groups) role A sets a lease beyond streamguard.max_group_lease', dbname => 'db1', user => 'role_a');
is($node->safe_psql('db1', "SELECT context FROM pg_settings WHERE name = 'streamguard.max_group_lease'"),
	'superuser', '(groups) streamguard.max_group_lease is superuser-only');
{
	# one session: a long lease, then as many member names as it can take
	my $sql = "SET streamguard.group_lease = '10min';\n";
	$sql .= "SELECT count(*) FROM streamguard.poll('s', 'g', 1, member => 'm$_');\n" for 1 .. 16;
	my ($ok, $out, $err) = try_psql($node, $sql, dbname => 'db1', user => 'role_a');
	like($err, qr/role "role_a" holds too many consumer group members.*role_max_group_members is 4/s,
		'(groups) role A is stopped at its cap of 4 member entries');
	is($node->safe_psql('db1', q{SELECT count(*) FROM streamguard._group_members()}), '0',
		'(groups) ... whose entries went with its session');
}
{
	# long-lived sessions that keep their entries: A tries to take all 16
	# entries and keeps 4, C takes 4 more (db1 holds 8, its share)
	my $a = open_session('db1', 'role_a', "SET streamguard.group_lease = '10min';\n"
		  . join('', map { "SELECT count(*) FROM streamguard.poll('s', 'g', 1, member => 'a$_');\n" } 1 .. 16));
	my $c = open_session('db1', 'role_c',
		join('', map { "SELECT count(*) FROM streamguard.poll('s', 'g', 1, member => 'c$_');\n" } 1 .. 4));
	ok($a->{ready} && $c->{ready}, '(groups) roles A and C joined what they could') or diag("${$a->{err}} ${$c->{err}}");
	is($node->safe_psql('db1', q{SELECT count(*) || ' ' || max(lease_expires_at - last_poll_at) FILTER (WHERE member LIKE 'a%')
	FROM streamguard.consumer_group_members}), '8 00:10:00', '(groups) db1 holds 8 member entries, A\'s with a 10-minute lease');
	expect_error($node, q{SELECT count(*) FROM streamguard.poll('s', 'g', 1, member => 'd1')}, '53400',
		qr/too many consumer group members in this database.*database_max_group_members is 8/s,
		'(groups) role D in db1: the database holds its share of 8', dbname => 'db1', user => 'role_d');
	expect_ok($node, q{SELECT count(*) FROM streamguard.poll('s', 'g', 1, member => 'b1')},
		"(groups) role B's group poll in db2 works", dbname => 'db2', user => 'role_b');
	# a lease from ALTER ROLE ... SET beyond the bound is cut to it
	$node->safe_psql('postgres', q{ALTER ROLE role_b SET streamguard.group_lease = '1h'});
	my ($ok, $out, $err) = try_psql($node, q{SELECT count(*) FROM streamguard.poll('s', 'g', 1, member => 'b2');
SELECT max(lease_expires_at - last_poll_at) FROM streamguard.consumer_group_members WHERE member = 'b2'},
		dbname => 'db2', user => 'role_b');
	is((split /\n/, $out)[-1] // '', '00:10:00',
		'(groups) role B polls with a lease of 1h from ALTER ROLE: cut to streamguard.max_group_lease') or diag($err);
	for my $s ($a, $c)
	{
		${$s->{in}} .= "\\q\n";
		$s->{h}->finish;
	}
}

$node->stop;

# ================================================================= (tables)
# the stream, partition and pipeline slots of shared memory: one database
# may take three quarters of each (8 streams, 16 partitions, 8 pipeline
# workers on this server: 6, 12 and 6)

$node = sg_node('sec107t', extra => "streamguard.max_streams = 8\n"
	  . "streamguard.max_partitions = 16\n"
	  . "streamguard.max_pipelines = 8\n");
for my $db (qw(db1 db2))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{CREATE EXTENSION streamguard; CREATE TABLE public.sink (seq bigint)});
}
expect_ok($node, join('', map { "SELECT streamguard.create_stream('t$_', 1);\n" } 1 .. 6),
	'(tables) db1 creates 6 streams', dbname => 'db1');
expect_error($node, q{SELECT streamguard.create_stream('t7', 1)}, '53400',
	qr/database "db1" may hold at most 6 streams.*database_max_streams/s,
	'(tables) a 7th stream in db1, over its share of the 8 stream slots (superusers too)', dbname => 'db1');
expect_ok($node, q{SELECT streamguard.create_stream('u1', 11)}, '(tables) db2 still creates a stream of 11 partitions',
	dbname => 'db2');
expect_error($node, q{SELECT streamguard.create_stream('u2', 2)}, '53400',
	qr/database "db2" may hold at most 12 stream partitions.*database_max_partitions/s,
	'(tables) 2 more partitions in db2, over its share of the 16 partition slots', dbname => 'db2');
expect_error($node, q{SELECT streamguard.alter_stream('u1', partitions => 13)}, '53400',
	qr/at most 12 stream partitions/, '(tables) alter_stream to 13 partitions, over the share', dbname => 'db2');
expect_ok($node, q{SELECT streamguard.create_pipeline('pa', 't1', $$INSERT INTO public.sink SELECT seq FROM batch$$, workers => 6)},
	'(tables) db1 creates a pipeline of 6 workers', dbname => 'db1');
expect_error($node, q{SELECT streamguard.create_pipeline('pb', 't2', $$INSERT INTO public.sink SELECT seq FROM batch$$)},
	'53400', qr/database "db1" may hold at most 6 pipeline workers.*database_max_pipelines/s,
	'(tables) a 7th pipeline worker in db1, over its share of the 8 pipeline slots', dbname => 'db1');
expect_ok($node, q{SELECT streamguard.create_pipeline('pc', 'u1', $$INSERT INTO public.sink SELECT seq FROM batch$$)},
	'(tables) db2 still creates a pipeline', dbname => 'db2');
ok(wait_for_value($node, q{SELECT worker_status FROM streamguard.pipelines WHERE pipeline = 'pc'}, 'running', 120,
		dbname => 'db2'), "(tables) ... which runs");
$node->safe_psql('postgres', q{ALTER DATABASE db1 SET streamguard.database_max_streams = 7});
expect_ok($node, q{SELECT streamguard.create_stream('t7', 1)},
	'(tables) a superuser raises the share of db1 with ALTER DATABASE ... SET: a 7th stream', dbname => 'db1');
is($node->safe_psql('db1', "SELECT context FROM pg_settings WHERE name = 'streamguard.database_max_streams'"),
	'superuser', '(tables) streamguard.database_max_streams is superuser-only');
$node->stop;

diag(sprintf('duration %.0f s', time - $t_start));
done_testing();
