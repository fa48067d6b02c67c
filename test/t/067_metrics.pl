# streamguard.metrics(): the numbers of the progress views in Prometheus'
# text exposition format, and streamguard.horizon_holders.
#   - the text is well formed: every sample has a # TYPE line for its
#     metric and the label database="postgres" first, counters end in _total, label values are quoted, every value
#     is a number; histogram buckets are cumulative and +Inf equals _count;
#   - the numbers are the views' numbers (events in and rows out of a
#     pipeline, consumer lag, partitions);
#   - horizon_holders names the backend whose open append holds a partition
#     back, and metrics() reports its age;
#   - consumer group members (names with any character, escaped in labels)
#     and window pipelines are there with their views' numbers;
#   - a role sees in metrics() only what the views show it: no consumer of
#     a stream it cannot read, no window or group member it may not see.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time);

my $node = sg_node('metrics');
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('m_src', 2, retention => '1 hour');
CREATE TABLE m_sink (n int);
SELECT streamguard.create_pipeline('m_pipe', 'm_src', 'INSERT INTO m_sink SELECT 1 FROM batch', batch_size => 10);
SELECT count(*) FROM streamguard.append_batch('m_src', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 95)));
SELECT count(*) FROM streamguard.poll('m_src', 'reader', 7);
CREATE ROLE m_other LOGIN;
});
ok(wait_for_value($node, q{SELECT count(*) FROM m_sink}, '95'), 'the pipeline consumed the 95 events');

# parse the exposition text into {name => [[labels, value], ...]} and types
sub scrape
{
	my (%opt) = @_;
	my ($ok, $text, $err) = try_psql($node, 'SELECT streamguard.metrics()', %opt);
	die "metrics() failed: $err" unless $ok;
	my (%types, %samples, @bad);
	for my $line (split /\n/, $text)
	{
		if ($line =~ /^# TYPE (\w+) (gauge|counter|histogram)$/) { $types{$1} = $2; next; }
		next if $line =~ /^# HELP \w+ \S/;
		# every series begins with the label database (compared without it)
		if ($line =~ /^(\w+)\{database="postgres",((?:\w+="(?:[^"\\]|\\.)*",?)*)\} (-?[0-9.e+-]+|\+Inf|NaN)$/)
		{
			push @{ $samples{$1} }, [ $2, $3 ];
			next;
		}
		push @bad, $line;
	}
	return (\%types, \%samples, \@bad, $text);
}

my ($types, $samples, $bad, $text) = scrape();
is_deeply($bad, [], 'every line is a # TYPE, a # HELP or a well-formed sample')
  or diag($text);
my @untyped = grep {
	my $n = $_;
	!exists $types->{$n} && !($n =~ /^(.*)_(bucket|sum|count)$/ && ($types->{$1} // '') eq 'histogram')
} keys %$samples;
is_deeply(\@untyped, [], 'every sample belongs to a metric with a # TYPE line');
my @bad_counters = grep { $types->{$_} eq 'counter' && $_ !~ /_total$/ } keys %$types;
is_deeply(\@bad_counters, [], 'counters are named *_total');

sub value
{
	my ($s, $name, $labels) = @_;
	for my $x (@{ $s->{$name} // [] })
	{
		return $x->[1] if $x->[0] eq $labels;
	}
	return undef;
}
is(value($samples, 'streamguard_pipeline_events_in_total', 'pipeline="m_pipe"'),
	$node->safe_psql('postgres', q{SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'm_pipe'}),
	'events in: as in the pipelines view');
is(value($samples, 'streamguard_pipeline_rows_out_total', 'pipeline="m_pipe"'), '95', 'rows out');
is(value($samples, 'streamguard_stream_partitions', 'stream="m_src"'), '2', 'partitions');
my $lag = $node->safe_psql('postgres', q{SELECT sum(lag_events) FROM streamguard.consumers WHERE consumer = 'reader'});
my $mlag = 0;
$mlag += $_->[1] for grep { $_->[0] =~ /consumer="reader"/ } @{ $samples->{streamguard_consumer_lag_events} };
is($mlag, $lag, 'consumer lag: as in the consumers view');
is(value($samples, 'streamguard_pipeline_worker_up', 'pipeline="m_pipe"'), '1', 'the worker is up');

# the histogram: cumulative buckets, +Inf = _count = batches since start
my @buckets = map { [ $_->[0] =~ /le="([^"]+)"/, $_->[1] ] }
  grep { $_->[0] =~ /^pipeline="m_pipe"/ } @{ $samples->{streamguard_pipeline_batch_duration_seconds_bucket} };
@buckets = sort { ($a->[0] eq '+Inf' ? 1e99 : $a->[0]) <=> ($b->[0] eq '+Inf' ? 1e99 : $b->[0]) } @buckets;
my $monotone = 1;
$monotone &&= $buckets[$_][1] >= $buckets[ $_ - 1 ][1] for 1 .. $#buckets;
ok(@buckets >= 2 && $monotone, 'histogram buckets are cumulative');
is($buckets[-1][1], value($samples, 'streamguard_pipeline_batch_duration_seconds_count', 'pipeline="m_pipe"'),
	'+Inf bucket equals _count');
ok(value($samples, 'streamguard_pipeline_batch_duration_seconds_count', 'pipeline="m_pipe"') >= 10,
	'every committed batch was counted (95 events, batch_size 10)');

# ------------------------------------------------- horizon holders
my ($in, $out, $err) = ('', '', '');
my $holder = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
$in .= "BEGIN;\nSELECT pg_backend_pid();\nSELECT seq FROM streamguard.append('m_src', '{}', partition => 1);\n";
my $deadline = time + 20;
$holder->pump while $out !~ /^\d+\n\d+\n/ && time < $deadline;
my ($holder_pid, $held_seq) = $out =~ /^(\d+)\n(\d+)\n/;
ok($holder_pid, 'a session holds an append open');
is($node->safe_psql('postgres', q{SELECT stream, partition, pid, first_seq FROM streamguard.horizon_holders}),
	"m_src|1|$holder_pid|$held_seq", 'horizon_holders names its pid and seq');
($types, $samples) = scrape();
ok(defined value($samples, 'streamguard_horizon_holder_age_seconds', qq{stream="m_src",partition="1",pid="$holder_pid"}),
	'metrics() reports the holder');
is(value($samples, 'streamguard_partition_horizon_lag', 'stream="m_src",partition="1"'), '1',
	'and the partition\'s horizon lag');
$in .= "ROLLBACK;\n\\q\n";
$holder->finish;
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.horizon_holders}), '0',
	'no holder once it rolled back');

# ---------------------------------------- groups, windows (their views' numbers)
# a member lives as long as its session: keep one open while scraping
my ($gin, $gout, $gerr) = ('', '', '');
my $gsession = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$gin, '>', \$gout, '2>', \$gerr, IPC::Run::timeout(60));
$gin .= q{SELECT count(*) FROM streamguard.poll('m_src', 'grp', 5, member => E'we"ird\\\\member\nx');} . "\n";
$deadline = time + 20;
$gsession->pump while $gout !~ /^\d+\n/ && time < $deadline;
like($gout, qr/^5\n/, 'a session polls as a member of group grp');
$node->safe_psql('postgres', q{
CREATE TABLE m_win (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('m_win', 'm_src', 'm_win', '1 hour');
});
ok(wait_for_value($node, q{SELECT open_windows > 0 FROM streamguard.windows WHERE pipeline = 'm_win'}, 't'),
	'the window pipeline has open windows');
($types, $samples, $bad, $text) = scrape();
is_deeply($bad, [], 'well-formed with a member name holding a quote, a backslash and a newline')
  or diag($text);
my $mlabels = 'stream="m_src",consumer="grp",member="we\\"ird\\\\member\\nx"';
is(value($samples, 'streamguard_group_member_partitions', $mlabels), '2',
	'the member holds both partitions, its name escaped in the label');
is(value($samples, 'streamguard_group_member_lag_events', $mlabels),
	$node->safe_psql('postgres', q{SELECT lag_events FROM streamguard.consumer_group_members WHERE consumer = 'grp'}),
	'member lag as in consumer_group_members');
ok(value($samples, 'streamguard_group_member_lease_remaining_seconds', $mlabels) > 0, 'its lease has time left');
is(value($samples, 'streamguard_window_open', 'pipeline="m_win"'),
	$node->safe_psql('postgres', q{SELECT open_windows FROM streamguard.windows WHERE pipeline = 'm_win'}),
	'open windows as in the windows view');
is(value($samples, 'streamguard_window_closed_total', 'pipeline="m_win"'), '0', 'no window closed yet');
is(value($samples, 'streamguard_window_superseded_total', 'pipeline="m_win"'), '0', 'no session superseded');
is($types->{streamguard_kafka_lag_messages}, 'gauge', 'the Kafka lag metric is declared (no Kafka pipeline here)');

# ------------------------------------------------------ visibility
($types, $samples, $bad) = scrape(user => 'm_other');
is_deeply($bad, [], 'another role gets well-formed text too');
ok(!grep({ $_->[0] =~ /consumer="reader"/ } @{ $samples->{streamguard_consumer_lag_events} // [] }),
	'it sees no consumer of a stream it cannot read');
ok(defined value($samples, 'streamguard_pipeline_batches_total', 'pipeline="m_pipe"'),
	'it sees the pipeline counters, as in the pipelines view');
ok(!exists $samples->{streamguard_window_open}, 'it sees no window of another owner');
ok(!exists $samples->{streamguard_group_member_partitions}, 'nor the members of a stream it cannot read');

$gin .= "\\q\n";
$gsession->finish;
$node->stop;
done_testing();
