
# Kafka sinks (docs/kafka.md): pipelines from a local stream into a topic of
# the test broker (test/kafka/sg_mock_broker, librdkafka's mock cluster).
#
# - declaration: the SQL's shape (value required, types), the topic's name,
#   an unknown topic, an unreachable cluster, at_most_once refused;
# - the drain, exactly_once: every event once in the topic (read by a
#   read_committed audit consumer), keys, headers, partitions, order per
#   partition, the checkpoint record;
# - crashes: the worker killed after producing (Kafka transaction open),
#   after the Kafka commit before the local commit, after the local commit,
#   and at the other points, while events keep coming; broker errors
#   (NOT_COORDINATOR, PRODUCER_FENCED, request timeouts) on the
#   transactional APIs; the broker down and up: 0 lost, 0 duplicated;
# - at_least_once under the same kills: 0 lost, its duplicates shown;
# - a checkpoint behind the local batches (Kafka lost data): the pipeline
#   stops with a clear error;
# - an oversized message.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use KafkaMock;
use Time::HiRes qw(time);

my $remote_timeout = 3;
my $kafka = KafkaMock->start;
my $boot = $kafka->bootstrap;
$kafka->cmd('topic out 4');
$kafka->cmd('topic streamguard_checkpoints 1');

my $node = sg_node('kafkasink', extra => "streamguard.remote_timeout = '${remote_timeout}s'\n");
$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE SERVER kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS ("bootstrap.servers" '$boot');
SELECT streamguard.create_stream('src', 4);
CREATE TABLE audit (partition int, off bigint, key text, value text, headers text);
});

sub produce_events
{
	my ($from, $n) = @_;
	# an armed kill fault may fire on these events: the crash restart may
	# cut the session after its commit (psql_across_crash asks the stream)
	my $last = $from + $n - 1;
	psql_across_crash($node, qq{
SELECT streamguard.append('src', jsonb_build_object('i', i), 'k' || i, NULL, (i % 4)::int)
FROM generate_series($from, $last) i}, done => stream_has_sql('src', "e.key = 'k$last'"));
}

# ------------------------------------------------------------ declaration

my $good = q{SELECT key, payload AS value, partition FROM batch};
expect_error($node, q{SELECT streamguard.create_pipeline('kx', 'src', 'SELECT key, payload FROM batch', sink_server => 'kafka', sink_table => 'out')},
	'42P10', qr/the SELECT of a Kafka sink returns column "payload"/, 'an unknown column is refused');
expect_error($node, q{SELECT streamguard.create_pipeline('kx', 'src', 'SELECT key FROM batch', sink_server => 'kafka', sink_table => 'out')},
	'42703', qr/has no column "value"/, 'a SELECT without value is refused');
expect_error($node, q{SELECT streamguard.create_pipeline('kx', 'src', 'SELECT seq AS value FROM batch', sink_server => 'kafka', sink_table => 'out')},
	'42804', qr/column "value" of a Kafka sink must be jsonb, json, text or bytea, not bigint/, 'a value of another type is refused');
expect_error($node, q{SELECT streamguard.create_pipeline('kx', 'src', 'SELECT payload AS value, key AS headers FROM batch', sink_server => 'kafka', sink_table => 'out')},
	'42804', qr/column "headers" of a Kafka sink must be jsonb/, 'headers must be jsonb');
expect_error($node, q{SELECT streamguard.create_pipeline('kx', 'src', 'SELECT payload AS value, key AS partition FROM batch', sink_server => 'kafka', sink_table => 'out')},
	'42804', qr/column "partition" of a Kafka sink must be an integer/, 'partition must be an integer');
expect_error($node, q{SELECT streamguard.create_pipeline('kx', 'src', 'INSERT INTO audit SELECT 1 FROM batch', sink_server => 'kafka', sink_table => 'out')},
	'22023', qr/must be a single SELECT/, 'not a SELECT');
expect_error($node, qq{SELECT streamguard.create_pipeline('kx', 'src', '$good', sink_server => 'kafka', sink_table => 'bad/topic')},
	'42602', qr/invalid Kafka topic name/, 'topic names are checked');
expect_error($node, qq{SELECT streamguard.create_pipeline('kx', 'src', '$good', guarantee => 'at_most_once', sink_server => 'kafka', sink_table => 'out')},
	'0A000', qr/exactly_once or at_least_once/, 'at_most_once is refused');
$kafka->cmd('topic_error nosuchtopic 3');
expect_error($node, qq{SELECT streamguard.create_pipeline('kx', 'src', '$good', sink_server => 'kafka', sink_table => 'nosuchtopic')},
	'42704', qr/Kafka server "kafka": topic "nosuchtopic": .*Unknown topic/i, 'an unknown topic is refused');
$node->safe_psql('postgres', q{CREATE SERVER kafka_dead FOREIGN DATA WRAPPER streamguard_kafka OPTIONS (bootstrap_servers '127.0.0.1:1')});
my $t0 = time;
expect_error($node, qq{SELECT streamguard.create_pipeline('kx', 'src', '$good', sink_server => 'kafka_dead', sink_table => 'out')},
	'08006', qr/Kafka server "kafka_dead": no metadata for topic "out" within streamguard.remote_timeout/,
	'an unreachable cluster is an error at create');
cmp_ok(time - $t0, '<', 30, 'bounded by streamguard.remote_timeout');

# ------------------------------------------------------------- the drain

produce_events(0, 2000);
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('ks', 'src',
	$$SELECT key, payload AS value, partition, jsonb_build_object('seq', seq, 'src', 'sg') AS headers FROM batch$$,
	batch_size => 300, sink_server => 'kafka', sink_table => 'out');
});
ok(wait_pipelines_running($node, ['ks'], 60), 'the Kafka sink pipeline runs')
  or BAIL_OUT("pipeline did not start:\n" . pipelines_report($node));
ok(wait_for_value($node, q{SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'ks'}, '2000', 60), 'the stream is drained')
  or BAIL_OUT("no drain:\n" . pipelines_report($node));

$kafka->check_topic($node, 'out', 2000, 'first drain');
is($node->safe_psql('postgres', q{SELECT count(*) FROM audit WHERE headers !~ '^seq=[0-9]+,src=sg$'}), '0', 'headers from the jsonb object');
is($node->safe_psql('postgres', q{SELECT sink_server || ':' || sink_table FROM streamguard.pipelines WHERE pipeline = 'ks'}),
	'kafka:out', 'pipelines shows the sink');
is($node->safe_psql('postgres', q{SELECT side, server, connected FROM streamguard.remote_status WHERE pipeline = 'ks'}),
	'sink|kafka|t', 'remote_status: the Kafka sink, connected');
$kafka->audit($node, 'streamguard_checkpoints');
like($node->safe_psql('postgres', q{SELECT value FROM audit ORDER BY off DESC LIMIT 1}),
	qr/"batch": \d+, "events": \d+, "rows": \d+, "from": \[[-0-9,]+\], "to": \[[-0-9,]+\]/, 'the checkpoint record');

# ---------------------------------------------------------------- crashes

my $txn_id = $node->safe_psql('postgres', q{SELECT key FROM audit ORDER BY off DESC LIMIT 1});
like($txn_id, qr/^streamguard-\d+:/, 'the checkpoint is keyed by the transactional id');
my $fx = fault_context($node, ['ks']);
my $next = 2000;

sub drained
{
	my ($pipe, $total, $what) = @_;
	my $t_wait = time;
	# events_in counts an at_least_once batch each time it runs: at least
	# the total, and nothing left to read
	my $ok = wait_for_value($node, qq{SELECT events_in >= $total AND coalesce(lag_events, 0) = 0
		FROM streamguard.pipelines WHERE pipeline = '$pipe'}, 't', 120);
	ok($ok, "$what: $pipe drained ($total events)")
	  or diag(pipelines_report($node));
	diag(sprintf("%s: draining took %.1f s", $what, time - $t_wait)) if time - $t_wait > 10;
	return $ok;
}

# arm a kill at $point of $pipe, then append $n events (a local stream is
# drained at once: armed after, the fault would find no batch), wait for
# the kill and the pipelines back (fault_fired): 1, 0 (not fired), -1
sub kill_at
{
	my ($fx, $pipe, $point, $n) = @_;
	my $off = log_offset($node);
	$fx->{armed}{$point}++;
	q1($node, "SELECT streamguard.inject_fault('$pipe', '$point', 'kill', 1)", 60);
	produce_events($next, $n);
	$next += $n;
	if (!defined wait_log($node, qr/pipeline "$pipe": injected fault, killing the worker/, $off, 45))
	{
		diag("$point: did not fire within 45 s; disarming");
		q1($node, "SELECT streamguard.inject_fault('$pipe', 'none')", 60);
		return 0;
	}
	return fault_fired($fx, $point, $off);
}

for my $round (1 .. 2)
{
	# after the Kafka commit (twice: before and after the batch's local
	# statements), after the local commit, and the generic points; after
	# produce, with the Kafka transaction open (mid_copy), further down
	for my $point (qw(after_remote_commit before_commit after_commit mid_batch before_fence))
	{
		drained('ks', $next, "round $round, before $point")
		  or BAIL_OUT("no catch-up before $point");
		ok(kill_at($fx, 'ks', $point, 700) > 0, "round $round: worker killed at $point, pipeline back");
	}
	# broker errors on the transactional and produce requests, which the
	# producer retries or which fail the batch: EndTxn NOT_COORDINATOR,
	# Produce REQUEST_TIMED_OUT, AddPartitionsToTxn CONCURRENT_TRANSACTIONS,
	# InitProducerId NOT_COORDINATOR (at the next producer)
	$kafka->cmd('error 26 16 2');
	$kafka->cmd('error 0 7 2');
	$kafka->cmd('error 24 51 2');
	$kafka->cmd('error 22 16 1');
	produce_events($next, 500);
	$next += 500;
}
drained('ks', $next, 'after the kills and broker errors');
$kafka->check_topic($node, 'out', $next, 'after the kills and broker errors');
is(count_log($node, qr/pipeline "ks": batch \d+ was committed in Kafka but not here: positions moved to its checkpoint/, 0) >= 2, 1,
	'batches committed in Kafka and not here were recovered from the checkpoint');

# PRODUCER_FENCED (injected: the mock does not fence a producer when
# another one of the same transactional.id calls init_transactions)
my $off = log_offset($node);
$kafka->cmd('error 26 90 1');
produce_events($next, 300);
$next += 300;
drained('ks', $next, 'after a fence');
ok(count_log($node, qr/pipeline "ks": batch failed .*\((?:PRODUCER_FENCED|_FENCED)\)/, $off) >= 1,
	'the fenced producer failed its batch, with the Kafka error code');
$kafka->check_topic($node, 'out', $next, 'after a fence');

# the broker down and up
my $down_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$kafka->cmd('down 1');
produce_events($next, 200);
$next += 200;
ok(wait_for_value($node, qq{SELECT last_error ~ 'Kafka server "kafka"' AND last_error_at > '$down_at' FROM streamguard.pipelines WHERE pipeline = 'ks'}, 't',
		20 * $remote_timeout), 'a broker that is down shows in last_error')
  or diag(pipelines_report($node));
is($node->safe_psql('postgres', q{SELECT connected FROM streamguard.remote_status WHERE pipeline = 'ks'}), 'f',
	'remote_status: not connected');
# SIGTERM while the producer waits for a broker that is not there
my $pid = $node->safe_psql('postgres', q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'ks'});
if ($pid =~ /^\d+$/)
{
	$t0 = time;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(wait_for_value($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0', 20),
		'SIGTERM ends the worker while the broker is down');
	cmp_ok(time - $t0, '<', 20, 'at once');
}
else
{
	pass('no worker at that moment (between backoffs)');
	pass('no worker at that moment');
}
ok(wait_pipelines_running($node, ['ks'], 60), 'a new worker takes over');
$t0 = time;
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('ks')});
cmp_ok(time - $t0, '<', 20, 'pause_pipeline returns while the broker is down');
$kafka->cmd('up 1');
$node->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('ks')});
drained('ks', $next, 'after the broker came back');
$kafka->check_topic($node, 'out', $next, 'after the broker came back');

# ------------------------------------- killed with the Kafka transaction open

# The mock shows a read_committed reader the messages of transactions that
# were never committed (docs/kafka.md): a worker killed after producing,
# before Kafka's commit, leaves messages the audit consumer counts although
# a real broker would hide them, and the batch is produced again.  So here,
# on a topic of its own: nothing lost, and at most one batch (300) more per
# kill; a real broker would show none.  Pipeline ks is paused meanwhile:
# each kill restarts every backend, and ks killed inside its Kafka
# transaction would show the same artifact in topic out.
$kafka->cmd('topic out_open 4');
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('ks')});
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('kso', 'src', $$SELECT key, payload AS value, partition FROM batch$$,
	batch_size => 300, sink_server => 'kafka', sink_table => 'out_open');
});
drained('kso', $next, 'exactly_once, second pipeline');
my $fo = fault_context($node, ['kso']);
for my $round (1 .. 2)
{
	ok(kill_at($fo, 'kso', 'mid_copy', 700) > 0, "round $round: worker killed at mid_copy, pipeline back");
	drained('kso', $next, "after mid_copy $round");
}
$kafka->audit($node, 'out_open');
my ($open_total, $open_distinct) = split /\|/, $node->safe_psql('postgres',
	q{SELECT count(*), count(DISTINCT (value::jsonb->>'i')::int) FROM audit});
is($open_distinct, $next, 'killed with the transaction open: nothing lost');
cmp_ok($open_total - $open_distinct, '<=', 2 * 300,
	"killed with the transaction open: at most the aborted batches again ($open_total messages for $open_distinct events)");
$node->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('kso')});

# ------------------------------------------------------------ at_least_once

$kafka->cmd('topic out_alo 4');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('kal', 'src', $$SELECT key, payload AS value, partition FROM batch$$,
	guarantee => 'at_least_once', batch_size => 300, sink_server => 'kafka', sink_table => 'out_alo');
});
drained('kal', $next, 'at_least_once');
my $fa = fault_context($node, ['kal']);
for my $point (qw(between_commits mid_copy after_remote_commit between_commits))
{
	ok(kill_at($fa, 'kal', $point, 700) > 0, "at_least_once: worker killed at $point, pipeline back");
	drained('kal', $next, "at_least_once after $point");
}
$kafka->audit($node, 'out_alo');
my ($alo_total, $alo_distinct) = split /\|/, $node->safe_psql('postgres',
	q{SELECT count(*), count(DISTINCT (value::jsonb->>'i')::int) FROM audit});
is($alo_distinct, $next, 'at_least_once: nothing lost');
cmp_ok($alo_total, '>', $alo_distinct, "at_least_once: duplicates after the kills between the commits ($alo_total messages for $alo_distinct events)");
$node->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('ks')});
drained('ks', $next, 'exactly_once resumed');
$kafka->check_topic($node, 'out', $next, 'exactly_once resumed after the other pipelines\' kills');

# a batch committed in Kafka but not here (an error right after Kafka's
# commit), and a partition added to the stream before it is retried: the
# next producer applies the checkpoint to the partitions the batch read
# (the new one, which it never read, keeps its position); nothing is
# produced twice
$off = log_offset($node);
$node->safe_psql('postgres', q{SELECT streamguard.alter_pipeline('ks', retry_backoff => '20 s', max_backoff => '20 s')});
ok(wait_pipelines_running($node, ['ks'], 60), 'ks runs, with a long retry backoff');
q1($node, q{SELECT streamguard.inject_fault('ks', 'after_remote_commit', 'error', 1)}, 60);
produce_events($next, 200);
$next += 200;
ok(defined wait_log($node, qr/injected fault in pipeline "ks"/, $off, 45), 'a batch failed after Kafka committed it');
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('ks')});
$node->safe_psql('postgres', q{SELECT streamguard.alter_stream('src', partitions => 5)});
$node->safe_psql('postgres', q{SELECT streamguard.alter_pipeline('ks', retry_backoff => '100 ms', max_backoff => '5 s')});
$node->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('ks')});
drained('ks', $next, 'a partition added under a batch committed in Kafka only');
$kafka->check_topic($node, 'out', $next, 'a partition added under a batch committed in Kafka only');
ok(count_log($node, qr/pipeline "ks": batch \d+ was committed in Kafka but not here: positions moved to its checkpoint/, $off) >= 1,
	'the batch was recovered from its checkpoint across the new partition');

# ------------------------------------------------------ lost or ahead checkpoints

# this database behind Kafka (as after a restore): Kafka holds batches
# the pipeline never committed here
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('ks'); UPDATE streamguard.pipeline_stats SET batches = batches - 2 WHERE pipeline_id = (SELECT id FROM streamguard.pipeline WHERE name = 'ks'); SELECT streamguard.resume_pipeline('ks')});
ok(wait_for_value($node, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'ks'}, 'failed', 60),
	'a checkpoint ahead of the local batches stops the pipeline');
like($node->safe_psql('postgres', q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'ks'}),
	qr/Kafka server "kafka" holds batch \d+ of pipeline "ks" but this database committed only \d+/, 'and says why');
$node->safe_psql('postgres', q{UPDATE streamguard.pipeline_stats SET batches = batches + 2 WHERE pipeline_id = (SELECT id FROM streamguard.pipeline WHERE name = 'ks'); SELECT streamguard.resume_pipeline('ks')});
ok(wait_pipelines_running($node, ['ks'], 60), 'back in step: it runs again');
produce_events($next, 100);
$next += 100;
drained('ks', $next, 'after the counter came back');

# Kafka lost the checkpoints: a new, empty broker
$kafka->kill9;
$kafka = KafkaMock->start;
$boot = $kafka->bootstrap;
$kafka->cmd('topic out 4');
$kafka->cmd('topic streamguard_checkpoints 1');
$node->safe_psql('postgres', qq{ALTER SERVER kafka OPTIONS (SET "bootstrap.servers" '$boot')});
produce_events($next, 100);
$next += 100;
ok(wait_for_value($node, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'ks'}, 'failed', 90),
	'a broker without the checkpoints stops the pipeline')
  or diag(pipelines_report($node));
like($node->safe_psql('postgres', q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'ks'}),
	qr/Kafka server "kafka" has no checkpoint of pipeline "ks" in topic "streamguard_checkpoints" although \d+ batches were committed/,
	'and says why');

# ------------------------------------------------------------ large ones

$node->safe_psql('postgres', q{
SELECT streamguard.drop_pipeline('kal');
SELECT streamguard.create_stream('bigsrc', 1);
SELECT streamguard.create_pipeline('kbig', 'bigsrc', $$SELECT repeat('x', (payload->>'n')::int) AS value FROM batch$$,
	sink_server => 'kafka', sink_table => 'out', max_attempts => 2, retry_backoff => '10 ms');
SELECT streamguard.append('bigsrc', '{"n": 2000000}');
});
is($node->safe_psql('postgres', q{SELECT batch_size FROM streamguard.pipelines WHERE pipeline = 'kbig'}), '10000',
	'a Kafka sink takes batches of up to 10,000 by default');
ok(wait_for_value($node, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'kbig'}, 'failed', 60),
	'a message larger than message.max.bytes stops the pipeline')
  or diag(pipelines_report($node));
like($node->safe_psql('postgres', q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'kbig'}),
	qr/Kafka server "kafka": producing to partition -1 of topic "out": .*\(MSG_SIZE_TOO_LARGE\)/, 'with the Kafka error code');

state_diag($node, remote => 1);
$node->stop;
$kafka->stop;
done_testing();
