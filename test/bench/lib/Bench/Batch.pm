#
# test/bench/lib/Bench/Batch.pm -- benchmark 2, batched appends: 1,000 events
# per transaction, BENCH_BATCH_CLIENTS clients: streamguard.append_batch and
# PgQ against INSERT ... SELECT, and COPY for the scale of a COPY path, in
# round-robin slices (Bench::Sliced).
#
package Bench::Batch;

use strict;
use warnings;

use parent 'Bench::Sliced';

use Time::HiRes qw(time);

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (
	raw  => 'INSERT ... SELECT (baseline)',
	copy => 'COPY (raw PostgreSQL)',
	sg   => 'streamguard.append_batch, 4 partitions',
	pgq  => 'PgQ 1,000 x pgq.insert_event',);

sub contenders { return ([ 'batch', [ @S{qw(raw copy sg pgq)} ] ]); }

# 20 COPY blocks of 1,000 rows each (sql/copy_block.sql), made once
sub setup
{
	my ($self) = @_;
	$self->SUPER::setup;
	$self->{blocks} = "$WORK/copy_blocks.sql";
	return;
}

sub run
{
	my ($self, $r) = @_;
	sql(raw_table_ddl('raw_events') . raw_table_ddl('raw_copy'));
	spurt($self->{blocks}, map { ("COPY raw_copy (partition, key, payload) FROM STDIN;\n", sql(slurp("$SQL/copy_block.sql")), "\n\\.\n") } 1 .. 20)
	  unless -f $self->{blocks};
	my @c = grep { defined } (
		$self->raw_contender($S{raw}, 'append_batch_raw.sql', 1000),
		{ label => $S{copy}, tag => 'copy', copy => sub { $self->copy_slice(@_) } },
		$self->stream_contender('batch', $S{sg}, 'sg', "s2r$r", 4, 'append_batch_sg.sql', 1000),
		$self->queue_contender('batch', $S{pgq}, "q2r$r", 'append_batch_pgq.sql', 1000));

	my $tot = $self->run_sliced('batch', $r, \@c, -c => $K{BENCH_BATCH_CLIENTS}, -j => $K{BENCH_BATCH_CLIENTS});
	$self->record_sliced('batch', $tot, \@c);

	sql('DROP TABLE raw_events; DROP TABLE raw_copy');
	$self->finish_contenders('batch', $tot, @c);
	return;
}

# COPY: pgbench cannot COPY, so each client is a psql session fed an endless
# stream of "COPY raw_copy ... FROM STDIN" blocks of 1,000 rows (one
# transaction each), stopped after the slice (timeout -s TERM); returns
# (committed rows, wall time)
sub copy_slice
{
	my ($self, $secs, $logname) = @_;
	my $log = "$LOGS/$logname.log";
	my $before = sql('SELECT count(*) FROM raw_copy');
	my $t0 = time;
	my @pids = map {
		spawn([ '/bin/sh', '-c', 'while :; do cat "$1" || exit 0; done | timeout -s TERM "$2" "$3" -X -q -v ON_ERROR_STOP=1 -f - >/dev/null',
				'copy', $self->{blocks}, $secs, "$BIN/psql" ], $log, append => 1)
	} 1 .. $K{BENCH_BATCH_CLIENTS};
	reap($_, $secs + 60) for @pids;
	my $t1 = time;
	if (slurp($log) =~ /^(.*ERROR.*)$/m) { log_msg("COPY: $1"); return; }
	return (sql('SELECT count(*) FROM raw_copy') - $before, sprintf('%.6f', $t1 - $t0));
}

sub rows
{
	my ($self) = @_;
	return (
		$self->row('batch', $S{raw},  $S{raw}, undef, 'baseline'),
		$self->row('batch', $S{copy}, $S{raw}, undef, 'baseline of a COPY path'),
		$self->row('batch', $S{sg},   $S{raw}, 0.7,   '≥ 0.70 × INSERT … SELECT'),
		"| batch | streamguard COPY path | n/a | — | ≥ 0.90 × COPY | n/a (no COPY path in this version) |\n",
		$self->row('batch', $S{pgq}, $S{raw}, undef, 'reference'));
}

sub charts { my ($self, $chart) = @_; return $self->bar_charts($chart); }

1;
