#
# test/bench/lib/Bench/SG.pm -- small SQL steps the benchmarks share: the raw
# event table and the sink tables, streams and pipelines (create, wait, drop,
# time from the sink), consumer loops run as a psql CALL in the background,
# and the rate-limited producer of the latency benchmarks.  All of it on the
# current node (Bench::Pg) unless node => ... says otherwise.
#
package Bench::SG;

use strict;
use warnings;

use Exporter qw(import);

use Bench;
use Bench::Pg;

our @EXPORT = qw(raw_table_ddl sink_ddl create_stream drop_stream stream_events create_pipeline drop_pipeline
  wait_pipeline wait_worker wait_count sink_stats error_line segment_select background_call background_done
  rate_producer);

# the event columns of a stream segment; $pk: its primary key
sub raw_table_ddl
{
	my ($t, $pk) = @_;
	return "DROP TABLE IF EXISTS $t;
CREATE TABLE $t (
    partition   int         NOT NULL,
    seq         bigserial,
    key         text,
    payload     jsonb       NOT NULL,
    dedup_key   text,
    appended_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (" . ($pk // 'partition, seq') . "));\n";
}

# a sink: the event columns + processed_at = start of the writing transaction
sub sink_ddl
{
	my ($t) = @_;
	return "DROP TABLE IF EXISTS $t; CREATE TABLE $t (partition int, seq bigint, key text, payload jsonb, processed_at timestamptz DEFAULT now());\n";
}

sub create_stream
{
	my ($name, $parts, %o) = @_;
	my ($ok, undef, $err) = sql_try("SELECT streamguard.create_stream('$name', $parts)", %o);
	log_msg("create_stream $name: $err") unless $ok;
	return $ok;
}
sub drop_stream { my ($name, %o) = @_; sql_try("SELECT streamguard.drop_stream('$name', force => true)", %o); return; }
sub stream_events
{
	my ($name, %o) = @_;
	return sql_value("SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$name'", %o) // '?';
}

# creates a pipeline (batch_size 1000); returns '' or the error
sub create_pipeline
{
	my ($name, $stream, $sql, %opt) = @_;
	my $args = join('', map { ", $_ => " . q_lit($opt{$_}) } sort keys %opt);
	my ($ok, undef, $err) =
	  sql_try("SELECT streamguard.create_pipeline('$name', '$stream', " . q_lit($sql) . ", batch_size => 1000$args)");
	return $ok ? '' : error_line($err);
}
sub drop_pipeline { my ($name) = @_; sql_try("SELECT streamguard.drop_pipeline('$name')"); return; }

# waits until the pipeline consumed $n events of $stream; returns '' or the error
sub wait_pipeline
{
	my ($stream, $name, $n, $timeout) = @_;
	my ($ok, undef, $err) =
	  sql_try("CALL bench_wait_pipeline('$stream', '$name', $n, $timeout)", timeout => $timeout + 60);
	return $ok ? '' : error_line($err);
}

# the pid of the pipeline's worker once it runs (30 s at most), or undef
sub wait_worker
{
	my ($name) = @_;
	my $pid;
	wait_until(30, 0.1,
		sub { $pid = sql("SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = '$name' AND state = 'running'"); $pid ne '' });
	return $pid ne '' ? $pid : undef;
}

# waits until <count SQL> reaches $n; returns '' or why not (timeout, failed pipeline)
sub wait_count
{
	my ($count_sql, $n, $timeout, $pipeline, %o) = @_;
	my ($c, $st) = (0, '');
	return '' if wait_until($timeout, 0.2, sub {
		$c = sql_value($count_sql, %o) // 0;
		return 1 if $c >= $n;
		$st = sql_value("SELECT state || ': ' || coalesce(last_error, '') FROM streamguard.pipelines WHERE pipeline = '$pipeline'") // '';
		return $st =~ /^failed/;
	});
	my ($state, $error) = split /: /, $st, 2;
	return substr($st =~ /^failed/
		? "pipeline failed after $c of $n rows: " . ($error // '')
		: "$c of $n rows after $timeout s (state " . ($state // '') . ($error // '') . ')', 0, 200);
}

# rows, distinct (partition, seq), time span and rows of all batches but the
# last of a pipeline-written sink: every batch's rows carry the start of its
# transaction, so early / span is the drain rate without the worker's start-up
sub sink_stats
{
	my ($t, %o) = @_;
	my %s;
	@s{qw(rows distinct span early)} = split /\|/, sql(
		"SELECT count(*), count(DISTINCT (partition, seq)), coalesce(extract(epoch FROM max(processed_at) - min(processed_at)), 0),
		        count(*) FILTER (WHERE processed_at < (SELECT max(processed_at) FROM $t)) FROM $t", %o);
	$s{rate} = sprintf('%.1f', $s{early} / $s{span}) if $s{span} > 0;
	return \%s;
}

# the first "ERROR: ..." (or FATAL) of psql's stderr, 160 characters at most
sub error_line
{
	my ($err) = @_;
	my ($line) = ($err // '') =~ /((?:ERROR|FATAL):.*)/;
	return substr($line // (split /\n/, $err // '')[-1] // 'failed', 0, 160);
}

# the segment tables of a stream as one SELECT of (partition, seq, key, payload)
sub segment_select
{
	my ($stream) = @_;
	return sql("SELECT string_agg(format('SELECT partition, seq, key, payload FROM streamguard_data.%I', 's' || g.stream_id || '_' || g.seg),
	                               ' UNION ALL ' ORDER BY g.seg)
	            FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$stream'");
}

# a consumer loop: one psql CALL in the background; returns its pid
sub background_call
{
	my ($call, $logname) = @_;
	return spawn([ "$BIN/psql", '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-c', $call ], "$LOGS/$logname.log");
}

# waits at most $timeout s for a consumer loop to end; returns '' or its error
sub background_done
{
	my ($pid, $logname, $timeout) = @_;
	my $rc = reap($pid, $timeout);
	return defined $rc && $rc == 0 ? '' : 'consumer: ' . error_line(slurp("$LOGS/$logname.log"));
}

# the producer of the latency benchmarks: pgbench -R, BENCH_LAT_CLIENTS
# clients offering BENCH_LAT_RATE events/s for $seconds (default
# BENCH_LAT_SECONDS), after a CHECKPOINT; returns the number of committed
# events, or nothing
sub rate_producer
{
	my ($name, $script, $vars, $seconds, @more) = @_;
	checkpoint();
	my $res = pgbench($name, $script, $vars, -c => $K{BENCH_LAT_CLIENTS}, -j => ($K{BENCH_LAT_CLIENTS} < 2 ? 1 : 2),
		-R => $K{BENCH_LAT_RATE}, -T => $seconds // $K{BENCH_LAT_SECONDS}, @more) or return;
	return $res->{processed};
}

1;
