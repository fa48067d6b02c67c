#
# test/bench/lib/Bench/Remote.pm -- benchmark 5, remote sinks and sources,
# against a SECOND throwaway server (same settings, plus
# max_prepared_transactions = 20) on the same unix socket directory.  The
# bench server reaches it through a foreign server of wrapper
# streamguard_remote (host = the socket directory) and a user mapping for the
# bench's superuser with no password (trust on the local socket): a bench
# shortcut; non-superusers need a password mapping.
# Per repeat, a local stream (4 partitions) is pre-filled with
# BENCH_REMOTE_EVENTS events (1,000 per transaction), and a stream on the
# remote server gets the same events (same partition, seq, key, payload).
# Then, contenders in a rotating order, each after a CHECKPOINT on both:
# remote sink (rows = partition, seq, key, payload; remote table with a
# processed_at DEFAULT now() column, no index):
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
# remote source: an exactly_once pipeline reading the remote stream
# (source_server) into a local sink vs one reading the local stream (the same
# events) into the same local sink (truncated in between).
#
package Bench::Remote;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(time);

use Bench;
use Bench::Pg;
use Bench::SG;

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
my @RSINKS = qw(rsink_copy rsink_copyb rsink_copyb2 rsink_2pc rsink_2pc2 rsink_off rsink_off2 rsink_alo rsink_amo);

sub knobs { return (BENCH_REMOTE_EVENTS => [ 300000, 'k2' ]); }

sub contenders
{
	return ([ $R1, [ @S5{qw(copy copyb copyb2 2pc 2pc2 off off2 alo amo)} ] ], [ $R2, [ @S6{qw(local local2 rem rem2)} ] ]);
}

sub run
{
	my ($self, $r) = @_;
	my @all = $self->keys_all;
	return $self->fail_all(\@all, 'PENDING') unless have('pipe');
	return $self->fail_all(\@all, 'ERR', 'the remote server could not be set up (see remote.err)') unless $self->remote_server;
	my $remote = $self->{remote};
	my %rs = (local => "rs_r$r", remote => "rsrc_r$r", n => $K{BENCH_REMOTE_EVENTS});
	return $self->fail_all(\@all, 'ERR', 'create_stream failed') unless create_stream($rs{local}, 4);
	if (!prefill("prefill_remote_r$r", 'append_batch_sg.sql', { stream => $rs{local} }, $rs{n} / 1000))
	{
		drop_stream($rs{local});
		return $self->fail_all(\@all, 'ERR', 'pre-fill failed');
	}
	$self->remote_copy_events(\%rs);
	sql(sink_ddl($_), node => $remote) for @RSINKS;
	sql(sink_ddl('lsink'));
	sql('VACUUM ANALYZE');
	sql('VACUUM ANALYZE', node => $remote);

	my @runs = (
		sub { $self->remote_copy($S5{copy},  'rsink_copy',  0, \%rs) },
		sub { $self->remote_copy($S5{copyb}, 'rsink_copyb', 1, \%rs) },
		sub { $self->remote_copy($S5{copyb2}, 'rsink_copyb2', 2, \%rs) },
		sub { $self->remote_sink($S5{'2pc'}, 'exactly_once',  'two_phase', 'rsink_2pc', $r, \%rs) },
		sub { $self->remote_sink($S5{'2pc2'}, 'exactly_once', 'two_phase', 'rsink_2pc2', $r, \%rs, 2) },
		sub { $self->remote_sink($S5{off},   'exactly_once',  'offsets',   'rsink_off', $r, \%rs) },
		sub { $self->remote_sink($S5{off2},  'exactly_once',  'offsets',   'rsink_off2', $r, \%rs, 2) },
		sub { $self->remote_sink($S5{alo},   'at_least_once', undef,       'rsink_alo', $r, \%rs) },
		sub { $self->remote_sink($S5{amo},   'at_most_once',  undef,       'rsink_amo', $r, \%rs) },
		sub { $self->remote_source($S6{local}, 'local',  $r, \%rs) },
		sub { $self->remote_source($S6{local2}, 'local', $r, \%rs, 2) },
		sub { $self->remote_source($S6{rem},   'remote', $r, \%rs) },
		sub { $self->remote_source($S6{rem2},  'remote', $r, \%rs, 2) });
	$_->() for rotated($r - 1, @runs);

	drop_stream($rs{local});
	drop_stream($rs{remote}, node => $remote);
	sql_try('DROP TABLE IF EXISTS ' . join(', ', @RSINKS), node => $remote);
	sql_try('DROP TABLE IF EXISTS lsink');
	return;
}

# the remote server, its streamguard, and the foreign server + user mapping on
# the bench server; started once (a failure is not retried)
sub remote_server
{
	my ($self) = @_;
	return $self->{remote} if $self->{remote} || $self->{tried}++;
	log_msg('starting the remote server');
	my $node = start_cluster('remote', 'max_prepared_transactions = 20') or return;
	my ($ok, undef, $err) = sql_try('CREATE EXTENSION streamguard', node => $node);
	($ok, undef, $err) = sql_try("BEGIN;
		CREATE SERVER bench_remote FOREIGN DATA WRAPPER streamguard_remote
		    OPTIONS (host '" . $node->host . "', port '" . $node->port . "', dbname 'bench', application_name 'bench-remote');
		CREATE USER MAPPING FOR CURRENT_USER SERVER bench_remote OPTIONS (user '" . Bench::Pg::user() . "');
		COMMIT;") if $ok;
	if (!$ok) { spurt("$LOGS/remote.err", $err); log_msg('remote: set-up failed: ', error_line($err)); return; }
	return $self->{remote} = $node;
}

sub checkpoint_both { my ($self) = @_; checkpoint(); checkpoint(node => $self->{remote}); return; }

# the local stream's events onto a remote stream: staged by COPY, appended
# 1,000 per transaction in (seq, partition) order, with their partitions, so
# seqs are the same too; the local and remote events are counted
sub remote_copy_events
{
	my ($self, $rs) = @_;
	my $remote = $self->{remote};
	$rs->{select} = segment_select($rs->{local});
	sql("DROP TABLE IF EXISTS rstage;
	     CREATE TABLE rstage (rn bigserial PRIMARY KEY, partition int, seq bigint, key text, payload jsonb);
	     SELECT streamguard.create_stream('$rs->{remote}', 4);", node => $remote);
	run_sh("$LOGS/remote.err", 600, '"$1" -X -q -v ON_ERROR_STOP=1 -c "$2" | "$1" -X -q -v ON_ERROR_STOP=1 -h "$3" -p "$4" -c "$5" >/dev/null',
		"$BIN/psql", "COPY (SELECT * FROM ($rs->{select}) AS e ORDER BY seq, partition) TO STDOUT", $remote->host, $remote->port,
		'COPY rstage (partition, seq, key, payload) FROM STDIN')
	  or log_msg('remote: staging the events failed (see remote.err)');
	my ($ok, undef, $err) =
	  sql_try(slurp("$SQL/remote_fill.sql") . "CALL bench_remote_fill('$rs->{remote}', " . ($rs->{n} / 1000) . ');', node => $remote);
	log_msg("remote: filling $rs->{remote} failed: ", error_line($err)) unless $ok;
	sql_try('DROP TABLE rstage', node => $remote);
	my $got = stream_events($rs->{remote}, node => $remote);
	$self->add_note("$R2|$S6{rem}", "remote stream holds $got events, expected $rs->{n}") if $got ne $rs->{n};
	$got = stream_events($rs->{local});
	$self->add_note("$R1|$S5{copy}", "local stream holds $got events, expected $rs->{n}") if $got ne $rs->{n};
	return;
}

# baseline and reference: psql COPY TO | [awk: blocks of 1,000 rows |] psql
# COPY FROM, wall time; $blocks 2: two such pipes side by side, each with
# half of the partitions
sub remote_copy
{
	my ($self, $label, $t, $blocks, $rs) = @_;
	my $key = "$R1|$label";
	my $remote = $self->{remote};
	$self->checkpoint_both;
	my $log = "$LOGS/remote_copy.log";
	my @psql = ("$BIN/psql", "COPY ($rs->{select}) TO STDOUT", $remote->host, $remote->port);
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
	my $rows = sql_value("SELECT count(*) FROM $t", node => $remote) // '?';
	if (!$ok || $rows ne $rs->{n})
	{
		my ($e) = slurp($log) =~ /(.*ERROR.*)/;
		return $self->fail_all([$key], 'ERR', "COPY failed or incomplete: $rows rows (" . substr($e // '', 0, 120) . ')');
	}
	$self->add_val($key, sprintf('%.1f', $rows / ($t1 - $t0)));
	return;
}

# a pipeline into the remote sink $t, timed from the sink ($workers: 1)
sub remote_sink
{
	my ($self, $label, $g, $mode, $t, $r, $rs, $workers) = @_;
	my ($key, $pn, $n) = ("$R1|$label", "rsink_${t}_r$r", $rs->{n});
	my $remote = $self->{remote};
	$self->checkpoint_both;
	my $err = create_pipeline($pn, $rs->{local}, 'SELECT partition, seq, key, payload FROM batch',
		guarantee => $g, sink_server => 'bench_remote', sink_table => "public.$t", ($mode ? (sink_mode => $mode) : ()),
		($workers ? (workers => $workers) : ()));
	return $self->fail_all([$key], 'ERR', "create_pipeline failed: $err") if $err;
	# local positions first, then (two_phase: COMMIT PREPARED; at_most_once: the
	# remote transaction comes after the positions) the remote rows
	$err = wait_count("SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers
	                   WHERE stream = '$rs->{local}' AND consumer = 'pipeline:$pn'", $n, $K{BENCH_PIPELINE_TIMEOUT}, $pn)
	  || wait_count("SELECT count(*) FROM $t", $n, 60, $pn, node => $remote);
	drop_pipeline($pn);
	return $self->fail_all([$key], 'ERR', $err) if $err;
	my $s = sink_stats($t, node => $remote);
	return $self->fail_all([$key], 'ERR', "remote sink holds $s->{rows} rows ($s->{distinct} distinct) of $n events")
	  if $s->{distinct} != $n || ($g eq 'exactly_once' && $s->{rows} != $n);
	$self->add_note($key, ($s->{rows} - $n) . ' duplicate rows') if $s->{rows} != $n;
	if ($mode && $mode eq 'two_phase')
	{
		my $left = sql_value('SELECT count(*) FROM pg_prepared_xacts', node => $remote) // '?';
		$self->add_note($key, "$left prepared transactions left on the remote") if $left ne '0';
	}
	return $self->fail_all([$key], 'ERR', 'a single batch: cannot time it') unless defined $s->{rate};
	$self->add_val($key, $s->{rate});
	return;
}

# an exactly_once pipeline from the local or the remote stream into lsink
# ($workers: 1)
sub remote_source
{
	my ($self, $label, $where, $r, $rs, $workers) = @_;
	my ($key, $pn, $n) = ("$R2|$label", "rsrc_${where}_r$r" . ($workers ? "_w$workers" : ''), $rs->{n});
	sql('TRUNCATE lsink');
	$self->checkpoint_both;
	my $err = create_pipeline($pn, $rs->{$where},
		'INSERT INTO lsink (partition, seq, key, payload) SELECT partition, seq, key, payload FROM batch',
		guarantee => 'exactly_once', ($where eq 'remote' ? (source_server => 'bench_remote') : ()),
		($workers ? (workers => $workers) : ()));
	return $self->fail_all([$key], 'ERR', "create_pipeline failed: $err") if $err;
	$err = wait_count('SELECT count(*) FROM lsink', $n, $K{BENCH_PIPELINE_TIMEOUT}, $pn);
	drop_pipeline($pn);
	return $self->fail_all([$key], 'ERR', $err) if $err;
	my $s = sink_stats('lsink');
	return $self->fail_all([$key], 'ERR', "local sink holds $s->{rows} rows ($s->{distinct} distinct) of $n events")
	  if $s->{rows} != $n || $s->{distinct} != $n;
	return $self->fail_all([$key], 'ERR', 'a single batch: cannot time it') unless defined $s->{rate};
	$self->add_val($key, $s->{rate});
	return;
}

sub rows
{
	my ($self) = @_;
	return (
		$self->row($R1, $S5{copy}, $S5{copy}, undef, 'baseline'),
		$self->row($R1, $S5{copyb}, $S5{copy}, undef, 'reference'),
		$self->row($R1, $S5{copyb2}, $S5{copy}, undef, 'reference'),
		$self->row($R1, $S5{'2pc'}, $S5{copyb}, 0.8, '≥ 0.80 × COPY in 1,000-row transactions'),
		$self->row($R1, $S5{'2pc2'}, $S5{copyb}, 0.8, '≥ 0.80 × COPY in 1,000-row transactions'),
		$self->row($R1, $S5{'2pc2'}, $S5{copyb2}, undef, 'ratio to COPY in 1,000-row transactions, 2 sessions', $S5{'2pc2'},
			$R1 . ' (÷ 2 sessions)'),
		(map { $self->row($R1, $S5{$_}, $S5{copy}, undef, 'no target') } qw(off off2 alo amo)),
		$self->row($R1, $S5{off2}, $S5{copyb2}, undef, 'ratio to COPY in 1,000-row transactions, 2 sessions', $S5{off2},
			$R1 . ' (÷ 2 sessions)'),
		$self->row($R2, $S6{local}, $S6{local}, undef, 'baseline'),
		$self->row($R2, $S6{local2}, $S6{local}, undef, 'reference'),
		$self->row($R2, $S6{rem},   $S6{local}, 0.6, '≥ 0.60 × local source'),
		$self->row($R2, $S6{rem2},  $S6{local}, 0.6, '≥ 0.60 × local source'),
		$self->row($R2, $S6{rem2},  $S6{local2}, undef, 'ratio to the local source with 2 workers', $S6{rem2},
			$R2 . ' (÷ local, 2 workers)'));
}

sub charts { my ($self, $chart) = @_; return $self->bar_charts($chart); }

1;
