#
# test/bench/lib/Bench/LongPoll.pm -- benchmark 9, long-poll: one consumer
# (test/bench/lpclient.c, libpq, polls of 100 events, each BEGIN; poll; COMMIT)
# per contender reads a 4-partition stream while BENCH_LAT_CLIENTS producers
# append BENCH_LAT_RATE events/s (pgbench -R, one event per transaction) for
# BENCH_LP_SECONDS:
#    - poll(wait => '1 s'): the server sleeps until events are readable;
#    - poll, sleeping BENCH_LAT_POLL_MS when it returns nothing;
#    - LISTEN/NOTIFY + poll: the producers NOTIFY in the append's
#      transaction, the client waits on its socket when a poll is empty.
#    - poll(wait => '1 s') with the consumer's transactions committing
#      asynchronously (synchronous_commit = off in its session);
# Latency, on two clocks: the client's clock when the poll's result arrived
# (before its COMMIT) - (a) the commit timestamp of the event's append, which
# the server takes before it flushes the commit record, so this includes the
# producer's WAL flush; (b) the time the producer's COMMIT returned (pgbench
# -l), when the event is visible.  Same machine, same clock.  Before the
# producers start, BENCH_LP_IDLE idle seconds: the CPU time of the client and
# of its backend over them.
#
package Bench::LongPoll;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(sleep);

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (wait => 'poll(wait => 1 s)', async => 'poll(wait), async COMMIT',
	sleep => 'poll, sleep when empty', notify => 'LISTEN/NOTIFY + poll');
my @MODES = qw(wait async sleep notify);

sub knobs
{
	return (
		BENCH_LP_SECONDS => [ 10, 'int' ],
		BENCH_LP_IDLE    => [ 3,  'int' ],);
}

sub contenders { return ([ 'longpoll', [ @S{@MODES} ] ]); }

sub setup
{
	my ($self) = @_;
	$self->SUPER::setup;
	$self->{lp} = {};      # "mode|field" => per-repeat values
	$self->{lnote} = {};   # mode => notes
	sql_file_once('setup_latency.sql');
	return;
}

# the client, built once with cc; '' when it does not build
sub lp_client
{
	my ($self) = @_;
	return $self->{client} if defined $self->{client};
	my $inc = Bench::pg_config($ENV{PG_CONFIG}, '--includedir');
	my $lib = Bench::pg_config($ENV{PG_CONFIG}, '--libdir');
	my $bin = "$WORK/lpclient";
	my $rc = system("cc -O2 -Wall -o '$bin' '$DIR/lpclient.c' -I'$inc' -L'$lib' -lpq > '$LOGS/lpclient_build.log' 2>&1");
	$self->{client} = $rc == 0 ? $bin : '';
	log_msg('lpclient did not build: ' . slurp("$LOGS/lpclient_build.log")) unless $self->{client};
	return $self->{client};
}

sub lp_fail { my ($self, $m, $v, $note) = @_; push @{ $self->{lp}{"$m|p50"} }, $v; note_to($self->{lnote}, $m, $note) if $note; return; }

sub run
{
	my ($self, $r) = @_;
	for my $m (rotated($r - 1, @MODES))
	{
		if (!have('sg')) { $self->lp_fail($m, 'PENDING'); next; }
		if (!$self->lp_client) { $self->lp_fail($m, 'ERR', 'lpclient did not build'); next; }
		my $st = "lp_${m}_r$r";
		if (!create_stream($st, 4)) { $self->lp_fail($m, 'ERR', 'create_stream failed'); next; }
		$self->run_mode($m, $st, $r);
		drop_stream($st);
	}
	return;
}

# one contender: the client, the producers, then the statistics
sub run_mode
{
	my ($self, $m, $st, $r) = @_;
	my ($stop, $out, $log) = ("$WORK/lp_stop", "$WORK/lp_$m.txt", "$LOGS/lp_${m}_r$r.log");
	unlink $stop;
	my $pid = spawn([ $self->{client}, 'dbname=bench', $m, $st, 'c', $K{BENCH_LAT_POLL_MS}, $K{BENCH_LP_IDLE}, $stop, $out ], $log);
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
		return $self->lp_fail($m, 'ERR', !$res ? 'producer failed' : 'client: ' . error_line($cl));
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
	return $self->lp_fail($m, 'ERR', 'statistics: ' . error_line($e)) if !$ok || $o !~ /\|/;
	my ($n_ev, $n_recv, $n_recv_d, $p50, $p99, $mx, undef, $p50r, $p99r, $n_ret) = split /\|/, (split /\n/, $o)[-1];
	note_to($self->{lnote}, $m, "pgbench logged the end of $n_ret of $n_recv events received") if $n_ret < $n_recv;
	my %v = (p50 => $p50, p99 => $p99, max => $mx, p50r => $p50r, p99r => $p99r, appended => $n_ev, lost => $n_ev - $n_recv_d,
		dup => $n_recv - $n_recv_d, polls => $polls, idle_client => sprintf('%.1f', $ic / $K{BENCH_LP_IDLE}),
		idle_backend => sprintf('%.1f', $ib / $K{BENCH_LP_IDLE}));
	push @{ $self->{lp}{"$m|$_"} }, $v{$_} for keys %v;
	sql_try('DROP TABLE lp_recv, lp_done');
	return;
}

# a field over the repeats: median, max or sum
sub field
{
	my ($self, $m, $k, $how) = @_;
	my @n = num_list(@{ $self->{lp}{"$m|$k"} // [] });
	return undef unless @n;
	return median(\@n, '%.2f') if $how eq 'median';
	return sprintf('%.2f', (sort { $b <=> $a } @n)[0]) if $how eq 'max';
	my $s = 0;
	$s += $_ for @n;
	return $s;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## Long-poll, append commit → poll returned in the client\n\n",
		"$K{BENCH_LAT_CLIENTS} producer clients offer $K{BENCH_LAT_RATE} events/s (one per transaction) for $K{BENCH_LP_SECONDS} s per contender and repeat; one libpq client polls (100 events per poll, each in its own transaction: BEGIN; poll; COMMIT). Latency = client clock when the poll's result arrived (before the COMMIT) − (a) the commit timestamp of the append, which the server takes before flushing the commit record to disk, so (a) includes the producer's WAL flush; (b) the time the producer's COMMIT returned (pgbench's log), from when the event is visible. Idle CPU: ms of CPU per second over the $K{BENCH_LP_IDLE} s before the producers start, of the client and of its server backend. p50/p99 are medians over the repeats, max the maximum, counts summed.\n\n",
		"| contender | p50 ms (a) | p99 ms (a) | max ms (a) | p50 ms (b) | p99 ms (b) | appended | lost | duplicates | polls | idle CPU client ms/s | idle CPU backend ms/s | target | met? (a) | met? (b) |\n",
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
	for my $m (@MODES)
	{
		my @vals = @{ $self->{lp}{"$m|p50"} // [] };
		my $f = sub { $self->field($m, @_) };
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
		$p50 //= missing(\@vals);
		push @out, '| ' . join(' | ', $S{$m}, $p50, $p99 // '—', $mx // '—', $p50r // '—', $p99r // '—', fmt($f->('appended', 'sum')),
			$lost // '—', $dup // '—', fmt($f->('polls', 'sum')), $ic // '—', $ib // '—', $tgt, $met, $metr) . " |\n";
	}
	my @notes = map { "lp $_: $self->{lnote}{$_}" } grep { $self->{lnote}{$_} } sort keys %{ $self->{lnote} };
	push @out, "\nNotes: " . join('; ', @notes) . "\n" if @notes;
	return @out;
}

sub charts
{
	my ($self, $chart) = @_;
	my @rows;
	for my $m (@MODES)
	{
		my ($p50, $p99) = map { median($self->{lp}{"$m|$_"} // [], '%.2f') } qw(p50 p99);
		my ($max) = sort { $b <=> $a } num_list(@{ $self->{lp}{"$m|max"} // [] });
		push @rows, [ $S{$m}, $p50, $p99 // $p50, $max // $p99 // $p50 ] if defined $p50;
	}
	return $chart->latency('longpoll', "Long-poll: append commit -> poll result in the client ($K{BENCH_LAT_RATE} events/s offered)", \@rows);
}

1;
