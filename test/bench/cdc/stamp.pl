#!/usr/bin/perl
#
# test/bench/cdc/stamp.pl -- the receiving end of the cdc benchmark's
# logical decoding path: reads pg_recvlogical's test_decoding output (a
# FIFO, argument 1) and writes, for each INSERT into logical.t, the time the
# line arrived (epoch seconds) and the row's column at, tab-separated, into
# argument 2, one line at a time (the benchmark counts the lines to know
# when the stream has been received).
#
use strict;
use warnings;
use Time::HiRes qw(time);

my ($in, $out) = @ARGV;
open(my $i, '<', $in) or die "$in: $!\n";
open(my $o, '>', $out) or die "$out: $!\n";
$o->autoflush(1);
while (my $l = <$i>)
{
	my $now = time;
	next unless $l =~ /^table logical\.t: INSERT: .* at\[timestamp with time zone\]:'([^']+)'/;
	printf $o "%.6f\t%s\n", $now, $1;
}
close($o) or die "$out: $!\n";
