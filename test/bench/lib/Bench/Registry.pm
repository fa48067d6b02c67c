#
# test/bench/lib/Bench/Registry.pm -- the benchmarks of the suite: one line
# each, name => module (test/bench/lib/Bench/<Module>.pm) and whether a plain
# `make bench` runs it.  The order is the order of their sections in the
# report; a run's order is BENCH_ONLY's (the default: the default benchmarks
# in this order, those that run once, after all repeats, last).
#
# Adding a benchmark: a module (docs/benchmarks.md, "Adding a benchmark") and
# one line here.
#
package Bench::Registry;

use strict;
use warnings;

use Bench;

my @REGISTRY = (
	# name        module               in the default run
	[ single   => 'Bench::Single',   1 ],
	[ batch    => 'Bench::Batch',    1 ],
	[ drain    => 'Bench::Drain',    1 ],
	[ latency  => 'Bench::Latency',  1 ],
	[ longpoll => 'Bench::LongPoll', 1 ],
	[ remote   => 'Bench::Remote',   1 ],
	[ parallel => 'Bench::Parallel', 1 ],
	[ start    => 'Bench::Start',    1 ],
	[ group    => 'Bench::Group',    1 ],
	[ long     => 'Bench::Long',     1 ],
	[ windows  => 'Bench::Windows',  1 ],
	[ capture  => 'Bench::Capture',  0 ],
	[ kafka    => 'Bench::Kafka',    0 ],
	[ cdc      => 'Bench::Cdc',      0 ],
	[ queues   => 'Bench::Queues',   0 ],
	[ curves   => 'Bench::Curves',   0 ],
	[ nexmark  => 'Bench::Nexmark',  0 ],);

my %MODULE = map { $_->[0] => $_->[1] } @REGISTRY;

# every benchmark's name, in the registry's order
sub names { return map { $_->[0] } @REGISTRY; }

sub module { my ($name) = @_; return $MODULE{$name}; }

# loads the modules; sets up the knobs (the common ones, every module's own,
# BENCH_ONLY) from the environment
sub load
{
	my %knobs;
	for my $e (@REGISTRY)
	{
		my ($name, $module) = @$e;
		(my $file = "$module.pm") =~ s{::}{/}g;
		require $file;
		my %own = $module->knobs;
		for (keys %own)
		{
			die "bench: knob $_ is declared by two benchmarks\n" if $knobs{$_};
			$knobs{$_} = $own{$_};
		}
	}
	my @default = map { $_->[0] } grep { $_->[2] } @REGISTRY;
	@default = ((grep { !$MODULE{$_}->once } @default), (grep { $MODULE{$_}->once } @default));
	my %known = map { $_ => 1 } names();
	$knobs{BENCH_ONLY} = [ "@default", [ sub { !grep { !$known{$_} } split ' ', $_[0] }, 'a list of: ' . join(' ', names()) ] ];
	Bench::init_knobs(%knobs);
	return;
}

# the benchmarks BENCH_ONLY names, in its order
sub selected { return split ' ', $K{BENCH_ONLY}; }

1;
