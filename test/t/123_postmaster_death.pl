# The postmaster dies (kill -9) while streamguard's workers have work left:
# a pipeline with a backlog of slow batches and the backfill of a captured
# table.  Every worker checks that the postmaster lives at the top of its
# loop (SgExitIfPostmasterDead; test/t/111_security_loops.pl checks that
# each main loop does), so each one exits within a batch or a chunk, and the
# server can start again at once.  Before, a worker that always had work
# never reached the WaitLatch that would have ended it: it ran on as an
# orphan, committing, and the restart failed with "pre-existing shared
# memory block is still in use" until it was done (a 600k-row backfill held
# a restart back for 47 s; this test's backfill is larger, and its pipeline
# has minutes of CPU work left).
# After the restart both go on: the pipeline sinks every event exactly
# once, the backfill completes with the mirror equal to the table.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamguardTest;

my $node = sg_node('pmdeath');
my $EVENTS = 2000;
my $ROWS = 800000;

$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('slow', 1);
CREATE TABLE slow_sink (seq bigint PRIMARY KEY);
-- CPU work for each event (no wait, which would notice the postmaster's
-- death by itself): $EVENTS events are minutes of it
SELECT streamguard.create_pipeline('slow', 'slow',
	\$\$INSERT INTO slow_sink SELECT seq FROM batch,
		LATERAL (SELECT count(*) FROM generate_series(1, 2000000)) c\$\$, batch_size => 1);
SELECT count(*) FROM streamguard.append_batch('slow',
	ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, $EVENTS) g));
CREATE TABLE big (id int PRIMARY KEY, v text);
INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, $ROWS) g;
SELECT streamguard.create_stream('big_changes', 1);
CREATE TABLE big_mirror (id int PRIMARY KEY, v text);
SELECT streamguard.create_pipeline('mirror', 'big_changes', \$\$
	INSERT INTO big_mirror SELECT (payload->'row'->>'id')::int, payload->'row'->>'v' FROM batch
	ON CONFLICT (id) DO UPDATE SET v = excluded.v\$\$, batch_size => 1000);
SELECT streamguard.capture_table('big', 'big_changes');
});

sub worker_pid
{
	my ($type, $name) = @_;
	my $cond = $name ? "AND application_name = 'streamguard pipeline $name'" : '';
	return q1($node, qq{SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE backend_type = '$type' $cond}, 30) // 0;
}

sub wait_pid
{
	my ($what, $name) = @_;
	my $deadline = time + 90;
	my $pid = 0;
	while (!$pid && time < $deadline)
	{
		$pid = worker_pid($what, $name);
		usleep(100_000) unless $pid;
	}
	return $pid;
}

ok(wait_for_value($node, q{SELECT count(*) > 0 FROM slow_sink}, 't', 120), 'the slow pipeline has begun');
my $slow = wait_pid('streamguard pipeline', 'slow');
my $backfill = wait_pid('streamguard backfill');
ok($slow > 0, "the slow pipeline's worker runs ($slow)");
ok($backfill > 0, "the backfill worker runs ($backfill)");
my $left = q1($node, q{SELECT (SELECT count(*) FROM big) - backfill_rows FROM streamguard.captures WHERE tab = 'big'::regclass});
my $sunk = q1($node, q{SELECT count(*) FROM slow_sink});
note("at the kill: $sunk of $EVENTS events sunk, $left rows left to backfill");
cmp_ok($sunk, '<', $EVENTS / 2, 'the pipeline has most of its backlog left');

my ($pm) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
my @children = grep { /^\d+$/ } split /\n/, `pgrep -P $pm 2>/dev/null`;
my $t0 = time;
$node->kill9;
# a worker exits within one batch or chunk; 30 s is generous for that on
# a loaded machine, and far short of the work it had left
my %left = map { $_ => 1 } grep { $_ != $pm } @children;
my $deadline = time + 30;
while (%left && time < $deadline)
{
	delete $left{$_} for grep { !kill(0, $_) } keys %left;
	usleep(50_000) if %left;
}
ok(!kill(0, $slow), 'the pipeline worker with a backlog exited after the postmaster died');
ok(!kill(0, $backfill), 'the backfill worker exited after the postmaster died');
is(join(',', sort keys %left), '', sprintf('every process of the killed server exited (%.0f s)', time - $t0));
# (those that did not would run on: they are this test's, end them)
kill('KILL', keys %left) if %left;

# the server starts again at once, and the work goes on
$node->start;
ok(1, 'the server starts again');
$node->safe_psql('postgres', q{SELECT streamguard.alter_pipeline('slow', sql =>
	$$INSERT INTO slow_sink SELECT seq FROM batch$$, batch_size => 500)});
ok(wait_for_value($node, q{SELECT count(*) FROM slow_sink}, $EVENTS, 180),
	'after the restart the pipeline sinks every event');
is(q1($node, q{SELECT count(*) - count(DISTINCT seq) FROM slow_sink}), '0', '... once each');
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'big'::regclass}, 'done', 600),
	'the backfill completes');
ok(wait_for_value($node, q{SELECT count(*) FROM ((TABLE big EXCEPT TABLE big_mirror)
	UNION ALL (TABLE big_mirror EXCEPT TABLE big)) d}, '0', 180), 'the mirror equals the table');

$node->stop;
done_testing();
