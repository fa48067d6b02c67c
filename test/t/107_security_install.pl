# Install schema: the extension's scripts never run inside a schema someone
# else created (docs/security.md, "Install schema").
#
# The attack: a database owner who is not a superuser creates schema
# streamguard with look-alikes of pg_catalog.unnest and array_agg (better
# matches for the views' argument types) before a superuser installs the
# extension.  With 0.2, CREATE EXTENSION adopted the schema, the views bound
# to the look-alikes, and a superuser reading streamguard.captures or
# pipeline_workers (what sgctl top reads) ran the owner's code.  0.3 refuses
# to install into that schema; the update from 0.2 refuses until a superuser
# controls the schema and everything in it, then rebinds the views to
# pg_catalog.  DROP EXTENSION removes the schemas; pg_dump / pg_restore of a
# fresh and of an updated database bring the streams back.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('install');

$node->safe_psql('postgres', q{
CREATE ROLE mallory LOGIN;
CREATE DATABASE att OWNER mallory;
CREATE DATABASE att2 OWNER mallory;
CREATE DATABASE att3 OWNER mallory;
});

# look-alikes that make mallory a superuser when a superuser calls them
my $lookalikes = q{
CREATE SCHEMA streamguard;
CREATE FUNCTION streamguard.unnest(int2[]) RETURNS SETOF int2 LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE mallory SUPERUSER';
	END IF;
	RETURN QUERY SELECT pg_catalog.unnest($1);
END $$;
CREATE FUNCTION streamguard.agg_step(int[], int) RETURNS int[] LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE mallory SUPERUSER';
	END IF;
	RETURN $1 || $2;
END $$;
CREATE AGGREGATE streamguard.array_agg(int) (SFUNC = streamguard.agg_step, STYPE = int[]);
};

# what a superuser reads: a capture (captures unnests its key columns) and
# a pipeline (pipeline_workers aggregates its partitions)
my $activity = q{
SELECT streamguard.create_stream('cap', 2);
CREATE TABLE public.t (id int PRIMARY KEY, v text);
SELECT streamguard.capture_table('public.t', 'cap', backfill => false);
CREATE TABLE public.sink (n int);
SELECT streamguard.create_pipeline('p', 'cap', $$INSERT INTO public.sink SELECT 1 FROM batch$$);
};
my $superuser_reads = q{
SELECT count(*) FROM streamguard.captures;
SELECT count(*) FROM streamguard.pipeline_workers;
SELECT count(*) FROM streamguard.consumer_group_members;
};
my $is_super = q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'};

# every function, operator or type the extension's objects, views,
# defaults, constraints and triggers use that is neither in pg_catalog nor the
# extension's (sql/15_trust.sql has the same check)
my $foreign_bindings = q{
WITH direct AS (
	SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	WHERE e.extname = 'streamguard' AND d.deptype = 'e'),
members AS (
	SELECT classid, objid FROM direct
	UNION SELECT d.classid, d.objid FROM pg_depend d JOIN direct m
		ON d.refclassid = m.classid AND d.refobjid = m.objid AND d.deptype = 'i'),
rels AS (SELECT objid AS relid FROM members WHERE classid = 'pg_class'::regclass),
users AS (
	SELECT 'pg_rewrite'::regclass AS classid, rw.oid AS objid FROM pg_rewrite rw JOIN rels ON rw.ev_class = rels.relid
	UNION ALL SELECT 'pg_attrdef'::regclass, ad.oid FROM pg_attrdef ad JOIN rels ON ad.adrelid = rels.relid
	UNION ALL SELECT 'pg_constraint'::regclass, c.oid FROM pg_constraint c JOIN rels ON c.conrelid = rels.relid
	UNION ALL SELECT 'pg_trigger'::regclass, t.oid FROM pg_trigger t JOIN rels ON t.tgrelid = rels.relid
	UNION ALL SELECT classid, objid FROM members)
SELECT DISTINCT pg_describe_object(d.refclassid, d.refobjid, 0)
FROM users u JOIN pg_depend d ON d.classid = u.classid AND d.objid = u.objid
WHERE CASE d.refclassid
		WHEN 'pg_proc'::regclass THEN (SELECT pronamespace FROM pg_proc WHERE oid = d.refobjid)
		WHEN 'pg_operator'::regclass THEN (SELECT oprnamespace FROM pg_operator WHERE oid = d.refobjid)
		WHEN 'pg_type'::regclass THEN (SELECT typnamespace FROM pg_type WHERE oid = d.refobjid)
	  END <> 'pg_catalog'::regnamespace
  AND NOT EXISTS (SELECT 1 FROM members m WHERE m.classid = d.refclassid AND m.objid = d.refobjid)
ORDER BY 1};

# ------------------------------------------------------- a fresh install
$node->safe_psql('att', $lookalikes, extra_params => [ '-U', 'mallory' ]);
expect_error($node, 'CREATE EXTENSION streamguard', '42P06',
	qr/schema "streamguard" already exists.*owned by role "mallory".*HINT:.*Drop or rename schema "streamguard"/s,
	'CREATE EXTENSION refuses a schema streamguard the database owner created', dbname => 'att');
is($node->safe_psql('att', q{SELECT count(*) FROM pg_extension WHERE extname = 'streamguard'}), '0',
	'... and installs nothing');

# the storage schema as well
$node->safe_psql('att2', 'CREATE SCHEMA streamguard_data', extra_params => [ '-U', 'mallory' ]);
expect_error($node, 'CREATE EXTENSION streamguard', '42P06', qr/schema "streamguard_data" already exists/,
	'CREATE EXTENSION refuses a schema streamguard_data someone created', dbname => 'att2');

# once the owner's schema is gone, the extension creates its own
$node->safe_psql('att', 'DROP SCHEMA streamguard CASCADE', extra_params => [ '-U', 'mallory' ]);
expect_ok($node, 'CREATE EXTENSION streamguard', 'CREATE EXTENSION works once the schema is gone', dbname => 'att');
is($node->safe_psql('att', q{
SELECT string_agg(format('%s:%s:%s', n.nspname, r.rolsuper,
	EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid
			AND d.deptype = 'e')), ',' ORDER BY n.nspname)
FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname LIKE 'streamguard%'}),
	'streamguard:t:t,streamguard_data:t:t',
	'its schemas are owned by the superuser and are members of the extension');
expect_error($node, 'CREATE FUNCTION streamguard.unnest(int2[]) RETURNS SETOF int2 LANGUAGE sql AS $$SELECT 1::int2$$',
	'42501', qr/permission denied for schema streamguard/,
	'the database owner cannot put a look-alike into it', dbname => 'att', user => 'mallory');
$node->safe_psql('att', $activity);
$node->safe_psql('att', $superuser_reads);
is($node->safe_psql('att', $is_super), 'f', 'a superuser reads captures and pipeline_workers: nothing runs for the owner');
is($node->safe_psql('att', $foreign_bindings), '', 'views, defaults and constraints bind only to pg_catalog and the extension');

# DROP EXTENSION leaves no schema behind
$node->safe_psql('att', 'SELECT streamguard.drop_pipeline($$p$$)');
$node->safe_psql('att', 'DROP EXTENSION streamguard CASCADE');
is($node->safe_psql('att', q{SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'streamguard%'}), '0',
	'DROP EXTENSION streamguard CASCADE removes its schemas');

# ------------------------------------------------- an existing 0.2 install
# 0.2 adopted the owner's schema: the attack works there (this is what 0.3
# refuses); the update refuses until a superuser controls the schema and
# every object in it
$node->safe_psql('att3', $lookalikes, extra_params => [ '-U', 'mallory' ]);
$node->safe_psql('att3', q{CREATE EXTENSION streamguard VERSION '0.2'});
$node->safe_psql('att3', $activity);
$node->safe_psql('att3', $superuser_reads);
is($node->safe_psql('att3', $is_super), 't', 'on 0.2 a superuser reading the views made the schema owner superuser');
$node->safe_psql('postgres', 'ALTER ROLE mallory NOSUPERUSER');
like($node->safe_psql('att3', $foreign_bindings), qr/array_agg.*\n.*unnest/s, '0.2 views are bound to the look-alikes');

expect_error($node, 'ALTER EXTENSION streamguard UPDATE', '42501',
	qr/a role that is not a superuser owns its schema.*schema streamguard \(owner mallory\)/s,
	'the update refuses a schema a non-superuser owns', dbname => 'att3');
$node->safe_psql('att3', 'ALTER SCHEMA streamguard OWNER TO CURRENT_USER');
expect_error($node, 'ALTER EXTENSION streamguard UPDATE', '42501',
	qr/holds objects of other roles.*streamguard\.unnest\(smallint\[\]\) \(owner mallory\)/s,
	'the update refuses objects of a non-superuser in the schema', dbname => 'att3');
$node->safe_psql('att3', 'GRANT CREATE ON SCHEMA streamguard TO mallory');
$node->safe_psql('att3', q{
ALTER FUNCTION streamguard.unnest(int2[]) OWNER TO CURRENT_USER;
ALTER FUNCTION streamguard.agg_step(int[], int) OWNER TO CURRENT_USER;
ALTER AGGREGATE streamguard.array_agg(int) OWNER TO CURRENT_USER;
});
expect_error($node, 'ALTER EXTENSION streamguard UPDATE', '42501',
	qr/roles that are not superusers may create objects in its schema.*mallory on schema streamguard/s,
	'the update refuses a schema others may create objects in', dbname => 'att3');
$node->safe_psql('att3', 'REVOKE CREATE ON SCHEMA streamguard FROM mallory');
is($node->safe_psql('att3', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}), '0.2',
	'a refused update leaves 0.2 in place');
expect_ok($node, 'ALTER EXTENSION streamguard UPDATE', 'the update runs once a superuser controls the schema',
	dbname => 'att3');
is($node->safe_psql('att3', $foreign_bindings), '', 'the update rebound every view to pg_catalog');
expect_ok($node, q{
DROP FUNCTION streamguard.unnest(int2[]);
DROP AGGREGATE streamguard.array_agg(int);
DROP FUNCTION streamguard.agg_step(int[], int);
}, 'nothing of the extension depends on the look-alikes any more', dbname => 'att3');
$node->safe_psql('att3', $superuser_reads);
is($node->safe_psql('att3', $is_super), 'f', 'a superuser reads the views of the updated database safely');
is($node->safe_psql('att3', q{
SELECT e.extnamespace::regnamespace || ' ' || EXISTS (SELECT 1 FROM pg_depend d
	WHERE d.classid = 'pg_namespace'::regclass AND d.objid = 'streamguard'::regnamespace AND d.deptype = 'e')
FROM pg_extension e WHERE e.extname = 'streamguard'}), 'pg_catalog true',
	'the updated extension lives in pg_catalog with schema streamguard a member');

# ----------------------------------------------------- pg_dump / pg_restore
# of a fresh and of an updated database: the extension loads and the
# streams, their events and consumer positions are back
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION streamguard');
for my $db ('fresh', 'att3')
{
	$node->safe_psql($db, q{
SELECT streamguard.create_stream('dumped', 2);
SELECT count(*) FROM streamguard.append_batch('dumped',
	ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g));
SELECT count(*) FROM streamguard.poll('dumped', 'c', 4);
});
	my $file = $node->basedir . "/$db.dump";
	$node->command_ok([ 'pg_dump', '-Fc', '-f', $file, '-d', $node->connstr($db) ], "pg_dump of the $db database");
	$node->safe_psql('postgres', "CREATE DATABASE ${db}_restored");
	$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr("${db}_restored"), $file ],
		"pg_restore of the $db database");
	is($node->safe_psql("${db}_restored", q{
SELECT extversion || ' ' || extnamespace::regnamespace FROM pg_extension WHERE extname = 'streamguard'}),
		'0.3 pg_catalog', "restored $db: the extension is installed");
	is($node->safe_psql("${db}_restored", q{
SELECT (SELECT count(*) FROM streamguard.poll('dumped', 'c', 100))
	|| ' ' || (SELECT string_agg(stream, ',' ORDER BY stream) FROM streamguard.streams)}),
		'6 ' . ($db eq 'att3' ? 'cap,dumped' : 'dumped'),
		"restored $db: streams, events and the consumer's position are back");
	$node->safe_psql("${db}_restored", 'DROP EXTENSION streamguard CASCADE');
	is($node->safe_psql("${db}_restored", q{SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'streamguard%'}),
		'0', "restored $db: DROP EXTENSION removes its schemas");
}

# a dump of a 0.2 database creates schema streamguard and then the
# extension in it, which 0.3 refuses: restored as docs/operations.md says
# (0.2 first, the dump without those two entries, then the update)
$node->safe_psql('postgres', 'CREATE DATABASE old2');
$node->safe_psql('old2', q{
CREATE EXTENSION streamguard VERSION '0.2';
SELECT streamguard.create_stream('dumped', 2);
SELECT count(*) FROM streamguard.append_batch('dumped',
	ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g));
SELECT count(*) FROM streamguard.poll('dumped', 'c', 4);
});
my $old_dump = $node->basedir . '/old2.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $old_dump, '-d', $node->connstr('old2') ], 'pg_dump of a 0.2 database');
$node->safe_psql('postgres', 'CREATE DATABASE old2_plain');
my ($out, $err) = run_command([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('old2_plain'), $old_dump ]);
like($err, qr/must be installed in schema "pg_catalog"|schema "streamguard" already exists/,
	'a plain pg_restore of the 0.2 dump stops at the extension');
($out) = run_command([ 'pg_restore', '-l', $old_dump ]);
my $list = join("\n", grep { !/ (SCHEMA|EXTENSION) - streamguard | COMMENT - EXTENSION streamguard/ } split /\n/, $out);
my $list_file = $node->basedir . '/old2.list';
open(my $fh, '>', $list_file) or die "cannot write $list_file: $!";
print $fh "$list\n";
close $fh;
$node->safe_psql('postgres', 'CREATE DATABASE old2_restored');
$node->safe_psql('old2_restored', q{CREATE EXTENSION streamguard VERSION '0.2'});
$node->command_ok([ 'pg_restore', '--exit-on-error', '-L', $list_file, '-d', $node->connstr('old2_restored'), $old_dump ],
	'the 0.2 dump restores into 0.2 without its schema and extension entries');
$node->safe_psql('old2_restored', 'ALTER EXTENSION streamguard UPDATE');
is($node->safe_psql('old2_restored', q{
SELECT extversion || ' ' || (SELECT count(*) FROM streamguard.poll('dumped', 'c', 100))
FROM pg_extension WHERE extname = 'streamguard'}), '0.3 6',
	'... and updates to 0.3 with its streams, events and positions');

$node->stop;
done_testing();
