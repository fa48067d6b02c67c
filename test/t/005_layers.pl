# The C files call each other only down the layers: no cycle among the
# files of src/ (scripts/call-graph.pl; docs/internals.md draws the layers).
# A failure lists the cycle and the calls that make it.

use strict;
use warnings;

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";
my $out = `cd '$root' && perl scripts/call-graph.pl 2>&1`;
my $status = $? >> 8;
is($status, 0, 'no call cycle among the files of src/') or diag($out);
like($out, qr{\bpipeline/source_local\s+->\s+stream/consumer\b}, 'the call graph was read (the local source calls consumer)');
done_testing();
