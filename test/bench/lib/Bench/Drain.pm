#
# test/bench/lib/Bench/Drain.pm -- benchmark 3, drain: every contender is
# pre-filled with BENCH_DRAIN_EVENTS events (1,000 per transaction; 4
# partitions), then VACUUM ANALYZE + CHECKPOINT.  Then ONE client drains the
# whole backlog in transactions of (up to) 1,000 events, one statement per
# batch, with a fresh consumer per pass:
#    "drain"      the batch is only read and acknowledged (count(*) of the batch);
#    "drain→sink" each batch is also inserted into a sink table in the same
#                 transaction (the drain shape of the target).
# Pipelines drain the same backlog into a sink inside the server.
# BENCH_DRAIN_PASSES passes of each kind, contenders interleaved pass by pass
# (raw, streamguard, its pipelines, PgQ, raw, ...) so that load bursts hit them
# alike; events/s of a repeat = events drained in all its passes / their
# time.  Pre-fill, VACUUM ANALYZE and CHECKPOINT are not timed.
#
package Bench::Drain;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (
	raw  => 'raw bound: seq-range SELECT + position UPDATE',
	sg   => 'streamguard.poll, 4 partitions',
	pgq  => 'PgQ next_batch/get_batch_events/finish_batch',
	peo  => 'streamguard pipeline, exactly_once',
	palo => 'streamguard pipeline, at_least_once',);
my ($D1, $D2) = ('drain', 'drain→sink');

sub knobs
{
	return (
		BENCH_DRAIN_EVENTS => [ 500000, 'k1' ],
		BENCH_DRAIN_PASSES => [ 3,      'int' ],);
}

sub contenders { return ([ $D1, [ @S{qw(raw sg pgq)} ] ], [ $D2, [ @S{qw(raw sg peo palo pgq)} ] ]); }

sub run
{
	my ($self, $r) = @_;
	$self->{nbatch} = $K{BENCH_DRAIN_EVENTS} / 1000;
	my @consumers = map { ("cnt$_", "snk$_") } 1 .. $K{BENCH_DRAIN_PASSES};
	my %acc;   # "kind|contender" => { ev => events drained, t => seconds, bad => 1 }
	$self->{acc} = \%acc;
	my @c = grep { defined } ($self->drain_raw($r, @consumers), $self->drain_sg($r), $self->drain_pgq($r, @consumers));
	sql('VACUUM ANALYZE');
	checkpoint();

	for my $consumer (@consumers)
	{
		my $kind = $consumer =~ /^snk/ ? $D2 : $D1;
		for my $x (@c)
		{
			$self->drain_pass($kind, $x, $consumer, $r);
			next unless $x->{pipelines} && $kind eq $D2;
			$self->pipeline_pass($S{peo}, 'exactly_once', "peo_$consumer", 'sink_peo', $x->{vars}{stream});
			$self->pipeline_pass($S{palo}, 'at_least_once', "palo_$consumer", 'sink_palo', $x->{vars}{stream});
		}
	}
	$self->check_sink($_) for @c;

	my %missing = (sg => !have('sg'), pgq => !have('pgq'), peo => !have('pipe'), palo => !have('pipe'));
	for my $kind ($D1, $D2)
	{
		for my $who (qw(raw sg peo palo pgq))
		{
			next if $kind eq $D1 && $who =~ /^p.*o$/;
			my $a = $acc{"$kind|$S{$who}"} // {};
			$self->add_val("$kind|$S{$who}",
				  $missing{$who} ? 'PENDING'
				: $a->{bad} || !defined $a->{ev} ? 'ERR'
				: sprintf('%.1f', $a->{ev} / $a->{t}));
		}
	}
	sql_try('DROP TABLE IF EXISTS raw_events, raw_drain_pos, sink_raw, sink_sg, sink_peo, sink_palo, sink_pgq');
	drop_stream("s3r$r") if have('sg');
	sql_try("SELECT pgq.drop_queue('q3r$r', true)") if have('pgq');
	return;
}

# a contender that could not be prepared: both kinds fail, with a note
sub drain_failed
{
	my ($self, $label, $note) = @_;
	$self->{acc}{"$_|$label"}{bad} = 1 for $D1, $D2;
	$self->add_note("$D1|$label", $note);
	return;
}

# raw: an outbox table with a global seq (PK), one position row per consumer
sub drain_raw
{
	my ($self, $r, @consumers) = @_;
	sql(raw_table_ddl('raw_events', 'seq')
		  . "DROP TABLE IF EXISTS raw_drain_pos; CREATE TABLE raw_drain_pos (consumer text PRIMARY KEY, seq bigint NOT NULL);
		     INSERT INTO raw_drain_pos SELECT c, 0 FROM unnest('{" . join(',', @consumers) . "}'::text[]) AS c;\n"
		  . sink_ddl('sink_raw'));
	return $self->drain_failed($S{raw}, 'prefill failed') unless prefill("prefill_raw_r$r", 'append_batch_raw.sql', {}, $self->{nbatch});
	my $pos = sub { "(SELECT seq FROM raw_drain_pos WHERE consumer = '$_[0]')" };
	return {
		label    => $S{raw}, tag => 'raw', vars => {}, sink => 'sink_raw',
		scripts  => [ 'drain_raw.sql', 'drain_raw_sink.sql' ],
		consumed => sub { 'SELECT count(*) FROM raw_events WHERE seq <= ' . $pos->($_[0]) },
		left     => sub { 'SELECT count(*) FROM raw_events WHERE seq > ' . $pos->($_[0]) } };
}

# streamguard: poll, and the pipelines on the same stream
sub drain_sg
{
	my ($self, $r) = @_;
	return unless have('sg');
	my $st = "s3r$r";
	return $self->drain_failed($S{sg}, 'create_stream failed') unless create_stream($st, 4);
	sql(sink_ddl('sink_sg') . (have('pipe') ? sink_ddl('sink_peo') . sink_ddl('sink_palo') : ''));
	return $self->drain_failed($S{sg}, 'prefill failed')
	  unless prefill("prefill_sg_r$r", 'append_batch_sg.sql', { stream => $st }, $self->{nbatch});
	my $n = stream_events($st);
	$self->add_note("$D1|$S{sg}", "pre-fill: stream reports $n events, expected $K{BENCH_DRAIN_EVENTS}") if $n ne $K{BENCH_DRAIN_EVENTS};
	return {
		label    => $S{sg}, tag => 'sg', vars => { stream => $st }, sink => 'sink_sg', pipelines => have('pipe'),
		scripts  => [ 'drain_poll.sql', 'drain_poll_sink.sql' ],
		consumed => sub { "SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = '$st' AND consumer = '$_[0]'" },
		# what is left: read (and roll back) up to 100k remaining events
		left => sub { "BEGIN; SELECT count(*) FROM streamguard.poll('$st', '$_[0]', 100000); ROLLBACK;" } };
}

# PgQ: ticks every 1,000 events during pre-fill (ticker_max_count = 1000 and a
# pgq.ticker() call after each 1,000-event transaction), so batches hold 1,000 events
sub drain_pgq
{
	my ($self, $r, @consumers) = @_;
	return unless have('pgq');
	my $q = "q3r$r";
	sql("SELECT pgq.create_queue('$q'); SELECT pgq.set_queue_config('$q', 'ticker_max_count', '1000');
	     SELECT pgq.register_consumer('$q', c) FROM unnest('{" . join(',', @consumers) . "}'::text[]) AS c;\n" . sink_ddl('sink_pgq'));
	return $self->drain_failed($S{pgq}, 'prefill failed')
	  unless prefill("prefill_pgq_r$r", 'append_batch_pgq_tick.sql', { queue => $q }, $self->{nbatch}, 'one client');
	sql("SELECT pgq.ticker('$q')");
	my $info = sub { "FROM pgq.get_consumer_info('$q', '$_[0]')" };
	return {
		label    => $S{pgq}, tag => 'pgq', vars => { queue => $q }, sink => 'sink_pgq',
		scripts  => [ 'drain_pgq.sql', 'drain_pgq_sink.sql' ],
		consumed => sub { "SELECT $K{BENCH_DRAIN_EVENTS} - coalesce(pending_events, 0) " . $info->($_[0]) },
		left     => sub { 'SELECT coalesce(pending_events, 0) ' . $info->($_[0]) } };
}

# One pass: pgbench, NBATCH transactions of one client.  The events consumed
# (positions) + the events left must equal the pre-fill.
sub drain_pass
{
	my ($self, $kind, $x, $consumer, $r) = @_;
	my $key = "$kind|$x->{label}";
	my $a = $self->{acc}{$key} //= {};
	my $nbatch = $self->{nbatch};
	return if $a->{bad};
	checkpoint();
	my $run = pgbench("drain_$x->{tag}_${consumer}_r$r", $x->{scripts}[ $kind eq $D2 ? 1 : 0 ],
		{ %{ $x->{vars} }, consumer => $consumer }, -c => 1, -j => 1, -t => $nbatch);
	return $a->{bad} = 1 unless $run;
	my $done = sql_value($x->{consumed}->($consumer)) // '';
	my ($left) = reverse grep { /^[0-9]+$/ } split /\n/, sql_value($x->{left}->($consumer)) // '';
	if ($done !~ /^[0-9]+$/ || !defined $left)
	{
		$a->{bad} = 1;
		return $self->add_note($key, 'could not count consumed/remaining events');
	}
	my $n = $K{BENCH_DRAIN_EVENTS};
	if ($done + $left != $n)
	{
		$a->{bad} = 1;
		return $self->add_note($key, "accounting mismatch: consumed $done + left $left != $n");
	}
	$self->add_note($key, "short batches: a pass drained $done of $n in $nbatch transactions") if $left;
	add_time($a, ev => $done, $nbatch / $run->{tps});
	return;
}

# A pipeline drains the backlog in the background (SQL "INSERT INTO sink ...
# FROM batch"); it is timed from the sink (sink_stats).
sub pipeline_pass
{
	my ($self, $label, $guarantee, $name, $sink, $stream) = @_;
	my $key = "$D2|$label";
	my $a = $self->{acc}{$key} //= {};
	return if $a->{bad};
	sql("TRUNCATE $sink");
	checkpoint();
	my $err = create_pipeline($name, $stream,
		"INSERT INTO $sink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch", guarantee => $guarantee);
	$err = "create_pipeline failed: $err" if $err;
	$err ||= wait_pipeline($stream, $name, $K{BENCH_DRAIN_EVENTS}, $K{BENCH_PIPELINE_TIMEOUT});
	drop_pipeline($name);
	my $s = $err ? undef : sink_stats($sink);
	$err ||= "sink holds $s->{rows} rows after the pipeline consumed $K{BENCH_DRAIN_EVENTS}" if $s && $s->{rows} != $K{BENCH_DRAIN_EVENTS};
	$err ||= 'a single batch: cannot time it (raise BENCH_DRAIN_EVENTS)' if $s && !($s->{span} > 0);
	if ($err) { $a->{bad} = 1; return $self->add_note($key, $err); }
	add_time($a, ev => $s->{early}, $s->{span});
	return;
}

# sink rows must match what the sink passes consumed
sub check_sink
{
	my ($self, $x) = @_;
	my $a = $self->{acc}{"$D2|$x->{label}"} // {};
	return if $a->{bad} || !defined $a->{ev};
	my $rows = sql_value("SELECT count(*) FROM $x->{sink}") // '?';
	return if $rows eq $a->{ev};
	$a->{bad} = 1;
	$self->add_note("$D2|$x->{label}", "sink holds $rows rows, consumers consumed $a->{ev}");
	return;
}

sub rows
{
	my ($self) = @_;
	my $poll_target = '≥ 0.70 × raw bound (drain target applied to poll)';
	return (
		$self->row($D1, $S{raw}, $S{raw}, undef, 'baseline'),
		$self->row($D1, $S{sg},  $S{raw}, 0.7,   $poll_target),
		$self->row($D1, $S{pgq}, $S{raw}, undef, 'reference'),
		$self->row($D2, $S{raw}, $S{raw}, undef, 'baseline'),
		$self->row($D2, $S{sg},  $S{raw}, 0.7,   $poll_target),
		$self->row($D2, $S{peo}, $S{raw}, 0.7,   '≥ 0.70 × raw bound'),
		$self->row($D2, $S{palo}, $S{raw}, undef, 'reference'),
		$self->row($D2, $S{pgq}, $S{raw}, undef, 'reference'),
		$self->row($D2, $S{peo}, $S{palo}, 0.95, '≥ 0.95 × at_least_once', 'exactly_once vs at_least_once (drain→sink)', 'pipeline'));
}

sub charts { my ($self, $chart) = @_; return $self->bar_charts($chart); }

1;
