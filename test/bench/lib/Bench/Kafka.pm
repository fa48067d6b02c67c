#
# test/bench/lib/Bench/Kafka.pm -- Kafka (docs/benchmarks.md, "13.
# Kafka"; benchmarks-history.md, "Kafka to PostgreSQL", "PostgreSQL to Kafka"), on a server and a broker of its own
# (test/kafka/sg_mock_broker, librdkafka's mock cluster: Bench::Broker).
#
# Source (BENCH_KAFKA_DIRECTION both or source): draining BENCH_KAFKA_EVENTS
# keyed JSON messages of a 4-partition topic into a table, by a streamguard
# pipeline (exactly_once and at_least_once) and by test/kafka/sg_kafka_drain,
# a plain librdkafka consumer outside PostgreSQL doing the same work
# (read_committed, one transaction per BENCH_KAFKA_BATCH messages holding the
# COPY of the rows and the partitions' offsets; each row is the message's
# number, partition, offset and value as jsonb).
#
# Sink (both or sink): BENCH_KAFKA_EVENTS keyed JSON events of a 4-partition
# stream produced into a 4-partition topic (a new one per contender and
# repeat), by a pipeline with a Kafka sink (exactly_once, at_least_once with
# batch_size BENCH_KAFKA_BATCH, and exactly_once_default with the Kafka sink's
# own batch_size) and by test/kafka/sg_kafka_produce, a plain librdkafka
# producer outside PostgreSQL reading the same rows (streamguard.read,
# BENCH_KAFKA_BATCH at a time), producing and flushing per batch (plain) or
# once at the end (plain_end).
#
# Contenders in rotating order per repeat; a ratio is the median over the
# repeats of contender / plain of the same repeat.  Every contender's result
# is checked (every message once in the table, every event in the topic);
# a failed check makes the run exit 1.
#
package Bench::Kafka;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(sleep);

use Bench;
use Bench::Broker;
use Bench::Pg;

my @TOOLS = qw(sg_mock_broker sg_kafka_drain sg_kafka_produce);
my ($SRC, $SNK) = ('Kafka to PostgreSQL', 'PostgreSQL to Kafka');
my @SOURCE = qw(plain exactly_once at_least_once);
my @SINK = qw(plain exactly_once at_least_once plain_end exactly_once_default);

sub knobs
{
	return (
		BENCH_KAFKA_EVENTS    => [ 200000, 'int' ],
		BENCH_KAFKA_BATCH     => [ 1000,   'int' ],
		BENCH_KAFKA_DIRECTION => [ 'both', [ sub { $_[0] =~ /^(both|source|sink)$/ }, 'both, source or sink' ] ],);
}

sub files { return map { "../kafka/$_" } @TOOLS; }

sub preflight
{
	my ($class, $dir) = @_;
	-x "$dir/../kafka/$_" or return "test/kafka/$_ is missing: run make kafka-tools" for @TOOLS;
	return '';
}

sub parts
{
	return (($K{BENCH_KAFKA_DIRECTION} ne 'sink' ? [ $SRC, [@SOURCE] ] : ()),
		($K{BENCH_KAFKA_DIRECTION} ne 'source' ? [ $SNK, [@SINK] ] : ()));
}

sub contenders { return parts(); }

sub node { return $_[0]{node}; }

sub tool { return "$DIR/../kafka/$_[1]"; }

# the broker, the server, the source topic and the sink's stream
sub setup
{
	my ($self) = @_;
	$self->{secs} = {};   # "part|contender" => [seconds per repeat, or ERR]
	return $self->{why} = 'streamguard is not installed' unless have('sg_lib');
	$self->{broker} = Bench::Broker->start($self->tool('sg_mock_broker'), "$LOGS/broker.log");
	$self->{node} = start_cluster('kafka', 'track_commit_timestamp = off', 'max_connections = 100',
		"streamguard.maintenance_naptime = '200ms'") or return $self->{why} = 'its server did not start';
	on_node($self->{node}, sub { $self->prepare });
	return;
}

sub prepare
{
	my ($self) = @_;
	my ($n, $broker) = ($K{BENCH_KAFKA_EVENTS}, $self->{broker});
	sql("CREATE EXTENSION streamguard;
		CREATE SERVER bench_kafka FOREIGN DATA WRAPPER streamguard_kafka OPTIONS (bootstrap_servers '" . $broker->bootstrap . "');
		CREATE TABLE pg_sink (i bigint, partition int, off bigint, payload jsonb);
		CREATE TABLE drain_sink (i bigint, partition int, off bigint, payload jsonb);
		CREATE TABLE drain_offsets (partition int PRIMARY KEY, next_offset bigint NOT NULL);");
	if ($K{BENCH_KAFKA_DIRECTION} ne 'sink')
	{
		log_msg("producing $n messages on 4 partitions");
		$broker->cmd('topic bench 4');
		$broker->cmd("produce_json bench $n");
	}
	return if $K{BENCH_KAFKA_DIRECTION} eq 'source';
	log_msg("appending $n events to a 4-partition stream");
	sql(q{SELECT streamguard.create_stream('benchsrc', 4)});
	for (my $a = 0; $a < $n; $a += 10000)
	{
		my $b = $a + 10000 < $n ? $a + 10000 : $n;
		sql(qq{SELECT count(*) FROM streamguard.append_batch('benchsrc',
			(SELECT array_agg(jsonb_build_object('i', i) ORDER BY i) FROM generate_series($a, $b - 1) i),
			(SELECT array_agg('k' || i ORDER BY i) FROM generate_series($a, $b - 1) i), NULL,
			(SELECT array_agg(i % 4 ORDER BY i) FROM generate_series($a, $b - 1) i))});
	}
	$broker->cmd('topic streamguard_checkpoints 1');
	return;
}

sub run
{
	my ($self, $r) = @_;
	$self->{load0} //= (split ' ', loadavg())[0];
	for my $part (parts())
	{
		my ($p, $cs) = @$part;
		for my $c (rotated($r, @$cs))
		{
			if ($self->{why}) { push @{ $self->{secs}{"$p|$c"} }, have('sg_lib') ? 'ERR' : 'PENDING'; next; }
			my ($s, $err) = $p eq $SRC ? ($c eq 'plain' ? $self->run_plain : $self->run_pipeline($c))
			  : ($c =~ /^plain/ ? $self->run_plain_producer($c) : $self->run_sink_pipeline($c));
			push @{ $self->{secs}{"$p|$c"} }, $err ? 'ERR' : $s;
			if ($err) { $self->fail_check("$p, $c, repeat $r: $err"); next; }
			log_msg(sprintf('%srepeat %d: %-13s %.2f s, %.0f messages/s', $p eq $SRC ? '' : 'sink ', $r, $c, $s, $K{BENCH_KAFKA_EVENTS} / $s));
		}
	}
	$self->{load1} = (split ' ', loadavg())[0];
	return;
}

sub conninfo { my ($self) = @_; return 'host=' . $self->{node}->host . ' port=' . $self->{node}->port . ' dbname=bench'; }

# a tool's run: (its one-number output (seconds), '') or (undef, why not)
sub run_tool
{
	my ($self, $name, @args) = @_;
	my $log = "$LOGS/kafka_$name.log";
	my $rc = reap(spawn([ $self->tool($name), @args ], $log), 3600);
	my $out = slurp($log);
	return (undef, "$name failed: " . substr($out, 0, 200)) unless defined $rc && $rc == 0;
	my ($s) = $out =~ /^([0-9.]+)$/m or return (undef, "$name: " . substr($out, 0, 200));
	return ($s, '');
}

# waits until pipeline $name read every event; ('') or (why not)
sub wait_drained
{
	my ($self, $name) = @_;
	my $n = $K{BENCH_KAFKA_EVENTS};
	return '' if wait_until($K{BENCH_PIPELINE_TIMEOUT}, 0.2,
		sub { (sql_value("SELECT events_in >= $n FROM streamguard.pipelines WHERE pipeline = '$name'") // '') eq 't' });
	return "pipeline $name did not drain: "
	  . (sql_value("SELECT events_in || ' ' || coalesce(last_error, '') FROM streamguard.pipelines WHERE pipeline = '$name'") // '?');
}

# a pipeline's time: from the start of its first batch to its last commit
sub pipeline_seconds
{
	my ($name) = @_;
	return sql(qq{SELECT extract(epoch FROM max(committed_at) - min(committed_at - (fetch_ms + process_ms) * interval '1 ms'))
		FROM streamguard.pipeline_batches WHERE pipeline = '$name'});
}

sub run_plain
{
	my ($self) = @_;
	my $n = $K{BENCH_KAFKA_EVENTS};
	sql(q{TRUNCATE drain_sink; DELETE FROM drain_offsets;
		  INSERT INTO drain_offsets SELECT g, 0 FROM generate_series(0, 3) g; CHECKPOINT});
	my ($s, $err) = $self->run_tool('sg_kafka_drain', $self->{broker}->bootstrap, 'bench', 4, $n, $K{BENCH_KAFKA_BATCH}, $self->conninfo);
	return (undef, $err) if $err;
	my $got = sql('SELECT count(DISTINCT i) FROM drain_sink');
	return $got == $n ? ($s) : (undef, "plain consumer: $got distinct rows, not $n");
}

sub run_pipeline
{
	my ($self, $guarantee) = @_;
	my $n = $K{BENCH_KAFKA_EVENTS};
	my $name = 'kb' . ++$self->{pipes};
	sql('TRUNCATE pg_sink; CHECKPOINT');
	sql(qq{SELECT streamguard.create_pipeline('$name', 'bench',
		\$\$INSERT INTO pg_sink SELECT (payload->>'i')::bigint, partition, seq, payload FROM batch\$\$,
		guarantee => '$guarantee', batch_size => $K{BENCH_KAFKA_BATCH}, source_server => 'bench_kafka')});
	my $err = $self->wait_drained($name);
	my $s = $err ? undef : pipeline_seconds($name);
	$err ||= 'the sink does not hold every message once'
	  unless sql("SELECT count(*) = count(DISTINCT i) AND count(*) = $n FROM pg_sink") eq 't';
	sql("SELECT streamguard.drop_pipeline('$name')");
	return ($s, $err);
}

# messages written to a new topic: the high watermarks (the mock writes no
# transaction markers: one offset each; it drops a partition's oldest messages
# past about 110,000, moving the low one)
sub topic_messages
{
	my ($self, $t) = @_;
	my $sum = 0;
	for my $p (0 .. 3)
	{
		my ($hi) = $self->{broker}->cmd("watermarks $t $p") =~ /^ok \d+ (\d+)/ or return "no watermarks for $t";
		$sum += $hi;
	}
	return $sum;
}

# plain: a flush per batch read; plain_end: one flush after the last
sub run_plain_producer
{
	my ($self, $how) = @_;
	my $n = $K{BENCH_KAFKA_EVENTS};
	my $t = 'sink' . ++$self->{topics};
	$self->{broker}->cmd("topic $t 4");
	sql('CHECKPOINT');
	my ($s, $err) = $self->run_tool('sg_kafka_produce', $self->{broker}->bootstrap, $t, $self->conninfo, 'benchsrc', 4, $n,
		$K{BENCH_KAFKA_BATCH}, $how eq 'plain_end' ? ('end') : ());
	return (undef, $err) if $err;
	my $got = $self->topic_messages($t);
	return $got eq $n ? ($s) : (undef, "plain producer: $got messages, not $n");
}

# exactly_once_default: the Kafka sink's own batch_size (not given)
sub run_sink_pipeline
{
	my ($self, $contender) = @_;
	my $n = $K{BENCH_KAFKA_EVENTS};
	my ($guarantee, $default) = $contender =~ /^(\w+?)(_default)?$/;
	my $batch = $default ? '' : "batch_size => $K{BENCH_KAFKA_BATCH}, ";
	my $t = 'sink' . ++$self->{topics};
	my $name = "ks$self->{topics}";
	$self->{broker}->cmd("topic $t 4");
	sql('CHECKPOINT');
	sql(qq{SELECT streamguard.create_pipeline('$name', 'benchsrc',
		\$\$SELECT key, payload AS value, partition FROM batch\$\$,
		guarantee => '$guarantee', ${batch}sink_server => 'bench_kafka', sink_table => '$t')});
	my $err = $self->wait_drained($name);
	my $s = $err ? undef : pipeline_seconds($name);
	my $got = $err ? $n : $self->topic_messages($t);
	$err ||= "pipeline $name: $got messages in the topic, not $n" if $got ne $n;
	# where a batch's time goes: fetch, the SELECT and Kafka, the local commit(s)
	log_msg("  $contender, per batch (avg ms): " . sql(qq{SELECT 'fetch ' || round(avg(fetch_ms)::numeric, 1)
		|| ', select + Kafka ' || round(avg(process_ms)::numeric, 1) || ', local commit ' || round(avg(commit_ms)::numeric, 1)
		FROM streamguard.pipeline_batches WHERE pipeline = '$name'}));
	sql("SELECT streamguard.drop_pipeline('$name')");
	return ($s, $err);
}

sub report
{
	my ($self) = @_;
	my $n = $K{BENCH_KAFKA_EVENTS};
	my @out;
	for my $part (parts())
	{
		my ($p, $cs) = @$part;
		my %rate = map { my $c = $_; $c => [ map { num_list($_) && $_ > 0 ? $n / $_ : $_ } @{ $self->{secs}{"$p|$c"} // [] } ] } @$cs;
		push @out, "\n## $p\n\n",
		  ($p eq $SRC
			? "$n keyed JSON messages of a 4-partition topic (the mock broker) drained into a table, by a pipeline and by a plain librdkafka consumer + libpq (one transaction per $K{BENCH_KAFKA_BATCH} messages with the COPY and the offsets).\n\n"
			: "$n events of a 4-partition stream produced into a new 4-partition topic, by a pipeline with a Kafka sink and by a plain librdkafka producer reading them with streamguard.read ($K{BENCH_KAFKA_BATCH} at a time).\n\n"),
		  "| contender | messages/s (median) | throughput / plain (median of same-repeat ratios) |\n|---|---|---|\n";
		for my $c (@$cs)
		{
			my $m = median($rate{$c});
			my $ratio = paired_ratio($rate{$c}, $rate{plain});
			push @out, "| $c | " . ($m // missing($rate{$c})) . ' | **'
			  . (defined $ratio ? sprintf('%.2f', $ratio) : '—') . "** |\n";
		}
		push @out, sprintf("\n%d %s, batches of %d, %d repeat(s); load average %s at the start, %s at the end%s\n",
			$n, $p eq $SRC ? 'messages' : 'events', $K{BENCH_KAFKA_BATCH}, $K{BENCH_REPEAT}, $self->{load0} // '?', $self->{load1} // '?',
			$self->{why} ? "; not run: $self->{why}" : '');
		push @out, "\nPer repeat (s): " . join('; ', map { join(' ', $_, @{ $self->{secs}{"$p|$_"} // [] }) } @$cs) . "\n";
	}
	return @out;
}

sub teardown { my ($self) = @_; $self->{broker}->stop if $self->{broker}; return; }

1;
