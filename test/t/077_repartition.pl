
# More partitions online: alter_stream(partitions => M) while producers and
# consumers run, with each key's events delivered in order across every
# change (docs/guarantees.md, "Per-key order across a change of the
# partition count").
#
# Producers append keyed events; each key belongs to one producer, whose
# events of that key carry n = 1, 2, 3, ... in the order they were appended
# (some transactions roll back and take their numbers with them).  While
# they run, stream "rs" grows 2 -> 3, the server restarts immediately
# (every process killed), and it grows 3 -> 8; the readers pause for a while
# before each change, so that old events are still unread when events of the
# new count arrive.  Readers:
#  - poll consumer c1 (one session), poll consumer c2 (two sessions sharing
#    it), each recording what it got in the poll's transaction (some polls
#    roll back: redelivered);
#  - pipeline pl1 (one worker) and pl2 (two workers), exactly_once, into
#    tables of their own.
# First, deterministically: a switch point on a rolled-back seq survives an
# immediate restart (seqs go on above it), and a long-poll held back by the
# change is woken by the commit of the session that held the old events.
# Last, on a server with 8 partition entries in shared memory: a stream that
# cannot grow in place moves (and keeps its counters), and a change with no
# room left fails with 53400.
# At the end, for each reader: every committed event exactly once, no
# rolled-back one, and for every key n in delivery order is 1, 2, 3, ...
# Every wait is bounded.  SG_REPARTITION_SECONDS (default 3) scales the
# time between the steps: raise it for a longer run.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use IPC::Run;
use POSIX ();
use StreamguardTest;

my $step = $ENV{SG_REPARTITION_SECONDS} // 3;
my $node = sg_node('repartition', extra => "max_worker_processes = 24\n");
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');

sub val { return $node->safe_psql('postgres', $_[0]); }

# A long-poll held back by the change wakes when the session holding the
# old events commits (not at the end of its wait).  Key 'k3' goes to
# partition 1 of 2 and partition 0 of 3.
val(q{SELECT streamguard.create_stream('rw', 2)});
is(val(q{SELECT count(*) FROM streamguard.poll('rw', 'g', 1)}), '0', 'rw: consumer g created');
val(q{SELECT streamguard.append('rw', '{"n": 1}', 'k3')});
val(q{SELECT streamguard.alter_stream('rw', partitions => 3)});
is(val(q{SELECT partition FROM streamguard.append('rw', '{"n": 2}', 'k3')}), '0', 'rw: k3 moved to partition 0');
{
	my ($ain, $aout, $aerr) = ('', '', '');
	my $a = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
			'-c', 'BEGIN', '-c', q{SELECT string_agg(payload->>'n', ',') FROM streamguard.poll('rw', 'g', 100)},
			'-c', 'SELECT pg_sleep(3)', '-c', 'COMMIT' ],
		'<', \$ain, '>', \$aout, '2>', \$aerr, IPC::Run::timeout(60));
	ok(wait_for_value($node, q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%'
		AND pid <> pg_backend_pid()}, 't', 20), 'rw: session A holds the old event, uncommitted');
	my $t0 = Time::HiRes::time();
	my ($ok, $got) = try_psql($node,
		q{SELECT string_agg(payload->>'n', ',') FROM streamguard.poll('rw', 'g', 100, wait => '30 s')}, timeout => 60);
	my $took = Time::HiRes::time() - $t0;
	$a->finish;
	is((split /\n/, $aout)[0], '1', 'rw: session A got n = 1');
	is($got, '2', 'rw: session B, held back, then got n = 2');
	ok($took < 10, sprintf('rw: B was woken by A\'s commit (%.1f s, wait 30 s)', $took));
}

val(q{SELECT streamguard.create_stream('rs', 2)});
# a switch point on a rolled-back seq (checked after the restart below)
val(q{SELECT streamguard.create_stream('rz', 2)});
is(val(q{SELECT seq FROM streamguard.append('rz', '{}', partition => 1)}), '1', 'rz: seq 1 in partition 1');
val(q{BEGIN; SELECT streamguard.append('rz', '{}', partition => 1); ROLLBACK;});
val(q{SELECT streamguard.alter_stream('rz', partitions => 3)});
is(val(q{SELECT switch_seqs::text FROM streamguard.stream_repartition r JOIN streamguard.stream s ON s.id = r.stream_id
	WHERE s.name = 'rz'}), '{0,2}', 'rz: the switch point of partition 1 is the rolled-back seq 2');
val(q{
CREATE TABLE produced (id bigserial PRIMARY KEY, producer int NOT NULL, key text NOT NULL, n int NOT NULL,
	UNIQUE (key, n));
CREATE TABLE aborted (id bigint PRIMARY KEY);
-- cnt events, each for one of the producer's 12 keys, numbered per key
CREATE FUNCTION produce(cnt int, producer int, single boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	k text;
	nn int;
	pid bigint;
	ids bigint[] := '{}';
	keys text[] := '{}';
	pays jsonb[] := '{}';
BEGIN
	FOR i IN 1 .. cnt LOOP
		k := 'p' || producer || 'k' || floor(random() * 12)::int;
		SELECT coalesce(max(p.n), 0) + 1 INTO nn FROM produced p WHERE p.key = k;
		INSERT INTO produced (producer, key, n) VALUES (producer, k, nn) RETURNING id INTO pid;
		ids := ids || pid;
		IF single THEN
			PERFORM streamguard.append('rs', jsonb_build_object('key', k, 'n', nn), k);
		ELSE
			keys := keys || k;
			pays := pays || jsonb_build_object('key', k, 'n', nn);
		END IF;
	END LOOP;
	IF NOT single THEN
		PERFORM count(*) FROM streamguard.append_batch('rs', pays, keys);
	END IF;
	RETURN array_to_string(ids, ',');
END $$;
-- what each reader got, in the order it got it
CREATE TABLE got (ord bigserial PRIMARY KEY, reader text NOT NULL, key text, n int, part int, seq bigint);
});
for my $pl ([ 'pl1', 1 ], [ 'pl2', 2 ])
{
	my ($name, $workers) = @$pl;
	val(qq{SELECT streamguard.create_pipeline('$name', 'rs',
		\$\$INSERT INTO got (reader, key, n, part, seq)
		  SELECT '$name', key, (payload->>'n')::int, partition, seq FROM batch ORDER BY partition, seq\$\$,
		batch_size => 40, workers => $workers)});
}
ok(wait_for_value($node, q{SELECT count(*) FILTER (WHERE worker_pid IS NOT NULL) FROM streamguard.pipeline_workers},
	'3', 60), 'three pipeline workers up');

# poll sessions: c1 alone, c2 shared by two sessions
my $dir = PostgreSQL::Test::Utils::tempdir;
my @pollers;
sub start_poller
{
	my ($consumer, $sno) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		srand(1000 + $sno);
		while (!-e "$dir/stop_pollers")
		{
			if (-e "$dir/pause_pollers")
			{
				usleep(50_000);
				next;
			}
			my $end = rand() < 0.1 ? 'ROLLBACK' : 'COMMIT';
			my ($ok) = try_psql($node, qq{BEGIN;
INSERT INTO got (reader, key, n, part, seq)
SELECT '$consumer', key, (payload->>'n')::int, partition, seq FROM streamguard.poll('rs', '$consumer', 25);
$end;}, timeout => 60);
			usleep($ok ? 20_000 : 200_000);
		}
		POSIX::_exit(0);
	}
	push @pollers, $pid;
}
start_poller('c1', 1);
start_poller('c2', 2);
start_poller('c2', 3);

my $h = start_producers($node, name => 'repartition', count => 2, seed => 77,
	batch => [ 1, 8 ], single => [ 1, 3 ], single_share => 0.3, abort => 0.15, pause_us => [ 10_000, 30_000 ]);

# The readers pause before each change, so that a backlog of old events is
# still unread when the new count's events arrive (without the hold-back,
# a reader would then take a moved key's new events first).
sub pause_readers
{
	open(my $pf, '>', "$dir/pause_pollers") or die;
	close $pf;
	ok(defined q1($node, q{SELECT streamguard.pause_pipeline('pl1'), streamguard.pause_pipeline('pl2')}, 60),
		'readers paused');
}
sub resume_readers
{
	unlink "$dir/pause_pollers";
	ok(defined q1($node, q{SELECT streamguard.resume_pipeline('pl1'), streamguard.resume_pipeline('pl2')}, 60),
		'readers resumed');
}
sleep $step;
pause_readers();
sleep $step;
ok(defined q1($node, q{SELECT streamguard.alter_stream('rs', partitions => 3)}, 60), 'grown 2 -> 3');
sleep 1;
resume_readers();
sleep $step;
$node->stop('immediate');
$node->start;
note('immediate restart');
is(q1($node, q{SELECT seq FROM streamguard.append('rz', '{}', partition => 1)}, 60), '3',
	'rz: after the restart, seqs go on above the switch point (not 2 again)');
sleep $step;
pause_readers();
sleep $step;
ok(defined q1($node, q{SELECT streamguard.alter_stream('rs', partitions => 8)}, 60), 'grown 3 -> 8 after the restart');
sleep 1;
resume_readers();
sleep $step;

my $stats = stop_producers($h);
open(my $fh, '>', "$dir/stop_pollers") or die;
close $fh;
for my $pid (@pollers)
{
	my $deadline = time + 90;
	while (waitpid($pid, POSIX::WNOHANG()) != $pid)
	{
		if (time > $deadline) { kill 'KILL', $pid; waitpid($pid, 0); last; }
		usleep(100_000);
	}
}
my $committed = val(q{SELECT count(*) FROM produced});
producers_summary($stats, $committed, val(q{SELECT count(*) FROM aborted}));
ok($committed > 100, "producers committed events ($committed)");
is(val(q{SELECT partitions FROM streamguard.streams WHERE stream = 'rs'}), '8', 'the stream has 8 partitions');
is(val(q{SELECT string_agg(old_partitions || '->' || new_partitions, ' ' ORDER BY epoch) FROM streamguard.stream_repartitions
	WHERE stream = 'rs'}),
	'2->3 3->8', 'both changes recorded');
ok(val(q{SELECT count(DISTINCT partition) FROM streamguard.stream_partitions WHERE stream = 'rs' AND last_seq IS NOT NULL}) >= 6,
	'the new partitions received events');

# drain the poll consumers (bounded), wait for the pipelines
for my $c (qw(c1 c2))
{
	ok(wait_for_value($node, qq{WITH ins AS (INSERT INTO got (reader, key, n, part, seq)
		SELECT '$c', key, (payload->>'n')::int, partition, seq FROM streamguard.poll('rs', '$c', 1000) RETURNING 1)
		SELECT count(*) FROM ins}, '0', 120), "$c drained");
}
for my $r (qw(pl1 pl2))
{
	ok(wait_for_value($node, qq{SELECT count(*) >= $committed FROM got WHERE reader = '$r'}, 't', 180),
		"$r caught up");
}

for my $r (qw(c1 c2 pl1 pl2))
{
	is(val(qq{SELECT count(*) FROM produced p WHERE NOT EXISTS
		(SELECT 1 FROM got g WHERE g.reader = '$r' AND g.key = p.key AND g.n = p.n)}), '0',
		"$r: every committed event delivered");
	is(val(qq{SELECT count(*) FROM (SELECT key, n FROM got WHERE reader = '$r' GROUP BY key, n HAVING count(*) > 1) d}),
		'0', "$r: no event twice");
	is(val(qq{SELECT count(*) FROM got g WHERE g.reader = '$r' AND NOT EXISTS
		(SELECT 1 FROM produced p WHERE p.key = g.key AND p.n = g.n)}), '0', "$r: no rolled-back event");
	my $inorder = is(val(qq{SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY key ORDER BY ord) AS prev
		FROM got WHERE reader = '$r') x WHERE n <= prev}), '0', "$r: every key in order");
	# on failure: the offending key's deliveries around the inversion, and
	# the switch points, so that the run says whether the stream or the
	# reader was wrong
	diag("$r out of order:\n" . val(qq{WITH x AS (SELECT ord, key, n, part, seq,
			lag(n) OVER (PARTITION BY key ORDER BY ord) AS prev FROM got WHERE reader = '$r'),
		bad AS (SELECT key, n FROM x WHERE n <= prev)
		SELECT string_agg(format('key %s n %s part %s seq %s ord %s', g.key, g.n, g.part, g.seq, g.ord), E'\n' ORDER BY g.key, g.ord)
		FROM got g JOIN bad b ON b.key = g.key AND abs(g.n - b.n) <= 3 WHERE g.reader = '$r'})
		. "\nswitch points: " . val(q{SELECT string_agg(epoch || ':' || old_partitions || '->' || new_partitions
			|| ' ' || switch_seqs::text, '; ' ORDER BY epoch) FROM streamguard.stream_repartitions WHERE stream = 'rs'}))
		unless $inorder;
}
my $moved = val(q{SELECT count(*) FROM (SELECT key FROM got WHERE reader = 'c1' GROUP BY key
	HAVING count(DISTINCT part) > 1) x});
ok($moved > 0, "keys moved between partitions ($moved)");

$node->stop;

# Shared memory: a stream whose entries cannot grow in place moves to a free
# run (and keeps working); with no free run the change fails with 53400.
# (the database's share of the slots, checked at creation, set above the
# slots themselves: this is about the slot table being full)
my $small = sg_node('repartition_small', extra => "streamguard.max_partitions = 8\n"
	  . "streamguard.database_max_partitions = 100\n");
$small->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('a', 2);
SELECT streamguard.create_stream('b', 2);
-- both attached to shared memory, in this order: a in entries 0-1, b in 2-3
SELECT streamguard.append('a', '{"n": 1}', partition => 1);
SELECT streamguard.append('b', '{}');
});
$small->safe_psql('postgres', q{SELECT streamguard.alter_stream('a', partitions => 3)});
is($small->safe_psql('postgres', q{SELECT string_agg(partition || ':' || next_seq, ' ' ORDER BY partition)
	FROM streamguard.stream_partitions WHERE stream = 'a'}), '0:1 1:2 2:1', 'small: a moved, its counters with it');
is($small->safe_psql('postgres', q{SELECT partition || ':' || seq FROM streamguard.append('a', '{"n": 2}', partition => 1)}),
	'1:2', 'small: a appends after the move');
is($small->safe_psql('postgres', q{SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM streamguard.poll('a', 'c', 10)}),
	'1', 'small: a reads after the move: first the old count\'s event');
is($small->safe_psql('postgres', q{SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM streamguard.poll('a', 'c', 10)}),
	'2', 'small: ... then the new count\'s');
expect_error($small, q{SELECT streamguard.alter_stream('b', partitions => 5)}, '53400',
	qr/no room for 5 more partitions in shared memory/, 'small: no free run for b');
is($small->safe_psql('postgres', q{SELECT partitions FROM streamguard.streams WHERE stream = 'b'}), '2',
	'small: b keeps 2 partitions');
$small->stop;
done_testing();
