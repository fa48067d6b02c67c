
# Workers name what they work on.  The maintenance worker of a database is
# "streamguard maintenance db=<database>" and a pipeline's worker
# "streamguard pipeline <name>" ("... worker <n>" for the second and later
# workers of a pipeline), both as the process title (ps) and as
# application_name in pg_stat_activity; backend_type stays the kind of
# worker.  Before 0.3 the title carried the database's OID and the
# application_name no pipeline.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('names');
$node->safe_psql('postgres', 'CREATE DATABASE "shop db"');
$node->safe_psql('shop db', q{
CREATE EXTENSION streamguard;
CREATE TABLE sink (id bigint);
SELECT streamguard.create_stream('orders', partitions => 2);
SELECT streamguard.create_pipeline('order_copy', 'orders',
  $$INSERT INTO sink SELECT seq FROM batch$$);
SELECT streamguard.create_pipeline('order_copy_2', 'orders',
  $$INSERT INTO sink SELECT seq FROM batch$$, workers => 2);
});

ok(wait_for_value($node, q{
SELECT string_agg(application_name, ' | ' ORDER BY application_name) FROM pg_stat_activity
WHERE datname = 'shop db' AND backend_type IN ('streamguard pipeline', 'streamguard maintenance')},
	'streamguard maintenance db=shop db | streamguard pipeline order_copy | '
	  . 'streamguard pipeline order_copy_2 | streamguard pipeline order_copy_2 worker 1', 120),
	'application_name names the database and the pipelines');

# the process titles, as ps shows them (Linux: /proc/<pid>/cmdline)
my %titles;
for my $row (split /\n/, $node->safe_psql('postgres', q{
SELECT pid || ' ' || application_name FROM pg_stat_activity
WHERE datname = 'shop db' AND backend_type IN ('streamguard pipeline', 'streamguard maintenance')}))
{
	my ($pid, $app) = split / /, $row, 2;
	my $cmd = eval { slurp_file("/proc/$pid/cmdline") } // '';
	$cmd =~ s/\0+/ /g;
	$cmd =~ s/\s+$//;
	$titles{$app} = $cmd;
}
SKIP:
{
	skip 'no /proc/<pid>/cmdline here', 2 unless grep { $_ ne '' } values %titles;
	like($titles{'streamguard maintenance db=shop db'} // '', qr/^postgres: (?:\S+: )?streamguard maintenance db=shop db\b/,
		'the maintenance worker\'s title names the database, not its OID');
	like($titles{'streamguard pipeline order_copy'} // '', qr/^postgres: (?:\S+: )?streamguard pipeline order_copy\b/,
		'a pipeline worker\'s title names the pipeline');
}

$node->stop;
done_testing();
