# The workers report their table statistics while they run (SgWorkerLoopTop):
# what a pipeline writes into its sink and its checkpoint log shows in
# pg_stat_user_tables, so autovacuum vacuums and analyzes those tables.
# Before, a background worker's writes were reported only when it exited:
# a sink or streamguard.pipeline_batch written only by a long-lived worker
# looked untouched, and autovacuum never came (a 15-minute soak saw the
# checkpoint log grow 4.6 times at a constant row count).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('wstats', extra => "autovacuum_naptime = '1s'\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('s', 2);
CREATE TABLE sink (seq bigint, n int);
ALTER TABLE sink SET (autovacuum_vacuum_insert_threshold = 50, autovacuum_vacuum_insert_scale_factor = 0,
	autovacuum_analyze_threshold = 50, autovacuum_analyze_scale_factor = 0);
CREATE TABLE agg (k int PRIMARY KEY, n bigint);
SELECT streamguard.create_pipeline('p', 's', $$
	WITH i AS (INSERT INTO sink SELECT seq, 1 FROM batch)
	INSERT INTO agg SELECT 1, count(*) FROM batch
	ON CONFLICT (k) DO UPDATE SET n = agg.n + excluded.n$$, batch_size => 10);
});
ok(wait_pipelines_running($node, ['p'], 60), 'the pipeline runs');
my $pid = q1($node, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p'});
$node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.append_batch('s',
	ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 600) g))});
ok(wait_for_value($node, q{SELECT count(*) FROM sink}, '600', 120), 'the pipeline wrote the 600 rows');

# statistics are flushed at most about once a second, and read from a
# snapshot per transaction: a new psql per try (wait_for_value)
ok(wait_for_value($node, q{SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = 'sink'::regclass}, '600', 60),
	'the sink\'s inserts are in pg_stat_user_tables while the worker runs');
ok(wait_for_value($node, q{SELECT n_tup_upd + n_tup_hot_upd > 0 FROM pg_stat_user_tables WHERE relid = 'agg'::regclass}, 't', 60),
	'... and the upserts of the aggregate');
ok(wait_for_value($node, q{SELECT n_tup_ins > 0 FROM pg_stat_all_tables WHERE relid = 'streamguard.pipeline_batch'::regclass}, 't', 60),
	'... and the checkpoint log\'s rows');
ok(wait_for_value($node, q{SELECT autoanalyze_count > 0 OR analyze_count > 0 FROM pg_stat_user_tables WHERE relid = 'sink'::regclass}, 't', 120),
	'autovacuum analyzes the sink');
ok(wait_for_value($node, q{SELECT autovacuum_count > 0 FROM pg_stat_user_tables WHERE relid = 'sink'::regclass}, 't', 120),
	'autovacuum vacuums the sink (its inserts passed the insert threshold)');
is(q1($node, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p'}), $pid,
	'all of it while the same worker runs');

$node->stop;
done_testing();
