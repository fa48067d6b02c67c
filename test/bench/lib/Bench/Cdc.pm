#
# test/bench/lib/Bench/Cdc.pm -- change capture against logical decoding
# (docs/benchmarks.md, "CDC against logical decoding"), on a server of its
# own (wal_level = logical for every contender), run once:
#   1. writer throughput: pgbench, BENCH_CLIENTS clients, one INSERT per
#      transaction for BENCH_SECONDS, into the same table t uncaptured
#      (plain), under capture_table (captured), and uncaptured with a
#      logical slot (test_decoding) streamed by pg_recvlogical (logical);
#      WAL bytes per change = pg_current_wal_lsn() difference / changes;
#   2. end-to-end lag at BENCH_CDC_RATE changes/s (pgbench -R) for
#      BENCH_CDC_SECONDS: row column at (clock_timestamp() at write) to the
#      receive time: for streamguard, clock_timestamp() in the consumer
#      procedure (cdc/setup.sql) after its long-poll returned; for logical
#      decoding, the time cdc/stamp.pl read the line pg_recvlogical wrote;
#   3. WAL retained over a BENCH_CDC_OUTAGE s outage of the consumer at the
#      same rate: a fresh slot's pg_current_wal_lsn() - restart_lsn, and
#      streamguard's (no slot: nothing; the backlog is its stream's events).
#
package Bench::Cdc;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(sleep);

use Bench;
use Bench::Pg;

my @C = qw(plain captured logical);

sub knobs
{
	return (
		BENCH_CDC_RATE    => [ 5000, 'int' ],
		BENCH_CDC_SECONDS => [ 10,   'int' ],
		BENCH_CDC_OUTAGE  => [ 60,   'int' ],);
}

sub once { return 1; }
sub node { return $_[0]{node}; }

sub setup
{
	my ($self) = @_;
	$self->{res} = {};
	return $self->{why} = 'streamguard is not installed' unless have('sg_lib');
	$self->{node} = start_cluster('cdc', 'track_commit_timestamp = off', 'max_connections = 50', 'wal_level = logical',
		'max_replication_slots = 10')
	  or return $self->{why} = 'its server did not start';
	on_node($self->{node}, sub {
		psql_file("$DIR/cdc/setup.sql", {}, 'cdc_setup')
		  or $self->{why} = 'cdc/setup.sql failed (logs/cdc_setup.log)';
		$self->{why} //= 'could not create the slot'
		  unless (sql_try(q{SELECT pg_create_logical_replication_slot('bench_cdc', 'test_decoding')}))[0];
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
		'--start', '-s', '1', '-f', $file ], "$LOGS/$log.log");
}

sub run
{
	my ($self) = @_;
	$self->{load0} = (split ' ', loadavg())[0];
	return if $self->{why};
	$self->throughput($_) for @C;
	$self->latency($_) for qw(captured logical);
	$self->outage;
	$self->{load1} = (split ' ', loadavg())[0];
	return;
}

# part 1: one contender's closed-loop writer throughput and WAL per change
sub throughput
{
	my ($self, $c) = @_;
	my $pid;
	$pid = $self->recvlogical('bench_cdc', "$WORK/cdc_tp.out", 'cdc_tp_recv') if $c eq 'logical';
	sleep 1 if $pid;
	my $l0 = lsn();
	my $res = do {
		local $ENV{PGOPTIONS} = "-c search_path=$c,public";
		pgbench("cdc_tp_$c", "$DIR/cdc/insert.sql", {}, -c => $K{BENCH_CLIENTS}, -j => 2, -T => $K{BENCH_SECONDS});
	};
	my $wal = wal_since($l0);
	stop_pid($pid) if $pid;
	unlink "$WORK/cdc_tp.out";
	if (!$res) { $self->{res}{"tp|$c"} = 'ERR'; return; }
	$self->{res}{"tp|$c"} = sprintf('%.0f', $res->{tps});
	$self->{res}{"walpc|$c"} = sprintf('%.0f', $wal / ($res->{processed} || 1));
	log_msg("cdc throughput $c: $res->{tps} tx/s, $self->{res}{\"walpc|$c\"} WAL bytes per change");
	return;
}

# runs the rate-limited load into schema $c for $secs; returns the pgbench result
sub load
{
	my ($name, $c, $secs) = @_;
	local $ENV{PGOPTIONS} = "-c search_path=$c,public";
	return pgbench($name, "$DIR/cdc/insert.sql", {}, -c => $K{BENCH_CLIENTS}, -j => 2,
		-R => $K{BENCH_CDC_RATE}, -T => $secs);
}

# part 2: lag at a fixed rate, one path
sub latency
{
	my ($self, $c) = @_;
	my $t0 = sql('SELECT clock_timestamp()');
	my ($pid, $spid);
	if ($c eq 'captured')
	{
		sql(q{TRUNCATE cdc_recv; SELECT streamguard.seek('bench_cdc', 'lat', clock_timestamp())});
		$pid = spawn([ "$BIN/psql", '-X', '-h', $self->{node}->host, '-p', $self->{node}->port, '-d', 'bench', '-v', 'ON_ERROR_STOP=1',
			'-c', 'CALL cdc_consume(' . ($K{BENCH_CDC_SECONDS} + 5) . ')' ], "$LOGS/cdc_lat_consumer.log");
	}
	else
	{
		# start at the current WAL position: what the slot has not confirmed
		# yet (the other parts' WAL) is not this path's lag
		sql(q{SELECT pg_replication_slot_advance('bench_cdc', pg_current_wal_lsn())});
		my $fifo = "$WORK/cdc_fifo";
		unlink $fifo;
		system('mkfifo', $fifo) == 0 or return $self->{res}{"lat|$c"} = 'ERR';
		$spid = spawn([ $^X, "$DIR/cdc/stamp.pl", $fifo, "$WORK/cdc_logical.tsv" ], "$LOGS/cdc_lat_stamp.log");
		$pid = $self->recvlogical('bench_cdc', $fifo, 'cdc_lat_recv');
	}
	sleep 1;
	my $res = load("cdc_lat_$c", $c, $K{BENCH_CDC_SECONDS});
	my $ok = $res;
	my $q;
	if ($c eq 'captured')
	{
		$ok &&= defined reap($pid, 60);
		$q = "SELECT extract(epoch FROM recv - stamp) * 1000 AS ms FROM cdc_recv WHERE stamp >= '$t0'";
	}
	else
	{
		sleep 3;   # the tail of the stream
		stop_pid($pid);
		$ok &&= defined reap($spid, 30);
		$ok &&= (sql_try("TRUNCATE cdc_logical; COPY cdc_logical FROM " . q_lit("$WORK/cdc_logical.tsv")))[0];
		$q = "SELECT (recv_epoch - extract(epoch FROM stamp)) * 1000 AS ms FROM cdc_logical WHERE stamp >= '$t0'";
	}
	if (!$ok) { $self->{res}{"lat|$c"} = 'ERR'; return; }
	my $o = sql("WITH j AS ($q) SELECT count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
		round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(max(ms)::numeric, 2) FROM j");
	my ($n, $p50, $p99, $mx) = split /\|/, $o;
	@{ $self->{res} }{ "lat|$c", "p50|$c", "p99|$c", "max|$c", "n|$c", "rate|$c" } =
	  ('ok', $p50, $p99, $mx, $n, sprintf('%.0f', $res->{tps}));
	log_msg("cdc lag $c: $n changes at $res->{tps}/s, p50 $p50 ms, p99 $p99 ms, max $mx ms");
	return;
}

# part 3: a fresh slot with no consumer over the outage, and streamguard's slots
sub outage
{
	my ($self) = @_;
	sql(q{SELECT pg_drop_replication_slot('bench_cdc')});
	sql(q{SELECT pg_create_logical_replication_slot('bench_cdc_outage', 'test_decoding')});
	my $ev0 = sql(q{SELECT coalesce(sum(retained_events), 0) FROM streamguard.streams WHERE stream = 'bench_cdc'});
	my $res = load('cdc_outage', 'captured', $K{BENCH_CDC_OUTAGE});
	$self->{res}{"out|logical"} = sql(q{SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots
		WHERE slot_name = 'bench_cdc_outage'});
	# streamguard holds no slot: every slot but ours counts against it
	$self->{res}{"slots|captured"} = sql(q{SELECT count(*) FROM pg_replication_slots WHERE slot_name <> 'bench_cdc_outage'});
	$self->{res}{"out|captured"} = $self->{res}{"slots|captured"} eq '0' ? 0 : 'ERR';
	$self->{res}{"backlog"} = sql(q{SELECT coalesce(sum(retained_events), 0) FROM streamguard.streams WHERE stream = 'bench_cdc'}) - $ev0;
	$self->{res}{"out|n"} = $res ? $res->{processed} : 'ERR';
	sql(q{SELECT pg_drop_replication_slot('bench_cdc_outage')});
	return;
}

sub v { my ($self, $k) = @_; return $self->{res}{$k} // '—'; }

sub met { return $_[0] ? 'met' : '**missed**'; }

sub report
{
	my ($self) = @_;
	my @out = ("\n## CDC against logical decoding\n\n");
	return (@out, "Not run: $self->{why}\n") if $self->{why};
	my $r = $self->{res};
	my $num = sub { my $v = $r->{ $_[0] }; defined $v && $v =~ /^[0-9.]+$/ ? $v : undef };
	push @out, "One server, wal_level = logical for every contender; the same table in three schemas. Writer: $K{BENCH_CLIENTS} pgbench clients, one INSERT per transaction, $K{BENCH_SECONDS} s each. Lag: $K{BENCH_CDC_RATE} changes/s offered (pgbench -R) for $K{BENCH_CDC_SECONDS} s; streamguard = the row's write time to clock_timestamp() in a server-side consumer after its poll(wait => 200 ms) returned; logical = the write time to the moment a Perl reader got pg_recvlogical's line (test_decoding, over the replication protocol and a FIFO). Outage: $K{BENCH_CDC_OUTAGE} s at the same rate with no consumer.\n\n",
		"| contender | writer tx/s | WAL bytes/change | lag p50 ms | lag p99 ms | lag max ms | changes timed | achieved rate/s | WAL retained by the outage |\n",
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
	my %label = (plain => 'uncaptured', captured => 'capture_table', logical => 'uncaptured + logical slot (test_decoding)');
	for my $c (@C)
	{
		my $lat = $c ne 'plain';
		push @out, '| ' . join(' | ', $label{$c}, $self->v("tp|$c"), $self->v("walpc|$c"),
			$lat ? map({ $self->v("$_|$c") } qw(p50 p99 max n rate)) : ('—') x 5,
			$c eq 'plain' ? '—' : $self->v("out|$c")) . " |\n";
	}
	my ($tp, $tc, $p99c, $p99l, $oc) = map { $num->($_) } ('tp|plain', 'tp|captured', 'p99|captured', 'p99|logical', 'out|captured');
	push @out, "\nTargets:\n\n",
		'- captured writer >= 0.8x uncaptured: ' . (defined $tp && defined $tc ? sprintf('%.2fx, ', $tc / $tp) . met($tc >= 0.8 * $tp) : 'not measured') . "\n",
		"- capture p99 <= 10 ms at $K{BENCH_CDC_RATE}/s: " . (defined $p99c ? "$p99c ms, " . met($p99c <= 10) : 'not measured') . "\n",
		'- capture p99 <= 1/5 of logical decoding p99: ' . (defined $p99c && defined $p99l ? sprintf('%.3f of it, ', $p99l ? $p99c / $p99l : 0) . met($p99c * 5 <= $p99l) : 'not measured') . "\n",
		'- 0 WAL retained by an absent streamguard consumer: ' . (defined $oc ? "$oc bytes (replication slots besides the test's: $r->{'slots|captured'}), " . met($oc == 0) : 'not measured') . "\n",
		sprintf("\nOutage: %s changes written; the stream's backlog grew by %s events (table storage, removed by retention, not WAL). Load average %s at the start, %s at the end.\n",
			$self->v('out|n'), $self->v('backlog'), $self->{load0} // '?', $self->{load1} // '?');
	return @out;
}

1;
