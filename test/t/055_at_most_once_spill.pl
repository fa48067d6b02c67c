
# at_most_once with a batch that spills to disk (docs/guarantees.md
# "at_most_once").
#
# An at_most_once batch is fetched and its positions committed in one
# transaction, and the SQL runs in a second one.  The batch's tuplestores
# used to be tied to the first transaction: when they had spilled to temp
# files, those files were closed at its commit, and reading the batch in the
# second transaction failed ("could not write to file "(null)": Bad
# address"), so the batch was lost with no fault injected at all.
#
# Here work_mem is 64kB (ALTER DATABASE ... SET, which the worker picks up)
# and the pipeline filters dedup keys (that filter's output store is sized by
# work_mem): 400 events of about 2kB each, batches of 200.  Without a fault
# every event must arrive exactly once, the log must show no error, and no
# temp file may be left behind once the next batch has started.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('amo_spill');
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
ALTER DATABASE postgres SET work_mem = '64kB';
SELECT streamguard.create_stream('big', 2);
CREATE TABLE sink (seq bigint, part int, n int, len int);
});
my $offset = log_offset($node);
$node->safe_psql('postgres', q{
SELECT count(*) FROM streamguard.append_batch('big',
	ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat(md5(g::text), 64)) FROM generate_series(1, 400) g),
	dedup_keys => ARRAY(SELECT 'k' || g FROM generate_series(1, 400) g));
SELECT streamguard.create_pipeline('amo', 'big',
	'INSERT INTO sink SELECT seq, partition, (payload->>''n'')::int, length(payload->>''pad'') FROM batch',
	guarantee => 'at_most_once', batch_size => 200, dedup => true);
});

ok(wait_for_value($node, q{SELECT count(*) FROM sink}, '400', 60), 'all 400 events delivered');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT n) || '/' || min(len) || '/' || max(len) FROM sink}),
	'400/2048/2048', 'each event once, payload intact');
is($node->safe_psql('postgres', q{SELECT events_in || '/' || restarts || '/' || state FROM streamguard.pipelines WHERE pipeline = 'amo'}),
	'400/0/running', 'no restart, still running');
is(count_log($node, qr/batch failed|ERROR|could not (read|write)/, $offset), 0, 'no failed batch, no error in the log')
  or diag(slurp_file($node->logfile, $offset));

# the spilled batches' temp files are closed once the next batch starts
$node->safe_psql('postgres', q{SELECT streamguard.append('big', '{"n": 401, "pad": ""}', dedup_key => 'k401')});
ok(wait_for_value($node, q{SELECT count(*) FROM sink}, '401', 60), 'a later batch is delivered');
ok(wait_for_value($node, q{SELECT count(*) FROM pg_ls_tmpdir()}, '0', 30), 'no temp file left behind');

$node->stop;
done_testing();
