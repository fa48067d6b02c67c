
# Remote PostgreSQL sinks with several workers (docs/guarantees.md, "Remote
# sinks with several workers"): each worker has its own connection, its own
# partitions (p % workers = worker), its own gids and marker row on the
# sink, and settles only its own in-doubt work; worker 0 also settles the
# gids of workers the pipeline no longer has.
#
#  (a) what stays refused: several workers with a Kafka source or sink;
#  (b) two_phase, offsets and at_least_once pipelines with 2 workers drain
#      a 4-partition stream: both workers commit, one marker row per worker,
#      one remote_status row per side;
#  (c) crash matrix: kill -9 (a local crash restart) at after_prepare,
#      after_local_commit, remote_end_sent and mid_batch, an ERROR at
#      before_commit (two_phase); kill -9 at after_remote_commit and
#      remote_end_sent, an ERROR at mid_copy (offsets);
#  (d) a worker dies holding a prepared transaction while the other holds
#      one too: both wait at remote_end_sent (their PREPARE sent), worker 0
#      is terminated, its next incarnation settles its own in-doubt
#      transaction and must leave worker 1's alone (worker 1 then commits
#      it locally: a resolution that settles every gid of the pipeline
#      rolls it back, and the batch is lost);
#  (e) workers 2 -> 1 with both workers holding a prepared transaction:
#      worker 1's is left in doubt, and worker 0 must settle it; then
#      1 -> 2 under load;
#  (f) offsets, workers 2 -> 1 and 1 -> 2 with the remote transactions
#      committed (rows and offsets on the sink) and the local ones not:
#      partitions move to another worker, which must take their positions
#      from the sink;
#  (g) a remote source with 2 workers: each reads, locks and moves only its
#      partitions' positions; kill -9 at read_ahead and mid_batch, an ERROR
#      at before_commit, workers 2 -> 1 -> 2 under load, then 5 workers on
#      4 partitions;
#  (h) offsets with dead letters on the sink: worker 0 and then worker 1
#      fail (injected ERROR) between the remote commit of an isolated batch,
#      which wrote a dead letter to the sink, and the local one; while
#      worker 1 waits out its backoff, worker 0, which has brought its own
#      dead letter here, commits a batch that removes its dead letters from
#      the sink -- only its partitions' rows, or worker 1's dead letter is
#      never recorded here.
# After each step: every event in the remote table exactly once, seqs
# increasing per partition in insertion order, nothing left prepared on the
# remote nor recorded here.  Every wait is bounded.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

sub val { my ($n, $sql) = @_; return $n->safe_psql('postgres', $sql); }

# $secs, or after a failed check a tenth of it (5 s at least): the file only
# has to end (a mutant's run ends sooner)
sub pt
{
	my ($secs) = @_;
	return Test::More->builder->is_passing ? $secs : ($secs / 10 > 5 ? $secs / 10 : 5);
}

my ($remote, $local) = sg_remote_pair(remote_name => 'rw_remote', local_name => 'rw_local',
	remote => { mpx => 30 },
	local => { extra => "streamguard.remote_timeout='5s'\nmax_worker_processes = 24\n" });
my $pw = 'rw-Pw-2718';

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE loader LOGIN PASSWORD '$pw';
SELECT streamguard.create_stream('rsrc', 4);
SELECT streamguard.grant_stream('rsrc', 'loader', 'read');
GRANT CREATE ON SCHEMA public TO loader;
SET ROLE loader;
CREATE TABLE s_2pc (partition int, seq bigint, id bigint, n bigserial);
CREATE TABLE s_off (partition int, seq bigint, id bigint, n bigserial);
CREATE TABLE s_alo (partition int, seq bigint, id bigint, n bigserial);
CREATE TABLE s_dl (partition int, seq bigint, id bigint CHECK (id > 0));
});
$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
@{[ remote_server_sql('rw', $remote, user => 'loader', password => $pw, app => 'sg_rw') ]}
SELECT streamguard.create_stream('src', 4);
});

# ids $$next..$$next+$n-1 appended to $stream on $node in one transaction,
# spread over the partitions; $$next moves past them
sub append_range
{
	my ($node, $stream, $next, $n) = @_;
	my ($from, $to) = ($$next, $$next + $n - 1);
	# an armed kill fault may fire on these events: the crash restart may
	# cut the session after its commit (psql_across_crash)
	psql_across_crash($node, qq{SELECT count(*) FROM streamguard.append_batch('$stream',
		ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series($from, $to) g),
		keys => ARRAY(SELECT g::text FROM generate_series($from, $to) g))},
		done => stream_has_sql($stream, "e.key = '$to'"));
	$$next = $to + 1;
}
my $next = 1;
sub append_ids { append_range($local, 'src', \$next, @_) }

# wait until pipeline $p has $n workers, each with a live process
sub workers_up
{
	my ($p, $n, $secs) = @_;
	return wait_for_value($local, qq{
SELECT count(*) || '/' || (SELECT workers FROM streamguard.pipeline WHERE name = '$p')
FROM streamguard.pipeline_workers w
JOIN pg_stat_activity a ON a.pid = w.worker_pid AND a.backend_type = 'streamguard pipeline'
WHERE w.pipeline = '$p'}, "$n/$n", pt($secs // 90));
}

my %table = (p_2pc => 's_2pc', p_off => 's_off', p_alo => 's_alo');

# every event in $p's table exactly once (at least once for p_alo), in
# order per partition, and the partitions' ends reached
sub check_sink
{
	my ($p, $what) = @_;
	my $t = $table{$p};
	my $n = $next - 1;
	ok(wait_for_value($remote, qq{SELECT count(DISTINCT id) FROM $t}, $n, pt(120)), "$what: $p: every event arrives")
	  or state_diag($local, remote => 1);
	if ($p eq 'p_alo')
	{
		is(val($remote, qq{SELECT count(DISTINCT id) || '/' || min(id) || '/' || max(id) FROM $t}), "$n/1/$n",
			"$what: $p: every event at least once");
		return;
	}
	is(val($remote, qq{SELECT count(*) || '/' || count(DISTINCT id) || '/' || min(id) || '/' || max(id) FROM $t}),
		"$n/$n/1/$n", "$what: $p: every event exactly once")
	  or diag(val($remote, qq{SELECT partition, seq, count(*) FROM $t GROUP BY 1, 2 HAVING count(*) > 1 ORDER BY 1, 2 LIMIT 10}));
	is(val($remote, qq{SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY n) AS prev
		FROM $t) s WHERE prev IS NOT NULL AND seq <> prev + 1}), '0',
		"$what: $p: each partition's seqs in order, none missing, in insertion order");
	is(val($remote, qq{SELECT string_agg(partition || ':' || max, ',' ORDER BY partition)
		FROM (SELECT partition, max(seq) FROM $t GROUP BY partition) s}),
		val($local, q{SELECT string_agg(partition || ':' || last_seq, ',' ORDER BY partition)
		FROM streamguard.stream_partitions WHERE stream = 'src'}),
		"$what: $p: the table reaches every partition's end");
}

sub check_settled
{
	my ($what) = @_;
	ok(wait_for_value($remote, q{SELECT count(*) FROM pg_prepared_xacts}, '0', pt(60)),
		"$what: nothing left prepared on the remote")
	  or diag(val($remote, q{SELECT gid FROM pg_prepared_xacts}));
	ok(wait_for_value($local, q{SELECT count(*) FROM streamguard.remote_prepared}, '0', pt(60)),
		"$what: no prepared transaction recorded here");
	is(val($local, q{SELECT string_agg(pipeline || ':' || state, ',' ORDER BY pipeline) FROM streamguard.pipelines}),
		'p_2pc:running,p_alo:running,p_off:running', "$what: every pipeline runs")
	  or state_diag($local, remote => 1);
}

# ------------------------------------------------------ (a) still refused
$local->safe_psql('postgres', q{CREATE SERVER kafka_x FOREIGN DATA WRAPPER streamguard_kafka
	OPTIONS (bootstrap_servers '127.0.0.1:1')});
expect_error($local, q{SELECT streamguard.create_pipeline('bad', 'src', 'SELECT payload AS value FROM batch',
	sink_server => 'kafka_x', sink_table => 'out', workers => 2)},
	'0A000', qr/a pipeline with a Kafka source or sink runs with one worker/,
	'(a) two workers with a Kafka sink refused');
expect_error($local, q{SELECT streamguard.create_pipeline('bad', 'topic', 'SELECT payload FROM batch',
	source_server => 'kafka_x', workers => 2)},
	'0A000', qr/a pipeline with a Kafka source or sink runs with one worker/,
	'(a) two workers with a Kafka source refused');

# ------------------------------------------------------------ (b) drain
my $select = q{SELECT partition, seq, (payload->>'id')::bigint AS id FROM batch};
my %def = (p_2pc => "sink_mode => 'two_phase'", p_off => "sink_mode => 'offsets'",
	p_alo => "guarantee => 'at_least_once'");
for my $p (sort keys %def)
{
	$local->safe_psql('postgres', qq{SELECT streamguard.create_pipeline('$p', 'src', \$\$$select\$\$,
		batch_size => 200, sink_server => 'rw', sink_table => '$table{$p}', $def{$p}, workers => 2)});
}
for my $p (sort keys %def)
{
	ok(workers_up($p, 2), "(b) $p: two workers up") or state_diag($local, remote => 1);
}
append_ids(4000);
check_sink($_, '(b) drain') for sort keys %def;
is(val($local, q{SELECT count(DISTINCT epoch) FROM streamguard.pipeline_batches WHERE pipeline = 'p_2pc'}), '2',
	'(b) both workers of p_2pc committed batches');
is(val($remote, q{SELECT count(*) || '/' || count(*) FILTER (WHERE pipeline LIKE '%:w1') FROM streamguard_sink_marker}),
	'2/1', '(b) one marker row per worker of the two_phase pipeline');
is(val($local, q{SELECT count(*) FROM streamguard.remote_status WHERE pipeline = 'p_2pc'}), '1',
	'(b) one remote_status row for the sink of a pipeline with two workers');
check_settled('(b)');

# ------------------------------------------------------- (c) crash matrix
for my $case ([ 'p_2pc', 'after_prepare', 'kill' ], [ 'p_2pc', 'after_local_commit', 'kill' ],
	[ 'p_2pc', 'remote_end_sent', 'kill' ], [ 'p_2pc', 'mid_batch', 'kill' ],
	[ 'p_2pc', 'before_commit', 'error' ], [ 'p_off', 'after_remote_commit', 'kill' ],
	[ 'p_off', 'remote_end_sent', 'kill' ], [ 'p_off', 'mid_copy', 'error' ])
{
	my ($p, $point, $action) = @$case;
	my $off = log_offset($local);
	q1($local, "SELECT streamguard.inject_fault('$p', '$point', '$action')", 60);
	append_ids(2000);
	my $re = $action eq 'kill'
	  ? qr/pipeline "$p": injected fault, killing the worker/
	  : qr/pipeline "$p": batch failed \(attempt \d+\): injected fault in pipeline "$p"/;
	ok(defined wait_log($local, $re, $off, pt(60)), "(c) $p: $action at $point");
	ok(defined wait_crash_recovery($local, $off, pt(180)), "(c) $p: $point: the local server recovered")
	  if $action eq 'kill';
	ok(workers_up($p, 2), "(c) $p: $point: both workers run again");
	check_sink($p, "(c) $action at $point");
}
check_sink($_, '(c) after the crash matrix') for sort keys %def;
is(count_log($local, qr/lost the committed batch/), 0, '(c) no batch reported lost');
check_settled('(c)');

# ------------------ (d) worker 0 dies while worker 1 holds a prepared batch
{
	my $off = log_offset($local);
	# twice: worker 0's next incarnation holds again (a worker's slot, and
	# its count, outlive the process)
	q1($local, q{SELECT streamguard.inject_fault('p_2pc', 'remote_end_sent', 'hold', 2)}, 60);
	append_ids(2000);
	ok(defined wait_log($local, qr/(?s:pipeline "p_2pc": injected fault, holding.*){2}/, $off, pt(60)),
		'(d) both workers hold with their PREPARE sent');
	ok(wait_for_value($remote, q{SELECT count(*) FILTER (WHERE gid LIKE '%:w1:%') || '/' || count(*)
		FROM pg_prepared_xacts}, '1/2', pt(30)), '(d) one prepared transaction per worker, worker 1\'s gid names it');
	my $pid0 = val($local, q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'p_2pc' AND worker = 0});
	my $pid1 = val($local, q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'p_2pc' AND worker = 1});
	$off = log_offset($local);
	is(val($local, "SELECT pg_terminate_backend($pid0)"), 't', '(d) worker 0 terminated');
	# its next incarnation settles its own gid first, then holds again
	ok(defined wait_log($local, qr/pipeline "p_2pc": rolling back in-doubt remote transaction/, $off, pt(90)),
		'(d) the new worker 0 rolled back its predecessor\'s prepared transaction');
	ok(defined wait_log($local, qr/pipeline "p_2pc": injected fault, holding/, $off, pt(90)),
		'(d) ... and holds in its own batch');
	is(count_log($local, qr/in-doubt remote transaction '[^']*:w1:/, $off), 0,
		'(d) worker 1\'s prepared transaction was not touched');
	is(val($local, q{SELECT worker_pid FROM streamguard.pipeline_workers WHERE pipeline = 'p_2pc' AND worker = 1}),
		$pid1, '(d) worker 1 was not restarted');
	q1($local, q{SELECT streamguard.inject_fault('p_2pc', 'none')}, 30);
	append_ids(1000);
	check_sink('p_2pc', '(d)');
	is(count_log($local, qr/lost the committed batch/), 0, '(d) no batch reported lost');
	check_settled('(d)');
}

# ----------------------- (e) workers 2 -> 1 with prepared transactions held
{
	my $off = log_offset($local);
	q1($local, q{SELECT streamguard.inject_fault('p_2pc', 'remote_end_sent', 'hold')}, 60);
	append_ids(2000);
	ok(defined wait_log($local, qr/(?s:pipeline "p_2pc": injected fault, holding.*){2}/, $off, pt(60)),
		'(e) both workers hold with their PREPARE sent');
	ok(wait_for_value($remote, q{SELECT count(*) FILTER (WHERE gid LIKE '%:w1:%') FROM pg_prepared_xacts}, '1', pt(30)),
		'(e) worker 1 has a prepared transaction');
	# cancels both held batches: their remote transactions stay prepared
	q1($local, q{SELECT streamguard.alter_pipeline('p_2pc', workers => 1)}, 60);
	q1($local, q{SELECT streamguard.inject_fault('p_2pc', 'none')}, 30);
	ok(workers_up('p_2pc', 1), '(e) one worker runs');
	ok(wait_for_value($remote, q{SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE '%:w1:%'}, '0', pt(60)),
		'(e) worker 0 settled the transaction worker 1 left in doubt')
	  or diag(val($remote, q{SELECT gid FROM pg_prepared_xacts}));
	check_sink('p_2pc', '(e) 2 -> 1');
	# back to two under load
	append_ids(3000);
	q1($local, q{SELECT streamguard.alter_pipeline('p_2pc', workers => 2)}, 60);
	append_ids(3000);
	ok(workers_up('p_2pc', 2), '(e) two workers again');
	check_sink('p_2pc', '(e) 1 -> 2');
	check_settled('(e)');
}

# ------------------- (f) offsets: partitions move with their sink positions
for my $step ([ 2, 1 ], [ 1, 2 ])
{
	my ($from, $to) = @$step;
	my $off = log_offset($local);
	q1($local, q{SELECT streamguard.inject_fault('p_off', 'after_remote_commit', 'hold')}, 60);
	append_ids(2000);
	ok(defined wait_log($local, qr/(?s:pipeline "p_off": injected fault, holding.*){$from}/, $off, pt(60)),
		"(f) $from -> $to: the workers hold with their remote transactions committed");
	q1($local, "SELECT streamguard.alter_pipeline('p_off', workers => $to)", 60);
	q1($local, q{SELECT streamguard.inject_fault('p_off', 'none')}, 30);
	ok(workers_up('p_off', $to), "(f) $from -> $to: $to worker(s) run");
	append_ids(1000);
	check_sink('p_off', "(f) $from -> $to");
}
is(val($remote, q{SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) FROM streamguard_sink_offsets}),
	val($local, q{SELECT string_agg(partition || ':' || last_seq, ',' ORDER BY partition) FROM streamguard.stream_partitions
		WHERE stream = 'src'}),
	'(f) the sink\'s offsets end at the partitions\' ends');
check_sink($_, 'end') for sort keys %def;
check_settled('end');

$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline(p) FROM unnest(ARRAY['p_2pc', 'p_off', 'p_alo']) p});
is(val($remote, q{SELECT count(*) FROM pg_prepared_xacts}), '0', 'dropped: nothing prepared on the remote');

# ------------------------------------------------ (g) remote source, 2 workers
my $rnext = 1;
sub append_remote { append_range($remote, 'rsrc', \$rnext, @_) }

sub check_got
{
	my ($what) = @_;
	my $n = $rnext - 1;
	ok(wait_for_value($local, q{SELECT count(DISTINCT id) FROM got}, $n, pt(120)), "$what: every event arrives")
	  or state_diag($local, remote => 1);
	is(val($local, q{SELECT count(*) || '/' || count(DISTINCT id) || '/' || min(id) || '/' || max(id) FROM got}),
		"$n/$n/1/$n", "$what: every event exactly once");
	is(val($local, q{SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY n) AS prev
		FROM got) s WHERE prev IS NOT NULL AND seq <> prev + 1}), '0',
		"$what: each partition's seqs in order, none missing");
	is(val($local, q{SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) FROM streamguard.remote_position}),
		val($remote, q{SELECT string_agg(partition || ':' || last_seq, ',' ORDER BY partition)
		FROM streamguard.stream_partitions WHERE stream = 'rsrc'}),
		"$what: the positions end at the remote partitions' ends");
}

$local->safe_psql('postgres', q{
CREATE TABLE got (partition int, seq bigint, id bigint, n bigserial);
SELECT streamguard.create_pipeline('p_src', 'rsrc',
	$$INSERT INTO got (partition, seq, id) SELECT partition, seq, (payload->>'id')::bigint FROM batch ORDER BY partition, seq$$,
	batch_size => 200, source_server => 'rw', workers => 2);
});
ok(workers_up('p_src', 2), '(g) two workers read the remote stream');
is(val($local, q{SELECT string_agg(worker || ':' || partitions::text, ' ' ORDER BY worker)
	FROM streamguard.pipeline_workers WHERE pipeline = 'p_src'}),
	'0:{0,2} 1:{1,3}', '(g) pipeline_workers: each worker\'s remote partitions');
append_remote(4000);
check_got('(g) drain');
is(val($local, q{SELECT count(DISTINCT epoch) FROM streamguard.pipeline_batches WHERE pipeline = 'p_src'}), '2',
	'(g) both workers committed batches');
for my $case ([ 'read_ahead', 'kill' ], [ 'mid_batch', 'kill' ], [ 'before_commit', 'error' ])
{
	my ($point, $action) = @$case;
	my $off = log_offset($local);
	q1($local, "SELECT streamguard.inject_fault('p_src', '$point', '$action')", 60);
	append_remote(3000);
	my $re = $action eq 'kill'
	  ? qr/pipeline "p_src": injected fault, killing the worker/
	  : qr/pipeline "p_src": batch failed \(attempt \d+\): injected fault in pipeline "p_src"/;
	ok(defined wait_log($local, $re, $off, pt(60)), "(g) $action at $point");
	ok(defined wait_crash_recovery($local, $off, pt(180)), "(g) $point: the local server recovered")
	  if $action eq 'kill';
	ok(workers_up('p_src', 2), "(g) $point: both workers run again");
	check_got("(g) $action at $point");
}
append_remote(3000);
q1($local, q{SELECT streamguard.alter_pipeline('p_src', workers => 1)}, 60);
append_remote(3000);
ok(workers_up('p_src', 1), '(g) one worker after 2 -> 1');
check_got('(g) 2 -> 1');
append_remote(3000);
q1($local, q{SELECT streamguard.alter_pipeline('p_src', workers => 2)}, 60);
append_remote(3000);
ok(workers_up('p_src', 2), '(g) two workers after 1 -> 2');
check_got('(g) 1 -> 2');
# more workers than partitions: the fifth has nothing to read
my $off5 = log_offset($local);
q1($local, q{SELECT streamguard.alter_pipeline('p_src', workers => 5)}, 60);
append_remote(2000);
ok(workers_up('p_src', 5), '(g) five workers on four partitions');
check_got('(g) 2 -> 5');
is(count_log($local, qr/pipeline "p_src": batch failed/, $off5), 0, '(g) no batch failed');
# ------------------------------- (h) offsets: the sink's dead letters per worker
{
	$local->safe_psql('postgres', q{
SELECT streamguard.create_stream('dls', 4);
SELECT streamguard.create_pipeline('p_dl', 'dls', $$SELECT partition, seq, (payload->>'id')::bigint AS id FROM batch$$,
	batch_size => 100, sink_server => 'rw', sink_table => 's_dl', sink_mode => 'offsets',
	error_policy => 'dead_letter', max_attempts => 1, retry_backoff => '6 s', max_backoff => '6 s', workers => 2);
});
	ok(workers_up('p_dl', 2), '(h) two workers');
	my $fail = qr/pipeline "p_dl": batch failed \(attempt \d+\): injected fault in pipeline "p_dl"/;
	my $off = log_offset($local);
	q1($local, q{SELECT streamguard.inject_fault('p_dl', 'after_remote_commit', 'error')}, 60);
	# worker 0: a rejected event, its dead letter on the sink, the local commit fails
	$local->safe_psql('postgres', q{SELECT streamguard.append('dls', '{"id": 1}', 'a', NULL, 0);
		SELECT streamguard.append('dls', '{"id": -1}', 'b', NULL, 0)});
	ok(defined wait_log($local, $fail, $off, pt(90)), '(h) worker 0 failed after its remote commit');
	ok(wait_for_value($local, q{SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'p_dl'}, '1', pt(60)),
		'(h) worker 0 brought its dead letter from the sink');
	# worker 1: the same, then it waits out its backoff
	$off = log_offset($local);
	$local->safe_psql('postgres', q{SELECT streamguard.append('dls', '{"id": 2}', 'c', NULL, 1);
		SELECT streamguard.append('dls', '{"id": -2}', 'd', NULL, 1)});
	ok(defined wait_log($local, $fail, $off, pt(90)), '(h) worker 1 failed after its remote commit');
	# meanwhile worker 0 commits a batch that clears its dead letters on the sink
	$local->safe_psql('postgres', q{SELECT streamguard.append('dls', '{"id": 3}', 'e', NULL, 0)});
	ok(wait_for_value($remote, q{SELECT count(*) FROM s_dl WHERE id = 3}, '1', pt(30)), '(h) worker 0 committed again');
	ok(wait_for_value($local, q{SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'p_dl'}, '2', pt(60)),
		'(h) worker 1 brought its dead letter from the sink too');
	is(val($local, q{SELECT string_agg(partition || ':' || (payload->>'id'), ',' ORDER BY partition)
		FROM streamguard.dead_letters WHERE pipeline = 'p_dl'}), '0:-1,1:-2', '(h) each rejected event a dead letter once');
	is(val($remote, q{SELECT string_agg(id::text, ',' ORDER BY id) FROM s_dl}), '1,2,3', '(h) the good events once each');
}

$local->stop;
$remote->stop;
done_testing();
