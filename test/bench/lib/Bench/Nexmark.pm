#
# test/bench/lib/Bench/Nexmark.pm -- benchmark 15, Nexmark (docs/nexmark.md).
# The queries are those of the TAP test, test/nexmark/queries.pl (q0 ... q8,
# q5w and q7b as exactly_once pipelines over the stream nx, each with its
# plain SQL), their pipelines at BENCH_NX_BATCH events per batch.
#
# Set-up: BENCH_NX_EVENTS events of test/nexmark/generator.sql (seed 42) in a
# table nx_input and, appended in transactions of 10,000, in a 1-partition
# stream nx, then the event {"kind": "end", ts 2030} that closes every window
# and auction.  Per repeat and query, in an order rotating from repeat to
# repeat:
#   pipeline   the query's objects created, its pipelines drain the whole
#              stream; events/s = the stream's events after the first
#              batch of its first pipeline / time from that batch's commit to
#              the last batch commit of its last pipeline (checkpoint log);
#   plain SQL  the same query as one INSERT ... SELECT over nx_input, in one
#              transaction: events/s = BENCH_NX_EVENTS / its time (the bound:
#              the same SQL over the whole input at once, with no stream, no
#              state kept between batches, nothing incremental);
#   check      the pipeline's result EXCEPT ALL the plain result, both ways,
#              must be empty (else the run exits 1).
# Window close latency, per repeat, of the window queries (q5, q5w, q7): their
# pipelines over a fresh stream while one pgbench client appends 100
# generator events per transaction at 100 transactions/s (10,000 events/s,
# the generator's event-time rate) for BENCH_NX_LAT_SECONDS; a window's
# latency = commit time of its output row (the query's final table) - the
# appended_at of the first event whose event time is at or past the
# window's end (the event that moved the watermark past it).
#
package Bench::Nexmark;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(time);

use Bench;
use Bench::Pg;
use Bench::SG;

my @C = ('plain SQL', 'pipeline');

sub knobs
{
	return (
		BENCH_NX_EVENTS      => [ 1000000, 'k1' ],
		BENCH_NX_BATCH       => [ 10000,  [ sub { $_[0] =~ /^[1-9][0-9]*$/ && $_[0] <= 100000 }, 'an integer from 1 to 100000 (a batch_size)' ] ],
		BENCH_NX_LAT_SECONDS => [ 10,     'int' ],);
}

sub files { return ('../nexmark/generator.sql', '../nexmark/queries.pl'); }

# the queries, read from the copy of test/nexmark/queries.pl (loaded on first
# use, not when the module is: the outer part only needs the knobs)
sub queries
{
	my ($self) = @_;
	return @{ $self->{queries} } if $self->{queries};
	my @q = do "$DIR/../nexmark/queries.pl" or die "bench: nexmark/queries.pl: " . ($@ || $!) . "\n";
	$self->{queries} = \@q;
	return @q;
}

sub contenders { return map { [ "nexmark $_", [@C] ] } qw(q0 q1 q2 q3 q4 q5 q5w q6 q7 q7b q8); }

sub setup
{
	my ($self) = @_;
	$self->SUPER::setup();
	$self->{lat} = {};   # query => { p50 => [...], p99 => [...], max => [...], windows => [...] }
	return $self->{why} = 'streamguard pipelines are not available' unless have('pipe');
	my $n = $K{BENCH_NX_EVENTS};
	log_msg("nexmark: generating $n events into nx_input and the stream nx");
	my ($ok, undef, $err) = sql_try(slurp("$DIR/../nexmark/generator.sql") . qq{
DROP TABLE IF EXISTS nx_input;
CREATE TABLE nx_input AS SELECT * FROM nexmark_events(0, $n, 42);
ANALYZE nx_input;
SELECT streamguard.create_stream('nx', 1);});
	$ok &&= (sql_try(qq{DO \$\$
BEGIN
	FOR c IN 0 .. ($n - 1) / 10000 LOOP
		PERFORM count(*) FROM streamguard.append_batch('nx',
			(SELECT array_agg(payload ORDER BY id) FROM nx_input WHERE id / 10000 = c),
			keys => (SELECT array_agg(kind ORDER BY id) FROM nx_input WHERE id / 10000 = c));
		COMMIT;
	END LOOP;
	PERFORM streamguard.append('nx', '{"kind": "end", "ts": "2030-01-01T00:00:00Z"}', key => 'end');
END \$\$}, timeout => 3600))[0] if $ok;
	$self->{why} = 'loading the events failed: ' . error_line($err) unless $ok;
	checkpoint() if $ok;
	return;
}

sub run
{
	my ($self, $r) = @_;
	my @q = $self->queries;
	for my $q (rotated($r, @q))
	{
		my $g = "nexmark $q->{name}";
		if ($self->{why}) { $self->fail_all([ map { "$g|$_" } @C ], have('pipe') ? 'ERR' : 'PENDING', $self->{why}); next; }
		$self->check($q, $r) if $self->pipeline($q, $g, $r) && $self->plain($q, $g);
		sql_try($q->{drop});
		sql_try("DROP TABLE IF EXISTS nx_ref");
	}
	$self->latency($_, $r) for grep { $_->{window} && !$self->{why} } @q;
	# after the last repeat, nothing left for the benchmarks that run after it
	if ($r == $K{BENCH_REPEAT} && !$self->{why})
	{
		drop_stream('nx');
		sql_try('DROP TABLE IF EXISTS nx_input, nx_ref');
	}
	return;
}

# the query's set-up with its pipelines at BENCH_NX_BATCH events per batch,
# in one transaction: their workers start with that batch size
sub setup_sql
{
	my ($q, $setup) = @_;
	return "BEGIN;\n$setup;\n"
	  . join('', map { "SELECT streamguard.alter_pipeline('$_', batch_size => $K{BENCH_NX_BATCH});\n" } @{ $q->{pipelines} })
	  . 'COMMIT;';
}

# the plain-SQL bound: one INSERT ... SELECT over the whole input, timed
# inside its transaction, into a table like the query's output; its result
# stays there for the check.  True when it ran.
sub plain
{
	my ($self, $q, $g) = @_;
	sql_try("DROP TABLE IF EXISTS nx_ref");
	checkpoint();
	my ($ok, $t, $err) = sql_try("CREATE TABLE nx_ref (LIKE $q->{name}_out);
BEGIN;
INSERT INTO nx_ref $q->{plain};
SELECT extract(epoch FROM clock_timestamp() - now());
COMMIT;");
	if (!$ok || !$t) { $self->add_val("$g|plain SQL", 'ERR'); $self->add_note("$g|plain SQL", error_line($err)); return 0; }
	$self->add_val("$g|plain SQL", sprintf('%.1f', $K{BENCH_NX_EVENTS} / ($t || 1e-6)));
	return 1;
}

# the query's pipelines over the whole stream; events/s from the checkpoint
# log.  True when they drained it (their result stays for the check).
sub pipeline
{
	my ($self, $q, $g, $r) = @_;
	my $key = "$g|pipeline";
	my ($first, $last) = ($q->{pipelines}[0], $q->{pipelines}[-1]);
	sql_try($q->{drop});
	checkpoint();
	my ($ok, undef, $err) = sql_try(setup_sql($q, $q->{setup}));
	if (!$ok) { $self->fail_all([$key], 'ERR', error_line($err)); return 0; }
	# the first batch's commit: caught before the maintenance worker can trim
	# the checkpoint log (streamguard.batch_history batches per pipeline)
	my $b0;
	wait_until(120, 0.05, sub {
		$b0 = sql_value("SELECT events_in || '|' || committed_at FROM streamguard.pipeline_batches
			WHERE pipeline = '$first' AND events_in > 0 ORDER BY batch_id LIMIT 1");
		return defined $b0 && $b0 ne '';
	});
	my $total = stream_events('nx');
	$err = (defined $b0 && $b0 ne '') ? '' : "$first committed no batch within 120 s";
	$err ||= wait_pipeline('nx', $first, $total, $K{BENCH_PIPELINE_TIMEOUT});
	$err ||= wait_pipeline($q->{source}, $last, stream_events($q->{source}), $K{BENCH_PIPELINE_TIMEOUT}) if $last ne $first;
	if ($err) { $self->fail_all([$key], 'ERR', $err); return 0; }
	my ($n0, $t0) = split /\|/, $b0, 2;
	my $rate = sql_value("SELECT round(($total - $n0) / nullif(extract(epoch FROM max(committed_at) - '$t0'::timestamptz), 0), 1)
		FROM streamguard.pipeline_batches WHERE pipeline = '$last'");
	if (!defined $rate || $rate eq '') { $self->fail_all([$key], 'ERR', 'no time span'); return 0; }
	$self->add_val($key, $rate);
	log_msg("nexmark $q->{name} r$r: $rate events/s");
	return 1;
}

# the pipeline's result against the plain SQL's (nx_ref): equal, or a failed check
sub check
{
	my ($self, $q, $r) = @_;
	my $diff = sql_value("SELECT (SELECT count(*) FROM (($q->{out}) EXCEPT ALL SELECT * FROM nx_ref) a) || '|'
		|| (SELECT count(*) FROM (SELECT * FROM nx_ref EXCEPT ALL ($q->{out})) b) || '|' || (SELECT count(*) FROM nx_ref)");
	my ($extra, $missing, $rows) = split /\|/, $diff // '';
	if (!defined $rows || $extra || $missing)
	{
		$self->fail_check("$q->{name} r$r: the pipeline's result differs from the plain SQL ("
			  . ($rows // '?') . ' rows expected, ' . ($extra // '?') . ' extra, ' . ($missing // '?') . ' missing)');
		$self->add_note("nexmark $q->{name}|pipeline", "r$r: result differs from the plain SQL");
		return;
	}
	$self->{rows}{ $q->{name} } = $rows;
	log_msg("nexmark $q->{name} r$r: $rows rows, equal to the plain SQL");
	return;
}

# window close latency of a window query: its pipelines over a fresh stream
# fed live (pgbench, 100 events per transaction, 100 transactions/s)
sub latency
{
	my ($self, $q, $r) = @_;
	my $st = "nx_live_r$r";
	my $l = $self->{lat}{ $q->{name} } //= {};
	(my $setup = $q->{setup}) =~ s/\('(\w+)', 'nx',/('$1', '$st',/g;
	sql_try($q->{drop});
	my ($ok, undef, $err) = sql_try("SELECT streamguard.create_stream('$st', 1);
DROP SEQUENCE IF EXISTS nx_live_seq; CREATE SEQUENCE nx_live_seq;\n" . setup_sql($q, $setup));
	$err = $ok ? '' : error_line($err);
	for my $p (@{ $q->{pipelines} }) { $err ||= wait_worker($p) ? '' : "the worker of $p did not start"; }
	my $script = "$WORK/nx_live.sql";
	spurt($script, "WITH e AS MATERIALIZED (SELECT * FROM nexmark_events(nextval('nx_live_seq') * 100, 100, 42))
SELECT count(*) FROM streamguard.append_batch(:stream, (SELECT array_agg(payload ORDER BY id) FROM e),
	keys => (SELECT array_agg(kind ORDER BY id) FROM e));\n");
	my $res = $err ? undef : pgbench("nx_live_$q->{name}_r$r", $script, { stream => $st }, -c => 1, -j => 1, -R => 100,
		-T => $K{BENCH_NX_LAT_SECONDS});
	$err ||= 'the producer failed' unless $res;
	# every window that an appended event closed has its row a moment later
	sleep 2 unless $err;
	if (!$err)
	{
		# the stream's segment tables, with appended_at
		my $segs = sql("SELECT string_agg(format('SELECT appended_at, payload FROM streamguard_data.%I', 's' || g.stream_id || '_' || g.seg),
			' UNION ALL ' ORDER BY g.seg)
			FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = '$st'");
		my ($sok, $out, $serr) = sql_try("CREATE TEMP TABLE ev AS SELECT appended_at, (payload->>'ts')::timestamptz AS ts FROM ($segs) s;
CREATE INDEX ON ev (ts);
WITH w AS (SELECT window_end, max(pg_xact_commit_timestamp(xmin)) AS c FROM $q->{name}_out GROUP BY 1),
	l AS (SELECT extract(epoch FROM w.c - (SELECT appended_at FROM ev WHERE ev.ts >= w.window_end ORDER BY ts LIMIT 1)) * 1000 AS ms
		FROM w)
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) || '|' ||
	round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) || '|' || round(max(ms)::numeric, 1) || '|' || count(ms)
FROM l");
		my @f = split /\|/, $out // '';
		if (@f == 4 && $f[3] > 0) { push @{ $l->{$_} }, shift @f for qw(p50 p99 max windows); }
		else { $err = $sok ? "no window closed ($out)" : 'the statistics query failed: ' . error_line($serr); }
	}
	push @{ $l->{note} }, "r$r: $err" if $err;
	sql_try($q->{drop});
	drop_stream($st);
	return;
}

sub rows
{
	my ($self) = @_;
	return map { $self->row("nexmark $_", 'pipeline', 'plain SQL', undef, 'ratio to the plain SQL over the whole input') }
	  map { $_->[0] =~ /(q\w+)/ } $self->contenders;
}

# a window query's close latency over the repeats: the medians of p50 and
# p99 (formatted with $fmt, as Bench's median), the maximum, the windows
sub lat_summary
{
	my ($self, $q, $fmt) = @_;
	my $l = $self->{lat}{$q};
	my $w = 0;
	$w += $_ for @{ $l->{windows} // [] };
	return (median($l->{p50} // [], $fmt), median($l->{p99} // [], $fmt), (sort { $b <=> $a } @{ $l->{max} // [] })[0], $w);
}

# bench-nexmark.png: per query, the pipeline's events/s against the plain
# SQL's (its bound); bench-nexmark-latency.png: the window queries' close
# latency
sub charts
{
	my ($self, $chart) = @_;
	my $n = $self->bar_charts($chart, 'Nexmark: exactly_once pipelines vs the same SQL over the whole input (x bound: pipeline / plain SQL)');
	my @rows;
	for my $q (sort keys %{ $self->{lat} })
	{
		my ($p50, $p99, $max) = $self->lat_summary($q, '');
		push @rows, [ $q, $p50, $p99 // $p50, $max // $p99 // $p50 ] if defined $p50;
	}
	$n += $chart->latency('nexmark-latency', 'Nexmark window close latency, 10,000 events/s: append past the end -> result committed',
		\@rows) if @rows;
	return $n;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## Nexmark\n\n");
	return (@out, "Not run: $self->{why}\n") if $self->{why} && !have('pipe');
	push @out, "$K{BENCH_NX_EVENTS} events of test/nexmark/generator.sql (seed 42) in one stream; per query, events/s of its "
	  . "exactly_once pipeline(s) draining the stream and of the same query as one INSERT ... SELECT over the whole input "
	  . "(medians over the repeats), and the result's rows (each checked equal to the plain SQL's).\n\n",
	  "| query | pipeline events/s | plain SQL events/s | pipeline / plain | rows |\n|---|---:|---:|---:|---:|\n";
	for my $n (map { /(q\w+)/ } map { $_->[0] } $self->contenders)
	{
		my ($p, $s) = map { $self->{vals}{"nexmark $n|$_"} // [] } 'pipeline', 'plain SQL';
		my $ratio = paired_ratio($p, $s);
		push @out, "| $n | " . (fmt(median($p)) || missing($p)) . ' | ' . (fmt(median($s)) || missing($s)) . ' | '
		  . (defined $ratio ? sprintf('%.3f', $ratio) : '—') . ' | ' . ($self->{rows}{$n} // '—') . " |\n";
	}
	push @out, "\nWindow close latency: the window queries' pipelines over a fresh stream while one pgbench client appends "
	  . "100 events per transaction at 100 transactions/s (10,000 events/s, the generator's event-time rate) for "
	  . "$K{BENCH_NX_LAT_SECONDS} s; a window's latency = commit time of its output row - appended_at of the first event at or "
	  . "past its end. p50 and p99: medians over the repeats; max: the maximum.\n\n",
	  "| query | p50 ms | p99 ms | max ms | windows |\n|---|---:|---:|---:|---:|\n";
	for my $n (sort keys %{ $self->{lat} })
	{
		my ($p50, $p99, $max, $w) = $self->lat_summary($n, '%.1f');
		push @out, "| $n | " . join(' | ', $p50 // 'error', $p99 // '—', $max // '—', $w) . " |\n";
		push @out, "\nNotes ($n): " . join('; ', @{ $self->{lat}{$n}{note} }) . "\n" if $self->{lat}{$n}{note};
	}
	return @out;
}

1;
