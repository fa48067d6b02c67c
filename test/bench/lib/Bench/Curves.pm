#
# test/bench/lib/Bench/Curves.pm -- benchmark curves: how cost grows with the
# work.  Each point of a curve is a short run (BENCH_CURVES_SECONDS); each
# curve has its own list of points (a knob).  On its own server (enough
# background worker slots, pipeline, stream and connection slots for the
# largest point), once, after the repeats of the others:
#   pipelines   N idle pipelines (all on one stream nothing is appended to)
#               plus one more on its own stream: the server's CPU while nothing
#               is appended (utime + stime of the postmaster and its children,
#               /proc/<pid>/stat), and the wake-up latency of the extra
#               pipeline (commit of one append -> commit of its sink row,
#               pg_xact_commit_timestamp, p50/p99 over BENCH_CURVES_WAKES);
#   streams     N streams exist: idle CPU, single-event appends to one of them
#               (1 client: events/s, p50/p99 ms) and a poll of 100 events of
#               it (p50/p99 ms);
#   partitions  a stream of P partitions: appends (4 clients, events/s) and a
#               pipeline's drain rate of BENCH_CURVES_EVENTS events;
#   clients     C producer clients appending single events to a 4-partition
#               stream: events/s and p99 ms;
#   workers     a CPU-bound pipeline (Parallel.pm's SQL) with W workers:
#               drain rate of BENCH_CURVES_EVENTS events;
#   backlog     a 4-partition stream with a retention (30 min, segments of
#               2 s) holding N unread events (BENCH_CURVES_BACKLOG): the fill
#               rate (append_batch, 1,000 events a transaction), appends (4
#               clients) and polls from the head while the backlog is there,
#               a pipeline's drain rate from the head, storage and segments,
#               and the time retention takes to drop the older half once it
#               is cut to half the oldest segment's age.
# Each curve is a table in latest.md with the ratio of its far end to its
# start, a verdict (no figure more than 20 % worse at the far end, except
# where a physical limit explains it) and a chart bench-curves-<curve>.png.  Something that should stay
# flat (wake-up latency over idle pipelines, append and poll latency over
# streams) and grows is a bug to find.
#
package Bench::Curves;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use POSIX ();
use Time::HiRes qw(time sleep);

use Bench;
use Bench::Pg;
use Bench::SG;

my $LIST = [ sub { $_[0] =~ /^\s*[0-9]+(\s+[0-9]+)*\s*$/ }, 'a list of non-negative integers, e.g. "1 10 100"' ];

# Parallel.pm's CPU-bound pipeline (about 0.1 ms of CPU per event)
my $CPU_SQL = q{INSERT INTO cv_sink (partition, seq, key, payload)
SELECT partition, seq, key,
       jsonb_build_object('n', (SELECT count(*) FROM jsonb_each(payload)),
                          'h', (SELECT md5(string_agg(md5(payload::text || i), '')) FROM generate_series(1, 20) AS i))
FROM batch};
my $COPY_SQL = 'INSERT INTO cv_sink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch';

# the curves, in the order they run: name => [title, x label, measures:
# [key, heading, printf format, kind, why]]; kind: hi (higher is better), lo
# (lower is better), grows (expected to grow with the work: no verdict), text
# (a column without ratio or chart); why: the physical limit that explains a
# far end more than 20 % worse than the start, if there is one; floor: a far
# end below it is within the measure's resolution and not judged (idle CPU:
# 1 % of a core, 5 clock ticks of a 5 s point at 100 Hz)
my $CORES = '2 cores: ';
my @CURVES = (
	[ pipelines => 'idle pipelines', 'idle pipelines',
		[ [ cpu => 'idle server CPU, % of a core', '%.2f', 'lo', 'each idle pipeline wakes at most once a second: idle CPU linear in the pipelines by design' ],
			[ wake50 => 'wake-up p50 ms', '%.2f', 'lo' ], [ wake99 => 'wake-up p99 ms', '%.2f', 'lo' ],
			[ top => 'idle CPU by process, %', '%s', 'text' ] ] ],
	[ streams => 'streams', 'streams in the database',
		[ [ cpu => 'idle server CPU, % of a core', '%.2f', 'lo', undef, 1.0 ], [ eps => 'append events/s (1 client)', '%.0f', 'hi' ],
			[ app50 => 'append p50 ms', '%.3f', 'lo' ], [ app99 => 'append p99 ms', '%.3f', 'lo' ],
			[ poll50 => 'poll p50 ms', '%.3f', 'lo' ], [ poll99 => 'poll p99 ms', '%.3f', 'lo' ],
			[ top => 'idle CPU by process, %', '%s', 'text' ] ] ],
	[ partitions => 'partitions of the stream', 'partitions',
		[ [ eps => 'append events/s (4 clients)', '%.0f', 'hi' ], [ drain => 'pipeline drain events/s', '%.0f', 'hi' ] ] ],
	[ clients => 'producer clients', 'producer clients',
		[ [ eps => 'append events/s', '%.0f', 'hi' ],
			[ app50 => 'append p50 ms', '%.3f', 'lo', $CORES . 'beyond 2 clients each append waits for the others\' CPU (latency ~ clients / cores)' ],
			[ app99 => 'append p99 ms', '%.3f', 'lo', $CORES . 'beyond 2 clients each append waits for the others\' CPU (latency ~ clients / cores)' ] ] ],
	[ workers => 'pipeline workers, CPU-bound SQL', 'workers => N',
		[ [ drain => 'drain events/s', '%.0f', 'hi' ] ] ],
	[ backlog => 'backlog of a stream with retention', 'events waiting',
		[ [ fill => 'fill events/s (append_batch)', '%.0f', 'hi' ], [ eps => 'append events/s (4 clients)', '%.0f', 'hi' ],
			[ app99 => 'append p99 ms', '%.3f', 'lo' ], [ poll50 => 'poll p50 ms (head)', '%.3f', 'lo' ],
			[ poll99 => 'poll p99 ms (head)', '%.3f', 'lo' ], [ head => 'poll drain events/s (head)', '%.0f', 'hi' ],
			[ drain => 'pipeline drain events/s (head)', '%.0f', 'hi' ], [ mb => 'storage MB', '%.0f', 'grows' ],
			[ bpe => 'bytes/event', '%.0f', 'lo' ], [ segs => 'segments', '%d', 'grows' ],
			[ cut => 'retention cut: segments before -> after, s', '%s', 'text' ] ] ],);

sub knobs
{
	return (
		BENCH_CURVES_SECONDS    => [ 5,                 'int' ],
		BENCH_CURVES_WAKES      => [ 30,                'int' ],
		BENCH_CURVES_EVENTS     => [ 40000,             'k2' ],
		BENCH_CURVES_PIPELINES  => [ '0 10 50 100 200', $LIST ],
		BENCH_CURVES_STREAMS    => [ '1 10 100 1000',   $LIST ],
		BENCH_CURVES_PARTITIONS => [ '1 4 16 64',       $LIST ],
		BENCH_CURVES_CLIENTS    => [ '1 2 4 8 16 32 64 128', $LIST ],
		BENCH_CURVES_WORKERS    => [ '1 2 4',           $LIST ],
		BENCH_CURVES_BACKLOG    => [ '100000 1000000',  $LIST ],);
}

sub once { return 1; }
sub node { return $_[0]{node}; }

sub points { my ($curve) = @_; return sort { $a <=> $b } split ' ', $K{ 'BENCH_CURVES_' . uc $curve }; }
sub most   { my ($curve) = @_; return (points($curve))[-1] // 0; }

# its own server, sized for the largest point of every curve
sub setup
{
	my ($self) = @_;
	my $pipes   = most('pipelines') + most('workers') + 8;
	my $streams = most('streams') + most('pipelines') + 64;
	my $parts   = most('streams') + most('pipelines') + 4 * most('partitions') + 1024;
	$self->{node} = start_cluster('curves',
		'max_connections = ' . (most('clients') + 30),
		'max_worker_processes = ' . ($pipes + 16),
		"streamguard.max_pipelines = $pipes",
		"streamguard.database_max_pipelines = $pipes",
		'streamguard.reserved_worker_processes = 4',
		"streamguard.database_max_workers = $pipes",
		"streamguard.max_streams = $streams",
		"streamguard.database_max_streams = $streams",
		"streamguard.max_partitions = $parts")
	  or die "bench: curves: could not start its server\n";
	on_node($self->{node}, sub {
		my ($ok, undef, $err) = sql_try('CREATE EXTENSION streamguard');
		$self->{why} = 'CREATE EXTENSION streamguard failed: ' . error_line($err) unless $ok;
		($ok, undef, $err) = sql_try(slurp("$SQL/setup_pipeline.sql") . slurp("$SQL/setup_curves.sql")) if $ok;
		$self->{why} //= 'setup failed: ' . error_line($err) unless $ok;
		($self->{pm}) = slurp($self->{node}->data_dir . '/postmaster.pid') =~ /^([0-9]+)/;
		$self->{why} //= 'no postmaster.pid' unless $self->{pm};
	});
	return;
}

sub run
{
	my ($self) = @_;
	if ($self->{why}) { log_msg("curves: $self->{why}"); return; }
	for my $c (@CURVES)
	{
		my $name = $c->[0];
		my $t0 = time;
		my $m = "curve_$name";
		eval { $self->$m(); 1 } or $self->note($name, 'stopped: ' . error_line($@));
		log_msg(sprintf('curves: %s done in %.0f s', $name, time - $t0));
	}
	return;
}

sub note { my ($self, $curve, $what) = @_; push @{ $self->{notes_of}{$curve} }, $what; log_msg("curves: $curve: $what"); return; }
sub put  { my ($self, $curve, $x, %v) = @_; $self->{pt}{$curve}{$x}{$_} = $v{$_} for keys %v; return; }

# ---------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------

# CPU ticks used so far by the postmaster $pm (its own and its reaped
# children's) and by each of its live children: { process title (digits as
# N) => ticks }
sub server_ticks
{
	my ($pm) = @_;
	my %t;
	opendir(my $d, '/proc') or return \%t;
	for my $pid (grep { /^[0-9]+$/ } readdir $d)
	{
		my $st = slurp("/proc/$pid/stat");
		next unless $st =~ s/^.*\)\s+//s;
		# after the command: state ppid ... utime (14th field) stime cutime cstime
		my @f = split ' ', $st;
		if ($pid == $pm) { $t{postmaster} += $f[11] + $f[12]; $t{'exited children'} += $f[13] + $f[14]; next; }
		next unless $f[1] == $pm;
		(my $title = slurp("/proc/$pid/cmdline")) =~ s/\0+/ /g;
		$title =~ s/^postgres:\s*//;
		$title =~ s/^[\w.-]+:\s+//;   # the cluster name
		$title =~ s/\s+$//;
		$title =~ s/[0-9]+/N/g;
		$t{$title} += $f[11] + $f[12];
	}
	closedir $d;
	return \%t;
}

# % of one core the server used over BENCH_CURVES_SECONDS with no client,
# and which processes used most (title: %, the top 3)
sub idle_cpu
{
	my ($self) = @_;
	my ($c0, $t0) = (server_ticks($self->{pm}), time);
	sleep $K{BENCH_CURVES_SECONDS};
	my ($c1, $t1) = (server_ticks($self->{pm}), time);
	my $f = 100 / POSIX::sysconf(POSIX::_SC_CLK_TCK) / ($t1 - $t0);
	my %d = map { $_ => ($c1->{$_} - ($c0->{$_} // 0)) * $f } keys %$c1;
	my $sum = 0;
	$sum += $_ for values %d;
	my @top = grep { $d{$_} > 0 } (sort { $d{$b} <=> $d{$a} } keys %d)[ 0 .. 2 ];
	return (cpu => $sum, top => join(', ', map { sprintf('%s %.1f', $_, $d{$_}) } grep { defined } @top) || '—');
}

# a pgbench run logging every transaction (-l): { tps, p50, p99 } (ms), or nothing
sub timed_pgbench
{
	my ($name, $script, $vars, @args) = @_;
	my $prefix = "$LOGS/${name}_tx";
	unlink glob("$prefix.*");
	my $res = pgbench($name, $script, $vars, '-l', "--log-prefix=$prefix", @args) or return;
	my @us;
	for my $f (glob("$prefix.*"))
	{
		open(my $fh, '<', $f) or next;
		while (<$fh>) { my @x = split ' '; push @us, $x[2] if @x >= 3; }
		close $fh;
	}
	@us = sort { $a <=> $b } @us;
	return unless @us;
	my $pct = sub { $us[ int($_[0] * $#us + 0.5) ] / 1000 };
	return { %$res, p50 => $pct->(0.5), p99 => $pct->(0.99) };
}

# pgbench -c $c clients (-j 2 at most) appending single events to $stream for
# BENCH_CURVES_SECONDS
sub appends
{
	my ($name, $stream, $c) = @_;
	checkpoint();
	# a second of warm-up: the first appends to a new stream (or by new
	# connections) are slower
	pgbench("${name}_warm", 'append_single_sg.sql', { stream => $stream }, -c => $c, -j => ($c < 2 ? 1 : 2), -T => 1);
	return timed_pgbench($name, 'append_single_sg.sql', { stream => $stream },
		-c => $c, -j => ($c < 2 ? 1 : 2), -T => $K{BENCH_CURVES_SECONDS});
}

# waits until $n pipelines named $like are running; '' or why not
sub wait_running
{
	my ($like, $n) = @_;
	my $c = 0;
	return '' if wait_until(120, 0.2, sub {
		$c = sql_value("SELECT count(*) FROM streamguard.pipelines WHERE pipeline LIKE '$like' AND state = 'running' AND worker_pid IS NOT NULL") // 0;
		$c >= $n;
	});
	return "$c of $n pipelines running after 120 s";
}

# a pipeline draining $stream (all of it) into cv_sink: events/s or undef
sub drain_rate
{
	my ($self, $curve, $x, $stream, $sql, %opt) = @_;
	sql(sink_ddl('cv_sink'));
	my $n = stream_events($stream);
	checkpoint();
	my $name = "cv_${curve}_$x";
	my $err = create_pipeline($name, $stream, $sql, %opt);
	$err ||= wait_pipeline($stream, $name, $n, $K{BENCH_PIPELINE_TIMEOUT});
	drop_pipeline($name);
	my $st = $err ? undef : sink_stats('cv_sink');
	$err ||= "sink holds $st->{rows} rows of $n" if $st && $st->{rows} != $n;
	$err ||= 'a single batch: no time span' if $st && !defined $st->{rate};
	$self->note($curve, "$x: $err") if $err;
	return $err ? undef : $st->{rate};
}

# ---------------------------------------------------------------------------
# The curves
# ---------------------------------------------------------------------------

sub curve_pipelines
{
	my ($self) = @_;
	create_stream('cv_idle', 1) && create_stream('cv_wake', 1) or return $self->note('pipelines', 'create_stream failed');
	sql('TRUNCATE cv_wake_sink, cv_wake_x; CREATE TABLE cv_idle_sink (n int)');
	my $err = create_pipeline('cv_wake', 'cv_wake', q{INSERT INTO cv_wake_sink (ev) SELECT (payload->>'i')::int FROM batch});
	$err ||= wait_running('cv_wake', 1);
	return $self->note('pipelines', "the wake-up pipeline: $err") if $err;
	my ($have, $ev) = (0, 1);
	for my $n (points('pipelines'))
	{
		if ($n > $have)
		{
			my ($ok, undef, $e) = sql_try("SELECT count(streamguard.create_pipeline('cv_idle_' || g, 'cv_idle', "
				  . "'INSERT INTO cv_idle_sink SELECT 1 FROM batch', batch_size => 1000)) FROM generate_series($have + 1, $n) AS g");
			$err = $ok ? wait_running('cv_idle_%', $n) : error_line($e);
			if ($err) { $self->note('pipelines', "$n: $err"); last; }
			$have = $n;
		}
		sleep 2;   # the new workers' start-up is not idle time
		my %v = $self->idle_cpu;
		my $w = $K{BENCH_CURVES_WAKES};
		my ($ok, undef, $e) = sql_try("CALL bench_curves_wake('cv_wake', $ev, $w)", timeout => 30 * $w + 60);
		if ($ok)
		{
			@v{qw(wake50 wake99)} = split /\|/, sql(
				"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) || '|' || percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
				 FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(s.xmin) - pg_xact_commit_timestamp(x.x::text::xid)) * 1000 AS ms
				       FROM cv_wake_sink s JOIN cv_wake_x x USING (ev) WHERE ev >= $ev) AS l");
		}
		else { $self->note('pipelines', "$n: wake-up: " . error_line($e)); }
		$ev += $w;
		$self->put('pipelines', $n, %v);
	}
	sql_try("SELECT streamguard.drop_pipeline(pipeline) FROM streamguard.pipelines WHERE pipeline LIKE 'cv_%'");
	drop_stream($_) for qw(cv_idle cv_wake);
	sql_try('DROP TABLE IF EXISTS cv_idle_sink');
	return;
}

sub curve_streams
{
	my ($self) = @_;
	my $have = 0;
	for my $n (points('streams'))
	{
		next if $n < 1;
		if ($n > $have)
		{
			my ($ok, undef, $e) = sql_try("DO \$\$ BEGIN FOR g IN " . ($have + 1) . " .. $n LOOP "
				  . "PERFORM streamguard.create_stream('cv_s_' || g, 1); COMMIT; END LOOP; END \$\$", timeout => 1800);
			if (!$ok) { $self->note('streams', "$n: create_stream: " . error_line($e)); last; }
			$have = $n;
		}
		checkpoint();
		sleep 2;
		my %v = $self->idle_cpu;
		my $a = appends("cv_streams_$n", 'cv_s_1', 1);
		@v{qw(eps app50 app99)} = @$a{qw(tps p50 p99)} if $a;
		my $p = timed_pgbench("cv_poll_$n", 'curves_poll.sql', { stream => 'cv_s_1', consumer => 'cv_poll' },
			-c => 1, -j => 1, -t => 500);
		@v{qw(poll50 poll99)} = @$p{qw(p50 p99)} if $p;
		$self->note('streams', "$n: a pgbench run failed") unless $a && $p;
		$self->put('streams', $n, %v);
	}
	sql_try("DO \$\$ BEGIN FOR g IN 1 .. $have LOOP PERFORM streamguard.drop_stream('cv_s_' || g, force => true); COMMIT; END LOOP; END \$\$",
		timeout => 1800);
	return;
}

sub curve_partitions
{
	my ($self) = @_;
	for my $p (points('partitions'))
	{
		next if $p < 1;
		my $st = "cv_p$p";
		if (!create_stream($st, $p)) { $self->note('partitions', "$p: create_stream failed"); next; }
		my %v;
		my $a = appends("cv_parts_$p", $st, 4);
		$v{eps} = $a->{tps} if $a;
		if (prefill("cv_parts_fill_$p", 'append_batch_sg.sql', { stream => $st }, $K{BENCH_CURVES_EVENTS} / 1000))
		{
			$v{drain} = $self->drain_rate('partitions', $p, $st, $COPY_SQL);
		}
		$self->put('partitions', $p, %v);
		drop_stream($st);
	}
	sql_try('DROP TABLE IF EXISTS cv_sink');
	return;
}

sub curve_clients
{
	my ($self) = @_;
	create_stream('cv_c', 4) or return $self->note('clients', 'create_stream failed');
	for my $c (points('clients'))
	{
		next if $c < 1;
		my $a = appends("cv_clients_$c", 'cv_c', $c);
		$a ? $self->put('clients', $c, eps => $a->{tps}, app50 => $a->{p50}, app99 => $a->{p99}) : $self->note('clients', "$c: pgbench failed");
	}
	drop_stream('cv_c');
	return;
}

sub curve_workers
{
	my ($self) = @_;
	create_stream('cv_w', 4) && prefill('cv_workers_fill', 'append_batch_sg.sql', { stream => 'cv_w' }, $K{BENCH_CURVES_EVENTS} / 1000)
	  or return $self->note('workers', 'create_stream or pre-fill failed');
	for my $w (points('workers'))
	{
		next if $w < 1;
		$self->put('workers', $w, drain => $self->drain_rate('workers', $w, 'cv_w', $CPU_SQL, workers => $w));
	}
	drop_stream('cv_w');
	sql_try('DROP TABLE IF EXISTS cv_sink');
	return;
}

# a stream of 4 partitions with a retention (30 min, segments of 2 s, so
# that the segment count grows with the backlog) holding N events nobody has
# read: the fill rate, appends while the backlog is there, polls and a
# pipeline from its head, its storage and segments; then the retention is cut
# to half the age of the oldest segment and the drop of the older half timed
sub curve_backlog
{
	my ($self) = @_;
	for my $n (points('backlog'))
	{
		next if $n < 1000;
		my $st = "cv_b_$n";
		my ($ok, undef, $e) = sql_try("SELECT streamguard.create_stream('$st', 4, retention => '30 min', segment_interval => '2 s')");
		if (!$ok) { $self->note('backlog', "$n: create_stream: " . error_line($e)); next; }
		my %v;
		my $t0 = time;
		my $f = prefill("cv_backlog_fill_$n", 'append_batch_sg.sql', { stream => $st }, int($n / 1000));
		if (!$f) { $self->note('backlog', "$n: the fill failed"); drop_stream($st, timeout => 1800); next; }
		$v{fill} = int($n / 1000) * 1000 / (time - $t0);
		log_msg(sprintf('curves: backlog %s filled in %.0f s', $n, time - $t0));
		my $a = appends("cv_backlog_app_$n", $st, 4);
		@v{qw(eps app99)} = @$a{qw(tps p99)} if $a;
		my $p = timed_pgbench("cv_backlog_poll_$n", 'curves_poll.sql', { stream => $st, consumer => 'cv_b_poll' }, -c => 1, -j => 1, -t => 500);
		@v{qw(poll50 poll99)} = @$p{qw(p50 p99)} if $p;
		# polls of 1,000 committed one by one, fewer than the backlog holds
		my $t = int($n / 2000) < 200 ? int($n / 2000) : 200;
		my $h = pgbench("cv_backlog_head_$n", 'drain_poll.sql', { stream => $st, consumer => 'cv_b_head' }, -c => 1, -j => 1, -t => $t);
		my $got = sql_value("SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = '$st' AND consumer = 'cv_b_head'");
		$v{head} = $got * $h->{tps} / $h->{processed} if $h && $got && $h->{processed};
		$self->note('backlog', "$n: a pgbench run failed") unless $a && $p && $h;
		$v{drain} = $self->head_drain($n, $st);
		@v{qw(mb bpe segs)} = split /\|/, sql("SELECT round(sz / 1048576.0, 1) || '|' || round(sz::numeric / greatest(ev, 1), 1) || '|' || segs
			FROM (SELECT (SELECT sum(pg_total_relation_size(format('streamguard_data.%I', 's' || g.stream_id || '_' || g.seg)::regclass))
			              FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$st') AS sz,
			             retained_events AS ev, segments AS segs FROM streamguard.streams WHERE stream = '$st') AS x");
		$v{cut} = $self->retention_cut($n, $st, $v{segs});
		$self->put('backlog', $n, %v);
		drop_stream($st, timeout => 1800);
		checkpoint();
	}
	sql_try('DROP TABLE IF EXISTS cv_sink');
	return;
}

# a pipeline from the head of the backlog: its drain rate over the first
# BENCH_CURVES_EVENTS events (it reads on while the sink is counted)
sub head_drain
{
	my ($self, $n, $st) = @_;
	sql(sink_ddl('cv_sink'));
	checkpoint();
	my $want = $K{BENCH_CURVES_EVENTS} < $n ? $K{BENCH_CURVES_EVENTS} : $n;
	my $err = create_pipeline("cv_backlog_$n", $st, $COPY_SQL);
	$err ||= wait_count('SELECT count(*) FROM cv_sink', $want, $K{BENCH_PIPELINE_TIMEOUT}, "cv_backlog_$n");
	drop_pipeline("cv_backlog_$n");
	my $s = $err ? undef : sink_stats('cv_sink');
	$err ||= 'a single batch: no time span' if $s && !defined $s->{rate};
	$self->note('backlog', "$n: pipeline: $err") if $err;
	return $err ? undef : $s->{rate};
}

# the retention cut to half the age of the oldest sealed segment: segments
# before -> after, and the seconds until the maintenance worker dropped every
# segment sealed before the cut (120 s at most)
sub retention_cut
{
	my ($self, $n, $st, $before) = @_;
	my $of = "FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$st'";
	my $age = sql_value("SELECT ceil(extract(epoch FROM now() - min(g.sealed_at)) / 2)::int $of AND g.sealed_at IS NOT NULL");
	return 'no sealed segment' unless $age;
	# the first segment the cut keeps
	my $keep = sql_value("SELECT min(g.seg) $of AND (g.sealed_at IS NULL OR g.sealed_at > now() - interval '$age s')");
	my $t0 = time;
	my ($ok, undef, $e) = sql_try("SELECT streamguard.alter_stream('$st', retention => '$age s', segment_interval => '2 s')");
	return 'alter_stream: ' . error_line($e) unless $ok;
	my $min = 0;
	my $done = wait_until(120, 0.2, sub { $min = sql_value("SELECT min_seg FROM streamguard.stream WHERE name = '$st'") // $min; $min >= $keep; });
	my $dt = time - $t0;
	my $after = sql_value("SELECT segments FROM streamguard.streams WHERE stream = '$st'") // '?';
	$self->note('backlog', "$n: retention: the first segment is $min after 120 s, not $keep") unless $done;
	return sprintf('%d -> %s, %.1f s', $before, $after, $dt);
}

# ---------------------------------------------------------------------------
# Report and charts
# ---------------------------------------------------------------------------

# far end / start of a measure, or undef
sub ratio
{
	my ($self, $curve, $key) = @_;
	my @x = grep { defined $self->{pt}{$curve}{$_}{$key} } points($curve);
	return unless @x >= 2;
	my ($a, $b) = map { $self->{pt}{$curve}{$_}{$key} } @x[ 0, -1 ];
	return $a > 0 ? sprintf('%.2f', $b / $a) : undef;
}

# the curve's verdict: which measures are more than 20 % worse at the far end
# than at the start (throughput below 0.8 x, latency, CPU or size above
# 1.2 x), and which of those a physical limit explains
sub verdict
{
	my ($self, $name, $measures) = @_;
	my (@bad, @why, @ok);
	for my $m (grep { $_->[3] eq 'hi' || $_->[3] eq 'lo' } @$measures)
	{
		my $r = $self->ratio($name, $m->[0]) // next;
		my $worse = $m->[3] eq 'hi' ? $r < 0.8 : $r > 1.2;
		if ($worse && defined $m->[5])
		{
			my @x = grep { defined $self->{pt}{$name}{$_}{ $m->[0] } } points($name);
			my $far = @x ? $self->{pt}{$name}{ $x[-1] }{ $m->[0] } : undef;
			if (defined $far && $far < $m->[5])
			{
				push @why, "$m->[1] ($r ×: below $m->[5] at the far end, within the measure's resolution)";
				next;
			}
		}
		if (!$worse) { push @ok, $m->[1]; next; }
		$m->[4] ? push(@why, "$m->[1] ($r ×: $m->[4])") : push(@bad, "$m->[1] ($r ×)");
	}
	return 'Verdict: no figure to judge (fewer than 2 points).' unless @ok || @bad || @why;
	my $v = @bad ? 'Verdict: **more than 20 % worse at the far end, unexplained**: ' . join(', ', @bad) . '.'
	  : 'Verdict: no figure more than 20 % worse at the far end than at the start' . (@why ? ' except where a physical limit explains it' : '') . '.';
	$v .= ' Explained by a physical limit: ' . join('; ', @why) . '.' if @why;
	return $v;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## Curves: cost as the work grows\n\n",
		"Each point a run of $K{BENCH_CURVES_SECONDS} s (BENCH_CURVES_SECONDS) on the module's own server; idle CPU = utime + stime of the "
		  . "postmaster and its children over that time, % of one core; wake-up = commit of one append -> commit of the extra "
		  . "pipeline's sink row, over $K{BENCH_CURVES_WAKES} appends; latencies from pgbench's per-transaction log; drain rates "
		  . "from the sink (rows before the last batch / first to last batch) of " . fmt($K{BENCH_CURVES_EVENTS}) . " events. "
		  . "The last row: far end / start.\n");
	push @out, "\n$self->{why}\n" if $self->{why};
	for my $c (@CURVES)
	{
		my ($name, $title, $xlabel, $measures) = @$c;
		push @out, "\n### $title\n\n| $xlabel | " . join(' | ', map { $_->[1] } @$measures) . " |\n|---:|"
		  . ('---:|' x @$measures) . "\n";
		for my $x (points($name))
		{
			my $p = $self->{pt}{$name}{$x} // next;
			push @out, "| $x | " . join(' | ', map { defined $p->{ $_->[0] } ? sprintf($_->[2], $p->{ $_->[0] }) : '—' } @$measures) . " |\n";
		}
		push @out, "| far end / start | " . join(' | ', map { my $r = $_->[3] eq 'text' ? undef : $self->ratio($name, $_->[0]); defined $r ? "$r ×" : '—' } @$measures) . " |\n";
		push @out, "\n" . $self->verdict($name, $measures) . "\n";
		push @out, "\nNotes: " . join('; ', @{ $self->{notes_of}{$name} }) . "\n" if $self->{notes_of}{$name};
	}
	return @out;
}

sub charts
{
	my ($self, $chart) = @_;
	my $made = 0;
	for my $c (@CURVES)
	{
		my ($name, $title, $xlabel, $measures) = @$c;
		my @x = grep { $self->{pt}{$name}{$_} } points($name);
		next unless @x >= 2;
		$made += $chart->curve("curves-$name", "cost as the work grows: $title", $xlabel, \@x,
			[ map { my $k = $_->[0]; [ $_->[1], [ map { $self->{pt}{$name}{$_}{$k} } @x ] ] } grep { $_->[3] ne 'text' } @$measures ]);
	}
	return $made;
}

1;
