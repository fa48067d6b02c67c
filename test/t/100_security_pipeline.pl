
# Security attack suite, part 1: a pipeline's own SQL must not leak settings
# into streamguard's SQL (docs/security.md, "How the workers run" and
# "streamguard's own SQL").
#
# Threat: the pipeline worker connects as the bootstrap superuser and runs
# the pipeline's SQL as its owner.  An ordinary role owns a pipeline whose
# SQL changes session settings (SET search_path = <its schema>, pg_catalog;
# SET work_mem; pg_catalog.set_config(..., false)).  If those settings
# survive the user's SQL, every statement the worker runs afterwards as the
# superuser / data owner that names an operator or function without
# pg_catalog resolves the attacker's look-alike (sec_evil_sql in
# StreamguardTest.pm) and runs it with superuser rights: ALTER ROLE
# attacker SUPERUSER.
#
# Cases (one attacker role and schema per case, so that the cases do not
# contaminate each other):
#   eo    local source, local sink, exactly_once
#   alo   at_least_once (a second transaction advances the positions)
#   amo   at_most_once (the positions commit before the SQL runs)
#   dd    dedup => true (the pipeline dedup SQL runs every batch)
#   dl    error_policy dead_letter with a poison event (isolation and the
#         dead-letter SQL)
#   rsink remote two_phase sink (remote bookkeeping: remote_prepared)
#   rsrc  remote source (remote_position bookkeeping)
# Each case asserts: no escalation (sec_assert_no_escalation), the
# pipeline ran as the attacker, and nothing a batch set is visible to the
# next batch: every batch records current_setting('search_path'/'work_mem')
# before setting them, and every record shows the definition-time
# search_path and the default work_mem, never '77kB'.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time);

my $t_start = time;
my ($remote, $node) = sg_remote_pair(remote_name => 'sec100_remote', local_name => 'sec100_local');
my $pw = 'LoaderPw-x81Q';

$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE r_loader LOGIN PASSWORD '$pw';
CREATE TABLE sink_rs (seq bigint, wm text, sp text, x1 text, x2 text);
GRANT SELECT, INSERT ON sink_rs TO r_loader;
@{[ sink_marker_sql('r_loader') ]}
SELECT streamguard.create_stream('rsrc', 1);
SELECT streamguard.grant_stream('rsrc', 'r_loader', 'read');
});
my $default_wm = $node->safe_psql('postgres', 'SHOW work_mem');

# ---------------------------------------------------------------- set up

my @local = (
	{ tag => 'eo',  opts => q{guarantee => 'exactly_once'} },
	{ tag => 'alo', opts => q{guarantee => 'at_least_once'} },
	{ tag => 'amo', opts => q{guarantee => 'at_most_once'} },
	{ tag => 'dd',  opts => q{dedup => true} },
	{ tag => 'dl',  opts => q{error_policy => 'dead_letter'}, poison => 1 },
);
my @all = (@local, { tag => 'rsink', remote => 'sink' }, { tag => 'rsrc', remote => 'source' });

$node->safe_psql('postgres', remote_server_sql('rsrv', $remote));

for my $c (@all)
{
	my $t = $c->{tag};
	my ($r, $s) = ("att_$t", "atk_$t");
	@$c{qw(role schema)} = ($r, $s);
	sec_make_attacker($node, $r);
	sec_install_evil($node, role => $r, schema => $s, tag => $t);
	if ($c->{remote})
	{
		$node->safe_psql('postgres', qq{
GRANT USAGE ON FOREIGN SERVER rsrv TO $r;
CREATE USER MAPPING FOR $r SERVER rsrv OPTIONS (user 'r_loader', password '$pw');});
	}
	my $leak = qq{SET work_mem = '77kB';
SET search_path = $s, pg_catalog;
SELECT pg_catalog.set_config('search_path', '$s, pg_catalog', false);};
	my $seen = qq{INSERT INTO $s.seen SELECT pg_catalog.current_setting('search_path'),
	pg_catalog.current_setting('work_mem') FROM batch LIMIT 1;};
	my $create;
	if (!$c->{remote})
	{
		$create = qq{
SELECT streamguard.create_stream('src_$t', 1);
SELECT streamguard.create_pipeline('p_$t', 'src_$t', \$sql\$
$seen
$leak
INSERT INTO $s.sink SELECT seq, (payload->>'n')::int, current_user FROM batch;
\$sql\$, $c->{opts});};
	}
	elsif ($c->{remote} eq 'source')
	{
		$create = qq{
SELECT streamguard.create_pipeline('p_$t', 'rsrc', \$sql\$
$seen
$leak
INSERT INTO $s.sink SELECT seq, (payload->>'n')::int, current_user FROM batch;
\$sql\$, source_server => 'rsrv');};
	}
	else
	{
		# a remote sink takes a single SELECT: the settings are changed by
		# set_config in the select list, after reading them
		$create = qq{
SELECT streamguard.create_stream('src_$t', 1);
SELECT streamguard.create_pipeline('p_$t', 'src_$t', \$sql\$
SELECT seq, pg_catalog.current_setting('work_mem') AS wm, pg_catalog.current_setting('search_path') AS sp,
	pg_catalog.set_config('work_mem', '77kB', false) AS x1,
	pg_catalog.set_config('search_path', '$s, pg_catalog', false) AS x2
FROM batch
\$sql\$, sink_server => 'rsrv', sink_table => 'public.sink_rs', sink_mode => 'two_phase');};
	}
	$c->{created} = expect_ok($node, qq{
SET search_path = public;
CREATE TABLE $s.seen (sp text, wm text);
CREATE TABLE $s.sink (seq bigint, n int, who name);
$create}, "$t: $r creates its stream and pipeline p_$t", user => $r);
}

my @created = map { "p_$_->{tag}" } grep { $_->{created} } @all;
ok(wait_pipelines_running($node, \@created, 60), 'the pipelines run') or diag(pipelines_report($node));

# ---------------------------------------------------------------- batches
#
# One event per round and stream, each round processed before the next, so
# that every round is a batch of its own.  dl gets a poison event in round 3.

my $rounds = 5;
for my $round (1 .. $rounds)
{
	for my $c (@all)
	{
		next unless $c->{created};
		my $payload = ($c->{poison} && $round == 3) ? '{"n": "poison"}' : qq{{"n": $round}};
		if ($c->{remote} && $c->{remote} eq 'source')
		{
			$remote->safe_psql('postgres', qq{SELECT streamguard.append('rsrc', '$payload')});
		}
		else
		{
			my $dk = $c->{tag} eq 'dd' ? ", dedup_key => 'k$round'" : '';
			$node->safe_psql('postgres', qq{SELECT streamguard.append('src_$c->{tag}', '$payload'$dk)});
		}
	}
	for my $c (@all)
	{
		next unless $c->{created};
		my $want = $round - (($c->{poison} && $round >= 3) ? 1 : 0);
		my $q = $c->{remote} && $c->{remote} eq 'sink'
		  ? 'SELECT count(*) FROM sink_rs' : "SELECT count(*) FROM $c->{schema}.sink";
		my $ok = $c->{remote} && $c->{remote} eq 'sink'
		  ? wait_for_value($remote, $q, $want, 30)
		  : wait_for_value($node, $q, $want, 30);
		ok($ok, "$c->{tag}: round $round delivered") or diag(pipelines_report($node));
	}
}

# ---------------------------------------------------------------- checks

for my $c (@all)
{
	my ($t, $r, $s) = @$c{qw(tag role schema)};
	next unless $c->{created};
	if ($c->{remote} && $c->{remote} eq 'sink')
	{
		my $rows = $remote->safe_psql('postgres', q{SELECT count(*) FROM sink_rs});
		is($rows, $rounds, "$t: every batch reached the remote sink");
		is( $remote->safe_psql('postgres', qq{SELECT coalesce(string_agg(seq || ':' || wm || '/' || sp, ', ' ORDER BY seq), '')
			FROM sink_rs WHERE wm <> '$default_wm' OR sp <> 'public'}),
			'', "$t: no batch saw a setting made by an earlier batch (work_mem $default_wm, search_path public)");
	}
	else
	{
		my $n = sec_val($node, "SELECT count(*) FROM $s.seen");
		cmp_ok($n, '>=', $rounds - 1, "$t: every batch recorded its settings ($n)");
		is( sec_val($node, qq{SELECT coalesce(string_agg(wm || '/' || sp, ', '), '')
			FROM $s.seen WHERE wm <> '$default_wm' OR sp <> 'public'}),
			'', "$t: no batch saw a setting made by an earlier batch (work_mem $default_wm, search_path public)");
		is(sec_val($node, "SELECT string_agg(DISTINCT who::text, ',') FROM $s.sink"), $r,
			"$t: the pipeline's SQL ran as $r");
	}
	if ($c->{poison})
	{
		is(sec_val($node, "SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'p_$t'"), 1,
			"$t: the poison event is a dead letter");
	}
	sec_assert_no_escalation($node, role => $r, schema => $s, tag => $t);
}

is( sec_val($node, q{SELECT coalesce(string_agg(rolname, ','), '') FROM pg_roles WHERE rolsuper AND oid <> 10}),
	'', 'no role but the bootstrap superuser is a superuser');

# the worker's own later statements: pause and resume every pipeline (the
# worker exits and a new one starts), one more round, and check again
for my $p (@created)
{
	$node->safe_psql('postgres', "SELECT streamguard.pause_pipeline('$p'); SELECT streamguard.resume_pipeline('$p')");
}
ok(wait_pipelines_running($node, \@created, 60), 'after pause and resume the pipelines run again');
for my $c (grep { $_->{created} && !$_->{remote} } @all)
{
	$node->safe_psql('postgres', "TRUNCATE $c->{schema}.seen");
	$node->safe_psql('postgres', qq{SELECT streamguard.append('src_$c->{tag}', '{"n": 99}')});
	ok(wait_for_value($node, "SELECT count(*) FROM $c->{schema}.sink WHERE n = 99", 1, 30),
		"$c->{tag}: a batch after the restart is delivered");
	is( sec_val($node, qq{SELECT count(*) FROM $c->{schema}.seen WHERE wm <> '$default_wm' OR sp <> 'public'}),
		0, "$c->{tag}: ... and saw only its own settings");
	sec_assert_no_escalation($node, role => $c->{role}, schema => $c->{schema}, tag => $c->{tag},
		name => "$c->{tag} after restart");
}

state_diag($node);
diag(sprintf('duration %.0f s', time - $t_start));
$node->stop;
$remote->stop;
done_testing();
