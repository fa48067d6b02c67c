# Upgrade path: a database created with streamguard 0.1, holding streams,
# consumers and a running pipeline with data, is updated with
# ALTER EXTENSION streamguard UPDATE and keeps working; the updated schema is
# the same as a fresh installation of the current version (every member
# object, every column with its type, default and nullability, every
# function signature and ACL, every view's columns and definition, the
# extension's schema, dependencies and its schemas' owners, every comment).
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
# catalog meets the new library until the update runs.  The library serves
# the SQL objects of the version before it (0.2: a pipeline there runs
# before the update) but not older ones: under 0.1 no pipeline worker runs,
# and the server says so (a WARNING with both versions and the hint to run
# ALTER EXTENSION UPDATE, and the pipeline's last_error); nothing is lost,
# the pipeline starts once the update is done.  A database updated from 0.2
# is compared with a fresh one too.

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

# ------------------------------------ the new library meets the 0.1 catalog
my $offset = log_offset($node);
$node->restart;
ok(wait_log($node, qr/WARNING:  the streamguard library 0\.3 serves SQL versions 0\.2 to 0\.3, but database "old_db" has version 0\.1: its pipelines and backfills do not run/,
	$offset, 60), 'under the 0.1 catalog: a WARNING with the versions');
ok(wait_log($node, qr/HINT:  Run ALTER EXTENSION streamguard UPDATE in database "old_db"\./, $offset, 60),
	'... and the hint to update');
ok(wait_for_value($node, q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'totals'},
	'the streamguard library 0.3 serves SQL versions 0.2 to 0.3, but database "old_db" has version 0.1: '
	. 'its pipelines and backfills do not run. Run ALTER EXTENSION streamguard UPDATE in database "old_db".',
	60, dbname => 'old_db'), "the 0.1 pipeline's last_error says why it does not run");
is($node->safe_psql('old_db', q{SELECT events_in || ' ' || coalesce(worker_pid::text, 'no worker')
	FROM streamguard.pipelines WHERE pipeline = 'totals'}), '0 no worker', '... and no worker ran it');

# ----------------------------------------------------------------- update
$offset = log_offset($node);
$node->safe_psql('old_db', 'ALTER EXTENSION streamguard UPDATE');
ok(wait_log($node, qr/database "old_db" is now at SQL version 0\.3, which the library 0\.3 serves: its pipelines and backfills start/,
	$offset, 60), 'the maintenance worker logs that the pipelines start');
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
is($node->safe_psql('old_db', q{SELECT coalesce(last_error, 'none') FROM streamguard.pipelines WHERE pipeline = 'totals'}),
	'none', "after the update, the version error is gone from last_error");

# ---------------------------------- 0.2: served before the update, then updated
$node->safe_psql('postgres', 'CREATE DATABASE v02_cap');
$node->safe_psql('v02_cap', q{
CREATE EXTENSION streamguard VERSION '0.2';
SELECT streamguard.create_stream('orders', 2);
CREATE TABLE totals (customer text PRIMARY KEY, amount numeric NOT NULL);
SELECT streamguard.create_pipeline('totals', 'orders',
	$$INSERT INTO totals SELECT key, sum((payload->>'amount')::numeric) FROM batch GROUP BY key
	  ON CONFLICT (customer) DO UPDATE SET amount = totals.amount + excluded.amount$$);
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(1, 100) g),
	ARRAY(SELECT 'c' || (g % 5) FROM generate_series(1, 100) g));
});
ok(wait_for_value($node, q{SELECT coalesce(sum(amount), 0) FROM totals}, '5050', 60, dbname => 'v02_cap'),
	'the library serves a 0.2 catalog: its pipeline runs before the update');
$node->safe_psql('v02_cap', q{
SELECT streamguard.create_stream('cdc', 2);
CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO acct SELECT g, g FROM generate_series(1, 50) g;
SELECT streamguard.capture_table('acct', 'cdc');
});
ok(wait_for_value($node, q{SELECT backfill_state || ' ' || backfill_rows || ' ' || coalesce(backfill_error, '-')
	FROM streamguard.captures WHERE tab = 'acct'::regclass}, 'done 50 -', 60, dbname => 'v02_cap'),
	'... and a capture\'s backfill');
$node->safe_psql('v02_cap', 'ALTER EXTENSION streamguard UPDATE');
is($node->safe_psql('v02_cap', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}),
	'0.3', 'ALTER EXTENSION streamguard UPDATE from 0.2 reaches 0.3');

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
# what the update must keep: a remote source's pipeline (0.2 writes its
# stream_id as 0; paused, so that nothing connects), a view of the user's
# on a view of the extension, every column of the extension's views, and
# the counters of the pipelines, idle now
$node->safe_psql('v02_db', q{
INSERT INTO streamguard.pipeline (name, stream_id, sql, guarantee, batch_size, error_policy, dedup,
	dedup_window, owner, search_path, state, source_server, remote_stream, batches, events_in, last_error,
	last_error_at)
VALUES ('remote_src', 0, 'SELECT 1 FROM batch', 'at_least_once', 10, 'skip', false, '1 hour',
	(SELECT oid FROM pg_roles WHERE rolname = current_user), 'public', 'paused', 'far', 'orders', 7, 70, 'far away', now());
CREATE VIEW my_pipelines AS SELECT pipeline, source, batches, events_in FROM streamguard.pipelines;
});
my $view_columns = q{
SELECT string_agg(format('%s.%s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod)), ', '
	ORDER BY c.relname, a.attnum)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = 'streamguard'::regnamespace AND c.relkind = 'v'};
my $counters = q{
SELECT string_agg(format('%s %s %s %s %s %s %s %s %s %s', pipeline, source, batches, events_in, rows_out,
	skipped, dead_letters, last_batch_at, last_error, last_error_at), E'\n' ORDER BY pipeline)
FROM streamguard.pipelines};
my $columns_before = $node->safe_psql('v02_db', $view_columns);
my $counters_before = $node->safe_psql('v02_db', $counters);
like($counters_before, qr/^remote_src far:orders 7 70 0 0 0  far away /m, 'a remote source in 0.2');
$node->safe_psql('v02_db', 'ALTER EXTENSION streamguard UPDATE');
is($node->safe_psql('v02_db', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}),
	'0.3', 'ALTER EXTENSION streamguard UPDATE reaches 0.3 from 0.2');
is($node->safe_psql('v02_db', $counters), $counters_before,
	'the counters, last batch and last error of every pipeline moved to pipeline_stats with their values');
is($node->safe_psql('v02_db', q{SELECT string_agg(p.name || ' ' || s.batches, ',' ORDER BY p.name)
	FROM streamguard.pipeline p JOIN streamguard.pipeline_stats s ON s.pipeline_id = p.id}),
	$node->safe_psql('v02_db', q{SELECT string_agg(pipeline || ' ' || batches, ',' ORDER BY pipeline)
	FROM streamguard.pipelines}), '... one row per pipeline');
is($node->safe_psql('v02_db', q{SELECT coalesce(stream_id::text, 'NULL') FROM streamguard.pipeline WHERE name = 'remote_src'}),
	'NULL', "a remote source's stream_id 0 became NULL");
my $columns_after = $node->safe_psql('v02_db', $view_columns);
my %after = map { $_ => 1 } split /, /, $columns_after;
is(join(', ', grep { !$after{$_} } split /, /, $columns_before), '',
	'every column of the views of 0.2 is still there, of the same type');
is($node->safe_psql('v02_db', q{SELECT string_agg(pipeline || ' ' || source || ' ' || batches, ',' ORDER BY pipeline)
	FROM my_pipelines}), 'remote_src far:orders 7,totals orders ' .
	$node->safe_psql('v02_db', q{SELECT batches FROM streamguard.pipelines WHERE pipeline = 'totals'}),
	"a view of the user's on the extension's views goes on working");
$node->safe_psql('v02_db', q{DROP VIEW my_pipelines; DELETE FROM streamguard.pipeline WHERE name = 'remote_src'});
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

# ------------------------------- 0.2 rows that break the rules of 0.3
# A 0.2 catalog written behind the API's back: the update names every row
# that breaks a constraint or a domain of 0.3, refuses, changes nothing;
# once they are corrected, it runs.
$node->safe_psql('postgres', 'CREATE DATABASE v02_bad');
$node->safe_psql('v02_bad', q{
CREATE EXTENSION streamguard VERSION '0.2';
SELECT streamguard.create_stream('src', 2);
SELECT streamguard.create_stream('other', 1);
CREATE TABLE sink (n int);
BEGIN;
SELECT streamguard.create_pipeline('p_size', 'src', 'INSERT INTO sink SELECT 1 FROM batch');
SELECT streamguard.pause_pipeline('p_size');
SELECT streamguard.create_pipeline('p_gone', 'src', 'INSERT INTO sink SELECT 1 FROM batch');
SELECT streamguard.pause_pipeline('p_gone');
COMMIT;
UPDATE streamguard.pipeline SET batch_size = 0, batches = -3 WHERE name = 'p_size';
UPDATE streamguard.pipeline SET stream_id = 123456 WHERE name = 'p_gone';
UPDATE streamguard.stream SET name = 'other stream' WHERE name = 'other';
UPDATE streamguard.stream SET partitions = 0 WHERE name = 'other stream';
});
my $ids = $node->safe_psql('v02_bad', q{SELECT string_agg(name || '=' || id, ' ' ORDER BY name) FROM streamguard.pipeline});
my %pid = map { split /=/ } split / /, $ids;
expect_error($node, 'ALTER EXTENSION streamguard UPDATE', '23514',
	qr/streamguard\ cannot\ be\ updated:\ rows\ of\ its\ catalog\ break\ the\ rules\ of\ 0\.3\n
	   DETAIL:\s+pipeline_batch_size_check\ of\ streamguard\.pipeline:\ \{"id"\ :\ $pid{p_size},\ "name"\ :\ "p_size",\ "batch_size"\ :\ 0\}\n
	   pipeline_stream_id_fkey\ of\ streamguard\.pipeline:\ \{"id"\ :\ $pid{p_gone},\ "name"\ :\ "p_gone",\ "stream_id"\ :\ 123456\}\n
	   pipeline_stats_counters_check\ of\ streamguard\.pipeline_stats:\ \{"pipeline_id"\ :\ $pid{p_size},\ "batches"\ :\ -3,.*\}\n
	   stream_partitions_check\ of\ streamguard\.stream:\ \{"id"\ :\ \d+,\ "name"\ :\ "other\ stream",\ "partitions"\ :\ 0\}\n
	   streamguard\.stream\.name\ is\ not\ a\ valid\ streamguard\.object_name:\ \{"id"\ :\ \d+,\ "name"\ :\ "other\ stream"\}\n
	   HINT:\s+Correct\ or\ delete\ those\ rows/x,
	'the update names the rows that break the rules of 0.3 and refuses', dbname => 'v02_bad');
is($node->safe_psql('v02_bad', q{SELECT extversion || ' ' || (SELECT batches FROM streamguard.pipeline WHERE name = 'p_size')
	|| ' ' || (to_regclass('streamguard.pipeline_stats') IS NULL) FROM pg_extension WHERE extname = 'streamguard'}),
	'0.2 -3 true', '... and changes nothing');
$node->safe_psql('v02_bad', q{
UPDATE streamguard.pipeline SET batch_size = 10, batches = 0 WHERE name = 'p_size';
UPDATE streamguard.pipeline SET stream_id = (SELECT id FROM streamguard.stream WHERE name = 'src') WHERE name = 'p_gone';
UPDATE streamguard.stream SET name = 'other', partitions = 1 WHERE name = 'other stream';
});
expect_ok($node, 'ALTER EXTENSION streamguard UPDATE', 'once the rows are corrected, the update runs',
	dbname => 'v02_bad');
is($node->safe_psql('v02_bad', q{SELECT string_agg(pipeline || ' ' || batch_size || ' ' || source, ',' ORDER BY pipeline)
	FROM streamguard.pipelines}), 'p_gone 1000 src,p_size 10 src', '... and keeps them');

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
UNION ALL
-- where the extension lives, what it depends on, its schemas' owners and
-- privileges (docs/security.md, "Install schema")
SELECT format('extension in schema %s', e.extnamespace::regnamespace) FROM pg_catalog.pg_extension e
WHERE e.extname = 'streamguard'
UNION ALL
SELECT format('extension depends on %s (%s)', pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0), d.deptype)
FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.objid
WHERE d.classid = 'pg_catalog.pg_extension'::regclass AND e.extname = 'streamguard'
UNION ALL
SELECT format('schema %s superuser-owned %s acl %s', n.nspname, r.rolsuper, n.nspacl)
FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
WHERE n.nspname IN ('streamguard', 'streamguard_data')
UNION ALL
SELECT format('function acl %s %s', p.oid::regprocedure, p.proacl)
FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'streamguard'::regnamespace
UNION ALL
-- the initial privileges pg_dump compares the current ones with
SELECT format('init privs %s %s %s', pg_catalog.pg_describe_object(i.classoid, i.objoid, i.objsubid), i.privtype,
	i.initprivs)
FROM pg_catalog.pg_init_privs i JOIN pg_catalog.pg_depend d
	ON d.classid = i.classoid AND d.objid = i.objoid AND d.deptype = 'e'
JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'streamguard'
UNION ALL
SELECT format('view %s %s', c.oid::regclass, pg_catalog.pg_get_viewdef(c.oid))
FROM pg_catalog.pg_class c WHERE c.relnamespace = 'streamguard'::regnamespace AND c.relkind = 'v'
UNION ALL
-- the comments of the extension's objects (and of their columns), so that
-- the install and update scripts cannot drift apart
SELECT format('comment %s: %s', pg_catalog.pg_describe_object(c.classoid, c.objoid, c.objsubid), c.description)
FROM pg_catalog.pg_description c JOIN pg_catalog.pg_depend d
	ON d.classid = c.classoid AND d.objid = c.objoid AND d.deptype = 'e'
JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'streamguard'
ORDER BY 1};
my $fresh = $node->safe_psql('fresh_db', $describe);
for my $db (qw(old_db v02_db v02_cap v02_bad))
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

# ------------------------------------------- the caller's session settings
# CREATE EXTENSION and each ALTER EXTENSION UPDATE, in one session with a
# search_path and other settings of its own: every setting is as before
# (0.3's update once left search_path = pg_catalog, pg_temp behind, and
# the session's next unqualified statement failed;
# scripts/script-settings-check.pl keeps the kind out of the scripts)
$node->safe_psql('postgres', 'CREATE DATABASE session_01; CREATE DATABASE session_02; CREATE DATABASE session_fresh');
# (plpgsql's settings appear when a script first loads it: not the session's)
my $settings = q{SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings WHERE name NOT LIKE 'plpgsql.%'};
for my $case (['session_01', q{CREATE EXTENSION streamguard VERSION '0.1'; ALTER EXTENSION streamguard UPDATE TO '0.2'; ALTER EXTENSION streamguard UPDATE}],
	['session_02', q{CREATE EXTENSION streamguard VERSION '0.2'; ALTER EXTENSION streamguard UPDATE}],
	['session_fresh', q{CREATE EXTENSION streamguard}])
{
	my ($db, $steps) = @$case;
	my $out = $node->safe_psql($db, qq{
CREATE SCHEMA app;
CREATE TABLE app.t (i int);
SET search_path = app, public;
SET lock_timeout = '7s';
SET client_min_messages = notice;
$settings;
$steps;
$settings;
INSERT INTO t VALUES (1);
SELECT current_setting('search_path'), count(*) FROM t;
});
	my ($before, $after, $last) = split /\n/, $out;
	is($after, $before, "$db: $steps leaves every setting of the session as it was")
	  or diag(only_in(join("\n", split(/, /, $after)), join("\n", split(/, /, $before))));
	is($last, 'app, public|1', "$db: ... and the next unqualified statement works");
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
