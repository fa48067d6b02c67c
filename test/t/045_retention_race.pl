
# Retention against a concurrent seek (docs/sql-reference.md, seek and the
# consumers view).
#
# A segment is dropped while a consumer's seek, committed meanwhile, had
# moved it past the segment.  The drop waits for the consumer row; once
# the seek commits, the drop must act on the position the seek committed:
# the consumer stays where the seek put it and loses nothing.  Before the
# fix, the drop's UPDATE ... FROM reused the position it had read before
# waiting: it put the consumer back at the end of the dropped segment
# (re-delivering what the seek skipped) and counted the events between
# its old position and that end as lost.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('retention_race');    # maintenance every 200ms

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('race', 1, retention => '1 second', segment_interval => '1 second');
SELECT streamguard.append_batch('race', array_fill('{}'::jsonb, ARRAY[5]));
SELECT streamguard.seek('race', 'c', 0, 1);
});

# the first segment (seqs 1-5) is sealed; later events go to the next one
ok( $node->poll_query_until('postgres',
		q{SELECT segments >= 2 FROM streamguard.streams WHERE stream = 'race'}),
	'the first segment is sealed');
$node->safe_psql('postgres',
	q{SELECT streamguard.append_batch('race', array_fill('{}'::jsonb, ARRAY[5]))});
is($node->safe_psql('postgres',
		q{SELECT first_seq || '-' || last_seq FROM streamguard.streams WHERE stream = 'race'}),
	'1-10', 'the first segment is not dropped yet');

# The seek moves the consumer past the first segment and stays uncommitted
# until the maintenance worker waits for it (its drop of the first segment
# reached the consumer row), then commits at once: the drop's lock_timeout
# is 200ms, and a timed-out drop is retried at the next round.
my $s = $node->background_psql('postgres', on_error_stop => 1);
$s->query_safe(q{BEGIN});
$s->query_safe(q{SELECT streamguard.seek('race', 'c', 0, 9)});
my $waited = $s->query_safe(q{
DO $$
DECLARE
	deadline timestamptz := clock_timestamp() + interval '30 seconds';
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		IF EXISTS (SELECT 1 FROM pg_stat_activity
				   WHERE backend_type = 'streamguard maintenance' AND wait_event_type = 'Lock') THEN
			RETURN;
		END IF;
		PERFORM pg_sleep(0.005);
	END LOOP;
	RAISE EXCEPTION 'the maintenance worker never waited for the consumer row';
END $$;
COMMIT;
SELECT 'committed';
});
like($waited, qr/committed/, 'the seek committed while the drop waited for the consumer row');
$s->quit;

ok( $node->poll_query_until('postgres',
		q{SELECT first_seq > 5 FROM streamguard.streams WHERE stream = 'race'}),
	'the first segment is dropped');
is( $node->safe_psql('postgres',
		q{SELECT committed_seq || ' lost ' || lost_events FROM streamguard.consumers WHERE consumer = 'c'}),
	'8 lost 0', 'the committed seek stands and nothing is counted lost');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM streamguard.poll('race', 'c', 100)}),
	'9,10', 'the consumer resumes where the seek put it');

$node->stop;
done_testing();
