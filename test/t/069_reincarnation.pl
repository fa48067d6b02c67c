# DROP EXTENSION + CREATE EXTENSION in quick succession: the new incarnation
# reuses stream and pipeline ids, and must inherit nothing that shared
# memory still holds for the old ones — no armed fault, no crash backoff,
# no stream counters.  Shared-memory slots of the dropped incarnation are
# reclaimed (streams view and appends work, the slot counts return).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

# (the database's share of the stream slots, checked at creation, above the
# slots themselves: the cases below fill the slots)
my $node = sg_node('reinc', extra => "streamguard.max_streams = 4\nstreamguard.launcher_naptime = '500ms'\n"
	  . "streamguard.database_max_streams = 10\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('old_s', 2);
SELECT count(*) FROM streamguard.append_batch('old_s', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 50)));
CREATE TABLE old_sink (seq bigint);
SELECT streamguard.create_pipeline('old_p', 'old_s', 'INSERT INTO old_sink SELECT seq FROM batch');
});
ok(wait_for_value($node, q{SELECT count(*) FROM old_sink}, '50'), 'the first incarnation runs');
# arm a fault the old pipeline never reaches, then pause it
$node->safe_psql('postgres', q{
SELECT streamguard.pause_pipeline('old_p');
SELECT streamguard.inject_fault('old_p', 'mid_batch', 'error', 1000);
});
my $old_id = $node->safe_psql('postgres', q{SELECT id FROM streamguard.pipeline WHERE name = 'old_p'});

# drop, re-create and create the new pipeline in one transaction: the
# maintenance worker never sees the extension absent, nor the pipeline gone
# (either would free the old slots), only the new pipeline with the old id
$node->safe_psql('postgres', q{
BEGIN;
DROP EXTENSION streamguard CASCADE;
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('new_s', 2);
CREATE TABLE new_sink (seq bigint);
SELECT streamguard.create_pipeline('new_p', 'new_s', 'INSERT INTO new_sink SELECT seq FROM batch');
COMMIT;
});
is($node->safe_psql('postgres', q{SELECT id FROM streamguard.pipeline WHERE name = 'new_p'}), $old_id,
	'the new pipeline reuses the old id');
$node->safe_psql('postgres', q{
SELECT count(*) FROM streamguard.append_batch('new_s', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 20)));
});
ok(wait_for_value($node, q{SELECT count(*) FROM new_sink}, '20'), 'the new pipeline delivers');
is($node->safe_psql('postgres', q{SELECT coalesce(last_error, '') || '|' || restarts FROM streamguard.pipelines WHERE pipeline = 'new_p'}),
	'|0', 'without the fault armed for the old pipeline of that id, and without restarts');
is($node->safe_psql('postgres', q{SELECT last_seq FROM streamguard.streams WHERE stream = 'new_s'}), '10',
	'the new stream counts from 1, not from the old stream of that id (20 events over 2 partitions)');

# the old incarnation's stream slots are reclaimed: four more streams fit
# next to new_s in streamguard.max_streams = 4 only if old_s's slot is free
$node->safe_psql('postgres', q{
SELECT streamguard.create_stream(n, 1) FROM (VALUES ('x1'), ('x2'), ('x3')) v(n);
});
my ($ok, $out, $err) = try_psql($node, q{
SELECT count(*) FROM (SELECT streamguard.append(n, '{}') FROM (VALUES ('x1'), ('x2'), ('x3')) v(n)) a});
ok($ok && $out eq '3', 'the dropped incarnation left no stream slot taken') or diag($err);

# DROP DATABASE runs no code of ours: the launcher frees the slots of a
# database that no longer exists.  Shared memory is full (4 streams); a
# second database takes the slot x3 gives up, then is dropped; a new stream
# here gets that slot only if the launcher reclaimed it.
$node->safe_psql('postgres', q{SELECT streamguard.drop_stream('x3')});
$node->safe_psql('postgres', 'CREATE DATABASE other_db');
$node->safe_psql('other_db', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('elsewhere', 1);
SELECT count(*) FROM streamguard.append('elsewhere', '{}');
});
($ok, $out, $err) = try_psql($node, q{SELECT streamguard.create_stream('y', 1);
	SELECT count(*) FROM streamguard.append('y', '{}')});
ok(!$ok && $err =~ /53400|too many active streams/, 'shared memory is full while the other database holds a slot')
  or diag("ok=$ok out=$out err=$err");
$node->safe_psql('postgres', 'DROP DATABASE other_db WITH (FORCE)');
ok(wait_for_value($node, q{SELECT count(*) FROM streamguard.append('y', '{}')}, '1', 30),
	'after DROP DATABASE the launcher reclaimed its slot: a stream here can use it');

$node->stop;
done_testing();
