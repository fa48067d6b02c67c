#
# test/bench/lib/Bench/Cdc.pm -- change capture against logical decoding
# (docs/benchmarks.md, "CDC against logical decoding"), on a server of its
# own (wal_level = logical for every contender), run once:
#   1. writer throughput: pgbench, BENCH_CLIENTS clients, one INSERT per
#      transaction for BENCH_SECONDS, into the same table t uncaptured
#      (plain), under capture_table (captured), and uncaptured with a
#      logical slot (test_decoding) streamed by pg_recvlogical (logical);
#      each contender's seconds split into BENCH_SLICES slices run
#      round-robin, the first contender rotating, so that a load burst on
#      a shared machine hits all three alike; tx/s = transactions of all
#      slices / their time; WAL bytes per change = pg_current_wal_lsn()
#      differences / changes;
#   2. end-to-end lag at each rate of BENCH_CDC_RATE (a list, changes/s,
#      pgbench -R) for BENCH_CDC_SECONDS: row column at (clock_timestamp()
#      at write) to the receive time: for streamguard, clock_timestamp() in
#      the consumer procedure (cdc/setup.sql) after its long-poll returned;
#      for logical decoding, the time cdc/stamp.pl read the line
#      pg_recvlogical wrote; with the rate pgbench achieved;
#   3. the outage: BENCH_CDC_OUTAGE s at BENCH_CDC_OUTAGE_RATE transactions/s
#      of one row into each path's table (cdc/insert_both.sql), no consumer:
#      the slot's retained WAL (pg_current_wal_lsn() - restart_lsn) against
#      streamguard's (it holds no slot); then the catch-up, the writer
#      stopped, one consumer after the other (logical first: streamguard's
#      consumer writes receipts the slot would have to decode): time from
#      its start to the last backlog change received, changes/s, and the lag
#      (write to receive) of the backlog's changes.
# Every wait is bounded: a catch-up that does not finish within
# BENCH_CDC_CATCHUP s is reported as such, with what it consumed.
#
package Bench::Cdc;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(sleep time);

use Bench;
use Bench::Pg;

my @C = qw(plain captured logical);
my @P = qw(captured logical);
# the lag part also times streamguard's consumer committing with
# synchronous_commit = off (its receipts and positions are lost together
# in a crash, so it consumes those events again: the same guarantee)
my @LAT = qw(captured captured_async logical);
my %LABEL = (plain => 'uncaptured', captured => 'capture_table', logical => 'uncaptured + logical slot (test_decoding)');
# the paths' names in the chart (%PATH's, short)
my %SHORT = (captured => 'capture_table', captured_async => 'capture_table, async consumer', logical => 'logical slot');
my %PATH = (captured => 'streamguard (capture_table, poll)', captured_async => 'streamguard, the consumer with synchronous_commit = off', logical => 'logical slot (test_decoding, pg_recvlogical)');

my $LIST = [ sub { $_[0] =~ /^\s*[1-9][0-9]*(?:[\s,]+[1-9][0-9]*)*\s*$/ }, 'a list of positive integers, like "1000 5000 20000"' ];

sub knobs
{
	return (
		BENCH_CDC_RATE        => [ '1000 5000 20000', $LIST ],
		BENCH_CDC_SECONDS     => [ 10,   'int' ],
		BENCH_CDC_OUTAGE      => [ 300,  'int' ],
		BENCH_CDC_OUTAGE_RATE => [ 5000, 'int' ],
		BENCH_CDC_CATCHUP     => [ 300,  'int' ],);
}

sub once { return 1; }
sub node { return $_[0]{node}; }

sub rates { return split /[\s,]+/, ($K{BENCH_CDC_RATE} =~ s/^\s+|\s+$//gr); }

sub setup
{
	my ($self) = @_;
	$self->{res} = {};
	return $self->{why} = 'streamguard is not installed' unless have('sg_lib');
	return $self->{why} = "pg_recvlogical is missing in $BIN" unless -x "$BIN/pg_recvlogical";
	$self->{node} = start_cluster('cdc', 'track_commit_timestamp = off', 'max_connections = 50', 'wal_level = logical',
		'max_replication_slots = 10')
	  or return $self->{why} = 'its server did not start';
	on_node($self->{node}, sub {
		psql_file("$DIR/cdc/setup.sql", {}, 'cdc_setup')
		  or return $self->{why} = 'cdc/setup.sql failed (logs/cdc_setup.log)';
		my (undef, undef, $err) = sql_try(q{SELECT pg_create_logical_replication_slot('bench_cdc', 'test_decoding')});
		$self->{why} = "could not create the test_decoding slot: $err"
		  unless sql(q{SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'bench_cdc'});
	});
	return;
}

sub lsn { return sql(q{SELECT pg_current_wal_lsn()}); }
sub wal_since { my ($l) = @_; return sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$l')"); }

# pg_recvlogical streaming slot $slot into $file; returns its pid
sub recvlogical
{
	my ($self, $slot, $file, $log) = @_;
	return spawn([ "$BIN/pg_recvlogical", '-h', $self->{node}->host, '-p', $self->{node}->port, '-d', 'bench', '-S', $slot,
		'-o', 'include-xids=0', '-o', 'skip-empty-xacts=1', '--start', '-s', '1', '-f', $file ], "$LOGS/$log.log");
}

# pg_recvlogical into a FIFO read by cdc/stamp.pl (into $tsv); returns the
# two pids, or nothing
sub logical_reader
{
	my ($self, $slot, $tsv, $log) = @_;
	my $fifo = "$WORK/cdc_fifo";
	unlink $fifo, $tsv;
	system('mkfifo', $fifo) == 0 or return;
	my $spid = spawn([ $^X, "$DIR/cdc/stamp.pl", $fifo, $tsv ], "$LOGS/${log}_stamp.log");
	return ($self->recvlogical($slot, $fifo, "${log}_recv"), $spid);
}

# waits at most $timeout s until stamp.pl wrote $want lines into $tsv;
# reads the file as it grows (every poll reads only what is new)
sub wait_lines
{
	my ($tsv, $want, $timeout) = @_;
	my ($fh, $n) = (undef, 0);
	my $ok = wait_until($timeout, 0.1, sub {
		if (!$fh) { open(my $f, '<', $tsv) or return 0; $fh = $f; }
		while (sysread($fh, my $buf, 1 << 20)) { $n += ($buf =~ tr/\n//); }
		return $n >= $want;
	});
	close $fh if $fh;
	return $ok;
}

# the streamguard consumer procedure in its own psql; returns its pid
sub sg_consumer
{
	my ($self, $log, @args) = @_;
	return spawn([ "$BIN/psql", '-X', '-h', $self->{node}->host, '-p', $self->{node}->port, '-d', 'bench', '-v', 'ON_ERROR_STOP=1',
		'-c', 'CALL cdc_consume(' . join(', ', @args) . ')' ], "$LOGS/$log.log");
}

sub run
{
	my ($self) = @_;
	$self->{load0} = loadavg();
	return if $self->{why};
	$self->throughput;
	for my $rate (rates())
	{
		$self->latency($_, $rate) for @LAT;
	}
	$self->outage;
	$self->{load1} = loadavg();
	return;
}

# part 1: the closed-loop writer throughput and WAL per change of every
# contender, in rotating slices
sub throughput
{
	my ($self) = @_;
	my $slices = $K{BENCH_SLICES} < 1 ? 1 : $K{BENCH_SLICES};
	my $secs = int($K{BENCH_SECONDS} / $slices) || 1;
	my (%n, %t, %wal, %bad);
	for my $s (0 .. $slices - 1)
	{
		for my $i (0 .. $#C)
		{
			my $c = $C[ ($i + $s) % @C ];
			next if $bad{$c};
			my ($n, $t, $w) = $self->throughput_slice($c, $s, $secs);
			if (!defined $n) { $bad{$c} = 1; next; }
			$n{$c} += $n;
			$t{$c} += $t;
			$wal{$c} += $w;
		}
	}
	for my $c (@C)
	{
		if ($bad{$c} || !$t{$c}) { $self->{res}{"tp|$c"} = 'ERR'; next; }
		$self->{res}{"tp|$c"} = sprintf('%.0f', $n{$c} / $t{$c});
		$self->{res}{"walpc|$c"} = sprintf('%.0f', $wal{$c} / ($n{$c} || 1));
		log_msg("cdc throughput $c: $self->{res}{\"tp|$c\"} tx/s over $slices slice(s), $self->{res}{\"walpc|$c\"} WAL bytes per change");
	}
	return;
}

# one slice of one contender: (transactions, seconds, WAL bytes) or nothing
sub throughput_slice
{
	my ($self, $c, $s, $secs) = @_;
	my $pid;
	sql('CHECKPOINT');
	# the slot starts where the WAL is: the other contenders' slices are not its work
	sql(q{SELECT pg_replication_slot_advance('bench_cdc', pg_current_wal_lsn())}) if $c eq 'logical';
	$pid = $self->recvlogical('bench_cdc', "$WORK/cdc_tp.out", 'cdc_tp_recv') if $c eq 'logical';
	sleep 1 if $pid;
	my $l0 = lsn();
	my $res = do {
		local $ENV{PGOPTIONS} = "-c search_path=$c,public";
		pgbench("cdc_tp_${c}_$s", "$DIR/cdc/insert.sql", {}, -c => $K{BENCH_CLIENTS}, -j => 2, -T => $secs);
	};
	my $wal = wal_since($l0);
	stop_pid($pid) if $pid;
	unlink "$WORK/cdc_tp.out";
	return if !$res || !$res->{tps};
	return ($res->{processed}, $res->{processed} / $res->{tps}, $wal);
}

# runs the rate-limited load ($script, into schema $c) for $secs; returns
# the pgbench result
sub load
{
	my ($name, $c, $rate, $secs, $script, @log) = @_;
	local $ENV{PGOPTIONS} = "-c search_path=$c,public";
	return pgbench($name, $script // "$DIR/cdc/insert.sql", {}, -c => $K{BENCH_CLIENTS}, -j => 2, -R => $rate, -T => $secs, @log);
}

# p50 and p99 (ms) of the writer's own transactions in pgbench's
# per-transaction logs "$prefix.*" (each line: client, number, latency us,
# script, epoch s, us, schedule lag us; with -R the latency counts from the
# scheduled start, so the lag is taken off): the INSERT and its commit,
# WAL flush included, plus one local round trip.  No consumer can see a
# change before its commit, so this is about the floor of every path's lag.
sub writer_stats
{
	my ($prefix) = @_;
	my @ms;
	for my $f (glob("$prefix.*"))
	{
		open(my $fh, '<', $f) or next;
		# not $_: the callers' loops alias it
		while (my $line = <$fh>)
		{
			my @f = split ' ', $line;
			push @ms, ($f[2] - ($f[6] // 0)) / 1000 if @f >= 6 && $f[2] =~ /^[0-9]+$/;
		}
		close $fh;
		unlink $f;
	}
	return (undef, undef) unless @ms;
	@ms = sort { $a <=> $b } @ms;
	my $at = sub { my $i = int($_[0] * $#ms + 0.5); return sprintf('%.2f', $ms[$i]); };
	return ($at->(0.5), $at->(0.99));
}

# count, p50, p99, max of the lag (ms) query $q returns
sub lag_stats
{
	my ($q) = @_;
	return split /\|/, sql("WITH j AS ($q) SELECT count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
		round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(max(ms)::numeric, 2) FROM j");
}

# loads stamp.pl's output into cdc_logical
sub load_tsv
{
	my ($tsv) = @_;
	return (sql_try("TRUNCATE cdc_logical; COPY cdc_logical FROM " . q_lit($tsv)))[0];
}

# part 2: lag at a fixed rate, one path
sub latency
{
	my ($self, $c, $rate) = @_;
	my $k = "$rate|$c";
	my $t0 = sql('SELECT clock_timestamp()');
	my ($pid, $spid);
	my $tsv = "$WORK/cdc_logical.tsv";
	if ($c ne 'logical')
	{
		sql(q{TRUNCATE cdc_recv; SELECT streamguard.seek('bench_cdc', 'lat', clock_timestamp())});
		local $ENV{PGOPTIONS} = $c eq 'captured_async' ? '-c synchronous_commit=off' : '';
		$pid = $self->sg_consumer("cdc_lat_${c}_$rate", $K{BENCH_CDC_SECONDS} + 5);
	}
	else
	{
		# start at the current WAL position: what the slot has not confirmed
		# yet (the other parts' WAL) is not this path's lag
		sql(q{SELECT pg_replication_slot_advance('bench_cdc', pg_current_wal_lsn())});
		($pid, $spid) = $self->logical_reader('bench_cdc', $tsv, 'cdc_lat') or return $self->{res}{"lat|$k"} = 'ERR';
	}
	sleep 1;
	my $wlog = "$WORK/cdc_w_${c}_$rate";
	unlink glob("$wlog.*");
	my $res = load("cdc_lat_${c}_$rate", $c eq "captured_async" ? "captured" : $c, $rate, $K{BENCH_CDC_SECONDS}, undef,
		'--log', "--log-prefix=$wlog");
	@{ $self->{res} }{ "wp50|$k", "wp99|$k" } = writer_stats($wlog);
	my $ok = $res;
	my $q;
	if ($c ne 'logical')
	{
		$ok = defined reap($pid, 60) && $ok;
		$q = "SELECT extract(epoch FROM recv - stamp) * 1000 AS ms FROM cdc_recv WHERE stamp >= '$t0'";
	}
	else
	{
		# the tail of the stream: until every change written arrived (at most 30 s)
		wait_lines($tsv, $res ? $res->{processed} : 0, 30);
		stop_pid($pid);
		$ok = defined reap($spid, 30) && $ok && load_tsv($tsv);
		$q = "SELECT (recv_epoch - extract(epoch FROM stamp)) * 1000 AS ms FROM cdc_logical WHERE stamp >= '$t0'";
	}
	if (!$ok) { $self->{res}{"lat|$k"} = 'ERR'; return; }
	my ($n, $p50, $p99, $mx) = lag_stats($q);
	@{ $self->{res} }{ map { "$_|$k" } qw(lat p50 p99 max n rate) } = ('ok', $p50, $p99, $mx, $n, sprintf('%.0f', $res->{tps}));
	log_msg("cdc lag $c at $rate/s: $n changes at $res->{tps}/s, p50 $p50 ms, p99 $p99 ms, max $mx ms; writer's transaction p50 "
		  . ($self->{res}{"wp50|$k"} // '?') . ' ms, p99 ' . ($self->{res}{"wp99|$k"} // '?') . ' ms');
	return;
}

# part 3: the outage (no consumer) and then each path's catch-up
sub outage
{
	my ($self) = @_;
	my $r = $self->{res};
	sql(q{SELECT pg_drop_replication_slot('bench_cdc')});
	sql(q{SELECT pg_create_logical_replication_slot('bench_cdc_outage', 'test_decoding')});
	my $t0 = sql(q{SELECT clock_timestamp()});
	sql(q{SELECT streamguard.seek('bench_cdc', 'out', clock_timestamp())});
	my $res = load('cdc_outage', 'public', $K{BENCH_CDC_OUTAGE_RATE}, $K{BENCH_CDC_OUTAGE}, "$DIR/cdc/insert_both.sql");
	$self->{oend} = time;
	$r->{'out|wal|logical'} = sql(q{SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots
		WHERE slot_name = 'bench_cdc_outage'});
	# streamguard holds no slot: every slot but ours counts against it
	$r->{'slots'} = sql(q{SELECT count(*) FROM pg_replication_slots WHERE slot_name <> 'bench_cdc_outage'});
	$r->{'out|wal|captured'} = $r->{'slots'} eq '0' ? 0 : 'ERR';
	$r->{'out|n'} = $res ? $res->{processed} : 'ERR';
	$r->{'out|rate'} = $res ? sprintf('%.0f', $res->{tps}) : 'ERR';
	for my $c (qw(captured logical))
	{
		$r->{"out|backlog|$c"} = sql("SELECT count(*) FROM $c.t WHERE at >= '$t0'");
	}
	log_msg("cdc outage: $r->{'out|n'} transactions at $r->{'out|rate'}/s; the slot retains $r->{'out|wal|logical'} bytes of WAL");
	$self->catchup_logical($t0);
	sql_try(q{SELECT pg_drop_replication_slot('bench_cdc_outage')});
	$self->catchup_captured($t0);
	return;
}

# records one path's catch-up from query $q (the backlog's changes: write
# time stamp_s and receive time recv_s, epoch seconds) and its start time;
# the lag is counted as if the consumer had started at the outage's end
# (the second one waited for the first)
sub catchup_result
{
	my ($self, $c, $q, $start, $done) = @_;
	my $r = $self->{res};
	my $shift = $self->{oend} - $start;
	my $lq = "SELECT (recv_s - stamp_s + $shift) * 1000 AS ms, recv_s FROM ($q) j";
	my ($n, $p50, $p99, $mx) = lag_stats($lq);
	my $last = sql("SELECT max(recv_s) FROM ($q) j");
	my $secs = $last ne '' ? $last - $start : 0;
	@{$r}{ map { "cu|$_|$c" } qw(n p50 p99 max secs rate done) } = ($n, $p50, $p99, $mx, sprintf('%.1f', $secs),
		$secs > 0 ? sprintf('%.0f', $n / $secs) : '—', $done && $n == $r->{"out|backlog|$c"} ? 'yes' : "**no** ($n)");
	log_msg("cdc catch-up $c: $n of $r->{\"out|backlog|$c\"} changes in $r->{\"cu|secs|$c\"} s ($r->{\"cu|rate|$c\"}/s), lag p50 $p50 ms, max $mx ms, caught up: $r->{\"cu|done|$c\"}");
	return;
}

sub catchup_logical
{
	my ($self, $t0) = @_;
	my $tsv = "$WORK/cdc_catchup.tsv";
	my $start = time;
	my ($pid, $spid) = $self->logical_reader('bench_cdc_outage', $tsv, 'cdc_catchup') or return;
	my $done = wait_lines($tsv, $self->{res}{'out|backlog|logical'}, $K{BENCH_CDC_CATCHUP});
	stop_pid($pid);
	reap($spid, 60);
	load_tsv($tsv) or return;
	unlink $tsv;
	$self->catchup_result('logical', "SELECT extract(epoch FROM stamp) AS stamp_s, recv_epoch AS recv_s FROM cdc_logical WHERE stamp >= '$t0'",
		$start, $done);
	return;
}

sub catchup_captured
{
	my ($self, $t0) = @_;
	sql('TRUNCATE cdc_recv');
	my $start = time;
	my $pid = $self->sg_consumer('cdc_catchup_consumer', $K{BENCH_CDC_CATCHUP}, q{'out'}, 'true');
	my $rc = reap($pid, $K{BENCH_CDC_CATCHUP} + 30);
	$self->catchup_result('captured', "SELECT extract(epoch FROM stamp) AS stamp_s, extract(epoch FROM recv) AS recv_s FROM cdc_recv WHERE stamp >= '$t0'",
		$start, defined $rc && $rc == 0);
	return;
}

# bench-cdc.png: the lag p50 / p99 / max of each path at each rate
sub charts
{
	my ($self, $chart) = @_;
	my $r = $self->{res};
	my @rows;
	for my $rate (rates())
	{
		for my $c (@LAT)
		{
			my $k = "$rate|$c";
			next unless ($r->{"lat|$k"} // '') eq 'ok';
			push @rows, [ "$rate/s offered: $SHORT{$c}",
				$r->{"p50|$k"}, $r->{"p99|$k"}, $r->{"max|$k"} ];
		}
	}
	return $chart->latency('cdc', 'CDC: change written -> received by the consumer, capture_table + poll vs a logical slot', \@rows);
}

sub v { my ($self, $k) = @_; return $self->{res}{$k} // '—'; }

sub n_fmt { my ($v) = @_; return defined $v && $v =~ /^[0-9]+(?:\.[0-9]+)?$/ ? fmt($v) : $v // "—"; }

sub met { return $_[0] ? 'met' : '**missed**'; }

# the achieved rate, flagged when pgbench fell behind the offered one
sub achieved
{
	my ($self, $k, $rate) = @_;
	my $a = $self->{res}{"rate|$k"} // return '—';
	return $a =~ /^[0-9.]+$/ && $a < 0.95 * $rate ? "$a (**fell behind**)" : $a;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## CDC against logical decoding\n\n");
	return (@out, "Not run: $self->{why}\n") if $self->{why};
	my $r = $self->{res};
	my $num = sub { my $v = $r->{ $_[0] }; defined $v && $v =~ /^[0-9.]+$/ ? $v : undef };
	push @out, "One server, wal_level = logical for every contender; the same table in three schemas.\n\n",
		"Writer: $K{BENCH_CLIENTS} pgbench clients, one INSERT per transaction, $K{BENCH_SECONDS} s each in $K{BENCH_SLICES} slices run round-robin (the first contender rotating, a CHECKPOINT before each slice).\n\n",
		"| contender | writer tx/s | WAL bytes/change |\n|---|---:|---:|\n";
	push @out, "| $LABEL{$_} | " . $self->v("tp|$_") . ' | ' . $self->v("walpc|$_") . " |\n" for @C;
	push @out, "\nLag: each rate offered (pgbench -R, $K{BENCH_CLIENTS} clients) for $K{BENCH_CDC_SECONDS} s; streamguard = the row's write time to clock_timestamp() in a server-side consumer after its poll(wait => 200 ms) returned, committing after every poll (with synchronous_commit = off in the second streamguard row); logical = the write time to the moment a Perl reader got pg_recvlogical's line (test_decoding, over the replication protocol and a FIFO). A rate pgbench did not reach (< 95 % of it) is marked. Writer: the writer's own transactions in the same run (pgbench's per-transaction log, the schedule lag taken off): the INSERT and its commit with its WAL flush, plus one local round trip. No path can deliver a change before its commit, so the writer's figure is about the floor of every path's lag.\n\n",
		"| offered/s | path | achieved/s | lag p50 ms | lag p99 ms | lag max ms | changes timed | writer p50 ms | writer p99 ms |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
	for my $rate (rates())
	{
		for my $c (@LAT)
		{
			my $k = "$rate|$c";
			push @out, "| $rate | $PATH{$c} | " . join(' | ', $self->achieved($k, $rate), map { $self->v("$_|$k") } qw(p50 p99 max n wp50 wp99)) . " |\n";
		}
	}
	push @out, "\nOutage: $K{BENCH_CDC_OUTAGE} s at $K{BENCH_CDC_OUTAGE_RATE} transactions/s offered (achieved " . $self->v('out|rate') . '/s, ' . n_fmt($self->v('out|n'))
	  . " transactions), each one row into each path's table, no consumer. Then the writer stops and each consumer starts on its backlog, one after the other (logical first); catch-up = its start to the last backlog change received (at most $K{BENCH_CDC_CATCHUP} s); lag = write to receive of the backlog's changes, counted as if the consumer had started when the outage ended (the second one waited for the first). The slot decodes all the WAL, streamguard's own writes included.\n\n",
	  "| path | WAL retained by the outage, bytes | backlog changes | caught up | catch-up s | catch-up changes/s | lag p50 ms | lag p99 ms | lag max ms |\n|---|---:|---:|---|---:|---:|---:|---:|---:|\n";
	for my $c (@P)
	{
		push @out, "| $PATH{$c} | " . join(' | ', n_fmt($self->v("out|wal|$c")), n_fmt($self->v("out|backlog|$c")),
			map { $self->v("cu|$_|$c") } qw(done secs rate p50 p99 max)) . " |\n";
	}
	my ($tp, $tc, $p99c, $p99l, $oc, $p99a, $wp99) = map { $num->($_) } ('tp|plain', 'tp|captured', 'p99|5000|captured', 'p99|5000|logical', 'out|wal|captured', 'p99|5000|captured_async', 'wp99|5000|captured');
	push @out, "\nTargets:\n\n",
		'- captured writer >= 0.8x uncaptured: ' . (defined $tp && defined $tc ? sprintf('%.2fx, ', $tc / $tp) . met($tc >= 0.8 * $tp) : 'not measured') . "\n",
		'- capture p99 <= 10 ms at 5000/s: ' . (defined $p99c ? "$p99c ms, " . met($p99c <= 10) : 'not measured (5000 not in BENCH_CDC_RATE?)') . "\n",
		'- the same with the consumer committing asynchronously: ' . (defined $p99a ? "$p99a ms, " . met($p99a <= 10) . (defined $p99l ? sprintf(', %.3f of logical decoding\'s', $p99l ? $p99a / $p99l : 0) : '') : 'not measured') . "\n",
		'- capture p99 <= 1/5 of logical decoding p99 at 5000/s: ' . (defined $p99c && defined $p99l ? sprintf('%.3f of it, ', $p99l ? $p99c / $p99l : 0) . met($p99c * 5 <= $p99l) : 'not measured')
		  . (defined $wp99 && defined $p99l ? sprintf(" (the captured writer's own transaction p99, the floor of the lag: %s ms, %.3f of logical decoding's)", $wp99, $p99l ? $wp99 / $p99l : 0) : '') . "\n",
		'- 0 WAL retained by an absent streamguard consumer: ' . (defined $oc ? "$oc bytes (replication slots besides the test's: $r->{slots}), " . met($oc == 0) : 'not measured') . "\n",
		sprintf("\nLoad average %s at the start, %s at the end.\n", $self->{load0} // '?', $self->{load1} // '?');
	return @out;
}

1;
