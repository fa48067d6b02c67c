#
# test/bench/lib/Bench/Windows.pm -- benchmark 11, windows.  (a) throughput:
# BENCH_WINDOW_EVENTS events over 1,000 keys in a 4-partition stream, counted
# and summed per key and minute of append time by a plain upsert pipeline
# (INSERT ... ON CONFLICT DO UPDATE into the target, the way one writes it
# without windows) and by a window pipeline (tumbling 1 minute, emitting on
# close), each draining the same backlog, in an order rotating from repeat to
# repeat; events/s from the checkpoint log: events after the first batch /
# time from its commit to the last batch's.  The windows' final emission (at
# the end of the minute, after the drain) is not in that figure; the upsert
# target is written by every batch.  (b) close latency: a window pipeline
# (tumbling 1 s, append time) while BENCH_LAT_CLIENTS producers offer
# BENCH_LAT_RATE events/s for BENCH_LAT_SECONDS; a window's latency = commit
# time of its row - its end.
#
package Bench::Windows;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (ups => 'upsert pipeline, per key and minute', win => 'window pipeline, tumbling 1 minute');
my $UPS_SQL = q{INSERT INTO win_out AS o (window_start, window_end, key, events, amount)
SELECT date_bin('1 minute', appended_at, 'epoch'), date_bin('1 minute', appended_at, 'epoch') + interval '1 minute',
       key, count(*), sum((payload->>'amount')::numeric)
FROM batch GROUP BY 1, 2, 3
ON CONFLICT (window_start, key) DO UPDATE SET events = o.events + excluded.events, amount = o.amount + excluded.amount};
my $WIN_AGGS = q{'{"events": "count(*)", "amount": "sum(payload->>''amount'')"}'};

sub knobs { return (BENCH_WINDOW_EVENTS => [ 200000, 'k2' ]); }

sub contenders { return ([ 'windows', [ @S{qw(ups win)} ] ]); }

sub run
{
	my ($self, $r) = @_;
	my $stream = "s8r$r";
	my $n = $K{BENCH_WINDOW_EVENTS};
	my $ready = have('pipe') && create_stream($stream, 4)
	  && prefill("prefill_win_r$r", 'append_batch_keys.sql', { stream => $stream, keys => 1000 }, $n / 1000);
	for my $c (rotated($r, 'ups', 'win'))
	{
		my $key = "windows|$S{$c}";
		if (!$ready) { $self->add_val($key, have('pipe') ? 'ERR' : 'PENDING'); next; }
		sql('DROP TABLE IF EXISTS win_out; CREATE TABLE win_out (window_start timestamptz, window_end timestamptz, '
			  . 'key text, events numeric, amount numeric, PRIMARY KEY (window_start, key))');
		checkpoint();
		my $name = "win${c}_r$r";
		my $err;
		if ($c eq 'ups') { $err = create_pipeline($name, $stream, $UPS_SQL); }
		else
		{
			my ($ok, undef, $e) = sql_try("SELECT streamguard.create_window_pipeline('$name', '$stream', 'win_out', "
				  . "'1 minute', aggregates => $WIN_AGGS, batch_size => 1000)");
			$err = $ok ? '' : error_line($e);
		}
		$err ||= wait_pipeline($stream, $name, $n, $K{BENCH_PIPELINE_TIMEOUT});
		my $rate = $err ? undef : sql_value(
			"WITH b AS (SELECT batch_id, events_in, committed_at FROM streamguard.pipeline_batches
			            WHERE pipeline = '$name' AND events_in > 0)
			 SELECT round((sum(events_in) - (SELECT events_in FROM b ORDER BY batch_id LIMIT 1))
			              / nullif(extract(epoch FROM max(committed_at) - min(committed_at)), 0), 1) FROM b");
		drop_pipeline($name);
		if ($err || !defined $rate || $rate eq '') { $self->fail_all([$key], 'ERR', $err || 'no time span'); next; }
		$self->add_val($key, $rate);
	}
	sql_try('DROP TABLE IF EXISTS win_out');
	drop_stream($stream) if have('sg');
	$self->window_latency($r) if have('pipe');
	return;
}

sub window_latency
{
	my ($self, $r) = @_;
	my ($st, $pn) = ("s8l_r$r", "winlat_r$r");
	my $w = $self->{wlat} //= {};   # p50, p99, max, windows: per repeat; note
	sql_file_once('setup_latency.sql');
	sql('DROP TABLE IF EXISTS win_lat; CREATE TABLE win_lat (window_start timestamptz, window_end timestamptz, key text, events numeric)');
	if (!create_stream($st, 4)) { push @{ $w->{note} }, "r$r: create_stream failed"; return; }
	my ($ok, undef, $e) = sql_try("SELECT streamguard.create_window_pipeline('$pn', '$st', 'win_lat', '1 s', "
		  . q{aggregates => '{"events": "count(*)"}', key => '''all''', batch_size => 1000)});
	my $err = !$ok ? error_line($e) : wait_worker($pn) ? '' : "the pipeline's worker did not start";
	my $produced = $err ? undef : rate_producer("winlat_r$r", 'latency_sg.sql', { stream => $st });
	$err ||= 'producer failed' unless defined $produced;
	# the last window closes about a second after the producer stops
	$err ||= wait_until(30, 0.1, sub { (sql_value('SELECT coalesce(sum(events), 0) FROM win_lat') // -1) == $produced })
	  ? '' : 'the windows did not all close within 30 s';
	if (!$err)
	{
		my $row = sql_value("WITH w AS (SELECT window_end, max(pg_xact_commit_timestamp(xmin)) AS c FROM win_lat GROUP BY 1),
		                          l AS (SELECT extract(epoch FROM c - window_end) * 1000 AS ms FROM w)
		                     SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) || '|' ||
		                            round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) || '|' ||
		                            round(max(ms)::numeric, 1) || '|' || count(*) FROM l");
		my @f = split /\|/, $row // '';
		if (@f == 4) { push @{ $w->{$_} }, shift @f for qw(p50 p99 max windows); }
		else { $err = 'statistics query failed'; }
	}
	push @{ $w->{note} }, "r$r: $err" if $err;
	drop_pipeline($pn);
	drop_stream($st);
	sql_try('DROP TABLE IF EXISTS win_lat');
	return;
}

sub rows
{
	my ($self) = @_;
	return (
		$self->row('windows', $S{ups}, $S{ups}, undef, 'baseline'),
		$self->row('windows', $S{win}, $S{ups}, 0.8, '≥ 0.80 × upsert pipeline'));
}

sub report
{
	my ($self) = @_;
	my $w = $self->{wlat} // {};
	my @out = ("\n## Window close latency (append time)\n\n",
		"A window pipeline (tumbling 1 s, append time, one count per window) while $K{BENCH_LAT_CLIENTS} producer clients offer "
		  . "$K{BENCH_LAT_RATE} events/s (pgbench -R, one event per transaction) for $K{BENCH_LAT_SECONDS} s per repeat; "
		  . "a window's latency = pg_xact_commit_timestamp of its row - its end. p50 and p99 are over the windows of a repeat, "
		  . "the table gives their median over the repeats, max the maximum.\n\n",
		"| p50 ms | p99 ms | max ms | windows | p50 per repeat | target | met? |\n|---:|---:|---:|---:|---|---|---|\n");
	my ($p50, $p99) = (median($w->{p50} // [], '%.1f'), median($w->{p99} // [], '%.1f'));
	my $max = (sort { $b <=> $a } @{ $w->{max} // [] })[0];
	my $n = 0;
	$n += $_ for @{ $w->{windows} // [] };
	push @out, '| ' . join(' | ', $p50 // 'error', $p99 // '—', $max // '—', $n, join(' ', @{ $w->{p50} // [] }),
		'p50 ≤ 10 ms', defined $p50 ? ($p50 <= 10 ? 'yes' : '**no**') : 'no (failed)') . " |\n";
	push @out, "\nNotes: " . join('; ', @{ $w->{note} }) . "\n" if $w->{note};
	return @out;
}

1;
