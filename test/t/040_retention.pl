
# Retention (docs/sql-reference.md create_stream and the
# consumers view).
#
# A stream with retention '2 seconds' and maintenance every second:
#  - old segments are dropped while appends continue (first_seq moves past
#    the first batch);
#  - the storage stays bounded: the segment count and the number of relations
#    do not grow over ~10 seconds of continuous appending;
#  - a consumer that keeps up loses nothing and lost_events stays 0;
#  - a consumer that was behind resumes at the oldest retained event, and its
#    lost_events counts exactly the committed events it missed (aborted appends
#    leave seq gaps that are not events and must not be counted);
#  - a consumer overtaken by retention again and again while it reads gets
#    every committed event either delivered or counted lost, exactly once;
#  - no event is removed before it is as old as the retention;
#  - an append dedup key is remembered for dedup_window, then forgotten.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $node = sg_node('retention', extra => "streamguard.maintenance_naptime = '1s'\n");

$node->safe_psql('postgres', q{CREATE EXTENSION streamguard});

my $relcount_sql = q{SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')};
my $rel_before = $node->safe_psql('postgres', $relcount_sql);

$node->safe_psql('postgres',
	q{SELECT streamguard.create_stream('ret', 1, retention => '2 seconds')});

# Committed seqs, in order, and the time just before the append that
# committed each one was issued.
my @committed;
my %appended_after;

sub append_n
{
	my ($n, $tag) = @_;
	my $t = time;
	my $r = $node->safe_psql('postgres',
		qq{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM streamguard.append_batch('ret',
			(SELECT array_agg(jsonb_build_object('tag', '$tag', 'i', g) ORDER BY g) FROM generate_series(1, $n) g))}
	);
	my @seqs = split /,/, $r;
	$appended_after{$_} = $t for @seqs;
	push @committed, @seqs;
}

sub poll_seqs
{
	my ($consumer, $max) = @_;
	my $r = $node->safe_psql('postgres',
		qq{SELECT seq FROM streamguard.poll('ret', '$consumer', $max)});
	return [ grep { $_ ne '' } split /\n/, $r ];
}

sub consumer_col
{
	my ($consumer, $col) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT $col FROM streamguard.consumers WHERE stream = 'ret' AND consumer = '$consumer' AND partition = 0}
	);
}

# "slow" exists before anything is appended, at position 0.
is_deeply(poll_seqs('slow', 10), [], 'slow consumer created on an empty stream');

# Phase A: seqs 1..30 committed, 31..40 aborted, 41..70 committed.
append_n(30, 'A');
$node->safe_psql('postgres', q{BEGIN;
SELECT count(*) FROM streamguard.append_batch('ret',
	(SELECT array_agg(jsonb_build_object('tag', 'aborted')) FROM generate_series(1, 10)));
ROLLBACK;});
append_n(30, 'A');
is_deeply(\@committed, [ 1 .. 30, 41 .. 70 ],
	'phase A: seqs 1..30 and 41..70 committed, 31..40 aborted');

# "mid" read 1..30 (position 30: its missed range contains the gap 31..40);
# "mid2" read 40 events (position 50: no gap in its missed range).
is_deeply(poll_seqs('mid', 30), [ 1 .. 30 ], 'mid read 1..30');
is_deeply(poll_seqs('mid2', 40), [ 1 .. 30, 41 .. 50 ], 'mid2 read 40 events');
is_deeply(poll_seqs('fast', 1000), [ 1 .. 30, 41 .. 70 ], 'fast read everything');
my @fast_seen = (1 .. 30, 41 .. 70);

# Every committed event below first_seq has been removed, no later than
# $t_read, and was appended no earlier than $appended_after{seq}: its age
# when removed was at most the difference.  Retention must not remove an
# event younger than 2 seconds.
my $min_age_removed;

sub removed_ages
{
	my ($first, $t_read) = @_;
	return if !defined $first || $first eq '';
	foreach my $seq (grep { $_ < $first } @committed)
	{
		my $age = $t_read - $appended_after{$seq};
		$min_age_removed = $age
		  if !defined $min_age_removed || $age < $min_age_removed;
	}
}

sub first_seq
{
	my $f = $node->safe_psql('postgres',
		q{SELECT first_seq FROM streamguard.stream_partitions WHERE stream = 'ret' AND partition = 0});
	removed_ages($f, time);
	return $f;
}

# "crawler" reads 2 events per round, in a transaction that stays open a
# little while (so retention often runs while it holds its position), and
# falls behind the producer: retention overtakes it again and again.  In the
# end every committed event must have been either delivered to it or counted
# in its lost_events, never both, never neither.
my $crawler = $node->background_psql('postgres');
my @crawled;

sub crawl
{
	my ($max, $hold) = @_;
	my $out = $crawler->query_safe(
		qq{BEGIN; SELECT seq FROM streamguard.poll('ret', 'crawler', $max); SELECT pg_sleep($hold); COMMIT;});
	my @got = grep { /^\d+$/ } split /\n/, $out;
	push @crawled, @got;
	return scalar(@got);
}

# Keep appending for ~12 seconds; fast keeps up.  Sample the storage.
my $t0 = time;
my ($a_dropped_at, $max_segments, @relcounts) = (undef, 0);
my $i = 0;
while (time - $t0 < 12)
{
	append_n(3, 'B');
	push @fast_seen, @{ poll_seqs('fast', 1000) };
	crawl(2, 0.1);
	my ($first, $segments, $rel) = split /\|/, $node->safe_psql(
		'postgres', qq{SELECT sp.first_seq, s.segments, ($relcount_sql)
		FROM streamguard.stream_partitions sp JOIN streamguard.streams s USING (stream)
		WHERE sp.stream = 'ret' AND sp.partition = 0});
	my $t_read = time;
	$a_dropped_at //= $t_read - $t0 if defined $first && $first ne '' && $first > 70;
	removed_ages($first, $t_read);
	$max_segments = $segments if $segments > $max_segments;
	push @relcounts, [ time - $t0, $rel ];
	usleep(100_000);
	$i++;
}
ok(defined $a_dropped_at, 'phase A segments were dropped while appending continued')
  and note "phase A dropped after $a_dropped_at s";
cmp_ok($max_segments, '<=', 8,
	"segment count stays bounded (max $max_segments)");
my ($rel_early) = map { $_->[1] } grep { $_->[0] >= 3 } @relcounts;
my $rel_max_late = 0;
$rel_max_late = $_->[1] > $rel_max_late ? $_->[1] : $rel_max_late
  for grep { $_->[0] >= 8 } @relcounts;
note "relations: before stream $rel_before, at 3 s $rel_early, max after 8 s $rel_max_late";
cmp_ok($rel_max_late, '<=', $rel_early + 4,
	'relation count does not grow while appending continues');

is_deeply(\@fast_seen, \@committed,
	'fast consumer got every committed event in order');
is(consumer_col('fast', 'lost_events'), '0',
	'a consumer that keeps up loses nothing');

my $retained = $node->safe_psql('postgres',
	q{SELECT retained_events FROM streamguard.streams WHERE stream = 'ret'});
first_seq();
cmp_ok($retained, '<=', 3 * 5 * 6,
	"retained events bounded ($retained, at most ~6 s of appends)");

# From here on nothing more is removed, so that what the consumers below
# find does not depend on how soon this machine gets to them (at load 14,
# retention once removed everything before "mid2" polled): the retention
# goes up to 5 minutes, and a last batch is appended that every consumer must
# get.
$node->safe_psql('postgres', q{SELECT streamguard.alter_stream('ret', retention => '5 minutes')});
append_n(3, 'C');
is_deeply(poll_seqs('fast', 1000), [ @committed[-3 .. -1] ], 'fast gets the last batch too');

# The consumers that were behind resume at the oldest retained event and count
# exactly the committed events they missed.
foreach my $c ([ 'slow', 0 ], [ 'mid', 30 ], [ 'mid2', 50 ])
{
	my ($name, $pos) = @$c;

	my $first_before = first_seq();
	my $got = poll_seqs($name, 100000);
	my $first_after = first_seq();
	ok(scalar(@$got) > 0, "$name got events");
	my $s1 = $got->[0];
	cmp_ok($s1, '>', 70, "$name skipped the dropped phase A");
	cmp_ok($s1, '>=', $first_before, "$name never reads below first_seq");
	if ($first_before == $first_after)
	{
		is($s1, $first_before, "$name resumes at the oldest retained event");
	}
	my @retained = grep { $_ >= $s1 } @committed;
	is_deeply($got, \@retained, "$name then gets every retained event in order");

	my $missed = grep { $_ > $pos && $_ < $s1 } @committed;
	is(consumer_col($name, 'lost_events'), $missed,
		"$name lost_events counts exactly the $missed committed events it missed");
}

# The crawler drains what is left.
for (1 .. 100)
{
	last if crawl(100000, 0) == 0;
}
$crawler->quit;
my %is_committed = map { ($_ => 1) } @committed;
is(scalar(grep { !$is_committed{$_} } @crawled), 0,
	'crawler got only committed events');
my $crawl_sorted = 1;
for my $j (1 .. $#crawled)
{
	$crawl_sorted = 0 if $crawled[$j] <= $crawled[ $j - 1 ];
}
ok($crawl_sorted, 'crawler got events in strictly increasing seq order');
my $crawler_lost = consumer_col('crawler', 'lost_events');
cmp_ok($crawler_lost, '>', 0, 'retention overtook the crawler');
is(scalar(@crawled) + $crawler_lost,
	scalar(@committed),
	'crawler: delivered + lost_events = committed events ('
	  . scalar(@crawled)
	  . " + $crawler_lost)");

# the retention of the rest of the test, once the crawler has drained (a
# drop under way while it polls can hand it an empty poll, which would end
# its drain early)
$node->safe_psql('postgres', q{SELECT streamguard.alter_stream('ret', retention => '2 seconds')});

# Dedup window: a key is remembered for dedup_window, then maintenance lets
# it go.
$node->safe_psql('postgres',
	q{SELECT streamguard.create_stream('dw', 1, dedup_window => '1 second')});
my $t_key = time;
my $orig = $node->safe_psql('postgres',
	q{SELECT seq FROM streamguard.append('dw', '{"n": 1}', dedup_key => 'k')});
my $dup = $node->safe_psql('postgres',
	q{SELECT seq FROM streamguard.append('dw', '{"n": 2}', dedup_key => 'k')});
my $dup_age = time - $t_key;
is($dup, $orig, "dedup key remembered within the window (retry after $dup_age s)")
  if $dup_age < 0.9;
my ($expired_after, $probe);
for (1 .. 100)    # bounded: ~20 s
{
	$probe = $node->safe_psql('postgres',
		q{BEGIN; SELECT seq FROM streamguard.append('dw', '{"n": 3}', dedup_key => 'k'); ROLLBACK;});
	if ($probe ne $orig)
	{
		$expired_after = time - $t_key;
		last;
	}
	usleep(200_000);
}
ok(defined $expired_after, 'dedup key forgotten after the window')
  and note "dedup key forgotten at most $expired_after s after its append";
cmp_ok($expired_after // 0, '>=', 1.0,
	'dedup key not forgotten before the window (1 s) passed');
my $again = $node->safe_psql('postgres',
	q{SELECT seq FROM streamguard.append('dw', '{"n": 4}', dedup_key => 'k')});
cmp_ok($again, '>', $orig, 'after the window the same key appends a new event');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(seq || ':' || (payload->>'n'), ',' ORDER BY seq) FROM streamguard.poll('dw', 'c', 100)}),
	"$orig:1,$again:4",
	'dw holds exactly the first event and the one appended after the window');

ok(defined $min_age_removed, 'some events were removed')
  and note "youngest removed event was at most $min_age_removed s old";
cmp_ok($min_age_removed, '>=', 2.0,
	'no event was removed before it was 2 seconds (the retention) old');

# Retention empties the stream completely; a crash after that must not
# restart the seqs (a reused seq would be at or below the consumers'
# positions and silently skipped).
my $emptied = 0;
for (1 .. 60)    # bounded: ~30 s; expected within ~4 s
{
	# a fresh consumer (rolled back) sees nothing: no event is retained
	if ($node->safe_psql('postgres',
			q{BEGIN; SELECT count(*) FROM streamguard.poll('ret', 'probe', 100000); ROLLBACK;}) eq '0')
	{
		$emptied = 1;
		last;
	}
	usleep(500_000);
}
ok($emptied, 'retention removed every event of the stream');
my $max_committed = $committed[-1];
$node->stop('immediate');
$node->start;
append_n(1, 'after-crash');
cmp_ok($committed[-1], '>', $max_committed,
	'after retention emptied the stream and a crash, seqs continue above every seq ever committed');
is_deeply(poll_seqs('fast', 1000), [ $committed[-1] ],
	'the up-to-date consumer gets the new event');
is(consumer_col('fast', 'lost_events'), '0', 'and still lost nothing');

$node->stop;
done_testing();
