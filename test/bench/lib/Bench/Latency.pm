#
# test/bench/lib/Bench/Latency.pm -- benchmark 4, end-to-end latency (append
# commit -> sink commit) at BENCH_LAT_RATE events/s for BENCH_LAT_SECONDS per
# contender.  The producer is pgbench -R (Poisson arrivals) with
# BENCH_LAT_CLIENTS clients, one event per transaction, every event carrying a
# unique id (a sequence) in its payload; the same producer for every
# contender.  Each delivered event becomes a sink row (id, clock_timestamp()).
# Latency = commit time of the sink row's transaction - commit time of the
# event's transaction, both read with pg_xact_commit_timestamp(xmin)
# (track_commit_timestamp = on): commit to commit, on the server's clock, no
# client involved.  Contender order rotates from repeat to repeat.
#
package Bench::Latency;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (
	sg  => 'streamguard pipeline, exactly_once',
	pgq => 'PgQ: pgqd defaults + consumer loop',
	raw => 'naive "id > last" poller, plain table',);

sub contenders { return ([ 'latency', [ @S{qw(sg pgq raw)} ] ]); }

sub setup
{
	my ($self) = @_;
	$self->SUPER::setup;
	# "contender|field" => per-repeat values (p50 p99 max min appended delivered lost dup rate batches)
	$self->{lat} = {};
	$self->{lnote} = {};
	($self->{pgqd}) = grep { -x } map { "$_/pgqd" } split /:/, $ENV{PATH};
	sql_file_once('setup_latency.sql');
	return;
}

sub run
{
	my ($self, $r) = @_;
	my @contenders = grep { defined } (
		have('pipe') ? sub { $self->latency_sg(@_) }  : $self->lat_fail($S{sg},  'PENDING'),
		have('pgq')  ? sub { $self->latency_pgq(@_) } : $self->lat_fail($S{pgq}, 'PENDING'),
		sub { $self->latency_raw(@_) });
	$_->($r) for rotated($r - 1, @contenders);
	sql_try('DROP TABLE IF EXISTS lat_sink_sg, lat_sink_pgq');
	return;
}

sub lpush { my ($self, $key, $v) = @_; push @{ $self->{lat}{$key} }, $v; return; }

# streamguard: an exactly_once pipeline (batch_size 1000) into the sink, its
# worker running before the producer starts; the event's xmin is read from the
# stream's segment tables
sub latency_sg
{
	my ($self, $r) = @_;
	my ($c, $st, $pn) = ($S{sg}, "lat_r$r", "lat_p_r$r");
	sql('DROP TABLE IF EXISTS lat_sink_sg; CREATE TABLE lat_sink_sg (id bigint, at timestamptz)');
	return $self->lat_fail($c, 'ERR', 'create_stream failed') unless create_stream($st, 4);
	my $err = create_pipeline($pn, $st,
		q{INSERT INTO lat_sink_sg (id, at) SELECT (payload->>'id')::bigint, clock_timestamp() FROM batch}, guarantee => 'exactly_once');
	$err = $err ? "create_pipeline failed: $err" : wait_worker($pn) ? '' : "the pipeline's worker did not start";
	my $produced = $err ? undef : rate_producer("lat_sg_r$r", 'latency_sg.sql', { stream => $st });
	$err ||= 'producer failed' unless defined $produced;
	if ($err) { drop_stream($st); return $self->lat_fail($c, 'ERR', $err); }
	$err = wait_pipeline($st, $pn, $produced, 60);
	note_to($self->{lnote}, $c, $err) if $err;
	$self->lpush("$c|batches", sql("SELECT batches FROM streamguard.pipelines WHERE pipeline = '$pn'"));
	drop_pipeline($pn);
	$self->latency_record($c, "bench_sg_events('$st')", 'lat_sink_sg', $produced);
	drop_stream($st);
	return;
}

# PgQ as its users run it: pgqd with its default settings (ticker_period 1 s;
# queue defaults ticker_max_count 500, ticker_max_lag 3 s) and one consumer
# looping next_batch / get_batch_events / INSERT into the sink / finish_batch,
# one transaction per batch, sleeping BENCH_LAT_POLL_MS when there is no batch
sub latency_pgq
{
	my ($self, $r) = @_;
	my ($c, $q) = ($S{pgq}, "lat_q_r$r");
	return $self->lat_fail($c, 'PENDING', 'pgqd not installed') unless $self->{pgqd};
	sql("SELECT pgq.create_queue('$q'); SELECT pgq.register_consumer('$q', 'lat');
	     DROP TABLE IF EXISTS lat_sink_pgq; CREATE TABLE lat_sink_pgq (id bigint, at timestamptz);
	     DELETE FROM bench_lat_ctl WHERE name = 'lat'; INSERT INTO bench_lat_ctl VALUES ('lat', NULL)");
	# pgqd with its defaults; only where to connect, log and keep its pid file are set
	spurt("$WORK/pgqd.ini", "[pgqd]\nlogfile = $LOGS/pgqd.log\npidfile = $WORK/pgqd.pid\n",
		"base_connstr = host=$ENV{PGHOST} port=$ENV{PGPORT} user=" . Bench::Pg::user() . "\ninitial_database = bench\ndatabase_list = bench\n");
	my $pgqd = spawn([ $self->{pgqd}, "$WORK/pgqd.ini" ], "$LOGS/pgqd.out", append => 1);
	my $consumer = background_call("CALL bench_pgq_consume('$q', 'lat', $K{BENCH_LAT_POLL_MS}, "
		  . ($K{BENCH_LAT_SECONDS} + 120) . ')', "lat_pgq_consumer_r$r");
	sleep 2;
	my $produced = -1;
	if (!alive($pgqd))
	{
		$self->lat_fail($c, 'ERR', 'pgqd did not start: ' . (split /\n/, slurp("$LOGS/pgqd.out"))[-1]);
		stop_pid($consumer);
	}
	else
	{
		$produced = rate_producer("lat_pgq_r$r", 'latency_pgq.sql', { queue => $q }) // $self->lat_fail($c, 'ERR', 'producer failed') // -1;
		sql("UPDATE bench_lat_ctl SET stop_at = $produced WHERE name = 'lat'");
		$self->consumer_done($c, $consumer, "lat_pgq_consumer_r$r");
	}
	my $ticks = sql_value("SELECT count(*) FROM pgq.tick t JOIN pgq.queue q ON q.queue_id = t.tick_queue WHERE q.queue_name = '$q'") // '?';
	stop_pid($pgqd, 'INT');
	if ($produced >= 0)
	{
		$self->lpush("$c|batches", $ticks);
		$self->latency_record($c, "bench_pgq_events('$q')", 'lat_sink_pgq', $produced);
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
	my ($self, $r) = @_;
	my $c = $S{raw};
	sql("DROP TABLE IF EXISTS lat_raw, lat_raw_pos, lat_sink_raw;
	     CREATE TABLE lat_raw (id bigserial PRIMARY KEY, key text, payload jsonb NOT NULL);
	     CREATE TABLE lat_raw_pos (seq bigint NOT NULL); INSERT INTO lat_raw_pos VALUES (0);
	     CREATE TABLE lat_sink_raw (id bigint, at timestamptz);
	     DELETE FROM bench_lat_ctl WHERE name = 'naive'; INSERT INTO bench_lat_ctl VALUES ('naive', NULL)");
	my $consumer = background_call("CALL bench_naive_consume($K{BENCH_LAT_POLL_MS}, " . ($K{BENCH_LAT_SECONDS} + 120) . ')',
		"lat_raw_consumer_r$r");
	sleep 1;
	my $produced = rate_producer("lat_raw_r$r", 'latency_raw.sql', {});
	$self->lat_fail($c, 'ERR', 'producer failed') unless defined $produced;
	sql("UPDATE bench_lat_ctl SET stop_at = 0 WHERE name = 'naive'");
	$self->consumer_done($c, $consumer, "lat_raw_consumer_r$r");
	$self->latency_record($c, "(SELECT (payload->>'id')::bigint AS ev_id, pg_xact_commit_timestamp(xmin) AS ev_commit FROM lat_raw) AS ev",
		'lat_sink_raw', $produced)
	  if defined $produced;
	sql_try('DROP TABLE lat_raw, lat_raw_pos, lat_sink_raw');
	return;
}

# a latency result that is not a number (PENDING, ERR), with a note; returns undef
sub lat_fail
{
	my ($self, $c, $v, $note) = @_;
	$self->lpush("$c|p50", $v);
	note_to($self->{lnote}, $c, $note) if $note;
	return;
}

# waits for a consumer loop to end (its procedure gives up after
# BENCH_LAT_SECONDS + 120 s); notes its error
sub consumer_done
{
	my ($self, $c, $pid, $logname) = @_;
	my $err = background_done($pid, $logname, $K{BENCH_LAT_SECONDS} + 180);
	note_to($self->{lnote}, $c, $err) if $err;
	return;
}

# latency statistics of one contender: <events source (SQL relation with
# ev_id, ev_commit)> <sink table> <events committed by the producer>
sub latency_record
{
	my ($self, $c, $src, $sink, $produced) = @_;
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
	return $self->lat_fail($c, 'ERR', 'statistics query failed') unless $ok;
	my ($n_ev, $n_ev_d, $n_sink, $n_sink_d, $n_nots, $p50, $p99, $mx, $mn, $matched) = split /\|/, $out, -1;
	my $note = $self->{lnote};
	note_to($note, $c, "the source holds $n_ev events, the producer committed $produced") if $n_ev != $produced;
	note_to($note, $c, "$n_nots events without a commit timestamp") if $n_nots != 0;
	note_to($note, $c, 'duplicate ids in the source') if $n_ev_d != $n_ev;
	note_to($note, $c, ($n_sink - $matched) . ' sink rows match no appended event') if $matched != $n_sink;
	return $self->lat_fail($c, 'ERR', 'nothing delivered') if $p50 eq '';
	my %v = (p50 => $p50, p99 => $p99, max => $mx, min => $mn, appended => $n_ev, delivered => $n_sink_d,
		lost => $n_ev - $n_sink_d, dup => $n_sink - $n_sink_d, rate => sprintf('%.0f', $n_ev / $K{BENCH_LAT_SECONDS}));
	$self->lpush("$c|$_", $v{$_}) for keys %v;
	note_to($note, $c, "negative latency $mn ms (clock?)") if $mn < 0;
	return;
}

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
sub lat_field
{
	my ($self, $c, $f, $how) = @_;
	my @v = @{ $self->{lat}{"$c|$f"} // [] };
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
	my ($self, $c, $base) = @_;
	my $v = paired_ratio($self->{lat}{"$c|p50"} // [], $self->{lat}{"$base|p50"} // []);
	return defined $v ? sprintf($v < 0.1 ? '%.4f' : '%.2f', $v) : undef;
}

sub report
{
	my ($self) = @_;
	my $lat = $self->{lat};
	my @out = ("\n## End-to-end latency, append commit → sink commit\n\n",
		"$K{BENCH_LAT_CLIENTS} producer clients offer $K{BENCH_LAT_RATE} events/s (pgbench -R, one event per transaction) for $K{BENCH_LAT_SECONDS} s per contender and repeat; latency = pg_xact_commit_timestamp(sink row xmin) - pg_xact_commit_timestamp(event row xmin). p50 and p99 are medians over the repeats, max the maximum, counts summed over the repeats. PgQ: pgqd with default settings; the PgQ and naive consumers sleep $K{BENCH_LAT_POLL_MS} ms when idle.\n\n",
		"| contender | p50 ms | p99 ms | max ms | events appended | delivered | lost | duplicates | p50 ÷ PgQ p50 | p50 ÷ naive p50 | target | met? |\n",
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
	for my $c (@S{qw(sg pgq raw)})
	{
		my @vals = @{ $lat->{"$c|p50"} // [] };
		my %f = map { $_ => scalar $self->lat_field($c, $_, 'median') } qw(p50 p99);
		$f{max} = $self->lat_field($c, 'max', 'max');
		$f{$_} = $self->lat_field($c, $_, 'sum') for qw(appended delivered lost dup);
		my ($tgt, $met) = ('reference', '—');
		if ($c eq $S{sg})
		{
			$tgt = 'p50 ≤ 2 ms, p99 ≤ 20 ms, nothing lost';
			$met = !defined $f{p50} ? ((grep { $_ eq 'PENDING' } @vals) ? 'pending' : 'no (failed)')
			  : ($f{p50} <= 2 && ($f{p99} // 0) <= 20 && ($f{lost} // 1) == 0 && ($f{dup} // 1) == 0 && !grep { $_ eq 'ERR' } @vals)
			  ? 'yes' : '**no**';
		}
		$f{p50} //= missing(\@vals);
		push @out, '| ' . join(' | ', $c, $f{p50}, (map { $f{$_} // '—' } qw(p99 max)), fmt($f{appended}), fmt($f{delivered}),
				(map { $f{$_} // '—' } qw(lost dup)), $self->lat_ratio($c, $S{pgq}) // '—', $self->lat_ratio($c, $S{raw}) // '—', $tgt, $met) . " |\n";
	}
	push @out, "\nPer repeat:\n\n",
	  "| contender | p50 ms | p99 ms | max ms | appended | lost | offered rate ev/s | pipeline batches / PgQ ticks | notes |\n",
	  "|---|---|---|---|---|---|---|---|---|\n";
	for my $c (@S{qw(sg pgq raw)})
	{
		push @out, "| $c |" . join(' |', map { join('', map { " $_" } @{ $lat->{"$c|$_"} // [] }) } qw(p50 p99 max appended lost rate batches))
		  . ' | ' . ($self->{lnote}{$c} // '') . " |\n";
	}
	return @out;
}

# p50 / p99 / max per contender (medians over the repeats; max: the maximum)
sub charts
{
	my ($self, $chart) = @_;
	my @rows;
	for my $c (@S{qw(sg pgq raw)})
	{
		my ($p50, $p99, $max) = ($self->lat_field($c, 'p50', 'median'), $self->lat_field($c, 'p99', 'median'), $self->lat_field($c, 'max', 'max'));
		push @rows, [ $c, $p50, $p99 // $p50, $max // $p99 // $p50 ] if defined $p50;
	}
	return $chart->latency('latency', "End-to-end latency, append commit -> sink commit ($K{BENCH_LAT_RATE} events/s offered)", \@rows);
}

1;
