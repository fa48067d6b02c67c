# The plans of streamguard's own statements over a backlog.
#
# Every statement of ours finds rows by key and is prepared for generic
# plans.  Before that, the plan cache made custom plans for the first five
# executions in each backend, and for the event read
#   partition = $1 AND seq > $2 AND seq < $3 ORDER BY seq LIMIT $4
# the planner saw the real range cover the whole backlog and chose a bitmap
# scan of all of it plus a sort: the first five polls of every new session,
# and the first five batches of every new pipeline worker, read the whole
# backlog (30-50 ms each for 500,000 events instead of 0.5 ms).
#
# auto_explain shows the plans: for a poll in the session (LOG messages to
# the client), for a pipeline worker in the server log.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('plans', extra => "shared_preload_libraries = 'streamguard, auto_explain'\n"
	  . "auto_explain.log_min_duration = 0\n"
	  . "auto_explain.log_nested_statements = on\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('backlog', 4);
CREATE TABLE sink (id bigint);
});
# a backlog large enough for a custom plan to prefer scanning all of it
# (500,000 events in 4 partitions, as when this was found)
$node->safe_psql('postgres', q{
SELECT pg_catalog.count(*) FROM (
  SELECT streamguard.append_batch('backlog', pg_catalog.array_agg(pg_catalog.jsonb_build_object('id', g)))
  FROM pg_catalog.generate_series(1, 500000) g GROUP BY g / 5000) x;
});

# the plans of the event read, from auto_explain's output
sub event_read_plans
{
	my ($text) = @_;
	my @plans;
	for my $chunk (split /\n(?=[^\n]*LOG:  duration:)/, $text)
	{
		push @plans, $chunk if $chunk =~ /ORDER BY seq LIMIT \$4/;
	}
	return @plans;
}

# (1) a new session's first polls
my ($ret, $out, $err) = $node->psql('postgres', q{
SET client_min_messages = log;
SELECT pg_catalog.count(*) FROM streamguard.poll('backlog', 'c', 10);
SELECT pg_catalog.count(*) FROM streamguard.poll('backlog', 'c', 10);
SELECT pg_catalog.count(*) FROM streamguard.poll('backlog', 'c', 10);
});
is($ret, 0, 'polls with auto_explain ran') or diag($err);
my @plans = event_read_plans($err);
cmp_ok(scalar(@plans), '>=', 3, 'each poll read events (auto_explain showed the event reads)')
  or diag($err);
is(scalar(grep { /Bitmap Heap Scan|Seq Scan|Sort/ } @plans), 0,
	'no event read of a new session scans the backlog or sorts it')
  or diag(join("\n---\n", @plans));
is(scalar(grep { /Index Scan using \S+_pkey/ } @plans), scalar(@plans),
	'every event read is an index scan in seq order');

# (2) a new pipeline worker's first batches
my $off = log_offset($node);
$node->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('p', 'backlog',
  'INSERT INTO sink SELECT (payload->>''id'')::bigint FROM batch', batch_size => 100);
});
wait_for_value($node, 'SELECT pg_catalog.count(*) >= 800 FROM sink', 't', 60);
my $log = slurp_file($node->logfile, $off);
@plans = event_read_plans($log);
cmp_ok(scalar(@plans), '>=', 6, 'the worker read several batches (auto_explain logged them)');
is(scalar(grep { /Bitmap Heap Scan|Seq Scan|Sort/ } @plans), 0,
	'no batch of a new worker scans the backlog or sorts it')
  or diag(join("\n---\n", @plans[ 0 .. ($#plans < 5 ? $#plans : 5) ]));

$node->stop;
done_testing();
