
# Pipeline crash-test matrix (docs/guarantees.md, invariants 1-7), in
# the style of Kafka's transactions_test / the Kafka Streams EOS driver.
#
# One stream `src` with 4 partitions.  Three concurrent producers (forked
# processes, one psql session per transaction, reconnecting after every
# crash) append events {"id": N, "amount": K} keyed by customer 'c' || N % 50,
# with append_batch (and sometimes one append per event), 100-1000 events per
# transaction, ~20 % of the transactions rolled back.  Each producer
# transaction records its ids in `produced` in the SAME transaction, so
# `produced` is exactly the set of committed events; the ids of rolled-back
# transactions are written to a file by the producer.
#
# Four pipelines read src (batch_size 500):
#   p_eo   exactly_once   INSERT INTO sink_eo ... FROM batch (no unique key:
#                         a duplicate would be visible)
#   p_agg  exactly_once   per-customer totals, INSERT ... ON CONFLICT DO UPDATE
#   p_alo  at_least_once  INSERT INTO sink_alo
#   p_amo  at_most_once   INSERT INTO sink_amo
#
# While the producers run, faults are injected one after the other (each
# waited for: the server is back and every pipeline has a live worker before
# the next): inject_fault kills at mid_batch / before_commit / after_commit /
# between_commits, injected errors (some enough to switch a batch to
# per-event isolation), injected clean exits, pause/resume (fencing),
# kill -9 of a pipeline worker, kill -9 of the launcher, and immediate
# shutdown + restart.  Every SIGKILL makes the postmaster restart all
# backends, producers' included.
#
# Then, once every pipeline has drained:
#   - the stream itself holds every committed id exactly once, no aborted id;
#   - exactly_once: sink_eo has every committed id exactly once, no aborted
#     or unknown id, each with its stream position; per partition, seq
#     strictly increases in sink insertion order; the aggregates equal a
#     reference recomputed from `produced`; the pipelines' positions equal
#     each partition's last seq;
#   - at_least_once: nothing lost, and duplicates > 0 (the between_commits
#     kills must show up: the detector must see them);
#   - at_most_once: no duplicate, and loss > 0.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $t_start = time;
# rounds: the fault plan, this many times
my ($seed, $min_events, $rounds) = run_knobs('SG_CRASH', seed => 20240601, min_events => 100_000, rounds => 2);

my $node = sg_node('pipecrash', extra => "max_connections=50\nshared_buffers=128MB\n");
my @pipes = qw(p_eo p_agg p_alo p_amo);

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('src', 4);
} . producer_sql('src', key_prefix => 'c', key_mod => 50, amounts => 1) . q{
-- sinks: no unique constraint on id, so duplicates are visible
CREATE TABLE sink_eo (n bigserial, id bigint NOT NULL, customer text, amount numeric,
	partition int, seq bigint, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE sink_alo (LIKE sink_eo INCLUDING DEFAULTS);
CREATE TABLE sink_amo (LIKE sink_eo INCLUDING DEFAULTS);
CREATE SEQUENCE sink_alo_n;
CREATE SEQUENCE sink_amo_n;
ALTER TABLE sink_alo ALTER n SET DEFAULT nextval('sink_alo_n');
ALTER TABLE sink_amo ALTER n SET DEFAULT nextval('sink_amo_n');
CREATE TABLE agg (customer text PRIMARY KEY, total numeric NOT NULL, events bigint NOT NULL);

SELECT streamguard.create_pipeline('p_eo', 'src',
	$$INSERT INTO sink_eo (id, customer, amount, partition, seq)
	  SELECT (payload->>'id')::bigint, key, (payload->>'amount')::numeric, partition, seq FROM batch$$,
	guarantee => 'exactly_once', batch_size => 500);
SELECT streamguard.create_pipeline('p_agg', 'src',
	$$INSERT INTO agg AS a (customer, total, events)
	  SELECT key, sum((payload->>'amount')::numeric), count(*) FROM batch GROUP BY key
	  ON CONFLICT (customer) DO UPDATE SET total = a.total + excluded.total,
										   events = a.events + excluded.events$$,
	guarantee => 'exactly_once', batch_size => 500);
SELECT streamguard.create_pipeline('p_alo', 'src',
	$$INSERT INTO sink_alo (id, customer, amount, partition, seq)
	  SELECT (payload->>'id')::bigint, key, (payload->>'amount')::numeric, partition, seq FROM batch$$,
	guarantee => 'at_least_once', batch_size => 500);
SELECT streamguard.create_pipeline('p_amo', 'src',
	$$INSERT INTO sink_amo (id, customer, amount, partition, seq)
	  SELECT (payload->>'id')::bigint, key, (payload->>'amount')::numeric, partition, seq FROM batch$$,
	guarantee => 'at_most_once', batch_size => 500);
});

ok(wait_pipelines_running($node, \@pipes, 60), 'all four pipelines have a running worker')
  or BAIL_OUT("pipelines did not start:\n" . pipelines_report($node));

# ------------------------------------------------------------ producers

my $producers = start_producers($node, name => 'pipecrash', count => 3, seed => $seed,
	batch => [ 100, 1000 ], single => [ 20, 200 ], abort => 0.2, pause_us => [ 100_000, 300_000 ]);

# ---------------------------------------------------------------- faults

my $fx = fault_context($node, \@pipes);

# kill -9 of the backend that $pid_sql names
sub kill_backend
{
	my ($fx, $kind, $what, $pid_sql) = @_;
	$fx->{armed}{$kind}++;
	my $pid = q1($node, $pid_sql, 60);
	if (!defined $pid || $pid !~ /^\d+$/)
	{
		diag("$kind: no $what");
		return 0;
	}
	my $off = log_offset($node);
	kill 'KILL', $pid;
	return fault_fired($fx, $kind, $off);
}

sub kill_worker
{
	my ($fx, $kind, $pipe) = @_;
	return kill_backend($fx, $kind, "worker pid for $pipe", qq{
SELECT p.worker_pid FROM streamguard.pipelines p
JOIN pg_stat_activity a ON a.pid = p.worker_pid AND a.backend_type = 'streamguard pipeline'
WHERE p.pipeline = '$pipe'});
}

sub kill_launcher
{
	my ($fx, $kind) = @_;
	return kill_backend($fx, $kind, 'launcher in pg_stat_activity',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'streamguard launcher'");
}

sub immediate_restart
{
	my ($fx, $kind) = @_;
	$fx->{armed}{$kind}++;
	$node->stop('immediate');
	$node->start;
	return fault_fired($fx, $kind);
}

sub pause_resume
{
	my ($fx, $kind, $pipe) = @_;
	$fx->{armed}{$kind}++;
	return -1 unless defined q1($node, "SELECT streamguard.pause_pipeline('$pipe')", 60);
	usleep(int(rand(500_000)));
	return -1 unless defined q1($node, "SELECT streamguard.resume_pipeline('$pipe')", 60);
	return fault_fired($fx, $kind);
}

my @plan = (
	(['eo_before_commit_kill',      \&fault_inject, 'p_eo',  'before_commit',   'kill']) x 3,
	(['eo_mid_batch_kill',          \&fault_inject, 'p_eo',  'mid_batch',       'kill']) x 3,
	(['eo_after_commit_kill',       \&fault_inject, 'p_eo',  'after_commit',    'kill']) x 2,
	(['agg_before_commit_kill',     \&fault_inject, 'p_agg', 'before_commit',   'kill']) x 2,
	(['agg_mid_batch_kill',         \&fault_inject, 'p_agg', 'mid_batch',       'kill']) x 1,
	(['alo_between_commits_kill',   \&fault_inject, 'p_alo', 'between_commits', 'kill']) x 3,
	(['amo_between_commits_kill',   \&fault_inject, 'p_amo', 'between_commits', 'kill']) x 3,
	(['eo_before_commit_error x2',  \&fault_inject, 'p_eo',  'before_commit',   'error', 2]) x 2,
	(['eo_mid_batch_error x3 (isolation)', \&fault_inject, 'p_eo', 'mid_batch', 'error', 3]) x 1,
	(['agg_before_commit_error x3 (isolation)', \&fault_inject, 'p_agg', 'before_commit', 'error', 3]) x 1,
	(['alo_before_commit_error',    \&fault_inject, 'p_alo', 'before_commit',   'error', 1]) x 1,
	(['amo_mid_batch_error',        \&fault_inject, 'p_amo', 'mid_batch',       'error', 1]) x 1,
	(['eo_before_commit_exit',      \&fault_inject, 'p_eo',  'before_commit',   'exit']) x 2,
	(['eo_pause_resume',            \&pause_resume, 'p_eo']) x 2,
	(['agg_pause_resume',           \&pause_resume, 'p_agg']) x 1,
	(['kill9_worker p_eo',          \&kill_worker, 'p_eo']) x 2,
	(['kill9_worker p_agg',         \&kill_worker, 'p_agg']) x 1,
	(['kill9_worker p_alo',         \&kill_worker, 'p_alo']) x 1,
	(['kill9_worker p_amo',         \&kill_worker, 'p_amo']) x 1,
	(['kill9_launcher',             \&kill_launcher]) x 3,
	(['immediate_restart',          \&immediate_restart]) x 3,
);
my ($healthy, $fault_secs) = run_fault_plan($fx, \@plan, rounds => $rounds,
	gap_us => [ 300_000, 1_200_000 ], t_start => $t_start);
ok($healthy, 'server and pipelines recovered after every fault');

# keep producing until enough events committed (bounded)
producers_wait_for($producers, $min_events, timeout => 180);
my $pstats = stop_producers($producers);    # and load the aborted ids

# ------------------------------------------------------------ drain

my $t_drain = time;
my $drained = wait_for_value(
	$node, q{
SELECT (SELECT count(*) FROM streamguard.pipelines
		 WHERE state = 'running' AND coalesce(lag_events, 1) = 0) = 4
   AND (SELECT count(*) FROM sink_eo) >= (SELECT count(*) FROM produced)
   AND (SELECT sum(events) FROM agg) >= (SELECT count(*) FROM produced)},
	't', 240);
ok($drained, 'every pipeline drained (lag 0)') or diag(pipelines_report($node));
is_stable($node, q{SELECT (SELECT count(*) FROM sink_eo) || '/' || (SELECT count(*) FROM sink_alo)
	|| '/' || (SELECT count(*) FROM sink_amo) || '/' || (SELECT sum(events) FROM agg)},
	2, 'sink counts are stable after the drain');
my $drain_secs = time - $t_drain;

# ------------------------------------------------------------ verify

# the stream itself, read back completely by a fresh consumer
copy_stream($node, 'src', columns => 'customer text, amount numeric',
	values => q{key, (payload->>'amount')::numeric});

sub val { my ($sql) = @_; return $node->safe_psql('postgres', $sql); }

my $n_committed = val('SELECT count(*) FROM produced');
my $n_aborted = val('SELECT count(*) FROM aborted');
cmp_ok($n_committed, '>=', $min_events, "at least $min_events committed events");
is(val('SELECT count(*) FROM aborted a JOIN produced p USING (id)'), 0,
	'sanity: no aborted id is in produced');

# stream contents
is( val(q{SELECT count(*) FROM (
	SELECT id FROM produced EXCEPT ALL SELECT id FROM streamed) x}), 0,
	'stream: every committed event is in the stream');
is( val(q{SELECT count(*) FROM (
	SELECT id FROM streamed EXCEPT ALL SELECT id FROM produced) x}), 0,
	'stream: no phantom or duplicate event in the stream');
is( val(q{SELECT count(*) FROM streamed s JOIN produced p USING (id)
	WHERE s.customer <> p.customer OR s.amount <> p.amount}), 0,
	'stream: payloads and keys as appended');
is(val('SELECT count(*) FROM (SELECT customer FROM streamed GROUP BY customer HAVING count(DISTINCT partition) > 1) x'),
	0, 'stream: a key always maps to the same partition');

sub mode_counts
{
	my ($sink) = @_;
	my ($lost, $dups, $phantom, $aborted_seen, $rows) = split /\|/, val(qq{
SELECT (SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT 1 FROM $sink s WHERE s.id = p.id)),
	   (SELECT coalesce(sum(c - 1), 0) FROM (SELECT count(*) AS c FROM $sink GROUP BY id HAVING count(*) > 1) d),
	   (SELECT count(*) FROM $sink s WHERE NOT EXISTS (SELECT 1 FROM produced p WHERE p.id = s.id)),
	   (SELECT count(*) FROM $sink s JOIN aborted a USING (id)),
	   (SELECT count(*) FROM $sink)});
	return { lost => $lost, dups => $dups, phantom => $phantom, aborted => $aborted_seen, rows => $rows };
}

my $eo = mode_counts('sink_eo');
my $alo = mode_counts('sink_alo');
my $amo = mode_counts('sink_amo');

# exactly_once
is($eo->{lost}, 0, 'exactly_once: no committed event lost (invariant 1)');
is($eo->{dups}, 0, 'exactly_once: no duplicate effect (invariant 2)');
is($eo->{phantom}, 0, 'exactly_once: no phantom (invariant 3)');
is($eo->{aborted}, 0, 'exactly_once: no rolled-back id delivered');
is( val(q{SELECT count(*) FROM sink_eo s JOIN streamed t USING (id)
	WHERE s.partition <> t.partition OR s.seq <> t.seq OR s.customer <> t.customer OR s.amount <> t.amount}),
	0, 'exactly_once: every sink row carries its event\'s position, key and amount');
is( val(q{SELECT count(*) FROM (
	SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY n) AS prev FROM sink_eo) x
	WHERE prev >= seq}), 0,
	'exactly_once: per partition, seq strictly increases in sink order (invariant 4)');
is( val(q{SELECT count(*) FROM (
	SELECT customer, sum(amount) AS total, count(*) AS events FROM produced GROUP BY customer) r
	FULL JOIN agg a USING (customer)
	WHERE a.total IS DISTINCT FROM r.total OR a.events IS DISTINCT FROM r.events}), 0,
	'exactly_once aggregates: totals equal the reference recomputed from the committed events');
my $agg_diff = val(q{SELECT coalesce(sum(a.events), 0) - (SELECT count(*) FROM produced) FROM agg a});

for my $p (qw(p_eo p_agg))
{
	is( val(qq{
SELECT count(*) FROM (SELECT partition, max(seq) AS last FROM streamed GROUP BY partition) s
FULL JOIN (SELECT partition, committed_seq FROM streamguard.consumers
		   WHERE stream = 'src' AND consumer = 'pipeline:$p') c USING (partition)
WHERE c.committed_seq IS DISTINCT FROM s.last}), 0,
		"$p: positions equal each partition's last committed seq (invariant 6)");
}
is( val(q{SELECT count(*) FROM streamguard.stream_partitions sp
	JOIN streamguard.consumers c ON c.stream = sp.stream AND c.partition = sp.partition
	WHERE sp.stream = 'src' AND c.consumer = 'pipeline:p_eo' AND c.committed_seq <> sp.last_seq}), 0,
	'p_eo: positions equal stream_partitions.last_seq');

# at_least_once: the detector must see duplicates
is($alo->{lost}, 0, 'at_least_once: no committed event lost');
cmp_ok($alo->{dups}, '>', 0, 'at_least_once: duplicates observed (between_commits kills redeliver)');
is($alo->{phantom}, 0, 'at_least_once: no phantom');
is($alo->{aborted}, 0, 'at_least_once: no rolled-back id delivered');

# at_most_once: the detector must see loss
is($amo->{dups}, 0, 'at_most_once: no duplicate');
cmp_ok($amo->{lost}, '>', 0, 'at_most_once: loss observed (between_commits kills lose the batch)');
is($amo->{phantom}, 0, 'at_most_once: no phantom');
is($amo->{aborted}, 0, 'at_most_once: no rolled-back id delivered');

# the progress counters agree with the sinks
{
	my ($eo_in, $eo_out, $agg_in, $amo_out) = split /\|/, val(q{
SELECT (SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'p_eo'),
	   (SELECT rows_out FROM streamguard.pipelines WHERE pipeline = 'p_eo'),
	   (SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'p_agg'),
	   (SELECT rows_out FROM streamguard.pipelines WHERE pipeline = 'p_amo')});
	is($eo_in, $n_committed, 'p_eo: events_in equals the committed events (counted in the batch transaction)');
	is($eo_out, $eo->{rows}, 'p_eo: rows_out equals the sink rows');
	is($agg_in, $n_committed, 'p_agg: events_in equals the committed events');
	is($amo_out, $amo->{rows}, 'p_amo: rows_out equals the rows the at_most_once pipeline wrote');
}

# no pipeline failed, nothing skipped or dead-lettered
is(val(q{SELECT count(*) FROM streamguard.pipelines WHERE state <> 'running' OR skipped <> 0 OR dead_letters <> 0}),
	0, 'no pipeline failed, skipped or dead-lettered anything');

# ------------------------------------------------------------ report

producers_summary($pstats, $n_committed, $n_aborted);
fault_summary($fx);
my $restarts = () = slurp_file($node->logfile) =~ /all server processes terminated; reinitializing/g;
diag("server crash restarts (postmaster reinitialized): $restarts; immediate restarts: "
	  . ($fx->{fired}{immediate_restart} // 0));
diag(sprintf("exactly_once  sink rows %d: lost %d, duplicates %d, phantom %d; aggregate events - committed = %s",
	$eo->{rows}, $eo->{lost}, $eo->{dups}, $eo->{phantom}, $agg_diff));
diag(sprintf("at_least_once sink rows %d: lost %d, duplicates %d, phantom %d",
	$alo->{rows}, $alo->{lost}, $alo->{dups}, $alo->{phantom}));
diag(sprintf("at_most_once  sink rows %d: lost %d, duplicates %d, phantom %d",
	$amo->{rows}, $amo->{lost}, $amo->{dups}, $amo->{phantom}));
state_diag($node);
diag(sprintf("durations: faults %.0f s, drain %.0f s, total %.0f s", $fault_secs, $drain_secs, time - $t_start));

$node->stop;
done_testing();
