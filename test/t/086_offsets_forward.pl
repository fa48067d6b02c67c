# Remote sinks in offsets mode move the sink's offsets only forward from
# where the batch began.  If the offsets moved while the batch ran (an
# earlier attempt of the same batch, delayed, committed after all), the
# batch must not commit: it rolls back and the positions are taken from the
# sink.  Made deterministic with a hold fault: the worker is held after its
# fetch; meanwhile the sink's offsets move past the batch's first event (as
# the delayed attempt would have moved them); then the worker goes on.
#   - the batch rolls back ("moved concurrently" in the log), nothing of it
#     reaches the sink twice, and the pipeline continues after the offsets
#     it found on the sink;
#   - a build without the forward-only condition overwrites the offsets and
#     commits the rows again (the test's duplicate check fails).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

sub val { my ($n, $sql) = @_; return $n->safe_psql('postgres', $sql); }

my ($remote, $local) = sg_remote_pair(remote_name => 'fwd_remote', local_name => 'fwd_local',
	local => { extra => "streamguard.remote_timeout='5s'\n" });
my $pw = 'fwd-Pw-2718';
my $server = remote_server_sql('fwd', $remote, user => 'loader', password => $pw);

$remote->safe_psql('postgres', qq{
CREATE ROLE loader LOGIN PASSWORD '$pw';
GRANT CREATE ON SCHEMA public TO loader;
SET ROLE loader;
CREATE TABLE fwd_sink (id bigint NOT NULL, seq bigint NOT NULL);
});
$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
$server
SELECT streamguard.create_stream('fwd_src', 1);
SELECT streamguard.create_pipeline('fwd_p', 'fwd_src',
	\$\$SELECT (payload->>'id')::bigint AS id, seq FROM batch\$\$, batch_size => 100,
	sink_server => 'fwd', sink_table => 'fwd_sink', sink_mode => 'offsets');
});

sub append_ids
{
	my ($from, $to) = @_;
	$local->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.append_batch('fwd_src',
		ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series($from, $to) g))});
}

append_ids(1, 10);
ok(wait_for_value($remote, q{SELECT count(*) FROM fwd_sink}, 10, 60), 'the first 10 events reach the sink');
is(val($remote, q{SELECT position FROM streamguard_sink_offsets}), '10', 'offsets at 10');

# hold the worker after its next fetch
my $off = log_offset($local);
$local->safe_psql('postgres', q{SELECT streamguard.inject_fault('fwd_p', 'mid_batch', 'hold')});
append_ids(11, 20);
ok(defined wait_log($local, qr/pipeline "fwd_p": injected fault, holding/, $off, 30),
	'the worker holds after fetching seqs 11..20');

# an earlier attempt "lands": rows 11..15 and the offsets at 15
$remote->safe_psql('postgres', q{
SET ROLE loader;
BEGIN;
INSERT INTO fwd_sink SELECT g, g FROM generate_series(11, 15) g;
UPDATE streamguard_sink_offsets SET position = 15;
COMMIT;
});
$local->safe_psql('postgres', q{SELECT streamguard.inject_fault('fwd_p', 'none')});

ok(wait_for_value($remote, q{SELECT count(DISTINCT id) FROM fwd_sink}, 20, 60),
	'every event reaches the sink');
ok(defined wait_log($local, qr/offsets of pipeline "fwd_p" on server "fwd" moved concurrently/, $off, 30),
	'the held batch saw the offsets moved and rolled back');
is(val($remote, q{SELECT count(*) || '/' || count(DISTINCT id) FROM fwd_sink}), '20/20',
	'no event written twice: the batch went on from the offsets it found (16..20)');
is(val($remote, q{SELECT position FROM streamguard_sink_offsets}), '20', 'offsets at 20');
ok(wait_for_value($local, q{SELECT lag_events FROM streamguard.pipelines WHERE pipeline = 'fwd_p'}, '0', 30),
	'the local positions caught up with the sink');

$local->stop;
$remote->stop;
done_testing();
