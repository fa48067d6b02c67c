
# Fuzzing with SQLsmith (`make fuzz`, and a short run in scripts/test.sh;
# docs/testing.md, "Fuzzing").
#
# SQLsmith (a random query generator none of us wrote: Debian's sqlsmith
# package) reads the catalogs of a database and sends it random queries
# built from its tables, views, operators and functions.  This file starts
# one private server with streamguard preloaded and every kind of object the
# extension has in it, then lets SQLsmith loose on it twice: once as an
# ordinary role with a few grants (fuzz_user) and once as the role that owns
# the objects (fuzz_owner).  The pipelines' workers keep running meanwhile,
# so the random queries meet live workers, a live launcher and live
# maintenance.  SQLsmith runs with --exclude-catalog: its queries read
# streamguard's views and the test's tables, not the system catalogs (it
# still calls any scalar function or operator).
#
# Objects: streams (one with retention and several partitions, one small),
# consumers and a consumer group with members, pipelines of each guarantee
# (exactly_once, at_least_once, at_most_once; one with dedup and one with
# dead letters), a two_phase remote sink and a remote source through a
# foreign server of streamguard_remote (the same cluster's database
# "remote" over 127.0.0.1), window pipelines (tumbling, session), a
# captured table, and a Kafka source pipeline on the test broker when
# test/kafka/sg_mock_broker is built (else that object is skipped, with a
# note).
#
# Pass: for each role SQLsmith ran its queries to the end, the server log
# shows no PANIC, no failed assertion (TRAP), no process terminated by a
# signal and no crash restart ("all server processes terminated;
# reinitializing"), the postmaster is the same process as before, and the
# server still answers.  On failure the queries the crashed processes were
# running (the log's "Failed process was running" lines) are printed; every
# query SQLsmith generated is in tmp_check/log/sqlsmith_<role>.sql.
#
# Knobs (environment):
#   SG_FUZZ_QUERIES  queries per role (default 2000: about 1-2 minutes)
#   SG_FUZZ_SEED     SQLsmith's seed for the first role (default 1; the
#                    second role gets the seed + 1)
#   SG_FUZZ_TIMEOUT  seconds one SQLsmith run may take (default
#                    600 + queries / 10)
#   SG_FUZZ_SELFTEST=1  the check of the check: during each run a pipeline
#                    worker gets SIGSEGV, and the run must fail

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../t/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
use StreamguardTest;

my $queries = $ENV{SG_FUZZ_QUERIES} // 2000;
my $seed = $ENV{SG_FUZZ_SEED} // 1;
my $run_timeout = $ENV{SG_FUZZ_TIMEOUT} // (600 + int($queries / 10));
my $sqlsmith = $ENV{SG_SQLSMITH} // 'sqlsmith';

die "SG_FUZZ_QUERIES must be a positive number\n" unless $queries =~ /^[1-9][0-9]*$/;
die "SG_FUZZ_SEED must be a number\n" unless $seed =~ /^[0-9]+$/;

if (!grep { -x "$_/$sqlsmith" } split(/:/, $ENV{PATH}))
{
	plan skip_all => "$sqlsmith is not installed (Debian: apt-get install sqlsmith)"
	  unless $sqlsmith =~ m{/} && -x $sqlsmith;
}
diag("SQLsmith: $queries queries per role, seed $seed");

my $owner_pw = 'fuzz-Owner-2718';
my $user_pw = 'fuzz-User-1618';

# Errors are the common case under SQLsmith: log them with their SQLSTATE
# but without the statement (SQLsmith's dump has every query).
my $node = sg_node('fuzz', remote => 1, trust_tcp => [],
	extra => "log_line_prefix = '%m [%p] %e '\n"
	  . "log_min_error_statement = panic\n"
	  . "streamguard.remote_timeout = '10s'\n"
	  . "max_worker_processes = 24\n"
	  # fuzz_owner's eleven pipeline workers and a backfill: above the default
	  # per-role share (half of streamguard's 18 slots)
	  . "streamguard.role_max_workers = 16\n"
	  . "streamguard.database_max_workers = 16\n");

# ------------------------------------------------------------ the objects

my $kafka;
my $broker = "$FindBin::RealBin/../kafka/sg_mock_broker";
if (-x $broker)
{
	require KafkaMock;
	$kafka = KafkaMock->start;
	$kafka->cmd('topic orders 2');
	$kafka->cmd('produce_json orders 200');
}
else
{
	diag("no Kafka object: $broker is not built (make kafka-tools)");
}

$node->safe_psql('postgres', qq{
CREATE DATABASE remote;
CREATE ROLE fuzz_owner LOGIN PASSWORD '$owner_pw';
CREATE ROLE fuzz_user LOGIN PASSWORD '$user_pw';
CREATE ROLE fuzz_sinker LOGIN PASSWORD 'fuzz-Sink-1414';
});

# the "remote" database: a stream to read, a sink table to write
$node->safe_psql('remote', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('far', 2);
SELECT count(*) FROM streamguard.append_batch('far',
	ARRAY(SELECT jsonb_build_object('id', i) FROM generate_series(1, 300) i));
SELECT streamguard.grant_stream('far', 'fuzz_sinker', 'read');
CREATE TABLE public.far_sink (id bigint, partition int, seq bigint);
GRANT INSERT, SELECT ON public.far_sink TO fuzz_sinker;
CREATE TABLE public.streamguard_sink_marker (pipeline text PRIMARY KEY, gid text NOT NULL);
GRANT SELECT, INSERT, UPDATE, DELETE ON public.streamguard_sink_marker TO fuzz_sinker;
});

my $sel = q{SELECT (payload->>'id')::bigint AS id, partition, seq FROM batch};
my $kafka_sql = '';
if ($kafka)
{
	my $boot = $kafka->bootstrap;
	$kafka_sql = qq{
CREATE SERVER kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS ("bootstrap.servers" '$boot');
GRANT USAGE ON FOREIGN SERVER kafka TO fuzz_owner;
CREATE TABLE public.kafka_sink (v text);
ALTER TABLE public.kafka_sink OWNER TO fuzz_owner;
SET ROLE fuzz_owner;
SELECT streamguard.create_pipeline('p_kafka', 'orders', 'INSERT INTO kafka_sink SELECT payload::text FROM batch',
	source_server => 'kafka');
RESET ROLE;
};
}

$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO fuzz_owner;
GRANT CREATE ON SCHEMA public TO fuzz_owner;
GRANT USAGE ON FOREIGN DATA WRAPPER streamguard_remote TO fuzz_owner;
@{[ remote_server_sql('far', $node, dbname => 'remote', user => 'fuzz_sinker', password => 'fuzz-Sink-1414', for => 'fuzz_owner') ]}
GRANT USAGE ON FOREIGN SERVER far TO fuzz_owner;

SET ROLE fuzz_owner;
SELECT streamguard.create_stream('events', 4, retention => '1 day');
SELECT streamguard.create_stream('small', 1, dedup_window => '10 min');
SELECT streamguard.create_stream('wsrc', 2);
SELECT streamguard.create_stream('cdc', 2);
SELECT count(*) FROM streamguard.append_batch('events',
	ARRAY(SELECT jsonb_build_object('id', i, 'n', i % 7, 'ts', now() - (300 - i) * interval '1 s')
		  FROM generate_series(1, 300) i),
	ARRAY(SELECT 'k' || (i % 13) FROM generate_series(1, 300) i));
SELECT streamguard.append('small', '{"id": 1}', key => 'a', dedup_key => 'd1');
SELECT streamguard.append('small', '{"id": "poison"}', key => 'b', dedup_key => 'd2');
SELECT count(*) FROM streamguard.append_batch('wsrc',
	ARRAY(SELECT jsonb_build_object('n', i, 'ts', now() - (100 - i) * interval '1 s')
		  FROM generate_series(1, 100) i),
	ARRAY(SELECT 'w' || (i % 3) FROM generate_series(1, 100) i));
SELECT streamguard.grant_stream('events', 'fuzz_user', 'read');
SELECT streamguard.grant_stream('small', 'fuzz_user', 'append');
SELECT streamguard.grant_stream('wsrc', 'fuzz_user', 'all');

-- consumers and a consumer group
SELECT count(*) FROM streamguard.poll('events', 'c_plain', 50);
SELECT count(*) FROM streamguard.poll('events', 'grp', 10, member => 'm1');
SELECT count(*) FROM streamguard.poll('events', 'grp', 10, member => 'm2');

-- sinks
CREATE TABLE sink_eo (id bigint, partition int, seq bigint);
CREATE TABLE sink_alo (LIKE sink_eo);
CREATE TABLE sink_amo (LIKE sink_eo);
CREATE TABLE sink_dd (LIKE sink_eo);
CREATE TABLE sink_dl (LIKE sink_eo);
CREATE TABLE sink_far (LIKE sink_eo);
CREATE TABLE w_tum_out (window_start timestamptz, window_end timestamptz, key text, events numeric, total numeric);
CREATE TABLE w_ses_out (window_start timestamptz, window_end timestamptz, key text, revision int,
	retracted boolean, events numeric);
CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric);
INSERT INTO acct SELECT i, 'o' || i, i * 10 FROM generate_series(1, 50) i;
GRANT SELECT ON sink_eo, acct TO fuzz_user;
GRANT INSERT, UPDATE ON acct TO fuzz_user;

-- pipelines of each guarantee
SELECT streamguard.create_pipeline('p_eo', 'events', \$\$INSERT INTO sink_eo $sel\$\$, batch_size => 50);
SELECT streamguard.create_pipeline('p_alo', 'events', \$\$INSERT INTO sink_alo $sel\$\$,
	guarantee => 'at_least_once', workers => 2);
SELECT streamguard.create_pipeline('p_amo', 'events', \$\$INSERT INTO sink_amo $sel\$\$,
	guarantee => 'at_most_once');
SELECT streamguard.create_pipeline('p_dd', 'small', \$\$INSERT INTO sink_dd SELECT 0, partition, seq FROM batch\$\$, dedup => true);
SELECT streamguard.create_pipeline('p_dl', 'small', \$\$INSERT INTO sink_dl $sel\$\$,
	error_policy => 'dead_letter', max_attempts => 1);
-- remote: a two_phase sink and a source
SELECT streamguard.create_pipeline('p_rsink', 'events', \$\$$sel\$\$,
	sink_server => 'far', sink_table => 'public.far_sink', sink_mode => 'two_phase');
SELECT streamguard.create_pipeline('p_rsrc', 'far', \$\$INSERT INTO sink_far $sel\$\$, source_server => 'far');
-- windows
SELECT streamguard.create_window_pipeline('w_tum', 'wsrc', 'w_tum_out', '10 s',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
	event_time => \$\$payload->>'ts'\$\$);
SELECT streamguard.create_window_pipeline('w_ses', 'wsrc', 'w_ses_out', '5 s', kind => 'session',
	event_time => \$\$payload->>'ts'\$\$, late => 'update', keep_closed => '1 hour');
-- a capture
SELECT streamguard.capture_table('acct', 'cdc');
UPDATE acct SET balance = balance + 1 WHERE id % 5 = 0;
RESET ROLE;
$kafka_sql
});

my @pipes = qw(p_eo p_alo p_amo p_dd p_rsink p_rsrc w_tum w_ses);
push @pipes, 'p_kafka' if $kafka;
ok(wait_pipelines_running($node, \@pipes, 180), 'every pipeline runs before the fuzzing')
  or diag(pipelines_report($node));
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM streamguard.dead_letters WHERE pipeline = 'p_dl'}, 't', 180),
	'the dead-letter pipeline has a dead letter') or diag(pipelines_report($node));
ok(wait_for_value($node, q{SELECT count(*) FROM public.sink_far}, '300', 180),
	'the remote source pipeline copied the remote stream');

# ------------------------------------------------------------ the fuzzing

# the session defaults SQLsmith's sessions start with: nothing blocks for
# long (SQLsmith sets its own statement_timeout too)
$node->safe_psql('postgres', q{
ALTER ROLE fuzz_owner SET lock_timeout = '2s';
ALTER ROLE fuzz_user SET lock_timeout = '2s';
ALTER ROLE fuzz_owner SET statement_timeout = '5s';
ALTER ROLE fuzz_user SET statement_timeout = '5s';
});

sub postmaster_pid
{
	my $f = $node->data_dir . '/postmaster.pid';
	open(my $fh, '<', $f) or return '';
	my $pid = <$fh>;
	close $fh;
	chomp $pid;
	return $pid;
}

my $pm_pid = postmaster_pid();
my $logdir = $PostgreSQL::Test::Utils::log_path;
my %pw = (fuzz_user => $user_pw, fuzz_owner => $owner_pw);
my $i = 0;
for my $role (qw(fuzz_user fuzz_owner))
{
	my $s = $seed + $i++;
	my $offset = log_offset($node);
	my $dump = "$logdir/sqlsmith_$role.sql";
	my $err = "$logdir/sqlsmith_$role.err";
	my $target = tcp_connstr($node, $role, $pw{$role}, 'postgres') . ' application_name=sqlsmith';
	my @cmd = ($sqlsmith, "--target=$target", "--seed=$s", "--max-queries=$queries",
		'--exclude-catalog', '--dump-all-queries', '--verbose');
	note("running: @cmd");
	my $t0 = time;
	my $ok = eval {
		IPC::Run::run(\@cmd, '<', \undef, '>', $dump, '2>', $err, IPC::Run::timeout($run_timeout));
	};
	my $why = $@;
	my $secs = time - $t0;
	if ($ENV{SG_FUZZ_SELFTEST})
	{
		my $pid = q1($node, q{SELECT min(worker_pid) FROM streamguard.pipelines}, 60);
		note("self-test: SIGSEGV to pipeline worker $pid");
		kill 'SEGV', $pid if $pid;
		wait_crash_recovery($node, $offset);
	}
	my $tail = `tail -c 2000 '$err'`;
	my $ran = () = slurp_file($dump) =~ /;\s*$/mg;
	diag(sprintf('%s: %d queries in %d s (seed %d)', $role, $ran, $secs, $s));
	ok(!$why, "$role: SQLsmith finished within ${run_timeout}s") or diag($why);
	cmp_ok($ran, '>=', $queries, "$role: SQLsmith generated its $queries queries")
	  or diag("SQLsmith's stderr ends:\n$tail");

	my $log = slurp_file($node->logfile, $offset);
	my @bad = grep { /PANIC:|TRAP:|terminated by signal|was terminated|reinitializing|failed assertion/ }
	  split /\n/, $log;
	is(scalar(@bad), 0, "$role: no crash, PANIC or failed assertion in the server log")
	  or diag(join("\n", @bad[0 .. ($#bad < 20 ? $#bad : 19)]) . "\nthe queries:\n"
		  . join("\n", $log =~ /Failed process was running: (.*)/g));
	is(postmaster_pid(), $pm_pid, "$role: the postmaster is the same process");
	is(q1($node, 'SELECT 1', 60), '1', "$role: the server answers after the run");

	# internal errors (XX000) are no crash, but an elog(ERROR) reached by
	# SQL input is worth a look: list streamguard's
	my %internal;
	$internal{$_}++ for $log =~ /\] XX000 ERROR:\s+(.*)/g;
	note("internal errors (XX000) seen: " . scalar(keys %internal));
	note("  $internal{$_} x $_") for sort keys %internal;
}

# the extension's state is still readable
ok(defined q1($node, q{SELECT count(*) FROM streamguard.pipelines}, 60)
	  && defined q1($node, q{SELECT count(*) FROM streamguard.streams}, 60),
	'the pipelines and streams views answer after the fuzzing');

$kafka->stop if $kafka;
$node->stop('fast');
done_testing();
