
# Upserting remote sinks (create_pipeline(..., sink_on_conflict => columns);
# docs/sql-reference.md "Remote servers", docs/guarantees.md).
#
# "remote" holds two sink tables with hostile names (quotes, spaces, a
# keyword, a semicolon) and a primary key on two of their columns; a
# trigger records the event (its unique "v;drop" value) of every row it
# inserts or updates in `applied`, so a batch applied twice shows as a
# repeated event.  "local" holds the
# stream `us` (2 partitions; the event key is the conflict key, so a key's
# events are in one partition, in seq order) and two pipelines:
#   up_2pc  two_phase, dead_letter  -> "Up ""Sink""" 2pc
#   up_off  offsets, dead_letter    -> "Up ""Sink""" off
# Events update 150 keys over and over (several times within one batch
# too); some carry a "select" value the sink's CHECK rejects (dead letters,
# through the isolated run in one remote transaction).
#
# Bad options first: sink_on_conflict without a sink, with an unknown (or
# differently cased) column, a repeated one, none, a NULL, a SELECT column
# named like the staging table's own, and a remote table without a unique
# index on the columns (the remote's 42P10, relayed).
#
# Then kills of the worker (after_prepare, after_local_commit, mid_copy;
# after_remote_commit, mid_copy) and an immediate restart of the remote,
# each while events flow; after each: each sink holds exactly the last
# event of every key, no event was applied twice, every rejected event is a
# dead letter once, and the staging tables are empty.  Last, three events of
# one key in one batch: only the last is applied.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my ($remote, $local) = sg_remote_pair(remote_name => 'up_remote', local_name => 'up_local',
	local => { extra => "streamguard.remote_timeout='5s'\n" });
my $pw = 'up-Pw-1414';
my %sink = (up_2pc => q{"Up ""Sink"" 2pc"}, up_off => q{"Up ""Sink"" off"});
my %mode = (up_2pc => 'two_phase', up_off => 'offsets');

$remote->safe_psql('postgres', qq{
CREATE ROLE loader LOGIN PASSWORD '$pw';
GRANT CREATE ON SCHEMA public TO loader;
SET ROLE loader;
CREATE TABLE applied (sink text, v text);
CREATE FUNCTION note_applied() RETURNS trigger LANGUAGE plpgsql AS
\$\$BEGIN INSERT INTO applied VALUES (TG_TABLE_NAME, NEW."v;drop"); RETURN NEW; END\$\$;
CREATE TABLE no_key ("Key col" text, "select" int, "v;drop" text, seq bigint);
} . join('', map { qq{
CREATE TABLE public.$_ ("Key col" text NOT NULL, "select" int NOT NULL CHECK ("select" >= 0),
	"v;drop" text, seq bigint NOT NULL, PRIMARY KEY ("Key col", "select"));
CREATE TRIGGER note AFTER INSERT OR UPDATE ON public.$_ FOR EACH ROW EXECUTE FUNCTION note_applied();
} } sort values %sink));

$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
@{[ remote_server_sql('rs', $remote, user => 'loader', password => $pw, app => 'sg_up') ]}
SELECT streamguard.create_stream('us', 2);
});

my $select = q{SELECT payload->>'k' AS "Key col", (payload->>'s')::int AS "select",
	payload->>'v' AS "v;drop", seq FROM batch};
my $conflict = q{ARRAY['Key col', 'select']};

# ------------------------------------------------------------ bad options

sub create_sql
{
	my ($name, %o) = @_;
	my $sql = $o{sql} // $select;
	my $extra = join('', map { ", $_ => $o{$_}" } grep { $_ ne 'sql' } sort keys %o);
	return qq{SELECT streamguard.create_pipeline('$name', 'us', \$\$$sql\$\$$extra)};
}
expect_error($local, create_sql('bad1', sink_on_conflict => $conflict), '22023', qr/needs a remote sink/,
	'sink_on_conflict without a remote sink');
expect_error($local, create_sql('bad2', sink_server => q{'rs'}, sink_table => q{'public."Up ""Sink"" 2pc"'},
	sink_on_conflict => q{ARRAY['Key col', 'nope']}), '42703', qr/"nope" is not an output column/,
	'an unknown conflict column');
expect_error($local, create_sql('bad3', sink_server => q{'rs'}, sink_table => q{'public."Up ""Sink"" 2pc"'},
	sink_on_conflict => q{ARRAY['key col']}), '42703', qr/"key col" is not an output column/,
	'a conflict column in the wrong case');
expect_error($local, create_sql('bad4', sink_server => q{'rs'}, sink_table => q{'public."Up ""Sink"" 2pc"'},
	sink_on_conflict => q{ARRAY['select', 'select']}), '22023', qr/appears twice/, 'a repeated conflict column');
expect_error($local, create_sql('bad5', sink_server => q{'rs'}, sink_table => q{'public."Up ""Sink"" 2pc"'},
	sink_on_conflict => q{'{}'::text[]}), '22023', qr/at least one column/, 'no conflict column');
expect_error($local, create_sql('bad6', sink_server => q{'rs'}, sink_table => q{'public."Up ""Sink"" 2pc"'},
	sink_on_conflict => q{ARRAY['select', NULL]}), '22004', qr/must not contain NULL/, 'a NULL conflict column');
expect_error($local, create_sql('bad7', sink_server => q{'rs'}, sink_table => q{'public."Up ""Sink"" 2pc"'},
	sink_on_conflict => q{ARRAY['select']}, sql => q{SELECT seq AS streamguard_ord, 1 AS "select" FROM batch}),
	'22023', qr/may not return a column named "streamguard_ord"/, 'a column named like the staging table\'s own');
expect_error($local, create_sql('bad8', sink_server => q{'rs'}, sink_table => q{'no_key'},
	sink_on_conflict => $conflict), '42P10', qr/remote server "rs": there is no unique or exclusion constraint/,
	'a remote table without a unique index on the conflict columns');
is($local->safe_psql('postgres', q{SELECT count(*) FROM streamguard.pipelines}), '0', 'nothing left behind');

# ------------------------------------------------------------ pipelines

for my $p (sort keys %sink)
{
	$local->safe_psql('postgres', create_sql($p, sink_server => q{'rs'}, sink_table => "'public.$sink{$p}'",
		sink_mode => "'$mode{$p}'", sink_on_conflict => $conflict, error_policy => q{'dead_letter'},
		max_attempts => 1, retry_backoff => q{'10 ms'}, max_backoff => q{'200 ms'}, batch_size => 200));
}
ok(wait_pipelines_running($local, [ sort keys %sink ], 60), 'the upserting pipelines run')
  or BAIL_OUT(pipelines_report($local));

# event g: key k<g % 50> (with a tab, a quote and a backslash), select g % 3,
# rejected by the sink when g % 97 = 0 (select -1)
my $n = 0;
sub append_events
{
	my ($count) = @_;
	my ($from, $to) = ($n + 1, $n + $count);
	$n = $to;
	# (an armed kill fault may fire on these events and cut the session
	# after its commit: psql_across_crash)
	psql_across_crash($local, qq{SELECT count(*) FROM streamguard.append_batch('us',
		ARRAY(SELECT jsonb_build_object('k', 'k' || g % 50 || E'\\t"\\\\', 's', CASE WHEN g % 97 = 0 THEN -1 ELSE g % 3 END,
			'v', 'v' || g) FROM generate_series($from, $to) g),
		keys => ARRAY(SELECT (g % 50) || ':' || CASE WHEN g % 97 = 0 THEN -1 ELSE g % 3 END
			FROM generate_series($from, $to) g))},
		done => stream_has_sql('us', "e.payload->>'v' = 'v$to'"));
}
sub expected
{
	my %last;
	for my $g (1 .. $n)
	{
		next if $g % 97 == 0;
		$last{ 'k' . ($g % 50) . "\t\"\\" . '|' . ($g % 3) } = "v$g";
	}
	return join("\n", map { "$_|$last{$_}" } sort keys %last);
}
sub check_all
{
	my ($what) = @_;
	my $exp = expected();
	my $nbad = grep { $_ % 97 == 0 } 1 .. $n;
	for my $p (sort keys %sink)
	{
		my $sql = qq{SELECT string_agg("Key col" || '|' || "select" || '|' || "v;drop", E'\\n'
			ORDER BY "Key col" COLLATE "C", "select") FROM public.$sink{$p}};
		# after a failed check, waits are short: the file only has to end
		my $patience = Test::More->builder->is_passing ? 1 : 0.1;
		ok(wait_for_value($remote, $sql, $exp, 90 * $patience), "$p $what: the sink holds the last event of every key")
		  or diag(pipelines_report($local));
		ok(wait_for_value($local, "SELECT count(*) FROM streamguard.dead_letter WHERE pipeline = '$p'", $nbad, 60 * $patience),
			"$p $what: every rejected event is a dead letter");
		is($local->safe_psql('postgres', "SELECT count(DISTINCT seq) FROM streamguard.dead_letter WHERE pipeline = '$p'"),
			$nbad, "$p $what: ... once");
		(my $tab = $sink{$p}) =~ s/^"|"$//g;
		$tab =~ s/""/"/g;
		is($remote->safe_psql('postgres', qq{SELECT count(*) - count(DISTINCT v) FROM applied WHERE sink = '$tab'}),
			'0', "$p $what: no event applied twice");
	}
	# each staging table counted on its own (no xpath: servers without libxml)
	my @stage = split /\n/, $remote->safe_psql('postgres',
		q{SELECT format('public.%I', tablename) FROM pg_tables WHERE tablename LIKE 'streamguard_stage_%' ORDER BY 1});
	my $rows = 0;
	$rows += $remote->safe_psql('postgres', "SELECT count(*) FROM $_") for @stage;
	is(scalar(@stage) . ":$rows", '2:0', "$what: one staging table per pipeline, empty");
	is($remote->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', "$what: nothing left prepared");
}

append_events(300) for 1 .. 3;
check_all('first load');

my $fx = fault_context($local, [ sort keys %sink ], remote => $remote);
for my $case ([ 'up_2pc', 'after_prepare' ], [ 'up_2pc', 'after_local_commit' ], [ 'up_2pc', 'mid_copy' ],
	[ 'up_off', 'after_remote_commit' ], [ 'up_off', 'mid_copy' ])
{
	my ($p, $point) = @$case;
	$local->safe_psql('postgres', "SELECT streamguard.inject_fault('$p', '$point', 'kill')");
	my $off = log_offset($local);
	append_events(250);
	# (a batch with a rejected row fails its plain attempt first and runs
	# isolated after the retry backoff: under load this takes a while)
	ok(defined wait_log($local, qr/pipeline "$p": injected fault, killing the worker/, $off, 150),
		"$p: killed at $point");
	is(fault_fired($fx, "$p $point", $off), 1, '... and back');
	append_events(100);
	check_all("kill at $p $point");
}
append_events(250);
$remote->stop('immediate');
$remote->start;
append_events(100);
check_all('remote restarted');

# several events of one key in one batch without a rejected row (the plain
# path, not the isolated one): the last one wins, the others are never applied
$local->safe_psql('postgres', q{SELECT count(*) FROM streamguard.append_batch('us',
	ARRAY['{"k": "dup", "s": 1, "v": "first"}', '{"k": "dup", "s": 1, "v": "second"}',
		  '{"k": "dup", "s": 1, "v": "last"}']::jsonb[], keys => ARRAY['dup', 'dup', 'dup'])});
for my $p (sort keys %sink)
{
	(my $tab = $sink{$p}) =~ s/^"|"$//g;
	$tab =~ s/""/"/g;
	ok(wait_for_value($remote, qq{SELECT "v;drop" FROM public.$sink{$p} WHERE "Key col" = 'dup'}, 'last', 60),
		"$p: of three events of one key in a batch, the last is in the sink");
	is($remote->safe_psql('postgres', qq{SELECT string_agg(v, ',') FROM applied WHERE sink = '$tab'
		AND v IN ('first', 'second', 'last')}), 'last', "$p: ... and the only one applied");
}

$local->stop;
$remote->stop;
done_testing();
