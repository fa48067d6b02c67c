#
# test/bench/lib/Bench/Report.pm -- latest.md: the run's header (date,
# revision, machine, settings, knobs, load), the main table (every
# benchmark's rows, in BENCH_ONLY's order), the benchmarks' own sections (in
# the registry's order), the per-repeat values with their notes, and any
# failed correctness check.
#
package Bench::Report;

use strict;
use warnings;

use POSIX qw(strftime);

use Bench;
use Bench::Pg ();
use Bench::Registry;

# $run: { t0, t1, load0, load1 }; @$selected: the benchmark objects in
# BENCH_ONLY's order
sub lines
{
	my ($run, $selected) = @_;
	my @out = header($run);
	my @rows = map { my $b = $_; Bench::Pg::on_node($b->node, sub { $b->rows }) } @$selected;
	push @out, "events/s are medians over the repeats; a ratio is the median over the repeats of contender / raw PostgreSQL baseline of the same benchmark and repeat (all measured in this run).\n\n",
	  "| benchmark | contender | events/s (median) | ratio vs raw baseline | target | met? |\n",
	  "|---|---|---:|---:|---|---|\n", @rows
	  if @rows;
	my %rank;
	@rank{ Bench::Registry::names() } = 0 .. 1000;
	push @out, map { my $b = $_; Bench::Pg::on_node($b->node, sub { $b->report }) } sort { $rank{ $a->name } <=> $rank{ $b->name } } @$selected;
	my (%vals, %notes);
	for my $b (@$selected)
	{
		%vals  = (%vals,  %{ $b->vals });
		%notes = (%notes, %{ $b->notes });
	}
	if (%vals)
	{
		push @out, "\n## Per-repeat values (events/s)\n\n| benchmark | contender | values | notes |\n|---|---|---|---|\n";
		for my $k (sort keys %vals)
		{
			my ($b, $c) = split /\|/, $k, 2;
			push @out, "| $b | $c |" . join('', map { ' ' . (num_list($_) ? fmt($_) : $_) } @{ $vals{$k} }) . ' | ' . ($notes{$k} // '') . " |\n";
		}
	}
	my @failed = map { my $b = $_; map { $b->name . ": $_" } $b->failed } @$selected;
	push @out, "\n**Failed checks** (the run exits 1): " . join('; ', @failed) . "\n" if @failed;
	return @out;
}

sub header
{
	my ($run) = @_;
	my $wall = int($run->{t1}) - int($run->{t0});
	my ($os) = slurp('/etc/os-release') =~ /^PRETTY_NAME="?([^"\n]*)/m;
	my ($mem) = slurp('/proc/meminfo') =~ /^MemTotal:\s+(\d+)/m;
	my $nproc = qx(nproc);
	chomp $nproc;
	my @knobs = map { "$_=$K{$_}" } qw(BENCH_SECONDS BENCH_REPEAT BENCH_SLICES BENCH_CLIENTS BENCH_BATCH_CLIENTS
	  BENCH_DRAIN_EVENTS BENCH_DRAIN_PASSES BENCH_LAT_SECONDS BENCH_LAT_RATE BENCH_LAT_CLIENTS BENCH_LAT_POLL_MS
	  BENCH_REMOTE_EVENTS BENCH_LONG_EVENTS BENCH_LONG_CLIENTS);
	my $no_sg = !Bench::Pg::have('sg_lib') || (Bench::Pg::main_started() && !Bench::Pg::have('sg'));
	return (
		"# streamguard benchmark results\n\n",
		'- date: ' . strftime('%Y-%m-%d %H:%M UTC', gmtime) . "; revision: " . ($ENV{BENCH_REV} || 'unknown') . "\n",
		"- machine: $nproc cores, " . sprintf('%.0f GiB', ($mem // 0) / 1048576) . ', ' . ($os // 'unknown OS') . ', PostgreSQL '
		  . Bench::Pg::server_version() . "\n",
		"- settings: shared_buffers=$K{BENCH_SHARED_BUFFERS}, synchronous_commit=on, max_wal_size=4GB, checkpoint_timeout=15min, fsync on\n",
		"- @knobs BENCH_LONG_RETENTION=\"$K{BENCH_LONG_RETENTION}\" BENCH_ONLY=\"$K{BENCH_ONLY}\"; wall time "
		  . int($wall / 60) . 'm' . ($wall % 60) . "s\n",
		"- load average (1/5/15 min) at start: $run->{load0}; at end: $run->{load1} (the suite itself keeps ~2 cores busy; a start value well above 0 means other work shared the machine)"
		  . ($K{BENCH_NICE} ne '' && $K{BENCH_NICE} != 0 ? "; suite run at nice $K{BENCH_NICE}" : '') . "\n",
		($no_sg ? "- streamguard: not available in this run (rows marked pending)\n" : ()), "\n");
}

1;
