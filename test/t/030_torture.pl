
# Concurrent producers and consumers (docs/guarantees.md invariants 1-5).
#
# Four pgbench producer clients append to a 4-partition stream, mixing single
# appends (by key, by explicit partition, spread), released and rolled-back
# savepoints, append_batch, concurrent dedup keys, random think time inside the
# transaction (late commits) and random rollbacks.  Every producer transaction
# records what it appended - the payload's unique id and the position append
# returned - in committed_ids in the SAME transaction, so committed_ids is
# exactly the set of committed appends.
#
# Meanwhile two pgbench consumer clients poll with the same consumer name and
# insert what they got into seen in the SAME transaction as the poll (COMMIT
# acknowledges and records; 10% of the transactions roll back both; 20% run
# under REPEATABLE READ).  After
# the producers stop, the test drains the stream.
#
# Then: seen == committed events exactly (no loss, no duplicate, no phantom),
# per partition seq strictly increasing in the order seen, a dedup key never
# produced two events, a key always mapped to the same partition, an explicit
# partition was honoured, and the consumer's positions are at the end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use IPC::Run;
use Time::HiRes qw(time);

my $duration = 15;    # seconds of concurrent load (~40k events here)

my $node = sg_node('torture', extra => "max_connections = 40\nshared_buffers = 128MB\n");

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('tort', 4);
CREATE SEQUENCE ids;
-- One row per committed append: the id in its payload, the key / explicit
-- partition / dedup key it was appended with and the position append returned.
CREATE TABLE committed_ids (
	id bigint PRIMARY KEY,
	k text,
	req_partition int,
	dk text,
	partition int NOT NULL,
	seq bigint NOT NULL);
-- One row per delivered event, in delivery order.
CREATE TABLE seen (
	ord bigserial PRIMARY KEY,
	id bigint,
	k text,
	dk text,
	partition int,
	seq bigint);
});

my $dir = PostgreSQL::Test::Utils::tempdir;

sub write_script
{
	my ($name, $text) = @_;
	my $path = "$dir/$name";
	open my $fh, '>', $path or die "could not write $path: $!";
	print $fh $text;
	close $fh;
	return $path;
}

# SQL that appends {"id": <a new id>} with streamguard.append('tort', ...$args)
# and records the id, the columns => values of %rec and the position in
# committed_ids, in the same transaction
sub recorded_append
{
	my ($args, %rec) = @_;
	my $cols = join('', map { ", $_" } sort keys %rec);
	my $vals = join('', map { ", $rec{$_}" } sort keys %rec);
	return "WITH i AS (SELECT nextval('ids') AS id),\n"
	  . "\t a AS (SELECT i.id, e.* FROM i, streamguard.append('tort', jsonb_build_object('id', i.id)$args) e)\n"
	  . "INSERT INTO committed_ids (id$cols, partition, seq) SELECT id$vals, partition, seq FROM a;\n";
}

# the end of a producer transaction: rolled back when :roll is 1
my $commit_or_rollback = q{\if :roll = 1
ROLLBACK;
\else
COMMIT;
\endif
};

# Three single appends (by key, by explicit partition inside a savepoint that
# is sometimes rolled back, spread), random think time, 1 in 8 rolled back.
my $prod_single = write_script('prod_single.sql', q{
\set k random(1, 50)
\set p random(0, 3)
\set sub random(1, 4)
\set nap random(0, 2)
\set roll random(1, 8)
BEGIN;
} . recorded_append(q{, key => 'k' || :k}, k => q{'k' || :k}) . q{SAVEPOINT s;
} . recorded_append(q{, partition => :p}, req_partition => ':p') . q{\if :sub = 1
ROLLBACK TO SAVEPOINT s;
\else
RELEASE SAVEPOINT s;
\endif
} . recorded_append('') . q{\sleep :nap ms
} . $commit_or_rollback);

# append_batch of 2..20 keyed events, 1 in 8 rolled back.
my $prod_batch = write_script('prod_batch.sql', q{
\set n random(2, 20)
\set roll random(1, 8)
BEGIN;
WITH i AS MATERIALIZED (
		SELECT nextval('ids') AS id, 'k' || (1 + (random() * 49)::int) AS k
		  FROM generate_series(1, :n)),
	 arr AS (SELECT array_agg(id ORDER BY id) AS ids,
					array_agg(jsonb_build_object('id', id) ORDER BY id) AS payloads,
					array_agg(k ORDER BY id) AS keys FROM i),
	 a AS (SELECT arr.ids[e.ord] AS id, arr.keys[e.ord] AS k, e.partition, e.seq
			 FROM arr, streamguard.append_batch('tort', arr.payloads, keys => arr.keys)
				  WITH ORDINALITY AS e(partition, seq, ord))
INSERT INTO committed_ids (id, k, partition, seq) SELECT id, k, partition, seq FROM a;
} . $commit_or_rollback);

# One append with a dedup key from a small space shared by all producers:
# concurrent producers collide, wait for each other, and a duplicate returns the
# original position (recorded too: several ids, one position).
my $prod_dedup = write_script('prod_dedup.sql', q{
\set d random(1, 1500)
\set nap random(0, 2)
\set roll random(1, 4)
BEGIN;
} . recorded_append(q{, dedup_key => 'd' || :d}, dk => q{'d' || :d}) . q{\sleep :nap ms
} . $commit_or_rollback);

# A consumer transaction: poll up to 400 events and record them in seen,
# between $begin and $end.
sub consume_script
{
	my ($name, $begin, $end) = @_;
	return write_script($name, qq{
\\set n random(1, 400)
$begin;
INSERT INTO seen (id, k, dk, partition, seq)
	SELECT (payload->>'id')::bigint, key, dedup_key, partition, seq
	  FROM streamguard.poll('tort', 'tc', :n);
$end;
\\sleep 1 ms
});
}

my $consume = consume_script('consume.sql', 'BEGIN', 'COMMIT');
my $consume_rollback = consume_script('consume_rollback.sql', 'BEGIN', 'ROLLBACK');
# The same under REPEATABLE READ: a concurrent acknowledgement after the
# snapshot raises 40001, which pgbench retries (--max-tries).
my $consume_rr = consume_script('consume_rr.sql', 'BEGIN ISOLATION LEVEL REPEATABLE READ', 'COMMIT');

my @conn = ('-h', $node->host, '-p', $node->port, 'postgres');

sub start_pgbench
{
	my ($out, $err, @args) = @_;
	return IPC::Run::start(
		[ 'pgbench', '-n', '--max-tries=20', '--failures-detailed', @args, @conn ],
		'>', $out, '2>', $err,
		IPC::Run::timeout($duration + 90));
}

my ($pout, $perr, $cout, $cerr) = ('', '', '', '');
my $t0 = time;
my $producers = start_pgbench(\$pout, \$perr, '-c', '4', '-j', '2',
	'-T', $duration, '-f', "$prod_single\@6", '-f', "$prod_batch\@1",
	'-f', "$prod_dedup\@3");
my $consumers = start_pgbench(\$cout, \$cerr, '-c', '2', '-j', '1',
	'-T', $duration, '-f', "$consume\@7", '-f', "$consume_rr\@2",
	'-f', "$consume_rollback\@1");

$producers->finish;
my $prod_rc = $?;
$consumers->finish;
my $cons_rc = $?;
note sprintf("load ran %.1f s", time - $t0);
note "producers:\n$pout\n$perr";
note "consumers:\n$cout\n$cerr";

is($prod_rc, 0, 'producer pgbench exited cleanly') or diag $perr;
is($cons_rc, 0, 'consumer pgbench exited cleanly') or diag $cerr;
like($pout, qr/number of failed transactions: 0 /,
	'no producer transaction failed') or diag $pout;
like($cout, qr/number of failed transactions: 0 /,
	'no consumer transaction failed') or diag $cout;

# The consumers kept up during the load: most events were consumed while
# producers were appending, not by the final drain.
my $seen_during = $node->safe_psql('postgres', 'SELECT count(*) FROM seen');
my $committed_during = $node->safe_psql('postgres', 'SELECT count(*) FROM committed_ids');
note "seen during the load: $seen_during of $committed_during committed appends";
cmp_ok($seen_during, '>', $committed_during / 2,
	'consumers ran concurrently with the producers');

# Drain: poll until nothing is left (all producers are gone, so nothing is in
# flight and the horizon is next_seq).
ok( $node->poll_query_until(
		'postgres',
		q{SELECT bool_and(readable_horizon = next_seq) FROM streamguard.stream_partitions WHERE stream = 'tort'}
	),
	'horizon caught up with next_seq once producers stopped');
# each try records the next events; done when a try finds none
ok( wait_for_value($node, q{
WITH ins AS (
	INSERT INTO seen (id, k, dk, partition, seq)
	SELECT (payload->>'id')::bigint, key, dedup_key, partition, seq
	  FROM streamguard.poll('tort', 'tc', 100000)
	RETURNING 1)
SELECT count(*) FROM ins}, '0', 60),
	'stream drained');

my $committed_events = $node->safe_psql('postgres',
	'SELECT count(*) FROM (SELECT DISTINCT partition, seq FROM committed_ids) c');
my $seen_events = $node->safe_psql('postgres', 'SELECT count(*) FROM seen');
my $ids_used = $node->safe_psql('postgres', 'SELECT last_value FROM ids');
note "committed events: $committed_events, seen: $seen_events, ids drawn: $ids_used";
cmp_ok($committed_events, '>=', 5000, 'a substantial number of events committed');
cmp_ok($ids_used, '>', $committed_events, 'some appends were rolled back');
cmp_ok(
	$node->safe_psql('postgres',
		'SELECT count(*) - count(DISTINCT (partition, seq)) FROM committed_ids WHERE dk IS NOT NULL'
	),
	'>', 0,
	'duplicate dedup keys were appended');

sub zero
{
	my ($sql, $what) = @_;
	my $r = $node->safe_psql('postgres', $sql);
	is($r, '0', $what);
}

zero(q{SELECT count(*) FROM (SELECT partition, seq FROM seen GROUP BY 1, 2 HAVING count(*) > 1) d},
	'no event delivered twice (partition, seq)');
zero(q{SELECT count(*) FROM (SELECT id FROM seen GROUP BY id HAVING count(*) > 1) d},
	'no event delivered twice (id)');
zero(q{SELECT count(*) FROM (SELECT DISTINCT partition, seq FROM committed_ids) c
	WHERE NOT EXISTS (SELECT 1 FROM seen s WHERE s.partition = c.partition AND s.seq = c.seq)},
	'no loss: every committed event was delivered');
zero(q{SELECT count(*) FROM seen s
	WHERE NOT EXISTS (SELECT 1 FROM committed_ids c
		WHERE c.id = s.id AND c.partition = s.partition AND c.seq = s.seq)},
	'no phantom: every delivered event is a committed append at the position append returned');
zero(q{SELECT count(*) FROM (
	SELECT seq, lag(seq) OVER (PARTITION BY partition ORDER BY ord) AS prev FROM seen) x
	WHERE seq <= prev},
	'per partition, seq strictly increasing in delivery order');
zero(q{SELECT count(*) FROM (SELECT dk FROM seen WHERE dk IS NOT NULL GROUP BY dk HAVING count(*) > 1) d},
	'a dedup key never produced two events');
zero(q{SELECT count(*) FROM (SELECT dk FROM committed_ids WHERE dk IS NOT NULL
	GROUP BY dk HAVING count(DISTINCT (partition, seq)) > 1) d},
	'every append of one dedup key returned the same position');
zero(q{SELECT count(*) FROM seen s JOIN committed_ids c USING (id)
	WHERE s.k IS DISTINCT FROM c.k OR s.dk IS DISTINCT FROM c.dk},
	'delivered key and dedup_key are the appended ones');
zero(q{SELECT count(*) FROM (SELECT k FROM committed_ids WHERE k IS NOT NULL
	GROUP BY k HAVING count(DISTINCT partition) > 1) d},
	'a key always maps to the same partition');
zero(q{SELECT count(*) FROM committed_ids WHERE req_partition IS NOT NULL AND req_partition <> partition},
	'an explicit partition is honoured');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT partition) FROM seen'),
	'4', 'events landed in all 4 partitions');
# The position is the last consumed seq: at least the last delivered one and
# below the horizon (trailing aborted seqs may or may not count as consumed).
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM streamguard.consumers c
  JOIN streamguard.stream_partitions sp USING (stream, partition)
  JOIN (SELECT partition, max(seq) AS max_seq FROM seen GROUP BY partition) m USING (partition)
 WHERE c.stream = 'tort' AND c.consumer = 'tc'
   AND c.committed_seq >= m.max_seq AND c.committed_seq < sp.readable_horizon}),
	'4',
	'consumer positions are at the end of every partition');

$node->stop;
done_testing();
