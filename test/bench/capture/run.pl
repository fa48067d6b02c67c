#!/usr/bin/perl
#
# The change-capture benchmark (docs/benchmarks.md, "Change capture"):
# write throughput of a captured table against the same table uncaptured
# and against the hand-written trigger + outbox table pattern, in one run on
# one throwaway server, reported as same-run ratios.
#
# The same table t exists in three schemas (setup.sql): plain, captured
# (streamguard.capture_table) and outbox (a PL/pgSQL AFTER ROW trigger that
# inserts each change as JSON into a table).  Each workload is one pgbench
# script run against each schema in turn (search_path through PGOPTIONS):
#   insert_single  one INSERT per transaction         (BENCH_CLIENTS clients)
#   update_single  one UPDATE of a random row          (BENCH_CLIENTS clients)
#   insert_batch   one INSERT of BENCH_BATCH rows      (BENCH_BATCH_CLIENTS clients)
#   update_batch   one UPDATE of BENCH_BATCH rows      (BENCH_BATCH_CLIENTS clients)
# Each contender's BENCH_SECONDS per repeat is split into BENCH_SLICES slices
# run round-robin, the first contender rotating, each slice after a
# CHECKPOINT, so that a load burst on the machine hits all contenders
# alike.  A ratio is the median over the repeats of contender / plain of the
# same repeat.  Afterwards it checks that the stream holds exactly one event
# per captured change.
#
#   perl test/bench/capture/run.pl          (as root: the server runs as postgres)
#
# Knobs (environment): PG_CONFIG, BENCH_SECONDS (15), BENCH_SLICES (3),
# BENCH_REPEAT (3), BENCH_CLIENTS (8), BENCH_BATCH_CLIENTS (2), BENCH_BATCH
# (100), BENCH_ROWS (1000000, rows of each table), BENCH_ONLY (the
# workloads, space-separated), BENCH_KEEP (1: keep the temp directory).
# It starts one server (unix socket in its temp directory, no TCP) and stops
# it, by its pid, at the end, also on error.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Temp qw(tempdir);
use Cwd qw(abs_path);
use IPC::Run;
use POSIX qw(strftime);
use Time::HiRes qw(time);

my %knob = (
	BENCH_SECONDS => 15, BENCH_SLICES => 3, BENCH_REPEAT => 3, BENCH_CLIENTS => 8,
	BENCH_BATCH_CLIENTS => 2, BENCH_BATCH => 100, BENCH_ROWS => 1000000, BENCH_KEEP => 0,
	BENCH_ONLY => 'insert_single update_single insert_batch update_batch');
for my $k (keys %knob)
{
	$knob{$k} = $ENV{$k} if defined $ENV{$k} && $ENV{$k} ne '';
	die "$k must be a positive integer\n" if $k ne 'BENCH_ONLY' && $k ne 'BENCH_KEEP' && $knob{$k} !~ /^[1-9][0-9]*$/;
}
my @workloads = split ' ', $knob{BENCH_ONLY};
for (@workloads)
{
	die "unknown workload $_\n" unless /^(insert_single|update_single|insert_batch|update_batch)$/;
}
my @contenders = qw(plain captured outbox);

my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
chomp(my $bindir = `$pg_config --bindir`);
die "pg_config not found (set PG_CONFIG)\n" unless $bindir && -x "$bindir/pg_ctl";
my $here = abs_path(dirname($0));

# As root, prepare a directory the postgres OS user owns and run there as it.
if ($> == 0 && ($ARGV[0] // '') ne '--inner')
{
	my $dir = tempdir('capture-bench-XXXXXX', TMPDIR => 1, CLEANUP => 0);
	copy("$here/$_", "$dir/$_") or die "copy $_: $!" for qw(run.pl setup.sql), map { "$_.sql" } @workloads;
	system('chown', '-R', 'postgres', $dir) == 0 or die "chown failed\n";
	my @env = map { "$_=$ENV{$_}" } grep { defined $ENV{$_} } (keys %knob, 'PG_CONFIG');
	my $rc = system('runuser', '-u', 'postgres', '--', 'env', @env, "PG_CONFIG=$pg_config",
		'perl', "$dir/run.pl", '--inner', $dir);
	system('rm', '-rf', $dir) unless $knob{BENCH_KEEP};
	exit($rc == 0 ? 0 : 1);
}

my $scripts = $ARGV[0] && $ARGV[0] eq '--inner' ? $ARGV[1] : $here;
my $work = tempdir('capture-bench-srv-XXXXXX', TMPDIR => 1, CLEANUP => !$knob{BENCH_KEEP});
my $data = "$work/data";
my $port = 50000 + ($$ % 10000);
my @conn = ('-h', $work, '-p', $port);

# run a command (no shell), return its output; die if it fails
sub run
{
	my @cmd = @_;
	my $out = '';
	IPC::Run::run(\@cmd, '>', \$out, '2>&1', IPC::Run::timeout(3600))
	  or die "failed: @cmd\n$out";
	return $out;
}

sub sql
{
	my ($q) = @_;
	my $out = run("$bindir/psql", '-XAtq', @conn, '-d', 'bench', '-v', 'ON_ERROR_STOP=1', '-c', $q);
	chomp $out;
	return $out;
}

sub say_ts { printf "[%s] %s\n", strftime('%H:%M:%S', localtime), join('', @_); return; }

# ------------------------------------------------------------------ server
run("$bindir/initdb", '-D', $data, '-A', 'trust', '--no-sync');
open(my $conf, '>>', "$data/postgresql.conf") or die;
print $conf <<"EOF";
listen_addresses = ''
unix_socket_directories = '$work'
port = $port
shared_preload_libraries = 'streamguard'
shared_buffers = 512MB
max_wal_size = 4GB
checkpoint_timeout = 15min
synchronous_commit = on
fsync = on
max_connections = 50
EOF
close $conf;
run("$bindir/pg_ctl", '-D', $data, '-l', "$work/server.log", '-w', 'start');
my $server_up = 1;
END { system("$bindir/pg_ctl", '-D', $data, '-m', 'fast', '-w', 'stop') if $server_up && $data; }

run("$bindir/createdb", @conn, 'bench');
say_ts("loading $knob{BENCH_ROWS} rows into each of plain.t, captured.t, outbox.t");
run("$bindir/psql", '-XAtq', @conn, '-d', 'bench', '-v', "rows=$knob{BENCH_ROWS}", '-f', "$scripts/setup.sql");

# ------------------------------------------------------------------ runs
my %tps;			# {workload}{contender} = [tps per repeat]
my %changes;		# captured changes, to check the stream against
my ($load_start) = split ' ', run('cat', '/proc/loadavg');

for my $w (@workloads)
{
	my $batch = $w =~ /batch/;
	my $clients = $batch ? $knob{BENCH_BATCH_CLIENTS} : $knob{BENCH_CLIENTS};
	my $rows_per_xact = $batch ? $knob{BENCH_BATCH} : 1;
	my $slice = $knob{BENCH_SECONDS} / $knob{BENCH_SLICES};
	for my $r (1 .. $knob{BENCH_REPEAT})
	{
		my (%xacts, %secs);
		for my $s (0 .. $knob{BENCH_SLICES} - 1)
		{
			my $first = ($s + $r) % @contenders;
			for my $c (@contenders[$first .. $#contenders, 0 .. $first - 1])
			{
				sql('CHECKPOINT');
				local $ENV{PGOPTIONS} = "-c search_path=$c";
				my $t0 = time;
				my $out = run("$bindir/pgbench", '-n', '-M', 'prepared', @conn, '-c', $clients, '-j', 2,
					'-T', $slice, '-D', "rows=$knob{BENCH_ROWS}", '-D', "batch=$knob{BENCH_BATCH}",
					'-f', "$scripts/$w.sql", 'bench');
				my ($n) = $out =~ /number of transactions actually processed: (\d+)/;
				my ($failed) = $out =~ /number of failed transactions: (\d+)/;
				die "pgbench reported failures:\n$out" if $failed;
				my ($tps) = $out =~ /tps = ([0-9.]+) \(without initial connection time\)/;
				$xacts{$c} += $n;
				$secs{$c} += $n / $tps;
				$changes{$w} += $n * $rows_per_xact if $c eq 'captured';
			}
		}
		push @{ $tps{$w}{$_} }, $xacts{$_} / $secs{$_} for @contenders;
		say_ts(sprintf("%-13s repeat %d: %s", $w, $r,
			join(', ', map { sprintf("%s %.0f tx/s", $_, $xacts{$_} / $secs{$_}) } @contenders)));
	}
}
my ($load_end) = split ' ', run('cat', '/proc/loadavg');

# ------------------------------------------------------------------ check
my $expected = 0;
$expected += $_ for values %changes;
my $events = sql(q{SELECT coalesce(sum(retained_events), 0) FROM streamguard.streams WHERE stream = 'bench_capture'});
my $check = $events == $expected ? "the stream holds one event per captured change ($events)"
  : "MISMATCH: $events events for $expected captured changes";

# ------------------------------------------------------------------ report
sub median
{
	my @v = sort { $a <=> $b } @_;
	return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
}

print "\n| workload | rows/xact | clients | plain tx/s | captured tx/s | outbox tx/s | captured / plain | outbox / plain | captured / outbox |\n";
print "|---|---|---|---|---|---|---|---|---|\n";
for my $w (@workloads)
{
	my ($p, $c, $o) = map { $tps{$w}{$_} } @contenders;
	my @rc = map { $c->[$_] / $p->[$_] } 0 .. $#$p;
	my @ro = map { $o->[$_] / $p->[$_] } 0 .. $#$p;
	my @co = map { $c->[$_] / $o->[$_] } 0 .. $#$p;
	printf "| %s | %d | %d | %.0f | %.0f | %.0f | **%.2f** | %.2f | %.2f |\n", $w,
		$w =~ /batch/ ? $knob{BENCH_BATCH} : 1,
		$w =~ /batch/ ? $knob{BENCH_BATCH_CLIENTS} : $knob{BENCH_CLIENTS},
		median(@$p), median(@$c), median(@$o), median(@rc), median(@ro), median(@co);
}
printf "\n%d repeat(s) of %d s per contender in %d slices; load average %s at the start, %s at the end; %s\n",
	$knob{BENCH_REPEAT}, $knob{BENCH_SECONDS}, $knob{BENCH_SLICES}, $load_start, $load_end, $check;
exit($events == $expected ? 0 : 1);
