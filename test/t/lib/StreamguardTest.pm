
# StreamguardTest: the one helper library of the TAP tests (test/t/*.pl),
# built on PostgreSQL::Test::Cluster and PostgreSQL::Test::Utils.
#
#   use FindBin;
#   use lib "$FindBin::RealBin/lib";
#   use StreamguardTest;
#
#   my $node = sg_node('mytest');                 # streamguard preloaded, started
#   $node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
#   ok(wait_for_value($node, 'SELECT count(*) FROM sink', '10', 30), 'ten rows');
#
# Sections (every helper is exported and documented where it is defined):
#   nodes      sg_node, sg_remote_pair, tcp_connstr, remote_server_sql,
#              sink_marker_sql
#   SQL        try_psql, sqlstate, sql_state, expect_ok, expect_error,
#              timed_psql, q1
#   waits      wait_for_value, wait_pipelines_running, wait_crash_recovery,
#              crash_lost, psql_across_crash, stream_has_sql,
#              log_offset, wait_log, count_log, is_stable
#   reports    pipelines_report, remote_status_report, state_diag, remote_pids
#   producers  run_knobs, producer_sql, start_producers, producers_wait_for,
#              stop_producers, copy_stream, streamed_positions,
#              producer_ids, producers_summary
#   faults     fault_context, fault_wait_pipelines, fault_fired,
#              fault_inject, fault_remote_restart, fault_terminate_remote,
#              fault_stall_remote, fault_stalls_ok, run_fault_plan,
#              fault_summary
#   proxy      start_proxy, proxy_hold, proxy_held, proxy_release, proxy_stop
#   security   sec_pin, sec_val, sec_wait, sec_bootstrap_name,
#              sec_make_attacker, sec_evil_sql, sec_install_evil,
#              sec_assert_no_escalation
#
# Every wait has a deadline, and every psql call a timeout: nothing here
# loops or blocks forever.  Waits on a query go through Cluster's
# poll_query_until, waits on the server log through its wait_for_log, each
# with the caller's deadline in place of the framework's default.  Servers
# listen on their unix socket, and with remote => 1 on 127.0.0.1 too, never
# elsewhere; a test stops its nodes itself (the framework stops any it
# left running when the file ends).

package StreamguardTest;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use POSIX ();
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(
  sg_node sg_remote_pair tcp_connstr remote_server_sql sink_marker_sql
  try_psql sqlstate sql_state expect_ok expect_error timed_psql q1
  is_stable wait_for_value wait_pipelines_running wait_crash_recovery
  crash_lost psql_across_crash stream_has_sql
  log_offset wait_log count_log
  pipelines_report remote_status_report state_diag remote_pids
  run_knobs producer_sql start_producers producers_wait_for stop_producers
  copy_stream streamed_positions producer_ids producers_summary
  fault_context fault_wait_pipelines fault_fired fault_inject
  fault_remote_restart fault_terminate_remote fault_stall_remote
  fault_stalls_ok run_fault_plan fault_summary
  start_proxy proxy_hold proxy_held proxy_release proxy_stop
  sec_pin sec_val sec_wait sec_bootstrap_name
  sec_make_attacker sec_evil_sql sec_install_evil sec_assert_no_escalation);

# seconds one psql call of a wait may take
my $ATTEMPT_TIMEOUT = 30;

# the shortest deadline of a wait (wait_for_value, wait_log and the waits
# built on them), whatever the caller asked: a deadline says how long a
# condition may take on a loaded machine, not how fast it is on a quiet
# one (a wait that succeeds returns as soon as it does).  SG_WAIT_MIN
# (seconds, default 90) changes it; 0 keeps every caller's own deadline.
my $WAIT_MIN = $ENV{SG_WAIT_MIN} // 90;

sub _deadline
{
	my ($timeout) = @_;
	$timeout //= 60;
	return $timeout < $WAIT_MIN ? $WAIT_MIN : $timeout;
}

# ==================================================================== nodes

# sg_node($name, %opt): a node with streamguard preloaded, started.
# Its postgresql.conf gets, after the framework's own lines:
#   shared_preload_libraries = 'streamguard', maintenance every 200ms,
#   max_worker_processes = 16, max_connections = 60,
#   restart_after_crash = on (the framework sets it off), log_statement = none
# and then %opt:
#   extra      => more postgresql.conf lines (they come last: they win)
#   preload    => 0: leave shared_preload_libraries (and the naptime) unset
#   init       => { ... }: passed to Cluster's init (allows_streaming => 1)
#   remote     => 1: also listen on 127.0.0.1 and ask TCP clients for a
#                 SCRAM password (a pg_hba.conf line placed before the
#                 framework's trust lines); max_prepared_transactions 10
#   trust_tcp  => [roles]: those roles are trusted on 127.0.0.1 (lines
#                 before the SCRAM one): a server that does not ask them
#   mpx        => max_prepared_transactions (default 10 with remote => 1)
#   install_path => the PostgreSQL installation to run (default: the one
#                 on PATH), as Cluster's new() takes it
sub sg_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name,
		$opt{install_path} ? (install_path => $opt{install_path}) : ());
	$node->init(%{ $opt{init} // {} });
	my $conf = '';
	$conf .= "shared_preload_libraries = 'streamguard'\n"
	  . "streamguard.maintenance_naptime = '200ms'\n" if $opt{preload} // 1;
	$conf .= "max_worker_processes = 16\n"
	  . "max_connections = 60\n"
	  . "restart_after_crash = on\n"
	  . "log_statement = none\n";
	if ($opt{remote})
	{
		$conf .= "listen_addresses = '127.0.0.1'\n"
		  . "password_encryption = 'scram-sha-256'\n";
		$opt{mpx} //= 10;
	}
	$conf .= "max_prepared_transactions = $opt{mpx}\n" if defined $opt{mpx};
	$conf .= $opt{extra} // '';
	$node->append_conf('postgresql.conf', $conf);
	if ($opt{remote})
	{
		my $hba_file = $node->data_dir . '/pg_hba.conf';
		my $hba = '';
		$hba .= "host all $_ 127.0.0.1/32 trust\n" for @{ $opt{trust_tcp} // [] };
		$hba .= "host all all 127.0.0.1/32 scram-sha-256\n";
		$hba .= slurp_file($hba_file);
		open(my $fh, '>', $hba_file) or die "cannot write $hba_file: $!";
		print $fh $hba;
		close $fh;
	}
	$node->start;
	return $node;
}

# sg_remote_pair(%opt): ($remote, $local), the two servers of a remote
# source or sink test, started.  $remote is sg_node(remote => 1, ...): it
# takes SCRAM passwords over 127.0.0.1.
#   remote_name, local_name => node names ('remote', 'local')
#   remote, local           => { more sg_node options for each }
sub sg_remote_pair
{
	my (%opt) = @_;
	my $remote = sg_node($opt{remote_name} // 'remote', %{ $opt{remote} // {} }, remote => 1);
	my $local = sg_node($opt{local_name} // 'local', %{ $opt{local} // {} });
	return ($remote, $local);
}

# tcp_connstr($node, $user, $password, $db): libpq connection string to
# $node over TCP loopback (user and password only when given)
sub tcp_connstr
{
	my ($node, $user, $password, $db) = @_;
	my $s = "host=127.0.0.1 port=" . $node->port . " dbname=" . ($db // 'postgres');
	$s .= " user=$user" if defined $user;
	$s .= " password=$password" if defined $password;
	return $s;
}

# remote_server_sql($server, $port, %opt): SQL that creates foreign server
# $server of streamguard_remote for a server on 127.0.0.1 at $port (a number,
# or a node: its port), and with user => a user mapping for it.
#   host => instead of 127.0.0.1 (a unix socket directory)
#   dbname => ('postgres'), app => application_name
#   user, password => the mapping's options (password only when given)
#   for => whose mapping (CURRENT_USER)
sub remote_server_sql
{
	my ($server, $port, %opt) = @_;
	$port = $port->port if ref $port;
	my @srv = ("host '" . ($opt{host} // '127.0.0.1') . "'", "port '$port'",
		"dbname '" . ($opt{dbname} // 'postgres') . "'");
	push @srv, "application_name '$opt{app}'" if defined $opt{app};
	my $sql = "CREATE SERVER $server FOREIGN DATA WRAPPER streamguard_remote\n\tOPTIONS ("
	  . join(', ', @srv) . ");\n";
	if (defined $opt{user})
	{
		my @map = ("user '$opt{user}'");
		push @map, "password '$opt{password}'" if defined $opt{password};
		$sql .= 'CREATE USER MAPPING FOR ' . ($opt{for} // 'CURRENT_USER')
		  . " SERVER $server OPTIONS (" . join(', ', @map) . ");\n";
	}
	return $sql;
}

# sink_marker_sql(@roles): SQL for a remote's administrator that creates
# the bookkeeping table of two_phase sinks, public.streamguard_sink_marker,
# for remote roles that may not create tables in schema public
sub sink_marker_sql
{
	my (@roles) = @_;
	my $to = join(', ', @roles);
	return qq{
CREATE TABLE public.streamguard_sink_marker (pipeline text PRIMARY KEY, gid text NOT NULL);
GRANT SELECT, INSERT, UPDATE, DELETE ON public.streamguard_sink_marker TO $to;
};
}

# ====================================================================== SQL

# try_psql($node, $sql, %opt): run SQL through psql; never dies.
# Returns ($ok, $stdout, $stderr), both chomped; errors are verbose (the
# SQLSTATE is in them: see sqlstate).  psql runs with ON_ERROR_STOP.
#   dbname => ('postgres'), user => role, connstr => a whole connection
#   string instead, timeout => seconds for the whole call (60)
sub try_psql
{
	my ($node, $sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my $conn = $opt{connstr} // $node->connstr($opt{dbname} // 'postgres');
	$conn .= " user=$opt{user}" if $opt{user};
	my $ok = eval {
		IPC::Run::run(
			[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', '-d', $conn ],
			'<', \$sql, '>', \$out, '2>', \$err,
			IPC::Run::timeout($opt{timeout} // 60));
	};
	$err .= $@ if $@;
	chomp $out;
	chomp $err;
	return ($ok ? 1 : 0, $out, $err);
}

# sqlstate($stderr): the SQLSTATE of a verbose psql error, or ''
sub sqlstate
{
	my ($err) = @_;
	return $1 if ($err // '') =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/;
	return '';
}

# sql_state($node, $sql, %opt): run $sql (try_psql options); 'ok' when it
# succeeds, else its SQLSTATE ('?' if none, with the error in diag)
sub sql_state
{
	my ($node, $sql, %opt) = @_;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	return 'ok' if $ok;
	return sqlstate($err) || do { diag($err); '?' };
}

# expect_ok($node, $sql, $name, %opt): $sql must succeed (one check, the
# error in diag).  Returns $ok, or ($ok, $stdout, $stderr) in list context.
sub expect_ok
{
	my ($node, $sql, $name, %opt) = @_;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	ok($ok, $name) or diag($err);
	return wantarray ? ($ok, $out, $err) : $ok;
}

# expect_error($node, $sql, $state, $re, $name, %opt): $sql must fail
# with SQLSTATE $state and (unless $re is undef) a message matching $re:
# two or three checks.  Returns the seconds the call took.
sub expect_error
{
	my ($node, $sql, $state, $re, $name, %opt) = @_;
	my $t0 = time;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	my $elapsed = time - $t0;
	ok(!$ok, "$name: fails") or diag("unexpected success: [$out]");
	is(sqlstate($err), $state, "$name: SQLSTATE $state") or diag($err);
	like($err, $re, "$name: message") if defined $re;
	return $elapsed;
}

# timed_psql($node, $sql, %opt): run $sql (that may fail; try_psql
# options); returns (elapsed seconds, $ok, $stderr)
sub timed_psql
{
	my ($node, $sql, %opt) = @_;
	my $t0 = time;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	return (time - $t0, $ok, $err);
}

# q1($node, $sql, $timeout, %opt): one statement that must succeed, retried
# (the server may be restarting) until $timeout seconds (60) have passed.
# Returns its stdout, or undef (with the error in diag) after the deadline.
sub q1
{
	my ($node, $sql, $timeout, %opt) = @_;
	my $deadline = time + ($timeout // 60);
	my ($ok, $out, $err);
	while (1)
	{
		($ok, $out, $err) = try_psql($node, $sql, %opt, timeout => $ATTEMPT_TIMEOUT);
		return $out if $ok;
		last if time > $deadline;
		usleep(200_000);
	}
	diag("query failed until its deadline: $sql\n$err");
	return undef;
}

# ==================================================================== waits

# is_stable($node, $sql, $seconds, $name): one check that $sql (retried
# while the server restarts, see q1) prints the same before and after
# $seconds of sleep; a %s in $name becomes the value.  Returns the value.
sub is_stable
{
	my ($node, $sql, $seconds, $name) = @_;
	my $before = q1($node, $sql);
	sleep $seconds;
	my $after = q1($node, $sql);
	is($after, $before, sprintf($name, $after // 'undef'));
	return $after;
}

# wait_for_value($node, $sql, $expected, $timeout, %opt): poll $sql until
# it prints $expected ('t' by default); 1, or 0 after $timeout seconds (60;
# at least SG_WAIT_MIN, see _deadline) with the last output in diag.  A
# failing query (a server restarting) is tried again.  As the bootstrap
# superuser this is Cluster's poll_query_until with $timeout as its
# deadline (it counts tries, one every 0.1 s plus the query's own time, so
# a slow query stretches the wait somewhat); each try is one psql process
# whose connection and statement are bounded to 30 s.  With user or connstr each try is a
# try_psql call instead.  $sql must print only its result: one statement
# (psql there is not quiet: a SET would print "SET").
#   dbname => ('postgres'), user, connstr => as for try_psql
#   pgoptions => server options for the polling sessions ("-c name=value")
sub wait_for_value
{
	my ($node, $sql, $expected, $timeout, %opt) = @_;
	$expected //= 't';
	$timeout = _deadline($timeout);
	local $ENV{PGOPTIONS} = join(' ', grep { defined && $_ ne '' } $ENV{PGOPTIONS}, $opt{pgoptions});
	# a new psql per attempt: poll_query_until keeps one psql session from
	# PostgreSQL 17 on, which a crash restart breaks (a write to its stdin
	# then dies on SIGPIPE)
	local $ENV{PGCONNECT_TIMEOUT} = $ATTEMPT_TIMEOUT;
	local $ENV{PGOPTIONS} = "$ENV{PGOPTIONS} -c statement_timeout=${ATTEMPT_TIMEOUT}s";
	my $deadline = time + $timeout;
	my ($ok, $out, $err) = (0, '', '');
	while (time <= $deadline)
	{
		($ok, $out, $err) = try_psql($node, $sql, %opt, timeout => $ATTEMPT_TIMEOUT);
		return 1 if $ok && $out eq $expected;
		usleep(100_000);
	}
	diag("timed out waiting for [$sql] = [$expected]; last output [$out] stderr [$err]");
	return 0;
}

# wait_pipelines_running($node, \@names, $timeout): wait until every named
# pipeline is 'running' with a live worker process; 1, or 0 after $timeout
# seconds (60)
sub wait_pipelines_running
{
	my ($node, $names, $timeout) = @_;
	my $list = join(',', map { "'$_'" } @$names);
	return wait_for_value(
		$node, qq{
SELECT count(*) FROM streamguard.pipelines p
JOIN pg_stat_activity a ON a.pid = p.worker_pid AND a.backend_type = 'streamguard pipeline'
WHERE p.pipeline IN ($list) AND p.state = 'running'},
		scalar(@$names), $timeout // 60);
}

# log_offset($node): the size of the server log now, to look only at what
# is logged after it
sub log_offset
{
	my ($node) = @_;
	return -s $node->logfile;
}

# wait_log($node, $re, $offset, $timeout): wait until $re matches the
# server log after $offset (Cluster's wait_for_log, with $timeout (60; at
# least SG_WAIT_MIN, see _deadline) seconds as its deadline).  Returns the
# log's size when it matched, or undef on timeout.
sub wait_log
{
	my ($node, $re, $offset, $timeout) = @_;
	local $PostgreSQL::Test::Utils::timeout_default = _deadline($timeout);
	my $o = eval { $node->wait_for_log($re, $offset // 0) };
	return $o;
}

# count_log($node, $re, $offset): how many times $re matches the server
# log after $offset (0)
sub count_log
{
	my ($node, $re, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset // 0);
	my $n = () = $log =~ /$re/g;
	return $n;
}

# wait_crash_recovery($node, $offset, $timeout): after something killed a
# backend, wait until the log after $offset shows that the postmaster
# reinitialized and is ready, then until a new connection succeeds and
# pg_is_in_recovery() is false (crash recovery over: a "ready" postmaster
# may still refuse or cut connections on a loaded machine), each within
# $timeout seconds (180).  With $offset undef only the second wait (the
# server is back, whether or not it restarted).  Returns a defined log
# offset, or undef.  Every test waits for a crash restart through this.
sub wait_crash_recovery
{
	my ($node, $offset, $timeout) = @_;
	$timeout //= 180;
	my $o = 0;
	if (defined $offset)
	{
		$o = wait_log($node,
			qr/all server processes terminated; reinitializing.*?database system is ready to accept connections/s,
			$offset, $timeout);
		return undef unless defined $o;
	}
	return undef unless wait_for_value($node, 'SELECT NOT pg_is_in_recovery()', 't', $timeout);
	return $o;
}

# crash_lost($stderr): whether a psql failure is the server going away
# under it (a crash restart, or connecting while one is under way) rather
# than an error of the SQL
sub crash_lost
{
	my ($err) = @_;
	return ($err // '') =~ /connection to server was lost|server closed the connection unexpectedly|terminating connection because of crash|database system is in recovery mode|database system is (?:starting up|shutting down)|could not connect to server|connection to server .* failed/i;
}

# psql_across_crash($node, $sql, %opt): run $sql, which may make a worker
# crash the server (it appends what an armed kill fault fires on) or meet
# a crash restart; dies like safe_psql on any other error.  When the
# connection is lost, waits for the server (wait_crash_recovery) and asks
# $opt{done} (SQL that prints 't' when $sql's effect is there: its commit
# made it before the crash); runs $sql again if not (without done: always,
# for SQL that may run twice).  With retry => 0 it
# never runs $sql again: after the server is back it returns '' and the
# test checks what survived.  Bounded by $opt{timeout} seconds (180).
# Returns $sql's stdout ('' after a lost connection).  try_psql options
# (dbname, user) pass through.
sub psql_across_crash
{
	my ($node, $sql, %opt) = @_;
	my $deadline = time + ($opt{timeout} // 180);
	my $done = delete $opt{done};
	my $retry = delete $opt{retry} // 1;
	delete $opt{timeout};
	while (1)
	{
		my ($ok, $out, $err) = try_psql($node, $sql, %opt, timeout => 120);
		return $out if $ok;
		die "psql_across_crash: $sql\nfailed: $err\n" unless crash_lost($err) && time < $deadline;
		note("the connection was lost (a crash restart): waiting for the server");
		defined wait_crash_recovery($node, undef, $deadline - time > 10 ? $deadline - time : 10)
		  or die "psql_across_crash: the server did not come back: $err\n";
		return '' unless $retry;
		next unless defined $done;
		my $there = q1($node, $done, 60, %opt);
		die "psql_across_crash: the done check failed: $done\n" unless defined $there;
		return '' if $there eq 't';
	}
}

# stream_has_sql($stream, $where): SQL printing 't' when an event of
# $stream satisfies $where (on e.payload, e.key, ...), among the first
# 100,000 of each partition: the done check of an append run through
# psql_across_crash
sub stream_has_sql
{
	my ($stream, $where) = @_;
	return qq{SELECT EXISTS (SELECT 1 FROM streamguard.stream_partitions p,
	LATERAL streamguard.read('$stream', p.partition, 0, 100000) e
	WHERE p.stream = '$stream' AND ($where))};
}

# ================================================================== reports

# pipelines_report($node): the pipelines view as text, for diag
sub pipelines_report
{
	my ($node) = @_;
	my ($ok, $out, $err) = try_psql($node, q{
SELECT pipeline, state, guarantee, worker_pid, batches, events_in, rows_out, lag_events,
	   restarts, skipped, dead_letters, epoch, left(coalesce(last_error, ''), 200)
FROM streamguard.pipelines ORDER BY pipeline});
	return $ok ? $out : "(pipelines view unavailable: $err)";
}

# remote_status_report($node): the remote_status view as text, for diag
sub remote_status_report
{
	my ($node) = @_;
	my ($ok, $out, $err) = try_psql($node, q{
SELECT pipeline, side, server, connected, round(rtt_ms::numeric, 2), prepared_pending,
	   left(coalesce(last_error, ''), 200)
FROM streamguard.remote_status ORDER BY pipeline, side});
	return $ok ? $out : "(remote_status unavailable: $err)";
}

# state_diag($node, %opt): the pipelines view in diag, and with remote => 1
# the remote_status view too: what a test shows at its end
sub state_diag
{
	my ($node, %opt) = @_;
	diag("pipelines:\n" . pipelines_report($node));
	diag("remote_status:\n" . remote_status_report($node)) if $opt{remote};
}

# remote_pids($remote, $app): the pids of the client backends on $remote
# whose application_name is $app (the sessions serving a pipeline)
sub remote_pids
{
	my ($remote, $app) = @_;
	my ($ok, $out) = try_psql($remote, qq{
SELECT pid FROM pg_stat_activity
WHERE application_name = '$app' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
ORDER BY pid}, timeout => 20);
	return () unless $ok;
	return grep { /^\d+$/ } split /\n/, $out;
}

# ================================================================ producers
#
# The producers of the crash matrices: forked processes, one psql session
# per transaction (so they reconnect after every crash), each transaction
# "SELECT produce(n, producer, single)" then COMMIT or, at random,
# ROLLBACK.  produce() (producer_sql) records the ids it appends in table
# `produced` in the same transaction, so `produced` is exactly the set of
# committed events; the ids of rolled-back transactions are written to a
# file, and stop_producers loads them into table `aborted`.

# run_knobs($prefix, %defaults): the size of a randomised run from the
# environment, ${prefix}_SEED, ${prefix}_MIN_EVENTS and ${prefix}_ROUNDS
# (defaults: seed, min_events, rounds).  Seeds rand (srand) and says them
# in diag.  Returns ($seed, $min_events, $rounds).
sub run_knobs
{
	my ($prefix, %d) = @_;
	my $seed = $ENV{"${prefix}_SEED"} // $d{seed};
	my $min_events = $ENV{"${prefix}_MIN_EVENTS"} // $d{min_events};
	my $rounds = $ENV{"${prefix}_ROUNDS"} // $d{rounds};
	srand($seed);
	diag("seed $seed, at least $min_events committed events, $rounds round(s) of faults");
	return ($seed, $min_events, $rounds);
}

# producer_sql($stream, %opt): SQL creating sequence ev_id, tables produced
# (id, producer, customer, amount) and aborted (id), and function
# produce(n int, producer int, single boolean) RETURNS text: n events
# {"id": N} appended to $stream with append_batch (single: one append per
# event), keyed $prefix || N % $mod; returns the ids, comma-separated.  The
# ids are sg_test.id_base + 1 .. n when that is set (the producers set it),
# else from sequence ev_id.
#   key_prefix => ('k'), key_mod => (64)
#   amounts => 1: each event also gets an "amount" (0.01 to 1000.00), kept
#              in produced.amount
sub producer_sql
{
	my ($stream, %opt) = @_;
	my $key = "'" . ($opt{key_prefix} // 'k') . "' || (id % " . ($opt{key_mod} // 64) . ')';
	my $amount = $opt{amounts} ? '(1 + floor(random() * 100000)) / 100' : 'NULL::numeric';
	my $payload = $opt{amounts}
	  ? sub { "jsonb_build_object('id', ids[$_[0]], 'amount', amts[$_[0]])" }
	  : sub { "jsonb_build_object('id', ids[$_[0]])" };
	return qq{
CREATE SEQUENCE ev_id;
-- exactly the committed events (written in the producer's transaction)
CREATE TABLE produced (id bigint PRIMARY KEY, producer int NOT NULL, customer text NOT NULL, amount numeric);
-- ids of rolled-back producer transactions (loaded at the end)
CREATE TABLE aborted (id bigint PRIMARY KEY);
CREATE FUNCTION produce(n int, producer int, single boolean) RETURNS text
LANGUAGE plpgsql AS \$produce\$
DECLARE
	ids bigint[];
	amts numeric[];
	keys text[];
	i int;
BEGIN
	SELECT array_agg(id ORDER BY id), array_agg(amt ORDER BY id), array_agg($key ORDER BY id)
	  INTO ids, amts, keys
	  FROM (SELECT coalesce(nullif(current_setting('sg_test.id_base', true), '')::bigint + g,
							nextval('ev_id')) AS id, $amount AS amt
			  FROM generate_series(1, n) g) s;
	INSERT INTO produced (id, producer, customer, amount)
	SELECT u.id, produce.producer, u.c, u.a FROM unnest(ids, keys, amts) AS u(id, c, a);
	IF single THEN
		FOR i IN 1 .. n LOOP
			PERFORM streamguard.append('$stream', @{[ $payload->('i') ]}, key => keys[i]);
		END LOOP;
	ELSE
		PERFORM count(*) FROM streamguard.append_batch('$stream',
			ARRAY(SELECT @{[ $payload->('k') ]} FROM generate_subscripts(ids, 1) AS k ORDER BY k),
			keys);
	END IF;
	RETURN array_to_string(ids, ',');
END \$produce\$;
};
}

# start_producers($node, %opt): fork the producers; returns the harness.
#   count  => how many (2)
#   seed   => producer p calls srand(seed * 10 + p)
#   name   => the harness's directory, tmp_check/<name>_work, holds the
#             stop file, the aborted ids and the statistics (created;
#             $h->{dir})
#   batch  => [min, max] events of an append_batch transaction
#   single => [min, max] events of a one-append-per-event transaction
#   single_share => share of those (0.1)
#   abort  => share of rolled-back transactions
#   pause_us => [base, spread]: microseconds between two transactions,
#             base + a random part below spread
# Each transaction's psql call is bounded (120 s); after a failed one (the
# server went away: its outcome is unknown, `produced` decides) a producer
# waits 0.2 s.
sub start_producers
{
	my ($node, %opt) = @_;
	my $h = { node => $node, %opt, pids => [] };
	$h->{dir} = "${PostgreSQL::Test::Utils::tmp_check}/$opt{name}_work";
	$h->{count} //= 2;
	$h->{single_share} //= 0.1;
	my $dir = $h->{dir};
	mkdir $dir;
	unlink "$dir/stop";
	for my $pno (1 .. $h->{count})
	{
		my $pid = fork();
		die "fork failed: $!" unless defined $pid;
		_producer_main($h, $pno) if $pid == 0;
		push @{ $h->{pids} }, $pid;
	}
	diag("producers started: pids @{ $h->{pids} }");
	return $h;
}

sub _producer_main
{
	my ($h, $pno) = @_;
	my $dir = $h->{dir};
	srand($h->{seed} * 10 + $pno);
	my %st = (commits => 0, aborts => 0, failures => 0, events => 0, aborted_events => 0);
	my $next_id = 0;
	open(my $af, '>', "$dir/aborted.$pno") or POSIX::_exit(2);
	while (!-e "$dir/stop")
	{
		my $single = rand() < $h->{single_share} ? 1 : 0;
		my ($lo, $hi) = @{ $single ? $h->{single} : $h->{batch} };
		my $n = $lo + int(rand($hi - $lo + 1));
		my $abort = rand() < $h->{abort};
		# ids from the producer's own counter: a sequence can hand out the
		# ids of a rolled-back transaction again after a crash (its advance
		# was never flushed), which would make them look delivered
		my $sql = "BEGIN;\nSET LOCAL sg_test.id_base = " . ($pno * 1_000_000_000_000 + $next_id) . ";\n"
		  . "SELECT produce($n, $pno, " . ($single ? 'true' : 'false') . ");\n"
		  . ($abort ? 'ROLLBACK' : 'COMMIT') . ";\n";
		$next_id += $n;
		my ($ok, $out) = try_psql($h->{node}, $sql, timeout => 120);
		if ($ok && $out =~ /^\d+(,\d+)*$/)
		{
			if ($abort)
			{
				print $af join("\n", split(/,/, $out)), "\n";
				$st{aborts}++;
				$st{aborted_events} += $n;
			}
			else
			{
				$st{commits}++;
				$st{events} += $n;
			}
		}
		else
		{
			$st{failures}++;
			usleep(200_000);
		}
		usleep($h->{pause_us}[0] + int(rand($h->{pause_us}[1])));
	}
	close $af;
	open(my $sf, '>', "$dir/stats.$pno") or POSIX::_exit(2);
	print $sf join(' ', map { "$_=$st{$_}" } sort keys %st), "\n";
	close $sf;
	POSIX::_exit(0);
}

# producers_wait_for($h, $min, %opt): let the producers run until at least
# $min events are committed (table produced) or timeout seconds (180)
# have passed, after at least settle seconds (0).  Returns the count (diag).
sub producers_wait_for
{
	my ($h, $min, %opt) = @_;
	sleep $opt{settle} if $opt{settle};
	wait_for_value($h->{node}, "SELECT count(*) >= $min FROM produced", 't', $opt{timeout} // 180);
	my $c = q1($h->{node}, 'SELECT count(*) FROM produced', 60) // '?';
	diag("committed events when stopping the producers: $c");
	return $c;
}

# stop_producers($h): stop the producers (each finishes its transaction;
# one still running after 150 s is killed), load the ids of their
# rolled-back transactions into table aborted, and return their summed
# statistics: { commits, aborts, failures, events, aborted_events }.
sub stop_producers
{
	my ($h) = @_;
	my $dir = $h->{dir};
	open(my $sfh, '>', "$dir/stop") or die "cannot write $dir/stop: $!";
	close $sfh;
	my $deadline = time + 150;
	my %left = map { $_ => 1 } @{ $h->{pids} };
	while (%left && time < $deadline)
	{
		for my $pid (keys %left)
		{
			delete $left{$pid} if waitpid($pid, POSIX::WNOHANG()) == $pid;
		}
		usleep(100_000);
	}
	for my $pid (keys %left)
	{
		diag("producer $pid did not stop; killing it");
		kill 'TERM', $pid;
		waitpid($pid, 0);
	}
	my %stats;
	open(my $all, '>', "$dir/aborted.all") or die "cannot write $dir/aborted.all: $!";
	for my $pno (1 .. $h->{count})
	{
		print $all slurp_file("$dir/aborted.$pno") if -e "$dir/aborted.$pno";
		my $line = -e "$dir/stats.$pno" ? slurp_file("$dir/stats.$pno") : '';
		for my $kv (split /\s+/, $line)
		{
			my ($k, $v) = split /=/, $kv;
			$stats{$k} += $v if defined $v;
		}
	}
	close $all;
	chmod 0644, "$dir/aborted.all";
	$h->{node}->safe_psql('postgres', "COPY aborted FROM '$dir/aborted.all'");
	return \%stats;
}

# producer_ids($node): ({id => 1} of the committed events, {id => 1} of the
# rolled-back ones), from tables produced and aborted
sub producer_ids
{
	my ($node) = @_;
	return map { { map { $_ => 1 } split /\n/, $node->safe_psql('postgres', "SELECT id FROM $_") } }
	  qw(produced aborted);
}

# copy_stream($node, $stream, %opt): read all of $stream with a fresh
# consumer 'verify' into a new table streamed (partition int, seq bigint,
# id bigint: the payload's id), 100000 events per try, until a try finds
# none (bounded: 120 s).
#   columns => more columns of streamed ("customer text, amount numeric"),
#   values  => the expressions that fill them ("key, (payload->>'amount')::numeric")
sub copy_stream
{
	my ($node, $stream, %opt) = @_;
	my ($cols, $vals) = map { defined $_ ? ", $_" : '' } @opt{qw(columns values)};
	$node->safe_psql('postgres', "CREATE TABLE streamed (partition int, seq bigint, id bigint$cols)");
	return wait_for_value($node, qq{
WITH ins AS (
  INSERT INTO streamed
  SELECT partition, seq, (payload->>'id')::bigint$vals
  FROM streamguard.poll('$stream', 'verify', 100000) RETURNING 1)
SELECT count(*) FROM ins}, '0', 120);
}

# streamed_positions($node, $where): { id => "partition:seq" } of the rows
# of table streamed (copy_stream) that match $where ('true')
sub streamed_positions
{
	my ($node, $where) = @_;
	my %pos;
	for my $l (split /\n/, $node->safe_psql('postgres',
		"SELECT id, partition || ':' || seq FROM streamed WHERE " . ($where // 'true')))
	{
		my ($id, $ps) = split /\|/, $l;
		$pos{$id} = $ps;
	}
	return %pos;
}

# producers_summary($stats, $committed, $aborted): diag of the events
# committed and rolled back ($committed, $aborted: counted in the tables)
# and of the producers' transactions ($stats from stop_producers)
sub producers_summary
{
	my ($st, $committed, $aborted) = @_;
	diag(sprintf("events: %d committed, %d in rolled-back transactions; "
		  . "producer txns: %d committed, %d rolled back, %d broken by faults",
		$committed, $aborted, $st->{commits} // 0, $st->{aborts} // 0, $st->{failures} // 0));
}

# =================================================================== faults
#
# A fault plan is a list of [kind, \&function, args...]; run_fault_plan
# shuffles it and calls function($fx, kind, args...) for each entry, one
# after the other.  A fault function returns 1 when the fault happened and
# everything recovered, 0 when it did not happen (nothing to recover), -1
# when a server or a pipeline did not recover (the plan stops there).  It
# counts what it tried in $fx->{armed}{kind} and what happened in
# $fx->{fired}{kind}; fault_summary prints both.

# backends stopped with SIGSTOP by fault_stall_remote: always continued
my %stopped;
END { kill 'CONT', $_ for keys %stopped; }

# fault_context($node, \@pipes, %opt): the state of a fault plan against
# $node, whose pipelines @pipes must run again after each fault.
#   remote => the remote server (for the fault_*_remote functions)
sub fault_context
{
	my ($node, $pipes, %opt) = @_;
	return { node => $node, pipes => $pipes, remote => $opt{remote},
		armed => {}, fired => {}, stall_moved => [] };
}

# fault_wait_pipelines($fx, $kind): every pipeline of the plan runs again
# with a worker within 180 s (1), or 0 with the pipelines view in diag
sub fault_wait_pipelines
{
	my ($fx, $kind) = @_;
	return 1 if wait_pipelines_running($fx->{node}, $fx->{pipes}, 180);
	diag("$kind: pipelines not all running again:\n" . pipelines_report($fx->{node}));
	return 0;
}

# fault_fired($fx, $kind, $crash_offset): count the fault as fired; when
# it crashed the node (log offset $crash_offset given) wait for the
# recovery (wait_crash_recovery, 180 s); then for the pipelines
# (fault_wait_pipelines).  1, or -1 (diag) when either did not come.
sub fault_fired
{
	my ($fx, $kind, $crash_offset) = @_;
	$fx->{fired}{$kind}++;
	if (defined $crash_offset && !defined wait_crash_recovery($fx->{node}, $crash_offset))
	{
		diag("$kind: server did not come back");
		return -1;
	}
	return fault_wait_pipelines($fx, $kind) ? 1 : -1;
}

# fault_inject($fx, $kind, $pipe, $point, $action, $times): arm
# inject_fault($pipe, $point, $action ('kill'), $times (1)) and wait up to
# 45 s until the log shows it fired $times times (if it did not fire at all
# it is disarmed: 0); after a kill wait for the crash recovery; then for
# the pipelines.
sub fault_inject
{
	my ($fx, $kind, $pipe, $point, $action, $times) = @_;
	$action //= 'kill';
	$times //= 1;
	my $node = $fx->{node};
	my $off = log_offset($node);
	$fx->{armed}{$kind}++;
	return -1
	  unless defined q1($node,
		"SELECT streamguard.inject_fault('$pipe', '$point', '$action', $times)", 60);
	my $re =
	    $action eq 'kill' ? qr/pipeline "$pipe": injected fault, killing the worker/
	  : $action eq 'exit' ? qr/pipeline "$pipe": injected fault, exiting/
	  :                     qr/pipeline "$pipe": batch failed \(attempt \d+\): injected fault in pipeline "$pipe"/;
	if (!defined wait_log($node, qr/(?:$re.*?){$times}/s, $off, 45))
	{
		my $seen = count_log($node, $re, $off);
		diag("$kind: fired $seen of $times times within 45 s; disarming");
		q1($node, "SELECT streamguard.inject_fault('$pipe', 'none')", 60);
		return 0 if $seen == 0;
	}
	return fault_fired($fx, $kind, $action eq 'kill' ? $off : undef);
}

# fault_remote_restart($fx, $kind, $mode): restart the remote, 'fast' or
# 'immediate' (then down for up to 1 s); then wait for the pipelines
sub fault_remote_restart
{
	my ($fx, $kind, $mode) = @_;
	my $remote = $fx->{remote};
	$fx->{armed}{$kind}++;
	if ($mode eq 'fast')
	{
		$remote->restart;
	}
	else
	{
		$remote->stop('immediate');
		usleep(int(rand(1_000_000)));
		$remote->start;
	}
	return fault_fired($fx, $kind);
}

# fault_terminate_remote($fx, $kind, $app): pg_terminate_backend of the
# remote sessions whose application_name is $app, as soon as there is one
# (within 20 s); then wait for the pipelines
sub fault_terminate_remote
{
	my ($fx, $kind, $app) = @_;
	$fx->{armed}{$kind}++;
	$fx->{fired}{$kind}++
	  if wait_for_value($fx->{remote}, qq{
SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity
WHERE application_name = '$app' AND backend_type = 'client backend'}, 't', 20);
	return fault_wait_pipelines($fx, $kind) ? 1 : -1;
}

# fault_stall_remote($fx, $kind, $app, $secs): SIGSTOP the remote sessions
# of $app for $secs seconds (longer than streamguard.remote_timeout: the
# worker must give up on them and go on in a new session), then SIGCONT.
# When a new session of $app appeared meanwhile, after how long (or
# 'never') is pushed to $fx->{stall_moved}.
sub fault_stall_remote
{
	my ($fx, $kind, $app, $secs) = @_;
	my $remote = $fx->{remote};
	$fx->{armed}{$kind}++;
	my $t_find = time;
	my $deadline = $t_find + 20;
	my @pids;
	while (time < $deadline && !(@pids = remote_pids($remote, $app)))
	{
		usleep(100_000);
	}
	if (!@pids)
	{
		diag("$kind: no remote session of $app");
		return 0;
	}
	my %old = map { $_ => 1 } @pids;
	for my $pid (@pids)
	{
		$stopped{$pid} = 1;
		kill 'STOP', $pid;
	}
	my $t0 = time;
	my $moved;
	while (time < $t0 + $secs)
	{
		$moved = time - $t0 if !defined $moved && grep { !$old{$_} } remote_pids($remote, $app);
		usleep(100_000);
	}
	# the worker never moved on: what the stopped sessions were doing (their
	# entries in pg_stat_activity need nothing of the stopped backends)
	my $doing;
	(undef, $doing) = try_psql($remote, qq{SELECT string_agg(pid || ' ' || state || ' ' || coalesce(wait_event, '-')
		|| ' ' || left(query, 60), '; ') FROM pg_stat_activity WHERE pid IN (} . join(',', @pids) . ')', timeout => 20)
	  unless defined $moved;
	for my $pid (@pids)
	{
		kill 'CONT', $pid;
		delete $stopped{$pid};
	}
	push @{ $fx->{stall_moved} }, defined $moved ? sprintf('%.1f', $moved) : 'never';
	note("$kind: a new session after " . ($moved // 'never'));
	diag(sprintf("$kind: no new session; the stopped one(s), found after %.1f s: %s", $t0 - $t_find, $doing // '?'))
	  unless defined $moved;
	return fault_fired($fx, $kind);
}

# fault_stalls_ok($fx, $name): one check that the plan stalled a remote
# backend at least once and that each time the worker went on in a new
# session (when, in diag otherwise)
sub fault_stalls_ok
{
	my ($fx, $name) = @_;
	my @moved = @{ $fx->{stall_moved} };
	ok(@moved && !grep({ $_ eq 'never' } @moved), $name) or diag("new session after: @moved");
	return @moved;
}

# run_fault_plan($fx, \@plan, %opt): the plan repeated rounds times,
# shuffled (Fisher-Yates with rand: srand decides), the middle entry (if
# any) put in the middle, then each fault after a random pause.  Stops at
# the first fault that leaves something unhealthy (the pipelines view in
# diag).  Returns ($healthy, $seconds).
#   rounds => (1), middle => [kind, \&function, args...],
#   gap_us => [base, spread] microseconds before each fault
#             ([300_000, 1_000_000]),
#   t_start => when the test started (for the notes)
sub run_fault_plan
{
	my ($fx, $plan, %opt) = @_;
	my @plan = (@$plan) x ($opt{rounds} // 1);
	my $gap = $opt{gap_us} // [ 300_000, 1_000_000 ];
	for (my $i = $#plan; $i > 0; $i--)
	{
		my $j = int(rand($i + 1));
		@plan[ $i, $j ] = @plan[ $j, $i ];
	}
	splice(@plan, int(@plan / 2), 0, $opt{middle}) if $opt{middle};
	my $t0 = time;
	my $t_start = $opt{t_start} // $t0;
	my ($healthy, $n) = (1, 0);
	for my $f (@plan)
	{
		my ($kind, $fn, @args) = @$f;
		usleep($gap->[0] + int(rand($gap->[1])));    # let events flow
		$n++;
		my $r = $fn->($fx, $kind, @args);
		note(sprintf("fault %d/%d %s -> %s (%.0f s)", $n, scalar @plan, $kind, $r, time - $t_start));
		if ($r < 0)
		{
			$healthy = 0;
			diag("fault $kind left a server or the pipelines unhealthy; stopping the fault loop");
			diag(pipelines_report($fx->{node}));
			last;
		}
	}
	return ($healthy, time - $t0);
}

# fault_summary($fx): diag of what fired of what was armed, by kind
sub fault_summary
{
	my ($fx) = @_;
	my @kinds = sort keys %{ $fx->{armed} };
	my $w = 0;
	$w = length > $w ? length : $w for @kinds;
	diag("faults fired/armed by kind:");
	diag(sprintf("  %-*s %d/%d", $w, $_, $fx->{fired}{$_} // 0, $fx->{armed}{$_})) for @kinds;
}

# ==================================================================== proxy
#
# A TCP proxy in front of a server, to model a network that delays a
# client's message: it forwards bytes both ways, except that once armed
# (proxy_hold) the first client->server chunk that matches a Perl regex is
# held, with everything that client sends after it (Terminate included),
# even after the client closed its end; the server side of that
# connection stays open, idle, as a real server would be while the message
# is delayed.  proxy_release delivers what was held, in order (so the
# server executes the delayed statement then), and proxy_stop ends the
# proxy.  $dir/log records what happened.  Control goes through files in
# $dir: hold (the regex), release, exit.

# start_proxy($target_port, $dir): listen on 127.0.0.1 (a free port),
# forward to $target_port there.  Returns ($port, $pid); the proxy is a
# forked child, ended by proxy_stop.
sub start_proxy
{
	my ($target_port, $dir) = @_;
	require IO::Socket::INET;
	require IO::Select;
	mkdir $dir;
	unlink "$dir/$_" for qw(hold release exit log);
	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Listen    => 32,
		Proto     => 'tcp',
		ReuseAddr => 1) or die "proxy: cannot listen: $!";
	my $port = $listen->sockport;
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	return ($port, $pid) if $pid;

	# child
	my $log = sub {
		if (open(my $fh, '>>', "$dir/log"))
		{
			printf $fh "%.3f %s\n", time, $_[0];
			close $fh;
		}
	};
	my @conns;    # { c, s, held, holding, c_eof }
	my $sel = sub {
		my $s = IO::Select->new($listen);
		for my $k (@conns)
		{
			$s->add($k->{c}) if $k->{c} && !$k->{c_eof};
			$s->add($k->{s}) if $k->{s};
		}
		return $s;
	};
	my $drop = sub {
		my ($k) = @_;
		close $k->{c} if $k->{c};
		close $k->{s} if $k->{s};
		$k->{c} = $k->{s} = undef;
	};
	while (!-e "$dir/exit")
	{
		if (-e "$dir/release")
		{
			for my $k (grep { $_->{holding} && $_->{s} } @conns)
			{
				$log->(sprintf('release %d bytes', length $k->{held}));
				syswrite($k->{s}, $k->{held});
				$k->{held} = '';
				$k->{holding} = 0;
				if ($k->{c_eof})
				{
					# the client is gone: just let the server answer and end
					$k->{orphan} = 1;
				}
			}
			unlink "$dir/release";
		}
		my @ready = $sel->()->can_read(0.05);
		for my $fh (@ready)
		{
			if ($fh == $listen)
			{
				my $c = $listen->accept or next;
				my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $target_port, Proto => 'tcp');
				if (!$s)
				{
					close $c;
					next;
				}
				push @conns, { c => $c, s => $s, held => '', holding => 0, c_eof => 0 };
				next;
			}
			my ($k) = grep { ($_->{c} && $_->{c} == $fh) || ($_->{s} && $_->{s} == $fh) } @conns;
			next unless $k;
			my $buf = '';
			my $n = sysread($fh, $buf, 65536);
			if ($k->{c} && $fh == $k->{c})
			{
				if (!$n)
				{
					$k->{c_eof} = 1;
					close $k->{c};
					$k->{c} = undef;
					$drop->($k) unless $k->{holding};
					next;
				}
				if ($k->{holding})
				{
					$k->{held} .= $buf;
					next;
				}
				if (-s "$dir/hold")
				{
					my $re = slurp_file("$dir/hold");
					chomp $re;
					if ($buf =~ /$re/)
					{
						unlink "$dir/hold";
						$k->{holding} = 1;
						$k->{held} = $buf;
						$log->("hold [$re]");
						next;
					}
				}
				syswrite($k->{s}, $buf);
			}
			else
			{
				if (!$n)
				{
					$log->('server closed an orphan connection') if $k->{orphan};
					$drop->($k);
					next;
				}
				syswrite($k->{c}, $buf) if $k->{c};
			}
		}
		@conns = grep { $_->{c} || $_->{s} } @conns;
	}
	POSIX::_exit(0);
}

# proxy_hold($dir, $re): arm the proxy: hold the next client message
# matching the Perl regex $re (a string)
sub proxy_hold
{
	my ($dir, $re) = @_;
	open(my $fh, '>', "$dir/hold.tmp") or die "cannot write $dir/hold.tmp: $!";
	print $fh "$re\n";
	close $fh;
	rename "$dir/hold.tmp", "$dir/hold";
}

# proxy_held($dir): wait (up to 30 s) until the proxy holds a message: 1 or 0
sub proxy_held
{
	my ($dir) = @_;
	my $deadline = time + 30;
	while (time < $deadline)
	{
		return 1 if -e "$dir/log" && slurp_file("$dir/log") =~ /hold/;
		usleep(100_000);
	}
	return 0;
}

# proxy_release($dir): deliver what the proxy holds (waits up to 10 s for
# the proxy to take the order)
sub proxy_release
{
	my ($dir) = @_;
	open(my $fh, '>', "$dir/release") or die "cannot write $dir/release: $!";
	close $fh;
	my $deadline = time + 10;
	usleep(50_000) while -e "$dir/release" && time < $deadline;
}

# proxy_stop($dir, $pid): end the proxy and reap it
sub proxy_stop
{
	my ($dir, $pid) = @_;
	open(my $fh, '>', "$dir/exit") or die "cannot write $dir/exit: $!";
	close $fh;
	waitpid($pid, 0);
}

# ================================================================= security
#
# The attack suite (10x_security_*.pl; docs/security.md) gives an attacker
# a toolkit of "evil" look-alikes of built-in operators and functions, and
# checks that none of them ever ran as anyone but the attacker.
#
# The toolkit, installed by an ordinary role into a schema it controls:
#   <schema>.evil_calls (who, what)   every call of a hook, by current_user
#                                     (INSERT granted to PUBLIC, so a call
#                                     by any role is recorded);
#   <schema>.evil_hook(what)          records the call; when the caller is
#                                     not the attacker it also tries to
#                                     escalate: ALTER ROLE <attacker>
#                                     SUPERUSER, GRANT
#                                     pg_execute_server_program TO
#                                     <attacker>, CREATE TABLE
#                                     public.pwned_<tag> (the attacker
#                                     itself has no CREATE on public);
#   operators =, <, >, <=, >=, <> (where a built-in exists), +, - on
#   int4, int8, text (=, <, >, ||) and timestamptz, and the functions
#   now(), clock_timestamp(), unnest(text[]), unnest(bigint[]) — each calls
#   the hook and then returns what the built-in would, so that nothing
#   visibly breaks when they are picked up.
# A statement resolves these instead of pg_catalog's only when the schema
# comes before pg_catalog in its search_path (listed explicitly): exactly
# what a pinned search_path or OPERATOR(pg_catalog.x) prevents.
#
# Every session of the test's own superuser on a database whose settings
# were poisoned pins its search_path first (sec_pin, sec_val, sec_wait),
# so the test never trips the traps itself.

# sec_pin(): the prefix for the test's own superuser SQL on a poisoned
# database
sub sec_pin { return "SET search_path = pg_catalog, pg_temp;\n" }

# sec_val($node, $sql, %opt): one value, as the superuser, search_path
# pinned; undef (diag) on failure
sub sec_val
{
	my ($node, $sql, %opt) = @_;
	my ($ok, $out, $err) = try_psql($node, sec_pin() . $sql, %opt);
	diag("query failed: $sql\n$err") unless $ok;
	return $ok ? $out : undef;
}

# sec_wait($node, $sql, $expected, $timeout, %opt): wait_for_value with
# the polling sessions' search_path pinned
sub sec_wait
{
	my ($node, $sql, $expected, $timeout, %opt) = @_;
	return wait_for_value($node, $sql, $expected, $timeout, %opt,
		pgoptions => '-c search_path=pg_catalog,pg_temp');
}

# sec_bootstrap_name($node): the name of the bootstrap superuser
sub sec_bootstrap_name
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT rolname FROM pg_catalog.pg_roles WHERE oid = 10');
}

# sec_make_attacker($node, $role, %opt): an ordinary login role that may
# create schemas in dbname (postgres) and create streams
sub sec_make_attacker
{
	my ($node, $role, %opt) = @_;
	my $db = $opt{dbname} // 'postgres';
	$node->safe_psql($db, sec_pin() . qq{
CREATE ROLE $role LOGIN;
GRANT CREATE ON DATABASE $db TO $role;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO $role;
});
}

# sec_evil_sql(role => , schema => , tag => ): the toolkit as SQL (run it as
# the attacker; the schema must exist and be the attacker's)
sub sec_evil_sql
{
	my (%o) = @_;
	my ($r, $s, $t) = @o{qw(role schema tag)};
	my $sql = qq{
CREATE TABLE $s.evil_calls (who name NOT NULL, what text NOT NULL, PRIMARY KEY (who, what));
GRANT USAGE ON SCHEMA $s TO PUBLIC;
GRANT SELECT, INSERT ON $s.evil_calls TO PUBLIC;
CREATE FUNCTION $s.evil_hook(what text) RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN
	BEGIN
		INSERT INTO $s.evil_calls VALUES (current_user, what) ON CONFLICT DO NOTHING;
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	IF current_user OPERATOR(pg_catalog.<>) '$r' THEN
		BEGIN EXECUTE 'ALTER ROLE $r SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END;
		BEGIN EXECUTE 'GRANT pg_execute_server_program TO $r'; EXCEPTION WHEN OTHERS THEN NULL; END;
		BEGIN EXECUTE 'CREATE TABLE IF NOT EXISTS public.pwned_$t (who name DEFAULT current_user)';
		EXCEPTION WHEN OTHERS THEN NULL; END;
		BEGIN EXECUTE 'INSERT INTO public.pwned_$t DEFAULT VALUES'; EXCEPTION WHEN OTHERS THEN NULL; END;
	END IF;
END \$f\$;
};
	# [type, operator, built-in function, result]
	my @ops;
	for my $type (qw(int4 int8))
	{
		push @ops, map { [ $type, $_->[0], "$type$_->[1]", 'bool' ] }
		  [ '=', 'eq' ], [ '<', 'lt' ], [ '>', 'gt' ], [ '<=', 'le' ], [ '>=', 'ge' ], [ '<>', 'ne' ];
		push @ops, [ $type, '+', "${type}pl", $type ], [ $type, '-', "${type}mi", $type ];
	}
	push @ops, [ 'text', '=', 'texteq', 'bool' ], [ 'text', '<', 'text_lt', 'bool' ],
	  [ 'text', '>', 'text_gt', 'bool' ], [ 'text', '||', 'textcat', 'text' ];
	push @ops, map { [ 'timestamptz', $_->[0], "timestamptz_$_->[1]", 'bool' ] }
	  [ '=', 'eq' ], [ '<', 'lt' ], [ '>', 'gt' ], [ '<=', 'le' ], [ '>=', 'ge' ];
	for my $o (@ops)
	{
		my ($type, $op, $fn, $ret) = @$o;
		$sql .= qq{
CREATE FUNCTION $s.evil_$fn(a $type, b $type) RETURNS $ret LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('$op($type)'); RETURN pg_catalog.$fn(a, b); END \$f\$;
CREATE OPERATOR $s.$op (LEFTARG = $type, RIGHTARG = $type, FUNCTION = $s.evil_$fn);
};
	}
	# [name, arguments, result, call of the built-in]
	for my $f ([ 'now', '', 'timestamptz', 'RETURN pg_catalog.now()' ],
		[ 'clock_timestamp', '', 'timestamptz', 'RETURN pg_catalog.clock_timestamp()' ],
		[ 'unnest', 'text[]', 'SETOF text', 'RETURN QUERY SELECT pg_catalog.unnest(a)' ],
		[ 'unnest', 'bigint[]', 'SETOF bigint', 'RETURN QUERY SELECT pg_catalog.unnest(a)' ])
	{
		my ($name, $arg, $ret, $body) = @$f;
		$sql .= qq{
CREATE FUNCTION $s.$name(@{[ $arg ? "a $arg" : '' ]}) RETURNS $ret LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('$name($arg)'); $body; END \$f\$;
};
	}
	return $sql;
}

# sec_install_evil($node, role => , schema => , tag => , dbname => ):
# install the toolkit as role into schema (created unless it exists), and
# check that it is live: a session of the attacker with the schema before
# pg_catalog resolves it (two checks)
sub sec_install_evil
{
	my ($node, %o) = @_;
	my $db = $o{dbname} // 'postgres';
	expect_ok($node,
		($o{schema} eq 'public' ? '' : "CREATE SCHEMA IF NOT EXISTS $o{schema};\n") . sec_evil_sql(%o),
		"$o{tag}: $o{role} installs look-alike operators and functions in schema $o{schema}",
		user => $o{role}, dbname => $db);
	my ($ok, $out, $err) = try_psql($node, qq{
SET search_path = $o{schema}, pg_catalog;
SELECT 1 = 1, now() IS NOT NULL;
SELECT count(*) > 0 FROM $o{schema}.evil_calls WHERE who = current_user;
DELETE FROM $o{schema}.evil_calls;}, user => $o{role}, dbname => $db);
	is((split /\n/, $out)[-1] // '', 't', "$o{tag}: the look-alikes are live for a search_path that puts $o{schema} first")
	  or diag("$out $err");
}

# sec_assert_no_escalation($node, role => , schema => , tag => , dbname => ,
# name => , memberships => ): the attacker gained nothing (four checks):
# not a superuser, no role membership beyond memberships (0), no
# pwned_<tag> table, no look-alike called by another role.  Returns the
# other roles' calls ('' when none).
sub sec_assert_no_escalation
{
	my ($node, %o) = @_;
	my ($r, $s, $t) = @o{qw(role schema tag)};
	my $db = $o{dbname} // 'postgres';
	my $name = $o{name} // $t;
	is(sec_val($node, qq{SELECT rolsuper FROM pg_roles WHERE rolname = '$r'}, dbname => $db),
		'f', "$name: $r is not a superuser");
	is( sec_val($node, qq{SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member
		WHERE r.rolname = '$r'}, dbname => $db),
		$o{memberships} // 0, "$name: $r was granted no role");
	is( sec_val($node, qq{SELECT coalesce(string_agg(c.oid::regclass::text || ' owned by '
		|| pg_get_userbyid(c.relowner), ', '), '') FROM pg_class c WHERE c.relname = 'pwned_$t'}, dbname => $db),
		'', "$name: no pwned_$t table was created");
	my $callers = sec_val($node, qq{SELECT coalesce(string_agg(who || ' called ' || what, ', ' ORDER BY who, what), '')
		FROM $s.evil_calls WHERE who <> '$r'}, dbname => $db);
	is($callers, '', "$name: no look-alike of $r ran as another role");
	return $callers;
}

1;
