# The C files call each other only down the layers (scripts/call-graph.pl;
# docs/internals.md "Calls between files"): no file calls one in a folder
# above its own (core < io < shmem < catalog < stream < capture < pipeline
# < workers < api < src/streamguard.c), directly or through a function
# pointer, except through the hooks the script lists with their reasons,
# and no cycle among the files.  A failure lists the calls that break it.

use strict;
use warnings;

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";
my $out = `cd '$root' && perl scripts/call-graph.pl 2>&1`;
my $status = $? >> 8;
is($status, 0, 'no upward call and no call cycle among the files of src/') or diag($out);
like($out, qr{^no upward call, no cycle$}m, 'the checker says so');
# the checker sees what it must, or the result above means nothing
like($out, qr{\bpipeline/source\S*\s+->\s+stream/consumer\b}, 'direct calls are read (a source calls consumer.c)');
like($out, qr{^pipeline/batch\s+->\s+pipeline/source_local\s+.*\*->fetch=}m,
	'calls through a routine\'s function pointers are read (the batch loop fetches through the local source)');
like($out, qr{\bshmem/horizon \d+/[1-9]\d*}m, 'static functions are counted apart (horizon.c has some)');
unlike($out, qr{^pipeline/batch\s+->\s+pipeline/(?:source|sink)_\S+\s+\w}m,
	'the batch loop calls no source or sink directly, only through their routines');

# a planted upward call is found: the checker over a copy of the tree with
# core/util.c calling a function of the api layer
my $tmp = "$root/tmp_check/layers_probe";
system('rm', '-rf', $tmp);
system('mkdir', '-p', $tmp) == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/'") == 0 or die;
open(my $fh, '>>', "$tmp/src/core/util.c") or die;
print $fh "\nvoid SgProbeUp(void);\nvoid\nSgProbeUp(void)\n{\n\tPipelineVisibleToCaller(0);\n}\n";
close $fh;
my $probe = `cd '$tmp' && perl scripts/call-graph.pl 2>&1`;
isnt($? >> 8, 0, 'a planted upward call fails the check');
like($probe, qr{upward call: core/util \(core\) -> api/views \(api\): direct PipelineVisibleToCaller}, '... and is named');
system('rm', '-rf', $tmp);

# no file over 800 lines and no function over 150, but the listed exceptions
# (scripts/size-check.pl); and the check can fail: a planted long function
my $sizes = `cd '$root' && perl scripts/size-check.pl 2>&1`;
is($? >> 8, 0, 'no source file over 800 lines, no function over 150') or diag($sizes);
system('mkdir', '-p', $tmp) == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/'") == 0 or die;
open($fh, '>>', "$tmp/src/core/util.c") or die;
print $fh "\nint SgProbeLong(int x);\nint\nSgProbeLong(int x)\n{\n" . ("\tx++;\n" x 160) . "\treturn x;\n}\n";
close $fh;
$probe = `cd '$tmp' && perl scripts/size-check.pl 2>&1`;
isnt($? >> 8, 0, 'a planted 160-line function fails the size check');
like($probe, qr{size violation: function core/util\.c:SgProbeLong: 16\d lines}, '... and is named');
# an excepted file may not grow: the first file %EXCEPTIONS lists (the
# list only gets shorter), ten lines longer
open($fh, '<', "$root/scripts/size-check.pl") or die;
my ($excepted) = map { m{^\s*'([\w/]+\.c)'\s*=>} ? $1 : () } <$fh>;
close $fh;
SKIP:
{
	skip 'no excepted file left', 1 unless defined $excepted;
	open($fh, '>>', "$tmp/src/$excepted") or die;
	print $fh "\n" x 10;
	close $fh;
	$probe = `cd '$tmp' && perl scripts/size-check.pl 2>&1`;
	like($probe, qr{size violation: file \Q$excepted\E: \d+ lines, grown past its excepted},
		"an excepted file that grows fails the check ($excepted)")
	  or diag($probe);
}
system('rm', '-rf', $tmp);
done_testing();
