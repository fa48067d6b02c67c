
# Making the WAL durable up to "now" (HorizonMakeDurable: before a remote
# COMMIT, PREPARE or COMMIT PREPARED, and before read() returns events) when
# the WAL insert position is at the start of an empty page.  Right after a
# WAL switch nothing has been written to the new segment, and the insert
# position points past its page header: flushing up to it failed with
# "xlog flush request ... is not satisfied" (found by the remote benchmark,
# where an at_most_once pipeline hit it at a page boundary).  Here every
# read() follows a pg_switch_wal() in the same session.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('walflush');
$node->safe_psql('postgres', q{CREATE EXTENSION streamguard; SELECT streamguard.create_stream('w', 1);});

my $failed = 0;
for my $i (1 .. 10)
{
	my ($ok, $out, $err) = try_psql($node, qq{
SELECT count(*) FROM streamguard.append('w', '{"i": $i}');
SELECT pg_switch_wal() IS NOT NULL;
SELECT count(*) FROM streamguard.read('w', 0, 0, 100);});
	if (!$ok)
	{
		$failed++;
		diag($err) if $failed == 1;
	}
}
is($failed, 0, 'read() right after a WAL switch makes the WAL durable without failing');
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.read('w', 0, 0, 100)}), '10',
	'... and returns every event');

$node->stop;
done_testing();
