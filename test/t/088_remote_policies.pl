
# Error policies for remote sinks, and pipelines with a remote source and a
# remote sink (docs/guarantees.md "Remote sinks", "Error policies").
#
# "remote" holds the sink tables, whose CHECK (id > 0) rejects some rows,
# and a stream `rsrc`; "local" holds the stream `src` and the pipelines:
#   pol_2pc   dead_letter, two_phase  -> sink_2pc
#   pol_off   dead_letter, offsets    -> sink_off
#   pol_skip  skip, two_phase         -> sink_skip
#   pol_stop  stop, offsets           -> sink_stop
#   both_2pc  remote source rsrc, dead_letter, two_phase -> both_2pc
#   both_off  remote source rsrc, dead_letter, offsets   -> both_off
# Poison events: an id the sink's CHECK rejects (23514, raised by the
# remote) and an id the pipeline's SELECT cannot cast (22P02, raised
# locally).  max_attempts 1: the second attempt of a failing batch runs
# isolated, event by event inside one remote transaction (savepoints).
#
# Checks: every good id reaches each sink exactly once; every poison event
# is a dead letter exactly once (with its SQLSTATE) or counted skipped;
# stop fails the pipeline naming the event and leaves nothing prepared; a
# transient error the sink raises inside an isolated batch (40001) retries
# the batch instead of making the event a dead letter.
# Then kills of the worker at each point of an isolated batch's commit
# (after_prepare, after_local_commit; after_remote_commit, where the dead
# letters must come from the sink's table; after_commit, where they must
# not come twice; twice after_remote_commit, the second time in the batch
# that brought the first one's dead letters here) and an immediate restart
# of the remote while an isolated batch holds its rows there uncommitted:
# the same checks after each.  The same kills with a remote source.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my ($remote, $local) = sg_remote_pair(remote_name => 'pol_remote', local_name => 'pol_local',
	local => { extra => "streamguard.remote_timeout='5s'\n" });
my $pw = 'pol-Pw-1618';

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE loader LOGIN PASSWORD '$pw';
GRANT CREATE ON SCHEMA public TO loader;
SELECT streamguard.create_stream('rsrc', 2);
SELECT streamguard.grant_stream('rsrc', 'loader', 'read');
SET ROLE loader;
} . join('', map { qq{
CREATE TABLE $_ (id bigint NOT NULL CHECK (id > 0), seq bigint NOT NULL);
} } qw(sink_2pc sink_off sink_skip sink_stop both_2pc both_off)));

$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
@{[ remote_server_sql('rs', $remote, user => 'loader', password => $pw, app => 'sg_pol') ]}
SELECT streamguard.create_stream('src', 2);
});

my $select = q{SELECT (payload->>'id')::bigint AS id, seq FROM batch};
my $knobs = q{max_attempts => 1, retry_backoff => '10 ms', max_backoff => '200 ms', batch_size => 100};
my %pipes = (
	pol_2pc  => [ 'dead_letter', 'two_phase', 'sink_2pc' ],
	pol_off  => [ 'dead_letter', 'offsets',   'sink_off' ],
	pol_skip => [ 'skip',        'two_phase', 'sink_skip' ],
	pol_stop => [ 'stop',        'offsets',   'sink_stop' ]);
for my $p (sort keys %pipes)
{
	my ($policy, $mode, $table) = @{ $pipes{$p} };
	$local->safe_psql('postgres', qq{SELECT streamguard.create_pipeline('$p', 'src', \$\$$select\$\$,
		error_policy => '$policy', sink_server => 'rs', sink_table => '$table', sink_mode => '$mode', $knobs)});
}
is($remote->safe_psql('postgres', q{SELECT to_regclass('public.streamguard_sink_dead_letters') IS NOT NULL}),
	't', 'an offsets-mode sink gets the table for dead letters committed with its rows');

# ids $from..$to: multiples of 37 are rejected by the sink, of 53 by the SELECT
sub payloads
{
	my ($from, $to) = @_;
	return qq{ARRAY(SELECT CASE WHEN g % 53 = 0 THEN jsonb_build_object('id', 'bad' || g)
		WHEN g % 37 = 0 THEN jsonb_build_object('id', -g) ELSE jsonb_build_object('id', g) END
		FROM generate_series($from, $to) g)};
}
sub append_src
{
	my ($from, $to) = @_;
	# (an armed kill fault may fire on these events and cut the session
	# after its commit: psql_across_crash)
	psql_across_crash($local, "SELECT count(*) FROM streamguard.append_batch('src', " . payloads($from, $to)
		  . ", keys => ARRAY(SELECT g::text FROM generate_series($from, $to) g))",
		done => stream_has_sql('src', "e.key = '$to'"));
}
sub good { my ($to) = @_; return join(',', grep { $_ % 37 && $_ % 53 } 1 .. $to); }
sub bad
{
	my ($to) = @_;
	return join(',', map { $_ % 53 == 0 ? "bad$_:22P02" : "-$_:23514" } grep { !($_ % 37 && $_ % 53) } 1 .. $to);
}
sub sink_ids
{
	my ($table) = @_;
	return $remote->safe_psql('postgres', "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM $table");
}
sub dead_ids
{
	my ($p) = @_;
	return $local->safe_psql('postgres', qq{SELECT coalesce(string_agg((payload->>'id') || ':' || sqlstate,
		',' ORDER BY CASE WHEN payload->>'id' LIKE 'bad%' THEN substr(payload->>'id', 4)::int
		ELSE abs((payload->>'id')::int) END), '') FROM streamguard.dead_letter WHERE pipeline = '$p'});
}
# the sink holds every good id up to $to once, the dead letters every poison
# event once; the counters agree
sub check_pipe
{
	my ($p, $to, $what) = @_;
	my ($policy, $mode, $table) = @{ $pipes{$p} // [ 'dead_letter', '', $p ] };
	my $ngood = () = good($to) =~ /(\d+)/g;
	# after a failed check, waits are short: the file only has to end
	my $patience = Test::More->builder->is_passing ? 1 : 0.1;
	ok(wait_for_value($remote, "SELECT count(*) FROM $table", $ngood, 90 * $patience), "$p $what: the good rows arrive")
	  or diag(pipelines_report($local));
	is(sink_ids($table), good($to), "$p $what: every good id exactly once");
	my $nbad = () = bad($to) =~ /:/g;
	if ($policy eq 'dead_letter')
	{
		# a worker that exited brings the sink's copies here when it is back
		wait_for_value($local, "SELECT count(*) FROM streamguard.dead_letter WHERE pipeline = '$p'", $nbad, 60 * $patience);
		is(dead_ids($p), bad($to), "$p $what: every poison event is a dead letter exactly once");
		is($local->safe_psql('postgres', "SELECT dead_letters FROM streamguard.pipelines WHERE pipeline = '$p'"),
			$nbad, "$p $what: dead_letters counts them");
	}
	else
	{
		is($local->safe_psql('postgres', "SELECT skipped FROM streamguard.pipelines WHERE pipeline = '$p'"),
			$nbad, "$p $what: skipped counts them");
	}
}

# ------------------------------------------------------- the policies

append_src(1, 200);
check_pipe($_, 200, 'first load') for qw(pol_2pc pol_off pol_skip);
ok(wait_for_value($local, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'pol_stop'}, 'failed', 60),
	'pol_stop: the stop policy fails the pipeline');
like($local->safe_psql('postgres', q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'pol_stop'}),
	qr/^event \(partition \d+, seq \d+\): /, '... naming the event that failed');
# polled: the remote session may take a moment to see the rollback or the
# close; an aborted transaction left open would stay
ok( wait_for_value($remote, q{SELECT count(*) FROM pg_stat_activity
	WHERE application_name = 'sg_pol' AND state = 'idle in transaction (aborted)'}, 0, 30),
	'... and leaving no aborted remote transaction open');
is($remote->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing left prepared');
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('pol_stop')});
delete $pipes{pol_stop};

# the sink's copies of the dead letters go with the next batch
append_src(201, 201);
ok(wait_for_value($remote, q{SELECT count(*) FROM public.streamguard_sink_dead_letters}, '0', 60),
	'the dead letters left on the sink are removed by the next batch')
  or diag($remote->safe_psql('postgres', 'SELECT * FROM public.streamguard_sink_dead_letters'));
check_pipe('pol_off', 201, 'after the next batch');

# --------------------------- a transient remote error during isolation

# the sink raises serialization_failure (40001) for id 7 twice: a transient
# error, not the event's own, so the isolated batch is retried (and the
# third time id 7 goes in); it must not become a dead letter
$remote->safe_psql('postgres', q{SET ROLE loader;
CREATE TABLE sink_ser (id bigint NOT NULL CHECK (id > 0), seq bigint NOT NULL);
CREATE SEQUENCE ser_tries;
CREATE FUNCTION ser_twice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.id = 7 AND nextval('ser_tries') <= 2 THEN
		RAISE EXCEPTION 'could not serialize (test)' USING ERRCODE = '40001';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER ser BEFORE INSERT ON sink_ser FOR EACH ROW EXECUTE FUNCTION ser_twice();});
$local->safe_psql('postgres', qq{SELECT streamguard.create_stream('ser', 1);
SELECT streamguard.create_pipeline('pol_ser', 'ser', \$\$$select\$\$, error_policy => 'dead_letter',
	sink_server => 'rs', sink_table => 'sink_ser', $knobs);
SELECT count(*) FROM streamguard.append_batch('ser',
	ARRAY(SELECT jsonb_build_object('id', CASE WHEN g = 3 THEN -3 ELSE g END) FROM generate_series(1, 10) g));});
ok(wait_for_value($remote, q{SELECT string_agg(id::text, ',' ORDER BY id) FROM sink_ser}, '1,2,4,5,6,7,8,9,10', 60),
	'a transient sink error in an isolated batch: the batch is retried, the event delivered');
is($local->safe_psql('postgres', q{SELECT string_agg((payload->>'id') || ':' || sqlstate, ',')
	FROM streamguard.dead_letter WHERE pipeline = 'pol_ser'}), '-3:23514', '... and only the poison event is a dead letter');
is($remote->safe_psql('postgres', q{SELECT last_value FROM ser_tries}), '3', '... after two transient failures');
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('pol_ser')});

# ------------------------------------------------------- crashes

my $fx = fault_context($local, [ sort keys %pipes ], remote => $remote);
my $to = 201;
for my $case ([ 'pol_2pc', 'after_prepare' ], [ 'pol_2pc', 'after_local_commit' ],
	[ 'pol_off', 'after_remote_commit' ], [ 'pol_off', 'after_commit' ], [ 'pol_2pc', 'after_commit' ])
{
	my ($p, $point) = @$case;
	# the failed plain attempt never reaches these points: the isolated one does
	$local->safe_psql('postgres', "SELECT streamguard.inject_fault('$p', '$point', 'kill')");
	my $off = log_offset($local);
	append_src($to + 1, $to + 60);
	$to += 60;
	ok(defined wait_log($local, qr/pipeline "$p": injected fault, killing the worker/, $off, 60),
		"$p: killed at $point of an isolated batch");
	is(fault_fired($fx, "$p $point", $off), 1, '... and back');
	check_pipe($_, $to, "kill at $p $point") for sort keys %pipes;
}

# offsets: the worker exits after the remote committed an isolated batch
# (its dead letters on the sink only), and its successor's batch -- the one
# that brings them here -- exits at the same point: the sink's copies must
# survive that batch, which may not remove what it has not committed here
{
	my $off = log_offset($local);
	$local->safe_psql('postgres', "SELECT streamguard.inject_fault('pol_off', 'after_remote_commit', 'exit', 2)");
	append_src($to + 1, $to + 60);
	append_src($to + 61, $to + 160);
	$to += 160;
	ok(defined wait_log($local, qr/(?:pipeline "pol_off": injected fault, exiting.*?){2}/s, $off, 90),
		'pol_off: exited twice after the remote commit, the second time in the batch that settled the first');
	check_pipe($_, $to, 'two exits after the remote commit') for sort keys %pipes;
}

# the remote restarted while an isolated batch holds its rows there
{
	$local->safe_psql('postgres', "SELECT streamguard.inject_fault('pol_2pc', 'mid_copy', 'hold')");
	my $off = log_offset($local);
	append_src($to + 1, $to + 60);
	$to += 60;
	ok(defined wait_log($local, qr/pipeline "pol_2pc": injected fault, holding/, $off, 60),
		'pol_2pc: an isolated batch holds with its rows on the sink');
	$remote->stop('immediate');
	$remote->start;
	$local->safe_psql('postgres', "SELECT streamguard.inject_fault('pol_2pc', 'none')");
	check_pipe($_, $to, 'remote restarted mid-isolation') for sort keys %pipes;
}
is($remote->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing left prepared');
is($local->safe_psql('postgres', 'SELECT count(*) FROM streamguard.remote_prepared'), '0',
	'no prepared transaction recorded');

# ------------------------------------------- remote source and remote sink

$local->safe_psql('postgres', qq{
SELECT streamguard.create_pipeline('both_2pc', 'rsrc', \$\$$select\$\$, source_server => 'rs',
	error_policy => 'dead_letter', sink_server => 'rs', sink_table => 'both_2pc', sink_mode => 'two_phase', $knobs);
SELECT streamguard.create_pipeline('both_off', 'rsrc', \$\$$select\$\$, source_server => 'rs',
	error_policy => 'dead_letter', sink_server => 'rs', sink_table => 'both_off', sink_mode => 'offsets', $knobs);
});
%pipes = (both_2pc => [ 'dead_letter', 'two_phase', 'both_2pc' ], both_off => [ 'dead_letter', 'offsets', 'both_off' ]);
$fx = fault_context($local, [ sort keys %pipes ], remote => $remote);
sub append_rsrc
{
	my ($from, $to) = @_;
	$remote->safe_psql('postgres', "SELECT count(*) FROM streamguard.append_batch('rsrc', " . payloads($from, $to)
		  . ", keys => ARRAY(SELECT g::text FROM generate_series($from, $to) g))");
}
append_rsrc(1, 200);
$to = 200;
check_pipe($_, $to, 'remote to remote') for sort keys %pipes;
for my $case ([ 'both_2pc', 'after_prepare' ], [ 'both_2pc', 'after_local_commit' ],
	[ 'both_off', 'after_remote_commit' ], [ 'both_off', 'after_commit' ], [ 'both_off', 'mid_copy' ])
{
	my ($p, $point) = @$case;
	$local->safe_psql('postgres', "SELECT streamguard.inject_fault('$p', '$point', 'kill')");
	my $off = log_offset($local);
	append_rsrc($to + 1, $to + 60);
	$to += 60;
	ok(defined wait_log($local, qr/pipeline "$p": injected fault, killing the worker/, $off, 60),
		"$p: killed at $point");
	is(fault_fired($fx, "$p $point", $off), 1, '... and back');
	check_pipe($_, $to, "kill at $p $point") for sort keys %pipes;
}
is($local->safe_psql('postgres', q{SELECT string_agg(p.pipeline || ' ' || (SELECT sum(position) FROM
	streamguard.remote_position rp JOIN streamguard.pipeline pp ON pp.id = rp.pipeline_id WHERE pp.name = p.pipeline),
	',' ORDER BY p.pipeline) FROM streamguard.pipelines p WHERE p.pipeline LIKE 'both%'}),
	join(',', map { "$_ " . $remote->safe_psql('postgres',
		q{SELECT sum(last_seq) FROM streamguard.stream_partitions WHERE stream = 'rsrc'}) } qw(both_2pc both_off)),
	'the remote positions are at the remote stream\'s ends');
is($remote->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing left prepared');

# ------------------------------------------- lost_events of a remote source

# the same story on a local and on a remote stream (retention 1 s): the
# pipeline is paused, five events are appended and removed by retention,
# an append rolls back (its seq is a gap above the seq floor, not a loss),
# one more event is appended, the pipeline resumes
$remote->safe_psql('postgres', q{SELECT streamguard.create_stream('rlost', 1, retention => '1 second');
SELECT streamguard.grant_stream('rlost', 'loader', 'read');
SET ROLE loader; CREATE TABLE lost_sink (id bigint, seq bigint);});
$local->safe_psql('postgres', qq{SELECT streamguard.create_stream('llost', 1, retention => '1 second');
CREATE TABLE lost_out (id bigint, seq bigint);
SELECT streamguard.create_pipeline('lost_l', 'llost', \$\$INSERT INTO lost_out $select\$\$);
SELECT streamguard.create_pipeline('lost_r', 'rlost', \$\$INSERT INTO lost_out $select\$\$, source_server => 'rs');
SELECT streamguard.create_pipeline('lost_rs', 'rlost', \$\$$select\$\$, source_server => 'rs',
	sink_server => 'rs', sink_table => 'lost_sink', sink_mode => 'offsets');
SELECT streamguard.pause_pipeline(p) FROM unnest(ARRAY['lost_l', 'lost_r', 'lost_rs']) p;});
for my $n ([ $local, 'llost' ], [ $remote, 'rlost' ])
{
	my ($node, $st) = @$n;
	$node->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.append_batch('$st',
		ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series(1, 5) g))});
	ok(wait_for_value($node, "SELECT seq_floor FROM streamguard.stream_partitions WHERE stream = '$st'", '5', 60),
		"$st: retention removed the five events (stream_partitions.seq_floor)");
	# no more retention from here: the event after the gap must stay
	$node->safe_psql('postgres', qq{SELECT streamguard.alter_stream('$st', retention => '0');
BEGIN; SELECT streamguard.append('$st', '{"id": 6}'); ROLLBACK;
SELECT streamguard.append('$st', '{"id": 7}');});
}
$local->safe_psql('postgres', q{SELECT streamguard.resume_pipeline(p) FROM unnest(ARRAY['lost_l', 'lost_r', 'lost_rs']) p});
ok(wait_for_value($local, q{SELECT count(*) FROM lost_out WHERE id = 7}, '2', 60), 'both pipelines read the event after the gap');
ok(wait_for_value($remote, q{SELECT count(*) FROM lost_sink WHERE id = 7}, '1', 60), '... and the remote-to-remote one');
is($local->safe_psql('postgres', q{SELECT string_agg(pipeline || ' ' || lost_events, ', ' ORDER BY pipeline)
	FROM streamguard.pipelines WHERE pipeline LIKE 'lost%'}), 'lost_l 5, lost_r 5, lost_rs 5',
	'lost_events: the remote sources report the events retention removed ahead of them, like the local one');
is($local->safe_psql('postgres', q{SELECT lost_events FROM streamguard.pipelines WHERE pipeline = 'pol_2pc'}),
	'0', 'a pipeline that lost nothing reports 0');

$local->stop;
$remote->stop;
done_testing();
