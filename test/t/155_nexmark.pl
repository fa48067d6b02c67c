
# Nexmark at a small scale (test/nexmark/generator.sql): q0, q1, q2 and q7 as
# streamguard pipelines over one stream `nx` (a kind field), each result
# equal to the same query run as plain SQL over the whole input, and a
# perturbed result caught by the same comparison.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('nexmark');
my $events = 5000;
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
$node->safe_psql('postgres', slurp_file("$FindBin::RealBin/../nexmark/generator.sql"));
$node->safe_psql('postgres', q{
SELECT streamguard.create_stream('nx', 1);
CREATE TABLE q0_out (payload jsonb);
CREATE TABLE q1_out (auction bigint, bidder bigint, price numeric, ts timestamptz);
CREATE TABLE q2_out (auction bigint, price numeric);
CREATE TABLE q7_out (window_start timestamptz, window_end timestamptz, key text, hi numeric);
SELECT streamguard.create_pipeline('q0', 'nx', $$INSERT INTO q0_out SELECT payload FROM batch$$);
SELECT streamguard.create_pipeline('q1', 'nx', $$INSERT INTO q1_out
	SELECT (payload->>'auction')::bigint, (payload->>'bidder')::bigint,
		0.908 * (payload->>'price')::numeric, (payload->>'ts')::timestamptz
	FROM batch WHERE payload->>'kind' = 'bid'$$);
SELECT streamguard.create_pipeline('q2', 'nx', $$INSERT INTO q2_out
	SELECT (payload->>'auction')::bigint, (payload->>'price')::numeric
	FROM batch WHERE payload->>'kind' = 'bid' AND (payload->>'auction')::bigint % 123 = 0$$);
SELECT streamguard.create_window_pipeline('q7', 'nx', 'q7_out', '100 ms',
	aggregates => $${"hi": "max((payload->>'price')::numeric)"}$$,
	event_time => $$payload->>'ts'$$, key => $$'all'$$);
});
ok(wait_pipelines_running($node, [qw(q0 q1 q2 q7)], 60), 'the nexmark pipelines run');
$node->safe_psql('postgres', qq{
CREATE TABLE nx_input AS SELECT * FROM nexmark_events(0, $events, 42);
SELECT count(*) FROM streamguard.append_batch('nx',
	(SELECT array_agg(payload ORDER BY id) FROM nx_input),
	keys => (SELECT array_agg(kind ORDER BY id) FROM nx_input));
-- a far-future event closes the last windows (and is not a bid)
SELECT streamguard.append('nx', '{"kind": "end", "ts": "2030-01-01T00:00:00Z"}', key => 'end');
});

my %plain = (
	q0 => q{SELECT payload FROM nx_input UNION ALL SELECT '{"kind": "end", "ts": "2030-01-01T00:00:00Z"}'},
	q1 => q{SELECT (payload->>'auction')::bigint, (payload->>'bidder')::bigint,
		0.908 * (payload->>'price')::numeric, (payload->>'ts')::timestamptz FROM nx_input WHERE kind = 'bid'},
	q2 => q{SELECT (payload->>'auction')::bigint, (payload->>'price')::numeric
		FROM nx_input WHERE kind = 'bid' AND (payload->>'auction')::bigint % 123 = 0},
	q7 => q{SELECT date_bin('100 ms', (payload->>'ts')::timestamptz, timestamptz '1970-01-01 00:00:00+00') AS ws,
		date_bin('100 ms', (payload->>'ts')::timestamptz, timestamptz '1970-01-01 00:00:00+00') + interval '100 ms',
		'all', max((payload->>'price')::numeric) FROM nx_input GROUP BY 1},
);
my %want = (q0 => $events + 1);
for my $q (sort keys %plain)
{
	my $n = $want{$q} // $node->safe_psql('postgres', "SELECT count(*) FROM ($plain{$q}) p");
	ok(defined wait_for_value($node, "SELECT count(*) FROM ${q}_out", $n, 120), "$q: $n rows");
	my $diff = "SELECT (SELECT count(*) FROM (SELECT * FROM ${q}_out EXCEPT ALL ($plain{$q})) a)
		+ (SELECT count(*) FROM (($plain{$q}) EXCEPT ALL SELECT * FROM ${q}_out) b)";
	is($node->safe_psql('postgres', $diff), '0', "$q: equal to the plain SQL (mismatches)");
	# the check can fail: perturb one row and it is caught
	$node->safe_psql('postgres', "CREATE TABLE ${q}_saved AS SELECT * FROM ${q}_out");
	$node->safe_psql('postgres', "DELETE FROM ${q}_out WHERE ctid = (SELECT min(ctid) FROM ${q}_out)");
	isnt($node->safe_psql('postgres', $diff), '0', "$q: a perturbed result is caught");
}

done_testing();
