
# Kafka pipelines, continued (docs/kafka.md):
#
# - reset_pipeline on a running Kafka-source pipeline, again and again,
#   while it drains (librdkafka 2.0.2 aborted the whole process on an
#   assertion when a partition was assigned again while its earlier
#   assignment was still being stopped; a consumer that holds partitions
#   now moves by a seek and adds new partitions incrementally): no crash,
#   the server never restarts, and after a last reset the topic is read
#   exactly once, in order per partition;
# - a remote PostgreSQL source feeding a Kafka sink, exactly_once: the
#   checkpoint holds the remote positions; the worker killed at each fault
#   point of a batch, two rounds, while the remote producers append; a
#   read_committed dump of the topic holds every remote event once, in seq
#   order per partition; the remote server stopped (immediate) and started
#   again; then kills with the Kafka transaction open (mid_copy), which
#   the mock makes visible (at most those batches twice);
# - at_least_once from the remote source: nothing lost.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use KafkaMock;
use Time::HiRes qw(time usleep);

my $remote_timeout = 3;
my $kafka = KafkaMock->start;
my $boot = $kafka->bootstrap;

my ($remote, $node) = sg_remote_pair(
	remote => { extra => "shared_buffers=64MB\n" },
	local  => { extra => "streamguard.remote_timeout='${remote_timeout}s'\n" });
$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE SERVER kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS ("bootstrap.servers" '$boot');
CREATE TABLE sink (n bigserial, i bigint, partition int, off bigint);
});

# ------------------------------------------- reset on a running source

$kafka->cmd('topic ev 2');
$kafka->cmd('produce_json ev 4000');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('kr', 'ev',
	$$INSERT INTO sink (i, partition, off) SELECT (payload->>'i')::bigint, partition, seq FROM batch$$,
	batch_size => 50, source_server => 'kafka');
});
ok(wait_pipelines_running($node, ['kr'], 60), 'the Kafka-source pipeline runs')
  or BAIL_OUT("pipeline did not start:\n" . pipelines_report($node));
ok(wait_for_value($node, 'SELECT count(*) > 0 FROM sink', 't', 60), 'it reads');
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $log_at = log_offset($node);
my $resets = 40;
for my $r (1 .. $resets)
{
	# back to the start, to an offset of one partition, forward past data
	my $call = $r % 3 == 0 ? q{SELECT streamguard.reset_pipeline('kr')}
	  : $r % 3 == 1 ? q{SELECT streamguard.reset_pipeline('kr', seq => } . (100 + $r * 7) . q{, partition => } . ($r % 2) . q{)}
	  : q{SELECT streamguard.reset_pipeline('kr', seq => } . ($r * 37) . q{)};
	$node->safe_psql('postgres', $call);
	usleep(20_000 + 10_000 * ($r % 5));
}
$node->safe_psql('postgres', q{
BEGIN;
TRUNCATE sink;
SELECT streamguard.reset_pipeline('kr');
COMMIT;
});
ok(wait_for_value($node, 'SELECT count(*) FROM sink', '4000', 120), "after $resets resets while running, the topic is read again")
  or diag(pipelines_report($node) . $node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT i) FROM sink'));
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT i), min(i), max(i) FROM sink'),
	'4000|4000|0|3999', 'each message once after the last reset');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT off, lag(off) OVER (PARTITION BY partition ORDER BY n) AS prev FROM sink) s
WHERE prev IS NOT NULL AND off <> prev + 1}), '0', 'offsets in order and gapless per partition');
# each reset fences the worker, which exits; the supervisor starts a new one
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started,
	'the server never went through a crash restart');
my $log = slurp_file($node->logfile, $log_at);
unlike($log, qr/terminated by signal|rd_kafka_assignment_partition_stopped|Assertion/,
	'no assertion failure, no crash restart');
$node->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('kr')});

# ---------------------------------- a remote PostgreSQL source into Kafka

$kafka->cmd('topic rout 4');
$kafka->cmd('topic streamguard_checkpoints 1');
my $readerpw = 'reader-Pw-3141';
$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE reader LOGIN PASSWORD '$readerpw';
SELECT streamguard.create_stream('rsrc', 4);
SELECT streamguard.grant_stream('rsrc', 'reader', 'read');
});
$node->safe_psql('postgres', qq{
@{[ remote_server_sql('rs_src', $remote, app => 'sg_ksrc', user => 'reader', password => $readerpw) ]}
});

my $next = 0;
sub produce_remote
{
	my ($n) = @_;
	$remote->safe_psql('postgres', qq{
SELECT streamguard.append('rsrc', jsonb_build_object('i', i), 'k' || i, NULL, (i % 4)::int)
FROM generate_series($next, $next + $n - 1) i});
	$next += $n;
}

expect_error($node, q{SELECT streamguard.create_pipeline('kk', 'ev', 'SELECT payload AS value FROM batch',
	source_server => 'kafka', sink_server => 'kafka', sink_table => 'rout')},
	'0A000', qr/a pipeline with a Kafka sink reads a stream, not a Kafka topic/, 'Kafka to Kafka is refused');

produce_remote(1500);
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('krs', 'rsrc',
	$$SELECT key, payload AS value, partition, jsonb_build_object('seq', seq) AS headers FROM batch$$,
	batch_size => 200, source_server => 'rs_src', sink_server => 'kafka', sink_table => 'rout');
});
ok(wait_pipelines_running($node, ['krs'], 60), 'a remote source into a Kafka sink runs')
  or BAIL_OUT("pipeline did not start:\n" . pipelines_report($node));

sub drained
{
	my ($pipe, $total, $what) = @_;
	my $ok = wait_for_value($node, qq{SELECT events_in >= $total FROM streamguard.pipelines WHERE pipeline = '$pipe'}, 't', 120);
	# every remote event read: the positions are the remote partitions' last seqs
	my $want = $remote->safe_psql('postgres', q{SELECT string_agg(coalesce(m, 0)::text, ',' ORDER BY p)
		FROM generate_series(0, 3) p LEFT JOIN LATERAL (SELECT max(seq) AS m FROM streamguard.read('rsrc', p, 0, 100000)) r ON true});
	$ok &&= wait_for_value($node, qq{SELECT string_agg(position::text, ',' ORDER BY partition) FROM streamguard.remote_position r
		JOIN streamguard.pipeline p ON p.id = r.pipeline_id WHERE p.name = '$pipe'}, $want, 120);
	ok($ok, "$what: $pipe drained ($total events)") or diag(pipelines_report($node));
	return $ok;
}

drained('krs', 1500, 'first drain');
$kafka->check_topic($node, 'rout', 1500, 'remote source, first drain');
$kafka->audit($node, 'streamguard_checkpoints');
like($node->safe_psql('postgres', q{SELECT value FROM audit ORDER BY off DESC LIMIT 1}),
	qr/"from": \[\d+,\d+,\d+,\d+\], "to": \[\d+,\d+,\d+,\d+\]/, 'the checkpoint holds the four remote positions');
is($node->safe_psql('postgres', q{SELECT string_agg(side || ':' || server || ':' || connected, ',' ORDER BY side) FROM streamguard.remote_status WHERE pipeline = 'krs'}),
	'sink:kafka:true,source:rs_src:true', 'remote_status: the remote source and the Kafka sink')
  or diag(remote_status_report($node));

# kill -9 of the worker at every step of a batch, two rounds, while the
# remote keeps appending
my $fx = fault_context($node, ['krs']);
my $off0 = log_offset($node);
sub kill_at
{
	my ($round, $point) = @_;
	drained('krs', $next, "round $round, before $point") or BAIL_OUT("no catch-up before $point");
	my $off = log_offset($node);
	$fx->{armed}{$point}++;
	q1($node, "SELECT streamguard.inject_fault('krs', '$point', 'kill', 1)", 60);
	produce_remote(600);
	if (!defined wait_log($node, qr/pipeline "krs": injected fault, killing the worker/, $off, 45))
	{
		q1($node, "SELECT streamguard.inject_fault('krs', 'none')", 60);
		fail("round $round: $point did not fire");
		return;
	}
	ok(fault_fired($fx, $point, $off) > 0, "round $round: worker killed at $point, pipeline back");
}
for my $round (1 .. 2)
{
	kill_at($round, $_) for qw(after_remote_commit before_commit after_commit mid_batch before_fence);
}
drained('krs', $next, 'after the kills');
$kafka->check_topic($node, 'rout', $next, 'after the kills');
ok(count_log($node, qr/pipeline "krs": batch \d+ was committed in Kafka but not here: positions moved to its checkpoint/, $off0) >= 2,
	'batches committed in Kafka and not here were recovered from the checkpoint (remote positions)');
# the remote server killed (immediate stop) and started again while the
# pipeline reads it: the batch in flight fails, is retried, nothing lost
# or doubled
produce_remote(600);
my $stopped_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$remote->stop('immediate');
ok(wait_for_value($node, qq{SELECT last_error_at > '$stopped_at' FROM streamguard.pipelines WHERE pipeline = 'krs'}, 't', 60),
	'the remote going away shows in last_error')
  or diag(pipelines_report($node));
$remote->start;
produce_remote(600);
drained('krs', $next, 'after the remote restart');
$kafka->check_topic($node, 'rout', $next, 'after the remote restart');

# a kill with the Kafka transaction open (mid_copy) leaves messages the
# mock shows a read_committed reader (docs/kafka.md): at most those twice
kill_at($_, 'mid_copy') for 1 .. 2;
drained('krs', $next, 'after the kills with the Kafka transaction open');
my $n = $kafka->audit($node, 'rout');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT (value::jsonb->>'i')::int), min((value::jsonb->>'i')::int), max((value::jsonb->>'i')::int) FROM audit}),
	"$next|0|" . ($next - 1), 'after the mid_copy kills: no remote event lost');
cmp_ok($n - $next, '<=', 2 * 200, 'at most the two batches killed with their Kafka transaction open appear twice (the mock shows uncommitted messages)');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT (value::jsonb->>'i')::int AS i,
	lag((value::jsonb->>'i')::int) OVER (PARTITION BY partition ORDER BY off) AS prev FROM audit) s
WHERE prev IS NOT NULL AND i <= prev AND i NOT IN (SELECT (value::jsonb->>'i')::int FROM audit GROUP BY 1 HAVING count(*) > 1)}),
	'0', 'after the mid_copy kills: order kept per partition (apart from the batches produced twice)');

# at_least_once from the remote source: nothing lost
$kafka->cmd('topic rout2 4');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('krs2', 'rsrc', $$SELECT key, payload AS value, partition FROM batch$$,
	guarantee => 'at_least_once', batch_size => 500, source_server => 'rs_src', sink_server => 'kafka', sink_table => 'rout2');
});
drained('krs2', $next, 'at_least_once');
$n = $kafka->audit($node, 'rout2');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT (value::jsonb->>'i')::int) FROM audit}), $next,
	"at_least_once from the remote source: every event ($n messages)");

$node->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('krs'); SELECT streamguard.drop_pipeline('krs2')});
$node->stop;
$remote->stop;
$kafka->stop;
done_testing();
