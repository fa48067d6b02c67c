
# Remote work that overlaps local work (docs/internals.md, "Remote I/O";
# docs/guarantees.md, "Remote sinks" and "Remote sources"):
#
#  - a remote source reads the next batch ahead: right after a full batch
#    is read, the read of the next one is sent from the positions this
#    batch moves to, and taken by the next batch only if the positions it
#    locks are exactly those;
#  - a remote sink sends its batch's remote transaction in one message
#    and confirms its end (PREPARE TRANSACTION, COMMIT, the offsets
#    statement) only after the batch's local records were written.
#
# 1. Read ahead in flight: the worker is killed (kill -9, a local crash
#    restart) and fails (an ERROR: the batch's transaction aborts and
#    closes the connection) at `read_ahead`, with the next batch's read on
#    its way, each twice while events arrive in large transactions; then
#    a position moved behind the worker's back: held at `read_ahead`, the
#    partition-0 position is moved back by 100 (what a reset to an earlier
#    position does) once the batch committed; the next batches must read
#    from there, so exactly those 100 events arrive a second time (a build
#    that takes the read ahead without comparing positions skips them).
#    After the drain every other event is in the local sink exactly once,
#    and the positions equal the remote partitions' ends.
# 2. Remote end in flight: two_phase, offsets and at_least_once pipelines
#    into a remote server are killed and failed at `remote_end_sent` (the
#    remote's PREPARE / offsets statement / COMMIT sent, not confirmed),
#    twice each.  After the drain: two_phase and offsets hold every event
#    exactly once, at_least_once every event at least once; nothing is
#    left prepared on the remote nor recorded in remote_prepared.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

sub val { my ($n, $sql) = @_; return $n->safe_psql('postgres', $sql); }

my ($remote, $local) = sg_remote_pair(remote_name => 'ov_remote', local_name => 'ov_local',
	local => { extra => "streamguard.remote_timeout='5s'\n" });
my $pw = 'ov-Pw-3141';

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE loader LOGIN PASSWORD '$pw';
GRANT CREATE ON SCHEMA public TO loader;
SELECT streamguard.create_stream('rsrc', 2);
SELECT streamguard.grant_stream('rsrc', 'loader', 'read');
SET ROLE loader;
CREATE TABLE s_2pc (id bigint NOT NULL, seq bigint NOT NULL);
CREATE TABLE s_off (id bigint NOT NULL, seq bigint NOT NULL);
CREATE TABLE s_alo (id bigint NOT NULL, seq bigint NOT NULL);
});
$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
@{[ remote_server_sql('ov', $remote, user => 'loader', password => $pw, app => 'sg_ov') ]}
CREATE TABLE got (partition int, seq bigint, id bigint);
SELECT streamguard.create_stream('lsrc', 2);
});

# ids $from..$to appended on $node's $stream in one transaction, spread
# over the partitions by key
sub append_ids
{
	my ($node, $stream, $from, $to) = @_;
	# an armed kill fault fires on these events: the crash restart may cut
	# the session after its commit (psql_across_crash)
	psql_across_crash($node, qq{SELECT count(*) FROM streamguard.append_batch('$stream',
		ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series($from, $to) g),
		keys => ARRAY(SELECT g::text FROM generate_series($from, $to) g))},
		done => stream_has_sql($stream, "e.key = '$to'"));
}

# ============================================== 1. remote source, read ahead
$local->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('p_src', 'rsrc',
	$$INSERT INTO got SELECT partition, seq, (payload->>'id')::bigint FROM batch$$,
	batch_size => 200, source_server => 'ov');
});
ok(wait_pipelines_running($local, ['p_src'], 60), 'read ahead: the pipeline runs');

my $next = 1;
for my $case ([ 'kill', 2 ], [ 'error', 2 ])
{
	my ($action, $times) = @$case;
	for my $i (1 .. $times)
	{
		my $off = log_offset($local);
		q1($local, "SELECT streamguard.inject_fault('p_src', 'read_ahead', '$action')", 60);
		append_ids($remote, 'rsrc', $next, $next + 1999);
		$next += 2000;
		my $re = $action eq 'kill'
		  ? qr/pipeline "p_src": injected fault, killing the worker/
		  : qr/pipeline "p_src": batch failed \(attempt \d+\): injected fault in pipeline "p_src"/;
		ok(defined wait_log($local, $re, $off, 45), "read ahead: $action $i with the next read in flight");
		ok(defined wait_crash_recovery($local, $off), "read ahead: kill $i: the local server recovered")
		  if $action eq 'kill';
		ok(wait_pipelines_running($local, ['p_src'], 90), "read ahead: $action $i: the pipeline runs again");
		# the failed batch done again before the next fault is armed
		ok(wait_for_value($local, q{SELECT count(DISTINCT id) FROM got}, $next - 1, 90),
			"read ahead: $action $i: the events arrive");
	}
}
ok(wait_for_value($local, q{SELECT count(*) FROM got}, $next - 1, 90), 'read ahead: every event arrives');
is(val($local, q{SELECT count(*) || '/' || count(DISTINCT id) FROM got}), ($next - 1) . '/' . ($next - 1),
	'read ahead: after the kills and errors each event arrived exactly once');

# a position moved while a read ahead is in flight
{
	my $before = $next - 1;
	my $off = log_offset($local);
	q1($local, q{SELECT streamguard.inject_fault('p_src', 'read_ahead', 'hold')}, 60);
	append_ids($remote, 'rsrc', $next, $next + 3999);
	$next += 4000;
	ok(defined wait_log($local, qr/pipeline "p_src": injected fault, holding/, $off, 45),
		'moved position: the worker holds with the next read in flight');
	# waits for the held batch's row lock: runs right after its commit
	my $bg = $local->background_psql('postgres', on_error_stop => 1);
	$bg->query_until(qr/started/, q{
\echo started
UPDATE streamguard.remote_position SET position = position - 100
WHERE pipeline_id = (SELECT id FROM streamguard.pipeline WHERE name = 'p_src') AND partition = 0
RETURNING position;
\echo moved
});
	# (inject_fault reads the pipeline row without locking it, which the
	# held batch keeps: the hold ends at once)
	q1($local, q{SELECT streamguard.inject_fault('p_src', 'none')}, 30);
	$bg->query_until(qr/moved/, '');
	$bg->quit;
	ok(wait_for_value($local, q{SELECT count(DISTINCT id) FROM got}, $next - 1, 90),
		'moved position: every event arrives');
	ok(wait_for_value($local, q{SELECT count(*) FROM got}, $next - 1 + 100, 60),
		'moved position: the 100 events behind the moved position arrived again (the read ahead was not taken)');
	is(val($local, q{SELECT count(*) FROM (SELECT id FROM got GROUP BY id HAVING count(*) > 1) d}), '100',
		'moved position: ... and no other event twice');
	is(val($local, q{SELECT count(*) FROM (SELECT id FROM got GROUP BY id HAVING count(*) > 1) d
		JOIN got g USING (id) WHERE g.partition <> 0}), '0',
		'moved position: ... all of them in partition 0');
}
is(val($local, q{SELECT string_agg(position::text, ',' ORDER BY partition) FROM streamguard.remote_position}),
	val($remote, q{SELECT string_agg(last_seq::text, ',' ORDER BY partition) FROM streamguard.stream_partitions
		WHERE stream = 'rsrc'}),
	'read ahead: the positions end at the remote partitions\' ends');
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_src')});

# ====================================== 2. remote sinks, remote end in flight
my $select = q{SELECT (payload->>'id')::bigint AS id, seq FROM batch};
my %sinks = (p_2pc => [ 'exactly_once', 'two_phase', 's_2pc' ],
	p_off => [ 'exactly_once', 'offsets', 's_off' ],
	p_alo => [ 'at_least_once', 'two_phase', 's_alo' ]);
for my $p (sort keys %sinks)
{
	my ($g, $mode, $t) = @{ $sinks{$p} };
	$local->safe_psql('postgres', qq{SELECT streamguard.create_pipeline('$p', 'lsrc', \$\$$select\$\$,
		guarantee => '$g', batch_size => 300, sink_server => 'ov', sink_table => '$t', sink_mode => '$mode')});
}
ok(wait_pipelines_running($local, [ sort keys %sinks ], 60), 'remote end: the pipelines run');

my $lnext = 1;
for my $p (sort keys %sinks)
{
	for my $action (qw(kill error kill error))
	{
		my $off = log_offset($local);
		q1($local, "SELECT streamguard.inject_fault('$p', 'remote_end_sent', '$action')", 60);
		append_ids($local, 'lsrc', $lnext, $lnext + 999);
		$lnext += 1000;
		my $re = $action eq 'kill'
		  ? qr/pipeline "$p": injected fault, killing the worker/
		  : qr/pipeline "$p": batch failed \(attempt \d+\): injected fault in pipeline "$p"/;
		ok(defined wait_log($local, $re, $off, 45), "remote end: $p: $action with the remote end in flight");
		ok(defined wait_crash_recovery($local, $off), "remote end: $p: the local server recovered")
		  if $action eq 'kill';
		ok(wait_pipelines_running($local, [ sort keys %sinks ], 90), "remote end: $p: the pipelines run again");
		# the failed batch done again before the next fault is armed
		ok(wait_for_value($remote, qq{SELECT count(DISTINCT id) FROM $sinks{$p}[2]}, $lnext - 1, 90),
			"remote end: $p: $action: the events arrive");
	}
}
my $n = $lnext - 1;
for my $p (sort keys %sinks)
{
	my $t = $sinks{$p}[2];
	ok(wait_for_value($remote, qq{SELECT count(DISTINCT id) FROM $t}, $n, 90), "remote end: $p: every event arrives");
	ok(wait_for_value($local, qq{SELECT lag_events FROM streamguard.pipelines WHERE pipeline = '$p'}, '0', 60),
		"remote end: $p: caught up");
}
is(val($remote, q{SELECT count(*) || '/' || count(DISTINCT id) FROM s_2pc}), "$n/$n",
	'remote end: two_phase: every event exactly once');
is(val($remote, q{SELECT count(*) || '/' || count(DISTINCT id) FROM s_off}), "$n/$n",
	'remote end: offsets: every event exactly once');
my ($rows, $distinct) = split /\|/, val($remote, q{SELECT count(*), count(DISTINCT id) FROM s_alo});
is($distinct, $n, 'remote end: at_least_once: every event');
note("at_least_once: " . ($rows - $distinct) . ' duplicates');
ok(wait_for_value($remote, q{SELECT count(*) FROM pg_prepared_xacts}, 0, 30), 'remote end: nothing left prepared');
is(val($local, q{SELECT count(*) FROM streamguard.remote_prepared}), '0', 'remote end: no local record left');
is(val($remote, q{SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) FROM streamguard_sink_offsets}),
	val($local, q{SELECT string_agg(partition || ':' || last_seq, ',' ORDER BY partition) FROM streamguard.stream_partitions
		WHERE stream = 'lsrc'}),
	'remote end: offsets: the sink\'s offsets end at the partitions\' ends');

$local->stop;
$remote->stop;
done_testing();
