#
# test/bench/lib/Bench/Single.pm -- benchmark 1, single-event appends:
# BENCH_CLIENTS clients (-j 2), one event per transaction, autocommit:
# streamguard.append on 1 and 4 partitions and PgQ against a plain INSERT,
# in round-robin slices (Bench::Sliced).
#
package Bench::Single;

use strict;
use warnings;

use parent 'Bench::Sliced';

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (
	raw => 'plain INSERT (baseline)',
	sg1 => 'streamguard.append, 1 partition',
	sg4 => 'streamguard.append, 4 partitions',
	pgq => 'PgQ pgq.insert_event',);

sub contenders { return ([ 'single', [ @S{qw(raw sg1 sg4 pgq)} ] ]); }

sub run
{
	my ($self, $r) = @_;
	sql(raw_table_ddl('raw_events'));
	my @c = grep { defined } (
		$self->raw_contender($S{raw}, 'append_single_raw.sql', 1),
		$self->stream_contender('single', $S{sg1}, 'sg1', "s1p1r$r", 1, 'append_single_sg.sql', 1),
		$self->stream_contender('single', $S{sg4}, 'sg4', "s1p4r$r", 4, 'append_single_sg.sql', 1),
		$self->queue_contender('single', $S{pgq}, "q1r$r", 'append_single_pgq.sql', 1));

	my $tot = $self->run_sliced('single', $r, \@c, -c => $K{BENCH_CLIENTS}, -j => 2);
	$self->record_sliced('single', $tot, \@c);

	sql('DROP TABLE raw_events');
	$self->finish_contenders('single', $tot, @c);
	return;
}

sub rows
{
	my ($self) = @_;
	return (
		$self->row('single', $S{raw}, $S{raw}, undef, 'baseline'),
		$self->row('single', $S{sg1}, $S{raw}, 0.9, '≥ 0.90 × plain INSERT'),
		$self->row('single', $S{sg4}, $S{raw}, 0.9, '≥ 0.90 × plain INSERT'),
		$self->row('single', $S{pgq}, $S{raw}, undef, 'reference'));
}

sub charts { my ($self, $chart) = @_; return $self->bar_charts($chart); }

1;
