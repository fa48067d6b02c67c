
# Executable documentation: every ```sql block of README.md and docs/*.md
# runs against a real server, and every documented output is compared with
# what psql prints.  Each file runs top to bottom in a fresh database of its
# own.  How to write blocks, outputs and annotations (skip, expect-error,
# wait-for, as role, session, on remote, hidden) is in docs/contributing.md;
# the runner is test/t/lib/DocTest.pm.
#
# A second server (SCRAM over 127.0.0.1, max_prepared_transactions > 0)
# stands in for the docs' example remote server 10.0.0.5:5432; it is started
# only when some block runs "on remote".
#
# SG_DOC_FILES=README.md,docs/faq.md runs only those files.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Basename qw(dirname);
use Cwd qw(abs_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use DocTest;

my $root = abs_path(dirname(dirname($FindBin::RealBin)));
my @files = ("$root/README.md", sort glob("$root/docs/*.md"));
@files = map { "$root/$_" } split /,/, $ENV{SG_DOC_FILES} if $ENV{SG_DOC_FILES};

# the remote node only if a block needs it; no server at all when the files
# (SG_DOC_FILES) hold nothing to run and nothing to report
my ($need_remote, $to_check) = (0, 0);
for my $f (@files)
{
	my ($blocks, $problems) = doc_parse($f);
	$need_remote ||= grep { defined $_->{remote} && !defined $_->{skip} } @$blocks;
	$to_check += @$problems + grep { !defined $_->{skip} } @$blocks;
}
plan skip_all => 'no runnable sql block in the selected files' unless $to_check;

my $node = sg_node('doc', mpx => 10);
my %env = (node => $node, root => $root);
if ($need_remote)
{
	$env{remote} = sg_node('docremote', remote => 1);
	$env{remote_port} = $env{remote}->port;
}

my $failed = 0;
$failed += doc_run_file(\%env, $_) for @files;

if ($failed)
{
	diag("server log of the failing run: " . $node->logfile);
}

$env{remote}->stop if $env{remote};
$node->stop;
done_testing();
