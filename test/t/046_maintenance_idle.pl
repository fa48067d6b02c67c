# An idle stream costs the maintenance worker no transaction of its own
# (benchmark curves, docs/benchmarks.md: its CPU grew with the number of
# streams, one transaction per stream per round, two with a retention).
# The stream list reads, with each stream, whether its current segment is
# old enough to rotate and whether a dedup key has expired; the rotation
# and dedup steps run only then.
#
#  - with 50 idle streams (retention set, segments young, no expired dedup
#    key), the worker's last step, sampled over many rounds, is never the
#    rotation or the dedup expiry of a stream;
#  - an expired dedup key is still deleted, and a segment old enough and not
#    empty is still rotated.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(usleep);

my $node = sg_node('maintenance_idle');
$node->safe_psql('postgres', q{CREATE EXTENSION streamguard});
$node->safe_psql('postgres', q{SELECT streamguard.create_stream('idle_' || g, 1, retention => '1 hour')
	FROM generate_series(1, 50) AS g});
# one event in each: a filled segment, only too young to rotate
$node->safe_psql('postgres', q{SELECT streamguard.append('idle_' || g, '{}') FROM generate_series(1, 50) AS g});

my $activity = q{SELECT query FROM pg_stat_activity WHERE backend_type = 'streamguard maintenance'};
ok($node->poll_query_until('postgres', "SELECT ($activity) IS NOT NULL AND ($activity) <> ''"),
	'the maintenance worker runs');
my %seen;
for (1 .. 100)
{
	$seen{ $node->safe_psql('postgres', $activity) }++;
	usleep(20_000);
}
note('last steps seen: ' . join(', ', map { "$_ × $seen{$_}" } sort keys %seen));
ok(!$seen{'segment rotation'} && !$seen{'dedup expiry'},
	'idle streams: no rotation or dedup expiry step ran');
ok($seen{'stream list'}, 'the rounds ran (the stream list was the last step)');

# an expired dedup key is deleted
$node->safe_psql('postgres', q{SELECT streamguard.create_stream('dd', 1, dedup_window => '1 second')});
$node->safe_psql('postgres', q{SELECT streamguard.append('dd', '{}', dedup_key => 'k1')});
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM streamguard.append_dedup d
	JOIN streamguard.stream s ON s.id = d.stream_id WHERE s.name = 'dd'}),
	'an expired dedup key is deleted');

# a segment older than segment_interval and not empty is rotated
$node->safe_psql('postgres', q{SELECT streamguard.create_stream('rot', 1, retention => '1 minute', segment_interval => '1 second')});
$node->safe_psql('postgres', q{SELECT streamguard.append('rot', '{}')});
ok($node->poll_query_until('postgres', q{SELECT current_seg > 0 FROM streamguard.stream WHERE name = 'rot'}),
	'an old, filled segment is rotated');

$node->stop;
done_testing();
