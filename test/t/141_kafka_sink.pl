
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

my $dumpfile = PostgreSQL::Test::Utils::tempdir() . '/dump.tsv';

# the read_committed audit consumer: the topic into table audit
sub audit
{
	my ($topic) = @_;
	my $n = $kafka->cmd("dump $topic $dumpfile");
	$node->safe_psql('postgres', qq{TRUNCATE audit; COPY audit FROM '$dumpfile'});
	return $n;
}

sub produce_events
{
	my ($from, $n) = @_;
	$node->safe_psql('postgres', qq{
SELECT streamguard.append('src', jsonb_build_object('i', i), 'k' || i, NULL, (i % 4)::int)
FROM generate_series($from, $from + $n - 1) i});
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

sub check_topic
{
	my ($total, $what) = @_;
	is(audit('out'), $total, "$what: $total messages in the topic");
	is($node->safe_psql('postgres', q{SELECT count(DISTINCT (value::jsonb->>'i')::int), min((value::jsonb->>'i')::int), max((value::jsonb->>'i')::int) FROM audit}),
		"$total|0|" . ($total - 1), "$what: every event exactly once")
	  or diag($node->safe_psql('postgres', q{SELECT value, count(*) FROM audit GROUP BY 1 HAVING count(*) > 1 ORDER BY 1 LIMIT 10}));
	is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT (value::jsonb->>'i')::int AS i, lag((value::jsonb->>'i')::int) OVER (PARTITION BY partition ORDER BY off) AS prev FROM audit) s
WHERE prev IS NOT NULL AND i <= prev}), '0', "$what: order kept per partition");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM audit WHERE partition <> (value::jsonb->>'i')::int % 4 OR key <> 'k' || (value::jsonb->>'i')}),
		'0', "$what: keys and partitions as the SELECT said");
}
check_topic(2000, 'first drain');
is($node->safe_psql('postgres', q{SELECT count(*) FROM audit WHERE headers !~ '^seq=[0-9]+,src=sg$'}), '0', 'headers from the jsonb object');
is($node->safe_psql('postgres', q{SELECT sink_server || ':' || sink_table FROM streamguard.pipelines WHERE pipeline = 'ks'}),
	'kafka:out', 'pipelines shows the sink');
is($node->safe_psql('postgres', q{SELECT side, server, connected FROM streamguard.remote_status WHERE pipeline = 'ks'}),
	'sink|kafka|t', 'remote_status: the Kafka sink, connected');
audit('streamguard_checkpoints');
like($node->safe_psql('postgres', q{SELECT value FROM audit ORDER BY off DESC LIMIT 1}),
	qr/"batch": \d+, "events": \d+, "rows": \d+, "from": \[[-0-9,]+\], "to": \[[-0-9,]+\]/, 'the checkpoint record');

state_diag($node, remote => 1);
$node->stop;
$kafka->stop;
done_testing();
