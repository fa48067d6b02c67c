#
# test/bench/lib/Bench/Queues.pm -- queues under pressure (docs/benchmarks.md,
# "Queues under pressure"), on a server of its own, run once.  Contenders:
# streamguard (append; poll(wait => 200 ms) in a 4-partition stream), pgmq
# (send; read_with_poll + delete) and PgQue (send; receive + ack, its ticker
# driven as pgque.start() would through pg_cron), the last two installed from
# their SQL files when PGMQ_SQL / PGQUE_SQL name them (their code is not part
# of this repository); a peer that does not install is skipped with one line.
# Every contender, one after the other, through the same scenarios of
# BENCH_Q_SECONDS each, one server-side consumer (sql/setup_queues.sql) that
# writes a receipt per event in the transaction that acknowledges it:
#    - steady: BENCH_Q_RATE events/s (pgbench -R, BENCH_Q_CLIENTS clients);
#    - peak: BENCH_Q_PEAK_CLIENTS producers unthrottled;
#    - xmin: steady, while an idle-in-transaction session holds an XID;
#    - kill: steady, the consumer's backend terminated every BENCH_Q_KILL_MS
#      ms (pg_terminate_backend) and restarted by a shell loop;
#    - rr: steady, while four REPEATABLE READ sessions scan every table of
#      the contender's schemas, each holding its snapshot ~3 s, then a new one;
#    - restart / crash: steady, the server restarted halfway through
#      (pg_ctl restart -m fast / -m immediate); producers, consumer and
#      ticker reconnect; the producers record each event's id in its own
#      transaction (q_sent), so the audit knows the events that committed;
#      recovery = restart start to the first receipt after the new
#      postmaster started.
# Per scenario and contender: pickup latency (receipt - send time, both
# clock_timestamp() on one machine) p50 / p99, produced and consumed
# events/s, the audit (sent, lost, delivered twice), and what the
# contender's own tables did (pg_stat_user_tables of its schemas: updates,
# HOT updates, deletes, the dead tuples a VACUUM at the end could not
# remove, and their total size growth).
#
package Bench::Queues;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(sleep time);

use Bench;
use Bench::Pg;

my @C = qw(sg pgmq pgque);
my %LABEL = (sg => 'streamguard', pgmq => 'pgmq', pgque => 'PgQue');
my %SCHEMAS = (sg => "'streamguard', 'streamguard_data'", pgmq => "'pgmq'", pgque => "'pgque'");
my @SCEN = qw(steady peak xmin kill rr restart crash);
my %SLABEL = (steady => 'steady', peak => 'peak', xmin => 'xmin held', kill => 'consumer killed', rr => 'RR readers',
	restart => 'restart (fast)', crash => 'restart (immediate: crash)');
my %RESTART = (restart => 'fast', crash => 'immediate');

my $FILE = [ sub { $_[0] eq '' || -r $_[0] }, 'a readable SQL file (or empty)' ];

sub knobs
{
	return (
		BENCH_Q_SECONDS => [ 10,   'int' ],
		BENCH_Q_RATE    => [ 500,  'int' ],
		BENCH_Q_CLIENTS => [ 2,    'int' ],
		BENCH_Q_PEAK_CLIENTS => [ 8, 'int' ],
		BENCH_Q_KILL_MS => [ 2000, 'int' ],
		PGMQ_SQL        => [ '',   $FILE ],
		PGQUE_SQL       => [ '',   $FILE ],);
}

sub once { return 1; }
sub node { return $_[0]{node}; }

sub setup
{
	my ($self) = @_;
	$self->{res} = {};
	$self->{skip} = {};
	return $self->{why} = 'streamguard is not installed' unless have('sg_lib');
	$self->{node} = start_cluster('queues', 'autovacuum_naptime = 5s', 'track_commit_timestamp = off')
	  or return $self->{why} = 'its server did not start';
	on_node($self->{node}, sub {
		my ($ok, undef, $err) = sql_try('CREATE EXTENSION streamguard');
		return $self->{why} = "CREATE EXTENSION streamguard failed: $err" unless $ok;
		for my $c (qw(pgmq pgque))
		{
			my $f = $K{ $c eq 'pgmq' ? 'PGMQ_SQL' : 'PGQUE_SQL' };
			if ($f eq '') { $self->{skip}{$c} = 'not given (' . ($c eq 'pgmq' ? 'PGMQ_SQL' : 'PGQUE_SQL') . ')'; next; }
			if (!psql_file($f, {}, "queues_install_$c"))
			{
				$self->{skip}{$c} = "does not install on PostgreSQL " . Bench::Pg::server_version() . " (logs/queues_install_$c.log)";
			}
		}
		psql_file("$SQL/setup_queues.sql", {}, 'queues_setup') or $self->{why} = 'setup_queues.sql failed (logs/queues_setup.log)';
	});
	log_msg("queues: $LABEL{$_} skipped: $self->{skip}{$_}") for sort keys %{ $self->{skip} };
	return;
}

sub run
{
	my ($self) = @_;
	$self->{load0} = loadavg();
	return if $self->{why};
	for my $s (@SCEN)
	{
		for my $c (grep { !$self->{skip}{$_} } @C)
		{
			$self->scenario($s, $c);
		}
	}
	$self->{load1} = loadavg();
	return;
}

# the contender's tables: summed counters and total size; then (with
# $vacuum) a VACUUM of them, whose report makes n_dead_tup the dead tuples
# it could not remove (the horizon held them)
sub table_stats
{
	my ($c, $vacuum) = @_;
	sleep 1.2;   # the other backends' stats (they have exited by now)
	my $where = "schemaname IN ($SCHEMAS{$c})";
	my $o = sql("SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0),
		coalesce(sum(n_tup_del), 0), coalesce(sum(pg_total_relation_size(relid)), 0)
		FROM pg_stat_user_tables WHERE $where");
	my %s;
	@s{qw(ins upd hot del size)} = split /\|/, $o;
	if ($vacuum)
	{
		my $list = sql("SELECT string_agg(format('%I.%I', schemaname, relname), ', ') FROM pg_stat_user_tables WHERE $where");
		sql("VACUUM $list");
		$s{dead} = sql("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE $where");
	}
	return \%s;
}

sub create_queue
{
	my ($c, $q) = @_;
	return (sql_try("SELECT streamguard.create_stream('$q', 4)"))[0] if $c eq 'sg';
	return (sql_try("SELECT pgmq.create('$q')"))[0] if $c eq 'pgmq';
	return (sql_try("SELECT pgque.create_queue('$q')"))[0] && (sql_try("SELECT pgque.subscribe('$q', 'c')"))[0];
}

sub drop_queue
{
	my ($c, $q) = @_;
	return sql_try("SELECT streamguard.drop_stream('$q', force => true)") if $c eq 'sg';
	return sql_try("SELECT pgmq.drop_queue('$q')") if $c eq 'pgmq';
	return sql_try("SELECT pgque.unsubscribe('$q', 'c'); SELECT pgque.drop_queue('$q')");
}

# a psql client in a shell loop ($sh gets $1 = psql, $2 = the stop file)
sub shell
{
	my ($self, $name, $sh) = @_;
	return spawn([ '/bin/sh', '-c', $sh, 'sh', "$BIN/psql -X -q -At -v ON_ERROR_STOP=1 -d bench", "$WORK/q_stop" ], "$LOGS/$name.log");
}

sub fail
{
	my ($self, $s, $c, $why) = @_;
	$self->{res}{"$s|$c|err"} = $why;
	log_msg("queues $s $c: $why");
	$self->fail_check("$s $LABEL{$c}: $why") if $why =~ /lost|twice/;
	return;
}

# one scenario, one contender
sub scenario
{
	my ($self, $s, $c) = @_;
	my $q = "q_${c}_$s";
	my $secs = $K{BENCH_Q_SECONDS};
	my $limit = $secs + 60;
	unlink "$WORK/q_stop", "$WORK/q_stop.c";
	sql('TRUNCATE q_recv, q_sent; UPDATE q_ctl SET stop = false');
	return $self->fail($s, $c, 'could not create the queue') unless create_queue($c, $q);
	my @pids;
	if ($s eq 'xmin')
	{
		push @pids, $self->shell("q_${s}_${c}_holder",
			q{(echo "SET application_name = q_holder; BEGIN; SELECT pg_current_xact_id();"; while [ ! -f "$2" ]; do sleep 0.2; done; echo "COMMIT;") | $1});
		wait_until(10, 0.1, sub { sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'q_holder' AND backend_xid IS NOT NULL AND state = 'idle in transaction'") > 0 })
		  or return $self->fail($s, $c, 'the XID holder did not start');
	}
	my $t0 = table_stats($c);
	my $ticker = $c eq 'pgque' ? $self->shell("q_${s}_ticker",
		qq{until \$1 -c "CALL q_pgque_ticker($limit)"; do [ -f "\$2.c" ] && exit 1; sleep 0.1; done}) : undef;
	# the consumer; in `kill`, restarted whenever it was terminated (psql exits 2)
	my $call = "CALL q_consume_$c('$q', $limit)";
	my $consumer = $self->shell("q_${s}_${c}_consumer",
		qq{until PGAPPNAME=q_consumer \$1 -c "$call"; do [ -f "\$2.c" ] && exit 1; sleep 0.05; done});
	my $killer;
	if ($s eq 'kill')
	{
		my $every = $K{BENCH_Q_KILL_MS} / 1000;
		$killer = $self->shell("q_${s}_${c}_killer",
			qq{while [ ! -f "\$2.c" ]; do sleep $every; \$1 -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'q_consumer'"; done});
	}
	push @pids, $self->readers($s, $c) if $s eq 'rr';
	sleep 1;
	my $w0 = time;
	my $res = $RESTART{$s} ? $self->produce_restart($s, $c, $q) : $self->produce($s, $c, $q, $secs);
	my $w1 = time;
	# the tail: until every event is receipted (at most 30 s), then stop the consumer
	wait_until(30, 0.2, sub { sql("SELECT count(DISTINCT id) FROM q_recv") >= ($res ? $res->{processed} : 0) });
	sql('UPDATE q_ctl SET stop = true');
	spurt("$WORK/q_stop.c", '');
	my $crc = reap($consumer, 30);
	reap($killer, 30) if $killer;
	reap($ticker, 30) if $ticker;
	my $kills = $killer ? scalar(() = slurp("$LOGS/q_${s}_${c}_killer.log") =~ /^t$/mg) : 0;
	my $t1 = table_stats($c, 1);
	spurt("$WORK/q_stop", '');   # the XID holder commits after the VACUUM
	reap($_, 30) for @pids;
	drop_queue($c, $q);
	return $self->fail($s, $c, 'producer failed') unless $res;
	my $o = sql("SELECT count(*), count(DISTINCT id),
		round(percentile_cont(0.5) WITHIN GROUP (ORDER BY (recv_us - sent_us) / 1000.0)::numeric, 2),
		round(percentile_cont(0.99) WITHIN GROUP (ORDER BY (recv_us - sent_us) / 1000.0)::numeric, 2),
		count(*) FILTER (WHERE recv_us BETWEEN " . int($w0 * 1e6) . ' AND ' . int($w1 * 1e6) . ")
		FROM q_recv");
	my ($n, $nd, $p50, $p99, $inwin) = split /\|/, $o;
	my $r = $self->{res};
	my $k = "$s|$c";
	$r->{"$k|sent"} = $res->{processed};
	$r->{"$k|lost"} = $res->{processed} - $nd;
	$r->{"$k|dup"} = $n - $nd;
	$r->{"$k|p50"} = $p50 // '—';
	$r->{"$k|p99"} = $p99 // '—';
	$r->{"$k|prod"} = sprintf('%.0f', $res->{tps});
	$r->{"$k|cons"} = sprintf('%.0f', $inwin / ($w1 - $w0));
	$r->{"$k|kills"} = $kills;
	$r->{"$k|$_"} = $t1->{$_} - $t0->{$_} for qw(ins upd hot del size);
	$r->{"$k|dead"} = $t1->{dead};
	$r->{"$k|consumer"} = defined $crc && $crc == 0 ? 'ok' : 'did not end cleanly';
	$self->restart_audit($k, $w1) if $RESTART{$s};
	log_msg("queues $s $LABEL{$c}: sent $res->{processed}, lost $r->{\"$k|lost\"}, twice $r->{\"$k|dup\"}, p50 $r->{\"$k|p50\"} ms, p99 $r->{\"$k|p99\"} ms, "
		  . "updates $r->{\"$k|upd\"} (HOT $r->{\"$k|hot\"}), deletes $r->{\"$k|del\"}, dead $r->{\"$k|dead\"}, growth $r->{\"$k|size\"} B, kills $kills");
	$self->fail_check("$s $LABEL{$c}: $r->{\"$k|lost\"} events lost") if $r->{"$k|lost"} > 0;
	$self->fail_check("$s $LABEL{$c}: $r->{\"$k|dup\"} events delivered twice") if $r->{"$k|dup"} > 0;
	return;
}

# the producers of a scenario: pgbench, BENCH_Q_CLIENTS at BENCH_Q_RATE
# (peak: BENCH_Q_PEAK_CLIENTS, unthrottled); returns the pgbench result
sub produce
{
	my ($self, $s, $c, $q, $secs, $name, $script) = @_;
	my @rate = $s eq 'peak' ? () : (-R => $K{BENCH_Q_RATE});
	my $clients = $s eq 'peak' ? $K{BENCH_Q_PEAK_CLIENTS} : $K{BENCH_Q_CLIENTS};
	return pgbench($name // "q_${s}_$c", $script // "queues_$c.sql", { ($c eq 'sg' ? 'stream' : 'queue') => $q }, -c => $clients,
		-j => ($clients < 2 ? 1 : 2), @rate, -T => $secs);
}

# `rr`: four REPEATABLE READ readers in shell loops, started 0.75 s apart;
# returns their pids (they stop once the stop file q_stop.c exists)
sub readers
{
	my ($self, $s, $c) = @_;
	my $scan = "SELECT q_scan(ARRAY[$SCHEMAS{$c}]);\n";
	spurt("$WORK/q_rr.sql", "SET application_name = q_rr;\nBEGIN ISOLATION LEVEL REPEATABLE READ;\n",
		map({ ($scan, "SELECT pg_sleep(1);\n") } 1 .. 3), "COMMIT;\n");
	my @pids = map { my $d = $_ * 0.75; $self->shell("q_${s}_${c}_reader$_",
		qq{sleep $d; while [ ! -f "\$2.c" ]; do \$1 -f "$WORK/q_rr.sql" >/dev/null; done}) } 0 .. 3;
	wait_until(10, 0.1, sub { sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'q_rr'") >= 1 })
	  or log_msg("queues $s $LABEL{$c}: no REPEATABLE READ reader seen within 10 s");
	return @pids;
}

# `restart` / `crash`: the producers (queues_<c>_audit.sql) for
# BENCH_Q_SECONDS, started again after the restart broke their connections,
# while a shell restarts the server halfway; returns { tps, processed } from
# q_sent (the events that committed)
sub produce_restart
{
	my ($self, $s, $c, $q) = @_;
	my $node = $self->{node};
	my $secs = $K{BENCH_Q_SECONDS};
	my $mark = "$WORK/q_restart_t";
	unlink $mark;
	my $half = $secs / 2;
	my $restarter = spawn([ '/bin/sh', '-c', qq{sleep $half; date +%s.%N > "\$1"; exec "\$2" -D "\$3" -l "\$4" -m "\$5" -w -t 120 restart},
		'sh', $mark, "$BIN/pg_ctl", $node->data_dir, $node->logfile, $RESTART{$s} ], "$LOGS/q_${s}_${c}_restart.log");
	my ($t0, $end, $i) = (time, time + $secs, 0);
	while ((my $left = int($end - time)) >= 1)
	{
		my $ok = $self->produce($s, $c, $q, $left, "q_${s}_${c}_" . $i++, "queues_${c}_audit.sql");
		last if $ok;
		# the restart broke the connections: wait (at most 60 s) for the server
		sleep 0.1;
		wait_until(60, 0.1, sub { system("$BIN/pg_isready -q -h " . q_sh($node->host) . ' -p ' . $node->port) == 0 });
	}
	my $rc = reap($restarter, 150);
	$node->_update_pid(1) if $node->can('_update_pid');
	$self->{restart_ok} = defined $rc && $rc == 0;
	$self->{restart_t} = slurp($mark) =~ s/\s+//gr;
	my $n = sql('SELECT count(*) FROM q_sent');
	return { processed => $n, tps => $n / (time - $t0) };
}

# the restart scenarios' results: the audit against q_sent, the recovery
# time and the throughput after the restart (new postmaster start to the
# producers' end)
sub restart_audit
{
	my ($self, $k, $w1) = @_;
	my $r = $self->{res};
	my $rs = $self->{restart_t} // '';
	if (!$self->{restart_ok} || $rs !~ /^[0-9.]+$/) { $r->{"$k|rec"} = 'restart failed'; return; }
	my $up = sql('SELECT extract(epoch FROM pg_postmaster_start_time())');
	my $o = sql("SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT FROM q_recv r WHERE r.id = s.id)),
		(SELECT (min(recv_us) FILTER (WHERE recv_us > $up * 1e6) - $rs * 1e6) / 1e3 FROM q_recv),
		(SELECT count(*) FROM q_recv WHERE recv_us BETWEEN $up * 1e6 AND " . int($w1 * 1e6) . "),
		count(*) FILTER (WHERE at_us BETWEEN $up * 1e6 AND " . int($w1 * 1e6) . ") FROM q_sent s");
	my ($lost, $rec, $cons, $prod) = split /\|/, $o;
	my $after = $w1 - $up;
	$r->{"$k|lost"} = $lost;
	$r->{"$k|rec"} = $rec eq '' ? 'none consumed' : sprintf('%.0f', $rec);
	$r->{"$k|down"} = sprintf('%.0f', ($up - $rs) * 1000);
	$r->{"$k|prod_after"} = $after > 0 ? sprintf('%.0f', $prod / $after) : '—';
	$r->{"$k|cons_after"} = $after > 0 ? sprintf('%.0f', $cons / $after) : '—';
	log_msg("queues $k: recovery $r->{\"$k|rec\"} ms (postmaster up after $r->{\"$k|down\"} ms), after: produced $r->{\"$k|prod_after\"}/s, consumed $r->{\"$k|cons_after\"}/s, lost $lost");
	return;
}

sub v { my ($self, $k) = @_; return $self->{res}{$k} // '—'; }

sub kb { my ($v) = @_; return $v =~ /^-?[0-9]+$/ ? sprintf('%+d', $v / 1024) : $v; }

# the restart scenarios' own table
sub restart_report
{
	my ($self) = @_;
	my @out = ("\nRestarts: the server restarted halfway through each run (`pg_ctl restart -m fast`, and `-m immediate`, a crash with recovery); producers, consumer (and PgQue's ticker) reconnect. Sent = the events whose producer transaction committed (its id in q_sent, written in the same transaction; a transaction the restart broke is not sent); lost = sent, never receipted; twice = receipted more than once. Down = restart start to the new postmaster's start time; recovery = restart start to the first receipt after it; after = from the new postmaster's start to the producers' end. After a crash the table statistics above start from zero (PostgreSQL discards them), so its table columns are not deltas.\n\n",
		"| scenario | contender | down ms | recovery ms | produced/s after | consumed/s after | sent | lost | twice |\n",
		"|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for my $s (grep { $RESTART{$_} } @SCEN)
	{
		for my $c (grep { !$self->{skip}{$_} } @C)
		{
			my $k = "$s|$c";
			next if $self->{res}{"$k|err"};
			push @out, '| ' . join(' | ', $SLABEL{$s}, $LABEL{$c}, map({ $self->v("$k|$_") } qw(down rec prod_after cons_after)),
				fmt($self->v("$k|sent")), $self->v("$k|lost"), $self->v("$k|dup")) . " |\n";
		}
	}
	return @out;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## Queues under pressure\n\n");
	return (@out, "Not run: $self->{why}\n") if $self->{why};
	push @out, "A server of its own (bench settings, autovacuum_naptime = 5s). Each contender in turn, each scenario $K{BENCH_Q_SECONDS} s: $K{BENCH_Q_CLIENTS} pgbench producer clients, one event per transaction, $K{BENCH_Q_RATE} events/s offered (pgbench -R) except in `peak` (unthrottled, $K{BENCH_Q_PEAK_CLIENTS} clients); one server-side consumer writing a receipt per event in the transaction that acknowledges it. `xmin held`: steady while an idle-in-transaction session holds an XID; `consumer killed`: steady while the consumer's backend is terminated every $K{BENCH_Q_KILL_MS} ms and restarted; `RR readers`: steady while four REPEATABLE READ sessions count the rows of every table of the contender's schemas, each holding its snapshot ~3 s, then taking a new one (still running at the VACUUM); restarts: see below. Latency = receipt time − send time (clock_timestamp(), one machine). Table columns: the contender's own schemas in pg_stat_user_tables over the scenario: rows inserted, updated (of which HOT), deleted; dead = the dead tuples a VACUUM of those tables at the end, the XID still held in `xmin held`, could not remove (n_dead_tup after it); growth = total relation size (tables, indexes, TOAST) at the end − at the start, kB.\n\n",
	  "| scenario | contender | produced/s | consumed/s | p50 ms | p99 ms | sent | lost | twice | kills | ins | upd (HOT) | del | dead | growth kB |\n",
	  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
	for my $s (@SCEN)
	{
		for my $c (@C)
		{
			next if $self->{skip}{$c};
			my $k = "$s|$c";
			if ($self->{res}{"$k|err"})
			{
				push @out, "| $SLABEL{$s} | $LABEL{$c} | error: $self->{res}{\"$k|err\"} |" . (' |' x 13) . "\n";
				next;
			}
			push @out, '| ' . join(' | ', $SLABEL{$s}, $LABEL{$c}, (map { $self->v("$k|$_") } qw(prod cons p50 p99)),
				(map { fmt($self->v("$k|$_")) } qw(sent)), $self->v("$k|lost"), $self->v("$k|dup"),
				($s eq 'kill' ? $self->v("$k|kills") : '—'), fmt($self->v("$k|ins")),
				fmt($self->v("$k|upd")) . ' (' . fmt($self->v("$k|hot")) . ')', fmt($self->v("$k|del")),
				$self->v("$k|dead"), kb($self->v("$k|size"))) . " |\n";
		}
	}
	push @out, $self->restart_report;
	push @out, "\n$LABEL{$_} skipped: $self->{skip}{$_}\n" for grep { $self->{skip}{$_} } @C;
	push @out, sprintf("\nLoad average %s at the start, %s at the end.\n", $self->{load0} // '?', $self->{load1} // '?');
	return @out;
}

1;
