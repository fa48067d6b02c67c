# Monitoring with the real tools (docs/monitoring): Debian's
# prometheus-postgres-exporter with the shipped queries, promtool on the
# text of metrics() and of sgctl metrics, promtool on the shipped rules and
# their unit tests, the Grafana dashboard's queries.
#   - the exporter, with docs/monitoring/postgres_exporter.yml, against
#     databases with every kind of pipeline (local, remote sink, Kafka
#     source, window, a consumer group member, a captured table), alone and
#     with --auto-discover-databases over three databases (two with the
#     same pipeline names, one without streamguard): it stays up, every
#     scrape is 200, its own pg_up is there, and the streamguard series are
#     there with their exact label sets (database, foreign_server: never a
#     second "server", the label the exporter adds itself);
#   - metrics() and sgctl metrics pass promtool check metrics, HELP comes
#     before TYPE, each series has the label database first, a histogram's
#     buckets come in ascending order with +Inf last;
#   - appended_events_total and consumed_events_total count the appends and
#     what a pipeline consumed; events_per_second and
#     append_rate fall to 0 when the pipeline and the stream are idle;
#   - a planned restart (pg_ctl restart, mode fast) leaves restarts_total
#     alone, an immediate shutdown and terminated workers count; the
#     series as scraped around them, fed to promtool test rules: the
#     shipped StreamguardPipelineRestarting alert stays quiet through the
#     planned restarts and fires on the unplanned ones;
#   - promtool check rules and test rules on alerts.yml / alerts_test.yml;
#   - grafana-dashboard.json is JSON, and every series its queries name is
#     one that metrics() and the exporter both produce.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

sub in_path
{
	my ($cmd) = @_;
	return (grep { -x "$_/$cmd" } split(/:/, $ENV{PATH}), '/usr/bin', '/usr/sbin') ? 1 : 0;
}
my ($exporter) = grep { -x } map { "$_/prometheus-postgres-exporter" } split(/:/, $ENV{PATH}), '/usr/bin';
my ($promtool) = grep { -x } map { "$_/promtool" } split(/:/, $ENV{PATH}), '/usr/bin';
plan skip_all => 'prometheus-postgres-exporter, promtool or curl is missing (scripts/install-deps.sh installs them)'
  unless $exporter && $promtool && in_path('curl');

my $docs = "$FindBin::RealBin/../../docs/monitoring";
my $tmp = PostgreSQL::Test::Utils::tempdir('monitoring');
# promtool test rules makes its storage in a directory under TMPDIR
$ENV{TMPDIR} = $tmp;

my $kafka_broker = "$FindBin::RealBin/../kafka/sg_mock_broker";
die "$kafka_broker is missing: make kafka-tools\n" unless -x $kafka_broker;
require KafkaMock;
my $kafka = KafkaMock->start;
$kafka->cmd('topic orders 2');
$kafka->cmd('produce_json orders 50');
my $boot = $kafka->bootstrap;

my $node = sg_node('monitoring', mpx => 10, extra => "streamguard.remote_timeout = '5s'\n");
my $sock = $node->host;
my $port = $node->port;

# ------------------------------------------------------------- the setup
# postgres: every kind of pipeline; second: the same local pipeline names
# (the database label tells them apart); plain: no streamguard
$node->safe_psql('postgres', q{CREATE DATABASE second; CREATE DATABASE plain;});
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
$node->safe_psql('postgres', remote_server_sql('rs', $port, host => $sock, user => $node->safe_psql('postgres', 'SELECT current_user')) . qq{
SELECT streamguard.create_stream('s', 2, retention => '1 hour');
CREATE TABLE t (n int);
CREATE TABLE rsink (seq bigint);
SELECT streamguard.create_pipeline('p', 's', 'INSERT INTO t SELECT 1 FROM batch', batch_size => 10);
SELECT streamguard.create_pipeline('pr', 's', 'SELECT seq FROM batch', sink_server => 'rs',
	sink_table => 'rsink', sink_mode => 'offsets');
CREATE TABLE w (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('pw', 's', 'w', '1 hour');
CREATE SERVER kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS ("bootstrap.servers" '$boot');
CREATE TABLE ksink (i bigint);
SELECT streamguard.create_pipeline('pk', 'orders', \$\$INSERT INTO ksink SELECT (payload->>'i')::bigint FROM batch\$\$,
	batch_size => 20, source_server => 'kafka');
SELECT streamguard.create_stream('cdc', 1);
CREATE TABLE acct (id int PRIMARY KEY, v int);
SELECT streamguard.capture_table('acct', 'cdc');
INSERT INTO acct SELECT g, g FROM generate_series(1, 5) g;
SELECT count(*) FROM streamguard.append_batch('s', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 95)));
});
$node->safe_psql('second', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('s', 1);
CREATE TABLE t (n int);
SELECT streamguard.create_pipeline('p', 's', 'INSERT INTO t SELECT 1 FROM batch', batch_size => 10);
SELECT count(*) FROM streamguard.append_batch('s', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 7)));
-- values that exist for some rows only (a paused pipeline has no worker_up,
-- a window pipeline on a quiet stream): no NaN in a scrape
SELECT streamguard.create_stream('quiet', 1, retention => '1 hour');
CREATE TABLE w (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('pw2', 'quiet', 'w', '1 hour');
CREATE TABLE t2 (n int);
SELECT streamguard.create_pipeline('pp', 's', 'INSERT INTO t2 SELECT 1 FROM batch');
SELECT streamguard.pause_pipeline('pp');
});
ok(wait_pipelines_running($node, [qw(p pr pw pk)], 90), 'the four pipelines of postgres run')
  or diag(pipelines_report($node));
ok(wait_for_value($node, q{SELECT count(*) FROM t}, '95', 90), 'the local pipeline consumed the 95 events');
ok(wait_for_value($node, q{SELECT count(*) FROM ksink}, '50', 90), 'the Kafka pipeline consumed the 50 messages');
ok(wait_for_value($node, q{SELECT count(*) FROM t}, '7', 90, dbname => 'second'), 'so did the one of second');

# a group member lives as long as its session: one stays open throughout
my ($gin, $gout, $gerr) = ('', '', '');
my $gsession = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$gin, '>', \$gout, '2>', \$gerr, IPC::Run::timeout(600));
$gin .= q{SELECT count(*) FROM streamguard.poll('s', 'grp', 5, member => 'm1');} . "\n";
my $deadline = time + 60;
$gsession->pump while $gout !~ /^\d+\n/ && time < $deadline;
like($gout, qr/^5\n/, 'a session polls as member m1 of group grp');

# ---------------------------------------------- metrics(): text, promtool
sub promtool_check_metrics
{
	my ($text) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $promtool, 'check', 'metrics' ], '<', \$text, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	return ($? >> 8, "$out$err");
}

# the exposition's conventions, beyond what promtool lints: HELP then TYPE
# for each family, the database label first, buckets ascending, +Inf last
sub text_problems
{
	my ($text, $db) = @_;
	my @lines = split /\n/, $text;
	my (@problems, %help);
	for my $i (0 .. $#lines)
	{
		my $l = $lines[$i];
		if ($l =~ /^# HELP (\w+) /) { $help{$1} = $i; next; }
		if ($l =~ /^# TYPE (\w+) /)
		{
			push @problems, "TYPE of $1 not right after its HELP"
			  unless defined $help{$1} && $help{$1} == $i - 1;
			next;
		}
		push @problems, "no database=\"$db\" first: $l" unless $l =~ /^\w+\{database="\Q$db\E"[,}]/;
	}
	my %buckets;
	for my $l (@lines)
	{
		next unless $l =~ /^(\w+_bucket)\{(.*),le="([^"]+)"\} /;
		push @{ $buckets{"$1\{$2\}"} }, $3;
	}
	for my $series (sort keys %buckets)
	{
		my @le = @{ $buckets{$series} };
		push @problems, "$series: +Inf is not last (@le)" unless $le[-1] eq '+Inf';
		my @finite = grep { $_ ne '+Inf' } @le;
		push @problems, "$series: buckets not ascending (@le)"
		  if join(',', @finite) ne join(',', sort { $a <=> $b } @finite) || @finite != @le - 1;
	}
	return \@problems;
}

sub labels_of
{
	my ($text, $name) = @_;
	my @sets;
	for my $l (split /\n/, $text)
	{
		next unless $l =~ /^\Q$name\E\{(.*)\} \S+$/;
		my $labels = $1;
		my %l;
		$l{$1} = $2 while $labels =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
		push @sets, \%l;
	}
	return @sets;
}

sub series_names
{
	my ($text) = @_;
	my %n;
	$n{$1} = 1 while $text =~ /^(\w+)\{/mg;
	return \%n;
}

# the histogram's buckets are all there once a pipeline has committed
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM streamguard.pipeline_batch_durations WHERE pipeline = 'p'}),
	'the batch-duration histogram has buckets');
my $mtext = $node->safe_psql('postgres', 'SELECT streamguard.metrics()');
my ($rc, $lint) = promtool_check_metrics("$mtext\n");
is($rc, 0, 'promtool check metrics passes on metrics()') or diag($lint);
is_deeply(text_problems($mtext, 'postgres'), [], 'metrics(): HELP then TYPE, database first, buckets in order');
like($mtext, qr/^# HELP streamguard_pipeline_batch_duration_seconds .*\n# TYPE streamguard_pipeline_batch_duration_seconds histogram\n/m,
	'the histogram family: HELP then TYPE');
my @le = map { /le="([^"]+)"/ } grep { /^streamguard_pipeline_batch_duration_seconds_bucket\{database="postgres",pipeline="p",/ }
  split /\n/, $mtext;
is(join(' ', @le), '0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 10 +Inf', 'the buckets of p, in order');
my %rsets = map { (join(',', sort keys %$_) => 1) } labels_of($mtext, 'streamguard_remote_connected');
is_deeply([ sort keys %rsets ], ['database,foreign_server,pipeline,side'],
	'remote_connected: database, foreign_server, pipeline, side');
like($mtext, qr/^streamguard_stream_appended_events_total\{database="postgres",stream="s"\} 95$/m,
	'appended_events_total of s: the 95 appends');
like($mtext, qr/^streamguard_stream_appended_events_total\{database="postgres",stream="cdc"\} 5$/m,
	'appended_events_total of the capture stream: 5 inserts');
my $consumed = 0;
$consumed += $_ for $mtext =~ /^streamguard_consumer_consumed_events_total\{database="postgres",stream="s",consumer="pipeline:p",partition="\d+"\} (\d+)$/mg;
is($consumed, 95, 'consumed_events_total of pipeline p over its partitions: the 95 events');
like($mtext, qr/^streamguard_kafka_lag_messages\{database="postgres",pipeline="pk",topic="orders",partition="0"\} 0$/m,
	'the Kafka lag is there');
like($mtext, qr/^streamguard_window_open\{database="postgres",pipeline="pw"\} \d+$/m, 'the window pipeline is there');
like($mtext, qr/^streamguard_group_member_partitions\{database="postgres",stream="s",consumer="grp",member="m1"\} 2$/m,
	'the group member is there');
my $stext = $node->safe_psql('second', 'SELECT streamguard.metrics()');
like($stext, qr/^streamguard_pipeline_events_in_total\{database="second",pipeline="p"\} 7$/m,
	'the database label of another database');

# sgctl metrics
my $sgctl = $node->config_data('--bindir') . '/sgctl';
SKIP:
{
	skip "sgctl is not installed in $sgctl", 3 unless -x $sgctl;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $sgctl, 'metrics', '-d', $node->connstr('postgres') ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	is($? >> 8, 0, 'sgctl metrics exits 0') or diag($err);
	($rc, $lint) = promtool_check_metrics($out);
	is($rc, 0, 'promtool check metrics passes on sgctl metrics') or diag($lint);
	is_deeply(text_problems($out, 'postgres'), [], 'sgctl metrics: HELP then TYPE, database first, buckets in order');
}

# ------------------------------------------------ postgres_exporter
my $xport = PostgreSQL::Test::Cluster::get_free_port();
my $url = "http://127.0.0.1:$xport/metrics";

sub start_exporter
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	# as docs/operations.md sets it up: a role of its own in pg_monitor, no
	# grant on any stream
	local $ENV{DATA_SOURCE_NAME} = "host=$sock port=$port dbname=postgres user=prometheus sslmode=disable";
	my $h = IPC::Run::start([ $exporter, "--web.listen-address=127.0.0.1:$xport",
		"--extend.query-path=$docs/postgres_exporter.yml", @args ],
		'>&', \$out, IPC::Run::timeout(600));
	return { h => $h, out => \$out };
}

sub curl
{
	my ($u) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'curl', '-sS', '-m', '30', '-w', '\n%{http_code}', $u ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	my ($code) = $out =~ s/\n(\d{3})\z//s ? ($1) : ('000');
	return ($code, $out);
}

# scrape until the streamguard series are there (the exporter reads its
# queries at its first scrape), at most 60 s
sub scrape_exporter
{
	my ($x, $want) = @_;
	my ($code, $body) = ('000', '');
	my $deadline = time + 60;
	while (time < $deadline)
	{
		$x->{h}->pump_nb;
		($code, $body) = curl($url);
		last if $code eq '200' && $body =~ $want;
		last unless $x->{h}->pumpable;
		usleep(300_000);
	}
	return ($code, $body);
}

sub stop_exporter
{
	my ($x) = @_;
	my $alive = $x->{h}->pumpable ? 1 : 0;
	$x->{h}->signal('TERM') if $alive;
	eval { $x->{h}->finish; };
	return $alive;
}

$node->safe_psql('postgres', 'CREATE ROLE prometheus LOGIN IN ROLE pg_monitor');
my $xall = '';
for my $mode ([ 'one database', [] ], [ 'auto-discovery', ['--auto-discover-databases'] ])
{
	my ($what, $args) = @$mode;
	my $x = start_exporter(@$args);
	my ($code, $body) = scrape_exporter($x, qr/^streamguard_remote_connected\{/m);
	is($code, '200', "exporter ($what): the scrape answers 200");
	my ($code2, $body2) = curl($url);
	is($code2, '200', "exporter ($what): a second scrape too");
	like($body2, qr/^pg_up(\{[^}]*\})? 1$/m, "exporter ($what): its own pg_up is there and 1");
	unlike(${ $x->{out} }, qr/panic|duplicate label/, "exporter ($what): no panic in its log")
	  or diag(substr(${ $x->{out} }, 0, 2000));

	my @remote = labels_of($body2, 'streamguard_remote_connected');
	my %sets = map { (join(',', sort keys %$_) => 1) } @remote;
	is_deeply([ sort keys %sets ], ['database,foreign_server,pipeline,server,side'],
		"exporter ($what): remote_connected has database, foreign_server, pipeline, server, side");
	is(scalar(grep { $_->{foreign_server} eq 'rs' && $_->{pipeline} eq 'pr' && $_->{side} eq 'sink' } @remote), 1,
		"exporter ($what): ... for pipeline pr and foreign server rs");
	for my $name (qw(streamguard_pipeline_events_in_total streamguard_stream_appended_events_total
		streamguard_consumer_lag_events streamguard_window_open streamguard_kafka_lag_messages
		streamguard_group_member_partitions streamguard_pipeline_restarts_total
		streamguard_pipeline_events_per_second streamguard_remote_prepared_pending
		streamguard_stream_segments streamguard_stream_segments_expected))
	{
		my @sets = labels_of($body2, $name);
		ok(@sets && !grep({ ($_->{database} // '') ne 'postgres' && ($_->{database} // '') ne 'second' } @sets),
			"exporter ($what): $name is there, with a database label");
	}
	my @in = map { "$_->{database}/$_->{pipeline}" } labels_of($body2, 'streamguard_pipeline_events_in_total');
	my @want_in = $what eq 'one database' ? qw(postgres/p postgres/pk postgres/pr postgres/pw)
	  : qw(postgres/p postgres/pk postgres/pr postgres/pw second/p second/pp second/pw2);
	is_deeply([ sort @in ], \@want_in, "exporter ($what): events_in_total of every pipeline of every database");
	my $xconsumed = 0;
	$xconsumed += $1 while $body2 =~ /^streamguard_consumer_consumed_events_total\{consumer="pipeline:p",database="postgres",partition="\d+",server="[^"]+",stream="s"\} (\S+)$/mg;
	is($xconsumed, 95, "exporter ($what): consumed_events_total of pipeline p");
	like($body2, qr/^streamguard_stream_appended_events_total\{database="postgres",server="[^"]+",stream="s"\} 95$/m,
		"exporter ($what): appended_events_total of s");
	my @nan = grep { /^streamguard_\S+ NaN$/ } split /\n/, $body2;
	is_deeply(\@nan, [], "exporter ($what): no series is NaN (a value some rows lack has a query of its own)");
	if (@$args)
	{
		unlike($body2, qr/^streamguard_pipeline_worker_up\{[^}]*pipeline="pp"/m, "exporter ($what): a paused pipeline has no worker_up, as in metrics()");
		like($body2, qr/^streamguard_pipeline_worker_up\{database="second",pipeline="p",server="[^"]+"\} 1$/m, "exporter ($what): ... a running one has 1");
		like($body2, qr/^streamguard_window_open\{database="second",pipeline="pw2",server="[^"]+"\} 0$/m, "exporter ($what): ... but its other window series");
	}
	ok(stop_exporter($x), "exporter ($what): still running after the scrapes");
	$xall = $body2 if @$args;
}

# ----------------------------------------------- the dashboard's queries
{
	my $json = slurp_file("$docs/grafana-dashboard.json");
	my $dash = eval { JSON::PP->new->decode($json) };
	ok($dash, 'grafana-dashboard.json is JSON') or diag($@);
	my @exprs;
	my $walk;
	$walk = sub {
		my ($v) = @_;
		if (ref $v eq 'HASH')
		{
			push @exprs, $v->{expr} if defined $v->{expr} && !ref $v->{expr};
			push @exprs, $v->{query} if defined $v->{query} && !ref $v->{query} && $v->{query} =~ /streamguard_/;
			$walk->($_) for values %$v;
		}
		elsif (ref $v eq 'ARRAY') { $walk->($_) for @$v; }
	};
	$walk->($dash);
	ok(@exprs >= 8, 'the dashboard has queries (' . scalar(@exprs) . ')');
	# a family of metrics() (some have series only now and then: a horizon
	# holder, a retention margin) and a metric of the exporter's queries
	my %from_fn;
	$from_fn{$1} = 1 while $mtext =~ /^# TYPE (\w+) /mg;
	for my $h (grep { $mtext =~ /^# TYPE \Q$_\E histogram$/m } keys %from_fn)
	{
		$from_fn{"${h}_$_"} = 1 for qw(bucket sum count);
	}
	my (%from_x, $query);
	for my $l (split /\n/, slurp_file("$docs/postgres_exporter.yml"))
	{
		$query = $1 if $l =~ /^(\w+):$/;
		$from_x{"${query}_$1"} = 1 if $query && $l =~ /^    - (\w+): \{usage: (?!LABEL)/;
	}
	my @missing;
	for my $e (@exprs)
	{
		while ($e =~ /\b(streamguard_\w+)/g)
		{
			push @missing, "$1 (metrics())" unless $from_fn{$1};
			push @missing, "$1 (exporter)" unless $from_x{$1};
		}
	}
	is_deeply(\@missing, [], 'every series the dashboard names is one of metrics() and of the exporter queries');
	is(scalar(grep { !$from_x{$_} } grep { /^streamguard_/ } keys %{ series_names($xall) }), 0,
		'and the exporter queries make only the series they declare');
	unlike($json, qr/\$\{?DS_|"datasource":\s*"[^\$]/, 'the data source is the dashboard variable');
}

# ----------------------------------------------------- idle rates fall to 0
ok(wait_for_value($node, q{SELECT bool_and(events_per_sec = 0) FROM streamguard.pipelines WHERE pipeline IN ('p', 'pr')}, 't', 90),
	'events_per_second falls to 0 once the pipelines are idle');
ok(wait_for_value($node, q{SELECT append_rate = 0 FROM streamguard.streams WHERE stream = 's'}, 't', 90),
	'append_rate falls to 0 once nobody appends');
like($node->safe_psql('postgres', 'SELECT streamguard.metrics()'),
	qr/^streamguard_pipeline_events_per_second\{database="postgres",pipeline="p"\} 0$/m, 'metrics() says 0 too');

# ------------------------------------- planned and unplanned restarts
$gin .= "\\q\n";
$gsession->finish;
sub restarts
{
	my $v = $node->safe_psql('postgres', q{SELECT restarts FROM streamguard.pipelines WHERE pipeline = 'p'});
	return $v;
}
my @samples = (restarts());    # one per "scrape", '_' when the server is down
is($samples[0], '0', 'no restart yet');
# four planned restarts: a rolling maintenance (more than the alert's 3)
for my $i (1 .. 4)
{
	push @samples, '_';
	$node->restart;            # pg_ctl restart -m fast
	ok(wait_pipelines_running($node, [qw(p pr pw pk)], 90), "planned restart $i: the pipelines run again");
	push @samples, restarts(), restarts();
}
is($samples[-1], '0', 'four planned restarts: restarts_total is still 0');
my @planned = @samples;

$node->stop('immediate');
$node->start;
ok(wait_pipelines_running($node, ['p'], 90), 'after an immediate shutdown the pipeline runs again');
push @samples, '_', restarts();
is($samples[-1], '1', 'an immediate shutdown counts as a restart');
for my $i (1 .. 3)
{
	my $pid = $node->safe_psql('postgres', q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p'});
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok(wait_for_value($node, qq{SELECT worker_pid IS NOT NULL AND worker_pid <> $pid FROM streamguard.pipelines WHERE pipeline = 'p'}, 't', 90),
		"terminated worker $i: a new one runs");
	push @samples, restarts();
}
is($samples[-1], '4', 'and so does each terminated worker');

# the series as scraped, one sample a minute, fed to the shipped rules
my $series_planned = join(' ', @planned);
my $series_all = join(' ', @samples);
my $n_planned = scalar(@planned) - 1;
my $n_all = scalar(@samples) - 1;
my $rtest = "$tmp/restarts_test.yml";
open(my $fh, '>', $rtest) or die "cannot write $rtest: $!";
print $fh <<"EOF";
rule_files:
  - $docs/alerts.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'streamguard_pipeline_restarts_total{database="postgres",pipeline="p"}'
        values: '$series_planned'
    alert_rule_test:
      - eval_time: ${n_planned}m
        alertname: StreamguardPipelineRestarting
        exp_alerts: []
  - interval: 1m
    input_series:
      - series: 'streamguard_pipeline_restarts_total{database="postgres",pipeline="p"}'
        values: '$series_all'
    alert_rule_test:
      - eval_time: ${n_all}m
        alertname: StreamguardPipelineRestarting
        exp_alerts:
          - exp_labels: {severity: warning, database: postgres, pipeline: p}
            exp_annotations:
              summary: "Pipeline p restarted more than 3 times in 15 minutes"
EOF
close $fh;
my ($pout, $perr) = ('', '');
IPC::Run::run([ $promtool, 'test', 'rules', $rtest ], '>', \$pout, '2>', \$perr, IPC::Run::timeout(60));
is($? >> 8, 0, "restart alert on the scraped series [$series_all]: quiet through the planned restarts, fires on the others")
  or diag("$pout$perr");

# ------------------------------------------------------ the shipped rules
for my $cmd ([ 'check', 'rules', "$docs/alerts.yml" ], [ 'test', 'rules', "$docs/alerts_test.yml" ])
{
	($pout, $perr) = ('', '');
	IPC::Run::run([ $promtool, @$cmd ], '>', \$pout, '2>', \$perr, IPC::Run::timeout(60));
	is($? >> 8, 0, "promtool $cmd->[0] $cmd->[1] " . ($cmd->[2] =~ s{.*/}{}r)) or diag("$pout$perr");
}
# every shipped alert has a unit test that expects it to fire
my $rules = slurp_file("$docs/alerts.yml");
my $tests = slurp_file("$docs/alerts_test.yml");
my @untested;
while ($rules =~ /^\s*- alert: (\w+)$/mg)
{
	my $a = $1;
	push @untested, $a unless $tests =~ /alertname: \Q$a\E\n\s+exp_alerts:\n\s+- exp_labels/;
}
is_deeply(\@untested, [], 'every shipped alert has a unit test in which it fires');

$kafka->stop;
$node->stop;
done_testing();
