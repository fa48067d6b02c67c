#
# test/bench/lib/Bench/Sliced.pm -- the base of the fixed-duration benchmarks
# (single, batch, capture): a time-sliced, rotating schedule, and contenders
# that are a fresh table, stream or queue per repeat.
#
# Each contender gets BENCH_SECONDS per repeat, split into BENCH_SLICES slices
# (at most one per second); the slices run round-robin over the contenders,
# the starting contender rotating from slice to slice and repeat to repeat,
# each slice after a CHECKPOINT.  A load burst on a shared machine then hits
# every contender alike.  A repeat's events/s of a contender = its events in
# all slices / their time (pgbench: transactions / tps, i.e. without connection
# time; COPY: committed rows / wall time).
#
package Bench::Sliced;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Bench;
use Bench::Pg;
use Bench::SG;

# A contender is { label, tag, per (events per transaction), script, vars,
# env (environment of its pgbench runs) } for pgbench, or { label, tag, copy
# => \&slice } where slice($seconds, $log) returns (events, seconds) or
# nothing.  Returns label => { n, t, bad }.
sub run_sliced
{
	my ($self, $b, $r, $contenders, @pgbench_args) = @_;
	my $nslice = $K{BENCH_SLICES} > $K{BENCH_SECONDS} ? $K{BENCH_SECONDS} : $K{BENCH_SLICES};
	my $secs = int($K{BENCH_SECONDS} / $nslice);
	my %tot;
	for my $s (1 .. $nslice)
	{
		for my $x (rotated($s + $r - 2, @$contenders))
		{
			my $t = $tot{ $x->{label} } //= {};
			next if $t->{bad};
			checkpoint();
			my $log = "${b}_$x->{tag}_r${r}_s$s";
			my ($n, $sec) = $x->{copy} ? $x->{copy}->($secs, $log) : pgbench_slice($x, $secs, $log, @pgbench_args);
			if (!defined $n) { $t->{bad} = 1; next; }
			add_time($t, n => $n, $sec);
		}
	}
	return \%tot;
}

# a repeat's events/s of every contender (or ERR) into the results
sub record_sliced
{
	my ($self, $b, $tot, $contenders) = @_;
	for my $x (@$contenders)
	{
		my $t = $tot->{ $x->{label} };
		$self->add_val("$b|$x->{label}", $t->{bad} || !defined $t->{n} ? 'ERR' : sprintf('%.1f', $t->{n} / $t->{t}));
	}
	return;
}

sub pgbench_slice
{
	my ($x, $secs, $log, @args) = @_;
	local @ENV{ keys %{ $x->{env} // {} } } = values %{ $x->{env} // {} };
	my $res = pgbench($log, $x->{script}, $x->{vars}, @args, -T => $secs) or return;
	return ($res->{processed} * $x->{per}, $res->{processed} / $res->{tps});
}

# ---------------------------------------------------------------------------
# Contenders of benchmarks 1 and 2: a fresh stream or queue per repeat, or the
# row is marked pending (not installed) / error (not created).
# ---------------------------------------------------------------------------
sub raw_contender
{
	my ($self, $label, $script, $per) = @_;
	return { label => $label, tag => 'raw', script => $script, vars => {}, per => $per };
}

sub stream_contender
{
	my ($self, $b, $label, $tag, $stream, $parts, $script, $per) = @_;
	return $self->add_val("$b|$label", 'PENDING') unless have('sg');
	return $self->fail_all([ "$b|$label" ], 'ERR', 'create_stream failed') unless create_stream($stream, $parts);
	return { label => $label, tag => $tag, script => $script, vars => { stream => $stream }, per => $per, stream => $stream };
}

sub queue_contender
{
	my ($self, $b, $label, $queue, $script, $per) = @_;
	return $self->add_val("$b|$label", 'PENDING') unless have('pgq');
	return $self->fail_all([ "$b|$label" ], 'ERR', 'create_queue failed') unless (sql_try("SELECT pgq.create_queue('$queue')"))[0];
	return { label => $label, tag => 'pgq', script => $script, vars => { queue => $queue }, per => $per, queue => $queue };
}

# after a sliced run: each stream must hold exactly the events its clients
# committed; then the streams and queues are dropped
sub finish_contenders
{
	my ($self, $b, $tot, @contenders) = @_;
	for my $x (@contenders)
	{
		if ($x->{stream})
		{
			my $t = $tot->{ $x->{label} };
			if (!$t->{bad} && defined $t->{n})
			{
				my $stored = stream_events($x->{stream});
				$self->add_note("$b|$x->{label}", "check failed: stream holds $stored events, clients committed $t->{n}")
				  if $stored ne $t->{n};
			}
			drop_stream($x->{stream});
		}
		sql_try("SELECT pgq.drop_queue('$x->{queue}', true)") if $x->{queue};
	}
	return;
}

1;
