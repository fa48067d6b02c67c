# The checkpoint log (streamguard.pipeline_batches) is durable and bounded:
#   - one row per committed batch, written in the batch's own transaction:
#     a batch killed before its commit leaves no row, so the rows_out of
#     the log add up to exactly the sink's rows (exactly_once);
#   - it survives a crash and a restart (what the pipeline did before the
#     crash has an answer), with batch ids that keep increasing;
#   - the maintenance worker keeps the last streamguard.batch_history
#     batches per pipeline.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('ckpt', extra => "streamguard.batch_history = 1000\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('ck', 2);
CREATE TABLE ck_sink (seq bigint);
SELECT streamguard.create_pipeline('ck_pipe', 'ck', 'INSERT INTO ck_sink SELECT seq FROM batch', batch_size => 10);
});
ok(wait_pipelines_running($node, ['ck_pipe']), 'the pipeline runs');

sub append_n
{
	my ($n) = @_;
	# (an armed kill fault fires on these events: the crash may cut the
	# session after its commit; see psql_across_crash)
	my $tag = "a$n-" . int(rand(1e9));
	psql_across_crash($node, qq{SELECT count(*) FROM streamguard.append_batch('ck',
		ARRAY(SELECT jsonb_build_object('tag', '$tag') FROM generate_series(1, $n)))},
		done => stream_has_sql('ck', "e.payload->>'tag' = '$tag'"));
}

append_n(50);
ok(wait_for_value($node, q{SELECT count(*) FROM ck_sink}, '50'), '50 events delivered');
is($node->safe_psql('postgres', q{SELECT sum(rows_out) FROM streamguard.pipeline_batches WHERE pipeline = 'ck_pipe'}),
	'50', 'the log accounts for every row');
is($node->safe_psql('postgres', q{SELECT count(*) = max(batch_id) AND min(batch_id) = 1
	FROM streamguard.pipeline_batches WHERE pipeline = 'ck_pipe'}), 't', 'batch ids 1..n, no gap');

# a batch killed before its commit leaves no row
$node->safe_psql('postgres', q{SELECT streamguard.inject_fault('ck_pipe', 'before_commit', 'kill')});
my $off = log_offset($node);
append_n(30);
ok(defined wait_crash_recovery($node, $off), 'the worker killed itself before a commit; the server recovered');
ok(wait_for_value($node, q{SELECT count(*) FROM ck_sink}, '80', 90), 'all 80 events delivered after recovery');
is($node->safe_psql('postgres', q{SELECT sum(rows_out) FROM streamguard.pipeline_batches WHERE pipeline = 'ck_pipe'}),
	'80', 'the log still adds up to the sink: the killed batch left no row');
my $before = $node->safe_psql('postgres', q{SELECT max(batch_id) FROM streamguard.pipeline_batches});

# survives a clean restart too
$node->restart;
is($node->safe_psql('postgres', q{SELECT max(batch_id) FROM streamguard.pipeline_batches}), $before,
	'the log survives a restart');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE commit_ms IS NULL) > 0 FROM streamguard.pipeline_batches}),
	't', 'commit durations of batches before the restart are unknown (NULL)');
append_n(20);
ok(wait_for_value($node, q{SELECT count(*) FROM ck_sink}, '100', 90), '100 events delivered');
is($node->safe_psql('postgres', qq{SELECT min(batch_id) > $before AND bool_and(commit_ms IS NOT NULL)
	FROM streamguard.pipeline_batches WHERE committed_at > (SELECT pg_postmaster_start_time())}), 't',
	'new batches continue the ids and carry their commit duration');

# bounded by streamguard.batch_history
$node->append_conf('postgresql.conf', "streamguard.batch_history = 5\n");
$node->reload;
ok(wait_for_value($node, q{SELECT count(*) FROM streamguard.pipeline_batches WHERE pipeline = 'ck_pipe'}, '5', 30),
	'after lowering streamguard.batch_history to 5, the log keeps 5 batches');
is($node->safe_psql('postgres', q{SELECT max(batch_id) - min(batch_id) FROM streamguard.pipeline_batches}), '4',
	'... the 5 latest');

# every maintenance step ran: none was postponed by an error
my $log = slurp_file($node->logfile);
my @postponed = $log =~ /^.*streamguard maintenance: .* postponed: .*$/mg;
is_deeply(\@postponed, [], 'no maintenance step failed during the test');

$node->stop;
done_testing();
