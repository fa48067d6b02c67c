
# Remote sinks under failure (docs/guarantees.md; SQL reference "Remote
# servers"): a crash matrix with two servers.
#
# "local" holds the stream `src` (4 partitions) and the producers; "remote"
# holds the sink tables, written by four pipelines over libpq (batch 500),
# each through its own foreign server (application_name sg_<x>, so the
# remote backend serving a pipeline can be found in pg_stat_activity):
#   p_2pc  exactly_once, sink_mode two_phase  -> remote sink_2pc
#   p_off  exactly_once, sink_mode offsets    -> remote sink_off
#   p_alo  at_least_once                      -> remote sink_alo
#   p_amo  at_most_once                       -> remote sink_amo
# The sinks have no unique constraint on id: a duplicate is visible.
#
# Producers (forked, one psql session per transaction) append events with
# unique ids; each transaction also records its ids in `produced`, so
# `produced` is exactly the set of committed events; ~15 % of the
# transactions roll back.  While they run, faults are injected one after the
# other, each waited for (the local server back, every pipeline with a live
# worker): inject_fault kills at after_prepare / after_local_commit /
# mid_copy / remote_end_sent / before_commit (two_phase),
# after_remote_commit / mid_copy / remote_end_sent / before_commit (offsets),
# after_remote_commit / between_commits (at_least_once), between_commits
# (at_most_once); remote restarts fast and immediate; the remote stopped
# for a while (remote_status must show connected = false with
# last_error); pg_terminate_backend of the remote
# session serving a pipeline; and a stalled remote (SIGSTOP of that backend
# for longer than streamguard.remote_timeout, then SIGCONT).
#
# After the drain: both exactly_once sinks hold every committed id exactly
# once (with its partition and seq, in seq order per partition), no rolled
# back id; no prepared transaction is left on the remote and
# streamguard.remote_prepared is empty; the pipelines' positions equal the
# partitions' last seqs (and the offsets table on the remote agrees);
# at_least_once lost nothing and shows duplicates; at_most_once duplicated
# nothing and shows loss; remote_status shows connected, prepared_pending 0.
#
# Bad input first: unknown server (42704), refused connection and a server
# that never answers (bounded by streamguard.remote_timeout = 2s), missing
# remote table (42P01 relayed), a non-SELECT with a sink (22023), two_phase
# against max_prepared_transactions = 0 (55000) while offsets works there.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use IO::Socket::INET;
use Time::HiRes qw(time);

my $t_start = time;
my ($seed, $min_events, $rounds) = run_knobs('SG_REMOTE', seed => 20240707, min_events => 50_000, rounds => 2);

my $remote_timeout = 2;    # seconds, streamguard.remote_timeout on "local"
my ($remote, $local) = sg_remote_pair(remote => { mpx => 10 },
	local => { extra => "streamguard.remote_timeout='${remote_timeout}s'\nshared_buffers=128MB\n" });
my $nomp = sg_node('nomp', remote => 1, mpx => 0);
# a node that is never started: its port refuses connections
my $dead = PostgreSQL::Test::Cluster->new('dead');

my @pipes = qw(p_2pc p_off p_alo p_amo);
my %sink = (p_2pc => 'sink_2pc', p_off => 'sink_off', p_alo => 'sink_alo', p_amo => 'sink_amo');
my %app = map { $_ => 'sg_' . substr($_, 2) } @pipes;    # p_2pc -> sg_2pc
my %srv = map { $_ => 'rs_' . substr($_, 2) } @pipes;    # p_2pc -> rs_2pc
my $sinkpw = 'sink-Pw-3141';

for my $n ($remote, $nomp)
{
	$n->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE sinker LOGIN PASSWORD '$sinkpw';
GRANT CREATE ON SCHEMA public TO sinker;
SET ROLE sinker;
CREATE TABLE sink_2pc (n bigserial, id bigint NOT NULL, partition int, seq bigint,
	at timestamptz DEFAULT clock_timestamp());
CREATE TABLE sink_off (LIKE sink_2pc INCLUDING ALL);
CREATE TABLE sink_alo (LIKE sink_2pc INCLUDING ALL);
CREATE TABLE sink_amo (LIKE sink_2pc INCLUDING ALL);
});
}
# LIKE ... INCLUDING ALL shares the sequence: give each sink its own
$remote->safe_psql('postgres', join('', map { qq{
SET ROLE sinker;
CREATE SEQUENCE ${_}_n;
ALTER TABLE $_ ALTER n SET DEFAULT nextval('${_}_n');
} } qw(sink_off sink_alo sink_amo)));

my %sinker = (user => 'sinker', password => $sinkpw);
my $servers = join('', map { remote_server_sql($srv{$_}, $remote, app => $app{$_}, %sinker) } @pipes);
$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('src', 4);
@{[ producer_sql('src') ]}
CREATE TABLE local_t (id bigint);
$servers
@{[ remote_server_sql('rs_nomp', $nomp, app => 'sg_nomp', %sinker) ]}
@{[ remote_server_sql('rs_dead', $dead, %sinker) ]}
});

my $select = q{SELECT (payload->>'id')::bigint AS id, partition, seq FROM batch};

# ============================================================== bad input

{
	my $sel = $select;
	expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_srv', 'src', \$\$$sel\$\$, sink_server => 'no_such_server', sink_table => 'sink_2pc')},
		'42704', qr/server "no_such_server" does not exist/, 'unknown sink server');

	# refused: a port nobody listens on
	my $el = expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_dead', 'src', \$\$$sel\$\$, sink_server => 'rs_dead', sink_table => 'sink_2pc')},
		'08006', qr/remote server "rs_dead": could not connect/, 'unreachable remote (connection refused)');
	cmp_ok($el, '<', $remote_timeout + 5, sprintf('connection refused reported at once (%.2f s)', $el));

	# a server that accepts the TCP connection and never answers
	my $hole = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, Proto => 'tcp')
	  or die "cannot listen: $!";
	my $hport = $hole->sockport;
	$local->safe_psql('postgres', remote_server_sql('rs_hole', $hport, %sinker));
	$el = expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_hole', 'src', \$\$$sel\$\$, sink_server => 'rs_hole', sink_table => 'sink_2pc')},
		'08006', qr/remote server "rs_hole": could not connect.*timed out/s,
		'remote that never answers');
	cmp_ok($el, '>=', $remote_timeout - 0.5, sprintf('... waited for streamguard.remote_timeout (%.2f s)', $el));
	# bounded, not hanging: the bound allows for a loaded machine (21.7 s
	# once at load 15, for a 2 s timeout: the backend waits for a core too)
	cmp_ok($el, '<', $remote_timeout + 60, '... and not without bound');
	close $hole;

	expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_tab', 'src', \$\$$sel\$\$, sink_server => 'rs_2pc', sink_table => 'public.no_such_table')},
		'42P01', qr/no_such_table/, 'missing remote table (relayed from the remote)');
	# a failed check must not leave its connection to the remote open in
	# the calling session (a pooled session would accumulate them)
	{
		my $sess = $local->background_psql('postgres', on_error_stop => 0);
		for my $i (1 .. 3)
		{
			$sess->query(qq{SELECT streamguard.create_pipeline('bad_tab$i', 'src', \$\$$sel\$\$, sink_server => 'rs_2pc', sink_table => 'public.no_such_table')});
		}
		# a closed connection's backend leaves the remote's pg_stat_activity a
		# moment after the close (at once on a quiet machine, not under load):
		# polled; a connection left open stays there while $sess lives
		ok( wait_for_value($remote, q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sg_2pc'},
				0, 30),
			'failed remote checks leave no connection open on the remote while the session lives')
		  or diag($remote->safe_psql('postgres',
			q{SELECT string_agg(pid || ' ' || usename || ' ' || state || ' ' || left(query, 60), E'\n')
			  FROM pg_stat_activity WHERE application_name = 'sg_2pc'}));
		$sess->quit;
	}
	expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_col', 'src', \$\$SELECT seq AS no_such_col FROM batch\$\$, sink_server => 'rs_2pc', sink_table => 'sink_2pc')},
		'42703', qr/no_such_col/, 'remote table without the SELECT\'s column');
	expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_ins', 'src', \$\$INSERT INTO local_t SELECT seq FROM batch\$\$, sink_server => 'rs_2pc', sink_table => 'sink_2pc')},
		'22023', qr/single SELECT/, 'not a single SELECT with a remote sink');
	expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_2pc', 'src', \$\$$sel\$\$, sink_server => 'rs_nomp', sink_table => 'sink_2pc')},
		'55000', qr/max_prepared_transactions/, 'two_phase against max_prepared_transactions = 0');
	expect_error($local,
		qq{SELECT streamguard.create_pipeline('bad_mode', 'src', \$\$$sel\$\$, sink_server => 'rs_2pc', sink_table => 'sink_2pc', sink_mode => 'three_phase')},
		'22023', qr/three_phase/, 'invalid sink_mode');
	is($local->safe_psql('postgres', q{SELECT count(*) FROM streamguard.pipelines WHERE pipeline LIKE 'bad%'}),
		0, 'failed create_pipeline calls left nothing behind');

	# offsets mode on the remote without prepared transactions works
	expect_ok($local,
		qq{SELECT streamguard.create_pipeline('nomp_off', 'src', \$\$$sel\$\$, sink_server => 'rs_nomp', sink_table => 'sink_off', sink_mode => 'offsets', batch_size => 100)},
		'sink_mode offsets on a remote with max_prepared_transactions = 0 is accepted');
	$local->safe_psql('postgres', q{
BEGIN;
SELECT count(*) FROM streamguard.append_batch('src', ARRAY(SELECT jsonb_build_object('id', -g) FROM generate_series(1, 300) g));
COMMIT;});
	ok(wait_for_value($nomp, 'SELECT count(DISTINCT id) || \'/\' || count(*) FROM sink_off', '300/300', 60),
		'... and delivers every event exactly once');
	ok(wait_for_value($nomp,
		q{SELECT sum(position) FROM public.streamguard_sink_offsets},
		$local->safe_psql('postgres', q{SELECT sum(last_seq) FROM streamguard.stream_partitions WHERE stream = 'src'}), 30),
		'... recording its positions on the remote');
	$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('nomp_off')});
	$nomp->stop;
}

# ============================================================== pipelines

$local->safe_psql('postgres', qq{
SELECT streamguard.create_pipeline('p_2pc', 'src', \$\$$select\$\$, batch_size => 500,
	sink_server => 'rs_2pc', sink_table => 'public.sink_2pc', sink_mode => 'two_phase');
SELECT streamguard.create_pipeline('p_off', 'src', \$\$$select\$\$, batch_size => 500,
	sink_server => 'rs_off', sink_table => 'sink_off', sink_mode => 'offsets');
SELECT streamguard.create_pipeline('p_alo', 'src', \$\$$select\$\$, batch_size => 500,
	guarantee => 'at_least_once', sink_server => 'rs_alo', sink_table => 'sink_alo');
SELECT streamguard.create_pipeline('p_amo', 'src', \$\$$select\$\$, batch_size => 500,
	guarantee => 'at_most_once', sink_server => 'rs_amo', sink_table => 'sink_amo');
});
ok(wait_pipelines_running($local, \@pipes, 60), 'the four remote-sink pipelines run')
  or BAIL_OUT("pipelines did not start:\n" . pipelines_report($local));
# the 300 events of the bad-input check reach the sinks (not counted later)
ok( wait_for_value($remote,
		q{SELECT (SELECT count(*) FROM sink_2pc) + (SELECT count(*) FROM sink_off)
			   + (SELECT count(*) FROM sink_alo) + (SELECT count(*) FROM sink_amo)}, 1200, 60),
	'the pipelines deliver to the remote');
ok( wait_for_value($local,
		q{SELECT count(*) FROM streamguard.remote_status WHERE side = 'sink' AND connected AND prepared_pending = 0},
		4, 30),
	'remote_status: four sink connections, nothing pending');

# ============================================================== producers

my $producers = start_producers($local, name => 'remote_sink', seed => $seed,
	batch => [ 50, 500 ], single => [ 20, 100 ], abort => 0.15, pause_us => [ 300_000, 500_000 ]);

# ================================================================= faults

my $fx = fault_context($local, \@pipes, remote => $remote);

# the remote down for a while: remote_status must say so
sub remote_down
{
	my ($fx, $kind, $mode) = @_;
	$fx->{armed}{$kind}++;
	$remote->stop($mode);
	my $seen = wait_for_value($local, q{
SELECT count(*) FROM streamguard.remote_status
WHERE side = 'sink' AND NOT connected AND coalesce(last_error, '') <> ''}, 4, 40);
	ok($seen, "$kind: while the remote is down, remote_status shows connected = false and last_error")
	  or diag(remote_status_report($local));
	diag("remote_status while the remote is down:\n" . remote_status_report($local));
	# a pipeline's last_error says why it could not connect (libpq's reason),
	# on one line
	ok( wait_for_value($local, q{SELECT bool_or(last_error ~ 'could not connect: .*(refused|No such file)'
			AND strpos(last_error, E'\n') = 0 AND strpos(last_error, E'\t') = 0)
		FROM streamguard.pipelines WHERE sink_server IS NOT NULL}, 't', 40),
		"$kind: pipelines.last_error gives libpq's reason, on one line")
	  or diag(val($local, q{SELECT string_agg(pipeline || ': ' || coalesce(last_error, ''), E'\n') FROM streamguard.pipelines}));
	$remote->start;
	return fault_fired($fx, $kind);
}

# A stall is a SIGSTOP of the remote backend serving a pipeline for longer
# than remote_timeout: the worker must give up on it (cancel, drop the
# connection) and carry on with a new session while the old one is still
# stopped.
my @plan = (
	(['2pc after_prepare kill',       \&fault_inject, 'p_2pc', 'after_prepare']) x 2,
	(['2pc after_local_commit kill',  \&fault_inject, 'p_2pc', 'after_local_commit']) x 2,
	(['2pc mid_copy kill',            \&fault_inject, 'p_2pc', 'mid_copy']) x 2,
	(['2pc before_commit kill',       \&fault_inject, 'p_2pc', 'before_commit']) x 2,
	(['2pc remote_end_sent kill',     \&fault_inject, 'p_2pc', 'remote_end_sent']) x 2,
	(['off remote_end_sent kill',     \&fault_inject, 'p_off', 'remote_end_sent']) x 2,
	(['off after_remote_commit kill', \&fault_inject, 'p_off', 'after_remote_commit']) x 2,
	(['off mid_copy kill',            \&fault_inject, 'p_off', 'mid_copy']) x 2,
	(['off before_commit kill',       \&fault_inject, 'p_off', 'before_commit']) x 2,
	(['alo after_remote_commit kill', \&fault_inject, 'p_alo', 'after_remote_commit']) x 2,
	(['alo between_commits kill',     \&fault_inject, 'p_alo', 'between_commits']) x 2,
	(['amo between_commits kill',     \&fault_inject, 'p_amo', 'between_commits']) x 3,
	(['remote restart fast',          \&fault_remote_restart, 'fast']) x 2,
	(['remote restart immediate',     \&fault_remote_restart, 'immediate']) x 2,
	(['terminate 2pc session',        \&fault_terminate_remote, $app{p_2pc}]) x 2,
	(['terminate off session',        \&fault_terminate_remote, $app{p_off}]) x 2,
	(['terminate alo session',        \&fault_terminate_remote, $app{p_alo}]) x 1,
	(['terminate amo session',        \&fault_terminate_remote, $app{p_amo}]) x 1,
	(['stall 2pc backend',            \&fault_stall_remote, $app{p_2pc}, $remote_timeout + 4]) x 2,
	(['stall off backend',            \&fault_stall_remote, $app{p_off}, $remote_timeout + 4]) x 2,
	(['stall alo backend',            \&fault_stall_remote, $app{p_alo}, $remote_timeout + 4]) x 1,
);
# the remote down, in the middle of the plan (it asserts)
my ($healthy, $fault_secs) = run_fault_plan($fx, \@plan, rounds => $rounds,
	middle => [ 'remote down (fast stop)', \&remote_down, 'fast' ], gap_us => [ 300_000, 1_000_000 ],
	t_start => $t_start);
ok($healthy, 'servers and pipelines recovered after every fault');
my @stall_moved = fault_stalls_ok($fx,
	'a stalled remote backend: the worker gave up on it and went on with a new session (bounded wait)');

# produce until enough events committed (bounded), a little longer anyway so
# that every pipeline runs batches after the last fault
producers_wait_for($producers, $min_events, settle => 2, timeout => 150);
my $pstats = stop_producers($producers);

# ================================================================== drain

my $t_drain = time;
my $drained = wait_for_value(
	$local, q{
SELECT (SELECT count(*) FROM streamguard.pipelines
		 WHERE state = 'running' AND pipeline LIKE 'p\_%' AND coalesce(lag_events, 1) = 0) = 4
   AND (SELECT count(*) FROM streamguard.remote_prepared) = 0},
	't', 240);
ok($drained, 'every pipeline drained (lag 0, nothing pending)')
  or diag(pipelines_report($local) . "\n" . remote_status_report($local));
is_stable($remote, q{SELECT (SELECT count(*) FROM sink_2pc) || '/' || (SELECT count(*) FROM sink_off)
	|| '/' || (SELECT count(*) FROM sink_alo) || '/' || (SELECT count(*) FROM sink_amo)
	|| '/' || (SELECT count(*) FROM pg_prepared_xacts)}, 3, 'remote sinks are stable after the drain (%s)');
my $drain_secs = time - $t_drain;

# ================================================================= verify

sub val { my ($n, $sql) = @_; return $n->safe_psql('postgres', $sql); }

# the stream itself, read back by a fresh consumer: id -> "partition:seq"
copy_stream($local, 'src');
my %pos = streamed_positions($local, 'id > 0');
my ($committed, $aborted) = producer_ids($local);
my $n_committed = scalar keys %$committed;
cmp_ok($n_committed, '>=', $min_events, "at least $min_events committed events");
is(scalar(grep { !$pos{$_} } keys %$committed), 0, 'stream: every committed event is in the stream');
is(scalar(grep { !$committed->{$_} } keys %pos), 0, 'stream: nothing else in the stream');

# one sink, compared with the committed events
sub sink_counts
{
	my ($table) = @_;
	my (%cnt, %wrong_pos);
	for my $l (split /\n/, val($remote, "SELECT id, partition || ':' || seq FROM $table WHERE id > 0"))
	{
		my ($id, $ps) = split /\|/, $l;
		$cnt{$id}++;
		$wrong_pos{$id} = 1 if defined $pos{$id} && $pos{$id} ne $ps;
	}
	my %r = (rows => 0, lost => 0, dups => 0, phantom => 0, aborted => 0,
		wrong_pos => scalar keys %wrong_pos);
	for my $id (keys %cnt)
	{
		$r{rows} += $cnt{$id};
		$r{dups} += $cnt{$id} - 1;
		$r{phantom}++ unless $committed->{$id};
		$r{aborted}++ if $aborted->{$id};
	}
	$r{lost} = scalar grep { !$cnt{$_} } keys %$committed;
	return \%r;
}

my %res = map { $_ => sink_counts($sink{$_}) } @pipes;
for my $p (qw(p_2pc p_off))
{
	my $r = $res{$p};
	is($r->{lost}, 0, "$p exactly_once: no committed event lost");
	is($r->{dups}, 0, "$p exactly_once: no duplicate");
	is($r->{phantom}, 0, "$p exactly_once: no phantom");
	is($r->{aborted}, 0, "$p exactly_once: no rolled-back id delivered");
	is($r->{wrong_pos}, 0, "$p exactly_once: every row carries its event's partition and seq");
	is( val($remote, qq{SELECT count(*) FROM (
	SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY n) AS prev FROM $sink{$p}) x
	WHERE prev >= seq}), 0, "$p: per partition, seq strictly increases in sink order");
	is( val($local, qq{
SELECT count(*) FROM streamguard.stream_partitions sp
FULL JOIN (SELECT partition, committed_seq FROM streamguard.consumers
		   WHERE stream = 'src' AND consumer = 'pipeline:$p') c USING (partition)
WHERE sp.stream = 'src' AND c.committed_seq IS DISTINCT FROM sp.last_seq}), 0,
		"$p: local positions equal the partitions' last seqs");
	is( val($local, qq{
SELECT count(*) FROM (SELECT partition, max(seq) AS last FROM streamed GROUP BY partition) s
FULL JOIN (SELECT partition, committed_seq FROM streamguard.consumers
		   WHERE stream = 'src' AND consumer = 'pipeline:$p') c USING (partition)
WHERE c.committed_seq IS DISTINCT FROM s.last}), 0,
		"$p: local positions equal the last committed seq of every partition");
}
# the offsets the sink recorded agree with the local positions
{
	my $local_pos = val($local, q{SELECT string_agg(partition || ':' || committed_seq, ',' ORDER BY partition)
		FROM streamguard.consumers WHERE stream = 'src' AND consumer = 'pipeline:p_off'});
	my $remote_pos = val($remote, q{SELECT string_agg(partition || ':' || position, ',' ORDER BY partition)
		FROM public.streamguard_sink_offsets
		WHERE pipeline = (SELECT pipeline FROM public.streamguard_sink_offsets GROUP BY pipeline
						  ORDER BY max(position) DESC LIMIT 1)});
	is($remote_pos, $local_pos, 'p_off: the offsets stored with the output equal the local positions');
}

is(val($remote, 'SELECT count(*) FROM pg_prepared_xacts'), 0, 'no prepared transaction left on the remote');
is(val($local, 'SELECT count(*) FROM streamguard.remote_prepared'), 0, 'streamguard.remote_prepared is empty');
ok( wait_for_value($local, q{
SELECT count(*) FROM streamguard.remote_status
WHERE side = 'sink' AND connected AND prepared_pending = 0 AND pipeline LIKE 'p\_%'}, 4, 30),
	'remote_status: every sink connected, prepared_pending 0');

my $alo = $res{p_alo};
is($alo->{lost}, 0, 'at_least_once: no committed event lost');
cmp_ok($alo->{dups}, '>', 0, 'at_least_once: duplicates observed (kills after the remote commit)');
is($alo->{phantom}, 0, 'at_least_once: no phantom');
is($alo->{aborted}, 0, 'at_least_once: no rolled-back id delivered');
my $amo = $res{p_amo};
is($amo->{dups}, 0, 'at_most_once: no duplicate');
cmp_ok($amo->{lost}, '>', 0, 'at_most_once: loss observed (kills between the commits)');
is($amo->{phantom}, 0, 'at_most_once: no phantom');
is($amo->{aborted}, 0, 'at_most_once: no rolled-back id delivered');
is(val($local, q{SELECT count(*) FROM streamguard.pipelines WHERE state <> 'running'}), 0,
	'no pipeline failed');
# the progress counters: rows_out counts what reached the sink in batches
# whose local transaction committed.  two_phase: the local transaction
# decides, so exactly the sink's rows.  at_most_once: the remote commit comes
# before the local one that counts, and a crash between (any kill restarts
# every backend) leaves rows uncounted: never more than the sink's rows.
is( val($local, "SELECT rows_out FROM streamguard.pipelines WHERE pipeline = 'p_2pc'"),
	val($remote, "SELECT count(*) FROM sink_2pc"),
	"p_2pc: pipelines.rows_out equals the rows in its remote sink");
{
	my $out = val($local, "SELECT rows_out FROM streamguard.pipelines WHERE pipeline = 'p_amo'");
	my $rows = val($remote, "SELECT count(*) FROM sink_amo");
	ok($out > 0 && $out <= $rows, "p_amo: pipelines.rows_out counts rows, never more than its remote sink holds")
	  or diag("rows_out $out, sink rows $rows");
	diag("p_amo rows_out $out, sink rows $rows");
}

# ======================================================= delayed messages
#
# A stalled remote does not only stop answering: what the worker sent just
# before giving up may still be sitting in the network or in the stalled
# backend's socket buffer, and is executed when the remote wakes up (a
# SIGSTOPped backend that had not yet read the worker's COMMIT does exactly
# that after SIGCONT).  A proxy between the worker and the remote delays one
# chosen message past streamguard.remote_timeout and delivers it later, so
# that this happens at a known point:
#  - offsets mode, the remote transaction's COMMIT delayed: the worker gives
#    up, retries the batch in a new session (which waits for the row locks
#    of the first transaction's offsets), then the delayed COMMIT arrives;
#  - two_phase, the PREPARE TRANSACTION delayed: the worker gives up,
#    resolves (nothing prepared yet), retries and commits the batch, then
#    the delayed PREPARE arrives.  A batch's remote transaction is one
#    message (BEGIN, marker, COPY, PREPARE TRANSACTION) whose PREPARE runs
#    when the rows end: the message held is the end of the COPY (CopyDone,
#    'c' and length 4), with the offsets pipeline paused meanwhile so that
#    the end held is the two_phase pipeline's.
# Either way the result must still be exactly once, with nothing left
# prepared on the remote.

my $pxdir = "${PostgreSQL::Test::Utils::tmp_check}/remote_sink_proxy";
my ($pxport, $pxpid) = start_proxy($remote->port, $pxdir);
$remote->safe_psql('postgres', q{
SET ROLE sinker;
CREATE TABLE sink_pxoff (n bigserial, id bigint NOT NULL, partition int, seq bigint);
CREATE TABLE sink_px2pc (n bigserial, id bigint NOT NULL, partition int, seq bigint);
});
$local->safe_psql('postgres', qq{
@{[ remote_server_sql('rs_px', $pxport, app => 'sg_px', %sinker) ]}
SELECT streamguard.create_stream('px', 1);
SELECT streamguard.create_pipeline('q_pxoff', 'px', \$\$$select\$\$, batch_size => 1000,
	sink_server => 'rs_px', sink_table => 'sink_pxoff', sink_mode => 'offsets');
SELECT streamguard.create_pipeline('q_px2pc', 'px', \$\$$select\$\$, batch_size => 1000,
	sink_server => 'rs_px', sink_table => 'sink_px2pc', sink_mode => 'two_phase');
});

sub px_append
{
	my ($from, $to) = @_;
	$local->safe_psql('postgres', qq{
SELECT count(*) FROM streamguard.append_batch('px',
	ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series($from, $to) g))});
}

sub px_counts
{
	my ($table, $from, $to) = @_;
	return val($remote, qq{
SELECT count(DISTINCT id) || '/' || count(*) FROM $table WHERE id BETWEEN $from AND $to});
}

px_append(1, 100);
ok( wait_for_value($remote,
		q{SELECT (SELECT count(*) FROM sink_pxoff) || '/' || (SELECT count(*) FROM sink_px2pc)},
		'100/100', 60),
	'delayed messages: both pipelines deliver through the proxy');

# offsets: the COMMIT of the remote transaction delayed
{
	my $off = log_offset($local);
	proxy_hold($pxdir, 'COMMIT\x00');
	px_append(1001, 1100);
	ok(proxy_held($pxdir), 'offsets: the remote COMMIT is held by the proxy');
	# wait until the retry is blocked behind the first transaction's locks
	my $blocked = wait_for_value($remote, q{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE application_name = 'sg_px' AND wait_event_type = 'Lock'}, 't', 30);
	note("offsets: a retry waits for the first transaction's locks: $blocked");
	proxy_release($pxdir);
	ok(wait_for_value($local, q{SELECT lag_events FROM streamguard.pipelines WHERE pipeline = 'q_pxoff'}, '0', 60),
		'offsets: the pipeline catches up after the delayed COMMIT');
	sleep 2;
	is(px_counts('sink_pxoff', 1001, 1100), '100/100',
		'offsets: a COMMIT delivered after the worker gave up still leaves every event exactly once');
	diag("offsets, delayed COMMIT: distinct/rows = " . px_counts('sink_pxoff', 1001, 1100)
		  . "; worker errors: " . join(' | ',
			slurp_file($local->logfile, $off) =~ /pipeline "q_pxoff": batch failed \(attempt \d+\): ([^\n]*)/g));
}

# two_phase: the PREPARE TRANSACTION delayed (the end of the COPY it follows)
my $copy_done = 'c\x00\x00\x00\x04';
$local->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('q_pxoff')});
{
	my $off = log_offset($local);
	proxy_hold($pxdir, $copy_done);
	px_append(2001, 2100);
	ok(proxy_held($pxdir), 'two_phase: the PREPARE TRANSACTION is held by the proxy');
	# the worker gives up, retries in a new session and commits the batch
	my $retried = wait_for_value($remote, q{SELECT count(*) FROM sink_px2pc WHERE id BETWEEN 2001 AND 2100}, 100, 40);
	note("two_phase: the batch committed by a retry while the first PREPARE is delayed: $retried");
	proxy_release($pxdir);
	sleep 2;
	# the pipeline goes on; give it time to settle whatever was left
	px_append(2101, 2200);
	wait_for_value($remote, q{SELECT count(*) FROM sink_px2pc WHERE id BETWEEN 2101 AND 2200}, 100, 30);
	my $left = wait_for_value($remote, q{SELECT count(*) FROM pg_prepared_xacts}, 0, 15);
	ok($left, 'two_phase: a PREPARE delivered after the worker gave up leaves no prepared transaction behind')
	  or diag('left prepared on the remote: '
		  . val($remote, q{SELECT string_agg(gid || ' (' || prepared || ')', ', ') FROM pg_prepared_xacts}));
	is(px_counts('sink_px2pc', 2001, 2200), '200/200', 'two_phase: still every event exactly once');
	diag("two_phase, delayed PREPARE: distinct/rows = " . px_counts('sink_px2pc', 2001, 2200)
		  . "; worker errors: " . join(' | ',
			slurp_file($local->logfile, $off) =~ /pipeline "q_px2pc": batch failed \(attempt \d+\): ([^\n]*)/g));
}

# two_phase again, and the worker crashes right after the retry committed
# (before it forgets its local record of the gid): the delayed PREPARE
# arrives before the restarted worker resolves in-doubt transactions.
{
	my $off = log_offset($local);
	q1($local, q{SELECT streamguard.inject_fault('q_px2pc', 'after_commit', 'kill')});
	proxy_hold($pxdir, $copy_done);
	px_append(3001, 3100);
	ok(proxy_held($pxdir), 'two_phase + crash: the PREPARE TRANSACTION is held by the proxy');
	my $o = wait_log($local, qr/pipeline "q_px2pc": injected fault, killing the worker/, $off, 40);
	ok(defined $o, 'two_phase + crash: the retry committed and the worker was killed after it');
	proxy_release($pxdir);
	ok(defined wait_crash_recovery($local, $off), 'two_phase + crash: local server recovered');
	ok(wait_pipelines_running($local, [qw(q_px2pc)], 60), 'two_phase + crash: the pipeline runs again');
	px_append(3101, 3200);
	wait_for_value($remote, q{SELECT count(DISTINCT id) FROM sink_px2pc WHERE id BETWEEN 3101 AND 3200}, 100, 30);
	is(px_counts('sink_px2pc', 3001, 3200), '200/200',
		'two_phase + crash: still every event exactly once');
	ok(wait_for_value($remote, q{SELECT count(*) FROM pg_prepared_xacts}, 0, 15),
		'two_phase + crash: nothing left prepared');
	diag("two_phase, delayed PREPARE then crash: distinct/rows = " . px_counts('sink_px2pc', 3001, 3200)
		  . "; in-doubt resolution: " . join(' | ',
			slurp_file($local->logfile, $off) =~ /pipeline "q_px2pc": ((?:committing|rolling back) in-doubt[^\n]*)/g));
}
$local->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('q_pxoff')});
ok(wait_pipelines_running($local, [qw(q_px2pc q_pxoff)], 60), 'delayed messages: both pipelines run again');
diag("proxy log:\n" . (-e "$pxdir/log" ? slurp_file("$pxdir/log") : ''));
proxy_stop($pxdir, $pxpid);

# ================================================================= report

my $lrestarts = count_log($local, qr/all server processes terminated; reinitializing/);
my $commits_ip = count_log($local, qr/committing in-doubt remote transaction/);
my $rollbacks_ip = count_log($local, qr/rolling back in-doubt remote transaction/);
producers_summary($pstats, $n_committed, scalar(keys %$aborted));
fault_summary($fx);
diag("local crash restarts: $lrestarts; in-doubt remote transactions committed $commits_ip, rolled back $rollbacks_ip; "
	  . "stalls: a new session after (s) @stall_moved");
for my $p (@pipes)
{
	my $r = $res{$p};
	diag(sprintf("%-6s sink rows %6d: lost %5d, duplicates %5d, phantom %d, rolled-back %d, wrong position %d",
		$p, $r->{rows}, $r->{lost}, $r->{dups}, $r->{phantom}, $r->{aborted}, $r->{wrong_pos}));
}
state_diag($local, remote => 1);
diag(sprintf("durations: faults %.0f s, drain %.0f s, total %.0f s", $fault_secs, $drain_secs, time - $t_start));

$local->stop;
$remote->stop;
done_testing();
