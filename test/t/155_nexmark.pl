# Nexmark at a small scale (test/nexmark/generator.sql): q0 to q8 (and q5w, q7b) as
# exactly_once streamguard pipelines over one stream `nx` (a kind field),
# defined in test/nexmark/queries.pl (shared with the benchmark), each
# result equal to the same query run as plain SQL over the whole input, and
# a perturbed result caught by the same comparison.  NX_EVENTS sets the
# scale (default 5000 events).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my @queries = do "$FindBin::RealBin/../nexmark/queries.pl" or die "queries.pl: $@ $!";
my $events = $ENV{NX_EVENTS} || 5000;

# thirteen pipelines: room for their workers beside the maintenance worker
my $node = sg_node('nexmark', extra => "max_worker_processes = 24\n");
$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
$node->safe_psql('postgres', slurp_file("$FindBin::RealBin/../nexmark/generator.sql"));
$node->safe_psql('postgres', q{SELECT streamguard.create_stream('nx', 1)});
$node->safe_psql('postgres', $_->{setup}) for @queries;
my @pipelines = map { @{ $_->{pipelines} } } @queries;
# batches that cut the input at odd places: 777 events, and 7 for q5w's
# second pipeline, so that one window's rows arrive over several batches
$node->safe_psql('postgres', join(";\n", map { "SELECT streamguard.alter_pipeline('$_', batch_size => "
	  . ($_ eq 'q5w' ? 7 : 777) . ')' } @pipelines));
ok(wait_pipelines_running($node, \@pipelines, 90), 'the nexmark pipelines run');
$node->safe_psql('postgres', qq{
CREATE TABLE nx_input AS SELECT * FROM nexmark_events(0, $events, 42);
SELECT count(*) FROM streamguard.append_batch('nx',
	(SELECT array_agg(payload ORDER BY id) FROM nx_input),
	keys => (SELECT array_agg(kind ORDER BY id) FROM nx_input));
-- a far-future event closes the last windows and auctions (and is no bid)
SELECT streamguard.append('nx', '{"kind": "end", "ts": "2030-01-01T00:00:00Z"}', key => 'end');
});

for my $qd (@queries)
{
	my ($q, $out, $plain) = @$qd{qw(name out plain)};
	# drained: every pipeline of the query has read its whole source
	for my $p (@{ $qd->{pipelines} })
	{
		my $src = $p eq $qd->{pipelines}[-1] ? $qd->{source} : 'nx';
		ok(wait_for_value($node, qq{SELECT (SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$src')
			= (SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = '$src' AND consumer = 'pipeline:$p')
			AND EXISTS (SELECT 1 FROM streamguard.pipelines WHERE pipeline = '$p' AND state = 'running')}, 't', 180),
			"$q: $p has read all of $src");
	}
	my $n = $node->safe_psql('postgres', "SELECT count(*) FROM ($plain) p");
	ok($n > 0, "$q: the plain SQL has rows ($n)");
	ok(wait_for_value($node, "SELECT count(*) FROM ($out) o", $n, 120), "$q: $n rows");
	my $diff = "SELECT (SELECT count(*) FROM (($out) EXCEPT ALL ($plain)) a)
		+ (SELECT count(*) FROM (($plain) EXCEPT ALL ($out)) b)";
	is($node->safe_psql('postgres', $diff), '0', "$q: equal to the plain SQL (mismatches)");
	# the check can fail: perturb one row and it is caught
	$node->safe_psql('postgres', "DELETE FROM ${q}_out WHERE ctid = (SELECT min(ctid) FROM ${q}_out)");
	isnt($node->safe_psql('postgres', $diff), '0', "$q: a perturbed result is caught");
}

done_testing();
