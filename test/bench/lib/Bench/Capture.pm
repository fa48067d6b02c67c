#
# test/bench/lib/Bench/Capture.pm -- change capture (docs/benchmarks.md,
# "12. Change capture"): write throughput of a captured table against the same
# table uncaptured and against the hand-written trigger + outbox table
# pattern, on a server of its own, reported as same-run ratios.
#
# The same table t exists in three schemas (capture/setup.sql): plain,
# captured (streamguard.capture_table) and outbox (a PL/pgSQL AFTER ROW
# trigger that inserts each change as JSON into a table).  Each workload is
# one pgbench script (capture/<workload>.sql) run against each schema in turn
# (search_path through PGOPTIONS), in round-robin slices (Bench::Sliced):
#   insert_single  one INSERT per transaction          (BENCH_CLIENTS clients)
#   update_single  one UPDATE of a random row           (BENCH_CLIENTS clients)
#   insert_batch   one INSERT of BENCH_CAPTURE_BATCH rows  (BENCH_BATCH_CLIENTS clients)
#   update_batch   one UPDATE of BENCH_CAPTURE_BATCH rows  (BENCH_BATCH_CLIENTS clients)
# A ratio is the median over the repeats of contender / plain of the same
# repeat.  After every repeat it checks that the stream holds exactly one
# event per captured change (else the run exits 1).
#
package Bench::Capture;

use strict;
use warnings;

use parent 'Bench::Sliced';

use Bench;
use Bench::Pg;

my @C = qw(plain captured outbox);
my @WORKLOADS = qw(insert_single update_single insert_batch update_batch);

sub knobs
{
	my %known = map { $_ => 1 } @WORKLOADS;
	return (
		BENCH_CAPTURE_ROWS      => [ 1000000, 'int' ],
		BENCH_CAPTURE_BATCH     => [ 100,     'int' ],
		BENCH_CAPTURE_WORKLOADS => [ "@WORKLOADS", [ sub { !grep { !$known{$_} } split ' ', $_[0] }, "a list of: @WORKLOADS" ] ],);
}

sub workloads { return split ' ', $K{BENCH_CAPTURE_WORKLOADS}; }

sub contenders { return map { [ "capture $_", [@C] ] } workloads(); }

sub node { return $_[0]{node}; }

# its server (the suite's settings, no commit timestamps) and the three tables
sub setup
{
	my ($self) = @_;
	$self->{tps} = {};       # workload => contender => [tx/s per repeat, or ERR]
	$self->{changes} = 0;    # changes the captured contender committed
	return $self->{why} = 'streamguard is not installed' unless have('sg_lib');
	$self->{node} = start_cluster('capture', 'track_commit_timestamp = off', 'max_connections = 50')
	  or return $self->{why} = 'its server did not start';
	on_node($self->{node}, sub {
		log_msg("loading $K{BENCH_CAPTURE_ROWS} rows into each of plain.t, captured.t, outbox.t");
		psql_file("$DIR/capture/setup.sql", { rows => $K{BENCH_CAPTURE_ROWS} }, 'capture_setup')
		  or $self->{why} = 'capture/setup.sql failed (logs/capture_setup.log)';
	});
	return;
}

sub run
{
	my ($self, $r) = @_;
	$self->{load0} //= (split ' ', loadavg())[0];
	for my $w (workloads())
	{
		if ($self->{why})
		{
			push @{ $self->{tps}{$w}{$_} }, have('sg_lib') ? 'ERR' : 'PENDING' for @C;
			next;
		}
		my $batch = $w =~ /batch/;
		my @c = map { {
			label => $_, tag => $_, script => "$DIR/capture/$w.sql", per => 1,
			vars  => { rows => $K{BENCH_CAPTURE_ROWS}, batch => $K{BENCH_CAPTURE_BATCH} },
			env   => { PGOPTIONS => "-c search_path=$_" } } } @C;
		my $tot = $self->run_sliced("capture_$w", $r, \@c, -c => $batch ? $K{BENCH_BATCH_CLIENTS} : $K{BENCH_CLIENTS}, -j => 2);
		for my $c (@C)
		{
			my $t = $tot->{$c};
			my $bad = $t->{bad} || !defined $t->{n};
			push @{ $self->{tps}{$w}{$c} }, $bad ? 'ERR' : sprintf('%.1f', $t->{n} / $t->{t});
			$self->fail_check("$w, $c: pgbench failed in repeat $r (logs/capture_${w}_${c}_r${r}_s*.log)") if $bad;
		}
		my $cap = $tot->{captured};
		if ($cap->{bad}) { $self->{unknown} = 1; }
		else { $self->{changes} += $cap->{n} * ($batch ? $K{BENCH_CAPTURE_BATCH} : 1); }
		log_msg(sprintf('%-13s repeat %d: %s', $w, $r, join(', ', map { "$_ " . $self->{tps}{$w}{$_}[-1] . ' tx/s' } @C)));
	}
	$self->check unless $self->{why};
	$self->{load1} = (split ' ', loadavg())[0];
	return;
}

# the stream must hold one event per captured change
sub check
{
	my ($self) = @_;
	return $self->{check} = 'not checked: a captured run failed' if $self->{unknown};
	my $events = sql_value(q{SELECT coalesce(sum(retained_events), 0) FROM streamguard.streams WHERE stream = 'bench_capture'}) // '?';
	if ($events eq $self->{changes})
	{
		$self->{check} = "the stream holds one event per captured change ($events)";
		return;
	}
	$self->{check} = "MISMATCH: $events events for $self->{changes} captured changes";
	$self->fail_check($self->{check});
	return;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## Change capture, write throughput\n\n",
		"The same table with $K{BENCH_CAPTURE_ROWS} rows in three schemas on a server of its own: plain, captured (capture_table) and outbox (a PL/pgSQL trigger inserting each change as JSON into a table); each workload's pgbench script against each, in round-robin slices. tx/s are medians over the repeats, a ratio the median of same-repeat ratios.\n\n",
		"| workload | rows/xact | clients | plain tx/s | captured tx/s | outbox tx/s | captured / plain | outbox / plain | captured / outbox |\n",
		"|---|---|---|---|---|---|---|---|---|\n");
	my $tx = sub { median($_[0]) // missing($_[0]) };
	my $ratio = sub { my $v = paired_ratio(@_); defined $v ? sprintf('%.2f', $v) : '—' };
	my @per;
	for my $w (workloads())
	{
		my ($p, $c, $o) = map { $self->{tps}{$w}{$_} // [] } @C;
		my $batch = $w =~ /batch/;
		push @out, '| ' . join(' | ', $w, $batch ? $K{BENCH_CAPTURE_BATCH} : 1, $batch ? $K{BENCH_BATCH_CLIENTS} : $K{BENCH_CLIENTS},
			$tx->($p), $tx->($c), $tx->($o), '**' . $ratio->($c, $p) . '**', $ratio->($o, $p), $ratio->($c, $o)) . " |\n";
		push @per, "$w: " . join(', ', map { join(' ', $_, @{ $self->{tps}{$w}{$_} // [] }) } @C);
	}
	push @out, sprintf("\n%d repeat(s) of %d s per contender in %d slices; load average %s at the start, %s at the end; %s\n",
		$K{BENCH_REPEAT}, $K{BENCH_SECONDS}, $K{BENCH_SLICES}, $self->{load0} // '?', $self->{load1} // '?',
		$self->{why} ? "not run: $self->{why}" : $self->{check} // 'not checked');
	push @out, "\nPer repeat (tx/s): " . join('; ', @per) . "\n";
	return @out;
}

1;
