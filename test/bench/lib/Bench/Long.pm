#
# test/bench/lib/Bench/Long.pm -- benchmark 6, the long run, SCALED DOWN
# (target: throughput after 10 M events within 10 % of the start).  Once per
# suite run, after the repeats: BENCH_LONG_CLIENTS producers append
# BENCH_LONG_EVENTS events with append_batch (1,000 per transaction, as in
# benchmark 2) to a stream with 4 partitions and retention
# BENCH_LONG_RETENTION (segments rotate every retention / 4 and are dropped by
# the maintenance worker), while an exactly_once pipeline (batch_size 1000)
# copies every event into a sink table.  Autovacuum runs with its defaults.  A
# sampler records every second: events appended and consumed, segments, their
# size (pg_total_relation_size), the pipeline's lost_events, the size of
# streamguard's catalog tables.
# Throughput in the first vs the last 10 % of the producers' run (the time
# during which all producers ran: from the first transaction's start to the
# earliest last commit of a client): producer events/s from pgbench's
# per-transaction log; pipeline events/s = sink rows whose batch started in
# the window / window length.
#
package Bench::Long;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(sleep);

use Bench;
use Bench::Pg;
use Bench::SG;

sub knobs
{
	my $events = sub {
		my $c = $K{BENCH_LONG_CLIENTS};
		Bench::int_ok($_[0]) && Bench::int_ok($c) && $_[0] >= 10000 * $c && $_[0] % (1000 * $c) == 0;
	};
	return (
		BENCH_LONG_EVENTS    => [ 10000000, [ $events, 'a multiple of 1000 x BENCH_LONG_CLIENTS, at least 10 batches per client' ] ],
		BENCH_LONG_CLIENTS   => [ 2, 'int' ],
		BENCH_LONG_RETENTION => [ '10 seconds', 'interval' ],);
}

sub once { return 1; }

sub contenders { return ([ 'long', [ 'producers, append_batch', 'pipeline, exactly_once' ] ]); }

sub run
{
	my ($self) = @_;
	log_msg("long run (once, scaled down): $K{BENCH_LONG_EVENTS} events");
	my $L = $self->{long} = {};
	my ($st, $pn, $n) = ('long_s', 'long_p', $K{BENCH_LONG_EVENTS});
	return $L->{status} = 'pending' unless have('pipe');
	my $ret = $K{BENCH_LONG_RETENTION} eq 'none' ? 'NULL' : "'$K{BENCH_LONG_RETENTION}'";
	my ($ok, undef, $err) = sql_try("SELECT streamguard.create_stream('$st', 4, retention => $ret)");
	return $L->{status} = 'error: create_stream failed: ' . error_line($err) unless $ok;
	$L->{segment_interval} = sql("SELECT coalesce(segment_interval::text, 'none') FROM streamguard.stream WHERE name = '$st'");
	sql(sink_ddl('sink_long'));
	$err = create_pipeline($pn, $st, 'INSERT INTO sink_long (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
		guarantee => 'exactly_once');
	$err = $err ? "create_pipeline failed: $err" : wait_worker($pn) ? '' : "the pipeline's worker did not start";
	if ($err) { drop_stream($st); return $L->{status} = "error: $err"; }

	my $sampler = spawn([ '/bin/sh', '-c', 'while [ ! -f "$1" ]; do "$2" -X -q -At -F " " -v stream="$3" -v pipeline="$4" -f "$5" >>"$6" || true; sleep 1; done',
			'sampler', "$WORK/long.stop", "$BIN/psql", $st, $pn, "$SQL/long_sample.sql", "$LOGS/long_samples.txt" ],
		"$LOGS/long_sampler.err");
	checkpoint();
	my $log0 = () = slurp($NODE->logfile) =~ /\n/g;
	my $per = $n / 1000 / $K{BENCH_LONG_CLIENTS};
	log_msg("long run: $K{BENCH_LONG_CLIENTS} producers x $per transactions of 1,000 events");
	$err = pgbench('long_producers', 'append_batch_sg.sql', { stream => $st },
		-c => $K{BENCH_LONG_CLIENTS}, -j => $K{BENCH_LONG_CLIENTS}, -t => $per, '-l', "--log-prefix=$LOGS/long_tx")
	  ? '' : 'producers failed';
	$err ||= wait_count("SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers
	                     WHERE stream = '$st' AND consumer = 'pipeline:$pn'", $n, $K{BENCH_PIPELINE_TIMEOUT}, $pn);
	sleep 1.5;   # one more sample after the drain
	spurt("$WORK/long.stop", '');
	reap($sampler, 30);
	$L->{batches} = sql("SELECT batches FROM streamguard.pipelines WHERE pipeline = '$pn'");
	drop_pipeline($pn);

	if ($err) { $L->{status} = "error: $err"; }
	else
	{
		$self->long_windows;
		$self->long_samples($log0);
		$L->{status} = 'ok';
	}
	drop_stream($st);
	sql_try('DROP TABLE sink_long');
	return;
}

# producer windows from pgbench's per-transaction log (client, txn no, latency
# us, script, epoch s, epoch us), the pipeline's from the sink
sub long_windows
{
	my ($self) = @_;
	my $L = $self->{long};
	my ($t0, $tall, %last, @end);
	for my $line (map { split /\n/, slurp($_) } glob("$LOGS/long_tx.*"))
	{
		my ($client, undef, $lat, undef, $s, $us) = split ' ', $line;
		my $e = $s + $us / 1e6;
		my $start = $e - $lat / 1e6;
		$t0 = $start if !defined $t0 || $start < $t0;
		$last{$client} = $e if !defined $last{$client} || $e > $last{$client};
		$tall = $e if !defined $tall || $e > $tall;
		push @end, $e;
	}
	my ($t1) = sort { $a <=> $b } values %last;
	my $w = ($t1 - $t0) / 10;
	my $n1 = grep { $_ >= $t0 && $_ < $t0 + $w } @end;
	my $n2 = grep { $_ > $t1 - $w && $_ <= $t1 } @end;
	($t0, $t1, $tall, $w) = map { sprintf('%.6f', $_) } $t0, $t1, $tall, $w;
	%$L = (%$L, t_start => $t0, t_all => $tall, txns => scalar @end,
		prod_first => sprintf('%.0f', $n1 * 1000 / $w), prod_last => sprintf('%.0f', $n2 * 1000 / $w),
		prod_all => sprintf('%.0f', $K{BENCH_LONG_EVENTS} / ($tall - $t0)),
		run_s => sprintf('%.1f', $tall - $t0), window_s => sprintf('%.1f', $w));
	my ($b1, $b2, $rows, $distinct, $tail) = split /\|/, sql(
		"SELECT count(*) FILTER (WHERE processed_at >= to_timestamp($t0) AND processed_at < to_timestamp($t0 + $w)),
		        count(*) FILTER (WHERE processed_at > to_timestamp($t1 - $w) AND processed_at <= to_timestamp($t1)),
		        count(*), count(DISTINCT (partition, seq)), extract(epoch FROM max(processed_at)) - $tall
		 FROM sink_long");
	%$L = (%$L, pipe_first => sprintf('%.0f', $b1 / $w), pipe_last => sprintf('%.0f', $b2 / $w),
		sink_rows => $rows, sink_distinct => $distinct, tail_s => sprintf('%.2f', $tail));
	return;
}

# storage at 10 %, 50 % of the run, at the end of the producers, after the
# drain, and where the segments were largest; the pipeline's batch times;
# the checkpoints the server log shows after line $log0
sub long_samples
{
	my ($self, $log0) = @_;
	my $L = $self->{long};
	# sample: epoch appended consumed retained segments seg_bytes lost catalog_bytes sink_bytes fetch_ms proc_ms lock_waits
	my @s = grep { /\S/ } split /\n/, slurp("$LOGS/long_samples.txt");
	my @f = map { [ split ' ' ] } @s;
	for my $p (10, 50, 100)
	{
		my $at = sprintf('%.3f', $L->{t_start} + ($L->{t_all} - $L->{t_start}) * $p / 100);
		my ($best) = sort { abs($f[$a][0] - $at) <=> abs($f[$b][0] - $at) || $a <=> $b } 0 .. $#s;
		$L->{"at$p"} = defined $best ? $s[$best] : '';
	}
	$L->{atdrain} = $s[-1] // '';
	$L->{atmax} = (sort { $a->[1][5] <=> $b->[1][5] || $a->[0] cmp $b->[0] } map { [ $s[$_], $f[$_] ] } 0 .. $#s)[-1][0] if @s;
	$L->{samples} = @s;
	my @fetch = sort { $a <=> $b } map { $_->[9] } @f;
	my @proc  = sort { $a <=> $b } map { $_->[10] } @f;
	$L->{fetch_max} = sprintf('%.0f', $fetch[-1] // 0);
	$L->{fetch_med} = median(\@fetch, '%.2f') // '';
	$L->{proc_max} = sprintf('%.0f', $proc[-1] // 0);
	my @log = split /\n/, slurp($NODE->logfile);
	$L->{checkpoints} = grep { /checkpoint starting: / } @log[ $log0 .. $#log ];
	return;
}

sub mb { return sprintf('%.1f', $_[0] / 1048576); }

sub report
{
	my ($self) = @_;
	my %L = %{ $self->{long} // {} };
	my @out = ("\n## Long run — SCALED DOWN: " . fmt($K{BENCH_LONG_EVENTS})
		  . " events (the target is stated for 10 M events, over a production lifetime) in about "
		  . ($L{run_s} // '?') . " s with retention '$K{BENCH_LONG_RETENTION}', once\n\n");
	return (@out, 'long run: ' . ($L{status} // 'not run') . "\n") if ($L{status} // '') ne 'ok';
	my $ratio_p = $L{prod_first} > 0 ? sprintf('%.2f', $L{prod_last} / $L{prod_first}) : '';
	my $ratio_q = $L{pipe_first} > 0 ? sprintf('%.2f', $L{pipe_last} / $L{pipe_first}) : '';
	my $met = sub { ($_[0] || 0) >= 0.9 ? 'yes' : '**no**' };
	push @out,
	  "$K{BENCH_LONG_CLIENTS} producers (append_batch, 1,000 events per transaction) and an exactly_once pipeline (batch_size 1000, INSERT into a sink) run concurrently on a stream with 4 partitions, retention '$K{BENCH_LONG_RETENTION}' (segment_interval $L{segment_interval}). Producers ran $L{run_s} s ($L{txns} transactions); windows of $L{window_s} s = 10 % of the time all producers ran. Pipeline: $L{batches} batches; it finished $L{tail_s} s after the last append (start of its last batch); sink rows $L{sink_rows} ($L{sink_distinct} distinct) of $K{BENCH_LONG_EVENTS}.\n\n",
	  "| throughput | first 10 % (events/s) | last 10 % (events/s) | last ÷ first | target (scaled) | met? |\n",
	  "|---|---:|---:|---:|---|---|\n",
	  '| producers, append_batch | ' . fmt($L{prod_first}) . ' | ' . fmt($L{prod_last}) . " | $ratio_p | ≥ 0.90 | " . $met->($ratio_p) . " |\n",
	  '| pipeline, exactly_once | ' . fmt($L{pipe_first}) . ' | ' . fmt($L{pipe_last}) . " | $ratio_q | ≥ 0.90 | " . $met->($ratio_q) . " |\n",
	  "\nProducers over the whole run: " . fmt($L{prod_all}) . " events/s.\n";
	push @out, "\n**check failed**: the sink holds $L{sink_rows} rows ($L{sink_distinct} distinct) of $K{BENCH_LONG_EVENTS} events.\n"
	  if $L{sink_rows} ne $K{BENCH_LONG_EVENTS} || $L{sink_distinct} ne $K{BENCH_LONG_EVENTS};
	push @out, "\n| point | t (s) | events appended | consumed by the pipeline | retained events | segments | segments' size (MB) | lost to retention | streamguard catalog (MB) | sink (MB) |\n",
	  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
	for my $p ([ at10 => '10 % of the run' ], [ at50 => '50 % of the run' ], [ at100 => 'end of the producers' ],
		[ atdrain => 'pipeline drained' ], [ atmax => "largest segments' size" ])
	{
		next if ($L{ $p->[0] } // '') eq '';
		my ($e, $a, $c, $rt, $sg, $sb, $l, $cb, $kb) = split ' ', $L{ $p->[0] };
		push @out, "| $p->[1] | " . join(' | ', sprintf('%.1f', $e - $L{t_start}), fmt($a), fmt($c), fmt($rt), $sg, mb($sb), $l, mb($cb), mb($kb)) . " |\n";
	}
	push @out, "\n($L{samples} samples, one per second; t from the start of the producers.) Pipeline batches: the longest fetch seen in the checkpoint log (last 64 batches, sampled every second) was $L{fetch_max} ms, the median of those per-second maxima $L{fetch_med} ms; the longest SQL + commit $L{proc_max} ms. Checkpoints started during the run: $L{checkpoints}.\n";
	return @out;
}

1;
