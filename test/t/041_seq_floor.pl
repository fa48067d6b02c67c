# Seqs are never reused, even when retention has dropped every event of a
# partition and the server restarts with no consumer positioned there: the
# counters are then loaded from the floor retention recorded when it dropped
# the segment (stream_partition.seq_floor), not from the (empty) retained
# segments.  A build that ignores the floor hands out seq 1 again.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('seqfloor');
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('fl', 1, retention => '1 second', segment_interval => '1 second');
SELECT count(*) FROM streamguard.append_batch('fl', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10)));
});
# rotation seals the segment holding 1..10, retention drops it
ok(wait_for_value($node, q{SELECT min_seg > 0 FROM streamguard.stream WHERE name = 'fl'}, 't', 60),
	'retention dropped the segment holding seqs 1..10');
is($node->safe_psql('postgres', q{SELECT retained_events FROM streamguard.streams WHERE stream = 'fl'}), '0',
	'no event is retained');
is($node->safe_psql('postgres', q{SELECT seq_floor FROM streamguard.stream_partition sp
	JOIN streamguard.stream s ON s.id = sp.stream_id WHERE s.name = 'fl'}), '10', 'the floor is 10');

$node->restart;
is($node->safe_psql('postgres', q{SELECT seq FROM streamguard.append('fl', '{}')}), '11',
	'after a restart the next seq is 11: seqs 1..10 are never handed out again');

$node->stop;
done_testing();
