# Consumer groups under load (docs/consumer-groups.md): members polling one
# consumer with poll(..., member => m) while producers append (some of their
# transactions roll back), with
#   - members joining and leaving (leave_group) during the load,
#   - a member terminated (pg_terminate_backend: it leaves at once),
#   - a member whose lease runs out while its poll transaction is still open
#     (it sleeps longer than its lease before committing),
#   - members rolling back some of their transactions (redelivery),
#   - kill -9 of a member's backend (the whole server restarts).
# At the end every committed event was consumed exactly once in committed
# member transactions, no rolled-back one ever was, and each partition was
# consumed in seq order.
#
# SG_GROUP_SECONDS (20) sets how long the load runs; SG_GROUP_SEED the seed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $seconds = $ENV{SG_GROUP_SECONDS} // 20;
my $seed = $ENV{SG_GROUP_SEED} // 76;
srand($seed);
diag("seed $seed, $seconds s of load");

my $node = sg_node('groups');
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('cg', 4);
} . producer_sql('cg') . q{
-- what the members consumed, in their own (committed) transactions
CREATE TABLE consumed (
	member text NOT NULL,
	partition int NOT NULL,
	seq bigint NOT NULL,
	id bigint NOT NULL,
	consumed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE member_stop ();
-- a member: polls as member m until `until` or until member_stop has a row,
-- then leaves.  slow_share of its transactions sleep slow_s seconds before
-- they end; rollback_share of them roll back.
CREATE PROCEDURE member_loop(m text, lease text, until timestamptz,
	slow_share float8, slow_s float8, rollback_share float8)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('streamguard.group_lease', lease, false);
	COMMIT;
	LOOP
		EXIT WHEN clock_timestamp() > until OR EXISTS (SELECT FROM member_stop);
		INSERT INTO consumed (member, partition, seq, id)
		SELECT m, e.partition, e.seq, (e.payload->>'id')::bigint
		  FROM streamguard.poll('cg', 'g', 50, wait => '300 ms', member => m) e;
		IF random() < slow_share THEN
			PERFORM pg_sleep(slow_s);
		END IF;
		IF random() < rollback_share THEN
			ROLLBACK;
		ELSE
			COMMIT;
		END IF;
	END LOOP;
	PERFORM streamguard.leave_group('cg', 'g', m);
	COMMIT;
END $$;
});

# ------------------------------------------------ long-poll for members
# A member waiting in poll(..., wait => ...) renews its lease while it
# waits, wakes on the commit of an append to its partitions, and wakes
# when a rebalance (another member's leave) gives it partitions.
$node->safe_psql('postgres', q{SELECT streamguard.create_stream('lpg', 2)});

# session A stays open as member "a" (a long lease): both partitions
my ($a_in, $a_out, $a_err) = ('', '', '');
my $sess_a = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$a_in, '>', \$a_out, '2>', \$a_err, IPC::Run::timeout(120));
$a_in .= "SET streamguard.group_lease = '60s';\nSELECT 'joined:' || count(*) FROM streamguard.poll('lpg', 'w', 10, member => 'a');\n";
my $deadline = time + 30;
$sess_a->pump while $a_out !~ /joined:/ && time < $deadline;
like($a_out, qr/joined:0/, 'member a joined');

# member b long-polls with a 3 s lease: it takes partition 1 and waits
sub start_psql
{
	my ($sql) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return ($h, \$out, \$err);
}
sub b_waits
{
	return wait_for_value($node, q{SELECT count(*) > 0 FROM pg_stat_activity
		WHERE query LIKE '%member => ''b''%' AND wait_event_type = 'Extension'}, 't', 20);
}
my $b_poll = q{
SELECT 'got:' || coalesce(string_agg(partition || '/' || (payload->>'n'), ',' ORDER BY partition, seq), '')
  FROM streamguard.poll('lpg', 'w', 10, wait => '40 s', member => 'b')};
my ($hb, $outb) = start_psql("SET streamguard.group_lease = '3s'; $b_poll");
# (b took partition 1 in its poll's transaction, still open while it waits:
# the view shows the move only when that commits)
ok(wait_for_value($node, q{SELECT count(*) = 1 FROM streamguard.consumer_group_members
	WHERE stream = 'lpg' AND member = 'b'}, 't', 20), 'member b joined');
ok(b_waits(), 'member b waits');
sleep 4;
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.consumer_group_members
	WHERE stream = 'lpg' AND lease_expires_at > now()}), '2',
	'after more than its 3 s lease, the waiting member b is still a member (renewed while it waits), and so is a');
ok($hb->pumpable, '... and still waiting');

# an append to b's partition wakes it at once
my $t0 = time;
$node->safe_psql('postgres', q{SELECT streamguard.append('lpg', '{"n": 1}', partition => 1)});
$hb->finish;
like($$outb, qr/got:1\/1$/m, 'an append to its partition wakes the waiting member');
ok(time - $t0 < 5, '... at once');
# (b's session ended: b left the group, its assignment stays until taken)
is($node->safe_psql('postgres', q{SELECT string_agg(partition || ':' || member, ' ' ORDER BY partition)
	FROM streamguard.consumer a JOIN streamguard.stream s ON s.id = a.stream_id WHERE s.name = 'lpg'}),
	'0:a 1:b', 'the move of partition 1 to b committed with its poll');

# b waits again, with a 30 s lease (it renews it every 10 s); an append to
# a's partition wakes it, but it finds nothing of its own and sleeps again
($hb, $outb) = start_psql("SET streamguard.group_lease = '30s'; $b_poll");
ok(b_waits(), 'member b waits again');
$node->safe_psql('postgres', q{SELECT streamguard.append('lpg', '{"n": 2}', partition => 0)});
usleep(700_000);
ok($hb->pumpable, 'an append to another member\'s partition does not end the wait');

# many wake-ups with nothing to read: the waiting backend's memory stays flat
# (each look of a long-poll frees what it allocated)
sub rss_kb
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	my ($kb) = map { /^VmRSS:\s+(\d+)/ ? $1 : () } <$fh>;
	close $fh;
	return $kb;
}
my $b_pid = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE query LIKE '%member => ''b''%' AND wait_event_type = 'Extension'});
SKIP:
{
	skip 'no /proc', 2 unless $b_pid =~ /^\d+$/ && defined rss_kb($b_pid);
	my $rss0 = rss_kb($b_pid);
	$node->safe_psql('postgres', q{
CREATE PROCEDURE append_each(n int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. n LOOP
		PERFORM streamguard.append('lpg', '{"n": 0}', partition => 0);
		COMMIT;
	END LOOP;
END $$;
CALL append_each(4000);}, timeout => 120);
	my $grew = rss_kb($b_pid) - $rss0;
	ok($hb->pumpable, '4,000 appends to another member\'s partition do not end the wait');
	ok($grew < 2048, "... and the waiting backend's memory stays flat over their wake-ups (grew $grew kB)");
}

# a leaves: b is woken at the commit, takes partition 0 and returns its event
$t0 = time;
$node->safe_psql('postgres', q{SELECT streamguard.leave_group('lpg', 'w', 'a')});
$hb->finish;
my $took = time - $t0;
like($$outb, qr/got:0\/2(,0\/0)*$/m, 'after a leaves, b gets the event of the partition it took over');
ok($took < 5, sprintf('... woken by the leave, not by its 10 s lease timer (%.2f s)', $took));
$a_in .= "\\q\n";
$sess_a->finish;

my %members;	# name => IPC::Run handle

sub start_member
{
	my ($m, %opt) = @_;
	my $until = $opt{until} // 3600;
	my $sql = sprintf("CALL member_loop('%s', '%s', clock_timestamp() + interval '%d s', %s, %s, %s)",
		$m, $opt{lease} // '2s', $until, $opt{slow_share} // 0, $opt{slow_s} // 0,
		$opt{rollback_share} // 0.05);
	my ($in, $out, $err) = ('', '', '');
	$members{$m} = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(900));
	note("member $m started");
}

# the backend pid of member $m's loop (within 20 s), or undef
sub member_pid
{
	my ($m) = @_;
	my $q = "FROM pg_stat_activity WHERE query LIKE 'CALL member_loop(''$m''%'";
	return undef unless wait_for_value($node, "SELECT count(*) = 1 $q", 't', 20);
	my $pid = q1($node, "SELECT pid $q", 20);
	return defined $pid && $pid =~ /^\d+$/ ? $pid : undef;
}

sub member_list
{
	return q1($node, q{SELECT string_agg(member || ':' || array_to_string(partitions, ','), ' ' ORDER BY member)
		FROM streamguard.consumer_group_members WHERE consumer = 'g'}, 60) // '?';
}

my $h = start_producers($node, count => 2, seed => $seed, name => 'groups', batch => [ 1, 40 ],
	single => [ 1, 5 ], abort => 0.2, pause_us => [ 5_000, 20_000 ]);
start_member($_) for qw(m1 m2 m3);
ok(wait_for_value($node, q{SELECT count(DISTINCT member) = 3 FROM streamguard.consumer_group_members
	WHERE consumer = 'g' AND cardinality(partitions) > 0}, 't', 60),
	'three members share the four partitions');
diag('members: ' . member_list());

my $step = $seconds / 6;
my $t0 = time;

# a member joins; one is terminated
sleep $step;
start_member('m4');
sleep $step;
my $pid2 = member_pid('m2');
ok(defined $pid2, 'member m2 is polling');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid2)");
eval { $members{m2}->finish };
delete $members{m2};
ok(wait_for_value($node, q{SELECT count(*) = 0 FROM streamguard.consumer_group_members WHERE member = 'm2'},
	't', 20), 'a terminated member leaves the group at once');
diag('members after m2 was terminated: ' . member_list());

# a slow member: its lease (500 ms) runs out while its transaction is open
start_member('m5', lease => '500ms', slow_share => 0.3, slow_s => 1.2);
sleep $step;
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM consumed WHERE member = 'm5'}, 't', 60),
	'the slow member consumed events');

# a member leaves on its own (its loop ends after 1 s)
start_member('m6', until => 1);
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'CALL member_loop(''m6''%'},
	't', 20), 'member m6 joined');
sleep $step;
ok(wait_for_value($node, q{SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE 'CALL member_loop(''m6''%'},
	't', 30), 'member m6 left');
eval { $members{m6}->finish };
delete $members{m6};

# kill -9 of a member's backend: the server restarts; members come back
my $pid1 = member_pid('m1');
ok(defined $pid1, 'member m1 is polling');
my $off = log_offset($node);
is(kill('KILL', $pid1), 1, 'kill -9 of member m1\'s backend');
ok(defined wait_crash_recovery($node, $off), 'the server restarted');
for my $m (sort keys %members)
{
	eval { $members{$m}->finish };
	delete $members{$m};
}
start_member($_) for qw(m1 m3 m4);
start_member('m5', lease => '500ms', slow_share => 0.3, slow_s => 1.2);
sleep $step;
diag('members after the restart: ' . member_list());

# let the load run its course
my $left = $seconds - (time - $t0);
sleep $left if $left > 0;
producers_wait_for($h, 200, timeout => 120);
my $stats = stop_producers($h);

# drain: the members consume everything committed, then stop
ok(wait_for_value($node, q{SELECT count(*) = 0 FROM produced p WHERE NOT EXISTS (SELECT FROM consumed c WHERE c.id = p.id)},
	't', 180), 'the members consumed every committed event');
$node->safe_psql('postgres', 'INSERT INTO member_stop DEFAULT VALUES');
for my $m (sort keys %members)
{
	eval { $members{$m}->finish };
}
ok(wait_for_value($node, q{SELECT count(*) FROM streamguard.consumer_group_members WHERE consumer = 'g'}, '0', 30),
	'the members left the group at the end');

# --------------------------------------------------------------- checks
my $produced = $node->safe_psql('postgres', 'SELECT count(*) FROM produced');
my $aborted = $node->safe_psql('postgres', 'SELECT count(*) FROM aborted');
producers_summary($stats, $produced, $aborted);
diag($node->safe_psql('postgres', q{SELECT string_agg(member || '=' || n, ' ' ORDER BY member)
	FROM (SELECT member, count(*) n FROM consumed GROUP BY member) s}));
ok($produced > 0, "events were produced ($produced)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT FROM consumed c WHERE c.id = p.id)}),
	'0', 'no committed event lost');
is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT id FROM consumed GROUP BY id HAVING count(*) > 1) d}),
	'0', 'no event consumed twice');
# ids alone cannot tell a rolled-back event: after the kill -9, sequence
# ev_id may hand out again values a rolled-back producer transaction drew
# (their WAL was never flushed).  Each committed id consumed once and
# nothing more consumed means no rolled-back event was.
is($node->safe_psql('postgres', q{SELECT (SELECT count(*) FROM consumed) - (SELECT count(*) FROM produced)}),
	'0', 'no rolled-back event consumed (as many events consumed as committed)');
diag('ids drawn again after the crash (in produced and aborted): '
	. $node->safe_psql('postgres', 'SELECT count(*) FROM aborted a JOIN produced p USING (id)'));
is($node->safe_psql('postgres', q{SELECT count(*) FROM consumed c WHERE NOT EXISTS (SELECT FROM produced p WHERE p.id = c.id)}),
	'0', 'nothing consumed that was not produced');
# a later transaction reads a partition only after the earlier one committed
# (its position row lock): per partition, consumption time follows seq
is($node->safe_psql('postgres', q{SELECT count(*) FROM (
	SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY consumed_at, seq) AS prev FROM consumed) o
	WHERE prev >= seq}), '0', 'each partition consumed in seq order');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT member) >= 5 FROM consumed}), 't',
	'every kind of member consumed');

$node->stop;
done_testing();
