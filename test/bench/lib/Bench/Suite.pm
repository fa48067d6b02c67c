#
# test/bench/lib/Bench/Suite.pm -- the inner part of a run (as the cluster's OS
# user, in the temp dir): one object per benchmark BENCH_ONLY names, set up in
# that order; BENCH_REPEAT repeats, each running every repeated benchmark once
# (so slow drift of the machine affects all of them alike), then the
# benchmarks that run once; then latest.md, the charts, and every server and
# helper stopped.  Exit code 0, or 1 when a benchmark failed a correctness
# check (Bench::Benchmark's fail_check).
#
package Bench::Suite;

use strict;
use warnings;

use Time::HiRes qw(time);

use Bench;
use Bench::Chart;
use Bench::Pg ();
use Bench::Registry;
use Bench::Report;

sub main
{
	my ($work, $dir) = @_;
	Bench::Registry::load();
	Bench::inner_setup($work, $dir);
	my @names = Bench::Registry::selected();
	my %obj = map { $_ => Bench::Registry::module($_)->new(name => $_) } @names;
	my @selected = map { $obj{$_} } @names;
	my %seen;
	my @distinct = grep { !$seen{ $_->name }++ } @selected;

	$_->setup for @distinct;
	my %run = (t0 => time, load0 => loadavg());
	for my $r (1 .. $K{BENCH_REPEAT})
	{
		for my $b (grep { !$_->once } @selected)
		{
			log_msg("repeat $r/$K{BENCH_REPEAT}: ", $b->name);
			Bench::Pg::on_node($b->node, sub { $b->run($r) });
		}
	}
	for my $b (grep { $_->once } @selected)
	{
		Bench::Pg::on_node($b->node, sub { $b->run(1) });
	}
	@run{qw(t1 load1)} = (time, loadavg());

	spurt("$work/latest.md", Bench::Report::lines(\%run, \@distinct));
	my $chart = Bench::Chart->new("$work/charts", @run{qw(load0 load1)});
	if ($chart)
	{
		my $made = 0;
		for my $b (@distinct)
		{
			$made += Bench::Pg::on_node($b->node, sub { $b->charts($chart) });
		}
		log_msg("charts: $made PNG file(s) in $work/charts") if $made;
	}
	$_->teardown for reverse @distinct;
	Bench::Pg::stop_all();
	return (grep { $_->failed } @distinct) ? 1 : 0;
}

1;
