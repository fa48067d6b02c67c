# The C files call each other only down the layers: no file calls one in a
# folder above its own (core < io < shmem < catalog < stream < capture <
# pipeline < workers < api < src/streamguard.c), and no cycle among the
# files of src/ (scripts/call-graph.pl; docs/internals.md draws the layers).
# A failure lists the upward calls or the cycle, and the calls that make it.

use strict;
use warnings;

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";
my $out = `cd '$root' && perl scripts/call-graph.pl 2>&1`;
my $status = $? >> 8;
is($status, 0, 'no upward call and no call cycle among the files of src/') or diag($out);
like($out, qr{^no upward call\n}m, 'no file calls a layer above its own') or diag($out);
like($out, qr{\bpipeline/source\s+->\s+stream/consumer\b}, 'the call graph was read (source calls consumer)');
done_testing();
