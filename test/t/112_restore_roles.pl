# Owners and grantees across clusters: pg_dump names the role, not its OID.
#
# A stream, a pipeline and a capture owned by role app, a stream grant to
# role intern, dumped from one cluster and restored into another where the
# two roles were created the other way round, so that intern has there the
# OID app had in the first cluster.  With owners stored as OIDs (0.2) the
# restored pipeline ran its SQL as intern.  Now:
#   - every owner and grantee comes back as the role of that name;
#   - the restored pipeline runs its SQL as app (current_user in its sink);
#   - the capture appends as app, and intern keeps its read grant only;
#   - a restore into a cluster without role app fails, naming the role,
#     instead of giving app's objects to some other role;
#   - a parallel restore (pg_restore -j) as docs/operations.md says: the
#     catalog's data after the rest, in order.
# docs/operations.md, "Backups".

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $src = sg_node('rr_src');
my $dst = sg_node('rr_dst');
my $bare = sg_node('rr_bare');

$src->safe_psql('postgres', q{
CREATE ROLE app;
CREATE ROLE intern;
});
# the other order: intern takes the OID app has in the source cluster
$dst->safe_psql('postgres', q{
CREATE ROLE intern;
CREATE ROLE app;
});
$bare->safe_psql('postgres', 'CREATE ROLE intern');

my $app_src = $src->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'app'});
my $app_dst = $dst->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'app'});
isnt($app_src, $app_dst, "precondition: app has another OID in the second cluster ($app_src, $app_dst)");
my $holder = $dst->safe_psql('postgres', "SELECT coalesce((SELECT rolname FROM pg_roles WHERE oid = $app_src), '(none)')");
note("in the second cluster, app's old OID $app_src belongs to: $holder");

for my $node ($src, $dst, $bare)
{
	$node->safe_psql('postgres', 'CREATE DATABASE app');
	$node->safe_psql('app', 'CREATE EXTENSION streamguard');
}
$src->safe_psql('app', q{
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO app;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
SELECT streamguard.create_stream('orders', 2);
SELECT streamguard.grant_stream('orders', 'intern', 'read');
CREATE TABLE public.ran_as (id bigint PRIMARY KEY, who name NOT NULL);
GRANT SELECT ON public.ran_as TO PUBLIC;
SELECT streamguard.create_pipeline('who', 'orders',
	$$INSERT INTO public.ran_as SELECT (payload->>'id')::bigint, current_user FROM batch$$);
CREATE TABLE public.accounts (id int PRIMARY KEY, v text);
SELECT streamguard.create_stream('account_changes', 1);
SELECT streamguard.capture_table('public.accounts', 'account_changes', backfill => false);
RESET ROLE;
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series(1, 5) g));
});
ok(wait_for_value($src, q{SELECT count(*) FROM public.ran_as}, '5', 120, dbname => 'app'),
	'the pipeline ran in the first cluster');
# stop it, so that the dump holds a paused pipeline and no batch races it
$src->safe_psql('app', q{SELECT streamguard.pause_pipeline('who')});

my $file = $src->basedir . '/app.dump';
$src->command_ok([ 'pg_dump', '-Fc', '-f', $file, '-d', $src->connstr('app') ], 'pg_dump of the database');

# ------------------------------------------- into the other role order
$dst->safe_psql('app', 'DROP EXTENSION streamguard');
$dst->command_ok([ 'pg_restore', '--exit-on-error', '-d', $dst->connstr('app'), $file ],
	'pg_restore into the cluster where the roles have other OIDs');
is($dst->safe_psql('app', q{
SELECT (SELECT string_agg(stream || ':' || owner, ',' ORDER BY stream) FROM streamguard.streams)
	|| ' ' || (SELECT string_agg(pipeline || ':' || owner, ',') FROM streamguard.pipelines)
	|| ' ' || (SELECT string_agg(owner::text, ',') FROM streamguard.captures)
	|| ' ' || (SELECT string_agg(grantee::text || ':' || can_read, ',') FROM streamguard.stream_grant)}),
	'account_changes:app,orders:app who:app app intern:true',
	'owners and the grantee come back by name');
is($dst->safe_psql('app', qq{
SELECT count(*) FROM streamguard.stream WHERE owner::oid = $app_dst}), '2',
	"the owner's OID is the second cluster's app ($app_dst)");

# the restored pipeline, resumed, runs as app
$dst->safe_psql('app', q{
SELECT streamguard.resume_pipeline('who');
SELECT count(*) FROM streamguard.append_batch('orders',
	ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series(6, 10) g));
});
ok(wait_for_value($dst, q{SELECT count(*) FROM public.ran_as}, '10', 120, dbname => 'app'),
	'the restored pipeline consumes the new events');
is($dst->safe_psql('app', q{SELECT string_agg(DISTINCT who::text, ',') FROM public.ran_as WHERE id > 5}),
	'app', 'the restored pipeline runs its SQL as app, not as the holder of the old OID');

# the capture appends as app; intern reads, and owns nothing
$dst->safe_psql('app', q{INSERT INTO public.accounts VALUES (1, 'a')});
is($dst->safe_psql('app', q{
SET ROLE intern;
SELECT count(*) FROM streamguard.poll('orders', 'intern_reader', 100)}), '10',
	'intern reads the stream it was granted');
my ($ok, $out, $err) = try_psql($dst, q{
SET ROLE intern;
SELECT streamguard.drop_stream('orders', force => true)}, dbname => 'app');
like($err, qr/must be owner|permission denied/, 'intern does not own the restored stream');
is($dst->safe_psql('app', q{
SELECT count(*) FROM streamguard.read('account_changes', 0, 0, 10)}), '1',
	'the restored capture appends');

# ------------------------------------------- a parallel restore, in two steps
# pg_restore -j loads the extension's catalog tables side by side, and
# their foreign keys (created by CREATE EXTENSION, before the data) then
# refuse rows whose stream is not loaded yet.  docs/operations.md's recipe:
# everything else in parallel, then the catalog's data in the list's order.
$dst->safe_psql('postgres', 'CREATE DATABASE app_parallel');
my ($lout, $lerr) = run_command([ 'pg_restore', '-l', $file ]);
my @toc = split /\n/, $lout;
my $plist = $dst->basedir . '/parallel.list';
my $clist = $dst->basedir . '/catalog.list';
open(my $pfh, '>', $plist) or die;
print $pfh join("\n", grep { !/ TABLE DATA streamguard / } @toc), "\n";
close $pfh;
open(my $cfh, '>', $clist) or die;
print $cfh join("\n", grep { / TABLE DATA streamguard / } @toc), "\n";
close $cfh;
$dst->command_ok([ 'pg_restore', '--exit-on-error', '-j', '4', '-L', $plist, '-d', $dst->connstr('app_parallel'), $file ],
	'parallel restore: everything but the catalog data, with -j 4');
$dst->command_ok([ 'pg_restore', '--exit-on-error', '-L', $clist, '-d', $dst->connstr('app_parallel'), $file ],
	'parallel restore: then the catalog data, in order');
is($dst->safe_psql('app_parallel', q{
SELECT (SELECT string_agg(stream || ':' || owner, ',' ORDER BY stream) FROM streamguard.streams)
	|| ' ' || (SELECT string_agg(pipeline || ':' || owner, ',') FROM streamguard.pipelines)
	|| ' ' || (SELECT count(*) FROM streamguard.captures)
	|| ' ' || (SELECT count(*) FROM public.ran_as)}),
	'account_changes:app,orders:app who:app 1 5', 'parallel restore: streams, pipeline, capture and sink are back');
$dst->safe_psql('app_parallel', q{INSERT INTO public.accounts VALUES (2, 'b')});
is($dst->safe_psql('app_parallel', q{SELECT count(*) FROM streamguard.read('account_changes', 0, 0, 10)}), '1',
	'parallel restore: the captured table takes writes and captures them');

# ------------------------------------------------ a role that is missing
$bare->safe_psql('app', 'DROP EXTENSION streamguard');
($out, $err) = run_command([ 'pg_restore', '--exit-on-error', '-d', $bare->connstr('app'), $file ]);
like($err, qr/role "app" does not exist/, 'a restore without role app fails, naming it');
is($bare->safe_psql('app', q{
SELECT coalesce((SELECT count(*) FROM streamguard.stream), 0)}), '0',
	'and gives app\'s streams to nobody else');

$_->stop for ($src, $dst, $bare);
done_testing();
