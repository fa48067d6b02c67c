
# Preload requirement and restart durability.
#
# Without shared_preload_libraries = 'streamguard', CREATE EXTENSION works but
# every function fails with SQLSTATE 55000 and a hint naming the setting, so
# do the views whose rows come from shared memory (the others answer from
# the catalog), and no backend crashes.  With the library preloaded the functions work, and a
# restart keeps streams, keeps every committed event with its seq, continues the
# seq counters above every committed seq (no reuse), keeps consumer positions
# exactly as committed, and forgets what an open transaction did at shutdown.
# A stream of the same name in another database is a different stream.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

# the library is preloaded only in part 2
my $node = sg_node('preload', preload => 0);

# ---------------------------------------------------------------------------
# 1. Not preloaded.
# ---------------------------------------------------------------------------
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'library is not preloaded');

my ($ret, $out, $err) =
  $node->psql('postgres', 'CREATE EXTENSION streamguard');
is($ret, 0, 'CREATE EXTENSION works without preload') or diag $err;

my @calls = (
	q{SELECT streamguard.create_stream('s1', 2)},
	q{SELECT streamguard.drop_stream('s1')},
	q{SELECT streamguard.drop_stream('s1', force => true)},
	q{SELECT streamguard.append('s1', '{"a": 1}')},
	q{SELECT streamguard.append('s1', '{"a": 1}', key => 'k', dedup_key => 'd')},
	q{SELECT * FROM streamguard.append_batch('s1', ARRAY['{"a": 1}']::jsonb[])},
	q{SELECT * FROM streamguard.poll('s1', 'c')},
	q{SELECT * FROM streamguard.poll('s1', 'c', 10)},
	q{SELECT streamguard.seek('s1', 'c', 0, 1)},
	q{SELECT streamguard.seek('s1', 'c', now())},
	q{SELECT streamguard.drop_consumer('s1', 'c')},
	q{SELECT streamguard.grant_stream('s1', 'postgres')},
	q{SELECT streamguard.revoke_stream('s1', 'postgres')},);

foreach my $sql (@calls)
{
	my ($ok, $out, $stderr) = try_psql($node, $sql);
	is(sqlstate($stderr), '55000', "not preloaded: $sql fails with 55000")
	  or diag $stderr;
	like($stderr, qr/HINT:.*shared_preload_libraries/,
		"not preloaded: $sql has a hint naming shared_preload_libraries");
}

# The views, with nothing in the catalog: each answers (nothing to show) or
# fails with 55000; none crashes the server (worker_slots did, reading
# shared memory before the check).  Part 5 checks them with streams and a
# pipeline in the catalog.
sub view_names
{
	return split /\n/, $node->safe_psql('postgres',
		q{SELECT relname FROM pg_class WHERE relnamespace = 'streamguard'::regnamespace AND relkind = 'v' ORDER BY 1});
}
foreach my $view (view_names())
{
	my ($ok, $out, $stderr) = try_psql($node, "SELECT count(*) FROM streamguard.$view");
	ok($ok || sqlstate($stderr) eq '55000', "not preloaded, empty catalog: view $view answers or fails with 55000")
	  or diag $stderr;
}

is($node->safe_psql('postgres', 'SELECT 1'), '1', 'server still up');
ok( !$node->log_contains(qr/terminated by signal|server process .* exited with exit code [^0]/),
	'no backend crashed while not preloaded');

# ---------------------------------------------------------------------------
# 2. Preloaded.
# ---------------------------------------------------------------------------
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'streamguard'\n");
$node->restart;

is($node->safe_psql('postgres', q{SELECT streamguard.create_stream('s1', 2)}),
	'', 'create_stream works once preloaded');

# Committed events: tag => [partition, seq].
my %committed;

sub append_committed
{
	my ($p, $tag) = @_;
	my $r = $node->safe_psql('postgres',
		qq{SELECT partition || ',' || seq FROM streamguard.append('s1', jsonb_build_object('tag', '$tag'), partition => $p)}
	);
	my ($rp, $rs) = split /,/, $r;
	is($rp, $p, "$tag landed in partition $p");
	$committed{$tag} = [ $rp, $rs ];
	return $rs;
}

append_committed(0, "a$_") for 1 .. 3;
append_committed(1, "b$_") for 1 .. 2;
is_deeply([ map { $committed{"a$_"}[1] } 1 .. 3 ],
	[ 1, 2, 3 ], 'seqs start at 1 in partition 0');
is_deeply([ map { $committed{"b$_"}[1] } 1 .. 2 ],
	[ 1, 2 ], 'seqs start at 1 in partition 1');

# An aborted append leaves a gap.
$node->safe_psql('postgres',
	q{BEGIN; SELECT streamguard.append('s1', '{"tag": "aborted-1"}', partition => 0); ROLLBACK;}
);
append_committed(0, 'a4');
cmp_ok($committed{a4}[1], '>', $committed{a3}[1], 'seq after a gap is higher');

# Consumers: c1 acknowledges 3 events, c2 everything.
# Returns "p:seq:tag" lines in poll order.
sub poll_tags
{
	my ($consumer, $max, $sess) = @_;
	my $sql =
	  qq{SELECT partition || ':' || seq || ':' || (payload->>'tag') FROM streamguard.poll('s1', '$consumer', $max)};
	my $r = $sess ? $sess->query_safe($sql) : $node->safe_psql('postgres', $sql);
	return [ grep { $_ ne '' } split /\n/, $r ];
}

my $c1 = poll_tags('c1', 3);
is(scalar(@$c1), 3, 'c1 consumed 3 events');
my $c2 = poll_tags('c2', 100);
is(scalar(@$c2), 6, 'c2 consumed all 6 committed events');
ok(!grep(/aborted/, @$c2), 'aborted append never delivered');

my $positions_sql = q{SELECT consumer || ':' || partition || ':' || committed_seq
  FROM streamguard.consumers WHERE stream = 's1' ORDER BY consumer, partition};
my $positions_before = $node->safe_psql('postgres', $positions_sql);
my ($last0, $last1) = ($committed{a4}[1], $committed{b2}[1]);
like($positions_before, qr/^c2:0:$last0\nc2:1:$last1$/m,
	'c2 positions at the last seq of each partition');

my $last_before = $node->safe_psql('postgres',
	q{SELECT partition || ':' || last_seq FROM streamguard.stream_partitions WHERE stream = 's1' ORDER BY partition}
);
is($last_before, "0:$committed{a4}[1]\n1:$committed{b2}[1]",
	'last_seq per partition before restart');

# Open transactions at shutdown: an append and a poll that advanced c1 again.
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(
	q{BEGIN; SELECT streamguard.append('s1', '{"tag": "open-at-shutdown"}', partition => 1)}
);
my $bgc = $node->background_psql('postgres', on_error_stop => 0);
$bgc->query_safe('BEGIN');
my $c1_open = poll_tags('c1', 100, $bgc);
is(scalar(@$c1_open), 3, 'open transaction polled the rest for c1');

$node->restart;    # fast shutdown terminates both open transactions
eval { $bg->quit };
eval { $bgc->quit };

# ---------------------------------------------------------------------------
# 3. After the restart.
# ---------------------------------------------------------------------------
is( $node->safe_psql('postgres',
		q{SELECT stream || ':' || partitions FROM streamguard.streams WHERE stream = 's1'}),
	's1:2',
	'stream survives restart');
is($node->safe_psql('postgres', $positions_sql),
	$positions_before, 'consumer positions exactly as committed');

my $a5 = append_committed(0, 'a5');
my $b3 = append_committed(1, 'b3');
cmp_ok($a5, '>', $committed{a4}[1], 'partition 0 seq continues after restart');
cmp_ok($b3, '>', $committed{b2}[1], 'partition 1 seq continues after restart');

# c1 gets exactly the events it had not acknowledged, in seq order.
my %c1_acked = map { ($_ => 1) } @$c1;
my @expect_c1 = grep { !$c1_acked{$_} }
  map { "$committed{$_}[0]:$committed{$_}[1]:$_" } keys %committed;
my $got_c1 = poll_tags('c1', 100);
is_deeply([ sort { $a cmp $b } @$got_c1 ],
	[ sort { $a cmp $b } @expect_c1 ],
	'c1 resumes at its committed position (no loss, no redelivery, no phantom)');
foreach my $p (0, 1)
{
	my @seqs = map { (split /:/)[1] } grep { /^$p:/ } @$got_c1;
	is_deeply(\@seqs, [ sort { $a <=> $b } @seqs ],
		"c1 partition $p delivered in seq order");
}

is_deeply([ sort { $a cmp $b } @{ poll_tags('c2', 100) } ],
	[ sort { $a cmp $b } "0:$a5:a5", "1:$b3:b3" ],
	'c2 gets only the events appended after the restart');

# A new consumer reads the whole stream: every committed event with the seq
# it had before the restart, nothing from open or aborted transactions.
my %expect_all = map { ("$committed{$_}[0]:$committed{$_}[1]:$_" => 1) }
  keys %committed;
is_deeply([ sort { $a cmp $b } @{ poll_tags('c3', 100) } ],
	[ sort { $a cmp $b } keys %expect_all ],
	'full replay equals the committed events with their seqs');

is( $node->safe_psql('postgres',
		q{SELECT bool_and(readable_horizon = next_seq) FROM streamguard.stream_partitions WHERE stream = 's1'}
	),
	't',
	'nothing in flight after restart: horizon equals next_seq');

# ---------------------------------------------------------------------------
# 4. A stream lives in its database: the same name in another database has its
#    own seqs and its own horizon.
# ---------------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE db2');
$node->safe_psql('db2', q{CREATE EXTENSION streamguard; SELECT streamguard.create_stream('s1', 2);});
my $open1 = $node->background_psql('postgres');
$open1->query_safe(
	q{BEGIN; SELECT streamguard.append('s1', '{"tag": "db1-open"}', partition => 0)});
is( $node->safe_psql('db2',
		q{SELECT partition || ':' || seq FROM streamguard.append('s1', '{"tag": "db2-a"}', partition => 0)}),
	'0:1',
	'same stream name in another database starts at seq 1');
is( $node->safe_psql('db2',
		q{SELECT string_agg(partition || ':' || seq || ':' || (payload->>'tag'), ',') FROM streamguard.poll('s1', 'c', 100)}),
	'0:1:db2-a',
	'an open append in one database does not hold back the other database');
$open1->query_safe('ROLLBACK');
$open1->quit;
$node->safe_psql('db2', q{SELECT streamguard.drop_stream('s1', force => true)});
is( $node->safe_psql('postgres',
		q{SELECT stream || ':' || partitions FROM streamguard.streams WHERE stream = 's1'}),
	's1:2',
	'dropping the stream in db2 leaves db1 alone');
my $a6 = append_committed(0, 'a6');
cmp_ok($a6, '>', $a5, 'db1 seqs unaffected by db2');
is_deeply(poll_tags('c2', 100), [ "0:$a6:a6" ], 'db1 consumer unaffected by db2');

# ---------------------------------------------------------------------------
# 5. Not preloaded again, with streams, consumers and a pipeline in the
#    catalog: the views whose rows come from shared memory (counters,
#    workers, open appends, group members, worker slots) fail as the
#    functions do, with 55000 and the hint, instead of showing rows without
#    their state; the views over the catalog only (definitions, dead
#    letters, captures, windows) answer.
# ---------------------------------------------------------------------------
$node->safe_psql('postgres', q{CREATE TABLE sink (n int);
SELECT streamguard.create_pipeline('p1', 's1', $$INSERT INTO sink SELECT 1 FROM batch$$);});
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM streamguard.pipeline_batches WHERE pipeline = 'p1'}, 't', 120),
	'the pipeline committed a batch');
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
my %runtime_view = map { $_ => 1 } qw(streams stream_partitions consumers consumer_group_members
  horizon_holders pipelines pipeline_workers pipeline_batches pipeline_batch_durations worker_slots);
my @views = view_names();
cmp_ok(scalar(@views), '>=', 16, 'the views are listed');
foreach my $view (@views)
{
	my ($ok, $out, $stderr) = try_psql($node, "SELECT count(*) FROM streamguard.$view");
	if ($runtime_view{$view})
	{
		is(sqlstate($stderr), '55000', "not preloaded: view $view fails with 55000") or diag "$out $stderr";
		like($stderr, qr/must be loaded via shared_preload_libraries.*HINT:.*shared_preload_libraries/s,
			"not preloaded: view $view says why, with the hint");
	}
	else
	{
		ok($ok || sqlstate($stderr) eq '55000', "not preloaded: view $view answers or fails with 55000")
		  or diag $stderr;
	}
}
delete $runtime_view{$_} for @views;
is(join(',', sort keys %runtime_view), '', 'every runtime view exists');
ok( !$node->log_contains(qr/terminated by signal/), 'no backend crashed');

$node->stop;
done_testing();
