
# A Kafka broker that hangs must not hold up PostgreSQL (docs/kafka.md,
# "Timeouts and shutdown"): at each place where a worker or a backend
# waits for the broker, the test broker (test/kafka/sg_mock_broker) is made
# to hang at exactly that request ("delay": its answer, and every later
# one on that connection, held back for ten minutes; "pending" says when
# the request came), and then
#   pg_ctl stop -m fast, pg_terminate_backend, pg_cancel_backend,
#   pause_pipeline or drop_pipeline
# must take effect within $bound seconds, although streamguard.remote_timeout
# is a minute (the call sites must answer SIGTERM and cancels, not just
# end at their deadline).  The sites:
#   source: fetch (Fetch), end offsets for start_from 'end' (ListOffsets),
#     the stall check's end offsets (ListOffsets, with a short
#     remote_timeout: the check comes after that long without messages),
#     and the whole broker frozen (kill -STOP) under a running worker
#     (fetch, metadata);
#   sink: init_transactions (InitProducerId), the checkpoint's end offsets
#     (ListOffsets), the commit (EndTxn), an at_least_once flush (Produce);
#   a backend: create_pipeline's metadata (the broker frozen).
# Afterwards, the broker answering again, every pipeline delivers exactly
# once (0 lost, 0 duplicated; at_least_once: 0 lost).

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
use Time::HiRes qw(time usleep);

# the bug took minutes; a loaded machine takes seconds
my $bound = 15;
my %api = (Produce => 0, Fetch => 1, ListOffsets => 2, InitProducerId => 22, EndTxn => 26);

my $kafka = KafkaMock->start;
my $boot = $kafka->bootstrap;
$kafka->cmd('topic src 2');
$kafka->cmd('topic out 4');
$kafka->cmd('topic outa 4');
$kafka->cmd('topic streamguard_checkpoints 1');
$kafka->cmd('produce_json src 200');

my $node = sg_node('kafkashut', extra => "streamguard.remote_timeout = '60s'\n");
$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE SERVER kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS ("bootstrap.servers" '$boot');
CREATE TABLE sink (i bigint, partition int, off bigint);
SELECT streamguard.create_stream('ev', 4);
SELECT streamguard.create_pipeline('kp', 'src',
	\$\$INSERT INTO sink SELECT (payload->>'i')::bigint, partition, seq FROM batch\$\$,
	source_server => 'kafka');
});
ok(wait_for_value($node, 'SELECT count(*) FROM sink', '200', 90), 'the source pipeline drains the topic')
  or BAIL_OUT("no drain:\n" . pipelines_report($node));

sub produce_events
{
	my ($from, $n) = @_;
	$node->safe_psql('postgres', qq{
SELECT streamguard.append('ev', jsonb_build_object('i', i), 'k' || i, NULL, (i % 4)::int)
FROM generate_series($from, $from + $n - 1) i});
}

# arm($api): the broker will hang at the next request of $api
sub arm
{
	my ($name) = @_;
	$kafka->cmd("delay 1 $api{$name} 600000");
}

# met($api, $what): wait until the request armed for came (1) or 90 s
# passed (0)
sub met
{
	my ($name, $what) = @_;
	my $deadline = time + 90;
	while (time < $deadline)
	{
		return 1 if $kafka->cmd("pending 1 $api{$name}") eq '0';
		usleep(100_000);
	}
	diag("$what: no $name request came in 90 s\n" . pipelines_report($node));
	return 0;
}

# hang($api, $what): arm, then met
sub hang
{
	my ($name, $what) = @_;
	arm($name);
	return met($name, $what);
}

# a moment for the request's caller to sit in its wait
sub settle { usleep(500_000) }

sub worker_pid
{
	my ($pipeline) = @_;
	my $pid = q1($node, qq{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = '$pipeline'});
	return ($pid // '') =~ /^\d+$/ ? $pid : undef;
}

# a server that did not stop in time is stopped -m immediate, and every
# check after that still runs
sub recover
{
	my ($what) = @_;
	diag("$what: stopping the server -m immediate");
	$node->stop('immediate', fail_ok => 1);
}

# pg_ctl stop -m fast within $bound; then the server starts again
sub stop_fast
{
	my ($what) = @_;
	my $t0 = time;
	my $ok;
	{
		local $ENV{PGCTLTIMEOUT} = $bound + 45;
		$ok = $node->stop('fast', fail_ok => 1);
	}
	my $took = time - $t0;
	ok($ok && $took < $bound, sprintf('%s: pg_ctl stop -m fast within %d s (%.1f s)', $what, $bound, $took));
	recover($what) unless $ok;
	return $took;
}

sub terminate
{
	my ($pipeline, $what) = @_;
	my $pid = worker_pid($pipeline);
	ok(defined $pid, "$what: the worker is there") or return;
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	my $gone = wait_for_value($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0', $bound);
	ok($gone, sprintf('%s: pg_terminate_backend ends the worker within %d s (%.1f s)', $what, $bound, time - $t0));
	if (!$gone)
	{
		recover($what);
		$node->start;
	}
}

# a control call ($sql) that must return within $bound
sub control
{
	my ($sql, $what) = @_;
	my ($took, $ok, $err) = timed_psql($node, $sql, timeout => $bound + 45);
	ok($ok && $took < $bound, sprintf('%s: %s within %d s (%.1f s)', $what, $sql, $bound, $took)) or diag($err);
	if (!$ok)
	{
		recover($what);
		$node->start;
	}
}

# ---------------------------------------------------------------- source

# fetch: the worker waits for messages that do not come
hang('Fetch', 'fetch') and settle();
control(q{SELECT streamguard.pause_pipeline('kp')}, 'source, fetch');
ok(wait_for_value($node, q{SELECT worker_pid IS NULL FROM streamguard.pipelines WHERE pipeline = 'kp'}, 't', $bound),
	'source, fetch: the worker stepped aside');

# the stall check: after streamguard.remote_timeout without a message the
# worker asks for the end offsets (the call seen to hang a shutdown for
# minutes: librdkafka 2.0.2 ignores its timeout there)
$node->safe_psql('postgres', q{ALTER SYSTEM SET streamguard.remote_timeout = '4s'; SELECT pg_reload_conf();
SELECT streamguard.resume_pipeline('kp')});
ok(wait_pipelines_running($node, ['kp'], 60), 'source runs again');
# bounded: the call given up on at streamguard.remote_timeout, not minutes later
my $hung_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
hang('ListOffsets', 'stall check');
my $t1 = time;
ok(wait_for_value($node, qq{SELECT last_error ~ 'end of partition \\d+ of topic "src": no answer within streamguard.remote_timeout'
AND last_error_at > '$hung_at' FROM streamguard.pipelines WHERE pipeline = 'kp'}, 't', $bound),
	sprintf('source, stall check: an error at streamguard.remote_timeout (4 s) (%.1f s)', time - $t1))
  or diag(pipelines_report($node));
# interruptible
hang('ListOffsets', 'stall check, again') and settle();
stop_fast('source, stall check');
$node->start;
$node->safe_psql('postgres', q{ALTER SYSTEM RESET streamguard.remote_timeout; SELECT pg_reload_conf();
SELECT streamguard.pause_pipeline('kp')});

# start_from 'end': the first batch asks for the end offsets
arm('ListOffsets');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('ke', 'src', 'SELECT 1 FROM batch', source_server => 'kafka', start_from => 'end')});
met('ListOffsets', 'start_from end') and settle();
terminate('ke', 'source, end offsets');
$node->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('ke')});
arm('ListOffsets');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('ke2', 'src', 'SELECT 1 FROM batch', source_server => 'kafka', start_from => 'end')});
met('ListOffsets', 'start_from end, again') and settle();
control(q{SELECT streamguard.drop_pipeline('ke2')}, 'source, end offsets');

# the whole broker frozen (SIGSTOP: its sockets accept and never answer)
# under a running source: its worker meets it at whatever it does next,
# fetch or metadata (the mock's Metadata answers cannot be delayed)
$node->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('kp')});
ok(wait_pipelines_running($node, ['kp'], 60), 'source runs again');
$kafka->freeze;
sleep 2;	# any time: the worker must answer wherever it is
terminate('kp', 'source, broker frozen');
ok(wait_pipelines_running($node, ['kp'], 60), 'source runs again, broker still frozen');
sleep 2;	# the new worker asks the frozen broker for metadata
stop_fast('source, broker frozen');
$kafka->thaw;
$node->start;
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('kp')});

# ------------------------------------------------------------------ sink

produce_events(0, 100);
arm('InitProducerId');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('ko', 'ev', 'SELECT key, payload AS value, partition FROM batch',
	sink_server => 'kafka', sink_table => 'out')});
met('InitProducerId', 'init_transactions') and settle();
stop_fast('sink, init_transactions');

# the checkpoint's end offsets, when the worker starts
arm('ListOffsets');
$node->start;
met('ListOffsets', 'checkpoint') and settle();
control(q{SELECT streamguard.pause_pipeline('ko')}, 'sink, checkpoint');

# the commit
$node->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('ko')});
ok(wait_for_value($node, q{SELECT rows_out >= 100 FROM streamguard.pipelines WHERE pipeline = 'ko'}, 't', 90),
	'the sink delivers') or diag(pipelines_report($node));
arm('EndTxn');
produce_events(100, 50);
met('EndTxn', 'commit') and settle();
terminate('ko', 'sink, commit');
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('ko')});

# an at_least_once flush
arm('Produce');
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('ka', 'ev', 'SELECT key, payload AS value, partition FROM batch',
	sink_server => 'kafka', sink_table => 'outa', guarantee => 'at_least_once')});
met('Produce', 'flush') and settle();
stop_fast('sink, at_least_once flush');
$node->start;
$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('ka')});

# --------------------------------------------------------------- backend

# the broker frozen while create_pipeline asks for the topic's metadata
$kafka->freeze;
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres'), '-c',
	  q{SELECT streamguard.create_pipeline('kx', 'src', 'SELECT 1 FROM batch', source_server => 'kafka')} ],
	'>', \$out, '2>', \$err, IPC::Run::timeout(120));
wait_for_value($node, q{SELECT count(*) FROM pg_stat_activity WHERE query ~ 'create_pipeline..kx' AND pid <> pg_backend_pid()}, '1', 30);
sleep 1;
my $t0 = time;
$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query ~ 'create_pipeline..kx' AND pid <> pg_backend_pid()});
eval { $h->finish; };
my $took = time - $t0;
ok($took < $bound, sprintf('backend, create_pipeline: pg_cancel_backend within %d s (%.1f s)', $bound, $took));
is(sqlstate($err), '57014', 'backend, create_pipeline: cancelled') or diag($err);
$kafka->thaw;

# ---------------------------------------------------- exactly once after

# no delay left over for the clients from here on
is($kafka->cmd("pending 1 $_"), '0', "no delay left for API $_") for sort { $a <=> $b } values %api;
$node->restart;
$node->safe_psql('postgres', q{
SELECT streamguard.resume_pipeline('kp'); SELECT streamguard.resume_pipeline('ko');
SELECT streamguard.resume_pipeline('ka')});
$kafka->cmd('produce_json src 100 200');
produce_events(150, 50);
ok(wait_for_value($node, 'SELECT count(*) FROM sink', '300', 120), 'source: drained after the hangs')
  or diag(pipelines_report($node));
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT i), min(i), max(i) FROM sink'), '300|300|0|299',
	'source: every message exactly once');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT off, lag(off) OVER (PARTITION BY partition ORDER BY off) AS prev FROM sink) s
WHERE prev IS NOT NULL AND off <> prev + 1}), '0', 'source: offsets gapless per partition');
ok(wait_for_value($node, q{SELECT string_agg(pipeline || ':' || coalesce(lag_events, -1), ',' ORDER BY pipeline) FROM streamguard.pipelines
WHERE pipeline IN ('ko', 'ka')}, 'ka:0,ko:0', 120), 'sinks: caught up') or diag(pipelines_report($node));
$kafka->check_topic($node, 'out', 200, 'exactly_once sink');
$kafka->audit($node, 'outa');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT (value::jsonb->>'i')::int) FROM audit}), '200',
	'at_least_once sink: no event lost');

$node->stop;
$kafka->stop;
done_testing();
