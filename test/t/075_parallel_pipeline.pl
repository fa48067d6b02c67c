
# Parallel pipelines (workers => N): the partitions of the source are shared
# among N workers (worker i owns the partitions p with p % N = i), each
# commits its own batches, and exactly once holds through worker crashes,
# changes of the worker count, pause/resume and an immediate restart.
#
#  (a) bad input: workers 0, 65, NULL; more than one worker with a Kafka
#      source (refused: its offsets are per pipeline);
#  (b) the pipeline_workers view: one row per worker, disjoint partitions
#      covering the stream, a process each;
#  (c) the workers run side by side: while worker 0 sleeps inside a batch
#      (an event asks the SQL to sleep), worker 1 commits a batch of its own
#      partitions, and a restart of worker 0 (terminated: kill -9 would
#      make the postmaster restart every process) does not fence worker 1
#      (its pid stays);
#  (d) under load from concurrent producers (some transactions rolled
#      back): kill -9 of single workers, workers 2 -> 3 -> 1 -> 4 with
#      alter_pipeline, pause/resume, an immediate restart; then every
#      committed event is in the sink exactly once, no rolled-back one, seqs
#      increase per partition in sink order, and the positions are at the
#      end of every partition.
# Every wait is bounded.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

# up to 4 workers of the pipeline under test, and the maintenance workers
my $node = sg_node('parallel', extra => "max_worker_processes = 24\n");
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');

sub val { return $node->safe_psql('postgres', $_[0]); }
sub wait_until { my ($sql, $want, $secs) = @_; return wait_for_value($node, $sql, $want, $secs // 60); }

# ------------------------------------------------------------ (a) bad input
val(q{SELECT streamguard.create_stream('orders', 4)});
val(q{CREATE TABLE sink (id bigserial PRIMARY KEY, part int, seq bigint, ev int)});

for my $case ([0, 'workers must be between 1 and 64, got 0'], [65, 'workers must be between 1 and 64, got 65'],
	['NULL', 'workers must not be NULL'])
{
	my ($w, $msg) = @$case;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1 FROM batch', workers => $w)");
	like($err, qr/\Q$msg\E/, "(a) create_pipeline workers => $w refused");
}
{
	# (remote PostgreSQL sources and sinks take several workers: 093_remote_workers.pl)
	val(q{CREATE SERVER kafka_x FOREIGN DATA WRAPPER streamguard_kafka OPTIONS (bootstrap_servers '127.0.0.1:1')});
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SELECT streamguard.create_pipeline('bad', 'topic', 'SELECT payload FROM batch',
			source_server => 'kafka_x', workers => 3)});
	like($err, qr/a pipeline with a Kafka source or sink runs with one worker/,
		'(a) three workers with a Kafka source refused');
	val(q{DROP SERVER kafka_x});
}

# ---------------------------------------------------------- (b) the view
val(q{SELECT streamguard.create_pipeline('par', 'orders',
	$$INSERT INTO sink (part, seq, ev)
	  SELECT b.partition, b.seq, (b.payload->>'ev')::int
	  FROM batch b, (SELECT pg_sleep(coalesce(max((payload->>'sleep')::float8), 0)) FROM batch) z
	  ORDER BY b.partition, b.seq$$,
	batch_size => 50, workers => 2)});
ok(wait_until(q{SELECT count(*) FILTER (WHERE worker_pid IS NOT NULL) FROM streamguard.pipeline_workers
	WHERE pipeline = 'par'}, '2', 60), '(b) two workers up');
is(val(q{SELECT string_agg(worker || ':' || partitions::text, ' ' ORDER BY worker)
	FROM streamguard.pipeline_workers WHERE pipeline = 'par'}),
	'0:{0,2} 1:{1,3}', '(b) worker 0 owns partitions 0 and 2, worker 1 owns 1 and 3');
is(val(q{SELECT workers FROM streamguard.pipelines WHERE pipeline = 'par'}), '2',
	'(b) the pipelines view shows the worker count');
{
	my ($ret, $out, $err) = $node->psql('postgres', q{SELECT streamguard.alter_pipeline('par', workers => 0)});
	like($err, qr/workers must be between 1 and 64, got 0/, '(b) alter_pipeline workers => 0 refused');
}

my $next_ev = 0;

sub append_events
{
	my ($n) = @_;
	my @sql;
	for (1 .. $n)
	{
		$next_ev++;
		push @sql, "SELECT streamguard.append('orders', '{\"ev\": $next_ev}', key => 'k$next_ev');";
	}
	val(join("\n", @sql));
}

# --------------------------------------------- (c) side by side, no cross-fencing
append_events(40);
ok(wait_until(q{SELECT count(*) FROM sink}, '40', 60), '(c) 40 events processed by two workers');

# worker 0 sleeps 10 s in a batch of partition 0; worker 1 meanwhile commits
# an event of partition 1 (appended once worker 0 is seen asleep: a loaded
# machine may take a while to start the batch)
val(q{SELECT streamguard.append('orders', '{"ev": 1000, "sleep": 10}', partition => 0)});
ok(wait_until(q{SELECT count(*) > 0 FROM pg_stat_activity
	WHERE backend_type = 'streamguard pipeline' AND wait_event = 'PgSleep'}, 't', 60),
	'(c) worker 0 is inside its sleeping batch');
val(q{SELECT streamguard.append('orders', '{"ev": 1001}', partition => 1)});
ok(wait_until(q{SELECT string_agg(ev::text, ',' ORDER BY ev) FROM sink WHERE ev >= 1000}, '1001', 9),
	'(c) worker 1 committed while worker 0 was inside its batch');
ok(wait_until(q{SELECT count(*) FROM sink WHERE ev >= 1000}, '2', 30), '(c) the sleeping batch commits too, once');

my $w1_pid = val(q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'par' AND worker = 1});
my $w0_pid = val(q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'par' AND worker = 0});
val(qq{SELECT pg_terminate_backend($w0_pid)});
ok(wait_until(qq{SELECT worker_pid IS NOT NULL AND worker_pid <> $w0_pid FROM streamguard.pipeline_workers
	WHERE pipeline = 'par' AND worker = 0}, 't', 60), '(c) worker 0 restarted after it was terminated');
append_events(20);
ok(wait_until(q{SELECT count(*) FROM sink}, '62', 60), '(c) the restarted worker 0 and worker 1 process the next events');
is(val(qq{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'par' AND worker = 1}), $w1_pid,
	'(c) worker 1 kept running: the restart of worker 0 did not fence it');

# --------------------------------------------------------------- (d) load
val(q{CREATE TABLE committed (ev int PRIMARY KEY)});
my $producer_sql = q{
\set k random(1, 1000000)
BEGIN;
SELECT nextval('evs') AS e \gset
SELECT streamguard.append('orders', format('{"ev": %s}', :e)::jsonb, key => 'key' || :k);
INSERT INTO committed VALUES (:e);
SELECT nextval('evs') AS f \gset
SELECT streamguard.append('orders', format('{"ev": %s}', :f)::jsonb, key => 'key' || (:k + 1));
INSERT INTO committed VALUES (:f);
END;
};
my $rollback_sql = q{
BEGIN;
SELECT nextval('evs') AS e \gset
SELECT streamguard.append('orders', format('{"ev": %s}', :e)::jsonb);
ROLLBACK;
};
val(q{CREATE SEQUENCE evs START 100000});
my $dir = PostgreSQL::Test::Utils::tempdir;
open(my $fh, '>', "$dir/commit.sql") or die;
print $fh $producer_sql;
close $fh;
open($fh, '>', "$dir/rollback.sql") or die;
print $fh $rollback_sql;
close $fh;
# the events of (b) and (c) count as committed too
val(q{INSERT INTO committed SELECT ev FROM sink});

my $port = $node->port;
my $host = $node->host;
my $secs = $ENV{SG_PARALLEL_SECONDS} // 25;
my $bindir = $node->config_data('--bindir');
my @pgbench = ("$bindir/pgbench", '-n', '-h', $host, '-p', $port, '-c', '3', '-j', '3', '-T', $secs,
	'-f', "$dir/commit.sql\@9", '-f', "$dir/rollback.sql\@1", 'postgres');
my $bench_out = "$dir/pgbench.out";
my $pid = fork();
die "fork: $!" unless defined $pid;
if ($pid == 0)
{
	open(STDOUT, '>', $bench_out);
	open(STDERR, '>&', \*STDOUT);
	exec(@pgbench) or exit 1;
}

my @faults;
sub fault { push @faults, $_[0]; note("fault: $_[0]"); }

# a killed backend makes the postmaster restart every process: wait for it
sub back_up
{
	my ($offset) = @_;
	defined wait_crash_recovery($node, $offset) or die 'the server did not come back after a crash';
}
sleep 2;
for my $round (1 .. 2)
{
	my $pidw = val(q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'par' AND worker_pid IS NOT NULL ORDER BY random() LIMIT 1});
	if ($pidw) { my $o = log_offset($node); kill 'KILL', $pidw; fault("kill -9 of worker pid $pidw"); back_up($o); }
	sleep 2;
	val(q{SELECT streamguard.alter_pipeline('par', workers => 3)});
	fault('workers -> 3');
	sleep 2;
	$pidw = val(q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'par' AND worker = 2});
	if ($pidw) { my $o = log_offset($node); kill 'KILL', $pidw; fault("kill -9 of worker 2 (pid $pidw)"); back_up($o); }
	sleep 1;
	val(q{SELECT streamguard.alter_pipeline('par', workers => 1)});
	fault('workers -> 1');
	sleep 2;
	val(q{SELECT streamguard.pause_pipeline('par')});
	fault('pause');
	sleep 1;
	val(q{SELECT streamguard.resume_pipeline('par')});
	fault('resume');
	val(q{SELECT streamguard.alter_pipeline('par', workers => 4)});
	fault('workers -> 4');
	sleep 2;
}
$node->stop('immediate');
fault('immediate shutdown');
$node->start;
waitpid($pid, 0);
note(slurp_file($bench_out) =~ /(number of transactions actually processed: \d+)/ ? $1 : 'pgbench: no summary');

my $committed = val(q{SELECT count(*) FROM committed});
ok($committed > 200, "(d) producers committed events ($committed)");
ok(wait_until(q{SELECT count(DISTINCT ev) FROM sink s WHERE EXISTS (SELECT 1 FROM committed c WHERE c.ev = s.ev)},
	$committed, 180), '(d) every committed event reached the sink');
is(val(q{SELECT count(*) FROM (SELECT ev FROM sink GROUP BY ev HAVING count(*) > 1) d}), '0',
	'(d) no event twice');
is(val(q{SELECT count(*) FROM sink s WHERE NOT EXISTS (SELECT 1 FROM committed c WHERE c.ev = s.ev)}), '0',
	'(d) no rolled-back event');
is(val(q{SELECT count(*) FROM (SELECT seq < lag(seq) OVER (PARTITION BY part ORDER BY id) AS back FROM sink) x
	WHERE back}), '0', '(d) seqs increase per partition in sink order');
is(val(q{SELECT count(*) FROM streamguard.consumers c JOIN streamguard.stream_partitions p
	ON p.stream = c.stream AND p.partition = c.partition
	WHERE c.consumer = 'pipeline:par' AND c.committed_seq <> p.last_seq}), '0',
	'(d) positions at the end of every partition');
is(val(q{SELECT state || '/' || workers FROM streamguard.pipelines WHERE pipeline = 'par'}), 'running/4',
	'(d) still running with 4 workers');
ok(wait_until(q{SELECT count(*) FILTER (WHERE worker_pid IS NOT NULL) FROM streamguard.pipeline_workers
	WHERE pipeline = 'par'}, '4', 60), '(d) four workers up after the restart');
note(scalar(@faults) . ' faults');

$node->stop;
done_testing();
