
# Security attack suite, part 3: quotas and exhaustion of shared resources
# (docs/security.md, "Limits: nobody exhausts what others need").
#
# Threats and cases:
#  (quota)  one ordinary role takes every stream / partition / pipeline
#           slot of the cluster and locks everyone else out.  Per-role
#           limits, superuser-only settings (PGC_SUSET, set per role with
#           ALTER ROLE by a superuser): streamguard.role_max_streams (64),
#           streamguard.role_max_partitions (1024),
#           streamguard.role_max_pipelines (16); -1 unlimited; superusers
#           exempt.  Exceeding one: 53400 naming the role and the limit.
#           The role cannot raise its own limit (SET: 42501).
#  (leak)   create_stream + append in transactions that roll back, over and
#           over: the shared-memory slots must be reclaimed on abort, or
#           a few rollbacks exhaust the cluster.  Afterwards another role
#           still creates and uses a stream, the views work for everyone,
#           drop_stream works.
#  (full)   with the stream slots exhausted (max_streams = 4, six streams
#           touched), the views must still list every stream (they must
#           not fail for everyone) and each stream can still be dropped.
#  (slots)  more running pipelines than background worker slots: the
#           pipelines without a worker say so in pipelines.worker_status
#           ('waiting for a worker slot', with the cap that holds it back
#           when it is streamguard's own, 107), and the server log is not
#           flooded (the "no background worker slot" line at most twice
#           per pipeline over 5 seconds).

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

# ================================================================ (quota)

my $node = sg_node('sec102a', extra => "streamguard.max_partitions=2048\n");
my $cs = 'streamguard.create_stream(text, int, interval, interval, interval)';
$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE attacker LOGIN;
CREATE ROLE other LOGIN;
GRANT EXECUTE ON FUNCTION $cs TO attacker, other;
CREATE TABLE public.q_sink (seq bigint);
GRANT INSERT ON public.q_sink TO PUBLIC;
});

for my $g ([ 'role_max_streams', 64 ], [ 'role_max_partitions', 1024 ], [ 'role_max_pipelines', 16 ])
{
	my ($ok, $out, $err) = try_psql($node, "SHOW streamguard.$g->[0]");
	is($out, $g->[1], "(quota) streamguard.$g->[0] defaults to $g->[1]") or diag($err);
	($ok, $out, $err) = try_psql($node, "SELECT context FROM pg_settings WHERE name = 'streamguard.$g->[0]'");
	is($out, 'superuser', "(quota) streamguard.$g->[0] is superuser-only (PGC_SUSET)");
}

sub alter_role
{
	my ($sql) = @_;
	expect_ok($node, $sql, "(quota) superuser: $sql");
}

# as attacker, under streamguard.$setting = $limit: $ok_sql works,
# $over_sql goes over the limit and fails with 53400 naming both
sub quota_case
{
	my ($setting, $limit, $ok_sql, $ok_name, $over_sql, $over_name) = @_;
	expect_ok($node, $ok_sql, "(quota) $ok_name", user => 'attacker');
	expect_error($node, $over_sql, '53400',
		qr/attacker.*($setting|\b$limit\b)|($setting|\b$limit\b).*attacker/s,
		"(quota) $over_name", user => 'attacker');
}

alter_role('ALTER ROLE attacker SET streamguard.role_max_partitions = 8');
quota_case('role_max_partitions', 8,
	q{SELECT streamguard.create_stream('qa', 8)}, 'attacker creates a stream of 8 partitions (its limit)',
	q{SELECT streamguard.create_stream('qb', 1)}, 'one partition more than streamguard.role_max_partitions = 8');
expect_error($node, q{SET streamguard.role_max_partitions = 100}, '42501', qr/role_max_partitions/,
	'(quota) attacker raises its own role_max_partitions', user => 'attacker');
expect_error($node, q{SET streamguard.role_max_streams = -1}, '42501', qr/role_max_streams/,
	'(quota) attacker raises its own role_max_streams', user => 'attacker');

alter_role('ALTER ROLE attacker SET streamguard.role_max_partitions = -1');
alter_role('ALTER ROLE attacker SET streamguard.role_max_streams = 2');
quota_case('role_max_streams', 2,
	q{SELECT streamguard.create_stream('qc', 1)}, 'attacker creates its second stream (role_max_streams = 2)',
	q{SELECT streamguard.create_stream('qd', 1)}, 'a third stream, over streamguard.role_max_streams = 2');

alter_role('ALTER ROLE attacker SET streamguard.role_max_pipelines = 1');
quota_case('role_max_pipelines', 1,
	q{SELECT streamguard.create_pipeline('pq1', 'qa', $$INSERT INTO public.q_sink SELECT seq FROM batch$$)},
	'attacker creates its one pipeline (role_max_pipelines = 1)',
	q{SELECT streamguard.create_pipeline('pq2', 'qc', $$INSERT INTO public.q_sink SELECT seq FROM batch$$)},
	'a second pipeline, over streamguard.role_max_pipelines = 1');
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.pipelines WHERE pipeline = 'pq2'}), 0,
	'(quota) ... which left nothing behind');
# each worker of a pipeline counts: a pipeline with more workers than the
# quota, and an alter that raises the workers over it, are refused
alter_role('ALTER ROLE attacker SET streamguard.role_max_pipelines = 3');
expect_error($node, q{SELECT streamguard.create_pipeline('pq3', 'qc', $$INSERT INTO public.q_sink SELECT seq FROM batch$$, workers => 3)},
	'53400', qr/attacker.*at most 3 pipeline workers/s,
	'(quota) a pipeline of 3 workers next to one of 1, over role_max_pipelines = 3', user => 'attacker');
expect_error($node, q{SELECT streamguard.alter_pipeline('pq1', workers => 4)}, '53400',
	qr/attacker.*at most 3 pipeline workers/s, '(quota) alter_pipeline to 4 workers, over role_max_pipelines = 3',
	user => 'attacker');
is($node->safe_psql('postgres', q{SELECT workers FROM streamguard.pipelines WHERE pipeline = 'pq1'}), '1',
	'(quota) ... which left the worker count alone');
expect_ok($node, q{SELECT streamguard.alter_pipeline('pq1', workers => 3)},
	'(quota) alter_pipeline to 3 workers, within role_max_pipelines = 3', user => 'attacker');
{
	# superusers are exempt
	expect_ok($node, q{SET streamguard.role_max_streams = 0;
SET streamguard.role_max_partitions = 0;
SELECT streamguard.create_stream('su_exempt', 4);
SELECT streamguard.drop_stream('su_exempt');},
		'(quota) a superuser is exempt from the per-role limits');
}
# clean up (whatever of it exists)
try_psql($node, $_) for (q{ALTER ROLE attacker RESET ALL}, q{SELECT streamguard.drop_stream('qa', force => true)},
	q{SELECT streamguard.drop_stream('qc', force => true)});

# ================================================================= (leak)

expect_ok($node, q{SELECT streamguard.create_stream('keep', 2);
SELECT streamguard.append('keep', '{}');},
	'(leak) the superuser creates and appends to stream keep');
my $leak_ok = 0;
my $leak_err = '';
for my $i (1 .. 10)
{
	my ($ok, $out, $err) = try_psql($node, q{BEGIN;
SELECT streamguard.create_stream('big', 1000);
SELECT streamguard.append('big', '{"x": 1}', partition => 999);
ROLLBACK;}, user => 'attacker');
	$leak_ok++ if $ok;
	$leak_err = $err unless $ok;
}
is($leak_ok, 10, '(leak) ten create_stream(big, 1000) + append + ROLLBACK all ran') or diag($leak_err);
{
	# 100 partitions: more than what is left of the 2048 if rolled-back
	# streams kept theirs
	my ($ok, $out, $err) = try_psql($node, q{SELECT streamguard.create_stream('after', 100);
SELECT streamguard.append('after', '{"y": 1}', partition => 99);
SELECT count(*) FROM streamguard.poll('after', 'c');}, user => 'other');
	ok($ok && $out =~ /\b1$/, '(leak) afterwards another role creates, appends to and polls a stream') or diag("$out $err");
}
for my $who (qw(attacker other), undef)
{
	expect_ok($node, q{SELECT count(*) FROM streamguard.streams;
SELECT count(*) FROM streamguard.consumers; SELECT count(*) FROM streamguard.stream_partitions;},
		'(leak) the stream views work for ' . ($who // 'the superuser'), $who ? (user => $who) : ());
}
expect_ok($node, q{SELECT streamguard.drop_stream('keep')}, '(leak) drop_stream of an existing stream works');
is((try_psql($node, q{SELECT count(*) FROM streamguard.streams WHERE stream = 'big'}))[1], '0',
	'(leak) no trace of the rolled-back stream');
$node->stop;

# ================================================================= (full)

# (the database may hold more streams than the server has slots: a stream
# takes its slot when used)
$node = sg_node('sec102b', extra => "streamguard.max_streams=4\nstreamguard.database_max_streams=10\n");
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
{
	my ($created, $appended, $refused, $other) = (0, 0, 0, '');
	for my $i (1 .. 6)
	{
		my ($ok, $out, $err) = try_psql($node, "SELECT streamguard.create_stream('x$i', 2)");
		$created++ if $ok;
		($ok, $out, $err) = try_psql($node, "SELECT streamguard.append('x$i', '{}')");
		if ($ok) { $appended++ }
		elsif (sqlstate($err) eq '53400') { $refused++ }
		else { $other .= $err }
	}
	is($created, 6, '(full) six streams created with streamguard.max_streams = 4');
	is($other, '', '(full) every append either worked or was refused with 53400');
	note("(full) appends: $appended worked, $refused refused with 53400");
	my ($ok, $out, $err) = try_psql($node, 'SELECT count(*) FROM streamguard.streams');
	is($out, '6', '(full) streamguard.streams works and lists all six') or diag($err);
	expect_ok($node, q{SELECT count(*) FROM streamguard.stream_partitions;
SELECT count(*) FROM streamguard.consumers; SELECT count(*) FROM streamguard.pipelines;}, '(full) the other views work too');
	my $dropped = 0;
	my $derr = '';
	for my $i (1 .. 6)
	{
		($ok, $out, $err) = try_psql($node, "SELECT streamguard.drop_stream('x$i')");
		$dropped++ if $ok;
		$derr .= $err unless $ok;
	}
	is($dropped, 6, '(full) each of the six streams can be dropped') or diag($derr);
	($ok, $out, $err) = try_psql($node, q{SELECT streamguard.create_stream('y', 1); SELECT (streamguard.append('y', '{}')).seq});
	is((split /\n/, $out)[-1] // '', '1', '(full) after the drops a new stream gets a slot') or diag($err);
}
$node->stop;

# ================================================================ (slots)

# 4 worker processes: the streamguard launcher, the maintenance worker of
# postgres and the logical replication launcher leave one for pipelines
$node = sg_node('sec102c', extra => "max_worker_processes=4\n");
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
expect_ok($node, q{
CREATE TABLE public.w_sink (seq bigint);
SELECT streamguard.create_stream('w', 1);
SELECT streamguard.create_pipeline('pw1', 'w', $$INSERT INTO public.w_sink SELECT seq FROM batch$$);
SELECT streamguard.create_pipeline('pw2', 'w', $$INSERT INTO public.w_sink SELECT seq FROM batch$$);
SELECT streamguard.create_pipeline('pw3', 'w', $$INSERT INTO public.w_sink SELECT seq FROM batch$$);
SELECT streamguard.create_pipeline('pw4', 'w', $$INSERT INTO public.w_sink SELECT seq FROM batch$$);
}, '(slots) four pipelines created');
ok( wait_for_value($node, q{SELECT count(worker_pid) >= 1 AND count(*) - count(worker_pid) >= 1
	FROM streamguard.pipelines WHERE state = 'running'}, 't', 30),
	'(slots) some pipelines have a worker, some are left without one');
{
	my ($ok, $out, $err) = try_psql($node, q{SELECT count(*) FILTER (WHERE worker_pid IS NULL),
	count(*) FILTER (WHERE worker_pid IS NULL AND worker_status LIKE 'waiting for a worker slot%'),
	count(*) FILTER (WHERE worker_pid IS NOT NULL AND worker_status LIKE 'waiting for a worker slot%')
	FROM streamguard.pipelines});
	my ($waiting, $labelled, $wrong) = split /\|/, ($out || '0|-1|-1');
	ok($ok && $waiting > 0 && $labelled == $waiting,
		"(slots) every pipeline without a worker ($waiting) has worker_status 'waiting for a worker slot'")
	  or diag("$out $err");
	is($wrong // -1, 0, '(slots) ... and no pipeline that has one');
	# the log over 5 seconds
	my $off = log_offset($node);
	my $t0 = time;
	usleep(100_000) while time < $t0 + 5;
	my $n = count_log($node, qr/no background worker slot/, $off);
	my $max = 2 * ($waiting || 3);
	cmp_ok($n, '<=', $max, "(slots) 'no background worker slot' logged $n times in 5 s (at most 2 per waiting pipeline)");
}
$node->stop;

diag(sprintf('duration %.0f s', time - $t_start));
done_testing();
