#
# test/bench/lib/Bench/Parallel.pm -- benchmark 7, parallel pipelines: a
# CPU-bound pipeline (per event: jsonb_each over the payload and a chain of 20
# md5 hashes of its text, about 0.1 ms of CPU) drains BENCH_PARALLEL_EVENTS
# events of a 4-partition stream with 1, 2 and 4 workers (workers => N), in an
# order rotating from repeat to repeat.  events/s = sink rows committed before
# the last commit / time between the first and the last commit.
#
package Bench::Parallel;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (1 => 'pipeline, 1 worker', 2 => 'pipeline, 2 workers', 4 => 'pipeline, 4 workers');
my $PAR_SQL = q{INSERT INTO sink_par (partition, seq, key, payload)
SELECT partition, seq, key,
       jsonb_build_object('n', (SELECT count(*) FROM jsonb_each(payload)),
                          'h', (SELECT md5(string_agg(md5(payload::text || i), '')) FROM generate_series(1, 20) AS i))
FROM batch};

sub knobs { return (BENCH_PARALLEL_EVENTS => [ 200000, 'k2' ]); }

sub contenders { return ([ 'parallel', [ @S{qw(1 2 4)} ] ]); }

sub run
{
	my ($self, $r) = @_;
	my $stream = "s7r$r";
	my $n = $K{BENCH_PARALLEL_EVENTS};
	my $ready = have('pipe') && create_stream($stream, 4)
	  && prefill("prefill_par_r$r", 'append_batch_sg.sql', { stream => $stream }, $n / 1000);
	for my $w (rotated($r, 1, 2, 4))
	{
		my $key = "parallel|$S{$w}";
		if (!$ready) { $self->add_val($key, have('pipe') ? 'ERR' : 'PENDING'); next; }
		sql(sink_ddl('sink_par'));
		checkpoint();
		my $name = "par${w}_r$r";
		my $err = create_pipeline($name, $stream, $PAR_SQL, workers => $w);
		$err ||= wait_pipeline($stream, $name, $n, $K{BENCH_PIPELINE_TIMEOUT});
		drop_pipeline($name);
		my $st = $err ? undef : sink_stats('sink_par');
		$err ||= "sink holds $st->{rows} rows of $n" if $st && $st->{rows} != $n;
		if ($err || !defined $st->{rate}) { $self->fail_all([$key], 'ERR', $err || 'no time span'); next; }
		$self->add_val($key, $st->{rate});
	}
	sql_try('DROP TABLE IF EXISTS sink_par');
	drop_stream($stream) if have('sg');
	return;
}

sub rows
{
	my ($self) = @_;
	return (
		$self->row('parallel', $S{1}, $S{1}, undef, 'baseline'),
		$self->row('parallel', $S{2}, $S{1}, 1.7, '≥ 1.70 × 1 worker (2 cores)'),
		$self->row('parallel', $S{4}, $S{1}, 1.7, 'not slower than 2 workers'));
}

sub charts { my ($self, $chart) = @_; return $self->bar_charts($chart); }

1;
