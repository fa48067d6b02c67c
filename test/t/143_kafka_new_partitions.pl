
# Kafka sources: partitions added to a topic are picked up (docs/kafka.md).
#
# librdkafka's mock cluster cannot add partitions to a topic, so the test
# moves the pipeline to a second broker whose copy of the topic has more
# partitions: the old partitions hold the same messages at the same offsets
# (the pipeline's positions stay valid, no reset), the new ones hold new
# messages.  The worker must find the new partitions from the metadata,
# read them from their first offset, and keep one position row each: every
# message once, nothing from the old partitions twice.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use KafkaMock;

my $old = 60;     # messages in the 2 old partitions (30 each)
my $new = 80;     # messages over 4 partitions (20 each) on the grown topic

my $kafka = KafkaMock->start;
$kafka->cmd('topic grow 2');
$kafka->cmd("produce_json grow $old 0");

my $node = sg_node('kafka_grow', extra => "streamguard.remote_timeout = '3s'\n");
$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE SERVER kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS (bootstrap_servers '@{[ $kafka->bootstrap ]}');
CREATE TABLE sink (i bigint, partition int, off bigint);
SELECT streamguard.create_pipeline('kg', 'grow',
	\$\$INSERT INTO sink SELECT (payload->>'i')::bigint, partition, seq FROM batch\$\$,
	batch_size => 25, source_server => 'kafka');
});
ok(wait_for_value($node, 'SELECT count(*) FROM sink', $old, 90), 'the two partitions are drained')
  or BAIL_OUT("first drain failed:\n" . pipelines_report($node));
is($node->safe_psql('postgres', q{SELECT string_agg(partition || ':' || next_offset, ' ' ORDER BY partition)
	FROM streamguard.kafka_position}), '0:30 1:30', 'one position per partition');

# the same topic with 4 partitions: the old ones as they were, then new messages everywhere
my $grown = KafkaMock->start;
$grown->cmd('topic grow 4');
for my $i (0 .. $old - 1)
{
	my $p = $i % 2;
	$grown->cmd(qq{produce grow $p k$i {"i": $i}});
}
is($grown->cmd('watermarks grow 0'), '0 30', 'partition 0 as it was');
$grown->cmd("produce_json grow $new 1000");

$kafka->kill9;
$node->safe_psql('postgres', qq{ALTER SERVER kafka OPTIONS (SET bootstrap_servers '@{[ $grown->bootstrap ]}')});

ok(wait_for_value($node, 'SELECT count(*) FROM sink', $old + $new, 120), 'the new partitions are read')
  or diag(pipelines_report($node) . $node->safe_psql('postgres', 'SELECT partition, count(*) FROM sink GROUP BY 1'));
is($node->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT i) FROM sink'), '0', 'nothing twice');
is($node->safe_psql('postgres', q{SELECT string_agg(partition || ':' || n, ' ' ORDER BY partition)
	FROM (SELECT partition, count(*) AS n FROM sink GROUP BY 1) s}), '0:50 1:50 2:20 3:20',
	'each partition: its messages once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM sink s WHERE partition >= 2 AND off <> (i - 1000) / 4}), '0',
	'the new partitions are read from their first offset');
is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT partition, off, lag(off) OVER (PARTITION BY partition ORDER BY i) AS prev
	FROM sink) s WHERE prev IS NOT NULL AND off <> prev + 1}), '0', 'offsets in order per partition');
is($node->safe_psql('postgres', q{SELECT string_agg(partition || ':' || next_offset, ' ' ORDER BY partition)
	FROM streamguard.kafka_position}), '0:50 1:50 2:20 3:20', 'a position row for each new partition');
ok($node->log_contains(qr/topic "grow" has 4 partitions now \(was 2\)/), 'the log says the topic grew');

# the pipeline goes on with all four
$grown->cmd('produce_json grow 8 5000');
ok(wait_for_value($node, 'SELECT count(*) FROM sink', $old + $new + 8, 60), 'new messages in every partition');

$node->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('kg')});
$node->stop;
$grown->stop;
done_testing();
