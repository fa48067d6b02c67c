
# Fencing in the zombie window (invariant 7: a worker that lost ownership of
# its pipeline never commits a batch).
#
# A control call asks the running worker to step aside (a flag in the
# pipeline's shared-memory slot) and the worker checks that flag at the
# start of each batch, before its fence; so the only way to reach the fence
# itself as a zombie is to pass the flag check, then have the control call
# commit, then take the fence.  The fault action "hold" keeps the worker in
# that window (fault point before_fence) or between the two commits of the
# weaker guarantees (between_commits) until the test disarms it, so each
# case below is deterministic:
#  (a) pause, exactly_once, held before the fence: nothing of the batch
#      commits (sink, positions, batches unchanged); after resume every
#      event once;
#  (b) pause, at_least_once, held between T1 and T2: T2 is fenced, the
#      positions stay, the batch is repeated after resume (one duplicate);
#      with dedup => true the repeat is filtered by the keys T1 recorded;
#  (c) pause, at_most_once, held between T1 and T2: T2 is fenced, the batch
#      is lost, later events flow after resume;
#  (d) reset_pipeline while held: exactly the replay, no batch by the zombie;
#  (e) alter_pipeline while held: the held event is processed by the new SQL
#      only;
#  (f) drop_pipeline while held: the zombie writes nothing;
#  (g) a second worker (the maintenance worker is terminated and its
#      successor starts a new worker, which bumps the epoch): the new worker
#      processes the event once and the held zombie exits when released.
# Every wait is bounded.  test/mutation/mutants.pl lists the source mutants
# this file must catch (a fence that always passes, among others).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time);

my $t_start = time;
my $node = sg_node('zombie');
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');

sub val
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

my $next_id = 0;

sub append_ids
{
	my ($stream, $n) = @_;
	my @ids = map { ++$next_id } 1 .. $n;
	val(join('', map { "SELECT streamguard.append('$stream', '{\"id\": $_}');\n" } @ids));
	return @ids;
}

# what a pipeline has done, and its sink table's ids
sub position { val("SELECT coalesce(sum(position), -1) FROM streamguard.consumer WHERE name = 'pipeline:$_[0]'") }
sub counters { val("SELECT batches || '/' || events_in || '/' || epoch FROM streamguard.pipelines WHERE pipeline = '$_[0]'") }
sub worker_pid { val("SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = '$_[0]'") }
sub sink { val("SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM $_[0]") }

sub caught_up
{
	my ($p, $name) = @_;
	ok(wait_for_value($node, "SELECT lag_events FROM streamguard.pipelines WHERE pipeline = '$p'", '0', 30), $name);
}

sub wait_gone
{
	my ($pid, $what) = @_;
	ok(wait_for_value($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0', 30),
		"$what: the held worker exited once released");
}

# a running pipeline $p (stream $s, sink table $t) with $n events processed
sub setup
{
	my ($p, $guarantee, $sql, $n) = @_;
	val(qq{SELECT streamguard.create_stream('s_$p', 1);
CREATE TABLE t_$p (id int, tag text);
SELECT streamguard.create_pipeline('$p', 's_$p', \$\$$sql\$\$, guarantee => '$guarantee');});
	ok(wait_pipelines_running($node, [$p], 30), "$p running");
	my @ids = append_ids("s_$p", $n);
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", $n, 30), "$p processed its first $n events");
	caught_up($p, "$p caught up");
}

# arm a hold at $point, append one event, wait until the worker is held there
sub hold
{
	my ($p, $point) = @_;
	my $off = log_offset($node);
	val("SELECT streamguard.inject_fault('$p', '$point', 'hold')");
	my ($id) = append_ids("s_$p", 1);
	ok(defined wait_log($node, qr/pipeline "$p": injected fault, holding/, $off, 30),
		"$p: worker held at $point");
	return $id;
}

sub release
{
	my ($p) = @_;
	val("SELECT streamguard.inject_fault('$p', 'none')");
}

sub timed
{
	my ($sql) = @_;
	my ($secs, $ok, $err) = timed_psql($node, $sql, timeout => 30);
	return ($ok, $secs, $err);
}

my $ins = q{INSERT INTO t_%s (id) SELECT (payload->>'id')::int FROM batch};

# a running pipeline $p ($guarantee, SQL $sql, default $ins) that processed
# $n events (2), then its worker held at $point with one more event.
# Returns (sink before, position before, the worker's pid, the held id).
sub held_case
{
	my ($p, $guarantee, $point, $n, $sql) = @_;
	setup($p, $guarantee, $sql // sprintf($ins, $p), $n // 2);
	my ($sink0, $pos0, $pid) = (sink("t_$p"), position($p), worker_pid($p));
	return ($sink0, $pos0, $pid, hold($p, $point));
}

# ------------------------------------------------------------------ (a)
{
	my $p = 'zpause';
	my ($sink0, $pos0, $pid, $held) = held_case($p, 'exactly_once', 'before_fence');
	my ($ok, $secs, $err) = timed("SELECT streamguard.pause_pipeline('$p')");
	ok($ok && $secs < 5, "(a) pause commits at once while the worker is held before its fence ("
		  . sprintf('%.2f s', $secs) . ")") or diag($err);
	my $cnt_paused = counters($p);
	release($p);
	wait_gone($pid, '(a)');
	is(sink("t_$p"), $sink0, '(a) nothing of the zombie batch reached the sink');
	is(position($p), $pos0, '(a) positions unchanged');
	is(counters($p), $cnt_paused, '(a) batches and events_in unchanged');
	my ($later) = append_ids("s_$p", 1);
	val("SELECT streamguard.resume_pipeline('$p')");
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", '4', 30), '(a) resumed pipeline processes the rest');
	caught_up($p, '(a) caught up');
	is(sink("t_$p"), "$sink0,$held,$later", '(a) after resume: every event exactly once');
}

# ------------------------------------------------------------------ (b)
{
	my $p = 'zalo';
	my ($sink0, $pos0, $pid, $held) = held_case($p, 'at_least_once', 'between_commits');
	is(sink("t_$p"), "$sink0,$held", '(b) T1 committed the effects');
	is(position($p), $pos0, '(b) positions not moved by T1');
	my ($ok, $secs, $err) = timed("SELECT streamguard.pause_pipeline('$p')");
	ok($ok && $secs < 5, '(b) pause commits at once between the two commits') or diag($err);
	release($p);
	wait_gone($pid, '(b)');
	is(position($p), $pos0, '(b) T2 of the zombie was fenced: positions unchanged');
	val("SELECT streamguard.resume_pipeline('$p')");
	caught_up($p, '(b) caught up after resume');
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", '4', 30), '(b) the batch was repeated');
	is(sink("t_$p"), "$sink0,$held,$held", '(b) at_least_once: the held batch twice, nothing lost');
	is(position($p), $pos0 + 1, '(b) positions moved past it after the repeat');
}

# ------------------------------------------------------------------ (b2)
# the same with pipeline dedup: the keys recorded by T1 filter the repeat
{
	my $p = 'zalodd';
	val(qq{SELECT streamguard.create_stream('s_$p', 1);
CREATE TABLE t_$p (id int, tag text);
SELECT streamguard.create_pipeline('$p', 's_$p', \$\$INSERT INTO t_$p (id) SELECT (payload->>'id')::int FROM batch\$\$,
	guarantee => 'at_least_once', dedup => true);});
	ok(wait_pipelines_running($node, [$p], 30), "$p running");
	my $pid = worker_pid($p);
	my $off = log_offset($node);
	val("SELECT streamguard.inject_fault('$p', 'between_commits', 'hold')");
	my $held = ++$next_id;
	val(qq{SELECT streamguard.append('s_$p', '{"id": $held}', dedup_key => 'k$held')});
	ok(defined wait_log($node, qr/pipeline "$p": injected fault, holding/, $off, 30),
		"$p: worker held at between_commits");
	val("SELECT streamguard.pause_pipeline('$p')");
	release($p);
	wait_gone($pid, '(b2)');
	is(position($p), '0', '(b2) T2 fenced: positions unchanged');
	val("SELECT streamguard.resume_pipeline('$p')");
	caught_up($p, '(b2) the repeat ran after resume');
	my $later = ++$next_id;
	val(qq{SELECT streamguard.append('s_$p', '{"id": $later}', dedup_key => 'k$later')});
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p WHERE id = $later", '1', 30), '(b2) later events flow');
	is(sink("t_$p"), "$held,$later", '(b2) dedup => true: the repeated event filtered by its dedup key');
}

# ------------------------------------------------------------------ (c)
{
	my $p = 'zamo';
	my ($sink0, $pos0, $pid, $held) = held_case($p, 'at_most_once', 'between_commits');
	is(position($p), $pos0 + 1, '(c) T1 committed the positions');
	my ($ok, $secs, $err) = timed("SELECT streamguard.pause_pipeline('$p')");
	ok($ok && $secs < 5, '(c) pause commits at once between the two commits') or diag($err);
	release($p);
	wait_gone($pid, '(c)');
	is(sink("t_$p"), $sink0, '(c) T2 of the zombie was fenced: the held batch is lost');
	my ($later) = append_ids("s_$p", 1);
	val("SELECT streamguard.resume_pipeline('$p')");
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", '3', 30), '(c) later events flow after resume');
	is(sink("t_$p"), "$sink0,$later", '(c) at_most_once: lost, never run late');
}

# ------------------------------------------------------------------ (d)
{
	my $p = 'zreset';
	my ($sink0, $pos0, $pid, $held) = held_case($p, 'exactly_once', 'before_fence', 3);
	my ($e1, $e2, $e3) = split(/,/, $sink0);
	my $epoch_held = val("SELECT epoch FROM streamguard.pipelines WHERE pipeline = '$p'");
	my ($ok, $secs, $err) = timed("SELECT streamguard.reset_pipeline('$p', seq => 2)");
	ok($ok && $secs < 5, '(d) reset commits at once while the worker is held') or diag($err);
	release($p);
	wait_gone($pid, '(d)');
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", '6', 30), '(d) the replay ran');
	caught_up($p, '(d) caught up');
	is(sink("t_$p"), join(',', sort { $a <=> $b } ($e1, $e2, $e2, $e3, $e3, $held)),
		'(d) exactly the replay from seq 2: seqs 2..4 once more, 1 not');
	is(val("SELECT count(*) FROM streamguard.pipeline_batches WHERE pipeline = '$p' AND epoch = $epoch_held AND last_seq > 3"),
		'0', '(d) no batch committed by the zombie');
}

# ------------------------------------------------------------------ (e)
{
	my $p = 'zalter';
	my (undef, undef, $pid, $held) = held_case($p, 'exactly_once', 'before_fence', 2,
		q{INSERT INTO t_zalter SELECT (payload->>'id')::int, 'v1' FROM batch});
	my ($ok, $secs, $err) = timed(
		q{SELECT streamguard.alter_pipeline('zalter', sql => $$INSERT INTO t_zalter SELECT (payload->>'id')::int, 'v2' FROM batch$$)});
	ok($ok && $secs < 5, '(e) alter commits at once while the worker is held') or diag($err);
	release($p);
	wait_gone($pid, '(e)');
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p WHERE id = $held", '1', 30),
		'(e) the held event is processed once');
	is(val("SELECT string_agg(tag, ',') FROM t_$p WHERE id = $held"), 'v2',
		'(e) ... by the altered SQL, not by the zombie with the old one');
	is(val("SELECT count(*) FROM t_$p"), '3', '(e) nothing else');
}

# ------------------------------------------------------------------ (f)
{
	my $p = 'zdrop';
	my ($sink0, undef, $pid) = held_case($p, 'exactly_once', 'before_fence');
	# disarming needs the pipeline, so it comes first in the dropping
	# transaction, after the pipeline row is locked (as the drop locks it):
	# the released worker reaches its fence only after the drop committed
	my ($ok, $secs, $err) = timed("BEGIN; SELECT 1 FROM streamguard.pipeline WHERE name = '$p' FOR UPDATE;
		SELECT streamguard.inject_fault('$p', 'none'); SELECT streamguard.drop_pipeline('$p'); COMMIT;");
	ok($ok && $secs < 5, '(f) drop commits at once while the worker is held') or diag($err);
	wait_gone($pid, '(f)');
	is(sink("t_$p"), $sink0, '(f) the zombie wrote nothing');
	is(val("SELECT count(*) FROM streamguard.consumer WHERE name = 'pipeline:$p'"), '0',
		'(f) no positions left behind');
}

# ------------------------------------------------------------------ (g)
{
	my $p = 'zsecond';
	my ($sink0, undef, $pid, $held) = held_case($p, 'exactly_once', 'before_fence');
	my $epoch_held = val("SELECT epoch FROM streamguard.pipelines WHERE pipeline = '$p'");
	my $maint = val(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'streamguard maintenance' AND datname = 'postgres'});
	ok($maint, '(g) a maintenance worker runs');
	val("SELECT pg_terminate_backend($maint)");
	ok(wait_for_value($node, "SELECT epoch > $epoch_held FROM streamguard.pipelines WHERE pipeline = '$p'", 't', 60),
		'(g) a second worker started and bumped the epoch');
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", '3', 30),
		'(g) the second worker processed the held event');
	isnt(worker_pid($p), $pid, '(g) the slot shows the new worker');
	release($p);
	wait_gone($pid, '(g)');
	my ($later) = append_ids("s_$p", 1);
	ok(wait_for_value($node, "SELECT count(*) FROM t_$p", '4', 30), '(g) later events flow');
	is(sink("t_$p"), "$sink0,$held,$later", '(g) every event exactly once');
	is(val("SELECT count(*) FROM streamguard.pipeline_batches WHERE pipeline = '$p' AND epoch = $epoch_held AND last_seq > 2"),
		'0', '(g) no batch committed by the zombie');
}

is(val("SELECT count(*) FROM streamguard.pipelines WHERE state = 'failed'"), '0', 'no pipeline failed');
note(sprintf('065_pipeline_zombie: %.1f s', time - $t_start));
$node->stop;
done_testing();
