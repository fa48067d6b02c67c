#!/usr/bin/perl
#
# The Kafka source benchmark (docs/benchmarks.md, "Kafka to PostgreSQL"):
# draining BENCH_EVENTS keyed JSON messages of a 4-partition topic into a
# table, by a streamguard pipeline (exactly_once and at_least_once) and by
# test/kafka/sg_kafka_drain, a plain librdkafka consumer outside PostgreSQL
# doing the same work (read_committed, one transaction per BENCH_BATCH
# messages holding the COPY of the rows and the partitions' offsets; each
# row is the message's number, partition, offset and value as jsonb).
# Same run, same server, same broker (test/kafka/sg_mock_broker, librdkafka's
# mock cluster), contenders in rotating order per repeat; a ratio is the
# median over the repeats of contender / plain of the same repeat.
#
# The Kafka sink benchmark (docs/benchmarks.md, "PostgreSQL to Kafka"):
# BENCH_EVENTS keyed JSON events of a 4-partition stream produced into a
# 4-partition topic (a new one per run), by a pipeline with a Kafka sink
# (exactly_once, at_least_once with batch_size BENCH_BATCH, and
# exactly_once_default with the Kafka sink's own batch_size, 10,000) and by
# test/kafka/sg_kafka_produce, a plain
# librdkafka producer outside PostgreSQL reading the same rows
# (streamguard.read, BENCH_BATCH at a time), producing and flushing.
#
#   make kafka-tools && perl test/bench/kafka/run.pl   (as root: runs as postgres)
#
# Knobs (environment): PG_CONFIG, BENCH_EVENTS (200000), BENCH_BATCH (1000),
# BENCH_REPEAT (3), BENCH_KEEP (1: keep the temp directory),
# BENCH_DIRECTION (both, source: Kafka to PostgreSQL, sink: PostgreSQL to
# Kafka).  One server
# (unix socket in its temp directory, no TCP) and one broker (loopback),
# both stopped at the end by their pids.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Temp qw(tempdir);
use Cwd qw(abs_path);
use IPC::Run;
use POSIX qw(strftime);
use Time::HiRes qw(time sleep);

my %knob = (BENCH_EVENTS => 200000, BENCH_BATCH => 1000, BENCH_REPEAT => 3, BENCH_KEEP => 0,
	BENCH_DIRECTION => 'both');
for my $k (keys %knob)
{
	$knob{$k} = $ENV{$k} if defined $ENV{$k} && $ENV{$k} ne '';
	die "$k must be a positive integer\n"
	  if $k ne 'BENCH_KEEP' && $k ne 'BENCH_DIRECTION' && $knob{$k} !~ /^[1-9][0-9]*$/;
}
die "BENCH_DIRECTION must be both, source or sink\n" unless $knob{BENCH_DIRECTION} =~ /^(both|source|sink)$/;
my $do_source = $knob{BENCH_DIRECTION} ne 'sink';
my $do_sink = $knob{BENCH_DIRECTION} ne 'source';
my @contenders = qw(plain exactly_once at_least_once);

my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
chomp(my $bindir = `$pg_config --bindir`);
die "pg_config not found (set PG_CONFIG)\n" unless $bindir && -x "$bindir/pg_ctl";
my $here = abs_path(dirname($0));
my $inner = ($ARGV[0] // '') eq '--inner';
my @tools = map { "$here/../../kafka/$_" } qw(sg_mock_broker sg_kafka_drain sg_kafka_produce);
if (!$inner)
{
	-x $_ or die "$_ is missing: run make kafka-tools\n" for @tools;
}

# As root, prepare a directory the postgres OS user owns and run there as it.
if ($> == 0 && !$inner)
{
	my $dir = tempdir('kafka-bench-XXXXXX', TMPDIR => 1, CLEANUP => 0);
	copy("$here/run.pl", "$dir/run.pl") or die "copy run.pl: $!";
	mkdir "$dir/kafka";
	for (@tools)
	{
		my $to = "$dir/kafka/" . (split m{/})[-1];
		copy($_, $to) or die "copy $_: $!";
		chmod 0755, $to;
	}
	system('chown', '-R', 'postgres', $dir) == 0 or die "chown failed\n";
	my @env = map { "$_=$ENV{$_}" } grep { defined $ENV{$_} } (keys %knob);
	my $rc = system('runuser', '-u', 'postgres', '--', 'env', @env, "PG_CONFIG=$pg_config",
		'perl', "$dir/run.pl", '--inner', $dir);
	system('rm', '-rf', $dir) unless $knob{BENCH_KEEP};
	exit($rc == 0 ? 0 : 1);
}
my $tooldir = $inner ? "$ARGV[1]/kafka" : "$here/../../kafka";

my $work = tempdir('kafka-bench-srv-XXXXXX', TMPDIR => 1, CLEANUP => !$knob{BENCH_KEEP});
my $data = "$work/data";
my $port = 50000 + ($$ % 10000);
my @conn = ('-h', $work, '-p', $port);

sub run
{
	my @cmd = @_;
	my $out = '';
	IPC::Run::run(\@cmd, '>', \$out, '2>&1', IPC::Run::timeout(3600))
	  or die "failed: @cmd\n$out";
	return $out;
}

sub sql
{
	my ($q) = @_;
	my $out = run("$bindir/psql", '-XAtq', @conn, '-d', 'bench', '-v', 'ON_ERROR_STOP=1', '-c', $q);
	chomp $out;
	return $out;
}

sub say_ts { printf "[%s] %s\n", strftime('%H:%M:%S', localtime), join('', @_); return; }

# ------------------------------------------------------------------ broker
my ($bin, $bout) = ('', '');
my $broker = IPC::Run::start([ "$tooldir/sg_mock_broker" ], '<', \$bin, '>', \$bout, '2>&1',
	IPC::Run::timeout(3600));
my $broker_pid = $broker->{KIDS}[0]{PID};
END { kill 'KILL', $broker_pid if $broker_pid; }

sub broker
{
	my ($cmd) = @_;
	$bin .= "$cmd\n" if defined $cmd;
	$broker->pump until $bout =~ s/^([^\n]*)\n//;
	my $line = $1;
	die "sg_mock_broker: [$cmd] answered [$line]\n" if defined $cmd && $line !~ /^ok/;
	return $line;
}
my ($boot) = broker(undef) =~ /^bootstrap (\S+)/ or die "broker did not start\n";

# ------------------------------------------------------------------ server
run("$bindir/initdb", '-D', $data, '-A', 'trust', '--no-sync');
open(my $conf, '>>', "$data/postgresql.conf") or die;
print $conf <<"EOF";
listen_addresses = ''
unix_socket_directories = '$work'
port = $port
shared_preload_libraries = 'streamguard'
streamguard.maintenance_naptime = '200ms'
shared_buffers = 512MB
max_wal_size = 4GB
checkpoint_timeout = 15min
synchronous_commit = on
fsync = on
EOF
close $conf;
run("$bindir/pg_ctl", '-D', $data, '-l', "$work/server.log", '-w', 'start');
my $server_up = 1;
END { system("$bindir/pg_ctl", '-D', $data, '-m', 'fast', '-w', 'stop') if $server_up && $data; }
run("$bindir/createdb", @conn, 'bench');
sql(qq{
CREATE EXTENSION streamguard;
CREATE SERVER bench_kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS (bootstrap_servers '$boot');
CREATE TABLE pg_sink (i bigint, partition int, off bigint, payload jsonb);
CREATE TABLE drain_sink (i bigint, partition int, off bigint, payload jsonb);
CREATE TABLE drain_offsets (partition int PRIMARY KEY, next_offset bigint NOT NULL);
});

if ($do_source)
{
	say_ts("producing $knob{BENCH_EVENTS} messages on 4 partitions");
	broker('topic bench 4');
	broker("produce_json bench $knob{BENCH_EVENTS}");
}

# ------------------------------------------------------------------ runs
my $n = $knob{BENCH_EVENTS};
my %secs;
my ($load_start) = split ' ', run('cat', '/proc/loadavg');
my $pipe = 0;

sub run_plain
{
	sql(q{TRUNCATE drain_sink; DELETE FROM drain_offsets;
		  INSERT INTO drain_offsets SELECT g, 0 FROM generate_series(0, 3) g; CHECKPOINT});
	my $out = run("$tooldir/sg_kafka_drain", $boot, 'bench', 4, $n, $knob{BENCH_BATCH},
		"host=$work port=$port dbname=bench");
	my ($s) = $out =~ /^([0-9.]+)$/m or die "sg_kafka_drain: $out";
	my $got = sql('SELECT count(DISTINCT i) FROM drain_sink');
	die "plain consumer: $got distinct rows, not $n\n" unless $got == $n;
	return $s;
}

sub run_pipeline
{
	my ($guarantee) = @_;
	my $name = 'kb' . ++$pipe;
	sql('TRUNCATE pg_sink; CHECKPOINT');
	sql(qq{SELECT streamguard.create_pipeline('$name', 'bench',
		\$\$INSERT INTO pg_sink SELECT (payload->>'i')::bigint, partition, seq, payload FROM batch\$\$,
		guarantee => '$guarantee', batch_size => $knob{BENCH_BATCH}, source_server => 'bench_kafka')});
	my $deadline = time + 3600;
	while (sql("SELECT events_in >= $n FROM streamguard.pipelines WHERE pipeline = '$name'") ne 't')
	{
		die "pipeline $name did not drain:\n" . sql(qq{SELECT events_in, last_error FROM streamguard.pipelines WHERE pipeline = '$name'})
		  if time > $deadline;
		sleep 0.2;
	}
	# from the start of the first batch to the commit of the last
	my $s = sql(qq{SELECT extract(epoch FROM max(committed_at) - min(committed_at - (fetch_ms + process_ms) * interval '1 ms'))
		FROM streamguard.pipeline_batches WHERE pipeline = '$name'});
	my $got = sql('SELECT count(*) = count(DISTINCT i) AND count(*) = ' . $n . ' FROM pg_sink');
	die "pipeline $name: the sink does not hold every message once\n" unless $got eq 't';
	sql("SELECT streamguard.drop_pipeline('$name')");
	return $s;
}

for my $r ($do_source ? (1 .. $knob{BENCH_REPEAT}) : ())
{
	my $first = $r % @contenders;
	for my $c (@contenders[$first .. $#contenders, 0 .. $first - 1])
	{
		my $s = $c eq 'plain' ? run_plain() : run_pipeline($c);
		push @{ $secs{$c} }, $s;
		say_ts(sprintf("repeat %d: %-13s %.2f s, %.0f messages/s", $r, $c, $s, $n / $s));
	}
}
my ($load_end) = split ' ', run('cat', '/proc/loadavg');

# ------------------------------------------------------------------ report
sub median
{
	my @v = sort { $a <=> $b } @_;
	return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
}

if ($do_source)
{
	print "\nKafka to PostgreSQL\n";
	print "\n| contender | messages/s (median) | throughput / plain (median of same-repeat ratios) |\n|---|---|---|\n";
	for my $c (@contenders)
	{
		my @ratio = map { $secs{plain}[$_] / $secs{$c}[$_] } 0 .. $#{ $secs{plain} };
		printf "| %s | %.0f | **%.2f** |\n", $c, median(map { $n / $_ } @{ $secs{$c} }), median(@ratio);
	}
	printf "\n%d messages, batches of %d, %d repeat(s); load average %s at the start, %s at the end\n",
		$n, $knob{BENCH_BATCH}, $knob{BENCH_REPEAT}, $load_start, $load_end;
}
exit 0 unless $do_sink;

# ------------------------------------------------------------ the sink
say_ts("appending $n events to a 4-partition stream");
sql(q{SELECT streamguard.create_stream('benchsrc', 4)});
for (my $a = 0; $a < $n; $a += 10000)
{
	my $b = $a + 10000 < $n ? $a + 10000 : $n;
	sql(qq{SELECT count(*) FROM streamguard.append_batch('benchsrc',
		(SELECT array_agg(jsonb_build_object('i', i) ORDER BY i) FROM generate_series($a, $b - 1) i),
		(SELECT array_agg('k' || i ORDER BY i) FROM generate_series($a, $b - 1) i), NULL,
		(SELECT array_agg(i % 4 ORDER BY i) FROM generate_series($a, $b - 1) i))});
}
broker('topic streamguard_checkpoints 1');
my %ssecs;
my $topic = 0;
($load_start) = split ' ', run('cat', '/proc/loadavg');

# messages in a topic (the mock writes no transaction markers: one offset each)
# messages written to a new topic: the high watermarks (the mock broker
# drops a partition's oldest messages past about 110,000, moving the low one)
sub topic_messages
{
	my ($t) = @_;
	my $sum = 0;
	for my $p (0 .. 3)
	{
		my ($hi) = broker("watermarks $t $p") =~ /^ok \d+ (\d+)/ or die "no watermarks for $t\n";
		$sum += $hi;
	}
	return $sum;
}

# plain: a flush per batch read; plain_end: one flush after the last
sub run_plain_producer
{
	my ($how) = @_;
	my $t = 'sink' . ++$topic;
	broker("topic $t 4");
	sql('CHECKPOINT');
	my $out = run("$tooldir/sg_kafka_produce", $boot, $t, "host=$work port=$port dbname=bench", 'benchsrc', 4, $n,
		$knob{BENCH_BATCH}, $how eq 'plain_end' ? ('end') : ());
	my ($s) = $out =~ /^([0-9.]+)$/m or die "sg_kafka_produce: $out";
	my $got = topic_messages($t);
	die "plain producer: $got messages, not $n\n" unless $got == $n;
	return $s;
}

# exactly_once_default: the Kafka sink's own batch_size (not given)
sub run_sink_pipeline
{
	my ($contender) = @_;
	my ($guarantee, $default) = $contender =~ /^(\w+?)(_default)?$/;
	my $batch = $default ? '' : "batch_size => $knob{BENCH_BATCH}, ";
	my $t = 'sink' . ++$topic;
	my $name = 'ks' . $topic;
	broker("topic $t 4");
	sql('CHECKPOINT');
	sql(qq{SELECT streamguard.create_pipeline('$name', 'benchsrc',
		\$\$SELECT key, payload AS value, partition FROM batch\$\$,
		guarantee => '$guarantee', ${batch}sink_server => 'bench_kafka', sink_table => '$t')});
	my $deadline = time + 3600;
	while (sql("SELECT events_in >= $n FROM streamguard.pipelines WHERE pipeline = '$name'") ne 't')
	{
		die "pipeline $name did not drain:\n" . sql(qq{SELECT events_in, last_error FROM streamguard.pipelines WHERE pipeline = '$name'})
		  if time > $deadline;
		sleep 0.2;
	}
	my $s = sql(qq{SELECT extract(epoch FROM max(committed_at) - min(committed_at - (fetch_ms + process_ms) * interval '1 ms'))
		FROM streamguard.pipeline_batches WHERE pipeline = '$name'});
	my $got = topic_messages($t);
	die "pipeline $name: $got messages in the topic, not $n\n" unless $got == $n;
	# where a batch's time goes: fetch, the SELECT and Kafka, the local commit(s)
	say_ts("  $contender, per batch (avg ms): " . sql(qq{SELECT 'fetch ' || round(avg(fetch_ms)::numeric, 1)
		|| ', select + Kafka ' || round(avg(process_ms)::numeric, 1) || ', local commit ' || round(avg(commit_ms)::numeric, 1)
		FROM streamguard.pipeline_batches WHERE pipeline = '$name'}));
	sql("SELECT streamguard.drop_pipeline('$name')");
	return $s;
}

my @sink_contenders = qw(plain exactly_once at_least_once plain_end exactly_once_default);
for my $r (1 .. $knob{BENCH_REPEAT})
{
	my $first = $r % @sink_contenders;
	for my $c (@sink_contenders[$first .. $#sink_contenders, 0 .. $first - 1])
	{
		my $s = $c =~ /^plain/ ? run_plain_producer($c) : run_sink_pipeline($c);
		push @{ $ssecs{$c} }, $s;
		say_ts(sprintf("sink repeat %d: %-13s %.2f s, %.0f messages/s", $r, $c, $s, $n / $s));
	}
}
($load_end) = split ' ', run('cat', '/proc/loadavg');
print "\nPostgreSQL to Kafka\n";
print "\n| contender | messages/s (median) | throughput / plain (median of same-repeat ratios) |\n|---|---|---|\n";
for my $c (@sink_contenders)
{
	my @ratio = map { $ssecs{plain}[$_] / $ssecs{$c}[$_] } 0 .. $#{ $ssecs{plain} };
	printf "| %s | %.0f | **%.2f** |\n", $c, median(map { $n / $_ } @{ $ssecs{$c} }), median(@ratio);
}
printf "\n%d events, batches of %d, %d repeat(s); load average %s at the start, %s at the end\n",
	$n, $knob{BENCH_BATCH}, $knob{BENCH_REPEAT}, $load_start, $load_end;
