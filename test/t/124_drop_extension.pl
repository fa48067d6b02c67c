# DROP EXTENSION streamguard CASCADE while everything runs: pipelines in
# batches, a window, the maintenance worker, a captured table under
# concurrent writers, producers appending, and monitoring queries over the
# views.  Each of these takes the extension's locks in its own order; the
# drop must neither fail (a deadlock it loses, a lock it cannot get) nor
# leave anything behind, and the writers of the captured table must go on
# once it is gone.  Several rounds of create / run / drop.  (DROP SCHEMA
# streamguard CASCADE is refused: the extension requires its schema.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamguardTest;

my $rounds = $ENV{SG_DROP_ROUNDS} // 4;
my $node = sg_node('dropext', extra => "streamguard.launcher_naptime = '200ms'\n"
	  . "deadlock_timeout = '100ms'\nlog_lock_waits = on\n"
	  # a backfill still running at every drop
	  . "streamguard.backfill_chunk_rows = 50\nstreamguard.backfill_naptime = '300ms'\n");
my $bindir = $node->config_data('--bindir');
my $dir = PostgreSQL::Test::Utils::tempdir;

$node->safe_psql('postgres', q{
CREATE TABLE orders (id bigserial PRIMARY KEY, customer int NOT NULL, amount numeric NOT NULL);
INSERT INTO orders (customer, amount) SELECT g % 50, g FROM generate_series(1, 2000) g;
});

# the load: each script in its own pgbench, so that the ones the drop ends
# (appends, view queries: their functions are gone) do not end the others
my %scripts = (
	append => q{SELECT streamguard.append('s', jsonb_build_object('c', (random() * 50)::int, 'a', 1), 'k' || (random() * 9)::int);},
	orders => q{INSERT INTO orders (customer, amount) VALUES ((random() * 50)::int, 1);
UPDATE orders SET amount = amount + 1 WHERE id = (SELECT (random() * 1999)::int + 1);},
	views => q{SELECT count(*) FROM streamguard.pipelines; SELECT count(*) FROM streamguard.consumers;
SELECT count(*) FROM streamguard.streams; SELECT count(*) FROM streamguard.windows;},);
for my $s (keys %scripts)
{
	open(my $fh, '>', "$dir/$s.sql") or die $!;
	print $fh $scripts{$s}, "\n";
	close $fh;
}

sub start_load
{
	my ($round) = @_;
	my @pids;
	for my $s (sort keys %scripts)
	{
		my $pid = fork();
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			open(STDOUT, '>', "$dir/$s.$round.out");
			open(STDERR, '>&', \*STDOUT);
			exec("$bindir/pgbench", '-n', '-h', $node->host, '-p', $node->port, '-c', '2', '-j', '1',
				'-T', '120', '-f', "$dir/$s.sql", 'postgres') or exit 1;
		}
		push @pids, $pid;
	}
	return @pids;
}

sub stop_load
{
	for my $pid (@_)
	{
		kill 'TERM', $pid;
		waitpid($pid, 0);
	}
}

sub setup_sql
{
	return q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('s', 4);
SELECT streamguard.create_stream('cap', 2);
CREATE TABLE IF NOT EXISTS totals (c int PRIMARY KEY, n bigint NOT NULL);
TRUNCATE totals;
SELECT streamguard.create_pipeline('p_eo', 's',
  $$INSERT INTO totals SELECT (payload->>'c')::int, count(*) FROM batch GROUP BY 1
    ON CONFLICT (c) DO UPDATE SET n = totals.n + excluded.n$$, 'exactly_once', batch_size => 50);
SELECT streamguard.create_pipeline('p_two', 's', 'SELECT 1 FROM batch', 'at_least_once',
  batch_size => 20, workers => 2);
CREATE TABLE IF NOT EXISTS wins (window_start timestamptz, window_end timestamptz, key text, events bigint);
SELECT streamguard.create_window_pipeline('w', 's', 'wins', '1 second');
SELECT streamguard.capture_table('orders', 'cap');
};
}

my $log = $node->logfile;
for my $kind ('DROP EXTENSION streamguard CASCADE', 'DROP EXTENSION IF EXISTS streamguard, pg_nonexistent_ext CASCADE')
{
	for my $round (1 .. $rounds)
	{
		my $tag = "$kind, round $round";
		$node->safe_psql('postgres', setup_sql());
		ok(wait_pipelines_running($node, ['p_eo', 'p_two', 'w']), "$tag: the pipelines run");
		my @pids = start_load("$kind$round" =~ s/\W/_/gr);
		# let everything take its locks for a while: batches, backfill
		# chunks, captured writes, maintenance rounds
		ok(wait_for_value($node, q{SELECT count(*) > 0 FROM totals}, 't'), "$tag: the pipeline delivers");
		usleep(500_000 + int(rand(1_000_000)));
		is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamguard backfill'}),
			'1', "$tag: a backfill runs at the drop");
		my $offset = -s $log;
		my ($secs, $ok, $err) = timed_psql($node, $kind, timeout => 120);
		ok($ok, "$tag: the drop succeeds (${secs}s)") or diag($err);
		stop_load(@pids);
		is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_namespace WHERE nspname IN ('streamguard', 'streamguard_data')}),
			'0', "$tag: no schema of the extension is left");
		is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal}),
			'0', "$tag: no capture trigger is left on the captured table");
		# the order of the drop's locks is every other path's order: no
		# deadlock at all, on either side
		unlike(slurp_file($log, $offset), qr/deadlock detected/, "$tag: no deadlock, on either side");
		# the captured table's writers go on without the extension
		$node->safe_psql('postgres', q{INSERT INTO orders (customer, amount) VALUES (1, 1)});
		ok(wait_for_value($node,
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'streamguard%' AND backend_type <> 'streamguard launcher' AND datname = current_database()}, '0'),
			"$tag: the database's workers are gone");
	}
}

# a lock the drop cannot get: the caller's lock_timeout and statement_timeout
# still end it (the drop's own waits are shorter and retried), and once the
# lock is given back the drop goes through
$node->safe_psql('postgres', setup_sql());
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; LOCK TABLE streamguard.stream IN ACCESS SHARE MODE;');
my ($secs, $ok, $err) = timed_psql($node, "SET lock_timeout = '700ms'; DROP EXTENSION streamguard CASCADE");
ok(!$ok && sqlstate($err) eq '55P03', "lock_timeout ends a drop that waits ($secs s)") or diag($err);
ok($secs >= 0.6 && $secs < 30, 'after about lock_timeout, not at the first wait');
($secs, $ok, $err) = timed_psql($node, "SET statement_timeout = '700ms'; DROP EXTENSION streamguard CASCADE");
ok(!$ok && sqlstate($err) eq '57014', "statement_timeout cancels it between attempts ($secs s)") or diag($err);
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_extension WHERE extname = 'streamguard'}), '1',
	'a drop that gave up left the extension whole');
$holder->query_safe('COMMIT');
$holder->quit;
($secs, $ok, $err) = timed_psql($node, 'DROP EXTENSION streamguard CASCADE');
ok($ok, 'the drop goes through once the lock is given back') or diag($err);

# what is not a lock wait is not retried: a user's view on ours (no CASCADE)
$node->safe_psql('postgres', setup_sql());
$node->safe_psql('postgres', q{CREATE VIEW my_streams AS SELECT * FROM streamguard.streams});
($secs, $ok, $err) = timed_psql($node, 'DROP EXTENSION streamguard');
ok(!$ok && sqlstate($err) eq '2BP01', 'a dependent object refuses the drop at once') or diag($err);
ok($secs < 30, "without retrying ($secs s)");
$node->safe_psql('postgres', 'DROP EXTENSION streamguard CASCADE');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class WHERE relname = 'my_streams'}), '0',
	'CASCADE takes the dependent view with it');

$node->stop;
done_testing();
