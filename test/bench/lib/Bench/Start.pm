#
# test/bench/lib/Bench/Start.pm -- benchmark 8, pipeline start: with
# BENCH_START_EVENTS events waiting in a 4-partition stream, the time from the
# commit of create_pipeline (and later of resume_pipeline after a pause) to
# the commit of the pipeline's first batch, both from pg_xact_commit_timestamp.
#
package Bench::Start;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Bench;
use Bench::Pg;
use Bench::SG;

sub knobs { return (BENCH_START_EVENTS => [ 500000, 'k2' ]); }

sub contenders { return ([ 'start', [qw(create resume)] ]); }

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

sub run
{
	my ($self, $r) = @_;
	my $stream = "s8r$r";
	my $n = $K{BENCH_START_EVENTS};
	my $ms = $self->{ms} //= {};   # create|resume => [ms per repeat]
	my $ready = have('pipe') && create_stream($stream, 4)
	  && prefill("prefill_start_r$r", 'append_batch_sg.sql', { stream => $stream }, $n / 1000);
	if (!$ready) { push @{ $ms->{$_} }, have('pipe') ? 'ERR' : 'PENDING' for qw(create resume); return; }
	sql(sink_ddl('sink_start'));
	checkpoint();
	my $name = "start_r$r";
	my $x = start_call("SELECT streamguard.create_pipeline('$name', '$stream', 'INSERT INTO sink_start (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch', batch_size => 1000)");
	push @{ $ms->{create} }, (defined $x ? start_latency($x) : undef) // 'ERR';
	sql("SELECT streamguard.pause_pipeline('$name')");
	wait_until(30, 0.05, sub { sql("SELECT state FROM streamguard.pipelines WHERE pipeline = '$name'") eq 'paused'
		  && sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamguard pipeline'") == 0 });
	$x = start_call("SELECT streamguard.resume_pipeline('$name')");
	push @{ $ms->{resume} }, (defined $x ? start_latency($x) : undef) // 'ERR';
	drop_pipeline($name);
	sql_try('DROP TABLE IF EXISTS sink_start');
	drop_stream($stream);
	return;
}

sub report
{
	my ($self) = @_;
	my @out = ("\n## Pipeline start, commit → first batch committed\n\n",
		fmt($K{BENCH_START_EVENTS}) . " events wait in a 4-partition stream; ms from the commit of the call to the commit of the pipeline's first batch (pg_xact_commit_timestamp of both). Median and maximum over the repeats.\n\n",
		"| call | median ms | max ms | per repeat | target | met? |\n|---|---:|---:|---|---|---|\n");
	for my $c (qw(create resume))
	{
		my @v = @{ $self->{ms}{$c} // [] };
		my @n = sort { $a <=> $b } num_list(@v);
		my $med = median(\@n, '%.1f');
		my $max = @n ? sprintf('%.1f', $n[-1]) : undef;
		my $met = !@v ? 'not run' : (@n != @v || !defined $max) ? 'no (failed)' : $max <= 50 ? 'yes' : '**no**';
		push @out, "| ${c}_pipeline | " . ($med // '—') . ' | ' . ($max // '—') . ' | ' . join(' ', @v) . " | ≤ 50 ms | $met |\n";
	}
	return @out;
}

1;
