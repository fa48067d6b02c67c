
# Security attack suite, part 4: what other roles may see and do, and what
# happens to streamguard objects when their owner goes (docs/security.md).
#
# Threats and cases:
#  (3) leaks through the views.  ann's pipeline fails on an event whose
#      payload holds a secret, and the error text quotes it.  bob, with no
#      privilege on ann's stream, must not read it: in streamguard.pipelines
#      he sees ann's pipeline but last_error/last_error_at are NULL; no
#      dead letter of ann's; remote_status.last_error NULL; no consumer row
#      of a stream he cannot read (until it is granted to him); no
#      pipeline_batches row of ann's pipelines; the secret nowhere in any
#      streamguard view.  ann, a member of ann and the superuser do see the
#      error.  No view fails for anyone.
#  (5) control calls by a non-owner: bob's pause / resume / reset / alter /
#      drop / purge_dead_letters of ann's running pipeline fail with 42501
#      and have no side effect at all: the worker is not fenced, restarted
#      or woken (worker_pid, restarts and epoch unchanged).
#  (6) dangling roles.  DROP ROLE of a role that owns a stream or a pipeline
#      fails like it does for PostgreSQL objects (2BP01, detail naming the
#      objects); REASSIGN OWNED moves them (the pipeline keeps running, as
#      the new owner); DROP OWNED drops them; then DROP ROLE succeeds.
#      grant_stream to a role OID that does not exist: 42704.  A dropped
#      grantee's stream grants vanish with it (so a later role given the
#      same OID inherits nothing).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $t_start = time;
# the node is its own remote: password authentication over TCP loopback
my $node = sg_node('sec103', remote => 1);
my $pw = 'LoaderPw-3Zq9';
my $secret = '4111-SECRET';

sub val { return $node->safe_psql('postgres', $_[0]) }

$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE ann LOGIN;
CREATE ROLE ann_member LOGIN IN ROLE ann;
CREATE ROLE bob LOGIN;
CREATE ROLE r_loader LOGIN PASSWORD '$pw';
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO ann;
CREATE TABLE public.a_sink (n int, who name);
CREATE TABLE public.r_sink (n bigint);
GRANT INSERT, SELECT ON public.a_sink TO PUBLIC;
GRANT INSERT, SELECT ON public.r_sink TO r_loader;
@{[ sink_marker_sql('r_loader') ]}
@{[ remote_server_sql('self', $node) ]}
GRANT USAGE ON FOREIGN SERVER self TO ann;
CREATE USER MAPPING FOR ann SERVER self OPTIONS (user 'r_loader', password '$pw');
});

# ======================================================== (3) the views

expect_ok($node, q{
SELECT streamguard.create_stream('sa', 1);
SELECT streamguard.create_stream('sr', 1);
SELECT streamguard.create_stream('srun', 1);
SELECT streamguard.create_pipeline('pa_stop', 'sa',
	$$INSERT INTO public.a_sink SELECT (payload->>'card')::int, current_user FROM batch$$);
SELECT streamguard.create_pipeline('pa_dl', 'sa',
	$$INSERT INTO public.a_sink SELECT (payload->>'card')::int, current_user FROM batch$$,
	error_policy => 'dead_letter');
SELECT streamguard.create_pipeline('pa_run', 'srun',
	$$INSERT INTO public.a_sink SELECT (payload->>'n')::int, current_user FROM batch$$,
	error_policy => 'dead_letter');
SELECT streamguard.create_pipeline('pa_remote', 'sr', $$SELECT (payload->>'n')::bigint AS n FROM batch$$,
	sink_server => 'self', sink_table => 'public.r_sink');
}, '(3) ann creates her streams and pipelines', user => 'ann');
ok(wait_pipelines_running($node, [qw(pa_stop pa_dl pa_run pa_remote)], 60), '(3) ann\'s pipelines run')
  or diag(pipelines_report($node));
val(qq{SELECT streamguard.append('sa', '{"card": 1}');
SELECT streamguard.append('sa', '{"card": "$secret"}');
SELECT streamguard.append('sr', '{"n": 1}');
SELECT streamguard.append('srun', '{"n": 1}');
SELECT streamguard.append('srun', '{"n": "$secret"}');});
ok( wait_for_value($node, qq{SELECT state = 'failed' AND last_error LIKE '%$secret%'
	FROM streamguard.pipelines WHERE pipeline = 'pa_stop'}, 't', 30),
	'(3) pa_stop failed on the poison event, its error quoting the payload');
ok(wait_for_value($node, q{SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'pa_dl'}, 1, 30),
	'(3) pa_dl dead-lettered it');
ok(wait_for_value($node, q{SELECT count(*) FROM public.r_sink}, 1, 30), '(3) pa_remote delivered');
ok(wait_for_value($node, q{SELECT dead_letters FROM streamguard.pipelines WHERE pipeline = 'pa_run'}, 1, 30),
	'(3) pa_run dead-lettered its poison event');

# a remote error: a wrong password, and the remote sessions ended
val(q{ALTER USER MAPPING FOR ann SERVER self OPTIONS (SET password 'Wrong-pw-1');
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'r_loader';
SELECT streamguard.append('sr', '{"n": 2}');});
ok( wait_for_value($node, q{SELECT coalesce(last_error, '') <> '' FROM streamguard.remote_status
	WHERE pipeline = 'pa_remote' AND side = 'sink'}, 't', 30),
	'(3) the superuser sees the remote error of pa_remote in remote_status');

for my $who (qw(ann ann_member), undef)
{
	my $label = $who // 'the superuser';
	my ($ok, $out, $err) = try_psql($node, q{SELECT last_error IS NOT NULL AND last_error_at IS NOT NULL
		AND last_error LIKE '%SECRET%' FROM streamguard.pipelines WHERE pipeline = 'pa_stop'}, $who ? (user => $who) : ());
	is($out, 't', "(3) $label sees pa_stop's error") or diag($err);
	($ok, $out, $err) = try_psql($node, q{SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'pa_dl'},
		$who ? (user => $who) : ());
	is($out, '1', "(3) $label sees pa_dl's dead letter") or diag($err);
}
{
	my ($ok, $out, $err) = try_psql($node, q{SELECT count(*), count(last_error), count(last_error_at)
		FROM streamguard.pipelines WHERE pipeline = 'pa_stop'}, user => 'bob');
	is($out, '1|0|0', '(3) bob sees ann\'s pipeline, but last_error and last_error_at are NULL') or diag($err);
	($ok, $out, $err) = try_psql($node, q{SELECT count(*) FROM streamguard.dead_letters}, user => 'bob');
	is($out, '0', '(3) bob sees none of ann\'s dead letters') or diag($err);
	($ok, $out, $err) = try_psql($node, q{SELECT count(*), count(last_error) FROM streamguard.remote_status
		WHERE pipeline = 'pa_remote'}, user => 'bob');
	is($out, '1|0', '(3) bob sees remote_status of pa_remote with last_error NULL') or diag($err);
	($ok, $out, $err) = try_psql($node, q{SELECT count(*) FROM streamguard.consumers WHERE stream = 'sa'}, user => 'bob');
	is($out, '0', '(3) bob sees no consumer of a stream he cannot read') or diag($err);
	($ok, $out, $err) = try_psql($node, q{SELECT count(*) FROM streamguard.pipeline_batches
		WHERE pipeline LIKE 'pa\_%'}, user => 'bob');
	is($out, '0', '(3) bob sees no pipeline_batches rows of ann\'s pipelines') or diag($err);
	($ok, $out, $err) = try_psql($node, q{SELECT count(*) > 0 FROM streamguard.pipeline_batches
		WHERE pipeline = 'pa_dl'}, user => 'ann');
	is($out, 't', '(3) ann sees her pipeline_batches rows') or diag($err);
}

# the secret in no view, for bob; and no view fails for anyone
my @views = split /\n/, val(q{SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'streamguard' AND c.relkind IN ('v', 'm') ORDER BY 1});
for my $who (qw(ann ann_member bob), undef)
{
	my $label = $who // 'the superuser';
	my ($fails, $all) = ('', '');
	for my $v (@views)
	{
		my ($ok, $out, $err) = try_psql($node, "SELECT * FROM streamguard.$v", $who ? (user => $who) : ());
		$fails .= "$v: $err\n" unless $ok;
		$all .= "$v: $out\n";
	}
	is($fails, '', "(3) every streamguard view works for $label");
	if (($who // '') eq 'bob')
	{
		unlike($all, qr/\Q$secret\E/, '(3) bob finds the secret in no streamguard view');
	}
}

# after a grant of read, bob sees the consumers of that stream
val(q{SELECT streamguard.grant_stream('sa', 'bob', 'read')});
is((try_psql($node, q{SELECT count(*) > 0 FROM streamguard.consumers WHERE stream = 'sa'}, user => 'bob'))[1],
	't', '(3) after grant_stream(sa, bob, read) bob sees its consumers');

# ================================================ (5) control by non-owners

sub pa_run_state
{
	return val(q{SELECT worker_pid || '/' || restarts || '/' || epoch FROM streamguard.pipelines WHERE pipeline = 'pa_run'});
}
ok(wait_pipelines_running($node, ['pa_run'], 30), '(5) pa_run runs');
my $before = pa_run_state();
for my $call (
	[ 'pause_pipeline', q{SELECT streamguard.pause_pipeline('pa_run')} ],
	[ 'resume_pipeline', q{SELECT streamguard.resume_pipeline('pa_run')} ],
	[ 'reset_pipeline', q{SELECT streamguard.reset_pipeline('pa_run')} ],
	[ 'reset_pipeline by seq', q{SELECT streamguard.reset_pipeline('pa_run', seq => 1)} ],
	[ 'alter_pipeline', q{SELECT streamguard.alter_pipeline('pa_run', batch_size => 7)} ],
	[ 'drop_pipeline', q{SELECT streamguard.drop_pipeline('pa_run')} ],
	[ 'purge_dead_letters', q{SELECT streamguard.purge_dead_letters('pa_run')} ])
{
	expect_error($node, $call->[1], '42501', qr/pa_run/, "(5) bob calls $call->[0] on ann's pipeline", user => 'bob');
}
# give a disturbed worker the time to notice (a fenced worker exits at its
# next wake-up, the supervisor starts another within a maintenance round)
{
	my $deadline = time + 2.5;
	my $changed = '';
	while (time < $deadline)
	{
		my $now = pa_run_state();
		if ($now ne $before) { $changed = $now; last; }
		usleep(100_000);
	}
	is($changed, '', "(5) pa_run's worker_pid / restarts / epoch ($before) did not change");
}
is(pa_run_state(), $before, '(5) ... and are the same after the calls');
is(val(q{SELECT state || '/' || batch_size || '/' || dead_letters FROM streamguard.pipelines WHERE pipeline = 'pa_run'}),
	'running/1000/1', '(5) pa_run is still running, unaltered, with its dead letter');

# ======================================================= (6) dangling roles

$node->safe_psql('postgres', q{
CREATE ROLE alice LOGIN;
CREATE ROLE carol LOGIN;
CREATE ROLE dave LOGIN;
CREATE TABLE public.own_sink (seq bigint, who name);
GRANT INSERT, SELECT ON public.own_sink TO PUBLIC;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO alice;
});
expect_ok($node, q{
SELECT streamguard.create_stream('s6', 1);
SELECT streamguard.create_pipeline('p6', 's6', $$INSERT INTO public.own_sink SELECT seq, current_user FROM batch$$);
}, '(6) alice creates stream s6 and pipeline p6', user => 'alice');
val(q{REVOKE EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) FROM alice});
is(val(q{SELECT count(*) FROM pg_shdepend WHERE refobjid = 'alice'::regrole}), 0,
	'(6) alice owns no PostgreSQL object and holds no privilege (only streamguard objects)');
ok(wait_pipelines_running($node, ['p6'], 30), '(6) p6 runs');
val(q{SELECT streamguard.append('s6', '{}')});
ok(wait_for_value($node, q{SELECT string_agg(who::text, ',') FROM public.own_sink}, 'alice', 30),
	'(6) p6 runs as alice');

# DROP ROLE must fail; in a transaction rolled back, so that a build that
# lets it through does not spoil the next steps
{
	my ($ok, $out, $err) = try_psql($node, "BEGIN;\nDROP ROLE alice;\nROLLBACK;");
	ok(!$ok, '(6) DROP ROLE alice while she owns a stream and a pipeline fails');
	is(sqlstate($err), '2BP01', '(6) ... with SQLSTATE 2BP01') or diag($err);
	like($err, qr/owner of stream "?s6"?/, '(6) ... the detail names the stream');
	like($err, qr/owner of pipeline "?p6"?/, '(6) ... and the pipeline');
}
expect_ok($node, 'REASSIGN OWNED BY alice TO carol', '(6) REASSIGN OWNED BY alice TO carol');
is(val(q{SELECT owner FROM streamguard.streams WHERE stream = 's6'}), 'carol', '(6) the streams view shows carol as owner of s6');
is(val(q{SELECT owner FROM streamguard.pipelines WHERE pipeline = 'p6'}), 'carol', '(6) the pipelines view shows carol as owner of p6');
val(q{SELECT streamguard.append('s6', '{}')});
ok( wait_for_value($node, q{SELECT who FROM public.own_sink ORDER BY seq DESC LIMIT 1}, 'carol', 20),
	'(6) p6 keeps running, now as carol') or diag(pipelines_report($node));
expect_ok($node, 'BEGIN; DROP ROLE alice; ROLLBACK;', '(6) alice, owning nothing now, could be dropped');
expect_ok($node, 'DROP OWNED BY carol', '(6) DROP OWNED BY carol');
is(val(q{SELECT count(*) FROM streamguard.pipelines WHERE pipeline = 'p6'}), 0, '(6) DROP OWNED dropped carol\'s pipeline');
is(val(q{SELECT count(*) FROM streamguard.streams WHERE stream = 's6'}), 0, '(6) DROP OWNED dropped carol\'s stream');
expect_ok($node, 'DROP ROLE alice; DROP ROLE carol;', '(6) then DROP ROLE alice and carol succeed');

val(q{SELECT streamguard.create_stream('s6b', 1); SELECT streamguard.append('s6b', '{}')});
expect_error($node, q{SELECT streamguard.grant_stream('s6b', 0::regrole, 'read')}, '42704', qr/0|role/,
	'(6) grant_stream to role OID 0');
expect_error($node, q{SELECT streamguard.grant_stream('s6b', 999999::oid::regrole, 'read')}, '42704', qr/999999|role/,
	'(6) grant_stream to a role OID that does not exist');
val(q{SELECT streamguard.grant_stream('s6b', 'dave', 'read')});
is((try_psql($node, q{SELECT count(*) FROM streamguard.poll('s6b', 'dc')}, user => 'dave'))[1], '1',
	'(6) dave reads s6b through his grant');
expect_ok($node, 'DROP ROLE dave', '(6) DROP ROLE dave (he owns nothing, he only had a grant)');
is( val(q{SELECT count(*) FROM streamguard.stream_grant g
	WHERE NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g.grantee)}),
	0, '(6) no stream grant is left for a role that does not exist');
val(q{CREATE ROLE erin LOGIN});
expect_error($node, q{SELECT count(*) FROM streamguard.poll('s6b', 'ec')}, '42501', qr/s6b/,
	'(6) a role created afterwards cannot read s6b', user => 'erin');

state_diag($node);
diag(sprintf('duration %.0f s', time - $t_start));
$node->stop;
done_testing();
