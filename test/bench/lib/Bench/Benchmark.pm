#
# test/bench/lib/Bench/Benchmark.pm -- the interface of a benchmark module,
# and what every benchmark gets: its own results (per-repeat values and
# notes), the rows of the main table, bar charts of its values.
#
# A benchmark is a class deriving from this one, listed in Bench::Registry.
# Bench::Suite makes one object per run and calls, in this order:
#
#   $class->knobs       its own knobs: NAME => [default, kind] (Bench.pm's kinds,
#                       or [sub { check }, 'what it must be'])
#   $class->preflight($dir)  before anything starts ($dir: test/bench): '' or why it
#                       cannot run (the run stops)
#   $class->files       files outside test/bench it needs (paths relative to
#                       test/bench), copied with the suite
#   $class->once        true: run once after all repeats (not per repeat)
#   $self->setup        once before the first repeat: its servers, tables, pre-fills;
#                       the default starts the shared bench server (Bench::Pg)
#   $self->run($r)      one repeat (1 .. BENCH_REPEAT; 1 for a once benchmark)
#   $self->rows         its rows of the main results table (may be none)
#   $self->report       its own section of latest.md (may be none)
#   $self->charts($c)   draws its charts with the Bench::Chart $c; returns how many
#   $self->teardown     stops what it started itself (its own servers, helpers)
#
# run, rows, report and charts run with $self->node current (Bench::Pg's
# on_node): a benchmark with its own server returns it from node.
# $self->contenders lists what it measures: [group, [label, ...]], ...; a
# result is stored under "group|label".  A failed correctness check is a note
# and an ERR value, and fail_check() makes the run exit 1 (after the report).
#
package Bench::Benchmark;

use strict;
use warnings;

use Bench;
use Bench::Pg ();

sub new
{
	my ($class, %a) = @_;
	return bless { vals => {}, notes => {}, failed => [], %a }, $class;
}

sub name      { return $_[0]{name}; }
sub knobs     { return (); }
sub preflight { return ''; }
sub files     { return (); }
sub once      { return 0; }
sub setup     { Bench::Pg::bench_node(); return; }
sub node      { return Bench::Pg::bench_node(); }
sub contenders { return (); }
sub run       { die ref($_[0]) . ": no run\n"; }
sub rows      { return (); }
sub report    { return (); }
sub charts    { return 0; }
sub teardown  { return; }

# ---------------------------------------------------------------------------
# Results: "group|label" => per-repeat values (events/s, or ERR / PENDING),
# shown in the per-repeat table of the report, and notes.
# ---------------------------------------------------------------------------
sub vals  { return $_[0]{vals}; }
sub notes { return $_[0]{notes}; }

sub add_val  { my ($self, $key, $v) = @_; push @{ $self->{vals}{$key} }, $v; return; }
sub add_note { my ($self, $key, $note) = @_; note_to($self->{notes}, $key, $note); return; }

# the same value (and note) for every key of @$keys
sub fail_all
{
	my ($self, $keys, $v, $note) = @_;
	for (@$keys) { $self->add_val($_, $v); $self->add_note($_, $note) if $note }
	return;
}

# every "group|label" of contenders()
sub keys_all { my ($self) = @_; return map { my $g = $_->[0]; map { "$g|$_" } @{ $_->[1] } } $self->contenders; }

# a failed correctness check: noted in the report, and the run exits 1
sub fail_check { my ($self, $msg) = @_; push @{ $self->{failed} }, $msg; log_msg($self->name, ": check failed: $msg"); return; }
sub failed { return @{ $_[0]{failed} }; }

# one row of the main table: median events/s of <group|contender>, the
# paired ratio to <base>, and whether it meets <target> (a ratio; undef: none).
# With $show_as: a ratio between two contenders, shown as group $show_as.
sub row
{
	my ($self, $b, $c, $base, $target, $ttext, $label, $show_as) = @_;
	my $vals = $self->{vals}{"$b|$c"} // [];
	my $m = median($vals);
	my ($m_txt, $ratio, $met) = ('', '—', '—');
	if (!defined $m)
	{
		$m_txt = missing($vals);
		$met = $m_txt eq 'error' ? 'no (failed)' : 'pending' if defined $target;
	}
	else
	{
		$m_txt = fmt($m);
		# median over repeats of contender/baseline of the same repeat (paired:
		# they ran minutes apart at most, so slow machine drift cancels)
		my $pr = paired_ratio($vals, $self->{vals}{"$b|$base"} // []);
		$ratio = sprintf('%.2f', $pr) if defined $pr;
		$met = $ratio + 0 >= $target ? 'yes' : '**no**' if defined $target && defined $pr;
	}
	$ratio = '1.00' if $c eq $base;
	return "| $show_as | $label | — | $ratio | $ttext | $met |\n" if defined $show_as;
	return "| $b | " . ($label // $c) . " | $m_txt | $ratio | $ttext | $met |\n";
}

# a bar chart of the contenders' median events/s (a panel per group, the
# first contender of a group its baseline), named bench-<name>.png, under
# $title (Bench::Chart's default without)
sub bar_charts
{
	my ($self, $chart, $title) = @_;
	my @panels;
	for my $g ($self->contenders)
	{
		my ($group, $labels) = @$g;
		# [label, median events/s, paired ratio to the first (the baseline), as in the table]
		my $base = $self->{vals}{"$group|$labels->[0]"} // [];
		my @rows = grep { defined $_->[1] }
		  map { [ $_, median($self->{vals}{"$group|$_"} // [], ''), paired_ratio($self->{vals}{"$group|$_"} // [], $base) ] } @$labels;
		push @panels, [ $group, \@rows ] if @rows;
	}
	return @panels ? $chart->bars($self->name, \@panels, $title) : 0;
}

1;
