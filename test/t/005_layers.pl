# The structure of src/, checked (docs/internals.md, "Calls between files"
# and "Sizes"), each check proven able to fail on a planted violation:
#   - scripts/call-graph.pl: the C files call each other only down the
#     layers (core < io < shmem < catalog < stream < capture < pipeline <
#     workers < api < src/streamguard.c), directly or through a function
#     pointer, except through the hooks the script lists with their
#     reasons, and no cycle among the files;
#   - scripts/private-check.pl: a struct in shared memory is declared by the
#     module that owns it, and a private header (*_int.h) is included only
#     in its folder;
#   - scripts/compat-check.pl: a file using a shim of core/compat.h includes
#     it (else it builds on some PostgreSQL majors only);
#   - scripts/internals-check.pl: docs/internals.md has a row for every C
#     file and names no file that is gone;
#   - scripts/size-check.pl: no file over 800 lines, no function over 150,
#     but the listed exceptions, which may not grow.
# A failure lists what breaks the rule.

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

# shared-memory structs stay with their module (scripts/private-check.pl):
# declared in its .c files or its folder's private header, which no other
# folder includes; and the check can fail, on both counts
my $priv = `cd '$root' && perl scripts/private-check.pl 2>&1`;
is($? >> 8, 0, 'every shared struct is declared by its module; private headers stay in their folder') or diag($priv);
like($priv, qr/^[1-9]\d* shared structs/m, '... and the check found the shared structs');
system('mkdir', '-p', $tmp) == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/'") == 0 or die;
open($fh, '>>', "$tmp/src/core/util.c") or die;
print $fh qq{\n#include "shmem/horizon_int.h"\n};
close $fh;
open($fh, '>>', "$tmp/src/stream/group.c") or die;
print $fh "\nstatic void sg_probe_locked(void);\nstatic void\nsg_probe_locked(void)\n{\n\treturn;\n}\n";
close $fh;
open($fh, '>>', "$tmp/src/stream/group.h") or die;
print $fh "\ntypedef struct SgGroupShared\n{\n\tint\t\tprobe;\n} SgGroupShared;\n";
close $fh;
$probe = `cd '$tmp' && perl scripts/private-check.pl 2>&1`;
isnt($? >> 8, 0, 'a planted violation fails the private-state check');
like($probe, qr{src/core/util\.c includes shmem/horizon_int\.h, private to src/shmem/}, '... a private header included from another folder is named');
like($probe, qr{shared struct SgGroupShared \(of sg_groups\) is declared in src/stream/group\.h}, '... a shared struct in a public header is named')
  or diag($probe);
like($probe, qr{sg_probe_locked expects a lock held and does not assert it}, '... a *_locked helper without its assertion is named');
system('rm', '-rf', $tmp);

# a file that uses a shim of core/compat.h includes it (scripts/compat-check.pl),
# or it builds on some majors only; a planted file without the include fails
my $cc = `cd '$root' && perl scripts/compat-check.pl 2>&1`;
is($? >> 8, 0, 'every file that uses a name of core/compat.h includes it') or diag($cc);
system('rm', '-rf', $tmp);
system('mkdir', '-p', $tmp) == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/'") == 0 or die;
open($fh, '>', "$tmp/src/core/probe_compat.c") or die;
print $fh qq{#include "postgres.h"\nint SgProbeCompat(void);\nint\nSgProbeCompat(void)\n{\n\treturn SG_MY_PROC_INDEX;\n}\n};
close $fh;
$probe = `cd '$tmp' && perl scripts/compat-check.pl 2>&1`;
like($probe, qr{src/core/probe_compat\.c uses SG_MY_PROC_INDEX from core/compat\.h and does not include it},
	'a file using a compat.h shim without including it fails the check');
system('rm', '-rf', $tmp);

# docs/internals.md has a row for every C file and names none that is gone
# (scripts/internals-check.pl); a new file without its row fails
my $ic = `cd '$root' && perl scripts/internals-check.pl 2>&1`;
is($? >> 8, 0, 'docs/internals.md has a row for every C file of src/, and names no file that is gone') or diag($ic);
system('mkdir', '-p', "$tmp/docs") == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/' && cp '$root/docs/internals.md' '$tmp/docs/'") == 0 or die;
system("cp '$tmp/src/core/util.c' '$tmp/src/core/util_probe.c'") == 0 or die;
$probe = `cd '$tmp' && perl scripts/internals-check.pl 2>&1`;
like($probe, qr{no row for core/util_probe\.c}, 'a C file without its row in docs/internals.md fails the check');
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
# an excepted file may not grow, and an exception that no longer applies
# fails too: a planted 900-line file, excepted at 900 lines in the copy
system('rm', '-rf', $tmp);
system('mkdir', '-p', $tmp) == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/'") == 0 or die;
my $big = "int SgProbeBig(void);\nint\nSgProbeBig(void)\n{\n\treturn 0;\n}\n" . ("\n" x 894);
open($fh, '>', "$tmp/src/core/probe_big.c") or die;
print $fh $big;
close $fh;
{
	open(my $in, '<', "$tmp/scripts/size-check.pl") or die;
	my $script = do { local $/; <$in> };
	close $in;
	$script =~ s/^my %EXCEPTIONS = \(\n/my %EXCEPTIONS = (\n\t'core\/probe_big.c' => '900: a probe',\n/m or die 'no %EXCEPTIONS';
	open(my $out, '>', "$tmp/scripts/size-check.pl") or die;
	print $out $script;
	close $out;
}
$probe = `cd '$tmp' && perl scripts/size-check.pl 2>&1`;
is($? >> 8, 0, 'a file within its exception passes') or diag($probe);
open($fh, '>>', "$tmp/src/core/probe_big.c") or die;
print $fh "\n" x 10;
close $fh;
$probe = `cd '$tmp' && perl scripts/size-check.pl 2>&1`;
like($probe, qr{size violation: file core/probe_big\.c: 910 lines, grown past its excepted},
	'an excepted file that grows fails the check') or diag($probe);
open($fh, '>', "$tmp/src/core/probe_big.c") or die;
print $fh "int SgProbeBig(void);\n";
close $fh;
$probe = `cd '$tmp' && perl scripts/size-check.pl 2>&1`;
like($probe, qr{exception core/probe_big\.c no longer applies}, 'an exception that no longer applies fails the check')
  or diag($probe);
system('rm', '-rf', $tmp);

# the extension's scripts leave the caller's settings alone
# (scripts/script-settings-check.pl): no top-level SET, no
# set_config(..., false); a planted one of each fails
my $ss = `cd '$root' && perl scripts/script-settings-check.pl 2>&1`;
is($? >> 8, 0, 'no setting of an extension script outlives it in the caller\'s session') or diag($ss);
like($ss, qr/^[1-9]\d* files, [1-9]\d* top-level statements/m, '... and the check read the scripts');
system('mkdir', '-p', "$tmp/src") == 0 or die;
system("cp -r '$root/src/sql' '$tmp/src/' && cp -r '$root/scripts' '$tmp/'") == 0 or die;
open($fh, '>>', "$tmp/src/sql/views.sql") or die;
print $fh "\n-- a comment; SET search_path = nowhere;\nSET search_path = public;\n"
  . "DO \$p\$ BEGIN PERFORM pg_catalog.set_config('lock_timeout', '1s', false); END \$p\$;\n"
  . "CREATE FUNCTION streamguard.probe() RETURNS int LANGUAGE sql\nSET search_path = pg_catalog, pg_temp\nAS 'SELECT 1';\n";
close $fh;
$probe = `cd '$tmp' && perl scripts/script-settings-check.pl 2>&1`;
isnt($? >> 8, 0, 'a planted top-level SET fails the check');
like($probe, qr{src/sql/views\.sql:\d+: a top-level SET outlives the script}, '... and is named') or diag($probe);
like($probe, qr{src/sql/views\.sql:\d+: set_config\(\.\.\., false\) outlives}, '... so is set_config(..., false) in a DO block');
like($probe, qr/^2 setting\(s\)|, 2 setting\(s\)/m, '... and a function\'s SET clause and a comment are not counted') or diag($probe);
system('rm', '-rf', $tmp);

# every SQL-callable function is a writer that refuses read-only
# transactions up front, or a listed reader (scripts/writable-check.pl);
# a new function in neither class fails
my $wc = `cd '$root' && perl scripts/writable-check.pl 2>&1`;
is($? >> 8, 0, 'every SQL-callable function writes through SgCheckWritable or is a listed reader') or diag($wc);
like($wc, qr/^[1-9]\d* SQL-callable functions: [1-9]\d* writers/m, '... and the check found them');
system('mkdir', '-p', $tmp) == 0 or die;
system("cp -r '$root/src' '$root/scripts' '$tmp/'") == 0 or die;
open($fh, '>>', "$tmp/src/core/util.c") or die;
print $fh "\nPG_FUNCTION_INFO_V1(sg_probe_writer);\nDatum sg_probe_writer(PG_FUNCTION_ARGS);\nDatum\nsg_probe_writer(PG_FUNCTION_ARGS)\n{\n\tPG_RETURN_VOID();\n}\n";
close $fh;
$probe = `cd '$tmp' && perl scripts/writable-check.pl 2>&1`;
like($probe, qr{src/core/util\.c: sg_probe_writer neither calls SgCheckWritable}, 'a planted unclassified function fails the check')
  or diag($probe);
system('rm', '-rf', $tmp);
done_testing();
