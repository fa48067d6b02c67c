#!/usr/bin/perl
#
# streamguard benchmark suite (`make bench`).  See docs/benchmarks.md.
#
# Starts a throwaway PostgreSQL cluster (PostgreSQL::Test::Cluster: fresh
# initdb in a temp dir, unix socket + 127.0.0.1), measures streamguard against
# raw PostgreSQL and PgQ in ONE run, prints a results table and writes it to
# bench-results/latest.md.  Only the clusters and the processes this script
# starts are stopped, by pid; every wait is bounded.
#
# Assumes the extension is built and installed (`make install`).  If it is not
# (or a streamguard call fails), the raw PostgreSQL and PgQ contenders still
# run and the streamguard rows are reported as "pending" / "error".
#
# The pgbench scripts are test/bench/sql/*.sql, parameterised by -D variables;
# the machinery shared by the benchmarks (knobs, child processes, pgbench
# runs, round-robin slices, statistics) is test/bench/Bench.pm.
#
# Environment knobs (docs/benchmarks.md has the table):
#   BENCH_SECONDS=15         duration of each timed pgbench / COPY run
#   BENCH_REPEAT=3           repeats per contender; the median is reported
#   BENCH_SLICES=3           benchmarks 1 and 2 run each contender's BENCH_SECONDS in this
#                            many slices, round-robin over the contenders
#   BENCH_CLIENTS=8          clients of the single-event benchmark (-j 2)
#   BENCH_BATCH_CLIENTS=2    clients of the 1,000-events-per-transaction benchmark
#   BENCH_DRAIN_EVENTS=500000  events pre-filled for the drain benchmark (multiple of 1000)
#   BENCH_DRAIN_PASSES=3     drain passes over that backlog per kind and repeat
#   BENCH_PIPELINE_TIMEOUT=300  seconds a pipeline may take to drain the backlog
#   BENCH_LAT_SECONDS=20     latency benchmark: producer run per contender
#   BENCH_LAT_RATE=1000      latency benchmark: events/s of the producer (pgbench -R)
#   BENCH_LAT_CLIENTS=4      latency benchmark: producer clients (same for every contender)
#   BENCH_LAT_POLL_MS=10     latency benchmark: sleep of the PgQ / naive consumers when idle
#   BENCH_REMOTE_EVENTS=300000  remote benchmark: events drained per contender (multiple of 1000)
#   BENCH_LONG_EVENTS=10000000  long run: events appended (multiple of 1000 x BENCH_LONG_CLIENTS)
#   BENCH_LONG_CLIENTS=2     long run: concurrent append_batch producers
#   BENCH_LONG_RETENTION="10 seconds"  long run: retention of its stream (none: no retention)
#   BENCH_WINDOW_EVENTS=200000  windows benchmark: events aggregated per contender (multiple of 2000)
#   BENCH_GROUP_EVENTS=2000000  consumer group benchmark: events drained per group size
#   BENCH_START_EVENTS=500000  start benchmark: backlog waiting when a pipeline is created
#   BENCH_LP_SECONDS=10      long-poll benchmark: producer run per contender (BENCH_LAT_RATE events/s)
#   BENCH_LP_IDLE=3          long-poll benchmark: idle seconds before the producer, CPU measured
#   BENCH_ONLY="single batch drain latency longpoll remote parallel start group windows long"  subset of benchmarks to run
#   BENCH_OUT=<repo>/bench-results   where latest.md is written
#   BENCH_SHARED_BUFFERS=512MB  shared_buffers of the bench server(s)
#   BENCH_KEEP=0             1 keeps the temp dir (clusters, logs, scripts) for inspection
#   BENCH_NICE=              nice value for everything the suite starts (negative: root only)
#   PG_CONFIG=pg_config      selects the PostgreSQL installation (PG 15)
#
# Run as root (the server work is re-executed as the `postgres` OS user via
# runuser) or as an unprivileged user that can run PostgreSQL.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use Bench;

# Started by a user (no --inner): prepare a temp dir, re-run this script there
# as the cluster's OS user, publish the results, clean up and exit.  This runs
# before the test modules below load: they redirect STDOUT and STDERR to a log
# file and create directories as soon as they are loaded.
BEGIN { Bench::outer($0) unless ($ARGV[0] // '') eq '--inner' }

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();
use Time::HiRes qw(time sleep);
use POSIX qw(strftime);
use File::Path qw(make_path);

my $WORK = $ARGV[1];
Bench::inner_setup($WORK, "$FindBin::RealBin/sql");
my $PKGLIB   = Bench::pg_config($ENV{PG_CONFIG}, '--pkglibdir');
my $SHAREDIR = Bench::pg_config($ENV{PG_CONFIG}, '--sharedir');
my $USER     = getpwuid($<);
my %have;   # which contenders can run: sg (the extension), pipe (its pipelines), pgq

# ---------------------------------------------------------------------------
# Clusters
# ---------------------------------------------------------------------------

# A bench cluster: the settings below first put the test settings of
# PostgreSQL::Test::Cluster (fsync off, every statement logged, wal_level
# minimal, ...) back to PostgreSQL's defaults.  Returns the started node (with a
# database "bench"), or nothing.
sub start_cluster
{
	my ($name, @extra_conf) = @_;
	my $preload = $have{sg_lib} ? 'streamguard' : '';
	for my $try (1 .. 3)   # a failed start may be a port race: a new node, a new port
	{
		my $node = PostgreSQL::Test::Cluster->new($try == 1 ? $name : "${name}_$try");
		$node->init(extra => [ '-E', 'UTF8', '--no-locale', '--auth-local=trust', '--auth-host=scram-sha-256' ]);
		$node->append_conf('postgresql.conf', <<"EOF" . join("\n", @extra_conf));
# --- streamguard benchmark cluster (2-core box) ---
fsync = on
log_statement = none
wal_level = replica
max_wal_senders = 10
restart_after_crash = on
log_line_prefix = '%m [%p] '
log_replication_commands = off
wal_retrieve_retry_interval = '5s'
listen_addresses = '127.0.0.1'
shared_preload_libraries = '$preload'
max_connections = 40
shared_buffers = $K{BENCH_SHARED_BUFFERS}
synchronous_commit = on
max_wal_size = 4GB
checkpoint_timeout = 15min
log_min_messages = warning
log_checkpoints = on
log_autovacuum_min_duration = 0
# latency benchmark: commit times of the append and of the sink transaction
track_commit_timestamp = on
EOF
		next unless $node->start(fail_ok => 1);
		$node->safe_psql('postgres', 'CREATE DATABASE bench');
		log_msg("$name server up on port ", $node->port, ' (socket dir ', $node->host, "), preload='$preload'");
		return $node;
	}
	return;
}

# Which contenders can run, and their helper functions.
sub setup_contenders
{
	$have{sg_lib} = -f "$PKGLIB/streamguard.so" && -f "$SHAREDIR/extension/streamguard.control";
	$NODE = start_cluster('bench') or die "bench: could not start the server (see $PostgreSQL::Test::Utils::log_path)\n";
	@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER PGAPPNAME PGOPTIONS)} =
	  ($NODE->host, $NODE->port, 'bench', $USER, 'streamguard-bench', '-c client_min_messages=warning');
	if (!$have{sg_lib})
	{
		log_msg("streamguard is not installed ($PKGLIB/streamguard.so missing): its rows will be pending");
	}
	else
	{
		my ($ok, undef, $err) = sql_try('CREATE EXTENSION streamguard');
		$have{sg} = $ok;
		log_msg("CREATE EXTENSION streamguard failed: $err") unless $ok;
	}
	if ($have{sg} && sql("SELECT to_regproc('streamguard.create_pipeline') IS NOT NULL") eq 't')
	{
		my ($ok, undef, $err) = sql_try(slurp("$SQL/setup_pipeline.sql"));
		$have{pipe} = $ok;
		log_msg("could not create the pipeline wait procedure: $err") unless $ok;
	}
	log_msg('streamguard pipelines not available: their rows will be pending') unless $have{pipe};
	$have{pgq} = -f "$SHAREDIR/extension/pgq.control" && (sql_try('CREATE EXTENSION pgq'))[0];
	log_msg('PgQ not available: its rows will be pending') unless $have{pgq};
	sql_try(slurp("$SQL/setup.sql"));
	return;
}

# ---------------------------------------------------------------------------
# Small SQL steps shared by the benchmarks
# ---------------------------------------------------------------------------

# the event columns of a stream segment; $pk: its primary key
sub raw_table_ddl
{
	my ($t, $pk) = @_;
	return "DROP TABLE IF EXISTS $t;
CREATE TABLE $t (
    partition   int         NOT NULL,
    seq         bigserial,
    key         text,
    payload     jsonb       NOT NULL,
    dedup_key   text,
    appended_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (" . ($pk // 'partition, seq') . "));\n";
}

# a sink: the event columns + processed_at = start of the writing transaction
sub sink_ddl
{
	my ($t) = @_;
	return "DROP TABLE IF EXISTS $t; CREATE TABLE $t (partition int, seq bigint, key text, payload jsonb, processed_at timestamptz DEFAULT now());\n";
}

sub create_stream
{
	my ($name, $parts, %o) = @_;
	my ($ok, undef, $err) = sql_try("SELECT streamguard.create_stream('$name', $parts)", %o);
	log_msg("create_stream $name: $err") unless $ok;
	return $ok;
}
sub drop_stream { my ($name, %o) = @_; sql_try("SELECT streamguard.drop_stream('$name', force => true)", %o); return; }
sub stream_events
{
	my ($name, %o) = @_;
	return sql_value("SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = '$name'", %o) // '?';
}

# creates a pipeline (batch_size 1000); returns '' or the error
sub create_pipeline
{
	my ($name, $stream, $sql, %opt) = @_;
	my $args = join('', map { ", $_ => " . q_lit($opt{$_}) } sort keys %opt);
	my ($ok, undef, $err) =
	  sql_try("SELECT streamguard.create_pipeline('$name', '$stream', " . q_lit($sql) . ", batch_size => 1000$args)");
	return $ok ? '' : error_line($err);
}
sub drop_pipeline { my ($name) = @_; sql_try("SELECT streamguard.drop_pipeline('$name')"); return; }

# waits until the pipeline consumed $n events of $stream; returns '' or the error
sub wait_pipeline
{
	my ($stream, $name, $n, $timeout) = @_;
	my ($ok, undef, $err) =
	  sql_try("CALL bench_wait_pipeline('$stream', '$name', $n, $timeout)", timeout => $timeout + 60);
	return $ok ? '' : error_line($err);
}

# the pid of the pipeline's worker once it runs (30 s at most), or undef
sub wait_worker
{
	my ($name) = @_;
	my $pid;
	wait_until(30, 0.1,
		sub { $pid = sql("SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = '$name' AND state = 'running'"); $pid ne '' });
	return $pid ne '' ? $pid : undef;
}

# waits until <count SQL> reaches $n; returns '' or why not (timeout, failed pipeline)
sub wait_count
{
	my ($count_sql, $n, $timeout, $pipeline, %o) = @_;
	my ($c, $st) = (0, '');
	return '' if wait_until($timeout, 0.2, sub {
		$c = sql_value($count_sql, %o) // 0;
		return 1 if $c >= $n;
		$st = sql_value("SELECT state || ': ' || coalesce(last_error, '') FROM streamguard.pipelines WHERE pipeline = '$pipeline'") // '';
		return $st =~ /^failed/;
	});
	my ($state, $error) = split /: /, $st, 2;
	return substr($st =~ /^failed/
		? "pipeline failed after $c of $n rows: " . ($error // '')
		: "$c of $n rows after $timeout s (state " . ($state // '') . ($error // '') . ')', 0, 200);
}

# rows, distinct (partition, seq), time span and rows of all batches but the
# last of a pipeline-written sink: every batch's rows carry the start of its
# transaction, so early / span is the drain rate without the worker's start-up
sub sink_stats
{
	my ($t, %o) = @_;
	my %s;
	@s{qw(rows distinct span early)} = split /\|/, sql(
		"SELECT count(*), count(DISTINCT (partition, seq)), coalesce(extract(epoch FROM max(processed_at) - min(processed_at)), 0),
		        count(*) FILTER (WHERE processed_at < (SELECT max(processed_at) FROM $t)) FROM $t", %o);
	$s{rate} = sprintf('%.1f', $s{early} / $s{span}) if $s{span} > 0;
	return \%s;
}

# the first "ERROR: ..." (or FATAL) of psql's stderr, 160 characters at most
sub error_line
{
	my ($err) = @_;
	my ($line) = ($err // '') =~ /((?:ERROR|FATAL):.*)/;
	return substr($line // (split /\n/, $err // '')[-1] // 'failed', 0, 160);
}

# the segment tables of a stream as one SELECT of (partition, seq, key, payload)
sub segment_select
{
	my ($stream) = @_;
	return sql("SELECT string_agg(format('SELECT partition, seq, key, payload FROM streamguard_data.%I', 's' || g.stream_id || '_' || g.seg),
	                               ' UNION ALL ' ORDER BY g.seg)
	            FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$stream'");
}

sub fail_all { my ($keys, $v, $note) = @_; for (@$keys) { add_val($_, $v); add_note($_, $note) if $note } return; }

# ---------------------------------------------------------------------------
# Contenders of the sliced benchmarks (1 and 2): a fresh stream or queue per
# repeat, or the row is marked pending (not installed) / error (not created).
# ---------------------------------------------------------------------------
sub raw_contender
{
	my ($label, $script, $per) = @_;
	return { label => $label, tag => 'raw', script => $script, vars => {}, per => $per };
}

sub stream_contender
{
	my ($b, $label, $tag, $stream, $parts, $script, $per) = @_;
	return add_val("$b|$label", 'PENDING') unless $have{sg};
	return fail_all([ "$b|$label" ], 'ERR', 'create_stream failed') unless create_stream($stream, $parts);
	return { label => $label, tag => $tag, script => $script, vars => { stream => $stream }, per => $per, stream => $stream };
}

sub queue_contender
{
	my ($b, $label, $queue, $script, $per) = @_;
	return add_val("$b|$label", 'PENDING') unless $have{pgq};
	return fail_all([ "$b|$label" ], 'ERR', 'create_queue failed') unless (sql_try("SELECT pgq.create_queue('$queue')"))[0];
	return { label => $label, tag => 'pgq', script => $script, vars => { queue => $queue }, per => $per, queue => $queue };
}

# after a sliced run: each stream must hold exactly the events its clients
# committed; then the streams and queues are dropped
sub finish_contenders
{
	my ($b, $tot, @contenders) = @_;
	for my $x (@contenders)
	{
		if ($x->{stream})
		{
			my $t = $tot->{ $x->{label} };
			if (!$t->{bad} && defined $t->{n})
			{
				my $stored = stream_events($x->{stream});
				add_note("$b|$x->{label}", "check failed: stream holds $stored events, clients committed $t->{n}")
				  if $stored ne $t->{n};
			}
			drop_stream($x->{stream});
		}
		sql_try("SELECT pgq.drop_queue('$x->{queue}', true)") if $x->{queue};
	}
	return;
}

# ---------------------------------------------------------------------------
# 1. single-event appends: BENCH_CLIENTS clients (-j 2), one event per transaction
# ---------------------------------------------------------------------------
my %S1 = (
	raw => 'plain INSERT (baseline)',
	sg1 => 'streamguard.append, 1 partition',
	sg4 => 'streamguard.append, 4 partitions',
	pgq => 'PgQ pgq.insert_event',);

sub bench_single
{
	my ($r) = @_;
	sql(raw_table_ddl('raw_events'));
	my @c = grep { defined } (
		raw_contender($S1{raw}, 'append_single_raw.sql', 1),
		stream_contender('single', $S1{sg1}, 'sg1', "s1p1r$r", 1, 'append_single_sg.sql', 1),
		stream_contender('single', $S1{sg4}, 'sg4', "s1p4r$r", 4, 'append_single_sg.sql', 1),
		queue_contender('single', $S1{pgq}, "q1r$r", 'append_single_pgq.sql', 1));

	my $tot = run_sliced('single', $r, \@c, -c => $K{BENCH_CLIENTS}, -j => 2);

	sql('DROP TABLE raw_events');
	finish_contenders('single', $tot, @c);
	return;
}

# ---------------------------------------------------------------------------
# 2. batched appends, 1,000 events per transaction, BENCH_BATCH_CLIENTS clients
# ---------------------------------------------------------------------------
my %S2 = (
	raw  => 'INSERT ... SELECT (baseline)',
	copy => 'COPY (raw PostgreSQL)',
	sg   => 'streamguard.append_batch, 4 partitions',
	pgq  => 'PgQ 1,000 x pgq.insert_event',);
my $COPY_BLOCKS = "$WORK/copy_blocks.sql";

sub bench_batch
{
	my ($r) = @_;
	sql(raw_table_ddl('raw_events') . raw_table_ddl('raw_copy'));
	make_copy_blocks() unless -f $COPY_BLOCKS;
	my @c = grep { defined } (
		raw_contender($S2{raw}, 'append_batch_raw.sql', 1000),
		{ label => $S2{copy}, tag => 'copy', copy => \&copy_slice },
		stream_contender('batch', $S2{sg}, 'sg', "s2r$r", 4, 'append_batch_sg.sql', 1000),
		queue_contender('batch', $S2{pgq}, "q2r$r", 'append_batch_pgq.sql', 1000));

	my $tot = run_sliced('batch', $r, \@c, -c => $K{BENCH_BATCH_CLIENTS}, -j => $K{BENCH_BATCH_CLIENTS});

	sql('DROP TABLE raw_events; DROP TABLE raw_copy');
	finish_contenders('batch', $tot, @c);
	return;
}

# COPY: pgbench cannot COPY, so each client is a psql session fed an endless
# stream of "COPY raw_copy ... FROM STDIN" blocks of 1,000 rows (one
# transaction each), stopped after the slice (timeout -s TERM); returns
# (committed rows, wall time)
sub copy_slice
{
	my ($secs, $logname) = @_;
	my $log = "$LOGS/$logname.log";
	my $before = sql('SELECT count(*) FROM raw_copy');
	my $t0 = time;
	my @pids = map {
		spawn([ '/bin/sh', '-c', 'while :; do cat "$1" || exit 0; done | timeout -s TERM "$2" "$3" -X -q -v ON_ERROR_STOP=1 -f - >/dev/null',
				'copy', $COPY_BLOCKS, $secs, "$BIN/psql" ], $log, append => 1)
	} 1 .. $K{BENCH_BATCH_CLIENTS};
	reap($_, $secs + 60) for @pids;
	my $t1 = time;
	if (slurp($log) =~ /^(.*ERROR.*)$/m) { log_msg("COPY: $1"); return; }
	return (sql('SELECT count(*) FROM raw_copy') - $before, sprintf('%.6f', $t1 - $t0));
}

# 20 COPY blocks of 1,000 rows each (sql/copy_block.sql), made once
sub make_copy_blocks
{
	spurt($COPY_BLOCKS, map { ("COPY raw_copy (partition, key, payload) FROM STDIN;\n", sql(slurp("$SQL/copy_block.sql")), "\n\\.\n") } 1 .. 20);
	return;
}

# ---------------------------------------------------------------------------
# 3. drain: every contender is pre-filled with BENCH_DRAIN_EVENTS events
#    (1,000 per transaction; 4 partitions), then VACUUM ANALYZE + CHECKPOINT.
#    Then ONE client drains the whole backlog in transactions of (up to) 1,000
#    events, one statement per batch, with a fresh consumer per pass:
#    "drain"      the batch is only read and acknowledged (count(*) of the batch);
#    "drain→sink" each batch is also inserted into a sink table in the same
#                 transaction (the drain shape of the target).
#    Pipelines drain the same backlog into a sink inside the server.
#    BENCH_DRAIN_PASSES passes of each kind, contenders interleaved pass by
#    pass (raw, streamguard, its pipelines, PgQ, raw, ...) so that load bursts
#    hit them alike; events/s of a repeat = events drained in all its passes /
#    their time.  Pre-fill, VACUUM ANALYZE and CHECKPOINT are not timed.
# ---------------------------------------------------------------------------
my %S3 = (
	raw  => 'raw bound: seq-range SELECT + position UPDATE',
	sg   => 'streamguard.poll, 4 partitions',
	pgq  => 'PgQ next_batch/get_batch_events/finish_batch',
	peo  => 'streamguard pipeline, exactly_once',
	palo => 'streamguard pipeline, at_least_once',);
my ($D1, $D2) = ('drain', 'drain→sink');
my $NBATCH = $K{BENCH_DRAIN_EVENTS} / 1000;

sub bench_drain
{
	my ($r) = @_;
	my @consumers = map { ("cnt$_", "snk$_") } 1 .. $K{BENCH_DRAIN_PASSES};
	my %acc;   # "kind|contender" => { ev => events drained, t => seconds, bad => 1 }
	my @c = grep { defined } (drain_raw(\%acc, $r, @consumers), drain_sg(\%acc, $r), drain_pgq(\%acc, $r, @consumers));
	sql('VACUUM ANALYZE');
	checkpoint();

	for my $consumer (@consumers)
	{
		my $kind = $consumer =~ /^snk/ ? $D2 : $D1;
		for my $x (@c)
		{
			drain_pass(\%acc, $kind, $x, $consumer, $r);
			next unless $x->{pipelines} && $kind eq $D2;
			pipeline_pass(\%acc, $S3{peo}, 'exactly_once', "peo_$consumer", 'sink_peo', $x->{vars}{stream});
			pipeline_pass(\%acc, $S3{palo}, 'at_least_once', "palo_$consumer", 'sink_palo', $x->{vars}{stream});
		}
	}
	check_sink(\%acc, $_) for @c;

	my %missing = (sg => !$have{sg}, pgq => !$have{pgq}, peo => !$have{pipe}, palo => !$have{pipe});
	for my $kind ($D1, $D2)
	{
		for my $who (qw(raw sg peo palo pgq))
		{
			next if $kind eq $D1 && $who =~ /^p.*o$/;
			my $a = $acc{"$kind|$S3{$who}"} // {};
			add_val("$kind|$S3{$who}",
				  $missing{$who} ? 'PENDING'
				: $a->{bad} || !defined $a->{ev} ? 'ERR'
				: sprintf('%.1f', $a->{ev} / $a->{t}));
		}
	}
	sql_try('DROP TABLE IF EXISTS raw_events, raw_drain_pos, sink_raw, sink_sg, sink_peo, sink_palo, sink_pgq');
	drop_stream("s3r$r") if $have{sg};
	sql_try("SELECT pgq.drop_queue('q3r$r', true)") if $have{pgq};
	return;
}

# a contender that could not be prepared: both kinds fail, with a note
sub drain_failed
{
	my ($acc, $label, $note) = @_;
	$acc->{"$_|$label"}{bad} = 1 for $D1, $D2;
	add_note("$D1|$label", $note);
	return;
}

# raw: an outbox table with a global seq (PK), one position row per consumer
sub drain_raw
{
	my ($acc, $r, @consumers) = @_;
	sql(raw_table_ddl('raw_events', 'seq')
		  . "DROP TABLE IF EXISTS raw_drain_pos; CREATE TABLE raw_drain_pos (consumer text PRIMARY KEY, seq bigint NOT NULL);
		     INSERT INTO raw_drain_pos SELECT c, 0 FROM unnest('{" . join(',', @consumers) . "}'::text[]) AS c;\n"
		  . sink_ddl('sink_raw'));
	return drain_failed($acc, $S3{raw}, 'prefill failed') unless prefill("prefill_raw_r$r", 'append_batch_raw.sql', {}, $NBATCH);
	my $pos = sub { "(SELECT seq FROM raw_drain_pos WHERE consumer = '$_[0]')" };
	return {
		label    => $S3{raw}, tag => 'raw', vars => {}, sink => 'sink_raw',
		scripts  => [ 'drain_raw.sql', 'drain_raw_sink.sql' ],
		consumed => sub { 'SELECT count(*) FROM raw_events WHERE seq <= ' . $pos->($_[0]) },
		left     => sub { 'SELECT count(*) FROM raw_events WHERE seq > ' . $pos->($_[0]) } };
}

# streamguard: poll, and the pipelines on the same stream
sub drain_sg
{
	my ($acc, $r) = @_;
	return unless $have{sg};
	my $st = "s3r$r";
	return drain_failed($acc, $S3{sg}, 'create_stream failed') unless create_stream($st, 4);
	sql(sink_ddl('sink_sg') . ($have{pipe} ? sink_ddl('sink_peo') . sink_ddl('sink_palo') : ''));
	return drain_failed($acc, $S3{sg}, 'prefill failed')
	  unless prefill("prefill_sg_r$r", 'append_batch_sg.sql', { stream => $st }, $NBATCH);
	my $n = stream_events($st);
	add_note("$D1|$S3{sg}", "pre-fill: stream reports $n events, expected $K{BENCH_DRAIN_EVENTS}") if $n ne $K{BENCH_DRAIN_EVENTS};
	return {
		label    => $S3{sg}, tag => 'sg', vars => { stream => $st }, sink => 'sink_sg', pipelines => $have{pipe},
		scripts  => [ 'drain_poll.sql', 'drain_poll_sink.sql' ],
		consumed => sub { "SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = '$st' AND consumer = '$_[0]'" },
		# what is left: read (and roll back) up to 100k remaining events
		left => sub { "BEGIN; SELECT count(*) FROM streamguard.poll('$st', '$_[0]', 100000); ROLLBACK;" } };
}

# PgQ: ticks every 1,000 events during pre-fill (ticker_max_count = 1000 and a
# pgq.ticker() call after each 1,000-event transaction), so batches hold 1,000 events
sub drain_pgq
{
	my ($acc, $r, @consumers) = @_;
	return unless $have{pgq};
	my $q = "q3r$r";
	sql("SELECT pgq.create_queue('$q'); SELECT pgq.set_queue_config('$q', 'ticker_max_count', '1000');
	     SELECT pgq.register_consumer('$q', c) FROM unnest('{" . join(',', @consumers) . "}'::text[]) AS c;\n" . sink_ddl('sink_pgq'));
	return drain_failed($acc, $S3{pgq}, 'prefill failed')
	  unless prefill("prefill_pgq_r$r", 'append_batch_pgq_tick.sql', { queue => $q }, $NBATCH, 'one client');
	sql("SELECT pgq.ticker('$q')");
	my $info = sub { "FROM pgq.get_consumer_info('$q', '$_[0]')" };
	return {
		label    => $S3{pgq}, tag => 'pgq', vars => { queue => $q }, sink => 'sink_pgq',
		scripts  => [ 'drain_pgq.sql', 'drain_pgq_sink.sql' ],
		consumed => sub { "SELECT $K{BENCH_DRAIN_EVENTS} - coalesce(pending_events, 0) " . $info->($_[0]) },
		left     => sub { 'SELECT coalesce(pending_events, 0) ' . $info->($_[0]) } };
}

# One pass: pgbench, NBATCH transactions of one client.  The events consumed
# (positions) + the events left must equal the pre-fill.
sub drain_pass
{
	my ($acc, $kind, $x, $consumer, $r) = @_;
	my $key = "$kind|$x->{label}";
	my $a = $acc->{$key} //= {};
	return if $a->{bad};
	checkpoint();
	my $run = pgbench("drain_$x->{tag}_${consumer}_r$r", $x->{scripts}[ $kind eq $D2 ? 1 : 0 ],
		{ %{ $x->{vars} }, consumer => $consumer }, -c => 1, -j => 1, -t => $NBATCH);
	return $a->{bad} = 1 unless $run;
	my $done = sql_value($x->{consumed}->($consumer)) // '';
	my ($left) = reverse grep { /^[0-9]+$/ } split /\n/, sql_value($x->{left}->($consumer)) // '';
	if ($done !~ /^[0-9]+$/ || !defined $left)
	{
		$a->{bad} = 1;
		return add_note($key, 'could not count consumed/remaining events');
	}
	my $n = $K{BENCH_DRAIN_EVENTS};
	if ($done + $left != $n)
	{
		$a->{bad} = 1;
		return add_note($key, "accounting mismatch: consumed $done + left $left != $n");
	}
	add_note($key, "short batches: a pass drained $done of $n in $NBATCH transactions") if $left;
	add_time($a, ev => $done, $NBATCH / $run->{tps});
	return;
}

# A pipeline drains the backlog in the background (SQL "INSERT INTO sink ...
# FROM batch"); it is timed from the sink (sink_stats).
sub pipeline_pass
{
	my ($acc, $label, $guarantee, $name, $sink, $stream) = @_;
	my $key = "$D2|$label";
	my $a = $acc->{$key} //= {};
	return if $a->{bad};
	sql("TRUNCATE $sink");
	checkpoint();
	my $err = create_pipeline($name, $stream,
		"INSERT INTO $sink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch", guarantee => $guarantee);
	$err = "create_pipeline failed: $err" if $err;
	$err ||= wait_pipeline($stream, $name, $K{BENCH_DRAIN_EVENTS}, $K{BENCH_PIPELINE_TIMEOUT});
	drop_pipeline($name);
	my $s = $err ? undef : sink_stats($sink);
	$err ||= "sink holds $s->{rows} rows after the pipeline consumed $K{BENCH_DRAIN_EVENTS}" if $s && $s->{rows} != $K{BENCH_DRAIN_EVENTS};
	$err ||= 'a single batch: cannot time it (raise BENCH_DRAIN_EVENTS)' if $s && !($s->{span} > 0);
	if ($err) { $a->{bad} = 1; return add_note($key, $err); }
	add_time($a, ev => $s->{early}, $s->{span});
	return;
}

# sink rows must match what the sink passes consumed
sub check_sink
{
	my ($acc, $x) = @_;
	my $a = $acc->{"$D2|$x->{label}"} // {};
	return if $a->{bad} || !defined $a->{ev};
	my $rows = sql_value("SELECT count(*) FROM $x->{sink}") // '?';
	return if $rows eq $a->{ev};
	$a->{bad} = 1;
	add_note("$D2|$x->{label}", "sink holds $rows rows, consumers consumed $a->{ev}");
	return;
}

# ---------------------------------------------------------------------------
# 4. end-to-end latency (append commit -> sink commit) at BENCH_LAT_RATE
#    events/s for BENCH_LAT_SECONDS per contender.  The producer is pgbench -R
#    (Poisson arrivals) with BENCH_LAT_CLIENTS clients, one event per
#    transaction, every event carrying a unique id (a sequence) in its payload;
#    the same producer for every contender.  Each delivered event becomes a sink
#    row (id, clock_timestamp()).  Latency = commit time of the sink row's
#    transaction - commit time of the event's transaction, both read with
#    pg_xact_commit_timestamp(xmin) (track_commit_timestamp = on): commit to
#    commit, on the server's clock, no client involved.
#    Contender order rotates from repeat to repeat.
# ---------------------------------------------------------------------------
my %S4 = (
	sg  => 'streamguard pipeline, exactly_once',
	pgq => 'PgQ: pgqd defaults + consumer loop',
	raw => 'naive "id > last" poller, plain table',);
my ($LAT_SETUP, %LAT, %LAT_NOTE);   # "contender|field" => per-repeat values (p50 p99 max min appended delivered lost dup rate batches); notes
my ($PGQD) = grep { -x } map { "$_/pgqd" } split /:/, $ENV{PATH};

sub bench_latency
{
	my ($r) = @_;
	sql(slurp("$SQL/setup_latency.sql")) unless $LAT_SETUP++;
	my @contenders = grep { defined } (
		$have{pipe} ? \&latency_sg  : lat_fail($S4{sg},  'PENDING'),
		$have{pgq}  ? \&latency_pgq : lat_fail($S4{pgq}, 'PENDING'),
		\&latency_raw);
	$_->($r) for rotated($r - 1, @contenders);
	sql_try('DROP TABLE IF EXISTS lat_sink_sg, lat_sink_pgq');
	return;
}

# streamguard: an exactly_once pipeline (batch_size 1000) into the sink, its
# worker running before the producer starts; the event's xmin is read from the
# stream's segment tables
sub latency_sg
{
	my ($r) = @_;
	my ($c, $st, $pn) = ($S4{sg}, "lat_r$r", "lat_p_r$r");
	sql('DROP TABLE IF EXISTS lat_sink_sg; CREATE TABLE lat_sink_sg (id bigint, at timestamptz)');
	return lat_fail($c, 'ERR', 'create_stream failed') unless create_stream($st, 4);
	my $err = create_pipeline($pn, $st,
		q{INSERT INTO lat_sink_sg (id, at) SELECT (payload->>'id')::bigint, clock_timestamp() FROM batch}, guarantee => 'exactly_once');
	$err = $err ? "create_pipeline failed: $err" : wait_worker($pn) ? '' : "the pipeline's worker did not start";
	my $produced = $err ? undef : latency_produce("lat_sg_r$r", 'latency_sg.sql', { stream => $st });
	$err ||= 'producer failed' unless defined $produced;
	if ($err) { drop_stream($st); return lat_fail($c, 'ERR', $err); }
	$err = wait_pipeline($st, $pn, $produced, 60);
	note_to(\%LAT_NOTE, $c, $err) if $err;
	push @{ $LAT{"$c|batches"} }, sql("SELECT batches FROM streamguard.pipelines WHERE pipeline = '$pn'");
	drop_pipeline($pn);
	latency_record($c, "bench_sg_events('$st')", 'lat_sink_sg', $produced);
	drop_stream($st);
	return;
}

# PgQ as its users run it: pgqd with its default settings (ticker_period 1 s;
# queue defaults ticker_max_count 500, ticker_max_lag 3 s) and one consumer
# looping next_batch / get_batch_events / INSERT into the sink / finish_batch,
# one transaction per batch, sleeping BENCH_LAT_POLL_MS when there is no batch
sub latency_pgq
{
	my ($r) = @_;
	my ($c, $q) = ($S4{pgq}, "lat_q_r$r");
	return lat_fail($c, 'PENDING', 'pgqd not installed') unless $PGQD;
	sql("SELECT pgq.create_queue('$q'); SELECT pgq.register_consumer('$q', 'lat');
	     DROP TABLE IF EXISTS lat_sink_pgq; CREATE TABLE lat_sink_pgq (id bigint, at timestamptz);
	     DELETE FROM bench_lat_ctl WHERE name = 'lat'; INSERT INTO bench_lat_ctl VALUES ('lat', NULL)");
	# pgqd with its defaults; only where to connect, log and keep its pid file are set
	spurt("$WORK/pgqd.ini", "[pgqd]\nlogfile = $LOGS/pgqd.log\npidfile = $WORK/pgqd.pid\n",
		"base_connstr = host=$ENV{PGHOST} port=$ENV{PGPORT} user=$USER\ninitial_database = bench\ndatabase_list = bench\n");
	my $pgqd = spawn([ $PGQD, "$WORK/pgqd.ini" ], "$LOGS/pgqd.out", append => 1);
	my $consumer = background_call("CALL bench_pgq_consume('$q', 'lat', $K{BENCH_LAT_POLL_MS}, "
		  . ($K{BENCH_LAT_SECONDS} + 120) . ')', "lat_pgq_consumer_r$r");
	sleep 2;
	my $produced = -1;
	if (!alive($pgqd))
	{
		lat_fail($c, 'ERR', 'pgqd did not start: ' . (split /\n/, slurp("$LOGS/pgqd.out"))[-1]);
		stop_pid($consumer);
	}
	else
	{
		$produced = latency_produce("lat_pgq_r$r", 'latency_pgq.sql', { queue => $q }) // lat_fail($c, 'ERR', 'producer failed') // -1;
		sql("UPDATE bench_lat_ctl SET stop_at = $produced WHERE name = 'lat'");
		background_done($c, $consumer, "lat_pgq_consumer_r$r");
	}
	my $ticks = sql_value("SELECT count(*) FROM pgq.tick t JOIN pgq.queue q ON q.queue_id = t.tick_queue WHERE q.queue_name = '$q'") // '?';
	stop_pid($pgqd, 'INT');
	if ($produced >= 0)
	{
		push @{ $LAT{"$c|batches"} }, $ticks;
		latency_record($c, "bench_pgq_events('$q')", 'lat_sink_pgq', $produced);
	}
	sql_try("SELECT pgq.drop_queue('$q', true)");
	return;
}

# naive "id > last" poller on a plain table (bigserial id, the position saved
# in a table in the same transaction as the sink rows), sleeping
# BENCH_LAT_POLL_MS when it finds nothing.  Concurrent producers commit out of
# id order, so it skips events: they are counted as lost.
sub latency_raw
{
	my ($r) = @_;
	my $c = $S4{raw};
	sql("DROP TABLE IF EXISTS lat_raw, lat_raw_pos, lat_sink_raw;
	     CREATE TABLE lat_raw (id bigserial PRIMARY KEY, key text, payload jsonb NOT NULL);
	     CREATE TABLE lat_raw_pos (seq bigint NOT NULL); INSERT INTO lat_raw_pos VALUES (0);
	     CREATE TABLE lat_sink_raw (id bigint, at timestamptz);
	     DELETE FROM bench_lat_ctl WHERE name = 'naive'; INSERT INTO bench_lat_ctl VALUES ('naive', NULL)");
	my $consumer = background_call("CALL bench_naive_consume($K{BENCH_LAT_POLL_MS}, " . ($K{BENCH_LAT_SECONDS} + 120) . ')',
		"lat_raw_consumer_r$r");
	sleep 1;
	my $produced = latency_produce("lat_raw_r$r", 'latency_raw.sql', {});
	lat_fail($c, 'ERR', 'producer failed') unless defined $produced;
	sql("UPDATE bench_lat_ctl SET stop_at = 0 WHERE name = 'naive'");
	background_done($c, $consumer, "lat_raw_consumer_r$r");
	latency_record($c, "(SELECT (payload->>'id')::bigint AS ev_id, pg_xact_commit_timestamp(xmin) AS ev_commit FROM lat_raw) AS ev",
		'lat_sink_raw', $produced)
	  if defined $produced;
	sql_try('DROP TABLE lat_raw, lat_raw_pos, lat_sink_raw');
	return;
}

# a latency result that is not a number (PENDING, ERR), with a note; returns undef
sub lat_fail
{
	my ($c, $v, $note) = @_;
	push @{ $LAT{"$c|p50"} }, $v;
	note_to(\%LAT_NOTE, $c, $note) if $note;
	return;
}

# a consumer loop: one psql CALL in the background; returns its pid
sub background_call
{
	my ($call, $logname) = @_;
	return spawn([ "$BIN/psql", '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-c', $call ], "$LOGS/$logname.log");
}

# waits for a consumer loop to end (its procedure gives up after
# BENCH_LAT_SECONDS + 120 s); notes its error
sub background_done
{
	my ($c, $pid, $logname) = @_;
	my $rc = reap($pid, $K{BENCH_LAT_SECONDS} + 180);
	note_to(\%LAT_NOTE, $c, 'consumer: ' . error_line(slurp("$LOGS/$logname.log"))) unless defined $rc && $rc == 0;
	return;
}

# the producer: pgbench -R; returns the number of committed events
sub latency_produce
{
	my ($name, $script, $vars) = @_;
	checkpoint();
	my $res = pgbench($name, $script, $vars, -c => $K{BENCH_LAT_CLIENTS}, -j => ($K{BENCH_LAT_CLIENTS} < 2 ? 1 : 2),
		-R => $K{BENCH_LAT_RATE}, -T => $K{BENCH_LAT_SECONDS}) or return;
	return $res->{processed};
}

# latency statistics of one contender: <events source (SQL relation with
# ev_id, ev_commit)> <sink table> <events committed by the producer>
sub latency_record
{
	my ($c, $src, $sink, $produced) = @_;
	my ($ok, $out, $err) = sql_try(
		"WITH e AS (SELECT * FROM $src),
		      s AS (SELECT id, pg_xact_commit_timestamp(xmin) AS c FROM $sink),
		      j AS (SELECT extract(epoch FROM s.c - e.ev_commit) * 1000 AS ms FROM s JOIN e ON e.ev_id = s.id)
		 SELECT (SELECT count(*) FROM e), (SELECT count(DISTINCT ev_id) FROM e),
		        (SELECT count(*) FROM s), (SELECT count(DISTINCT id) FROM s),
		        (SELECT count(*) FROM e WHERE ev_commit IS NULL),
		        round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
		        round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3),
		        round(max(ms)::numeric, 3), round(min(ms)::numeric, 3), count(*)
		 FROM j");
	return lat_fail($c, 'ERR', 'statistics query failed') unless $ok;
	my ($n_ev, $n_ev_d, $n_sink, $n_sink_d, $n_nots, $p50, $p99, $mx, $mn, $matched) = split /\|/, $out, -1;
	note_to(\%LAT_NOTE, $c, "the source holds $n_ev events, the producer committed $produced") if $n_ev != $produced;
	note_to(\%LAT_NOTE, $c, "$n_nots events without a commit timestamp") if $n_nots != 0;
	note_to(\%LAT_NOTE, $c, 'duplicate ids in the source') if $n_ev_d != $n_ev;
	note_to(\%LAT_NOTE, $c, ($n_sink - $matched) . ' sink rows match no appended event') if $matched != $n_sink;
	return lat_fail($c, 'ERR', 'nothing delivered') if $p50 eq '';
	my %v = (p50 => $p50, p99 => $p99, max => $mx, min => $mn, appended => $n_ev, delivered => $n_sink_d,
		lost => $n_ev - $n_sink_d, dup => $n_sink - $n_sink_d, rate => sprintf('%.0f', $n_ev / $K{BENCH_LAT_SECONDS}));
	push @{ $LAT{"$c|$_"} }, $v{$_} for keys %v;
	note_to(\%LAT_NOTE, $c, "negative latency $mn ms (clock?)") if $mn < 0;
	return;
}

# ---------------------------------------------------------------------------
# 5. remote sinks and sources, against a SECOND throwaway server (same
#    settings, plus max_prepared_transactions = 20) on the same unix socket
#    directory.  The local server reaches it through a foreign server of
#    wrapper streamguard_remote (host = the socket directory) and a user
#    mapping for the bench's superuser with no password (trust on the local
#    socket): a bench shortcut; non-superusers need a password mapping.
#    Per repeat, a local stream (4 partitions) is pre-filled with
#    BENCH_REMOTE_EVENTS events (1,000 per transaction), and a stream on the
#    remote server gets the same events (same partition, seq, key, payload).
#    Then, contenders in a rotating order, each after a CHECKPOINT on both:
#    remote sink (rows = partition, seq, key, payload; remote table with a
#    processed_at DEFAULT now() column, no index):
#    - baseline: COPY of the same rows over one connection, streamed:
#      psql "COPY (SELECT ... FROM <the segment tables>) TO STDOUT" piped into
#      psql -p <remote> "COPY ... FROM STDIN" (one remote transaction); wall time.
#    - reference: the same stream split into COPY blocks of 1,000 rows, one
#      remote transaction each (what a per-batch loader does), one psql session;
#      and the same over 2 sessions side by side (partitions 0, 2 and 1, 3),
#      the loader to compare the 2-worker pipelines with; wall time of both.
#    - pipelines with sink_server/sink_table ('SELECT partition, seq, key,
#      payload FROM batch', batch_size 1000): exactly_once two_phase,
#      exactly_once offsets, at_least_once, at_most_once, and two_phase and
#      offsets with workers => 2; timed from the sink like the local
#      pipelines (remote now() = start of each batch's remote transaction).
#    remote source: an exactly_once pipeline reading the remote stream
#    (source_server) into a local sink vs one reading the local stream (the
#    same events) into the same local sink (truncated in between).
# ---------------------------------------------------------------------------
my ($R1, $R2) = ('remote sink', 'remote source');
my %S5 = (
	copy  => 'COPY to the remote, one transaction (baseline)',
	copyb => 'COPY to the remote, 1,000 rows per transaction',
	copyb2 => 'COPY to the remote, 1,000 rows per transaction, 2 sessions',
	'2pc' => 'pipeline exactly_once, sink_mode two_phase',
	'2pc2' => 'pipeline exactly_once, sink_mode two_phase, 2 workers',
	off   => 'pipeline exactly_once, sink_mode offsets',
	off2  => 'pipeline exactly_once, sink_mode offsets, 2 workers',
	alo   => 'pipeline at_least_once',
	amo   => 'pipeline at_most_once',);
my %S6 = (
	local => 'pipeline exactly_once, local source (baseline)',
	local2 => 'pipeline exactly_once, local source, 2 workers',
	rem   => 'pipeline exactly_once, remote source (source_server)',
	rem2  => 'pipeline exactly_once, remote source (source_server), 2 workers',);
my ($REMOTE, $REMOTE_TRIED);   # the second server, started by the first remote repeat
my @RSINKS = qw(rsink_copy rsink_copyb rsink_copyb2 rsink_2pc rsink_2pc2 rsink_off rsink_off2 rsink_alo rsink_amo);

sub bench_remote
{
	my ($r) = @_;
	my @all = ((map { "$R1|$S5{$_}" } qw(copy copyb copyb2 2pc 2pc2 off off2 alo amo)), (map { "$R2|$S6{$_}" } qw(local local2 rem rem2)));
	return fail_all(\@all, 'PENDING') unless $have{pipe};
	return fail_all(\@all, 'ERR', 'the remote server could not be set up (see remote.err)') unless remote_server();
	my %rs = (local => "rs_r$r", remote => "rsrc_r$r", n => $K{BENCH_REMOTE_EVENTS});
	return fail_all(\@all, 'ERR', 'create_stream failed') unless create_stream($rs{local}, 4);
	if (!prefill("prefill_remote_r$r", 'append_batch_sg.sql', { stream => $rs{local} }, $rs{n} / 1000))
	{
		drop_stream($rs{local});
		return fail_all(\@all, 'ERR', 'pre-fill failed');
	}
	remote_copy_events(\%rs);
	sql(sink_ddl($_), node => $REMOTE) for @RSINKS;
	sql(sink_ddl('lsink'));
	sql('VACUUM ANALYZE');
	sql('VACUUM ANALYZE', node => $REMOTE);

	my @runs = (
		sub { remote_copy($S5{copy},  'rsink_copy',  0, \%rs) },
		sub { remote_copy($S5{copyb}, 'rsink_copyb', 1, \%rs) },
		sub { remote_copy($S5{copyb2}, 'rsink_copyb2', 2, \%rs) },
		sub { remote_sink($S5{'2pc'}, 'exactly_once',  'two_phase', 'rsink_2pc', $r, \%rs) },
		sub { remote_sink($S5{'2pc2'}, 'exactly_once', 'two_phase', 'rsink_2pc2', $r, \%rs, 2) },
		sub { remote_sink($S5{off},   'exactly_once',  'offsets',   'rsink_off', $r, \%rs) },
		sub { remote_sink($S5{off2},  'exactly_once',  'offsets',   'rsink_off2', $r, \%rs, 2) },
		sub { remote_sink($S5{alo},   'at_least_once', undef,       'rsink_alo', $r, \%rs) },
		sub { remote_sink($S5{amo},   'at_most_once',  undef,       'rsink_amo', $r, \%rs) },
		sub { remote_source($S6{local}, 'local',  $r, \%rs) },
		sub { remote_source($S6{local2}, 'local', $r, \%rs, 2) },
		sub { remote_source($S6{rem},   'remote', $r, \%rs) },
		sub { remote_source($S6{rem2},  'remote', $r, \%rs, 2) });
	$_->() for rotated($r - 1, @runs);

	drop_stream($rs{local});
	drop_stream($rs{remote}, node => $REMOTE);
	sql_try('DROP TABLE IF EXISTS ' . join(', ', @RSINKS), node => $REMOTE);
	sql_try('DROP TABLE IF EXISTS lsink');
	return;
}

# the remote server, its streamguard, and the foreign server + user mapping on
# the bench server; started once (a failure is not retried)
sub remote_server
{
	return $REMOTE if $REMOTE || $REMOTE_TRIED++;
	log_msg('starting the remote server');
	my $node = start_cluster('remote', 'max_prepared_transactions = 20') or return;
	my ($ok, undef, $err) = sql_try('CREATE EXTENSION streamguard', node => $node);
	($ok, undef, $err) = sql_try("BEGIN;
		CREATE SERVER bench_remote FOREIGN DATA WRAPPER streamguard_remote
		    OPTIONS (host '" . $node->host . "', port '" . $node->port . "', dbname 'bench', application_name 'bench-remote');
		CREATE USER MAPPING FOR CURRENT_USER SERVER bench_remote OPTIONS (user '$USER');
		COMMIT;") if $ok;
	if (!$ok) { spurt("$LOGS/remote.err", $err); log_msg('remote: set-up failed: ', error_line($err)); return; }
	return $REMOTE = $node;
}

sub checkpoint_both { checkpoint(); checkpoint(node => $REMOTE); return; }

# the local stream's events onto a remote stream: staged by COPY, appended
# 1,000 per transaction in (seq, partition) order, with their partitions, so
# seqs are the same too; the local and remote events are counted
sub remote_copy_events
{
	my ($rs) = @_;
	$rs->{select} = segment_select($rs->{local});
	sql("DROP TABLE IF EXISTS rstage;
	     CREATE TABLE rstage (rn bigserial PRIMARY KEY, partition int, seq bigint, key text, payload jsonb);
	     SELECT streamguard.create_stream('$rs->{remote}', 4);", node => $REMOTE);
	run_sh("$LOGS/remote.err", 600, '"$1" -X -q -v ON_ERROR_STOP=1 -c "$2" | "$1" -X -q -v ON_ERROR_STOP=1 -h "$3" -p "$4" -c "$5" >/dev/null',
		"$BIN/psql", "COPY (SELECT * FROM ($rs->{select}) AS e ORDER BY seq, partition) TO STDOUT", $REMOTE->host, $REMOTE->port,
		'COPY rstage (partition, seq, key, payload) FROM STDIN')
	  or log_msg('remote: staging the events failed (see remote.err)');
	my ($ok, undef, $err) =
	  sql_try(slurp("$SQL/remote_fill.sql") . "CALL bench_remote_fill('$rs->{remote}', " . ($rs->{n} / 1000) . ');', node => $REMOTE);
	log_msg("remote: filling $rs->{remote} failed: ", error_line($err)) unless $ok;
	sql_try('DROP TABLE rstage', node => $REMOTE);
	my $got = stream_events($rs->{remote}, node => $REMOTE);
	add_note("$R2|$S6{rem}", "remote stream holds $got events, expected $rs->{n}") if $got ne $rs->{n};
	$got = stream_events($rs->{local});
	add_note("$R1|$S5{copy}", "local stream holds $got events, expected $rs->{n}") if $got ne $rs->{n};
	return;
}

# baseline and reference: psql COPY TO | [awk: blocks of 1,000 rows |] psql
# COPY FROM, wall time; $blocks 2: two such pipes side by side, each with
# half of the partitions
sub remote_copy
{
	my ($label, $t, $blocks, $rs) = @_;
	my $key = "$R1|$label";
	checkpoint_both();
	my $log = "$LOGS/remote_copy.log";
	my @psql = ("$BIN/psql", "COPY ($rs->{select}) TO STDOUT", $REMOTE->host, $REMOTE->port);
	my $blocks_sh = '"$1" -X -q -v ON_ERROR_STOP=1 -c "$2" | awk -v t="$5" \'NR % 1000 == 1 { print "COPY " t " (partition, seq, key, payload) FROM STDIN;" }
	          { print } NR % 1000 == 0 { print "\\\\." } END { if (NR % 1000) print "\\\\." }\' | "$1" -X -q -v ON_ERROR_STOP=1 -h "$3" -p "$4" -f -';
	if ($blocks == 2)
	{
		my $half = $blocks_sh =~ s/"\$2"/"\$6"/r;
		my $other = $blocks_sh =~ s/"\$2"/"\$7"/r;
		$blocks_sh = "($half) & a=\$!; ($other) & b=\$!; wait \$a && wait \$b";
		push @psql, $t, map { "COPY (SELECT * FROM ($rs->{select}) AS e WHERE partition % 2 = $_) TO STDOUT" } (0, 1);
	}
	my $t0 = time;
	my $ok = $blocks
	  ? run_sh($log, 3600, $blocks_sh, @psql, $blocks == 2 ? () : ($t))
	  : run_sh($log, 3600, '"$1" -X -q -v ON_ERROR_STOP=1 -c "$2" | "$1" -X -q -v ON_ERROR_STOP=1 -h "$3" -p "$4" -c "$5"',
		@psql, "COPY $t (partition, seq, key, payload) FROM STDIN");
	my $t1 = time;
	my $rows = sql_value("SELECT count(*) FROM $t", node => $REMOTE) // '?';
	if (!$ok || $rows ne $rs->{n})
	{
		my ($e) = slurp($log) =~ /(.*ERROR.*)/;
		return fail_all([$key], 'ERR', "COPY failed or incomplete: $rows rows (" . substr($e // '', 0, 120) . ')');
	}
	add_val($key, sprintf('%.1f', $rows / ($t1 - $t0)));
	return;
}

# a pipeline into the remote sink $t, timed from the sink ($workers: 1)
sub remote_sink
{
	my ($label, $g, $mode, $t, $r, $rs, $workers) = @_;
	my ($key, $pn, $n) = ("$R1|$label", "rsink_${t}_r$r", $rs->{n});
	checkpoint_both();
	my $err = create_pipeline($pn, $rs->{local}, 'SELECT partition, seq, key, payload FROM batch',
		guarantee => $g, sink_server => 'bench_remote', sink_table => "public.$t", ($mode ? (sink_mode => $mode) : ()),
		($workers ? (workers => $workers) : ()));
	return fail_all([$key], 'ERR', "create_pipeline failed: $err") if $err;
	# local positions first, then (two_phase: COMMIT PREPARED; at_most_once: the
	# remote transaction comes after the positions) the remote rows
	$err = wait_count("SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers
	                   WHERE stream = '$rs->{local}' AND consumer = 'pipeline:$pn'", $n, $K{BENCH_PIPELINE_TIMEOUT}, $pn)
	  || wait_count("SELECT count(*) FROM $t", $n, 60, $pn, node => $REMOTE);
	drop_pipeline($pn);
	return fail_all([$key], 'ERR', $err) if $err;
	my $s = sink_stats($t, node => $REMOTE);
	return fail_all([$key], 'ERR', "remote sink holds $s->{rows} rows ($s->{distinct} distinct) of $n events")
	  if $s->{distinct} != $n || ($g eq 'exactly_once' && $s->{rows} != $n);
	add_note($key, ($s->{rows} - $n) . ' duplicate rows') if $s->{rows} != $n;
	if ($mode && $mode eq 'two_phase')
	{
		my $left = sql_value('SELECT count(*) FROM pg_prepared_xacts', node => $REMOTE) // '?';
		add_note($key, "$left prepared transactions left on the remote") if $left ne '0';
	}
	return fail_all([$key], 'ERR', 'a single batch: cannot time it') unless defined $s->{rate};
	add_val($key, $s->{rate});
	return;
}

# an exactly_once pipeline from the local or the remote stream into lsink
# ($workers: 1)
sub remote_source
{
	my ($label, $where, $r, $rs, $workers) = @_;
	my ($key, $pn, $n) = ("$R2|$label", "rsrc_${where}_r$r" . ($workers ? "_w$workers" : ''), $rs->{n});
	sql('TRUNCATE lsink');
	checkpoint_both();
	my $err = create_pipeline($pn, $rs->{$where},
		'INSERT INTO lsink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
		guarantee => 'exactly_once', ($where eq 'remote' ? (source_server => 'bench_remote') : ()),
		($workers ? (workers => $workers) : ()));
	return fail_all([$key], 'ERR', "create_pipeline failed: $err") if $err;
	$err = wait_count('SELECT count(*) FROM lsink', $n, $K{BENCH_PIPELINE_TIMEOUT}, $pn);
	drop_pipeline($pn);
	return fail_all([$key], 'ERR', $err) if $err;
	my $s = sink_stats('lsink');
	return fail_all([$key], 'ERR', "local sink holds $s->{rows} rows ($s->{distinct} distinct) of $n events")
	  if $s->{rows} != $n || $s->{distinct} != $n;
	return fail_all([$key], 'ERR', 'a single batch: cannot time it') unless defined $s->{rate};
	add_val($key, $s->{rate});
	return;
}

# ---------------------------------------------------------------------------
# 6. long run, SCALED DOWN (target: throughput after 10 M events within 10 %
#    of the start).  Once per suite run, not repeated: BENCH_LONG_CLIENTS
#    producers append BENCH_LONG_EVENTS events with append_batch (1,000 per
#    transaction, as in benchmark 2) to a stream with 4 partitions and
#    retention BENCH_LONG_RETENTION (segments rotate every retention / 4 and
#    are dropped by the maintenance worker), while an exactly_once pipeline
#    (batch_size 1000) copies every event into a sink table.  Autovacuum runs
#    with its defaults.  A sampler records every second: events appended and
#    consumed, segments, their size (pg_total_relation_size), the pipeline's
#    lost_events, the size of streamguard's catalog tables.
#    Throughput in the first vs the last 10 % of the producers' run (the time
#    during which all producers ran: from the first transaction's start to the
#    earliest last commit of a client): producer events/s from pgbench's
#    per-transaction log; pipeline events/s = sink rows whose batch started
#    in the window / window length.
# ---------------------------------------------------------------------------
my %LONG;

sub bench_long
{
	my ($st, $pn, $n) = ('long_s', 'long_p', $K{BENCH_LONG_EVENTS});
	return $LONG{status} = 'pending' unless $have{pipe};
	my $ret = $K{BENCH_LONG_RETENTION} eq 'none' ? 'NULL' : "'$K{BENCH_LONG_RETENTION}'";
	my ($ok, undef, $err) = sql_try("SELECT streamguard.create_stream('$st', 4, retention => $ret)");
	return $LONG{status} = 'error: create_stream failed: ' . error_line($err) unless $ok;
	$LONG{segment_interval} = sql("SELECT coalesce(segment_interval::text, 'none') FROM streamguard.stream WHERE name = '$st'");
	sql(sink_ddl('sink_long'));
	$err = create_pipeline($pn, $st, 'INSERT INTO sink_long (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
		guarantee => 'exactly_once');
	$err = $err ? "create_pipeline failed: $err" : wait_worker($pn) ? '' : "the pipeline's worker did not start";
	if ($err) { drop_stream($st); return $LONG{status} = "error: $err"; }

	my $sampler = spawn([ '/bin/sh', '-c', 'while [ ! -f "$1" ]; do "$2" -X -q -At -F " " -v stream="$3" -v pipeline="$4" -f "$5" >>"$6" || true; sleep 1; done',
			'sampler', "$WORK/long.stop", "$BIN/psql", $st, $pn, "$SQL/long_sample.sql", "$LOGS/long_samples.txt" ],
		"$LOGS/long_sampler.err");
	checkpoint();
	my $log0 = () = slurp($NODE->logfile) =~ /\n/g;
	my $per = $n / 1000 / $K{BENCH_LONG_CLIENTS};
	log_msg("long run: $K{BENCH_LONG_CLIENTS} producers x $per transactions of 1,000 events");
	$err = pgbench('long_producers', 'append_batch_sg.sql', { stream => $st },
		-c => $K{BENCH_LONG_CLIENTS}, -j => $K{BENCH_LONG_CLIENTS}, -t => $per, '-l', "--log-prefix=$LOGS/long_tx")
	  ? '' : 'producers failed';
	$err ||= wait_count("SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers
	                     WHERE stream = '$st' AND consumer = 'pipeline:$pn'", $n, $K{BENCH_PIPELINE_TIMEOUT}, $pn);
	sleep 1.5;   # one more sample after the drain
	spurt("$WORK/long.stop", '');
	reap($sampler, 30);
	$LONG{batches} = sql("SELECT batches FROM streamguard.pipelines WHERE pipeline = '$pn'");
	drop_pipeline($pn);

	if ($err) { $LONG{status} = "error: $err"; }
	else
	{
		long_windows();
		long_samples($log0);
		$LONG{status} = 'ok';
	}
	drop_stream($st);
	sql_try('DROP TABLE sink_long');
	return;
}

# producer windows from pgbench's per-transaction log (client, txn no, latency
# us, script, epoch s, epoch us), the pipeline's from the sink
sub long_windows
{
	my ($t0, $tall, %last, @end);
	for my $line (map { split /\n/, slurp($_) } glob("$LOGS/long_tx.*"))
	{
		my ($client, undef, $lat, undef, $s, $us) = split ' ', $line;
		my $e = $s + $us / 1e6;
		my $start = $e - $lat / 1e6;
		$t0 = $start if !defined $t0 || $start < $t0;
		$last{$client} = $e if !defined $last{$client} || $e > $last{$client};
		$tall = $e if !defined $tall || $e > $tall;
		push @end, $e;
	}
	my ($t1) = sort { $a <=> $b } values %last;
	my $w = ($t1 - $t0) / 10;
	my $n1 = grep { $_ >= $t0 && $_ < $t0 + $w } @end;
	my $n2 = grep { $_ > $t1 - $w && $_ <= $t1 } @end;
	($t0, $t1, $tall, $w) = map { sprintf('%.6f', $_) } $t0, $t1, $tall, $w;
	%LONG = (%LONG, t_start => $t0, t_all => $tall, txns => scalar @end,
		prod_first => sprintf('%.0f', $n1 * 1000 / $w), prod_last => sprintf('%.0f', $n2 * 1000 / $w),
		prod_all => sprintf('%.0f', $K{BENCH_LONG_EVENTS} / ($tall - $t0)),
		run_s => sprintf('%.1f', $tall - $t0), window_s => sprintf('%.1f', $w));
	my ($b1, $b2, $rows, $distinct, $tail) = split /\|/, sql(
		"SELECT count(*) FILTER (WHERE processed_at >= to_timestamp($t0) AND processed_at < to_timestamp($t0 + $w)),
		        count(*) FILTER (WHERE processed_at > to_timestamp($t1 - $w) AND processed_at <= to_timestamp($t1)),
		        count(*), count(DISTINCT (partition, seq)), extract(epoch FROM max(processed_at)) - $tall
		 FROM sink_long");
	%LONG = (%LONG, pipe_first => sprintf('%.0f', $b1 / $w), pipe_last => sprintf('%.0f', $b2 / $w),
		sink_rows => $rows, sink_distinct => $distinct, tail_s => sprintf('%.2f', $tail));
	return;
}

# storage at 10 %, 50 % of the run, at the end of the producers, after the
# drain, and where the segments were largest; the pipeline's batch times;
# the checkpoints the server log shows after line $log0
sub long_samples
{
	my ($log0) = @_;
	# sample: epoch appended consumed retained segments seg_bytes lost catalog_bytes sink_bytes fetch_ms proc_ms lock_waits
	my @s = grep { /\S/ } split /\n/, slurp("$LOGS/long_samples.txt");
	my @f = map { [ split ' ' ] } @s;
	for my $p (10, 50, 100)
	{
		my $at = sprintf('%.3f', $LONG{t_start} + ($LONG{t_all} - $LONG{t_start}) * $p / 100);
		my ($best) = sort { abs($f[$a][0] - $at) <=> abs($f[$b][0] - $at) || $a <=> $b } 0 .. $#s;
		$LONG{"at$p"} = defined $best ? $s[$best] : '';
	}
	$LONG{atdrain} = $s[-1] // '';
	$LONG{atmax} = (sort { $a->[1][5] <=> $b->[1][5] || $a->[0] cmp $b->[0] } map { [ $s[$_], $f[$_] ] } 0 .. $#s)[-1][0] if @s;
	$LONG{samples} = @s;
	my @fetch = sort { $a <=> $b } map { $_->[9] } @f;
	my @proc  = sort { $a <=> $b } map { $_->[10] } @f;
	$LONG{fetch_max} = sprintf('%.0f', $fetch[-1] // 0);
	$LONG{fetch_med} = median(\@fetch, '%.2f') // '';
	$LONG{proc_max} = sprintf('%.0f', $proc[-1] // 0);
	my @log = split /\n/, slurp($NODE->logfile);
	$LONG{checkpoints} = grep { /checkpoint starting: / } @log[ $log0 .. $#log ];
	return;
}

# ---------------------------------------------------------------------------
# 7. parallel pipelines: a CPU-bound pipeline (per event: jsonb_each over the
#    payload and a chain of 20 md5 hashes of its text, about 0.1 ms of CPU)
#    drains BENCH_PARALLEL_EVENTS events of a 4-partition stream with 1, 2 and
#    4 workers (workers => N), in an order rotating from repeat to repeat.
#    events/s = sink rows committed before the last commit / time between the
#    first and the last commit.
# ---------------------------------------------------------------------------
my %S7 = (1 => 'pipeline, 1 worker', 2 => 'pipeline, 2 workers', 4 => 'pipeline, 4 workers');
my $PAR_SQL = q{INSERT INTO sink_par (partition, seq, key, payload)
SELECT partition, seq, key,
       jsonb_build_object('n', (SELECT count(*) FROM jsonb_each(payload)),
                          'h', (SELECT md5(string_agg(md5(payload::text || i), '')) FROM generate_series(1, 20) AS i))
FROM batch};

sub bench_parallel
{
	my ($r) = @_;
	my $stream = "s7r$r";
	my $n = $K{BENCH_PARALLEL_EVENTS};
	my $ready = $have{pipe} && create_stream($stream, 4)
	  && prefill("prefill_par_r$r", 'append_batch_sg.sql', { stream => $stream }, $n / 1000);
	for my $w (rotated($r, 1, 2, 4))
	{
		my $key = "parallel|$S7{$w}";
		if (!$ready) { add_val($key, $have{pipe} ? 'ERR' : 'PENDING'); next; }
		sql(sink_ddl('sink_par'));
		checkpoint();
		my $name = "par${w}_r$r";
		my $err = create_pipeline($name, $stream, $PAR_SQL, workers => $w);
		$err ||= wait_pipeline($stream, $name, $n, $K{BENCH_PIPELINE_TIMEOUT});
		drop_pipeline($name);
		my $st = $err ? undef : sink_stats('sink_par');
		$err ||= "sink holds $st->{rows} rows of $n" if $st && $st->{rows} != $n;
		if ($err || !defined $st->{rate}) { add_val($key, 'ERR'); add_note($key, $err || 'no time span'); next; }
		add_val($key, $st->{rate});
	}
	sql_try('DROP TABLE IF EXISTS sink_par');
	drop_stream($stream) if $have{sg};
	return;
}

# ---------------------------------------------------------------------------
# 8. pipeline start: with BENCH_START_EVENTS events waiting in a 4-partition
#    stream, the time from the commit of create_pipeline (and later of
#    resume_pipeline after a pause) to the commit of the pipeline's first
#    batch, both from pg_xact_commit_timestamp.
# ---------------------------------------------------------------------------
my %START;   # create|resume => [ms per repeat]

# runs $call in its own transaction; returns its xid, or undef
sub start_call
{
	my ($call) = @_;
	my ($ok, $out, $err) = sql_try("BEGIN;\n$call;\nSELECT pg_catalog.pg_current_xact_id();\nCOMMIT;");
	log_msg("start: $call: " . error_line($err)) unless $ok;
	return $ok ? (grep { /^[0-9]+$/ } split /\n/, $out)[-1] : undef;
}

# ms from the commit of xid $x to the first sink row committed after it
sub start_latency
{
	my ($x) = @_;
	my $v;
	wait_until(30, 0.002, sub {
		$v = sql_value("SELECT round(extract(epoch FROM min(pg_xact_commit_timestamp(s.xmin))
		  - pg_xact_commit_timestamp('$x'::xid)) * 1000, 2)
		FROM sink_start s WHERE pg_xact_commit_timestamp(s.xmin) > pg_xact_commit_timestamp('$x'::xid)");
		defined $v && $v ne '';
	});
	return defined $v && $v ne '' ? $v : undef;
}

sub bench_start
{
	my ($r) = @_;
	my $stream = "s8r$r";
	my $n = $K{BENCH_START_EVENTS};
	my $ready = $have{pipe} && create_stream($stream, 4)
	  && prefill("prefill_start_r$r", 'append_batch_sg.sql', { stream => $stream }, $n / 1000);
	if (!$ready) { push @{ $START{$_} }, $have{pipe} ? 'ERR' : 'PENDING' for qw(create resume); return; }
	sql(sink_ddl('sink_start'));
	checkpoint();
	my $name = "start_r$r";
	my $x = start_call("SELECT streamguard.create_pipeline('$name', '$stream', 'INSERT INTO sink_start (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch', batch_size => 1000)");
	push @{ $START{create} }, (defined $x ? start_latency($x) : undef) // 'ERR';
	sql("SELECT streamguard.pause_pipeline('$name')");
	wait_until(30, 0.05, sub { sql("SELECT state FROM streamguard.pipelines WHERE pipeline = '$name'") eq 'paused'
		  && sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamguard pipeline'") == 0 });
	$x = start_call("SELECT streamguard.resume_pipeline('$name')");
	push @{ $START{resume} }, (defined $x ? start_latency($x) : undef) // 'ERR';
	drop_pipeline($name);
	sql_try('DROP TABLE IF EXISTS sink_start');
	drop_stream($stream);
	return;
}

sub start_report
{
	my @out = ("\n## Pipeline start, commit → first batch committed\n\n",
		fmt($K{BENCH_START_EVENTS}) . " events wait in a 4-partition stream; ms from the commit of the call to the commit of the pipeline's first batch (pg_xact_commit_timestamp of both). Median and maximum over the repeats.\n\n",
		"| call | median ms | max ms | per repeat | target | met? |\n|---|---:|---:|---|---|---|\n");
	for my $c (qw(create resume))
	{
		my @v = @{ $START{$c} // [] };
		my @n = sort { $a <=> $b } num_list(@v);
		my $med = median(\@n, '%.1f');
		my $max = @n ? sprintf('%.1f', $n[-1]) : undef;
		my $met = !@v ? 'not run' : (@n != @v || !defined $max) ? 'no (failed)' : $max <= 50 ? 'yes' : '**no**';
		push @out, "| ${c}_pipeline | " . ($med // '—') . ' | ' . ($max // '—') . ' | ' . join(' ', @v) . " | ≤ 50 ms | $met |\n";
	}
	return @out;
}

# ---------------------------------------------------------------------------
# 9. long-poll: one consumer (test/bench/lpclient.c, libpq, polls of 100
#    events, each BEGIN; poll; COMMIT) per contender reads a 4-partition stream while
#    BENCH_LAT_CLIENTS producers append BENCH_LAT_RATE events/s (pgbench -R,
#    one event per transaction) for BENCH_LP_SECONDS:
#    - poll(wait => '1 s'): the server sleeps until events are readable;
#    - poll, sleeping BENCH_LAT_POLL_MS when it returns nothing;
#    - LISTEN/NOTIFY + poll: the producers NOTIFY in the append's
#      transaction, the client waits on its socket when a poll is empty.
#    - poll(wait => '1 s') with the consumer's transactions committing
#      asynchronously (synchronous_commit = off in its session);
#    Latency, on two clocks: the client's clock when the poll's result
#    arrived (before its COMMIT) - (a) the commit timestamp of the event's
#    append, which the server takes before it flushes the commit record, so
#    this includes the producer's WAL flush; (b) the time the producer's
#    COMMIT returned (pgbench -l), when the event is visible.  Same machine,
#    same clock.  Before the producers start, BENCH_LP_IDLE idle seconds: the
#    CPU time of the client and of its backend over them.
# ---------------------------------------------------------------------------
my %S9 = (wait => 'poll(wait => 1 s)', async => 'poll(wait), async COMMIT',
	sleep => 'poll, sleep when empty', notify => 'LISTEN/NOTIFY + poll');
my @LP_MODES = qw(wait async sleep notify);
my (%LP, $LP_CLIENT);

sub lp_client
{
	return $LP_CLIENT if defined $LP_CLIENT;
	my $inc = Bench::pg_config($ENV{PG_CONFIG}, '--includedir');
	my $lib = Bench::pg_config($ENV{PG_CONFIG}, '--libdir');
	my $bin = "$WORK/lpclient";
	my $rc = system("cc -O2 -Wall -o '$bin' '$FindBin::RealBin/lpclient.c' -I'$inc' -L'$lib' -lpq > '$LOGS/lpclient_build.log' 2>&1");
	$LP_CLIENT = $rc == 0 ? $bin : '';
	log_msg('lpclient did not build: ' . slurp("$LOGS/lpclient_build.log")) unless $LP_CLIENT;
	return $LP_CLIENT;
}

sub lp_fail { my ($m, $v, $note) = @_; push @{ $LP{"$m|p50"} }, $v; note_to(\%LAT_NOTE, "lp $m", $note) if $note; return; }

sub bench_longpoll
{
	my ($r) = @_;
	sql(slurp("$SQL/setup_latency.sql")) unless $LAT_SETUP++;
	for my $m (rotated($r - 1, @LP_MODES))
	{
		if (!$have{sg}) { lp_fail($m, 'PENDING'); next; }
		if (!lp_client()) { lp_fail($m, 'ERR', 'lpclient did not build'); next; }
		my $st = "lp_${m}_r$r";
		if (!create_stream($st, 4)) { lp_fail($m, 'ERR', 'create_stream failed'); next; }
		my ($stop, $out, $log) = ("$WORK/lp_stop", "$WORK/lp_$m.txt", "$LOGS/lp_${m}_r$r.log");
		unlink $stop;
		my $pid = spawn([ $LP_CLIENT, 'dbname=bench', $m, $st, 'c', $K{BENCH_LAT_POLL_MS}, $K{BENCH_LP_IDLE}, $stop, $out ], $log);
		sleep $K{BENCH_LP_IDLE} + 1.5;
		my $plog = "$WORK/lp_pg_${m}_r$r";
		unlink glob("$plog.*");
		my $res = pgbench("lp_prod_${m}_r$r", $m eq 'notify' ? 'longpoll_notify.sql' : 'longpoll_sg.sql', { stream => $st, n => 0 },
			-c => $K{BENCH_LAT_CLIENTS}, -j => ($K{BENCH_LAT_CLIENTS} < 2 ? 1 : 2),
			-R => $K{BENCH_LAT_RATE}, -T => $K{BENCH_LP_SECONDS}, -l => "--log-prefix=$plog");
		spurt($stop, '');
		my $rc = reap($pid, 30);
		my $cl = slurp($log);
		if (!$res || !defined $rc || $rc != 0)
		{
			lp_fail($m, 'ERR', !$res ? 'producer failed' : 'client: ' . error_line($cl));
			drop_stream($st);
			next;
		}
		my ($ic, $ib, $polls) = $cl =~ /idle_client_ms=(-?\d+) idle_backend_ms=(-?\d+) polls=(\d+)/;
		# pgbench -l: client, transaction number, latency, script, end (s, us)
		my $done = "$WORK/lp_done.txt";
		my $dtext = '';
		for my $f (glob("$plog.*"))
		{
			for my $l (split /\n/, slurp($f))
			{
				my ($c, $n, undef, undef, $sec, $us) = split / /, $l;
				$dtext .= sprintf("%d %d\n", $c * 1000000000 + $n, $sec * 1000000 + $us) if defined $us;
			}
		}
		spurt($done, $dtext);
		unlink glob("$plog.*");
		my ($ok, $o, $e) = sql_try("DROP TABLE IF EXISTS lp_recv, lp_done; CREATE TABLE lp_recv (id bigint, at_us bigint);
			CREATE TABLE lp_done (id bigint, at_us bigint);
			COPY lp_recv FROM " . q_lit($out) . " (DELIMITER ' ');
			COPY lp_done FROM " . q_lit($done) . " (DELIMITER ' ');
			WITH e AS (SELECT * FROM bench_sg_events('$st')),
			     j AS (SELECT (r.at_us - extract(epoch FROM e.ev_commit) * 1e6) / 1000.0 AS ms,
			                  (r.at_us - d.at_us) / 1000.0 AS ms_ret
			           FROM lp_recv r JOIN e ON e.ev_id = r.id LEFT JOIN lp_done d ON d.id = r.id)
			SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM lp_recv), (SELECT count(DISTINCT id) FROM lp_recv),
			       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
			       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3),
			       round(max(ms)::numeric, 3), count(*),
			       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms_ret))::numeric, 3),
			       round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms_ret))::numeric, 3),
			       count(ms_ret) FROM j;");
		if (!$ok || $o !~ /\|/)
		{
			lp_fail($m, 'ERR', 'statistics: ' . error_line($e));
			drop_stream($st);
			next;
		}
		my ($n_ev, $n_recv, $n_recv_d, $p50, $p99, $mx, undef, $p50r, $p99r, $n_ret) = split /\|/, (split /\n/, $o)[-1];
		note_to(\%LAT_NOTE, "lp $m", "pgbench logged the end of $n_ret of $n_recv events received")
		  if $n_ret < $n_recv;
		my %v = (p50 => $p50, p99 => $p99, max => $mx, p50r => $p50r, p99r => $p99r, appended => $n_ev, lost => $n_ev - $n_recv_d,
			dup => $n_recv - $n_recv_d, polls => $polls, idle_client => sprintf('%.1f', $ic / $K{BENCH_LP_IDLE}),
			idle_backend => sprintf('%.1f', $ib / $K{BENCH_LP_IDLE}));
		push @{ $LP{"$m|$_"} }, $v{$_} for keys %v;
		sql_try('DROP TABLE lp_recv, lp_done');
		drop_stream($st);
	}
	return;
}

sub longpoll_report
{
	my @out = ("\n## Long-poll, append commit → poll returned in the client\n\n",
		"$K{BENCH_LAT_CLIENTS} producer clients offer $K{BENCH_LAT_RATE} events/s (one per transaction) for $K{BENCH_LP_SECONDS} s per contender and repeat; one libpq client polls (100 events per poll, each in its own transaction: BEGIN; poll; COMMIT). Latency = client clock when the poll's result arrived (before the COMMIT) − (a) the commit timestamp of the append, which the server takes before flushing the commit record to disk, so (a) includes the producer's WAL flush; (b) the time the producer's COMMIT returned (pgbench's log), from when the event is visible. Idle CPU: ms of CPU per second over the $K{BENCH_LP_IDLE} s before the producers start, of the client and of its server backend. p50/p99 are medians over the repeats, max the maximum, counts summed.\n\n",
		"| contender | p50 ms (a) | p99 ms (a) | max ms (a) | p50 ms (b) | p99 ms (b) | appended | lost | duplicates | polls | idle CPU client ms/s | idle CPU backend ms/s | target | met? (a) | met? (b) |\n",
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
	for my $m (@LP_MODES)
	{
		my @vals = @{ $LP{"$m|p50"} // [] };
		my $f = sub { my ($k, $how) = @_; my @n = num_list(@{ $LP{"$m|$k"} // [] });
			return undef unless @n;
			return median(\@n, '%.2f') if $how eq 'median';
			return sprintf('%.2f', (sort { $b <=> $a } @n)[0]) if $how eq 'max';
			my $s = 0; $s += $_ for @n; return $s; };
		my ($p50, $p99, $mx) = ($f->('p50', 'median'), $f->('p99', 'median'), $f->('max', 'max'));
		my ($p50r, $p99r) = ($f->('p50r', 'median'), $f->('p99r', 'median'));
		my ($ic, $ib) = ($f->('idle_client', 'median'), $f->('idle_backend', 'median'));
		my ($tgt, $met, $metr) = ('reference', '—', '—');
		my ($lost, $dup) = ($f->('lost', 'sum'), $f->('dup', 'sum'));
		if ($m eq 'wait')
		{
			my $judge = sub {
				my ($a50, $a99) = @_;
				return 'no (failed)' unless defined $a50 && defined $a99;
				return ($a50 <= 1 && $a99 <= 10 && ($ic // 99) <= 1 && ($ib // 99) <= 1 && ($lost // 1) == 0 && ($dup // 1) == 0)
				  ? 'yes' : '**no**';
			};
			$tgt = 'p50 ≤ 1 ms, p99 ≤ 10 ms, idle CPU ≈ 0';
			($met, $metr) = ($judge->($p50, $p99), $judge->($p50r, $p99r));
		}
		$p50 //= (grep { $_ eq 'PENDING' } @vals) ? 'pending' : @vals ? 'error' : 'not run';
		push @out, '| ' . join(' | ', $S9{$m}, $p50, $p99 // '—', $mx // '—', $p50r // '—', $p99r // '—', fmt($f->('appended', 'sum')),
			$lost // '—', $dup // '—', fmt($f->('polls', 'sum')), $ic // '—', $ib // '—', $tgt, $met, $metr) . " |\n";
	}
	my @notes = map { "$_: $LAT_NOTE{$_}" } grep { /^lp / } sort keys %LAT_NOTE;
	push @out, "\nNotes: " . join('; ', @notes) . "\n" if @notes;
	return @out;
}

# 10. consumer groups: 1, 2 and 4 clients, each a member of one consumer group
#    (poll(..., member => m), 1,000 events per poll; each poll records the
#    seq range it got per partition in a log table, in the poll's
#    transaction), drain
#    BENCH_GROUP_EVENTS events of a 4-partition stream, in an order rotating
#    from repeat to repeat; for reference, 2 clients polling the same consumer
#    without member names (partitions shared by SKIP LOCKED, as in 0.1).  events/s = events / wall time from the
#    moment every client is connected (they wait for a go row) to the end of the last.  The logged ranges must tile
#    every partition exactly: no event lost, none twice.
# ---------------------------------------------------------------------------
my %GROUP_CPU;   # per contender: its backends' CPU ms per 1,000 events, per repeat
my %S8 = (1 => 'group of 1 poll client', 2 => 'group of 2 poll clients', 4 => 'group of 4 poll clients',
	p2 => '2 poll clients without member (0.1 sharing)');
my $GROUP_MEMBER = q{
CREATE OR REPLACE PROCEDURE bench_group_member(st text, con text, m text, total bigint)
LANGUAGE plpgsql AS $$
DECLARE
	n int;
	done bigint;
	t0 timestamptz := clock_timestamp();
BEGIN
	-- connected: say so, and start when every client is (the driver's go)
	INSERT INTO grp_ready VALUES (1);
	COMMIT;
	WHILE NOT EXISTS (SELECT FROM grp_go) LOOP
		IF clock_timestamp() > t0 + interval '120 s' THEN
			RAISE EXCEPTION 'no start signal within 120 s';
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
	LOOP
		INSERT INTO grp_log (partition, first_seq, last_seq, n)
		SELECT partition, min(seq), max(seq), count(*)
		  FROM streamguard.poll(st, con, 1000, wait => '20 ms', member => nullif(m, ''))
		 GROUP BY partition;
		GET DIAGNOSTICS n = ROW_COUNT;
		COMMIT;
		IF n = 0 THEN
			SELECT coalesce(sum(committed_seq), 0) INTO done
			  FROM streamguard.consumers WHERE stream = st AND consumer = con;
			EXIT WHEN done >= total;
		END IF;
	END LOOP;
	IF m <> '' THEN
		PERFORM streamguard.leave_group(st, con, m);
	END IF;
	-- the CPU time this backend used (Linux; nothing elsewhere)
	BEGIN
		INSERT INTO grp_cpu SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint;
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
	COMMIT;
END $$;
};

sub bench_group
{
	my ($r) = @_;
	my $stream = "s8r$r";
	my $n = $K{BENCH_GROUP_EVENTS};
	my $ready = $have{sg} && create_stream($stream, 4)
	  && prefill("prefill_grp_r$r", 'append_batch_sg.sql', { stream => $stream }, $n / 1000);
	sql($GROUP_MEMBER) if $ready;
	for my $k (rotated($r, 1, 2, 4, 'p2'))
	{
		my $key = "group|$S8{$k}";
		my ($clients, $plain) = $k eq 'p2' ? (2, 1) : ($k, 0);
		if (!$ready) { add_val($key, $have{sg} ? 'ERR' : 'PENDING'); next; }
		sql('DROP TABLE IF EXISTS grp_log, grp_cpu, grp_ready, grp_go;'
			. ' CREATE TABLE grp_log (partition int, first_seq bigint, last_seq bigint, n int);'
			. ' CREATE TABLE grp_cpu (ns bigint); CREATE TABLE grp_ready (x int); CREATE TABLE grp_go (x int)');
		checkpoint();
		my $con = "grp${k}_r$r";
		my @pids = map { [ $_, background_call("CALL bench_group_member('$stream', '$con', '" . ($plain ? '' : "m$_")
			  . "', $n)", "group_${con}_m$_") ] } 1 .. $clients;
		my $err;
		# the clock starts once every client is connected (their connections
		# and process starts are not the drain's work)
		wait_until(60, 0.005, sub { (sql_value('SELECT count(*) FROM grp_ready') // -1) == $clients })
		  or $err = 'the clients did not all connect within 60 s';
		my $t0 = time;
		sql('INSERT INTO grp_go VALUES (1)');
		for my $p (@pids)
		{
			my $rc = reap($p->[1], $K{BENCH_PIPELINE_TIMEOUT});
			$err //= "member m$p->[0] failed (logs/group_${con}_m$p->[0].log)" unless defined $rc && $rc == 0;
		}
		my $t = time - $t0;
		# per partition, the polls' seq ranges must tile 1 .. last without gap
		# or overlap (the pre-fill commits every seq), and add up to $n
		my $got = sql_value(q{SELECT coalesce(sum(n), 0) || ' ' || count(*) FILTER (WHERE n <> last_seq - first_seq + 1
				OR first_seq <> coalesce(prev, 0) + 1)
			FROM (SELECT *, lag(last_seq) OVER (PARTITION BY partition ORDER BY first_seq) AS prev FROM grp_log) r}) // '';
		$err //= "polls' ranges: (events, bad ranges) = ($got), expected ($n, 0)" unless $got eq "$n 0";
		if ($err) { add_val($key, 'ERR'); add_note($key, $err); next; }
		add_val($key, sprintf('%.1f', $n / $t));
		# the work done, whatever the load: the CPU time of the clients' backends
		my $cpu = sql_value("SELECT round(sum(ns) / 1e6 / ($n / 1000.0), 2) FROM grp_cpu HAVING count(*) = $clients") // '';
		if ($cpu ne '')
		{
			push @{ $GROUP_CPU{$key} }, $cpu;
			$NOTES{$key} = 'backend CPU ms per 1,000 events, per repeat: ' . join(' ', @{ $GROUP_CPU{$key} });
		}
	}
	sql_try('DROP TABLE IF EXISTS grp_log, grp_cpu, grp_ready, grp_go');
	drop_stream($stream) if $have{sg};
	return;
}

# ---------------------------------------------------------------------------
# 11. windows.  (a) throughput: BENCH_WINDOW_EVENTS events over 1,000 keys in a
#    4-partition stream, counted and summed per key and minute of append time
#    by a plain upsert pipeline (INSERT ... ON CONFLICT DO UPDATE into the
#    target, the way one writes it without windows) and by a window pipeline
#    (tumbling 1 minute, emitting on close), each draining the same backlog,
#    in an order rotating from repeat to repeat; events/s from the checkpoint
#    log: events after the first batch / time from its commit to the last
#    batch's.  The windows' final emission (at the end of the minute, after
#    the drain) is not in that figure; the upsert target is written by every
#    batch.  (b) close latency: a window pipeline (tumbling 1 s, append time)
#    while BENCH_LAT_CLIENTS producers offer BENCH_LAT_RATE events/s for
#    BENCH_LAT_SECONDS; a window's latency = commit time of its row - its end.
# ---------------------------------------------------------------------------
my %S11 = (ups => 'upsert pipeline, per key and minute', win => 'window pipeline, tumbling 1 minute');
my %WLAT;   # p50, p99, max, windows: per repeat; note
my $UPS_SQL = q{INSERT INTO win_out AS o (window_start, window_end, key, events, amount)
SELECT date_bin('1 minute', appended_at, 'epoch'), date_bin('1 minute', appended_at, 'epoch') + interval '1 minute',
       key, count(*), sum((payload->>'amount')::numeric)
FROM batch GROUP BY 1, 2, 3
ON CONFLICT (window_start, key) DO UPDATE SET events = o.events + excluded.events, amount = o.amount + excluded.amount};
my $WIN_AGGS = q{'{"events": "count(*)", "amount": "sum(payload->>''amount'')"}'};

sub bench_windows
{
	my ($r) = @_;
	my $stream = "s8r$r";
	my $n = $K{BENCH_WINDOW_EVENTS};
	my $ready = $have{pipe} && create_stream($stream, 4)
	  && prefill("prefill_win_r$r", 'append_batch_keys.sql', { stream => $stream, keys => 1000 }, $n / 1000);
	for my $c (rotated($r, 'ups', 'win'))
	{
		my $key = "windows|$S11{$c}";
		if (!$ready) { add_val($key, $have{pipe} ? 'ERR' : 'PENDING'); next; }
		sql('DROP TABLE IF EXISTS win_out; CREATE TABLE win_out (window_start timestamptz, window_end timestamptz, '
			  . 'key text, events numeric, amount numeric, PRIMARY KEY (window_start, key))');
		checkpoint();
		my $name = "win${c}_r$r";
		my $err;
		if ($c eq 'ups') { $err = create_pipeline($name, $stream, $UPS_SQL); }
		else
		{
			my ($ok, undef, $e) = sql_try("SELECT streamguard.create_window_pipeline('$name', '$stream', 'win_out', "
				  . "'1 minute', aggregates => $WIN_AGGS, batch_size => 1000)");
			$err = $ok ? '' : error_line($e);
		}
		$err ||= wait_pipeline($stream, $name, $n, $K{BENCH_PIPELINE_TIMEOUT});
		my $rate = $err ? undef : sql_value(
			"WITH b AS (SELECT batch_id, events_in, committed_at FROM streamguard.pipeline_batches
			            WHERE pipeline = '$name' AND events_in > 0)
			 SELECT round((sum(events_in) - (SELECT events_in FROM b ORDER BY batch_id LIMIT 1))
			              / nullif(extract(epoch FROM max(committed_at) - min(committed_at)), 0), 1) FROM b");
		drop_pipeline($name);
		if ($err || !defined $rate || $rate eq '') { add_val($key, 'ERR'); add_note($key, $err || 'no time span'); next; }
		add_val($key, $rate);
	}
	sql_try('DROP TABLE IF EXISTS win_out');
	drop_stream($stream) if $have{sg};
	window_latency($r) if $have{pipe};
	return;
}

sub window_latency
{
	my ($r) = @_;
	my ($st, $pn) = ("s8l_r$r", "winlat_r$r");
	sql(slurp("$SQL/setup_latency.sql")) unless $LAT_SETUP++;
	sql('DROP TABLE IF EXISTS win_lat; CREATE TABLE win_lat (window_start timestamptz, window_end timestamptz, key text, events numeric)');
	if (!create_stream($st, 4)) { push @{ $WLAT{note} }, "r$r: create_stream failed"; return; }
	my ($ok, undef, $e) = sql_try("SELECT streamguard.create_window_pipeline('$pn', '$st', 'win_lat', '1 s', "
		  . q{aggregates => '{"events": "count(*)"}', key => '''all''', batch_size => 1000)});
	my $err = !$ok ? error_line($e) : wait_worker($pn) ? '' : "the pipeline's worker did not start";
	my $produced = $err ? undef : latency_produce("winlat_r$r", 'latency_sg.sql', { stream => $st });
	$err ||= 'producer failed' unless defined $produced;
	# the last window closes about a second after the producer stops
	$err ||= wait_until(30, 0.1, sub { (sql_value('SELECT coalesce(sum(events), 0) FROM win_lat') // -1) == $produced })
	  ? '' : 'the windows did not all close within 30 s';
	if (!$err)
	{
		my $row = sql_value("WITH w AS (SELECT window_end, max(pg_xact_commit_timestamp(xmin)) AS c FROM win_lat GROUP BY 1),
		                          l AS (SELECT extract(epoch FROM c - window_end) * 1000 AS ms FROM w)
		                     SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) || '|' ||
		                            round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) || '|' ||
		                            round(max(ms)::numeric, 1) || '|' || count(*) FROM l");
		my @f = split /\|/, $row // '';
		if (@f == 4) { push @{ $WLAT{$_} }, shift @f for qw(p50 p99 max windows); }
		else { $err = 'statistics query failed'; }
	}
	push @{ $WLAT{note} }, "r$r: $err" if $err;
	drop_pipeline($pn);
	drop_stream($st);
	sql_try('DROP TABLE IF EXISTS win_lat');
	return;
}

sub windows_report
{
	my @out = ("\n## Window close latency (append time)\n\n",
		"A window pipeline (tumbling 1 s, append time, one count per window) while $K{BENCH_LAT_CLIENTS} producer clients offer "
		  . "$K{BENCH_LAT_RATE} events/s (pgbench -R, one event per transaction) for $K{BENCH_LAT_SECONDS} s per repeat; "
		  . "a window's latency = pg_xact_commit_timestamp of its row - its end. p50 and p99 are over the windows of a repeat, "
		  . "the table gives their median over the repeats, max the maximum.\n\n",
		"| p50 ms | p99 ms | max ms | windows | p50 per repeat | target | met? |\n|---:|---:|---:|---:|---|---|---|\n");
	my ($p50, $p99) = (median($WLAT{p50} // [], '%.1f'), median($WLAT{p99} // [], '%.1f'));
	my $max = (sort { $b <=> $a } @{ $WLAT{max} // [] })[0];
	my $n = 0;
	$n += $_ for @{ $WLAT{windows} // [] };
	push @out, '| ' . join(' | ', $p50 // 'error', $p99 // '—', $max // '—', $n, join(' ', @{ $WLAT{p50} // [] }),
		'p50 ≤ 10 ms', defined $p50 ? ($p50 <= 10 ? 'yes' : '**no**') : 'no (failed)') . " |\n";
	push @out, "\nNotes: " . join('; ', @{ $WLAT{note} }) . "\n" if $WLAT{note};
	return @out;
}

# ---------------------------------------------------------------------------
# Run: repeats interleave the contenders (raw, streamguard, PgQ) so slow drift
# of the machine affects all of them alike.
# ---------------------------------------------------------------------------
my %BENCH = (single => \&bench_single, batch => \&bench_batch, drain => \&bench_drain,
	latency => \&bench_latency, remote => \&bench_remote, parallel => \&bench_parallel,
	start => \&bench_start, longpoll => \&bench_longpoll, group => \&bench_group, windows => \&bench_windows);
my @ONLY = split ' ', $K{BENCH_ONLY};

setup_contenders();
my $SERVER_VERSION = sql('SHOW server_version');
my ($T0, $LOAD0) = (time, loadavg());
for my $r (1 .. $K{BENCH_REPEAT})
{
	for my $b (grep { $_ ne 'long' } @ONLY)
	{
		log_msg("repeat $r/$K{BENCH_REPEAT}: $b");
		$BENCH{$b}->($r);
	}
}
for (grep { $_ eq 'long' } @ONLY)
{
	log_msg("long run (once, scaled down): $K{BENCH_LONG_EVENTS} events");
	bench_long();
}
my ($T1, $LOAD1) = (time, loadavg());
spurt("$WORK/latest.md", report());
charts("$WORK/charts");
$REMOTE->stop('fast', fail_ok => 1) if $REMOTE;
$NODE->stop('fast', fail_ok => 1);
exit 0;

sub loadavg { return join(' ', (split ' ', slurp('/proc/loadavg'))[ 0 .. 2 ]); }

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
sub report
{
	my $wall = int($T1) - int($T0);
	my ($os) = slurp('/etc/os-release') =~ /^PRETTY_NAME="?([^"\n]*)/m;
	my ($mem) = slurp('/proc/meminfo') =~ /^MemTotal:\s+(\d+)/m;
	my $nproc = qx(nproc);
	chomp $nproc;
	my @knobs = map { "$_=$K{$_}" } qw(BENCH_SECONDS BENCH_REPEAT BENCH_SLICES BENCH_CLIENTS BENCH_BATCH_CLIENTS
	  BENCH_DRAIN_EVENTS BENCH_DRAIN_PASSES BENCH_LAT_SECONDS BENCH_LAT_RATE BENCH_LAT_CLIENTS BENCH_LAT_POLL_MS
	  BENCH_REMOTE_EVENTS BENCH_LONG_EVENTS BENCH_LONG_CLIENTS);
	my @out = (
		"# streamguard benchmark results\n\n",
		'- date: ' . strftime('%Y-%m-%d %H:%M UTC', gmtime) . "; revision: " . ($ENV{BENCH_REV} || 'unknown') . "\n",
		"- machine: $nproc cores, " . sprintf('%.0f GiB', ($mem // 0) / 1048576) . ', ' . ($os // 'unknown OS') . ", PostgreSQL $SERVER_VERSION\n",
		"- settings: shared_buffers=$K{BENCH_SHARED_BUFFERS}, synchronous_commit=on, max_wal_size=4GB, checkpoint_timeout=15min, fsync on\n",
		"- @knobs BENCH_LONG_RETENTION=\"$K{BENCH_LONG_RETENTION}\" BENCH_ONLY=\"$K{BENCH_ONLY}\"; wall time "
		  . int($wall / 60) . 'm' . ($wall % 60) . "s\n",
		"- load average (1/5/15 min) at start: $LOAD0; at end: $LOAD1 (the suite itself keeps ~2 cores busy; a start value well above 0 means other work shared the machine)"
		  . ($K{BENCH_NICE} ne '' && $K{BENCH_NICE} != 0 ? "; suite run at nice $K{BENCH_NICE}" : '') . "\n",
		($have{sg} ? () : "- streamguard: not available in this run (rows marked pending)\n"), "\n");
	if (grep { /^(single|batch|drain|remote|parallel|group|windows)$/ } @ONLY)
	{
		push @out, "events/s are medians over the repeats; a ratio is the median over the repeats of contender / raw PostgreSQL baseline of the same benchmark and repeat (all measured in this run).\n\n",
		  "| benchmark | contender | events/s (median) | ratio vs raw baseline | target | met? |\n",
		  "|---|---|---:|---:|---|---|\n";
	}
	push @out, map { main_rows($_) } @ONLY;
	push @out, latency_report() if grep { $_ eq 'latency' } @ONLY;
	push @out, longpoll_report() if grep { $_ eq 'longpoll' } @ONLY;
	push @out, start_report()   if grep { $_ eq 'start' } @ONLY;
	push @out, long_report()    if grep { $_ eq 'long' } @ONLY;
	push @out, windows_report() if grep { $_ eq 'windows' } @ONLY;
	if (%VALS)
	{
		push @out, "\n## Per-repeat values (events/s)\n\n| benchmark | contender | values | notes |\n|---|---|---|---|\n";
		for my $k (sort keys %VALS)
		{
			my ($b, $c) = split /\|/, $k, 2;
			push @out, "| $b | $c |" . join('', map { ' ' . (num_list($_) ? fmt($_) : $_) } @{ $VALS{$k} }) . ' | ' . ($NOTES{$k} // '') . " |\n";
		}
	}
	return @out;
}

sub main_rows
{
	my ($b) = @_;
	return (
		row('single', $S1{raw}, $S1{raw}, undef, 'baseline'),
		row('single', $S1{sg1}, $S1{raw}, 0.9, '≥ 0.90 × plain INSERT'),
		row('single', $S1{sg4}, $S1{raw}, 0.9, '≥ 0.90 × plain INSERT'),
		row('single', $S1{pgq}, $S1{raw}, undef, 'reference'))
	  if $b eq 'single';
	return (
		row('batch', $S2{raw},  $S2{raw}, undef, 'baseline'),
		row('batch', $S2{copy}, $S2{raw}, undef, 'baseline of a COPY path'),
		row('batch', $S2{sg},   $S2{raw}, 0.7,   '≥ 0.70 × INSERT … SELECT'),
		"| batch | streamguard COPY path | n/a | — | ≥ 0.90 × COPY | n/a (no COPY path in this version) |\n",
		row('batch', $S2{pgq}, $S2{raw}, undef, 'reference'))
	  if $b eq 'batch';
	return (
		row($R1, $S5{copy}, $S5{copy}, undef, 'baseline'),
		row($R1, $S5{copyb}, $S5{copy}, undef, 'reference'),
		row($R1, $S5{copyb2}, $S5{copy}, undef, 'reference'),
		row($R1, $S5{'2pc'}, $S5{copyb}, 0.8, '≥ 0.80 × COPY in 1,000-row transactions'),
		row($R1, $S5{'2pc2'}, $S5{copyb}, 0.8, '≥ 0.80 × COPY in 1,000-row transactions'),
		row($R1, $S5{'2pc2'}, $S5{copyb2}, undef, 'ratio to COPY in 1,000-row transactions, 2 sessions', $S5{'2pc2'},
			$R1 . ' (÷ 2 sessions)'),
		(map { row($R1, $S5{$_}, $S5{copy}, undef, 'no target') } qw(off off2 alo amo)),
		row($R1, $S5{off2}, $S5{copyb2}, undef, 'ratio to COPY in 1,000-row transactions, 2 sessions', $S5{off2},
			$R1 . ' (÷ 2 sessions)'),
		row($R2, $S6{local}, $S6{local}, undef, 'baseline'),
		row($R2, $S6{local2}, $S6{local}, undef, 'reference'),
		row($R2, $S6{rem},   $S6{local}, 0.6, '≥ 0.60 × local source'),
		row($R2, $S6{rem2},  $S6{local}, 0.6, '≥ 0.60 × local source'),
		row($R2, $S6{rem2},  $S6{local2}, undef, 'ratio to the local source with 2 workers', $S6{rem2},
			$R2 . ' (÷ local, 2 workers)'))
	  if $b eq 'remote';
	my $poll_target = '≥ 0.70 × raw bound (drain target applied to poll)';
	return (
		row($D1, $S3{raw}, $S3{raw}, undef, 'baseline'),
		row($D1, $S3{sg},  $S3{raw}, 0.7,   $poll_target),
		row($D1, $S3{pgq}, $S3{raw}, undef, 'reference'),
		row($D2, $S3{raw}, $S3{raw}, undef, 'baseline'),
		row($D2, $S3{sg},  $S3{raw}, 0.7,   $poll_target),
		row($D2, $S3{peo}, $S3{raw}, 0.7,   '≥ 0.70 × raw bound'),
		row($D2, $S3{palo}, $S3{raw}, undef, 'reference'),
		row($D2, $S3{pgq}, $S3{raw}, undef, 'reference'),
		row($D2, $S3{peo}, $S3{palo}, 0.95, '≥ 0.95 × at_least_once', 'exactly_once vs at_least_once (drain→sink)', 'pipeline'))
	  if $b eq 'drain';
	return (
		row('parallel', $S7{1}, $S7{1}, undef, 'baseline'),
		row('parallel', $S7{2}, $S7{1}, 1.7, '≥ 1.70 × 1 worker (2 cores)'),
		row('parallel', $S7{4}, $S7{1}, 1.7, 'not slower than 2 workers'))
	  if $b eq 'parallel';
	return (
		row('windows', $S11{ups}, $S11{ups}, undef, 'baseline'),
		row('windows', $S11{win}, $S11{ups}, 0.8, '≥ 0.80 × upsert pipeline'))
	  if $b eq 'windows';
	return (
		row('group', $S8{1}, $S8{1}, undef, 'baseline'),
		row('group', $S8{2}, $S8{1}, 1.6, '≥ 1.60 × 1 client'),
		row('group', $S8{4}, $S8{1}, undef, 'reference (2 cores)'),
		row('group', $S8{p2}, $S8{1}, undef, 'reference: the same without groups'))
	  if $b eq 'group';
	return;
}

# one row of the main table: median events/s of <benchmark|contender>, the
# paired ratio to <base>, and whether it meets <target> (a ratio; undef: none).
# With $show_as: a ratio between two contenders, shown as benchmark $show_as.
sub row
{
	my ($b, $c, $base, $target, $ttext, $label, $show_as) = @_;
	my $vals = $VALS{"$b|$c"} // [];
	my $m = median($vals);
	my ($m_txt, $ratio, $met) = ('', '—', '—');
	if (!defined $m)
	{
		$m_txt = (grep { $_ eq 'PENDING' } @$vals) ? 'pending' : @$vals ? 'error' : 'not run';
		$met = $m_txt eq 'error' ? 'no (failed)' : 'pending' if defined $target;
	}
	else
	{
		$m_txt = fmt($m);
		# median over repeats of contender/baseline of the same repeat (paired:
		# they ran minutes apart at most, so slow machine drift cancels)
		my $pr = paired_ratio($vals, $VALS{"$b|$base"} // []);
		$ratio = sprintf('%.2f', $pr) if defined $pr;
		$met = $ratio + 0 >= $target ? 'yes' : '**no**' if defined $target && defined $pr;
	}
	$ratio = '1.00' if $c eq $base;
	return "| $show_as | $label | — | $ratio | $ttext | $met |\n" if defined $show_as;
	return "| $b | " . ($label // $c) . " | $m_txt | $ratio | $ttext | $met |\n";
}

# --- latency and long-run reports ------------------------------------------
sub lat_field
{
	my ($c, $f, $how) = @_;
	my @v = @{ $LAT{"$c|$f"} // [] };
	return median(\@v, '%.2f') if $how eq 'median';
	if ($how eq 'max')
	{
		my ($mx) = sort { $b <=> $a } num_list(@v);
		return defined $mx ? sprintf('%.2f', $mx) : undef;
	}
	my @n = grep { /^-?[0-9]+$/ } @v;
	my $sum = 0;
	$sum += $_ for @n;
	return @n ? $sum : undef;
}

# median over repeats of p50 / base p50
sub lat_ratio
{
	my ($c, $base) = @_;
	my $v = paired_ratio($LAT{"$c|p50"} // [], $LAT{"$base|p50"} // []);
	return defined $v ? sprintf($v < 0.1 ? '%.4f' : '%.2f', $v) : undef;
}

sub latency_report
{
	my @out = ("\n## End-to-end latency, append commit → sink commit\n\n",
		"$K{BENCH_LAT_CLIENTS} producer clients offer $K{BENCH_LAT_RATE} events/s (pgbench -R, one event per transaction) for $K{BENCH_LAT_SECONDS} s per contender and repeat; latency = pg_xact_commit_timestamp(sink row xmin) - pg_xact_commit_timestamp(event row xmin). p50 and p99 are medians over the repeats, max the maximum, counts summed over the repeats. PgQ: pgqd with default settings; the PgQ and naive consumers sleep $K{BENCH_LAT_POLL_MS} ms when idle.\n\n",
		"| contender | p50 ms | p99 ms | max ms | events appended | delivered | lost | duplicates | p50 ÷ PgQ p50 | p50 ÷ naive p50 | target | met? |\n",
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
	for my $c (@S4{qw(sg pgq raw)})
	{
		my @vals = @{ $LAT{"$c|p50"} // [] };
		my %f = map { $_ => scalar lat_field($c, $_, 'median') } qw(p50 p99);
		$f{max} = lat_field($c, 'max', 'max');
		$f{$_} = lat_field($c, $_, 'sum') for qw(appended delivered lost dup);
		my ($tgt, $met) = ('reference', '—');
		if ($c eq $S4{sg})
		{
			$tgt = 'p50 ≤ 2 ms, p99 ≤ 20 ms, nothing lost';
			$met = !defined $f{p50} ? ((grep { $_ eq 'PENDING' } @vals) ? 'pending' : 'no (failed)')
			  : ($f{p50} <= 2 && ($f{p99} // 0) <= 20 && ($f{lost} // 1) == 0 && ($f{dup} // 1) == 0 && !grep { $_ eq 'ERR' } @vals)
			  ? 'yes' : '**no**';
		}
		$f{p50} //= (grep { $_ eq 'PENDING' } @vals) ? 'pending' : @vals ? 'error' : 'not run';
		push @out, '| ' . join(' | ', $c, $f{p50}, (map { $f{$_} // '—' } qw(p99 max)), fmt($f{appended}), fmt($f{delivered}),
				(map { $f{$_} // '—' } qw(lost dup)), lat_ratio($c, $S4{pgq}) // '—', lat_ratio($c, $S4{raw}) // '—', $tgt, $met) . " |\n";
	}
	push @out, "\nPer repeat:\n\n",
	  "| contender | p50 ms | p99 ms | max ms | appended | lost | offered rate ev/s | pipeline batches / PgQ ticks | notes |\n",
	  "|---|---|---|---|---|---|---|---|---|\n";
	for my $c (@S4{qw(sg pgq raw)})
	{
		push @out, "| $c |" . join(' |', map { join('', map { " $_" } @{ $LAT{"$c|$_"} // [] }) } qw(p50 p99 max appended lost rate batches))
		  . ' | ' . ($LAT_NOTE{$c} // '') . " |\n";
	}
	return @out;
}

sub mb { return sprintf('%.1f', $_[0] / 1048576); }

# ---------------------------------------------------------------------------
# Charts: PNGs of the medians of this run, drawn by gnuplot (Debian package
# gnuplot-nox; scripts/install-deps.sh installs it).  Without gnuplot the
# charts are skipped with a message; the table is the result either way.
#   bench-<benchmark>.png: median events/s per contender, horizontal bars
#     (drain: two panels, drain and drain→sink);
#   bench-latency.png, bench-longpoll.png: p50, p99 and max latency per
#     contender (log scale).
# Each chart's data file (tab-separated) and gnuplot script sit next to it.
# ---------------------------------------------------------------------------
sub charts
{
	my ($dir) = @_;
	my ($gnuplot) = grep { -x } map { "$_/gnuplot" } split /:/, $ENV{PATH};
	if (!$gnuplot)
	{
		log_msg('charts skipped: gnuplot is not installed (Debian: apt-get install gnuplot-nox)');
		return;
	}
	make_path($dir);
	my $made = 0;
	my %groups = (
		single   => [ [ 'single', [ @S1{qw(raw sg1 sg4 pgq)} ] ] ],
		batch    => [ [ 'batch', [ @S2{qw(raw copy sg pgq)} ] ] ],
		drain    => [ [ $D1, [ @S3{qw(raw sg pgq)} ] ], [ $D2, [ @S3{qw(raw sg peo palo pgq)} ] ] ],
		remote   => [ [ $R1, [ @S5{qw(copy copyb copyb2 2pc 2pc2 off off2 alo amo)} ] ], [ $R2, [ @S6{qw(local local2 rem rem2)} ] ] ],
		parallel => [ [ 'parallel', [ @S7{qw(1 2 4)} ] ] ],);
	for my $b (grep { $groups{$_} } @ONLY)
	{
		my @panels;
		for my $g (@{ $groups{$b} })
		{
			my ($bench, $contenders) = @$g;
			# [label, median events/s, paired ratio to the first (the baseline), as in the table]
			my $base = $VALS{"$bench|$contenders->[0]"} // [];
			my @rows = grep { defined $_->[1] }
			  map { [ $_, median($VALS{"$bench|$_"} // [], ''), paired_ratio($VALS{"$bench|$_"} // [], $base) ] } @$contenders;
			push @panels, [ $bench, \@rows ] if @rows;
		}
		next unless @panels;
		$made += chart_bars($gnuplot, $dir, $b, \@panels);
	}
	$made += chart_latency($gnuplot, $dir, 'latency',
		"End-to-end latency, append commit -> sink commit ($K{BENCH_LAT_RATE} events/s offered)", latency_rows())
	  if grep { $_ eq 'latency' } @ONLY;
	$made += chart_latency($gnuplot, $dir, 'longpoll',
		"Long-poll: append commit -> poll result in the client ($K{BENCH_LAT_RATE} events/s offered)", longpoll_rows())
	  if grep { $_ eq 'longpoll' } @ONLY;
	log_msg("charts: $made PNG file(s) in $dir") if $made;
	return;
}

# the title line every chart carries: what, when, the machine's load
sub chart_subtitle
{
	return sprintf('streamguard %s, %s; load average %s (shared machine)',
		$ENV{BENCH_REV} || 'unknown', strftime('%Y-%m-%d %H:%M UTC', gmtime), $LOAD1);
}

# a gnuplot double-quoted string
sub gp_str { my ($s) = @_; $s =~ s/\\/\\\\/g; $s =~ s/"/\\"/g; $s =~ s/\n/\\n/g; return qq("$s"); }

# a label for a tab-separated data file: gnuplot reads double quotes there
sub gp_label { my ($s) = @_; $s =~ tr/"\t/' /; return $s; }

# runs gnuplot on $script; 1 if $png was written
sub gnuplot_run
{
	my ($gnuplot, $script, $png) = @_;
	my $rc = system("'$gnuplot' '$script' >'$script.log' 2>&1");
	if ($rc != 0 || !-s $png)
	{
		log_msg("chart $png failed: " . slurp("$script.log"));
		return 0;
	}
	return 1;
}

# one bar chart (a panel per benchmark of the group) of median events/s
sub chart_bars
{
	my ($gnuplot, $dir, $name, $panels) = @_;
	my $png = "$dir/bench-$name.png";
	my $n = 0;
	$n += @{ $_->[1] } for @$panels;
	my $height = 120 + 60 * @$panels + 34 * $n;
	my @gp = ("set terminal pngcairo noenhanced size 1000,$height font 'Sans,10'\n", "set output " . gp_str($png) . "\n",
		"set datafile separator tab\n", "set style fill solid 0.85 border -1\n", "unset key\n",
		"set xlabel 'thousand events/s (median over the repeats); x baseline: the ratio of the table'\n", "set xrange [0:*]\n",
		"set offsets 0, graph 0.3, 0.5, 0.5\n", "set grid xtics\n", "set lmargin 52\n",
		"set multiplot layout " . scalar(@$panels) . ",1 title " . gp_str("$name: throughput vs raw PostgreSQL and PgQ\n" . chart_subtitle()) . "\n");
	my $i = 0;
	for my $p (@$panels)
	{
		my ($bench, $rows) = @$p;
		my $dat = "$dir/bench-$name-" . ++$i . '.dat';
		# top to bottom as in the table: gnuplot's y grows upwards
		spurt($dat, map { sprintf("%s\t%.1f\t%s\n", gp_label($_->[0]), $_->[1], defined $_->[2] ? sprintf('%.2f', $_->[2]) : '?') } reverse @$rows);
		push @gp, "set title " . gp_str($bench) . "\n",
		  "plot " . gp_str($dat) . " using (0):0:(0):(\$2/1000):(\$0-0.35):(\$0+0.35):ytic(1) with boxxyerror lc rgb '#4a7ebb', \\\n",
		  "     '' using (\$2/1000):0:(sprintf(' %s/s, %s x baseline', gprintf('%.1s%c', \$2), strcol(3))) with labels left\n";
	}
	push @gp, "unset multiplot\n";
	spurt("$dir/bench-$name.gp", @gp);
	return gnuplot_run($gnuplot, "$dir/bench-$name.gp", $png);
}

# p50 / p99 / max latency per contender, log scale
sub chart_latency
{
	my ($gnuplot, $dir, $name, $title, $rows) = @_;
	my $png = "$dir/bench-$name.png";
	return 0 unless @$rows;
	spurt("$dir/bench-$name.dat", map { join("\t", gp_label($_->[0]), @$_[ 1 .. 3 ]) . "\n" } reverse @$rows);
	my $height = 200 + 70 * @$rows;
	spurt("$dir/bench-$name.gp",
		"set terminal pngcairo noenhanced size 1000,$height font 'Sans,10'\n", "set output " . gp_str($png) . "\n",
		"set datafile separator tab\n", "set style fill solid 0.85 border -1\n",
		"set title " . gp_str("$title\n" . chart_subtitle()) . "\n",
		"set logscale x\n", "set xlabel 'milliseconds (log scale)'\n", "set grid xtics mxtics\n",
		"set key outside bottom center horizontal\n", "set lmargin 40\n", "set offsets 0, 0, 0.5, 0.5\n", "set xrange [0.1:*]\n",
		"plot " . gp_str("$dir/bench-$name.dat") . " using (0.1):0:(0.1):2:(\$0-0.3):(\$0-0.05):ytic(1) with boxxyerror lc rgb '#4a7ebb' title 'p50 (median over repeats)', \\\n",
		"     '' using (0.1):0:(0.1):3:(\$0+0.05):(\$0+0.3) with boxxyerror lc rgb '#d9822b' title 'p99 (median over repeats)', \\\n",
		"     '' using 4:0 with points pt 7 ps 1.3 lc rgb '#b03030' title 'max', \\\n",
		"     '' using 2:(\$0-0.175):(sprintf(' %.2f', \$2)) with labels left notitle, \\\n",
		"     '' using 3:(\$0+0.175):(sprintf(' %.2f', \$3)) with labels left notitle\n");
	return gnuplot_run($gnuplot, "$dir/bench-$name.gp", $png);
}

# [contender, p50, p99, max] of the latency benchmark (medians over the repeats; max: the maximum)
sub latency_rows
{
	my @rows;
	for my $c (@S4{qw(sg pgq raw)})
	{
		my ($p50, $p99, $max) = (lat_field($c, 'p50', 'median'), lat_field($c, 'p99', 'median'), lat_field($c, 'max', 'max'));
		push @rows, [ $c, $p50, $p99 // $p50, $max // $p99 // $p50 ] if defined $p50;
	}
	return \@rows;
}

# the same of the long-poll benchmark
sub longpoll_rows
{
	my @rows;
	for my $m (@LP_MODES)
	{
		my ($p50, $p99) = map { median($LP{"$m|$_"} // [], '%.2f') } qw(p50 p99);
		my ($max) = sort { $b <=> $a } num_list(@{ $LP{"$m|max"} // [] });
		push @rows, [ $S9{$m}, $p50, $p99 // $p50, $max // $p99 // $p50 ] if defined $p50;
	}
	return \@rows;
}

sub long_report
{
	my @out = ("\n## Long run — SCALED DOWN: " . fmt($K{BENCH_LONG_EVENTS})
		  . " events (the target is stated for 10 M events, over a production lifetime) in about "
		  . ($LONG{run_s} // '?') . " s with retention '$K{BENCH_LONG_RETENTION}', once\n\n");
	return (@out, 'long run: ' . ($LONG{status} // 'not run') . "\n") if ($LONG{status} // '') ne 'ok';
	my %L = %LONG;
	my $ratio_p = $L{prod_first} > 0 ? sprintf('%.2f', $L{prod_last} / $L{prod_first}) : '';
	my $ratio_q = $L{pipe_first} > 0 ? sprintf('%.2f', $L{pipe_last} / $L{pipe_first}) : '';
	my $met = sub { ($_[0] || 0) >= 0.9 ? 'yes' : '**no**' };
	push @out,
	  "$K{BENCH_LONG_CLIENTS} producers (append_batch, 1,000 events per transaction) and an exactly_once pipeline (batch_size 1000, INSERT into a sink) run concurrently on a stream with 4 partitions, retention '$K{BENCH_LONG_RETENTION}' (segment_interval $L{segment_interval}). Producers ran $L{run_s} s ($L{txns} transactions); windows of $L{window_s} s = 10 % of the time all producers ran. Pipeline: $L{batches} batches; it finished $L{tail_s} s after the last append (start of its last batch); sink rows $L{sink_rows} ($L{sink_distinct} distinct) of $K{BENCH_LONG_EVENTS}.\n\n",
	  "| throughput | first 10 % (events/s) | last 10 % (events/s) | last ÷ first | target (scaled) | met? |\n",
	  "|---|---:|---:|---:|---|---|\n",
	  '| producers, append_batch | ' . fmt($L{prod_first}) . ' | ' . fmt($L{prod_last}) . " | $ratio_p | ≥ 0.90 | " . $met->($ratio_p) . " |\n",
	  '| pipeline, exactly_once | ' . fmt($L{pipe_first}) . ' | ' . fmt($L{pipe_last}) . " | $ratio_q | ≥ 0.90 | " . $met->($ratio_q) . " |\n",
	  "\nProducers over the whole run: " . fmt($L{prod_all}) . " events/s.\n";
	push @out, "\n**check failed**: the sink holds $L{sink_rows} rows ($L{sink_distinct} distinct) of $K{BENCH_LONG_EVENTS} events.\n"
	  if $L{sink_rows} ne $K{BENCH_LONG_EVENTS} || $L{sink_distinct} ne $K{BENCH_LONG_EVENTS};
	push @out, "\n| point | t (s) | events appended | consumed by the pipeline | retained events | segments | segments' size (MB) | lost to retention | streamguard catalog (MB) | sink (MB) |\n",
	  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
	for my $p ([ at10 => '10 % of the run' ], [ at50 => '50 % of the run' ], [ at100 => 'end of the producers' ],
		[ atdrain => 'pipeline drained' ], [ atmax => "largest segments' size" ])
	{
		next if ($L{ $p->[0] } // '') eq '';
		my ($e, $a, $c, $rt, $sg, $sb, $l, $cb, $kb) = split ' ', $L{ $p->[0] };
		push @out, "| $p->[1] | " . join(' | ', sprintf('%.1f', $e - $L{t_start}), fmt($a), fmt($c), fmt($rt), $sg, mb($sb), $l, mb($cb), mb($kb)) . " |\n";
	}
	push @out, "\n($L{samples} samples, one per second; t from the start of the producers.) Pipeline batches: the longest fetch seen in the checkpoint log (last 64 batches, sampled every second) was $L{fetch_max} ms, the median of those per-second maxima $L{fetch_med} ms; the longest SQL + commit $L{proc_max} ms. Checkpoints started during the run: $L{checkpoints}.\n";
	return @out;
}
