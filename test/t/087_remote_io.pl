
# Remote I/O done the way PostgreSQL does libpq inside a server process
# (docs/internals.md, "Remote I/O"; docs/sql-reference.md, "Robustness").
# Unless said otherwise, each block failed before remote.c was rebuilt on
# those patterns.
#
# "remote" serves the sinks, a stream `rsrc` and, in database `fake`, an
# imitation of streamguard's read API whose behaviour a table switches;
# "local" runs the pipelines with streamguard.remote_timeout = 2s.
#
#  1. A remote error is relayed field by field: the remote SQLSTATE,
#     primary message (after `remote server "<name>": `), detail, hint,
#     the remote context and the remote SQL as context; the views'
#     last_error is one short line (before: libpq's whole multi-line text).
#  2. A result held while an ERROR is thrown is freed: the remote read
#     returns a large batch whose last event is not JSON, the worker fails
#     on it again and again, and its resident memory stays flat (before:
#     every attempt leaked the whole libpq result, megabytes each).
#  3. Remote NOTICE and WARNING (a trigger on the sink table) reach the
#     server log through our notice receiver, with the server's name, at
#     DEBUG1 and LOG (before: printed by libpq to stderr, bare).
#  4. Text crosses in our encoding: a local UTF-8 event copied to a LATIN1
#     remote database arrives as the same character (before: no
#     client_encoding, the remote took the UTF-8 bytes for LATIN1).
#  5. A connection is closed when the transaction that used it aborts:
#     drop_pipeline fails on the remote (COMMIT PREPARED as another remote
#     user) and leaves no session open on the remote while the calling
#     session lives (before: left open until the session ended).
#  6. External file descriptors are counted and given back on every path:
#     with max_files_per_process low, many failed and successful remote
#     calls in one session are followed by a working one (a guard: a
#     forgotten ReleaseExternalFD would make it fail; it passed before
#     too, when nothing was counted).
#  7. A remote whose postmaster and backend are stopped (SIGSTOP): the
#     worker gives up on its statement within the timeout, keeps waiting
#     on its latch (wait event type Extension, no CPU), and a SIGTERM ends
#     it at once; after SIGCONT the pipeline goes on (before: after the
#     timeout the worker hung in the blocking PQcancel, which no signal
#     ends, until the remote postmaster ran again).
#  8. Values cross unchanged, row by row, both ways: events whose keys,
#     dedup keys and payloads hold escapes, tabs and newlines, non-ASCII
#     text, deep nesting, big and exact numerics, NULLs and a payload large
#     enough to be compressed, read by a remote source in batches of 7 and
#     written by a two_phase remote sink in batches of 7, arrive equal to
#     the originals (a guard for the per-row memory contexts of the
#     conversion: each row is converted in a context reset for the next).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use StreamguardTest;

my $remote_timeout = 2;
my $remote = sg_node('rio_remote', remote => 1, mpx => 10);
my $local = sg_node('rio_local',
	extra => "streamguard.remote_timeout='${remote_timeout}s'\nmax_files_per_process=70\n");

# processes of the remote that we SIGSTOP: always continued
my %stopped;
END { kill 'CONT', $_ for keys %stopped; }

sub val { my ($n, $sql, $db) = @_; return $n->safe_psql($db // 'postgres', $sql); }

my $rport = $remote->port;
my $pw = 'rio-Pw-2236';
my $other_pw = 'rio-Other-1414';

$remote->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
CREATE ROLE sinker LOGIN PASSWORD '$pw';
CREATE ROLE other LOGIN PASSWORD '$other_pw';
GRANT CREATE ON SCHEMA public TO sinker;
SELECT streamguard.create_stream('rsrc', 1);
SELECT streamguard.grant_stream('rsrc', 'sinker', 'read');
SET ROLE sinker;
CREATE TABLE sink_note (id bigint NOT NULL);
CREATE TABLE sink_2pc (id bigint NOT NULL);
CREATE FUNCTION sink_note_say() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	RAISE NOTICE 'rio notice for %', NEW.id;
	RAISE WARNING 'rio warning for %', NEW.id USING DETAIL = 'rio warning detail';
	RETURN NEW;
END \$\$;
CREATE TRIGGER sink_note_say BEFORE INSERT ON sink_note FOR EACH ROW EXECUTE FUNCTION sink_note_say();
});

# an imitation of the remote read API, in a database without streamguard
$remote->safe_psql('postgres', q{CREATE DATABASE fake OWNER sinker});
$remote->safe_psql('fake', q{
SET ROLE sinker;
CREATE SCHEMA streamguard;
CREATE TABLE streamguard.streams (stream text, partitions int);
INSERT INTO streamguard.streams VALUES ('fs', 1);
CREATE TABLE ctl (mode text);
INSERT INTO ctl VALUES ('ok');
CREATE FUNCTION streamguard.read(s text, p int, after_seq bigint, n int)
RETURNS TABLE (partition int, seq bigint, key text, payload text, dedup_key text, appended_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	m text := (SELECT mode FROM ctl);
BEGIN
	IF m = 'raise' THEN
		RAISE EXCEPTION 'rio remote failure'
			USING ERRCODE = '22023', DETAIL = 'rio remote detail', HINT = 'rio remote hint';
	ELSIF m = 'big' THEN
		-- 200 events of 16 kB, then one that is not JSON: the result is
		-- complete before the reader trips over its last row
		RETURN QUERY
			SELECT 0, g::bigint, NULL::text,
				   CASE WHEN g <= 200 THEN '"' || repeat('x', 16000) || '"' ELSE 'not json' END,
				   NULL::text, now()
			FROM generate_series(after_seq + 1, after_seq + 201) g;
	END IF;
END $$;
});

my $dport = PostgreSQL::Test::Cluster->new('rio_dead')->port;    # never started: refuses
$local->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('src', 1);
CREATE TABLE got (payload text);
CREATE SERVER rfake FOREIGN DATA WRAPPER streamguard_remote
	OPTIONS (host '127.0.0.1', port '$rport', dbname 'fake', application_name 'rio_fake');
CREATE USER MAPPING FOR CURRENT_USER SERVER rfake OPTIONS (user 'sinker', password '$pw');
CREATE SERVER rnote FOREIGN DATA WRAPPER streamguard_remote
	OPTIONS (host '127.0.0.1', port '$rport', dbname 'postgres', application_name 'rio_note');
CREATE USER MAPPING FOR CURRENT_USER SERVER rnote OPTIONS (user 'sinker', password '$pw');
CREATE SERVER r2pc FOREIGN DATA WRAPPER streamguard_remote
	OPTIONS (host '127.0.0.1', port '$rport', dbname 'postgres', application_name 'rio_2pc');
CREATE USER MAPPING FOR CURRENT_USER SERVER r2pc OPTIONS (user 'sinker', password '$pw');
CREATE SERVER rsrc FOREIGN DATA WRAPPER streamguard_remote
	OPTIONS (host '127.0.0.1', port '$rport', dbname 'postgres', application_name 'rio_src');
CREATE USER MAPPING FOR CURRENT_USER SERVER rsrc OPTIONS (user 'sinker', password '$pw');
CREATE SERVER rdead FOREIGN DATA WRAPPER streamguard_remote
	OPTIONS (host '127.0.0.1', port '$dport', dbname 'postgres');
CREATE USER MAPPING FOR CURRENT_USER SERVER rdead OPTIONS (user 'sinker', password '$pw');
});

my $fake_pipeline = q{SELECT streamguard.create_pipeline('p_fake', 'fs',
	$$INSERT INTO got SELECT left(payload::text, 20) FROM batch$$, source_server => 'rfake',
	retry_backoff => '10 ms', max_backoff => '20 ms')};

# ===================================== 1. remote errors, field by field

$remote->safe_psql('fake', q{UPDATE ctl SET mode = 'raise'});
{
	my ($ok, $out, $err) = try_psql($local, $fake_pipeline);
	ok(!$ok, 'errors: create_pipeline fails on the remote error');
	is(sqlstate($err), '22023', 'errors: the remote SQLSTATE is relayed');
	like($err, qr/^ERROR:\s+22023: remote server "rfake": rio remote failure$/m,
		'errors: the message is the remote primary message, after the server name')
	  or diag($err);
	like($err, qr/^DETAIL:\s+rio remote detail$/m, 'errors: the remote detail is the detail');
	like($err, qr/^HINT:\s+rio remote hint$/m, 'errors: the remote hint is the hint');
	like($err, qr/^CONTEXT:\s+PL\/pgSQL function streamguard\.read\(text,integer,bigint,integer\) line \d+ at RAISE$/m,
		'errors: the remote context is context');
	like($err, qr/^remote SQL command: SELECT count\(\*\) FROM streamguard\.read\(\$1, 0, 0, 1\)$/m,
		'errors: the remote SQL is context too');
}

# at run time: the views keep the primary message, on one line
$remote->safe_psql('fake', q{UPDATE ctl SET mode = 'ok'});
$local->safe_psql('postgres', $fake_pipeline);
ok(wait_pipelines_running($local, ['p_fake'], 30), 'errors: the pipeline on the imitation runs');
$remote->safe_psql('fake', q{UPDATE ctl SET mode = 'raise'});
ok( wait_for_value($local,
		q{SELECT last_error FROM streamguard.remote_status WHERE pipeline = 'p_fake'},
		'rio remote failure', 30),
	'errors: remote_status.last_error is the remote primary message alone')
  or diag(remote_status_report($local));
ok( wait_for_value($local,
		q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'p_fake'},
		'remote server "rfake": rio remote failure', 30),
	'errors: pipelines.last_error is the error message, one line')
  or diag(pipelines_report($local));

# ============================ 2. a result held while an ERROR is thrown

# VmRSS of a process, in kB (Linux)
sub rss_kb
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	while (<$fh>)
	{
		return $1 if /^VmRSS:\s+(\d+)\s+kB/;
	}
	return undef;
}

SKIP:
{
	skip 'no /proc/<pid>/status here', 3 unless -r "/proc/$$/status";

	my $off = log_offset($local);
	$remote->safe_psql('fake', q{UPDATE ctl SET mode = 'big'});
	my $attempt_re = qr/pipeline "p_fake": batch failed \(attempt (\d+)\): invalid input syntax for type json/;
	# the attempts counted from the first one that failed on the bad event
	my $attempts = sub {
		my @n = slurp_file($local->logfile, $off) =~ /$attempt_re/g;
		return scalar @n;
	};
	my $wait_attempts = sub {
		my ($n) = @_;
		my $deadline = time + 90;
		usleep(100_000) while $attempts->() < $n && time < $deadline;
		return $attempts->();
	};
	my $pid = val($local, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_fake'});
	# the first few dozen attempts grow the heap to what one needs at most
	cmp_ok($wait_attempts->(40), '>=', 40, 'leak: the worker fails on the event that is not JSON, again and again');
	my $rss1 = rss_kb($pid);
	my $n1 = $attempts->();
	$wait_attempts->($n1 + 40);
	my $rss2 = rss_kb($pid);
	my $n2 = $attempts->();
	is(val($local, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_fake'}), $pid,
		'leak: (the same worker process all along)');
	my $growth_mb = (($rss2 // 0) - ($rss1 // 0)) / 1024;
	note(sprintf('leak: VmRSS %d kB after %d failed attempts, %d kB after %d (%.1f MB more)',
		$rss1 // -1, $n1, $rss2 // -1, $n2, $growth_mb));
	# each attempt holds a 3.2 MB result when it fails: a leak grows by
	# that much every time, 128 MB here
	cmp_ok($growth_mb, '<', 20,
		sprintf('leak: resident memory stays flat over %d failed attempts (%.1f MB)', $n2 - $n1, $growth_mb));
}
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_fake')});
$remote->safe_psql('fake', q{UPDATE ctl SET mode = 'ok'});

# ======================================= 3. remote notices in our log

$local->safe_psql('postgres', q{
ALTER SYSTEM SET log_min_messages = debug1;
SELECT pg_reload_conf();
SELECT streamguard.create_pipeline('p_note', 'src',
	$$SELECT (payload->>'id')::bigint AS id FROM batch$$,
	sink_server => 'rnote', sink_table => 'sink_note', sink_mode => 'offsets');
});
{
	my $off = log_offset($local);
	$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 4242}')});
	ok(wait_for_value($remote, 'SELECT count(*) FROM sink_note WHERE id = 4242', 1, 30), 'notices: delivered');
	ok(defined wait_log($local, qr/LOG:  remote server "rnote" WARNING: rio warning for 4242\n[^\n]*DETAIL:  rio warning detail/,
			$off, 10),
		'notices: a remote WARNING is in the log at LOG, with the server name and its detail');
	ok(defined wait_log($local, qr/DEBUG:  remote server "rnote" NOTICE: rio notice for 4242/, $off, 10),
		'notices: a remote NOTICE is in the log at DEBUG1');
	my $log = slurp_file($local->logfile, $off);
	unlike($log, qr/^(WARNING|NOTICE):  rio (warning|notice) for/m,
		'notices: nothing printed bare to stderr by libpq');
}
$local->safe_psql('postgres', q{
SELECT streamguard.drop_pipeline('p_note');
ALTER SYSTEM RESET log_min_messages;
SELECT pg_reload_conf();
});

# ==================================== 4. text crosses in our encoding

SKIP:
{
	skip 'the local database is not UTF8', 2
	  unless val($local, 'SHOW server_encoding') eq 'UTF8';
	$remote->safe_psql('postgres',
		q{CREATE DATABASE latin OWNER sinker TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'});
	$remote->safe_psql('latin', q{SET ROLE sinker; CREATE TABLE sink_l1 (name text NOT NULL)});
	$local->safe_psql('postgres', qq{
CREATE SERVER rlatin FOREIGN DATA WRAPPER streamguard_remote
	OPTIONS (host '127.0.0.1', port '$rport', dbname 'latin');
CREATE USER MAPPING FOR CURRENT_USER SERVER rlatin OPTIONS (user 'sinker', password '$pw');
SELECT streamguard.create_stream('names', 1);
SELECT streamguard.create_pipeline('p_latin', 'names', \$\$SELECT payload->>'name' AS name FROM batch\$\$,
	sink_server => 'rlatin', sink_table => 'sink_l1', sink_mode => 'offsets');
SELECT streamguard.append('names', jsonb_build_object('name', U&'caf\\00E9'));
});
	ok(wait_for_value($remote, 'SELECT count(*) FROM sink_l1', 1, 30, dbname => 'latin'),
		'encoding: delivered to the LATIN1 database');
	is(val($remote, q{SELECT length(name) || ' ' || encode(convert_to(name, 'LATIN1'), 'hex') FROM sink_l1}, 'latin'),
		'4 636166e9', 'encoding: the UTF-8 é arrived as the LATIN1 é');
	$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_latin')});
}

# ============================ 5. a connection closes with its transaction

$local->safe_psql('postgres', q{
SELECT streamguard.create_pipeline('p_2pc', 'src', $$SELECT (payload->>'id')::bigint AS id FROM batch$$,
	sink_server => 'r2pc', sink_table => 'sink_2pc', sink_mode => 'two_phase', start_from => 'end');
});
ok(wait_pipelines_running($local, ['p_2pc'], 30), 'abort: the two_phase pipeline runs');
$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 1}')});
ok(wait_for_value($remote, 'SELECT count(*) FROM sink_2pc', 1, 30), 'abort: delivered');
{
	# the worker stops between the local commit and COMMIT PREPARED (held
	# there, as sinker); then the mapping names other, who may not finish
	# sinker's prepared transactions, and the worker is ended: its successor
	# logs in as other.  (A mapping changed under a running worker makes it
	# connect again at its next batch, so the change comes while it holds.)
	my $off = log_offset($local);
	$local->safe_psql('postgres', q{SELECT streamguard.inject_fault('p_2pc', 'after_local_commit', 'hold')});
	$local->safe_psql('postgres', q{SELECT streamguard.append('src', '{"id": 2}')});
	ok(defined wait_log($local, qr/pipeline "p_2pc": injected fault, holding/, $off, 30),
		'abort: the worker holds between the local commit and COMMIT PREPARED');
	$local->safe_psql('postgres',
		qq{ALTER USER MAPPING FOR CURRENT_USER SERVER r2pc OPTIONS (SET user 'other', SET password '$other_pw')});
	my $held = val($local, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_2pc'});
	is(val($local, qq{SELECT pg_terminate_backend($held)}), 't', 'abort: the held worker is ended');
	ok( defined wait_log($local,
			qr/pipeline "p_2pc": batch failed \(attempt \d+\): remote server "r2pc": permission denied to finish prepared transaction/,
			$off, 30),
		'abort: its successor, as the other remote user, cannot finish it');
	$local->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('p_2pc')});
	ok(wait_for_value($remote, q{SELECT count(*) FROM pg_stat_activity WHERE usename = 'other'}, 0, 30),
		'abort: paused, no session of the other user is left on the remote');

	my $sess = $local->background_psql('postgres', on_error_stop => 0);
	my $res = $sess->query(q{SELECT streamguard.drop_pipeline('p_2pc')});
	like($sess->{stderr}, qr/permission denied to finish prepared transaction/,
		'abort: drop_pipeline fails on the remote') or diag("out [$res] err [$sess->{stderr}]");
	# (a closed connection's backend takes a moment to go)
	ok(wait_for_value($remote, q{SELECT count(*) FROM pg_stat_activity WHERE usename = 'other'}, 0, 5),
		'abort: the failed drop_pipeline left no session open on the remote while its own session lives')
	  or diag(val($remote, q{SELECT string_agg(pid || ' ' || state || ' ' || left(query, 60), E'\n')
		FROM pg_stat_activity WHERE usename = 'other'}));
	$sess->quit;

	$local->safe_psql('postgres',
		qq{ALTER USER MAPPING FOR CURRENT_USER SERVER r2pc OPTIONS (SET user 'sinker', SET password '$pw')});
	$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_2pc')});
	is(val($remote, 'SELECT count(*) FROM pg_prepared_xacts'), 0,
		'abort: with the right user, drop_pipeline settles the prepared transaction');
	is(val($remote, 'SELECT count(*) FROM sink_2pc'), 2, '... which had committed here: its event is there');
}

# ================================ 6. external file descriptors come back

{
	my $sess = $local->background_psql('postgres', on_error_stop => 0);
	my $budget = $sess->query_safe(q{SELECT current_setting('max_files_per_process')});
	my ($refused, $remote_err) = (0, 0);
	for my $i (1 .. 25)
	{
		$sess->{stderr} = '';
		$sess->query(qq{SELECT streamguard.create_pipeline('fd_a$i', 'src', \$\$SELECT 1 AS id FROM batch\$\$,
			sink_server => 'rdead', sink_table => 'sink_2pc')});
		$refused++ if $sess->{stderr} =~ /remote server "rdead": could not connect/;
		$sess->{stderr} = '';
		$sess->query(qq{SELECT streamguard.create_pipeline('fd_b$i', 'src', \$\$SELECT 1 AS id FROM batch\$\$,
			sink_server => 'r2pc', sink_table => 'no_such_table')});
		$remote_err++ if $sess->{stderr} =~ /no_such_table/;
	}
	is("$refused/$remote_err", '25/25',
		"fds: 25 refused connections and 25 remote errors in one session (max_files_per_process $budget)");
	$sess->{stderr} = '';
	$sess->query(q{SELECT streamguard.create_pipeline('fd_ok', 'src', $$SELECT 1 AS id FROM batch$$,
		sink_server => 'r2pc', sink_table => 'sink_2pc')});
	is($sess->{stderr}, '', 'fds: ... and then a remote call that works (no "too many open files")');
	$sess->query(q{SELECT streamguard.drop_pipeline('fd_ok')});
	$sess->quit;
}

# ============================= 7. a stopped remote, a terminated worker

$local->safe_psql('postgres', q{
CREATE TABLE rgot (id bigint);
SELECT streamguard.create_pipeline('p_src', 'rsrc', $$INSERT INTO rgot SELECT (payload->>'id')::bigint FROM batch$$,
	source_server => 'rsrc');
});
$remote->safe_psql('postgres', q{SELECT streamguard.append('rsrc', '{"id": 1}')});
ok(wait_for_value($local, 'SELECT count(*) FROM rgot', 1, 30), 'stopped: the remote-source pipeline delivers');
{
	my @backends = remote_pids($remote, 'rio_src');
	my $postmaster = $remote->{_pid};
	ok(@backends && $postmaster, "stopped: the remote's postmaster ($postmaster) and the pipeline's backend (@backends)");
	my $worker = val($local, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_src'});
	# the postmaster first: no cancel request can reach the backend either
	for my $pid ($postmaster, @backends)
	{
		$stopped{$pid} = 1;
		kill 'STOP', $pid;
	}
	my $t0 = time;
	ok( wait_for_value($local,
			q{SELECT last_error ~ 'timed out' FROM streamguard.remote_status WHERE pipeline = 'p_src'},
			't', $remote_timeout + 10),
		'stopped: the worker gave up on its statement (timed out)')
	  or diag(remote_status_report($local));
	note(sprintf('stopped: gave up after %.1f s', time - $t0));

	# waiting on its latch in the meantime, not spinning
	my $waits = 0;
	for (1 .. 10)
	{
		$waits++ if val($local, qq{SELECT wait_event_type FROM pg_stat_activity WHERE pid = $worker}) eq 'Extension';
		usleep(100_000);
	}
	cmp_ok($waits, '>=', 8, "stopped: the worker waits (wait_event_type Extension in $waits of 10 samples)");
	SKIP:
	{
		skip 'no /proc/<pid>/stat here', 1 unless -r "/proc/$worker/stat";
		my $cpu = sub {
			my @f = split ' ', (slurp_file("/proc/$worker/stat") =~ s/^.*\) //sr);
			return $f[11] + $f[12];    # utime + stime, in clock ticks
		};
		my $c0 = $cpu->();
		sleep 2;
		my $used = $cpu->() - $c0;
		cmp_ok($used, '<', 20, "stopped: ... using no CPU ($used ticks in 2 s)");
	}

	my $t1 = time;
	is(val($local, qq{SELECT pg_terminate_backend($worker)}), 't', 'stopped: SIGTERM to the worker');
	ok( wait_for_value($local, qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $worker}, 0,
			$remote_timeout + 5),
		'stopped: the worker ended');
	my $ended = time - $t1;
	cmp_ok($ended, '<', $remote_timeout, sprintf('stopped: ... within the remote timeout (%.2f s)', $ended));

	# its successor cannot even connect, and is ended as promptly
	ok( wait_for_value($local, q{SELECT count(*) FROM streamguard.pipelines p
		JOIN pg_stat_activity a ON a.pid = p.worker_pid WHERE p.pipeline = 'p_src'}, 1, 30),
		'stopped: a new worker was started');
	ok( wait_for_value($local,
			q{SELECT last_error ~ 'could not connect' FROM streamguard.remote_status WHERE pipeline = 'p_src'},
			't', $remote_timeout + 10),
		'stopped: it times out connecting to the stopped remote')
	  or diag(remote_status_report($local));
	# the pipeline's own last_error says why, not only that it failed
	ok( wait_for_value($local,
			q{SELECT last_error ~ 'could not connect: timed out' FROM streamguard.pipelines WHERE pipeline = 'p_src'},
			't', $remote_timeout + 10),
		'stopped: pipelines.last_error gives the reason')
	  or diag(val($local, q{SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'p_src'}));
	my $worker2 = val($local, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_src'});
	$t1 = time;
	val($local, qq{SELECT pg_terminate_backend($worker2)});
	ok(wait_for_value($local, qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $worker2}, 0, 10),
		'stopped: the new worker ended on SIGTERM');
	cmp_ok(time - $t1, '<', $remote_timeout, 'stopped: ... within the remote timeout');
	unlike(slurp_file($local->logfile), qr/too many open files/, 'stopped: no file descriptor was lost on the way');

	for my $pid (@backends, $postmaster)
	{
		kill 'CONT', $pid;
		delete $stopped{$pid};
	}
}
$remote->safe_psql('postgres', q{SELECT streamguard.append('rsrc', '{"id": 2}')});
ok(wait_for_value($local, 'SELECT count(*) FROM rgot', 2, 60), 'stopped: after SIGCONT the pipeline goes on')
  or diag(pipelines_report($local) . "\n" . remote_status_report($local));
is(val($local, 'SELECT count(DISTINCT id) || \'/\' || count(*) FROM rgot'), '2/2', 'stopped: nothing twice');

# ============================ 8. values cross unchanged, row by row

# the events: ($key, $dedup_key, $payload) as SQL expressions
my @vals = (
	[ q{'k\\t1'}, 'NULL', q{'{"a": "tab\\there", "b": "line\\nbreak", "c": "back\\\\slash"}'} ],
	[ 'NULL', q{'d-1'}, q{'{"n": 12345678901234567890.000000000001, "f": -1.5e-7, "z": 0}'} ],
	[ q{U&'cl\00E9'}, 'NULL', q{jsonb_build_object('s', U&'caf\00E9 \00FC\00DF', 'e', '')} ],
	[ q{'deep'}, 'NULL', q{'{"x": [1, [2, [3, [4, {"y": [null, true, false]}]]]]}'} ],
	[ q{''}, q{''}, q{'[]'} ],
	[ 'NULL', 'NULL', q{'"just a string"'} ],
	[ q{'big'}, 'NULL', q{jsonb_build_object('blob', repeat('abcdefgh', 4000), 'tail', 1)} ],
	[ q{'nul'}, 'NULL', q{'null'} ],);
my @exprs;
for my $i (1 .. 60)
{
	my ($k, $d, $p) = @{ $vals[ $i % @vals ] };
	$d = "'d-$i'" if $d ne 'NULL';
	push @exprs, "($i, $k, $d, jsonb_build_object('i', $i, 'v', ($p)::jsonb))";
}
my $events_sql = 'SELECT * FROM (VALUES ' . join(', ', @exprs) . ') AS v (i, k, d, p) ORDER BY i';
my $append_sql = sub {
	my ($stream) = @_;
	return "SELECT count(*) FROM ($events_sql) e, LATERAL streamguard.append('$stream', e.p, e.k, e.d, e.i % 2)";
};
# the columns compared, in seq order per partition
my $cmp = q{SELECT string_agg(concat_ws('|', partition, seq, coalesce(key, '<null>'), payload::text), E'\n'
	ORDER BY partition, seq) FROM };

$remote->safe_psql('postgres', qq{
SELECT streamguard.create_stream('rvals', 2);
SELECT streamguard.grant_stream('rvals', 'sinker', 'read');
@{[ $append_sql->('rvals') ]};
SET ROLE sinker;
CREATE TABLE sink_vals (partition int, seq bigint, key text, payload jsonb, dedup_key text);
});
$local->safe_psql('postgres', qq{
CREATE TABLE vgot (partition int, seq bigint, key text, payload jsonb, dedup_key text);
SELECT streamguard.create_pipeline('p_vals_src', 'rvals',
	\$\$INSERT INTO vgot SELECT partition, seq, key, payload, dedup_key FROM batch\$\$,
	batch_size => 7, source_server => 'rsrc');
SELECT streamguard.create_stream('lvals', 2);
@{[ $append_sql->('lvals') ]};
SELECT streamguard.create_pipeline('p_vals_sink', 'lvals',
	\$\$SELECT partition, seq, key, payload, dedup_key FROM batch\$\$,
	batch_size => 7, sink_server => 'r2pc', sink_table => 'public.sink_vals', sink_mode => 'two_phase');
});
ok(wait_for_value($local, 'SELECT count(*) FROM vgot', 60, 60), 'values: the remote source delivered 60 events')
  or diag(pipelines_report($local));
ok(wait_for_value($remote, 'SELECT count(*) FROM sink_vals', 60, 60), 'values: the remote sink received 60 rows')
  or diag(pipelines_report($local));
my $orig_remote = val($remote, $cmp . q{(SELECT * FROM streamguard.read('rvals', 0, 0, 100)
	UNION ALL SELECT * FROM streamguard.read('rvals', 1, 0, 100)) e});
my $orig_local = val($local, $cmp . q{(SELECT * FROM streamguard.read('lvals', 0, 0, 100)
	UNION ALL SELECT * FROM streamguard.read('lvals', 1, 0, 100)) e});
is(val($local, $cmp . 'vgot'), $orig_remote, 'values: the remote source\'s rows equal the remote events');
is(val($remote, $cmp . 'sink_vals'), $orig_local, 'values: the remote sink\'s rows equal the local events');
is( val($local, q{SELECT string_agg(coalesce(dedup_key, '<null>'), ',' ORDER BY partition, seq) FROM vgot}),
	val($remote, q{SELECT string_agg(coalesce(dedup_key, '<null>'), ',' ORDER BY partition, seq) FROM
		(SELECT * FROM streamguard.read('rvals', 0, 0, 100) UNION ALL SELECT * FROM streamguard.read('rvals', 1, 0, 100)) e}),
	'values: the dedup keys too');
is( val($remote, q{SELECT string_agg(coalesce(dedup_key, '<null>'), ',' ORDER BY partition, seq) FROM sink_vals}),
	val($local, q{SELECT string_agg(coalesce(dedup_key, '<null>'), ',' ORDER BY partition, seq) FROM
		(SELECT * FROM streamguard.read('lvals', 0, 0, 100) UNION ALL SELECT * FROM streamguard.read('lvals', 1, 0, 100)) e}),
	'values: ... both ways');
like(val($local, q{SELECT payload->'v'->>'n' FROM vgot WHERE (payload->>'i')::int = 1}),
	qr/^12345678901234567890\.000000000001$/, 'values: an exact numeric stays exact');
is(val($remote, q{SELECT count(*) FROM pg_prepared_xacts}), '0', 'values: no prepared transaction left');
$local->safe_psql('postgres', q{SELECT streamguard.drop_pipeline('p_vals_src'); SELECT streamguard.drop_pipeline('p_vals_sink')});

$local->stop;
$remote->stop;
done_testing();
