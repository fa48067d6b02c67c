
# Workers name what they work on.  The maintenance worker of a database is
# "streamguard maintenance db=<database>" and a pipeline's worker
# "streamguard pipeline <name>" ("... worker <n>" for the second and later
# workers of a pipeline), a backfill worker "streamguard backfill <table>",
# all of them as the process title (ps) and as
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

# a slow backfill (a row per chunk, a pause between chunks), to be seen running
my $node = sg_node('names', extra => "streamguard.backfill_chunk_rows = 1\nstreamguard.backfill_naptime = 200\n");
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

# a backfill worker names the table it backfills (schema-qualified, quoted as needed)
$node->safe_psql('shop db', q{
CREATE SCHEMA "Sales";
CREATE TABLE "Sales".accounts (id int PRIMARY KEY, v text);
INSERT INTO "Sales".accounts SELECT g, 'x' FROM generate_series(1, 300) g;
SELECT streamguard.create_stream('account_changes');
SELECT streamguard.capture_table('"Sales".accounts', 'account_changes');
});
ok(wait_for_value($node, q{SELECT string_agg(application_name, ' | ') FROM pg_stat_activity
WHERE datname = 'shop db' AND backend_type = 'streamguard backfill'},
	'streamguard backfill "Sales".accounts', 120), 'application_name of a backfill worker names its table');

# the process titles, as ps shows them (Linux: /proc/<pid>/cmdline)
my %titles;
for my $row (split /\n/, $node->safe_psql('postgres', q{
SELECT pid || ' ' || application_name FROM pg_stat_activity
WHERE datname = 'shop db' AND backend_type IN ('streamguard pipeline', 'streamguard maintenance', 'streamguard backfill')}))
{
	my ($pid, $app) = split / /, $row, 2;
	my $cmd = eval { slurp_file("/proc/$pid/cmdline") } // '';
	$cmd =~ s/\0+/ /g;
	$cmd =~ s/\s+$//;
	$titles{$app} = $cmd;
}
SKIP:
{
	skip 'no /proc/<pid>/cmdline here', 3 unless grep { $_ ne '' } values %titles;
	like($titles{'streamguard maintenance db=shop db'} // '', qr/^postgres: (?:\S+: )?streamguard maintenance db=shop db\b/,
		'the maintenance worker\'s title names the database, not its OID');
	like($titles{'streamguard pipeline order_copy'} // '', qr/^postgres: (?:\S+: )?streamguard pipeline order_copy\b/,
		'a pipeline worker\'s title names the pipeline');
	like($titles{'streamguard backfill "Sales".accounts'} // '', qr/^postgres: (?:\S+: )?streamguard backfill "Sales".accounts\b/,
		'a backfill worker\'s title names its table');
}

$node->stop;
done_testing();
