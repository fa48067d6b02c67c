
# The launcher with many databases (docs/operations.md "Background
# processes").
#
# The launcher keeps one entry per database it has seen.  It used to keep
# them in a fixed array of 64 that was never pruned: databases beyond the
# first 64 never got a maintenance worker, and after about 66 databases had
# been created and dropped the array overflowed and the server crashed.
#  - 80 databases at once, the extension (and a stream) in every tenth: each
#    of those gets a maintenance worker, including the ones past the 64th;
#  - then 30 more create / CREATE EXTENSION / drop cycles, each database
#    getting its worker before it is dropped (WITH (FORCE));
#  - the server never restarted (same postmaster start time, same launcher,
#    no process terminated by a signal in the log), and a database created
#    at the end still gets its worker;
#  - a launcher that is terminated and restarted serves new databases and
#    does not start a second worker in a database whose worker runs.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('launcher',
	extra => "max_worker_processes = 24\nstreamguard.launcher_naptime = '200ms'\n");
my $start = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $launcher_sql =
  q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'streamguard launcher'};
my $launcher = $node->safe_psql('postgres', $launcher_sql);
like($launcher, qr/^\d+$/, 'launcher running');

sub with_extension
{
	my ($db) = @_;
	$node->safe_psql($db,
		q{CREATE EXTENSION streamguard; SELECT streamguard.create_stream('s', 1)});
}

sub workers_in
{
	my (@dbs) = @_;
	my $list = join(',', map { "'$_'" } @dbs);
	return qq{SELECT count(DISTINCT datname) FROM pg_stat_activity
		WHERE backend_type = 'streamguard maintenance' AND datname IN ($list)};
}

# 80 databases at once
$node->safe_psql('postgres', join('', map { "CREATE DATABASE d$_;\n" } 1 .. 80));
my @ext = map { "d" . ($_ * 10) } 1 .. 8;
with_extension($_) for @ext;
ok(wait_for_value($node, workers_in(@ext), scalar(@ext), 60),
	'every database with the extension among 80 has a maintenance worker');
$node->safe_psql('postgres',
	join('', map { "DROP DATABASE d$_ WITH (FORCE);\n" } 1 .. 80));

# create / drop cycles, each database served before it goes
my $served = 0;
for my $i (1 .. 30)
{
	$node->safe_psql('postgres', "CREATE DATABASE c$i");
	with_extension("c$i");
	$served++ if wait_for_value($node, workers_in("c$i"), 1, 30);
	$node->safe_psql('postgres', "DROP DATABASE c$i WITH (FORCE)");
}
is($served, 30, 'each of 30 created and dropped databases got a maintenance worker');

$node->safe_psql('postgres', 'CREATE DATABASE last');
with_extension('last');
ok(wait_for_value($node, workers_in('last'), 1, 30), 'a database created at the end gets its worker');

is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $start,
	'the server never restarted');
is($node->safe_psql('postgres', $launcher_sql), $launcher, 'the same launcher runs');
is(count_log($node, qr/terminated by signal/), 0, 'no process was terminated by a signal');

# a restarted launcher does not start a second worker where one runs
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
ok(wait_for_value($node, qq{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'streamguard launcher' AND pid <> $launcher}, '1', 30), 'the launcher restarted');
$node->safe_psql('postgres', 'CREATE DATABASE after_restart');
with_extension('after_restart');
ok(wait_for_value($node, workers_in('after_restart'), 1, 30), 'the new launcher serves a new database');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'streamguard maintenance' AND datname = 'last'}),
	'1', 'and leaves the running worker of another database alone');

$node->stop;
done_testing();
