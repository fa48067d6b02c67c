# Upgrade path: a database created with streamguard 0.1, holding streams,
# consumers and a running pipeline with data, is updated with
# ALTER EXTENSION streamguard UPDATE and keeps working; the updated schema is
# the same as a fresh installation of the current version (every member
# object, every column with its type, default and nullability, every
# function signature, every view's columns).
#
# The same from 0.2: a database with a stream, a consumer and a pipeline
# created on 0.2, updated, keeps working and equals a fresh installation.
#
# Last, the updates compared with pg_dump --schema-only: databases updated
# from 0.1 and from 0.2 (with no streams, whose segment tables would differ)
# dump the same schema as a fresh installation -- every table with its
# columns in order, every function body, view, grant and comment.  pg_dump
# leaves an extension's member objects out of a dump, so the test makes
# them plain objects first (their pg_depend rows made normal) in those
# throwaway databases.
#
# The library on disk is the current one: as in a real upgrade, the 0.1
# catalog meets the new library until the update runs.  A pipeline worker
# that starts meanwhile fails its batches and retries; nothing is lost.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('upgrade');

$node->safe_psql('postgres', q{
CREATE DATABASE old_db;
CREATE DATABASE v02_db;
CREATE DATABASE fresh_db;
CREATE DATABASE dump_01;
CREATE DATABASE dump_02;
CREATE DATABASE dump_fresh;
});

# ---------------------------------------------------------- 0.1 with data
$node->safe_psql('old_db', q{
CREATE EXTENSION streamguard VERSION '0.1';
SELECT streamguard.create_stream('orders', 2, retention => '1 day');
CREATE TABLE totals (customer text PRIMARY KEY, amount numeric NOT NULL);
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(1, 100) g),
	ARRAY(SELECT 'c' || (g % 5) FROM generate_series(1, 100) g));
SELECT count(*) FROM streamguard.poll('orders', 'billing', 30);
});
is($node->safe_psql('old_db', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}),
	'0.1', 'a database with streamguard 0.1');

# a 0.1 pipeline, created before the update (the new library serves 0.1's
# create_pipeline signature: the SQL script decides which arguments exist)
expect_ok($node, q{
SELECT streamguard.create_pipeline('totals', 'orders',
	$$INSERT INTO totals SELECT key, sum((payload->>'amount')::numeric) FROM batch GROUP BY key
	  ON CONFLICT (customer) DO UPDATE SET amount = totals.amount + excluded.amount$$)},
	'a pipeline created on 0.1', dbname => 'old_db');

# ----------------------------------------------------------------- update
$node->safe_psql('old_db', 'ALTER EXTENSION streamguard UPDATE');
is($node->safe_psql('old_db', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}),
	'0.3', 'ALTER EXTENSION streamguard UPDATE reaches 0.3 (through 0.2)');

# the pipeline processes every event exactly once after the update
ok(wait_for_value($node, q{SELECT coalesce(sum(amount), 0) FROM totals}, '5050', 60, dbname => 'old_db'),
	'the 0.1 pipeline delivers all 100 events exactly once after the update');
$node->safe_psql('old_db', q{
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(101, 110) g),
	ARRAY(SELECT 'c' || (g % 5) FROM generate_series(101, 110) g));
});
ok(wait_for_value($node, q{SELECT sum(amount) FROM totals}, '6105', 60, dbname => 'old_db'),
	'... and new appends after it');

# the consumer kept its position; new functions and settings work
is($node->safe_psql('old_db', q{SELECT count(*) FROM streamguard.poll('orders', 'billing', 1000)}),
	'80', 'the SQL consumer resumes from its 0.1 position');
is($node->safe_psql('old_db', q{SELECT extract(epoch FROM batch_timeout), worker_status FROM streamguard.pipelines WHERE pipeline = 'totals'}),
	'300.000000|running', 'the pipeline has the new settings with their defaults');
$node->safe_psql('old_db', q{SELECT streamguard.alter_stream('orders', retention => '2 days')});
is($node->safe_psql('old_db', q{SELECT extract(epoch FROM retention) FROM streamguard.streams WHERE stream = 'orders'}),
	'172800.000000', 'alter_stream, new in 0.2, works on the updated database');
$node->safe_psql('old_db', q{SELECT streamguard.alter_stream('orders', partitions => 3)});
is($node->safe_psql('old_db', q{SELECT old_partitions || '->' || new_partitions FROM streamguard.stream_repartitions
	WHERE stream = 'orders'}), '2->3', 'alter_stream adds partitions on the updated database');
$node->safe_psql('old_db', q{
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(111, 120) g),
	ARRAY(SELECT 'c' || (g % 5) FROM generate_series(111, 120) g));
});
ok(wait_for_value($node, q{SELECT sum(amount) FROM totals}, '7260', 60, dbname => 'old_db'),
	'... and the 0.1 pipeline goes on across the change');
is($node->safe_psql('old_db', q{SELECT count(*) FROM streamguard.installation}), '1',
	'the update drew an installation identity');

# ------------------------------------------------------- 0.2 with data
$node->safe_psql('v02_db', q{
CREATE EXTENSION streamguard VERSION '0.2';
SELECT streamguard.create_stream('orders', 2, retention => '1 day');
CREATE TABLE totals (customer text PRIMARY KEY, amount numeric NOT NULL);
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(1, 100) g),
	ARRAY(SELECT 'c' || (g % 5) FROM generate_series(1, 100) g),
	ARRAY(SELECT 'd' || g FROM generate_series(1, 100) g));
SELECT count(*) FROM streamguard.poll('orders', 'billing', 30);
SELECT streamguard.create_pipeline('totals', 'orders',
	$$INSERT INTO totals SELECT key, sum((payload->>'amount')::numeric) FROM batch GROUP BY key
	  ON CONFLICT (customer) DO UPDATE SET amount = totals.amount + excluded.amount$$,
	batch_size => 40, workers => 2);
});
is($node->safe_psql('v02_db', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}),
	'0.2', 'a database with streamguard 0.2');
ok(wait_for_value($node, q{SELECT coalesce(sum(amount), 0) FROM totals}, '5050', 60, dbname => 'v02_db'),
	'the 0.2 pipeline delivers its events');
$node->safe_psql('v02_db', 'ALTER EXTENSION streamguard UPDATE');
is($node->safe_psql('v02_db', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}),
	'0.3', 'ALTER EXTENSION streamguard UPDATE reaches 0.3 from 0.2');
$node->safe_psql('v02_db', q{
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(91, 110) g),
	ARRAY(SELECT 'c' || (g % 5) FROM generate_series(91, 110) g),
	ARRAY(SELECT 'd' || g FROM generate_series(91, 110) g));
});
ok(wait_for_value($node, q{SELECT sum(amount) FROM totals}, '6105', 60, dbname => 'v02_db'),
	'the 0.2 pipeline goes on after the update, its dedup keys kept');
is($node->safe_psql('v02_db', q{SELECT count(*) FROM streamguard.poll('orders', 'billing', 1000)}),
	'80', 'the SQL consumer resumes from its 0.2 position');

# -------------------------------------------- same schema as a fresh 0.3
$node->safe_psql('fresh_db', 'CREATE EXTENSION streamguard');

my $describe = q{
SELECT pg_catalog.pg_describe_object(d.classid, d.objid, 0) AS obj
FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
WHERE e.extname = 'streamguard' AND d.deptype = 'e'
UNION ALL
SELECT format('column %s.%s %s %s default %s', c.table_name, c.column_name, c.data_type,
	c.is_nullable, coalesce(c.column_default, '-'))
FROM information_schema.columns c WHERE c.table_schema = 'streamguard'
UNION ALL
SELECT format('function %s(%s) returns %s %s', p.proname, pg_catalog.pg_get_function_arguments(p.oid),
	pg_catalog.pg_get_function_result(p.oid), p.provolatile)
FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'streamguard'::regnamespace
UNION ALL
SELECT format('constraint %s %s', conrelid::regclass, pg_catalog.pg_get_constraintdef(oid))
FROM pg_catalog.pg_constraint WHERE connamespace = 'streamguard'::regnamespace
UNION ALL
SELECT format('index %s', pg_catalog.pg_get_indexdef(indexrelid))
FROM pg_catalog.pg_index WHERE indrelid IN
	(SELECT oid FROM pg_catalog.pg_class WHERE relnamespace = 'streamguard'::regnamespace)
UNION ALL
SELECT format('acl %s %s', relname, relacl) FROM pg_catalog.pg_class
WHERE relnamespace = 'streamguard'::regnamespace
UNION ALL
SELECT format('config %s', e.extconfig::regclass[]) FROM pg_catalog.pg_extension e
WHERE e.extname = 'streamguard'
ORDER BY 1};
my $fresh = $node->safe_psql('fresh_db', $describe);
for my $db (qw(old_db v02_db))
{
	my $old = $node->safe_psql($db, $describe);
	my $f = $fresh;
	# extconfig lists tables in the order they were registered: compare as sets
	s/^config \{(.*)\}$/'config ' . join(',', sort split(m{,}, $1))/me for ($old, $f);
	is($old, $f, "$db: the updated schema equals a fresh installation of 0.3")
	  or diag(only_in($old, $f));
}

# ------------------------------------ pg_dump --schema-only, no streams
$node->safe_psql('dump_01', q{CREATE EXTENSION streamguard VERSION '0.1'; ALTER EXTENSION streamguard UPDATE});
$node->safe_psql('dump_02', q{CREATE EXTENSION streamguard VERSION '0.2'; ALTER EXTENSION streamguard UPDATE});
$node->safe_psql('dump_fresh', q{CREATE EXTENSION streamguard});
my %dump;
for my $db (qw(dump_01 dump_02 dump_fresh))
{
	# the members as plain objects, for pg_dump to dump them
	$node->safe_psql($db, q{
UPDATE pg_catalog.pg_depend SET deptype = 'n'
WHERE deptype = 'e' AND refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
	AND refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'streamguard')});
	my ($out, $err);
	my $ok = IPC::Run::run(['pg_dump', '--schema-only', '--no-comments', '-d', $node->connstr($db)],
		'>', \$out, '2>', \$err);
	ok($ok, "pg_dump --schema-only of $db") or diag($err);
	# pg_dump's own noise: its version, and the random key of \restrict
	$out =~ s/^(--.*(Dumped (from|by)).*|\\(un)?restrict .*)\n//mg;
	$dump{$db} = $out;
}
cmp_ok(length $dump{dump_fresh}, '>', 10000, 'the fresh dump holds the schema (' . length($dump{dump_fresh}) . ' bytes)');
for my $db (qw(dump_01 dump_02))
{
	my $from = $db eq 'dump_01' ? '0.1' : '0.2';
	is($dump{$db}, $dump{dump_fresh}, "pg_dump --schema-only: updated from $from equals a fresh installation")
	  or diag(only_in($dump{$db}, $dump{dump_fresh}));
}

$node->stop;
done_testing();

# the lines of $a not in $b and of $b not in $a, for diag
sub only_in
{
	my ($a, $b) = @_;
	my %a = map { $_ => 1 } split /\n/, $a;
	my %b = map { $_ => 1 } split /\n/, $b;
	return join("\n", 'only after the update:', grep({ !$b{$_} } split /\n/, $a),
		'only in a fresh installation:', grep({ !$a{$_} } split /\n/, $b));
}
