
# Remote servers: the security model (docs/security.md; SQL reference "Remote
# servers"): credentials live only in user mappings, a pipeline connects
# with its owner's mapping and needs USAGE on the server, and a
# non-superuser must authenticate to the remote with a password the remote
# actually asked for (postgres_fdw's rule: no borrowing the server's trust).
#
# The remote asks TCP clients on 127.0.0.1 for a SCRAM password, except the
# role r_trusted, which a line before it trusts; its unix socket trusts
# everyone (the test framework's line).  Locally, alice, bob and carol are
# ordinary roles.
#   - alice's mapping without a password: 2F003 "password is required"
#     (sink and source);
#   - with a password, but the remote trusts that user (TCP trust line) or
#     the server points at the remote's unix socket: 2F003 too;
#   - a wrong password: the remote's authentication error, no password in it;
#   - with the right password: the pipeline is created, runs as alice and
#     delivers through the remote role r_loader; at run time the rule and
#     USAGE are enforced again when the worker reconnects;
#   - bob, without USAGE on the server: 42501;
#   - carol and bob query every view of schema streamguard: no password
#     appears anywhere;
#   - invalid options: HV00D (and HV024 for a bad port value).

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
my ($remote, $local) = sg_remote_pair(remote => { trust_tcp => ['r_trusted'] },
	local => { extra => "streamguard.remote_timeout='5s'\n" });
my $loader_pw = 'LoaderSecret-q7Zx';
my $trusted_pw = 'TrustedSecret-k2Vw';
my $bob_pw = 'BobSecret-p9Lm';
my $wrong_pw = 'WrongSecret-a1Bc';
my @secrets = ($loader_pw, $trusted_pw, $bob_pw, $wrong_pw);

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE r_loader LOGIN PASSWORD '$loader_pw';
CREATE ROLE r_trusted LOGIN PASSWORD '$trusted_pw';
CREATE TABLE sink (id bigint NOT NULL, seq bigint);
GRANT SELECT, INSERT ON sink TO r_loader, r_trusted;
@{[ sink_marker_sql('r_loader', 'r_trusted') ]}
SELECT streamguard.create_stream('rstream', 1);
SELECT streamguard.grant_stream('rstream', 'r_loader', 'read');
SELECT streamguard.grant_stream('rstream', 'r_trusted', 'read');
});

# the remote really asks r_loader for a password over TCP, and trusts r_trusted
{
	my ($ok, $out, $err) = try_psql($remote, 'SELECT 1', connstr => tcp_connstr($remote, 'r_loader', $wrong_pw));
	ok(!$ok && $err =~ /password authentication failed/, 'setup: the remote asks r_loader for its password over TCP')
	  or diag($err);
	($ok, $out) = try_psql($remote, 'SELECT current_user', connstr => tcp_connstr($remote, 'r_loader', $loader_pw));
	is($out, 'r_loader', 'setup: ... and accepts the right one');
	($ok, $out) = try_psql($remote, 'SELECT current_user', connstr => tcp_connstr($remote, 'r_trusted', 'nothing'));
	is($out, 'r_trusted', 'setup: the remote trusts r_trusted on 127.0.0.1');
}

$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE alice LOGIN;
CREATE ROLE bob LOGIN;
CREATE ROLE carol LOGIN;
SELECT streamguard.create_stream('ev', 2);
SELECT streamguard.grant_stream('ev', 'alice', 'read');
SELECT streamguard.grant_stream('ev', 'bob', 'read');
SELECT streamguard.grant_stream('ev', 'carol', 'read');
@{[ remote_server_sql('srv', $remote) ]}
@{[ remote_server_sql('srv_t', $remote) ]}
-- through the remote's unix socket directory
@{[ remote_server_sql('srv_sock', $remote, host => $remote->host) ]}
GRANT USAGE ON FOREIGN SERVER srv, srv_t, srv_sock TO alice;
CREATE USER MAPPING FOR alice SERVER srv OPTIONS (user 'r_loader');
CREATE USER MAPPING FOR alice SERVER srv_t OPTIONS (user 'r_trusted', password '$trusted_pw');
CREATE USER MAPPING FOR alice SERVER srv_sock OPTIONS (user 'r_loader', password '$loader_pw');
CREATE USER MAPPING FOR bob SERVER srv OPTIONS (user 'r_loader', password '$bob_pw');
});

my $sel = q{SELECT (payload->>'n')::bigint AS id, seq FROM batch};
sub sink_pipeline
{
	my ($name, $server, $mode) = @_;
	$mode //= 'two_phase';
	return qq{SELECT streamguard.create_pipeline('$name', 'ev', \$\$$sel\$\$,
		sink_server => '$server', sink_table => 'public.sink', sink_mode => '$mode')};
}
sub source_pipeline
{
	my ($name, $server) = @_;
	return qq{CREATE TABLE IF NOT EXISTS ${name}_out (id bigint);
SELECT streamguard.create_pipeline('$name', 'rstream',
	\$\$INSERT INTO ${name}_out SELECT seq FROM batch\$\$, source_server => '$server')};
}
$local->safe_psql('postgres', 'GRANT CREATE ON SCHEMA public TO alice, bob');

# ------------------------------------------------------- the password rule

expect_error($local, sink_pipeline('a_nopw', 'srv'), '2F003', qr/password is required/,
	'sink, mapping without a password', user => 'alice');
expect_error($local, source_pipeline('a_nopw_src', 'srv'), '2F003', qr/password is required/,
	'source, mapping without a password', user => 'alice');
expect_error($local, sink_pipeline('a_trust', 'srv_t'), '2F003', qr/password is required/,
	'sink, with a password the remote did not ask for (trust line)', user => 'alice');
expect_error($local, source_pipeline('a_trust_src', 'srv_t'), '2F003', qr/password is required/,
	'source, with a password the remote did not ask for (trust line)', user => 'alice');
expect_error($local, sink_pipeline('a_sock', 'srv_sock', 'offsets'), '2F003', qr/password is required/,
	'sink, with a password, through the remote\'s trusted unix socket', user => 'alice');
is($remote->safe_psql('postgres', q{SELECT count(*) FROM pg_tables WHERE tablename = 'streamguard_sink_offsets'}),
	0, '... before touching anything on the remote');

# a wrong password: the remote's error, no password in it
$local->safe_psql('postgres', qq{ALTER USER MAPPING FOR alice SERVER srv OPTIONS (ADD password '$wrong_pw')});
{
	my ($ok, $out, $err) = try_psql($local, sink_pipeline('a_wrong', 'srv'), user => 'alice');
	ok(!$ok, 'a wrong password: create_pipeline fails');
	like($err, qr/password authentication failed for user "r_loader"/, '... with the remote\'s authentication error');
	unlike($err, qr/\Q$wrong_pw\E/, '... which does not show the password');
}
is($local->safe_psql('postgres', q{SELECT count(*) FROM streamguard.pipelines}), 0,
	'no failed create_pipeline left a pipeline behind');

# the superuser is exempt from the rule (postgres_fdw's rule too)
$local->safe_psql('postgres', qq{CREATE USER MAPPING FOR CURRENT_USER SERVER srv_t OPTIONS (user 'r_trusted')});
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('su_trust')})
  if expect_ok($local, sink_pipeline('su_trust', 'srv_t'), 'a superuser\'s mapping without a password is accepted');

# the right password: it works, as alice, through r_loader
$local->safe_psql('postgres', qq{ALTER USER MAPPING FOR alice SERVER srv OPTIONS (SET password '$loader_pw')});
expect_ok($local, sink_pipeline('a_ok', 'srv'),
	'with the password the remote asks for, alice creates a remote-sink pipeline', user => 'alice');
expect_ok($local, source_pipeline('a_ok_src', 'srv'), '... and a remote-source pipeline', user => 'alice');

# offsets mode needs two bookkeeping tables the remote user may not create
# (no CREATE on public since PostgreSQL 15): one error names both and its
# hint gives both statements; created as it says, the pipeline is created
{
	my ($ok, $out, $err) = try_psql($local, sink_pipeline('a_off', 'srv', 'offsets'), user => 'alice');
	ok(!$ok && sqlstate($err) eq '42501', 'offsets mode without its remote tables: 42501') or diag($err);
	like($err, qr/tables public\.streamguard_sink_offsets and public\.streamguard_sink_dead_letters do not exist on remote server "srv" and its user may not create them/,
		'... one error names both tables');
	my ($hint) = $err =~ /^HINT:\s+(.*)$/m;
	like($hint // '', qr/CREATE TABLE public\.streamguard_sink_offsets .*; CREATE TABLE public\.streamguard_sink_dead_letters .*; then GRANT SELECT, INSERT, UPDATE, DELETE ON public\.streamguard_sink_offsets, public\.streamguard_sink_dead_letters TO/,
		'... and the hint gives both statements and the grant') or diag($err);
	my @ddl = ($hint // '') =~ /(CREATE TABLE [^;]+);/g;
	$remote->safe_psql('postgres', join(";\n", @ddl, 'GRANT SELECT, INSERT, UPDATE, DELETE ON public.streamguard_sink_offsets, public.streamguard_sink_dead_letters TO r_loader'));
	expect_ok($local, sink_pipeline('a_off', 'srv', 'offsets'), '... run as the hint says, the pipeline is created', user => 'alice');
	$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('a_off')});
}
is($local->safe_psql('postgres', q{SELECT string_agg(pipeline || ':' || owner, ',' ORDER BY pipeline) FROM streamguard.pipelines}),
	'a_ok:alice,a_ok_src:alice', 'both pipelines are owned by alice');
ok(wait_pipelines_running($local, [qw(a_ok a_ok_src)], 60), 'both run');
$local->safe_psql('postgres',
	q{SELECT count(*) FROM streamguard.append_batch('ev', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g))});
$remote->safe_psql('postgres',
	q{SELECT count(*) FROM streamguard.append_batch('rstream', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g))});
ok(wait_for_value($remote, 'SELECT count(*) FROM sink', 100, 60), 'the sink pipeline delivers to the remote');
ok(wait_for_value($local, 'SELECT count(*) FROM a_ok_src_out', 10, 60), 'the source pipeline reads from the remote');
is( $remote->safe_psql('postgres',
		q{SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE application_name = 'streamguard'}),
	'r_loader', 'the remote sessions of alice\'s pipelines are r_loader\'s (her mapping)');

# -------------------------------------------------- enforced at run time too

sub reconnect_with
{
	my ($change, $expect, $name) = @_;
	my $off = log_offset($local);
	$local->safe_psql('postgres', $change);
	# the remote sessions stay: the catalog change alone makes the worker
	# connect again at its next batch (an invalidation), which the change
	# refuses; before, a connected worker went on writing
	$local->safe_psql('postgres',
		q{SELECT count(*) FROM streamguard.append_batch('ev', ARRAY[jsonb_build_object('n', 1000 + (random() * 1000)::int)])});
	ok( wait_for_value($local,
			qq{SELECT last_error ~ '$expect' FROM streamguard.pipelines WHERE pipeline = 'a_ok'}, 't', 30),
		"run time: $name stops the connected worker at its next batch")
	  or diag(pipelines_report($local));
	ok( defined wait_log($local, qr/pipeline "a_ok": batch failed \(attempt \d+\): [^\n]*$expect/, $off, 10),
		"run time: ... and the batch fails with it");
}
my $before = $remote->safe_psql('postgres', 'SELECT count(*) FROM sink');
reconnect_with(q{ALTER USER MAPPING FOR alice SERVER srv OPTIONS (DROP password)},
	'password is required', 'a mapping without a password');
reconnect_with(
	qq{ALTER USER MAPPING FOR alice SERVER srv OPTIONS (ADD password '$loader_pw');
	   REVOKE USAGE ON FOREIGN SERVER srv FROM alice},
	'permission denied for foreign server srv', 'losing USAGE on the server');
is($remote->safe_psql('postgres', 'SELECT count(*) FROM sink'), $before, 'run time: nothing was delivered meanwhile');

# ------------------------------------------------------- no USAGE: 42501

expect_error($local, sink_pipeline('b_nousage', 'srv'), '42501', qr/permission denied for foreign server srv/,
	'bob without USAGE on the server (sink)', user => 'bob');
expect_error($local, source_pipeline('b_nousage_src', 'srv'), '42501', qr/permission denied for foreign server srv/,
	'bob without USAGE on the server (source)', user => 'bob');

# --------------------------------------- no credentials through any view

# while alice's pipeline has an error and remote status to show
my @views = split /\n/, $local->safe_psql('postgres',
	q{SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	  WHERE n.nspname = 'streamguard' AND c.relkind IN ('v', 'm') ORDER BY 1});
cmp_ok(scalar @views, '>=', 5, 'schema streamguard has views: ' . join(', ', @views));
for my $role (qw(carol bob))
{
	my ($all, $readable) = ('', 0);
	for my $v (@views)
	{
		my ($ok, $out, $err) = try_psql($local, "SELECT * FROM streamguard.$v", user => $role);
		$readable++ if $ok;
		$all .= "$v: $out $err\n";
	}
	# and the catalogs PostgreSQL offers (options of others' mappings hidden)
	my ($ok, $out, $err) = try_psql($local, 'SELECT * FROM pg_user_mappings', user => $role);
	$all .= "pg_user_mappings: $out $err\n";
	my @leaked = grep { index($all, $_) >= 0 } @secrets;
	is(scalar @leaked, 0, "$role: no password in any streamguard view ($readable of " . scalar(@views) . ' readable)')
	  or diag("leaked: @leaked");
	like($all, qr/a_ok/, "$role: ... which do show alice's pipelines");
}
# the remote status is there, the credentials are not
like( (try_psql($local, q{SELECT pipeline || ' ' || server || ' ' || coalesce(last_error, '') FROM streamguard.remote_status
	WHERE pipeline = 'a_ok'}, user => 'carol'))[1],
	qr/a_ok srv/, 'carol sees the remote status of alice\'s pipeline');
# the internal function behind remote_status: PUBLIC may call it (the view
# calls it with the caller's rights), and it filters the error by itself
ok(wait_for_value($local, q{SELECT count(*) > 0 FROM streamguard._remote_runtime() WHERE last_error IS NOT NULL},
	't', 30), 'a superuser sees the remote error of alice\'s pipeline in _remote_runtime()');
like( (try_psql($local, q{SELECT count(*) || ' ' || count(last_error) FROM streamguard._remote_runtime()},
		user => 'carol'))[1],
	qr/^[1-9]\d* 0$/, 'carol calling _remote_runtime() directly sees the connections but no error text');

# restore and deliver again
$local->safe_psql('postgres', q{GRANT USAGE ON FOREIGN SERVER srv TO alice});
ok(wait_for_value($remote, 'SELECT count(*) FROM sink', $before + 2, 60),
	'with USAGE and the password back, the pipeline delivers what was held back');

# ------------------------------------------------------- invalid options

expect_error($local, q{CREATE SERVER bad1 FOREIGN DATA WRAPPER streamguard_remote OPTIONS (hots '127.0.0.1')},
	'HV00D', qr/invalid option "hots"/, 'an unknown server option');
expect_error($local, qq{CREATE SERVER bad2 FOREIGN DATA WRAPPER streamguard_remote OPTIONS (host '127.0.0.1', password '$loader_pw')},
	'HV00D', qr/invalid option "password"/, 'a password as a server option (credentials live in user mappings)');
expect_error($local, q{CREATE SERVER bad3 FOREIGN DATA WRAPPER streamguard_remote OPTIONS (user 'r_loader')},
	'HV00D', qr/invalid option "user"/, 'a user as a server option');
expect_error($local, q{ALTER SERVER srv OPTIONS (ADD sslkey '/tmp/x')},
	'HV00D', qr/invalid option "sslkey"/, 'ALTER SERVER with an unknown option');
expect_error($local, q{CREATE USER MAPPING FOR carol SERVER srv OPTIONS (user 'r_loader', host 'elsewhere')},
	'HV00D', qr/invalid option "host"/, 'a server option in a user mapping');
expect_error($local, q{CREATE USER MAPPING FOR carol SERVER srv OPTIONS (user 'r_loader', passfile '/tmp/pw')},
	'HV00D', qr/invalid option "passfile"/, 'passfile in a user mapping');
expect_error($local, q{CREATE SERVER bad4 FOREIGN DATA WRAPPER streamguard_remote OPTIONS (port 'abc')},
	'HV024', qr/port/, 'a port that is not a number');
is($local->safe_psql('postgres', q{SELECT count(*) FROM pg_foreign_server WHERE srvname LIKE 'bad%'}), 0,
	'no invalid server was created');

# test-only fault injection is for superusers
expect_error($local, q{SELECT streamguard.inject_fault('a_ok', 'mid_batch')}, '42501', undef,
	'alice cannot inject faults', user => 'alice');

state_diag($local, remote => 1);
diag(sprintf('duration %.0f s', time - $t_start));

$local->stop;
$remote->stop;
done_testing();
