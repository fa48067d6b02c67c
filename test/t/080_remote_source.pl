
# Remote sources under failure (docs/guarantees.md; SQL reference "Remote
# servers", remote source and streamguard.read).
#
# "remote" holds the stream `rsrc` (4 partitions) and the producers; "local"
# runs the pipeline p_rsrc (exactly_once, batch 500, source_server rs_src)
# that reads rsrc through streamguard.read as the remote role `reader` (read
# privilege only) and inserts into the local table `sink` (no unique
# constraint: a duplicate is visible).  The positions live locally, in
# streamguard.remote_position, advanced in the batch's own transaction.
#
# Producers (forked) append on the remote; each transaction also records
# its ids in the remote table `produced` (exactly the committed events);
# ~15 % roll back.  Concurrently, faults one after the other: local worker
# kills at before_commit / mid_batch / after_commit (local crash restarts),
# remote restarts fast and immediate, pg_terminate_backend of the remote
# session serving the pipeline, and a stalled remote backend (SIGSTOP for
# longer than streamguard.remote_timeout).
#
# In the middle, the readable horizon: a remote transaction appends to
# partition 0 and stays open while later events are committed to partition
# 0 (and elsewhere); nothing at or after its seq in partition 0 may be
# delivered, even across a worker crash, while the other partitions keep
# flowing; once it commits, its event and the later ones are delivered, in
# seq order.
#
# After the drain: the local sink holds every committed id exactly once with
# its partition and seq, in seq order per partition, no rolled-back id; the
# local streamguard.remote_position equals the remote partitions' last seqs.

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
my ($seed, $min_events, $rounds) = run_knobs('SG_REMOTE', seed => 20240808, min_events => 50_000, rounds => 3);

my $remote_timeout = 2;
my ($remote, $local) = sg_remote_pair(
	remote => { extra => "shared_buffers=128MB\n" },
	local  => { extra => "streamguard.remote_timeout='${remote_timeout}s'\nshared_buffers=128MB\n" });

my $app = 'sg_src';
my $readerpw = 'reader-Pw-2718';

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE reader LOGIN PASSWORD '$readerpw';
SELECT streamguard.create_stream('rsrc', 4);
SELECT streamguard.grant_stream('rsrc', 'reader', 'read');
@{[ producer_sql('rsrc') ]}
});

$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE TABLE sink (n bigserial, id bigint NOT NULL, partition int, seq bigint,
	at timestamptz DEFAULT clock_timestamp());
@{[ remote_server_sql('rs_src', $remote, app => $app, user => 'reader', password => $readerpw) ]}
SELECT streamguard.create_pipeline('p_rsrc', 'rsrc',
	\$\$INSERT INTO sink (id, partition, seq) SELECT (payload->>'id')::bigint, partition, seq FROM batch\$\$,
	batch_size => 500, source_server => 'rs_src');
});
ok(wait_pipelines_running($local, ['p_rsrc'], 60), 'the remote-source pipeline runs')
  or BAIL_OUT("pipeline did not start:\n" . pipelines_report($local));
is( $local->safe_psql('postgres',
		q{SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) FROM streamguard.remote_position}),
	'0:0,1:0,2:0,3:0', 'one local position per remote partition, starting at 0');
is($local->safe_psql('postgres', q{SELECT source FROM streamguard.pipelines WHERE pipeline = 'p_rsrc'}),
	'rs_src:rsrc', 'pipelines.source names the server and the remote stream');

# a first event flows
$remote->safe_psql('postgres',
	q{SELECT streamguard.append('rsrc', '{"id": -100}', partition => 3)});
ok(wait_for_value($local, 'SELECT count(*) FROM sink WHERE id = -100', 1, 30), 'a remote event reaches the local sink');
ok( wait_for_value($local,
		q{SELECT connected FROM streamguard.remote_status WHERE pipeline = 'p_rsrc' AND side = 'source'}, 't', 30),
	'remote_status: the source side is connected');

# ============================================================== producers

my $producers = start_producers($remote, name => 'remote_source', seed => $seed,
	batch => [ 100, 700 ], single => [ 20, 100 ], abort => 0.15, pause_us => [ 300_000, 500_000 ]);

# ================================================================= faults

my $fx = fault_context($local, ['p_rsrc'], remote => $remote);

# ---------------------------------------------------------- the horizon
#
# A remote transaction appends to partition 0 and stays open.
my %horizon;
sub horizon_check
{
	my ($fx, $kind) = @_;
	$fx->{armed}{$kind}++;
	my $holder = $remote->background_psql('postgres', on_error_stop => 0);
	$holder->query_safe('BEGIN');
	my $held = $holder->query_safe(
		q{SELECT seq FROM streamguard.append('rsrc', '{"id": -1}', partition => 0)});
	chomp $held;
	# later events in partition 0, committed
	my $later = $remote->safe_psql('postgres', q{
SELECT string_agg(seq::text, ',' ORDER BY seq) FROM streamguard.append_batch('rsrc',
	ARRAY(SELECT jsonb_build_object('id', -1 - g) FROM generate_series(1, 10) g),
	partitions => array_fill(0, ARRAY[10]))});
	my @later = split /,/, $later;
	ok((!grep { $_ <= $held } @later), "horizon: later appends to partition 0 got seqs after the open one ($held)");
	ok( wait_for_value($remote,
			q{SELECT readable_horizon FROM streamguard.stream_partitions WHERE stream = 'rsrc' AND partition = 0},
			$held, 20),
		'horizon: the remote horizon of partition 0 stops at the open transaction\'s seq');

	# the other partitions keep flowing, also across a worker crash
	$remote->safe_psql('postgres', q{SELECT streamguard.append('rsrc', '{"id": -20}', partition => 1)});
	ok(wait_for_value($local, 'SELECT count(*) FROM sink WHERE id = -20', 1, 30),
		'horizon: an event committed later in partition 1 is delivered');
	my $r = fault_inject($fx, "$kind: worker kill while held", 'p_rsrc', 'before_commit');
	$remote->safe_psql('postgres', q{SELECT streamguard.append('rsrc', '{"id": -21}', partition => 2)});
	ok(wait_for_value($local, 'SELECT count(*) FROM sink WHERE id = -21', 1, 30),
		'horizon: ... and after a worker crash, one in partition 2');
	sleep 1;
	is( $local->safe_psql('postgres', "SELECT count(*) FROM sink WHERE partition = 0 AND seq >= $held"), 0,
		'horizon: nothing at or after the open transaction\'s seq in partition 0 was delivered');
	my $p0 = $local->safe_psql('postgres',
		q{SELECT rp.position FROM streamguard.remote_position rp
		  JOIN streamguard.pipeline p ON p.id = rp.pipeline_id WHERE p.name = 'p_rsrc' AND rp.partition = 0});
	cmp_ok($p0, '<', $held, 'horizon: the local position of partition 0 stays below it');
	is($p0, $local->safe_psql('postgres', 'SELECT coalesce(max(seq), 0) FROM sink WHERE partition = 0'),
		'horizon: ... at the last event delivered from partition 0');

	$holder->query_safe('COMMIT');
	$holder->quit;
	my $ok = wait_for_value($local, 'SELECT count(*) FROM sink WHERE id BETWEEN -11 AND -1', 11, 30);
	ok($ok, 'horizon: after the commit, the held event and the later ones are delivered');
	is( $local->safe_psql('postgres',
			q{SELECT string_agg(seq::text, ',' ORDER BY n) FROM sink WHERE id BETWEEN -11 AND -1}),
		join(',', $held, @later), 'horizon: ... once each, in seq order');
	$fx->{fired}{$kind}++;
	$horizon{held} = $held;
	return $r;
}

my @plan = (
	(['kill before_commit', \&fault_inject, 'p_rsrc', 'before_commit']) x 3,
	(['kill mid_batch',     \&fault_inject, 'p_rsrc', 'mid_batch']) x 3,
	(['kill after_commit',  \&fault_inject, 'p_rsrc', 'after_commit']) x 1,
	(['remote restart fast',      \&fault_remote_restart, 'fast']) x 2,
	(['remote restart immediate', \&fault_remote_restart, 'immediate']) x 2,
	(['terminate remote session', \&fault_terminate_remote, $app]) x 3,
	(['stall remote backend',     \&fault_stall_remote, $app, $remote_timeout + 3]) x 1,
);
my ($healthy, $fault_secs) = run_fault_plan($fx, \@plan, rounds => $rounds,
	middle => [ 'horizon', \&horizon_check ], gap_us => [ 300_000, 1_000_000 ], t_start => $t_start);
ok($healthy, 'servers and pipeline recovered after every fault');
my @stall_moved = fault_stalls_ok($fx,
	'a stalled remote backend: the worker gave up on it and read through a new session (bounded wait)');

producers_wait_for($producers, $min_events, settle => 2, timeout => 150);
my $pstats = stop_producers($producers);

# ================================================================== drain

sub val { my ($n, $sql) = @_; return $n->safe_psql('postgres', $sql); }

my $last_seqs_sql = q{SELECT string_agg(partition || ':' || coalesce(last_seq, 0), ',' ORDER BY partition)
	FROM streamguard.stream_partitions WHERE stream = 'rsrc'};
my $positions_sql = q{SELECT string_agg(rp.partition || ':' || rp.position, ',' ORDER BY rp.partition)
	FROM streamguard.remote_position rp JOIN streamguard.pipeline p ON p.id = rp.pipeline_id
	WHERE p.name = 'p_rsrc'};
my $t_drain = time;
my $remote_last = val($remote, $last_seqs_sql);
my $drained = wait_for_value($local, $positions_sql, $remote_last, 240);
ok($drained, 'the pipeline drained: its remote positions reached the remote partitions\' last seqs')
  or diag(pipelines_report($local));
is_stable($local, 'SELECT count(*) FROM sink', 2, 'the local sink is stable after the drain (%s rows)');
my $drain_secs = time - $t_drain;

# ================================================================= verify

# the remote stream, read back by a fresh consumer: id -> "partition:seq"
copy_stream($remote, 'rsrc');
my %pos = streamed_positions($remote);
my ($committed, $aborted) = producer_ids($remote);
my $n_committed = scalar keys %$committed;
cmp_ok($n_committed, '>=', $min_events, "at least $min_events committed events on the remote");
is(scalar(grep { !$pos{$_} } keys %$committed), 0, 'remote stream: every committed event is there');

my (%cnt, $wrong_pos, $rows);
$wrong_pos = 0;
$rows = 0;
for my $l (split /\n/, val($local, q{SELECT id, partition || ':' || seq FROM sink}))
{
	my ($id, $ps) = split /\|/, $l;
	$cnt{$id}++;
	$rows++;
	$wrong_pos++ if !defined $pos{$id} || $pos{$id} ne $ps;
}
my $lost = grep { !$cnt{$_} } keys %$committed;
my $dups = 0;
$dups += $cnt{$_} - 1 for keys %cnt;
my $phantom = grep { $_ > 0 && !$committed->{$_} } keys %cnt;
my $aborted_seen = grep { $aborted->{$_} } keys %cnt;
my $horizon_events = grep { $_ < 0 } keys %cnt;
is($lost, 0, 'exactly_once: no committed remote event lost');
is($dups, 0, 'exactly_once: no duplicate');
is($phantom, 0, 'exactly_once: no phantom');
is($aborted_seen, 0, 'exactly_once: no rolled-back event delivered');
is($wrong_pos, 0, 'every sink row carries its remote event\'s partition and seq');
is($horizon_events, 14, 'the events of the horizon check are there too');
is( val($local, q{SELECT count(*) FROM (
	SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY n) AS prev FROM sink) x
	WHERE prev >= seq}), 0, 'per partition, seq strictly increases in sink order');

# positions
my %maxseq;
for my $ps (values %pos)
{
	my ($p, $s) = split /:/, $ps;
	$maxseq{$p} = $s if !defined $maxseq{$p} || $s > $maxseq{$p};
}
my $committed_last = join(',', map { "$_:" . ($maxseq{$_} // 0) } 0 .. 3);
is(val($local, $positions_sql), val($remote, $last_seqs_sql),
	'local streamguard.remote_position equals the remote partitions\' last seqs');
is(val($local, $positions_sql), $committed_last,
	'local streamguard.remote_position equals the last committed seq of every remote partition');
is( val($local, q{SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'p_rsrc'}), $rows,
	'pipelines.events_in counts each delivered event once');
ok( wait_for_value($local,
		q{SELECT connected FROM streamguard.remote_status WHERE pipeline = 'p_rsrc' AND side = 'source'}, 't', 30),
	'remote_status: the source side is connected at the end');
is(val($local, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'p_rsrc'}), 'running',
	'the pipeline is still running');

# ================================================================= replay

# reset_pipeline of a remote source moves the positions kept here: the
# last five events of partition 0 are delivered once more, nothing else.
{
	my $p0 = $maxseq{0} // 0;
	my $rows_before = val($local, q{SELECT count(*) FROM sink});
	my $tail_before = val($local, "SELECT count(*) FROM sink WHERE partition = 0 AND seq > $p0 - 5");
	SKIP:
	{
		skip 'partition 0 has fewer than 5 events', 3 if $p0 < 5 || $tail_before != 5;
		val($local, "SELECT streamguard.reset_pipeline('p_rsrc', seq => $p0 - 4, partition => 0)");
		ok(wait_for_value($local, q{SELECT count(*) FROM sink}, $rows_before + 5, 60),
			'reset_pipeline(seq, partition) on a remote source replays exactly the events after that seq');
		is(val($local, "SELECT count(*) FROM sink WHERE partition = 0 AND seq > $p0 - 5"), 10,
			'each replayed event arrives once more');
		expect_error($local, q{SELECT streamguard.reset_pipeline('p_rsrc', from_time => now())},
			'0A000', qr/not supported for a remote source/, 'reset by time on a remote source');
	}
}

# ================================================================= report

my $lrestarts = count_log($local, qr/all server processes terminated; reinitializing/);
producers_summary($pstats, $n_committed, scalar(keys %$aborted));
fault_summary($fx);
diag("local crash restarts: $lrestarts; stalls: a new session after (s) @stall_moved; horizon held at seq "
	  . ($horizon{held} // '?'));
diag(sprintf("sink rows %d: lost %d, duplicates %d, phantom %d, rolled-back %d, wrong position %d",
	$rows, $lost, $dups, $phantom, $aborted_seen, $wrong_pos));
state_diag($local, remote => 1);
diag(sprintf("durations: faults %.0f s, drain %.0f s, total %.0f s", $fault_secs, $drain_secs, time - $t_start));

$local->stop;
$remote->stop;
done_testing();
