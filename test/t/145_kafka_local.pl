
# "Try Kafka locally" of docs/kafka.md, step by step: the test broker on a
# fixed port (sg_mock_broker --port), kcat producing into a topic, a
# pipeline reading it into a table, a pipeline writing a stream to a topic
# and kcat reading that topic.  Also: --port refuses a port in use, and a
# broker on a fixed port answers kcat's metadata request at that address.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use KafkaMock;

my $kcat = `command -v kcat 2>/dev/null`;
chomp $kcat;
plan skip_all => 'kcat is not installed' unless $kcat;

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $kafka = KafkaMock->start(port => $port);
is($kafka->bootstrap, "127.0.0.1:$port", 'the broker bootstraps at the fixed port');
$kafka->cmd('topic orders 4');
$kafka->cmd('topic shipments 2');
$kafka->cmd('topic streamguard_checkpoints 1');

# a second broker on the same port is refused, saying why
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $KafkaMock::BROKER, '--port', $port ], '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	ok(!$ok, 'a second broker on the same port fails');
	like($err, qr/cannot listen on 127\.0\.0\.1:$port/, '... naming the port');
}

sub kcat
{
	my ($args, $in) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $kcat, '-b', "127.0.0.1:$port", @$args ], '<', \($in // ''), '>', \$out,
		'2>', \$err, IPC::Run::timeout(60));
	diag("kcat @$args: $err") unless $ok;
	return ($ok, $out);
}

my ($ok, $out) = kcat([ '-L', '-t', 'orders' ]);
like($out, qr/topic "orders" with 4 partitions/, 'kcat -L sees the topic through the fixed port');

($ok) = kcat([ '-P', '-t', 'orders', '-K:' ],
	qq(alice:{"id": 1, "total": 25}\nbob:{"id": 2, "total": 12.5}\nalice:{"id": 3, "total": 7}\n));
ok($ok, 'kcat -P produces three keyed messages');

my $node = sg_node('kafkalocal');
$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE SERVER local_kafka FOREIGN DATA WRAPPER streamguard_kafka
    OPTIONS (bootstrap_servers '127.0.0.1:$port');
CREATE TABLE orders_in (id bigint PRIMARY KEY, customer text, total numeric);
SELECT streamguard.create_pipeline('kafka_in', 'orders',
    \$\$INSERT INTO orders_in
      SELECT (payload->>'id')::bigint, key, (payload->>'total')::numeric FROM batch\$\$,
    source_server => 'local_kafka');
});
ok(wait_for_value($node, 'SELECT count(*) FROM orders_in', '3', 120), 'the pipeline read the topic');
is($node->safe_psql('postgres', q{SELECT string_agg(id || ':' || customer || ':' || total, ' ' ORDER BY id) FROM orders_in}),
	'1:alice:25 2:bob:12.5 3:alice:7', 'every message once, with its key');

$node->safe_psql('postgres', q{
SELECT streamguard.create_stream('shipments', partitions => 2);
SELECT streamguard.create_pipeline('kafka_out', 'shipments',
    $$SELECT key, payload AS value FROM batch$$,
    sink_server => 'local_kafka', sink_table => 'shipments');
SELECT streamguard.append('shipments', jsonb_build_object('order_id', i), key => 'k' || i)
FROM generate_series(1, 5) i;
});
ok(wait_for_value($node, q{SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'kafka_out'}, '5', 120),
	'the sink pipeline wrote the stream');
($ok, $out) = kcat([ '-C', '-t', 'shipments', '-e', '-q', '-X', 'isolation.level=read_committed', '-f', '%k %s\n' ]);
is(join(' ', sort split /\n/, $out),
	'k1 {"order_id": 1} k2 {"order_id": 2} k3 {"order_id": 3} k4 {"order_id": 4} k5 {"order_id": 5}',
	'kcat -C reads every event once from the topic');

$node->stop;
$kafka->stop;
done_testing();
