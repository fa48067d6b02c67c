
# Exactly-once at the edges between two servers (docs/guarantees.md,
# "Remote sources and sinks").  Each block below failed before its fix.
#
# "remote" holds the stream `edge` (read by a local pipeline) and the sink
# tables; "local" holds the stream `src` and runs the pipelines.  Both run
# with wal_writer_delay = 10s, so an asynchronously committed transaction
# stays unflushed (in WAL buffers only) for seconds: long enough to observe
# who flushes it.  "local" also runs with synchronous_commit = off in
# postgresql.conf and as the database default.
#
#  1. start_from => 'end' on a remote source: resolved once, to the remote
#     readable horizon, and persisted; a later event is delivered and the
#     events older than the pipeline are not.
#  2. read() flushes the WAL before returning rows: after it returns, the
#     source's flush LSN covers the commit of every event it returned (the
#     producer committed with synchronous_commit = off).  And a pipeline
#     never sends its remote COMMIT before the producer's commit is durable
#     here: a worker killed right after the remote COMMIT (the local server
#     restarts from its WAL, losing what was not flushed) leaves the event
#     both on the sink and in the local stream.
#  3. The pipeline worker runs with synchronous_commit = on whatever the
#     server and database say (its SQL reports current_setting()).
#  4. In-doubt resolution of two_phase: a recorded batch whose prepared
#     transaction vanished from the remote (a restore or failover lost it)
#     is detected through the batch's marker row and stops the pipeline with
#     an error; a batch that was really committed (COMMIT PREPARED done,
#     crash before the record was dropped) is recognised by its marker and
#     the pipeline goes on.  Two clusters with the same system identifier
#     (a copy of the data directory) keep apart on a shared sink.  A remote
#     source cannot be reset beyond the end of the remote stream.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $walconf = "wal_writer_delay='10s'\nwal_writer_flush_after=0\n";
my ($remote, $local) = sg_remote_pair(
	remote => { mpx => 10, extra => $walconf },
	local  => { mpx => 4, extra => $walconf . "synchronous_commit=off\nstreamguard.remote_timeout='2s'\n" });

# a copy of "local" taken before the extension exists: same system
# identifier, same database OIDs (a clone, or a restored base backup)
$local->stop;
$local->backup_fs_cold('before_ext');
$local->start;
my $twin = PostgreSQL::Test::Cluster->new('twin');
$twin->init_from_backup($local, 'before_ext');
$twin->start;
is($twin->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	$local->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'the twin shares the system identifier of local');

my $pw = 'edge-Pw-1618';

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE edger LOGIN PASSWORD '$pw';
GRANT CREATE ON SCHEMA public TO edger;
SELECT streamguard.create_stream('edge', 2);
SELECT streamguard.grant_stream('edge', 'edger', 'read');
SET ROLE edger;
CREATE TABLE sink_off (id bigint NOT NULL);
CREATE TABLE sink_2pc (id bigint NOT NULL, sc text);
CREATE TABLE sink_twin (id bigint NOT NULL);
});

my $servers = remote_server_sql('rs', $remote, app => 'sg_edge', user => 'edger', password => $pw);
for my $n ($local, $twin)
{
	$n->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
ALTER DATABASE postgres SET synchronous_commit = off;
SELECT streamguard.create_stream('src', 1);
$servers
});
}

# ======================================== 4b. twins on one shared sink
#
# Created first on both, so both pipelines get id 1: before the fix, the
# offsets key (and the two_phase transaction id prefix) was made of system
# identifier, database OID and pipeline id only, all equal here; the twin's
# first batch found "its" offsets already past it and skipped its events.
for my $n ($local, $twin)
{
	$n->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('p_twin', 'src',
	$$SELECT (payload->>'id')::bigint AS id FROM batch$$,
	sink_server => 'rs', sink_table => 'sink_twin', sink_mode => 'offsets');
});
}
is($local->safe_psql('postgres', q{SELECT id FROM streamguard.pipeline WHERE name = 'p_twin'}),
	$twin->safe_psql('postgres', q{SELECT id FROM streamguard.pipeline WHERE name = 'p_twin'}),
	'twins: the same pipeline id on both');
$local->safe_psql('postgres',
	q{SELECT streamguard.append('src', jsonb_build_object('id', g)) FROM generate_series(1, 3) g});
ok(wait_for_value($remote, 'SELECT count(*) FROM sink_twin WHERE id <= 3', 3, 30),
	'twins: the events of local reach the shared sink');
$twin->safe_psql('postgres',
	q{SELECT streamguard.append('src', jsonb_build_object('id', 100 + g)) FROM generate_series(1, 3) g});
ok(wait_for_value($remote, 'SELECT count(*) FROM sink_twin WHERE id > 100', 3, 30),
	'twins: the events of the twin reach the shared sink too (not taken for already delivered)')
  or diag(pipelines_report($twin));
is($remote->safe_psql('postgres', 'SELECT count(DISTINCT pipeline) FROM streamguard_sink_offsets'),
	2, 'twins: two distinct offsets keys on the sink');
for my $n ($local, $twin)
{
	$n->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_twin')});
}
$twin->stop;

# ============================================= 2a. read() flushes the WAL
#
# Nothing else writes on "remote" here; the walwriter flushes at most every
# 10 s, so without the fix the flush LSN stays behind the commit for seconds.
{
	my $lsn = $remote->safe_psql('postgres', q{
SET synchronous_commit = off;
SELECT streamguard.append('edge', '{"id": -1}', partition => 0);
SELECT pg_current_wal_insert_lsn();
});
	($lsn) = reverse split /\n/, $lsn;
	my $r = $remote->safe_psql('postgres', qq{
SELECT count(*) FROM streamguard.read('edge', 0, 0, 100);
SELECT pg_current_wal_flush_lsn() >= '$lsn';
});
	is($r, "1\nt", 'read() returned the event and the flush LSN covers its commit')
	  or diag("insert LSN after the commit $lsn; read() then flush check: $r");
}

# ================================= 1. start_from => 'end' on a remote source

$remote->safe_psql('postgres', q{
SELECT streamguard.append('edge', jsonb_build_object('id', -10 - g), partition => g % 2)
FROM generate_series(1, 5) g;
});
my $horizons = $remote->safe_psql('postgres',
	q{SELECT string_agg((readable_horizon - 1)::text, ',' ORDER BY partition)
	  FROM streamguard.stream_partitions WHERE stream = 'edge'});
$local->safe_psql('postgres', q{
CREATE TABLE sink_end (id bigint NOT NULL, partition int, seq bigint);
SELECT streamguard.create_pipeline('p_end', 'edge',
	$$INSERT INTO sink_end SELECT (payload->>'id')::bigint, partition, seq FROM batch$$,
	start_from => 'end', source_server => 'rs');
});
ok( wait_for_value($local,
		q{SELECT string_agg(position::text, ',' ORDER BY partition) FROM streamguard.remote_position},
		$horizons, 30),
	"start_from end: resolved once, to the remote horizon ($horizons), and persisted");
$remote->safe_psql('postgres', q{
SELECT streamguard.append('edge', '{"id": 42}', partition => 0);
SELECT streamguard.append('edge', '{"id": 43}', partition => 1);
});
ok(wait_for_value($local, 'SELECT count(*) FROM sink_end WHERE id IN (42, 43)', 2, 30),
	'start_from end: events appended after the start are delivered')
  or diag(pipelines_report($local));
is($local->safe_psql('postgres', 'SELECT count(*) FROM sink_end WHERE id < 0'), 0,
	'start_from end: events older than the pipeline are not');

# ======================= 4c. reset of a remote source beyond the stream's end

expect_error($local, q{SELECT streamguard.reset_pipeline('p_end', seq => 1000000)},
	'22023', qr/seq 1000000 is out of range for partition \d of stream "edge" on server "rs"/,
	'reset_pipeline of a remote source beyond its end');
is($local->safe_psql('postgres', q{SELECT string_agg(position::text, ',' ORDER BY partition)
	FROM streamguard.remote_position}),
	$local->safe_psql('postgres', q{SELECT string_agg(coalesce(max, 0)::text, ',' ORDER BY partition)
	FROM (SELECT p AS partition, (SELECT max(seq) FROM sink_end s WHERE s.partition = p) AS max
	      FROM generate_series(0, 1) p) x}),
	'... and the positions did not move');
$local->safe_psql('postgres', q{SELECT streamguard.reset_pipeline('p_end', seq => 1)});
ok(wait_for_value($local, 'SELECT count(*) FROM sink_end WHERE id < 0', 6, 30),
	'a reset within the stream replays');
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_end')});

# ============================= 3. the worker's synchronous_commit is on

is($local->safe_psql('postgres', 'SHOW synchronous_commit'), 'off', 'local sessions commit asynchronously');
$local->safe_psql('postgres', q{
CREATE TABLE seen (sc text);
SELECT streamguard.create_pipeline('p_sc', 'src',
	$$INSERT INTO seen SELECT pg_catalog.current_setting('synchronous_commit') FROM batch LIMIT 1$$);
SELECT streamguard.append('src', '{"id": 0}');
});
# (one row per batch: the backlog may come in more than one on a loaded machine)
ok(wait_for_value($local, 'SELECT count(*) > 0 FROM seen', 't', 30), 'the local pipeline ran');
is($local->safe_psql('postgres', q{SELECT string_agg(DISTINCT sc, ',') FROM seen}), 'on',
	'the pipeline worker runs with synchronous_commit = on despite server and database settings');
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_sc')});

# ===================== 2b. no remote COMMIT before the local commit is durable

# (committed synchronously: this flushes what the tests above committed
# asynchronously, so that the crash below loses nothing of theirs)
$local->safe_psql('postgres', q{
SET synchronous_commit = on;
CREATE TABLE produced (id bigint PRIMARY KEY);
SELECT streamguard.create_pipeline('p_off', 'src',
	$$SELECT (payload->>'id')::bigint AS id FROM batch$$,
	sink_server => 'rs', sink_table => 'sink_off', sink_mode => 'offsets', start_from => 'end');
});
ok(wait_pipelines_running($local, ['p_off'], 30), 'p_off runs');
{
	my $off = log_offset($local);
	$local->safe_psql('postgres', q{SELECT streamguard.inject_fault('p_off', 'after_remote_commit', 'kill')});
	# the crash this append causes may cut its session after the commit:
	# what survived is checked below, never appended again
	psql_across_crash($local, q{
BEGIN;
SET LOCAL synchronous_commit = off;
INSERT INTO produced VALUES (7);
SELECT streamguard.append('src', '{"id": 7}');
COMMIT;
}, retry => 0);
	ok(defined wait_log($local, qr/pipeline "p_off": injected fault, killing the worker/, $off, 30),
		'durability: the worker was killed right after its remote COMMIT');
	ok(defined wait_crash_recovery($local, $off), 'durability: local recovered from the crash');
	is($remote->safe_psql('postgres', 'SELECT count(*) FROM sink_off WHERE id = 7'), 1,
		'durability: the sink has the event');
	is($local->safe_psql('postgres', 'SELECT count(*) FROM produced WHERE id = 7'), 1,
		'durability: ... and the producer\'s transaction survived the crash here');
	ok(wait_pipelines_running($local, ['p_off'], 30), 'p_off runs again');
	$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 8}')});
	ok(wait_for_value($remote, 'SELECT count(*) FROM sink_off WHERE id IN (7, 8)', 2, 30),
		'durability: the next event follows, nothing twice');
	is($remote->safe_psql('postgres', 'SELECT count(*) FROM sink_off'), 2, 'durability: no duplicate');
	$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_off')});
}

# ====================================== 4a. in-doubt resolution, two_phase

$local->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('p_2pc', 'src',
	$$SELECT (payload->>'id')::bigint AS id, pg_catalog.current_setting('synchronous_commit') AS sc FROM batch$$,
	sink_server => 'rs', sink_table => 'sink_2pc', sink_mode => 'two_phase', start_from => 'end');
});
ok(wait_pipelines_running($local, ['p_2pc'], 30), 'p_2pc runs');
$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 20}')});
ok(wait_for_value($remote, 'SELECT count(*) FROM sink_2pc WHERE id = 20', 1, 30), 'two_phase: delivered');
is($remote->safe_psql('postgres', 'SELECT sc FROM sink_2pc WHERE id = 20'), 'on',
	'two_phase: the worker commits synchronously');

# committed for real, the worker dies before dropping its record: recognised
{
	my $off = log_offset($local);
	$local->safe_psql('postgres', q{SELECT streamguard.inject_fault('p_2pc', 'after_commit', 'exit')});
	$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 21}')});
	ok(defined wait_log($local, qr/pipeline "p_2pc": injected fault, exiting/, $off, 30),
		'two_phase: worker exited after COMMIT PREPARED');
	$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 22}')});
	ok(wait_for_value($remote, 'SELECT count(*) FROM sink_2pc WHERE id IN (21, 22)', 2, 30),
		'two_phase: a committed batch whose record outlived it is recognised; the pipeline goes on')
	  or diag(pipelines_report($local));
	is($local->safe_psql('postgres', q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'p_2pc'}),
		'running', 'two_phase: ... still running');
}

# the remote loses a prepared transaction whose batch committed here
{
	# the worker stops between the local commit and COMMIT PREPARED (held
	# there); then new sessions cannot log in, and it is ended (a mapping
	# changed under a running worker makes it connect again at its next
	# batch, so the change comes while it holds)
	my $off = log_offset($local);
	$local->safe_psql('postgres', q{SELECT streamguard.inject_fault('p_2pc', 'after_local_commit', 'hold')});
	$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 23}')});
	ok(defined wait_log($local, qr/pipeline "p_2pc": injected fault, holding/, $off, 30),
		'lost batch: the worker holds between the local commit and COMMIT PREPARED');
	$local->safe_psql('postgres',
		q{ALTER USER MAPPING FOR CURRENT_USER SERVER rs OPTIONS (SET password 'wrong')});
	my $held = $local->safe_psql('postgres', q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_2pc'});
	is($local->safe_psql('postgres', qq{SELECT pg_terminate_backend($held)}), 't', 'lost batch: ... and is ended there');
	ok(wait_for_value($local, qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $held}, '0', 30), 'lost batch: ... gone');
	is($local->safe_psql('postgres', 'SELECT count(*) FROM streamguard.remote_prepared'), 1,
		'lost batch: the decision is recorded locally');
	# "restore the remote from a backup": the prepared transaction is gone
	is($remote->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT gid FROM pg_prepared_xacts) g;
}), 1, 'lost batch: the remote holds the prepared transaction');
	my $gid = $remote->safe_psql('postgres', 'SELECT gid FROM pg_prepared_xacts');
	$remote->safe_psql('postgres', "ROLLBACK PREPARED '$gid'");
	$local->safe_psql('postgres',
		qq{ALTER USER MAPPING FOR CURRENT_USER SERVER rs OPTIONS (SET password '$pw')});
	ok( wait_for_value($local, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'p_2pc'},
			'failed', 30),
		'lost batch: the pipeline stops')
	  or diag(pipelines_report($local));
	like($local->safe_psql('postgres', q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'p_2pc'}),
		qr/remote server "rs" lost the committed batch of pipeline "p_2pc"/,
		'lost batch: ... with an error that says so');
	is($remote->safe_psql('postgres', 'SELECT count(*) FROM sink_2pc WHERE id = 23'), 0,
		'lost batch: (the sink indeed lacks the event)');
}

$local->stop;
$remote->stop;
done_testing();
