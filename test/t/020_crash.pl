
# Crash safety of appends, the readable horizon and consumer positions
# (docs/guarantees.md invariants 2, 3, 4, 5, 6 and its failure model: kill -9 of a backend
# mid-append, immediate shutdown and crash recovery).
#
# Phase 1 kills -9 one backend that is inside a statement appending in a loop,
# while other sessions hold open transactions that appended or polled.  Phase 2
# does an immediate shutdown with several open appending transactions.  After
# each recovery:
#  - no phantom: nothing from an uncommitted transaction is ever delivered;
#  - every committed event is still there with the seq it had, and is
#    delivered exactly once per consumer, in strictly increasing seq order per
#    partition;
#  - new appends get seqs greater than every committed seq;
#  - the horizon is not stuck: polls return the newly committed events, and
#    the horizon equals next_seq once nothing is in flight;
#  - consumer positions are exactly as committed (an open poll transaction's
#    advance is gone);
#  - append dedup keys of committed events survive, those of uncommitted ones
#    do not.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('crash', extra => "streamguard.maintenance_naptime = '1s'\n");

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('cr', 2);
});

# Committed events: tag => "partition:seq".
my %committed;
# Per consumer, the "partition:seq:tag" events it has acknowledged.
my %acked;

sub append_committed
{
	my ($p, $tag, $dedup) = @_;
	my $dd = defined $dedup ? ", dedup_key => '$dedup'" : '';
	my $r = $node->safe_psql('postgres',
		qq{SELECT partition || ':' || seq FROM streamguard.append('cr', jsonb_build_object('tag', '$tag'), partition => $p$dd)}
	);
	like($r, qr/^$p:\d+$/, "append $tag");
	$committed{$tag} = $r;
	return $r;
}

sub poll_lines
{
	my ($consumer, $max, $sess) = @_;
	my $sql =
	  qq{SELECT partition || ':' || seq || ':' || coalesce(payload->>'tag', '?') FROM streamguard.poll('cr', '$consumer', $max)};
	my $r = $sess ? $sess->query_safe($sql) : $node->safe_psql('postgres', $sql);
	return [ grep { $_ ne '' } split /\n/, $r ];
}

# Poll and acknowledge (autocommit) and remember what was acknowledged.
sub poll_ack
{
	my ($consumer, $max) = @_;
	my $got = poll_lines($consumer, $max);
	push @{ $acked{$consumer} }, @$got;
	return $got;
}

# Call $poll until it returns nothing (at most 100 times); all it returned.
sub poll_until_empty
{
	my ($poll) = @_;
	my @all;
	for (1 .. 100)
	{
		my $got = $poll->();
		last unless @$got;
		push @all, @$got;
	}
	return \@all;
}

# Poll and acknowledge until a poll returns nothing.
sub poll_ack_all
{
	my ($consumer) = @_;
	return poll_until_empty(sub { poll_ack($consumer, 100000) });
}

# Everything a fresh consumer can read.
sub poll_everything
{
	my ($consumer) = @_;
	return poll_until_empty(sub { poll_lines($consumer, 100000) });
}

sub max_committed_seq
{
	my ($p) = @_;
	my $max = 0;
	foreach my $ps (values %committed)
	{
		my ($pp, $s) = split /:/, $ps;
		$max = $s if $pp == $p && $s > $max;
	}
	return $max;
}

# Expected positions from our own bookkeeping: the highest acknowledged seq
# per partition, 0 if none.
sub expected_positions
{
	my ($consumer) = @_;
	my %pos = (0 => 0, 1 => 0);
	foreach my $l (@{ $acked{$consumer} || [] })
	{
		my ($p, $s) = split /:/, $l;
		$pos{$p} = $s if $s > $pos{$p};
	}
	return "0:$pos{0}\n1:$pos{1}";
}

# A consumer that never committed anything may not exist at all: that is the
# same as all positions 0.
sub view_positions
{
	my ($consumer) = @_;
	my $r = $node->safe_psql('postgres',
		qq{SELECT partition || ':' || committed_seq FROM streamguard.consumers WHERE stream = 'cr' AND consumer = '$consumer' ORDER BY partition}
	);
	return $r eq '' ? "0:0\n1:0" : $r;
}

# Everything a consumer delivered must be in strictly increasing seq order per
# partition; returns the list unchanged.
sub check_order
{
	my ($what, $lines) = @_;
	foreach my $p (0, 1)
	{
		my @seqs = map { (split /:/)[1] } grep { /^$p:/ } @$lines;
		my $ok = 1;
		for my $i (1 .. $#seqs)
		{
			$ok = 0 if $seqs[$i] <= $seqs[ $i - 1 ];
		}
		ok($ok, "$what: partition $p strictly increasing (@seqs)");
	}
	return $lines;
}

sub committed_lines
{
	return [ sort map { "$committed{$_}:$_" } keys %committed ];
}

# After a recovery: the complete set of checks.
sub check_after_recovery
{
	my ($phase, $consumers) = @_;

	foreach my $c (@$consumers)
	{
		is(view_positions($c), expected_positions($c),
			"$phase: positions of $c exactly as committed");
	}

	# Nothing is in flight any more: the horizon must have caught up.
	ok( $node->poll_query_until(
			'postgres',
			q{SELECT bool_and(readable_horizon = next_seq) FROM streamguard.stream_partitions WHERE stream = 'cr'}
		),
		"$phase: horizon equals next_seq after recovery");

	# New appends get seqs above every committed seq.
	foreach my $p (0, 1)
	{
		my $max = max_committed_seq($p);
		my $r = append_committed($p, "$phase-post-$p");
		my (undef, $s) = split /:/, $r;
		cmp_ok($s, '>', $max,
			"$phase: new seq in partition $p above every committed seq");
	}

	# Each consumer gets exactly the committed events it had not acknowledged.
	foreach my $c (@$consumers)
	{
		my %seen = map { ($_ => 1) } @{ $acked{$c} || [] };
		my @expect = grep { !$seen{$_} } @{ committed_lines() };
		my $got = check_order("$phase: $c", poll_ack_all($c));
		is_deeply([ sort @$got ], [ sort @expect ],
			"$phase: $c gets exactly the unacknowledged committed events");
	}

	# A fresh consumer replays exactly the committed events with their seqs.
	my $all = check_order("$phase: replay", poll_everything("replay_$phase"));
	is_deeply([ sort @$all ], committed_lines(),
		"$phase: full replay is exactly the committed events (no phantom)");
	ok(!grep(/phantom/, @$all), "$phase: no phantom tag delivered");
}

# A session whose open transaction runs one statement that appends
# phantom-$tag-<i> in a loop ($n times, sleeping $nap s after each append
# when $nap is given).  Returns (session, backend pid).
sub start_appending_loop
{
	my ($tag, $n, $nap) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	my $sleep = defined $nap ? "\n\t\tPERFORM pg_sleep($nap);" : '';
	$s->query_until(
		qr/started/, qq{\\echo started
BEGIN;
DO \$\$
BEGIN
	FOR i IN 1..$n LOOP
		PERFORM streamguard.append('cr', jsonb_build_object('tag', 'phantom-$tag-' || i), partition => i % 2);$sleep
	END LOOP;
END \$\$;
});
	return ($s, $pid);
}

sub wait_for_backend_sleeping
{
	my ($pid) = @_;
	return $node->poll_query_until('postgres',
		qq{SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $pid});
}

# ---------------------------------------------------------------------------
# Phase 0: pg_terminate_backend of a backend with an open appending
# transaction.  Not a crash: the backend aborts its transaction on the way
# out, and the horizon must move on without a restart.
# ---------------------------------------------------------------------------
my $term = $node->background_psql('postgres', on_error_stop => 0);
my $term_pid = $term->query_safe('SELECT pg_backend_pid()');
$term->query_safe(
	q{BEGIN; SELECT streamguard.append('cr', '{"tag": "phantom-term"}', partition => 0)});
append_committed(0, 'p0-after-term');
is( $node->safe_psql('postgres',
		q{BEGIN; SELECT count(*) FROM streamguard.poll('cr', 'c0', 100); ROLLBACK;}),
	'0',
	'phase0: committed append held behind the open one');
my $log_offset = log_offset($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($term_pid)");
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $term_pid"),
	'phase0: terminated backend is gone');
eval { $term->quit };
is_deeply(poll_ack('c0', 100), [ $committed{'p0-after-term'} . ':p0-after-term' ],
	'phase0: horizon moved on; the terminated transaction is never delivered');
ok( !$node->log_contains(qr/terminating any other active server processes/, $log_offset),
	'phase0: no crash restart');

# ---------------------------------------------------------------------------
# Phase 1: kill -9 of a backend mid-append.
# ---------------------------------------------------------------------------
append_committed(0, "p1-a$_") for 1 .. 5;
append_committed(1, "p1-b$_") for 1 .. 5;
append_committed(0, 'p1-dedup', 'dk-committed');

poll_ack('c1', 4);
is(scalar(@{ $acked{c1} }), 4, 'c1 acknowledged 4 events');
poll_ack_all('c2');
is(scalar(@{ $acked{c2} }), scalar(keys %committed), 'c2 acknowledged everything');

# c3: an open poll transaction at crash time; its advance must be lost.
my $bg_poll = $node->background_psql('postgres', on_error_stop => 0);
$bg_poll->query_safe('BEGIN');
is(scalar(@{ poll_lines('c3', 100, $bg_poll) }),
	scalar(keys %committed), 'c3 polled everything in an open transaction');

# An idle transaction that appended to both partitions, with a dedup key.
my $bg_idle = $node->background_psql('postgres', on_error_stop => 0);
$bg_idle->query_safe(q{BEGIN;
SELECT streamguard.append('cr', '{"tag": "phantom-idle-0"}', partition => 0, dedup_key => 'dk-phantom-1');
SELECT streamguard.append('cr', '{"tag": "phantom-idle-1"}', partition => 1);
});

# A committed append above the in-flight ones.
append_committed(0, 'p1-late-0');
append_committed(1, 'p1-late-1');

# Sanity: the horizon holds them back before the crash.
is( $node->safe_psql('postgres',
		q{BEGIN; SELECT count(*) FROM streamguard.poll('cr', 'c2', 100); ROLLBACK;}),
	'0',
	'late commits held behind the in-flight appends before the crash');

# The victim: a backend appending in a tight loop inside one statement, so
# that the kill lands inside append most of the time.
my $next_before = $node->safe_psql('postgres',
	q{SELECT sum(next_seq) FROM streamguard.stream_partitions WHERE stream = 'cr'});
my ($victim, $victim_pid) = start_appending_loop('mid', 10000000);
ok( $node->poll_query_until(
		'postgres',
		qq{SELECT sum(next_seq) > $next_before + 500 FROM streamguard.stream_partitions WHERE stream = 'cr'}),
	'victim is appending');
is($node->safe_psql('postgres', "SELECT state FROM pg_stat_activity WHERE pid = $victim_pid"),
	'active', 'victim is inside its appending statement');

$log_offset = log_offset($node);
note "kill -9 of backend $victim_pid";
is(kill('KILL', $victim_pid), 1, 'killed the victim backend');
ok(defined wait_crash_recovery($node, $log_offset),
	'server accepts connections after crash recovery');

foreach my $s ($victim, $bg_idle, $bg_poll)
{
	eval { $s->quit };
}

check_after_recovery('phase1', [ 'c0', 'c1', 'c2', 'c3' ]);

# The committed dedup key survives, the phantom one is gone.
is( $node->safe_psql('postgres',
		q{SELECT partition || ':' || seq FROM streamguard.append('cr', '{"tag": "retry"}', dedup_key => 'dk-committed')}
	),
	$committed{'p1-dedup'},
	'phase1: committed dedup key survives the crash');
my $max0 = max_committed_seq(0);
my (undef, $retry_seq) =
  split /:/, append_committed(0, 'p1-dedup-retry', 'dk-phantom-1');
cmp_ok($retry_seq, '>', $max0,
	'phase1: dedup key of an uncommitted append is free again (new event)');

# ---------------------------------------------------------------------------
# Phase 2: immediate shutdown with several open appending transactions.
# ---------------------------------------------------------------------------
append_committed(0, "p2-a$_") for 1 .. 3;
append_committed(1, "p2-b$_") for 1 .. 3;
poll_ack('c1', 5);
poll_ack('c2', 2);

my @open;
for my $i (1 .. 3)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe(qq{BEGIN;
SELECT streamguard.append('cr', '{"tag": "phantom-imm-$i-0"}', partition => 0, dedup_key => 'dk-phantom-imm-$i');
SELECT streamguard.append('cr', '{"tag": "phantom-imm-$i-1"}', partition => 1);
SELECT count(*) FROM streamguard.append_batch('cr',
	ARRAY['{"tag": "phantom-imm-$i-b1"}', '{"tag": "phantom-imm-$i-b2"}']::jsonb[]);
});
	push @open, $s;

	# A committed append between the open ones.
	append_committed($i % 2, "p2-between-$i");
}

# A subtransaction that appended and was released into an open transaction.
my $sub = $node->background_psql('postgres', on_error_stop => 0);
$sub->query_safe(q{BEGIN; SAVEPOINT s;
SELECT streamguard.append('cr', '{"tag": "phantom-sub"}', partition => 0);
RELEASE SAVEPOINT s;});
push @open, $sub;

# An open poll transaction of c1.
my $bg_poll2 = $node->background_psql('postgres', on_error_stop => 0);
$bg_poll2->query_safe('BEGIN');
cmp_ok(scalar(@{ poll_lines('c1', 3, $bg_poll2) }),
	'>', 0, 'c1 polled in an open transaction');
push @open, $bg_poll2;

# A statement appending in a loop.
my ($loop, $loop_pid) = start_appending_loop('loop', 100000, 0.01);
ok(wait_for_backend_sleeping($loop_pid), 'loop backend is appending');
push @open, $loop;

append_committed(0, 'p2-late-0');
append_committed(1, 'p2-late-1');

my %positions_before = map { ($_ => view_positions($_)) } qw(c1 c2 c3);
foreach my $c (qw(c1 c2))
{
	is($positions_before{$c}, expected_positions($c),
		"phase2: positions of $c before the shutdown match what was acknowledged");
}

$node->stop('immediate');
foreach my $s (@open)
{
	eval { $s->quit };
}
$node->start;

foreach my $c (qw(c1 c2 c3))
{
	is(view_positions($c), $positions_before{$c},
		"phase2: $c positions identical to before the shutdown");
}
check_after_recovery('phase2', [ 'c1', 'c2', 'c3' ]);

for my $i (1 .. 3)
{
	my $max = max_committed_seq(0);
	my (undef, $s) = split /:/, append_committed(0, "p2-retry-$i", "dk-phantom-imm-$i");
	cmp_ok($s, '>', $max,
		"phase2: dedup key $i of an uncommitted append is free again (new event)");
}

# Finally everything still adds up for a fresh reader.
my $final = check_order('final', poll_everything('final'));
is_deeply([ sort @$final ], committed_lines(),
	'final replay is exactly the committed events');

$node->stop;
done_testing();
