
# Security attack suite, part 7: change capture (docs/security.md, "Change
# capture").
#
# Threats:
#  (a) a writer of a captured table, with no privilege on the stream, whose
#      session (and role) put a schema of look-alike operators and functions
#      (SecTest.pm) first on its search_path and change TimeZone, DateStyle,
#      IntervalStyle, extra_float_digits and bytea_output.  The capture
#      trigger runs in the writer's statement and switches to the data owner
#      (catalog, claims): an operator it resolved through that search_path
#      would run the look-alike as the data owner; a setting that shaped a
#      key would send one row's events to two partitions.  A backfill is
#      running meanwhile (the claims are written on every change); the
#      table's owner finishes it with run_backfill_chunk.
#  (b) the attacker owns a captured table with a column of its own type
#      whose cast to json is its own function (to_jsonb calls it).  When a
#      superuser writes the table and when the backfill worker reads it, the
#      cast must run as the table's owner, never as the writer or the
#      worker's superuser.
#  (c) the attacker owns the database and sets its search_path to the
#      look-alikes: the backfill worker and the maintenance worker connect to
#      it as the bootstrap superuser.
# Each case: no escalation (SecTest), and the events are right.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use StreamguardTest;

# slow backfills (a row per chunk, a pause between chunks), so that writers
# meet them in progress
my $node = sg_node('sec106', extra => qq{
streamguard.backfill_chunk_rows = 1
streamguard.backfill_naptime = '3s'
});
my $pin = sec_pin();
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');

sub sq
{
	my ($sql, %opt) = @_;
	return $node->safe_psql($opt{dbname} // 'postgres', $pin . $sql);
}

# the events of a stream with one partition, as "op key row" lines
sub events
{
	my ($stream, %opt) = @_;
	return sq(qq{SELECT string_agg(payload->>'op' || ' ' || key || ' ' || coalesce(payload->>'row', '-'), E'\\n' ORDER BY seq)
		FROM streamguard.read('$stream', 0, 0, 1000)}, %opt);
}

# ========================================================== (a) the writer

sec_make_attacker($node, 'atk');
sq(q{
CREATE ROLE victim;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO victim;
CREATE SCHEMA vs AUTHORIZATION victim;
GRANT USAGE ON SCHEMA vs TO atk;
SET ROLE victim;
SELECT streamguard.create_stream('vstream', 1);
CREATE TABLE vs.t (id int PRIMARY KEY, ts timestamptz, f float8, b bytea, iv interval, note text);
INSERT INTO vs.t SELECT g, '2024-01-01 00:00+00', 0.1, '\x00ff', '1 day 2 hours', 'old' FROM generate_series(1, 4) g;
SELECT streamguard.capture_table('vs.t', 'vstream');
GRANT SELECT, INSERT, UPDATE, DELETE ON vs.t TO atk;
RESET ROLE;
});
sec_install_evil($node, role => 'atk', schema => 'atk_evil', tag => 'writer');
{
	my ($ok, $out, $err) = try_psql($node, 'ALTER ROLE atk SET search_path = atk_evil, pg_catalog', user => 'atk');
	ok($ok, '(a) the writer sets its own search_path to its look-alikes') or diag($err);
}
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'vs.t'::regclass},
	'running', 30, pgoptions => '-c search_path=pg_catalog,pg_temp'), '(a) the backfill is running');

my ($ok, $out, $err) = try_psql($node, q{
SET TimeZone = 'Pacific/Chatham';
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = 'sql_standard';
SET extra_float_digits = -15;
SET bytea_output = 'escape';
SELECT current_setting('search_path');
INSERT INTO vs.t VALUES (10, '2024-01-01 00:00+00', 0.1, '\x00ff', '1 day 2 hours', 'atk');
UPDATE vs.t SET note = 'by atk', ts = ts + interval '1 hour' WHERE id = 3;
UPDATE vs.t SET id = 30 WHERE id = 4;
DELETE FROM vs.t WHERE id = 10;
INSERT INTO vs.t VALUES (10, '2024-01-01 00:00+00', 0.1, '\x00ff', '1 day 2 hours', 'atk');
SELECT streamguard.append('vstream', '{}');
}, user => 'atk');
ok(!$ok && $err =~ /permission denied to append to stream "vstream"/,
	'(a) the writer may not append to the stream itself, but its changes went through') or diag("$out\n$err");
like($out, qr/^atk_evil, pg_catalog/, '(a) ... with the look-alikes first on its search_path');
# the same row written by a clean session: the same bytes
sq(q{INSERT INTO vs.t VALUES (11, '2024-01-01 00:00+00', 0.1, '\x00ff', '1 day 2 hours', 'atk')});

# the owner runs the rest of the backfill by hand, alongside the worker
my $left = 1;
my $deadline = time + 60;
while ($left && time < $deadline)
{
	$left = sq(q{SET ROLE victim; SELECT streamguard.run_backfill_chunk('vs.t', 'vstream', 10)});
}
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'vs.t'::regclass},
	'done', 60, pgoptions => '-c search_path=pg_catalog,pg_temp'),
	'(a) the backfill completes (the worker and run_backfill_chunk side by side)');
my $row = '{"b": "\\\\x00ff", "f": 0.1, "id": %d, "iv": "1 day 02:00:00", "ts": "2024-01-01T00:00:00+00:00", "note": "atk"}';
diag("(a) events:\n" . events('vstream'));
is(sq(q{SELECT payload->'row' FROM streamguard.read('vstream', 0, 0, 1000) WHERE key = '10' AND payload->>'op' = 'insert' ORDER BY seq LIMIT 1}),
	sprintf($row, 10), "(a) the writer's settings did not change its row's JSON");
is(sq(q{SELECT payload->'row' FROM streamguard.read('vstream', 0, 0, 1000) WHERE key = '11'}),
	sprintf($row, 11), '(a) ... which is what a clean session writes');
is( sq(q{SELECT string_agg(payload->>'op', ',' ORDER BY seq) FROM streamguard.read('vstream', 0, 0, 1000)
	WHERE key IN ('10', '30')}),
	'insert,insert,delete,insert', "(a) the writer's inserts, key change and delete were captured");
is( sq(q{
	WITH e AS (SELECT * FROM streamguard.read('vstream', 0, 0, 1000)),
	last AS (SELECT DISTINCT ON (key) key, payload FROM e ORDER BY key, seq DESC)
	SELECT string_agg(key || '=' || (payload->'row'->>'note'), ',' ORDER BY key::int)
	FROM last WHERE payload->>'op' <> 'delete'}),
	sq(q{SELECT string_agg(id || '=' || note, ',' ORDER BY id) FROM vs.t}),
	'(a) replaying the stream gives the table');
is( sq(q{SELECT string_agg(key, ',' ORDER BY key) FROM streamguard.read('vstream', 0, 0, 1000)
	WHERE payload->>'op' = 'backfill' AND key IN ('1', '2')}),
	'1,2', '(a) the backfill sent each row nobody changed once');
sec_assert_no_escalation($node, role => 'atk', schema => 'atk_evil', tag => 'writer', name => '(a) hostile writer');

# =================================================== (b) the table's owner

sec_make_attacker($node, 'atk2');
{
	my ($ok, $out, $err) = try_psql($node, q{
CREATE SCHEMA atk2s;
} . sec_evil_sql(role => 'atk2', schema => 'atk2s', tag => 'owner') . q{
CREATE TYPE atk2s.span AS RANGE (subtype = int4);
CREATE FUNCTION atk2s.span_json(s atk2s.span) RETURNS json LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
	PERFORM atk2s.evil_hook('cast to json');
	RETURN pg_catalog.json_build_object('lo', pg_catalog.lower(s), 'hi', pg_catalog.upper(s));
END $f$;
CREATE CAST (atk2s.span AS json) WITH FUNCTION atk2s.span_json(atk2s.span);
CREATE TABLE atk2s.t (id int PRIMARY KEY, s atk2s.span);
INSERT INTO atk2s.t VALUES (1, '[1,5)'), (2, '[2,6)');
SELECT streamguard.create_stream('ostream', 1);
SELECT streamguard.capture_table('atk2s.t', 'ostream');
GRANT USAGE ON SCHEMA atk2s TO PUBLIC;
}, user => 'atk2');
	ok($ok, '(b) the attacker captures its own table, with its own cast to json') or diag($err);
}
# a superuser writes the table
sq(q{INSERT INTO atk2s.t VALUES (3, '[3,7)'); UPDATE atk2s.t SET s = '[10,20)' WHERE id = 2});
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'atk2s.t'::regclass},
	'done', 60, pgoptions => '-c search_path=pg_catalog,pg_temp'), '(b) the backfill worker completes');
diag("(b) events:\n" . events('ostream'));
is( sq(q{
	WITH last AS (SELECT DISTINCT ON (key) key, payload FROM streamguard.read('ostream', 0, 0, 100) ORDER BY key, seq DESC)
	SELECT string_agg(key || ' ' || (payload->'row'->>'s'), ', ' ORDER BY key)
	FROM last WHERE payload->>'op' <> 'delete'}),
	'1 {"hi": 5, "lo": 1}, 2 {"hi": 20, "lo": 10}, 3 {"hi": 7, "lo": 3}',
	"(b) the owner's cast shaped the events: replaying them gives the table");
is( sq(q{SELECT string_agg(DISTINCT payload->>'op', ',' ORDER BY payload->>'op') FROM streamguard.read('ostream', 0, 0, 100)}),
	'backfill,insert,update', '(b) ... from the superuser\'s writes and from the backfill');
is(sq(q{SELECT string_agg(DISTINCT who::text, ',') FROM atk2s.evil_calls WHERE what = 'cast to json'}),
	'atk2', '(b) the cast ran, always as the table owner');
sec_assert_no_escalation($node, role => 'atk2', schema => 'atk2s', tag => 'owner', name => '(b) hostile table owner');

# ============================================== (c) the database's owner

$node->safe_psql('postgres', q{
CREATE ROLE atk3 LOGIN;
CREATE DATABASE evil_cap OWNER atk3;
});
sq(q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('dstream', 1);
CREATE TABLE public.t (id int PRIMARY KEY, v text);
INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 3) g;
GRANT SELECT, INSERT, UPDATE ON public.t TO atk3;
}, dbname => 'evil_cap');
{
	my ($ok, $out, $err) = try_psql($node, 'CREATE SCHEMA evil', user => 'atk3', dbname => 'evil_cap');
	ok($ok, '(c) the database owner creates schema evil') or diag($err);
}
sec_install_evil($node, role => 'atk3', schema => 'evil', tag => 'db', dbname => 'evil_cap');
{
	my ($ok, $out, $err) = try_psql($node, 'ALTER DATABASE evil_cap SET search_path = evil, pg_catalog',
		user => 'atk3', dbname => 'evil_cap');
	ok($ok, '(c) the database owner sets the database search_path to evil, pg_catalog') or diag($err);
}
# the capture comes after: its backfill worker connects with the poisoned settings
sq(q{SELECT streamguard.capture_table('public.t', 'dstream')}, dbname => 'evil_cap');
{
	my ($ok, $out, $err) = try_psql($node, q{UPDATE public.t SET v = 'by atk3' WHERE id = 2; INSERT INTO public.t VALUES (9, 'atk3')},
		user => 'atk3', dbname => 'evil_cap');
	ok($ok, '(c) the database owner writes the table') or diag($err);
}
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'public.t'::regclass},
	'done', 60, dbname => 'evil_cap', pgoptions => '-c search_path=pg_catalog,pg_temp'),
	'(c) the backfill worker completes in the poisoned database');
is( sq(q{
	WITH last AS (SELECT DISTINCT ON (key) key, payload FROM streamguard.read('dstream', 0, 0, 100) ORDER BY key, seq DESC)
	SELECT string_agg(key || '=' || (payload->'row'->>'v'), ',' ORDER BY key) FROM last WHERE payload->>'op' <> 'delete'},
		dbname => 'evil_cap'),
	'1=v1,2=by atk3,3=v3,9=atk3', '(c) replaying the stream gives the table');
is( sq(q{SELECT count(*) FROM streamguard.read('dstream', 0, 0, 100) WHERE payload->>'op' = 'backfill'
	AND key IN ('1', '3')}, dbname => 'evil_cap'), '2', '(c) the backfill sent the rows nobody changed');
sec_assert_no_escalation($node, role => 'atk3', schema => 'evil', tag => 'db', dbname => 'evil_cap',
	name => '(c) database search_path');

$node->stop;
done_testing();
