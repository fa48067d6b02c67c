#
# test/bench/Bench.pm -- the machinery shared by the benchmarks of
# test/bench/run.pl: the knobs, the outer part (temp dir, re-run as the
# cluster's OS user, publish the results), child processes stopped by pid with
# bounded waits, SQL and pgbench runs, the round-robin slices, statistics.
#
# It loads no PostgreSQL::Test module: the outer part runs before run.pl loads
# them (they redirect STDOUT and STDERR to a log file as they load).
#
package Bench;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter qw(import);
use File::Basename qw(basename dirname);
use File::Copy qw(copy);
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use POSIX qw(WNOHANG strftime);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(
  %K $NODE $BIN $LOGS $SQL %VALS %NOTES
  log_msg slurp spurt q_lit sql sql_try sql_value checkpoint
  spawn reap stop_pid alive run_sh wait_until pgbench prefill run_sliced rotated add_time
  add_val add_note note_to median num_list paired_ratio fmt);

# ---------------------------------------------------------------------------
# Knobs: environment variable => [default, check].  An empty value counts as
# unset.  docs/benchmarks.md explains each one.
# ---------------------------------------------------------------------------
my %KNOBS = (
	BENCH_SECONDS          => [ 15,     'int' ],
	BENCH_REPEAT           => [ 3,      'int' ],
	BENCH_SLICES           => [ 3,      'int' ],
	BENCH_CLIENTS          => [ 8,      'int' ],
	BENCH_BATCH_CLIENTS    => [ 2,      'int' ],
	BENCH_DRAIN_EVENTS     => [ 500000, 'k1' ],
	BENCH_DRAIN_PASSES     => [ 3,      'int' ],
	BENCH_PIPELINE_TIMEOUT => [ 300,    'int' ],
	BENCH_LAT_SECONDS      => [ 20,     'int' ],
	BENCH_LAT_RATE         => [ 1000,   'int' ],
	BENCH_LAT_CLIENTS      => [ 4,      'int' ],
	BENCH_LAT_POLL_MS      => [ 10,     'int' ],
	BENCH_REMOTE_EVENTS    => [ 300000, 'k2' ],
	BENCH_PARALLEL_EVENTS  => [ 200000, 'k2' ],
	BENCH_WINDOW_EVENTS    => [ 200000, 'k2' ],
	BENCH_GROUP_EVENTS     => [ 200000, 'k2' ],
	BENCH_START_EVENTS     => [ 500000, 'k2' ],
	BENCH_LP_SECONDS       => [ 10,     'int' ],
	BENCH_LP_IDLE          => [ 3,      'int' ],
	BENCH_LONG_EVENTS      => [ 10000000, 'long' ],
	BENCH_LONG_CLIENTS     => [ 2,      'int' ],
	BENCH_LONG_RETENTION   => [ '10 seconds', 'interval' ],
	BENCH_SHARED_BUFFERS   => [ '512MB', 'size' ],
	BENCH_ONLY => [ 'single batch drain latency longpoll remote parallel start group windows long', 'only' ],
	BENCH_KEEP => [ 0, 'flag' ],
	BENCH_NICE => [ '', 'nice' ],);
our @BENCHMARKS = qw(single batch drain latency longpoll remote parallel start group windows long);
our %K = map { $_ => env_or($_, $KNOBS{$_}[0]) } keys %KNOBS;

sub env_or
{
	my ($name, $default) = @_;
	return (defined $ENV{$name} && $ENV{$name} ne '') ? $ENV{$name} : $default;
}

sub check_knobs
{
	my $int = sub { $_[0] =~ /^[0-9]+$/ && $_[0] >= 1 };
	my %ok = (
		int  => $int,
		k1   => sub { $int->($_[0]) && $_[0] % 1000 == 0 },
		k2   => sub { $int->($_[0]) && $_[0] % 1000 == 0 && $_[0] >= 2000 },
		long => sub {
			my $c = $K{BENCH_LONG_CLIENTS};
			$int->($_[0]) && $int->($c) && $_[0] >= 10000 * $c
			  && $_[0] % (1000 * $c) == 0;
		},
		interval => sub { $_[0] =~ /^[0-9a-zA-Z .:]+$/ },
		size     => sub { $_[0] =~ /^[0-9]+(kB|MB|GB)$/ },
		only => sub {
			my %b = map { $_ => 1 } @BENCHMARKS;
			!grep { !$b{$_} } split ' ', $_[0];
		},
		flag => sub { 1 },
		nice => sub { $_[0] eq '' || ($_[0] =~ /^-?[0-9]+$/ && ($_[0] >= 0 || $> == 0)) },);
	my %what = (
		int      => 'a positive integer',
		k1       => 'a positive multiple of 1000',
		k2       => 'a multiple of 1000, at least 2000',
		long     => 'a multiple of 1000 x BENCH_LONG_CLIENTS, at least 10 batches per client',
		interval => "an interval like '30 seconds' (or none)",
		size     => 'like 512MB',
		only     => 'a list of: ' . join(' ', @BENCHMARKS),
		nice => 'an integer (negative: root only)',);
	for my $name (sort keys %KNOBS)
	{
		my $kind = $KNOBS{$name}[1];
		die "bench: $name must be $what{$kind}\n" unless $ok{$kind}->($K{$name});
	}
	return;
}

# ---------------------------------------------------------------------------
# Outer part: runs as whoever started the suite (root: the server work is
# re-run as the `postgres` OS user), before run.pl loads the test modules.
# Prepares a temp dir, runs `run.pl --inner <dir>` there, publishes
# latest.md, stops what the inner part may have left running, cleans up, exits.
# ---------------------------------------------------------------------------
sub outer
{
	my ($script) = @_;
	my $rc = eval { outer_run($script) };
	print STDERR $@ unless defined $rc;
	exit($rc // 1);
}

sub outer_run
{
	my ($script) = @_;
	my $pg_config = resolve_pg_config();
	check_knobs();
	my $here = dirname(abs_path($script));
	my $repo = abs_path("$here/../..");
	my $out  = env_or('BENCH_OUT', "$repo/bench-results");
	my $work = tempdir('streamguard-bench.XXXXXX', DIR => $ENV{TMPDIR} || '/tmp');
	my ($bindir) = pg_config($pg_config, '--bindir');
	my $pgxs = dirname(pg_config($pg_config, '--pgxs'));

	# a copy of the suite that the cluster's OS user can read
	make_path("$work/bench/sql");
	copy("$here/$_", "$work/bench/$_") or die "bench: copy $_: $!\n" for qw(run.pl Bench.pm lpclient.c);
	copy($_, "$work/bench/sql/") or die "bench: copy $_: $!\n" for glob("$here/sql/*.sql");

	my $pg_regress = "$pgxs/../../src/test/regress/pg_regress";
	my %env = (
		(map { $_ => $K{$_} } keys %KNOBS),
		PG_CONFIG  => $pg_config,
		BENCH_REV  => revision($repo),
		PATH       => "$bindir:$ENV{PATH}",
		LANG       => 'C.UTF-8',
		LC_ALL     => 'C.UTF-8',
		PERL5LIB   => join(':', abs_path("$pgxs/../../src/test/perl"), grep { defined && $_ ne '' } $ENV{PERL5LIB}),
		PG_REGRESS => -x $pg_regress ? $pg_regress : 'true',   # Cluster::init runs it; a no-op off Windows
		TESTDIR    => $work,                                    # PostgreSQL::Test::Utils: tmp_check/ goes there
		TMPDIR     => $work,                                    # and the unix socket directory too
		($K{BENCH_KEEP} eq '1' ? (PG_TEST_NOCLEAN => 1) : ()),);
	my @cmd = ('env', (map { "$_=$env{$_}" } sort keys %env), $^X, "$work/bench/run.pl", '--inner', $work);
	if ($> == 0)
	{
		defined getpwnam('postgres') or die "bench: running as root needs a 'postgres' OS user\n";
		system('chown', '-R', 'postgres:', $work) == 0 or die "bench: chown failed\n";
		unshift @cmd, 'runuser', '-u', 'postgres', '--';
	}
	# BENCH_NICE: scheduling priority of everything the suite starts (server,
	# background workers, clients); a negative value (root only) shields the
	# measurement from other CPU work on a shared machine, for all contenders alike.
	unshift @cmd, 'nice', '-n', $K{BENCH_NICE} if $K{BENCH_NICE} ne '' && $K{BENCH_NICE} != 0;

	my $rc = run_inner($work, @cmd);
	publish("$work/latest.md", $out);
	stop_leftover_servers($work, $bindir);
	if ($K{BENCH_KEEP} eq '1') { print "bench: kept $work\n" }
	else { remove_tree($work) }
	return $rc;
}

sub resolve_pg_config
{
	my $pc = env_or('PG_CONFIG', '');
	for my $cand ($pc, '/usr/lib/postgresql/15/bin/pg_config', 'pg_config')
	{
		next if $cand eq '';
		my $path = $cand =~ m{/} ? $cand : (map { "$_/$cand" } grep { -x "$_/$cand" } split /:/, $ENV{PATH})[0];
		return $path if defined $path && -x $path;
		die "bench: PG_CONFIG=$pc not found\n" if $cand eq $pc;
	}
	die "bench: pg_config not found (set PG_CONFIG)\n";
}

sub pg_config
{
	my ($pg_config, $opt) = @_;
	my $v = qx("$pg_config" $opt);
	die "bench: $pg_config $opt failed\n" if $?;
	chomp $v;
	return $v;
}

sub revision
{
	my ($repo) = @_;
	my $rev = qx(git -C "$repo" rev-parse --short HEAD 2>/dev/null);
	chomp $rev;
	return 'uncommitted' if $? || $rev eq '';
	my $dirty = qx(git -C "$repo" status --porcelain -- src 'streamguard--*.sql' 2>/dev/null);
	return $dirty ne '' ? "$rev+dirty" : $rev;
}

# runs the inner part; on INT/TERM lets it clean up (a bounded wait), then exits
sub run_inner
{
	my ($work, @cmd) = @_;
	my $pid = fork() // die "bench: fork: $!\n";
	if (!$pid)
	{
		chdir $work or POSIX::_exit(126);
		exec(@cmd) or POSIX::_exit(127);
	}
	my $deadline;
	local $SIG{INT} = local $SIG{TERM} = sub {
		kill 'TERM', $pid;
		$deadline //= time + 120;
	};
	while (1)
	{
		my $r = waitpid($pid, WNOHANG);
		return $? >> 8 || ($? & 127 ? 128 + ($? & 127) : 0) if $r == $pid;
		return 130 if $r < 0;
		if (defined $deadline && time > $deadline)
		{
			kill 'KILL', $pid;
			waitpid($pid, 0);
			return 130;
		}
		sleep 0.2;
	}
}

sub publish
{
	my ($file, $out) = @_;
	return unless -f $file;
	print "\n", slurp($file);
	if (eval { make_path($out); 1 } && copy($file, "$out/latest.md"))
	{
		print "bench: results written to $out/latest.md\n";
		# the charts (run.pl's charts()), with their data and gnuplot scripts
		my @charts = glob(dirname($file) . '/charts/*.{png,dat,gp}');
		copy($_, "$out/") for @charts;
		print "bench: charts written to $out/: ", join(' ', map { basename($_) } grep { /\.png$/ } @charts), "\n"
		  if grep { /\.png$/ } @charts;
		return;
	}
	my $alt = ($ENV{TMPDIR} || '/tmp') . '/streamguard-bench-latest.md';
	copy($file, $alt);
	print "bench: cannot write $out; results written to $alt\n";
	return;
}

# If the inner part died without stopping its servers (the bench server and
# the remote one), stop them here: pg_ctl signals the pid in postmaster.pid.
sub stop_leftover_servers
{
	my ($work, $bindir) = @_;
	for my $pidfile (glob("$work/tmp_check/t_*_data/pgdata/postmaster.pid"))
	{
		my @ctl = ("$bindir/pg_ctl", '-D', dirname($pidfile), '-m', 'immediate', '-t', '60', 'stop');
		unshift @ctl, 'runuser', '-u', 'postgres', '--' if $> == 0;
		system("@{[ map { q_sh($_) } @ctl ]} >/dev/null 2>&1");
	}
	return;
}

sub q_sh { my ($s) = @_; $s =~ s/'/'\\''/g; return "'$s'"; }

# ---------------------------------------------------------------------------
# Inner part: set-up, logging, files.
# ---------------------------------------------------------------------------
our ($NODE, $BIN, $LOGS, $SQL);   # the bench server; PostgreSQL's bin dir; logs/; sql/
our $TTY_ERR;                     # STDERR as it was when this module loaded
open($TTY_ERR, '>&', \*STDERR) or die "cannot dup STDERR: $!";

# After the test modules loaded: STDERR (progress, warnings, errors) back to the
# terminal; STDOUT (the test modules' chatter, initdb, pg_ctl) stays in
# tmp_check/log/regress_log_run.  Children are stopped by pid at exit.
sub inner_setup
{
	my ($work, $sqldir) = @_;
	open(STDERR, '>&', $TTY_ERR) or die "cannot restore STDERR: $!";
	STDERR->autoflush(1);
	$LOGS = "$work/logs";
	$SQL  = $sqldir;
	make_path($LOGS);
	($BIN) = pg_config($ENV{PG_CONFIG}, '--bindir');
	$SIG{INT} = $SIG{TERM} = sub { die "bench: interrupted\n" };
	return;
}

sub log_msg { printf STDERR "[%s] %s\n", strftime('%H:%M:%S', localtime), join('', @_); return; }

sub slurp
{
	my ($file) = @_;
	open(my $fh, '<', $file) or return '';
	local $/;
	return scalar <$fh>;
}

sub spurt
{
	my ($file, @text) = @_;
	open(my $fh, '>', $file) or die "cannot write $file: $!";
	print $fh @text;
	close $fh;
	return;
}

sub q_lit { my ($s) = @_; $s =~ s/'/''/g; return "'$s'"; }

# ---------------------------------------------------------------------------
# SQL on the bench server (or node => another), through psql by
# PostgreSQL::Test::Cluster.  No statement may take longer than $SQL_TIMEOUT
# seconds (or timeout => ...).
# ---------------------------------------------------------------------------
my $SQL_TIMEOUT = 600;

# dies on error, like the TAP tests' safe_psql
sub sql
{
	my ($sql, %o) = @_;
	return ($o{node} // $NODE)->safe_psql('bench', $sql, timeout => $o{timeout} // $SQL_TIMEOUT);
}

# returns (ok, stdout, stderr)
sub sql_try
{
	my ($sql, %o) = @_;
	my ($rc, $out, $err) = ($o{node} // $NODE)->psql(
		'bench', $sql,
		timeout   => $o{timeout} // $SQL_TIMEOUT,
		timed_out => \my $timed_out);
	$err .= "\nERROR:  timed out after " . ($o{timeout} // $SQL_TIMEOUT) . ' s' if $timed_out;
	return (!$timed_out && defined $rc && $rc == 0, $out, $err);
}

# the value a query returns, or undef when it fails
sub sql_value
{
	my ($ok, $out) = sql_try(@_);
	return $ok ? $out : undef;
}

sub checkpoint { my (%o) = @_; sql('CHECKPOINT', %o); return; }

# ---------------------------------------------------------------------------
# Child processes: every one is stopped by its pid, every wait is bounded.
# ---------------------------------------------------------------------------
my %CHILDREN;   # pid => undef while it runs, its exit code once it ended

# starts @$cmd with stdout and stderr into $log; returns its pid
sub spawn
{
	my ($cmd, $log, %o) = @_;
	my $pid = fork() // die "fork: $!";
	if (!$pid)
	{
		$SIG{$_} = 'DEFAULT' for qw(PIPE INT TERM);
		open(STDIN, '<', '/dev/null');
		open(STDOUT, $o{append} ? '>>' : '>', $log) or POSIX::_exit(126);
		open(STDERR, '>&', \*STDOUT);
		exec(@$cmd) or POSIX::_exit(127);
	}
	$CHILDREN{$pid} = undef;
	return $pid;
}

# the exit code of $pid once it ended (128 + signal), else undef
sub finished
{
	my ($pid) = @_;
	return $CHILDREN{$pid} if defined $CHILDREN{$pid};
	return unless exists $CHILDREN{$pid} && waitpid($pid, WNOHANG) == $pid;
	return $CHILDREN{$pid} = $? & 127 ? 128 + ($? & 127) : $? >> 8;
}

sub alive { my ($pid) = @_; return exists $CHILDREN{$pid} && !defined finished($pid); }

# waits at most $timeout s for $pid; returns its exit code, or undef when it
# had to be stopped
sub reap
{
	my ($pid, $timeout) = @_;
	if (wait_until($timeout, 0.05, sub { defined finished($pid) }))
	{
		return delete $CHILDREN{$pid};
	}
	log_msg("pid $pid still running after $timeout s: stopped");
	stop_pid($pid);
	return;
}

# signal (default TERM), at most 10 s, then KILL
sub stop_pid
{
	my ($pid, $sig) = @_;
	return unless exists $CHILDREN{$pid};
	if (!defined finished($pid))
	{
		kill($sig // 'TERM', $pid);
		if (!wait_until(10, 0.05, sub { defined finished($pid) }))
		{
			kill 'KILL', $pid;
			waitpid($pid, 0);
		}
	}
	delete $CHILDREN{$pid};
	return;
}

# a shell pipeline ($script gets @args as $1 ...), output into $log; returns
# true when it exited 0 within $timeout s
sub run_sh
{
	my ($log, $timeout, $script, @args) = @_;
	my $rc = reap(spawn([ '/bin/sh', '-c', $script, 'sh', @args ], $log, append => 1), $timeout);
	return defined $rc && $rc == 0;
}

END
{
	my $rc = $?;
	stop_pid($_) for keys %CHILDREN;
	$? = $rc;
}

# polls $cond every $interval s until it is true (returns 1) or $timeout s
# passed (returns 0)
sub wait_until
{
	my ($timeout, $interval, $cond) = @_;
	my $deadline = time + $timeout;
	while (1)
	{
		return 1 if $cond->();
		return 0 if time > $deadline;
		sleep $interval;
	}
}

# ---------------------------------------------------------------------------
# pgbench: `pgbench -n -M prepared <args> -D name=value ... -f sql/<script>`,
# its output (after the command line) in logs/<name>.log.  Returns
# { tps, processed } (tps without the initial connection time), or nothing
# when it failed (logged): exit code, failed transactions, no tps.
# ---------------------------------------------------------------------------
sub pgbench
{
	my ($name, $script, $vars, @args) = @_;
	my $log = "$LOGS/$name.log";
	my @cmd = ("$BIN/pgbench", '-n', '-M', 'prepared', @args,
		(map { ('-D', "$_=$vars->{$_}") } sort keys %$vars), '-f', "$SQL/$script");
	my %a = @args % 2 ? () : @args;
	spurt($log, "@cmd\n");
	my $rc = reap(spawn(\@cmd, $log, append => 1), defined $a{-T} ? $a{-T} + 120 : 3600);
	my $out = slurp($log);
	if (!defined $rc || $rc != 0)
	{
		my @lines = split /\n/, $out;
		my @err = grep { /error|abort/i } @lines[ 1 .. $#lines ];
		log_msg("pgbench $name failed: ", join(' ', grep { defined } @err[ 0 .. 2 ]));
		return;
	}
	if ($out =~ /^(number of failed transactions: [1-9].*)$/m)
	{
		log_msg("pgbench $name: failed transactions: $1");
		return;
	}
	my ($tps) = $out =~ /^tps = ([0-9.]+) \(without initial connection time\)/m;
	my ($n) = $out =~ /^number of transactions actually processed: ([0-9]+)/m;
	if (!defined $tps) { log_msg("pgbench $name: no tps in output"); return; }
	return { tps => $tps, processed => $n };
}

# pre-fill: $batches pgbench transactions of $script (1,000 events each), on 2
# clients when they split evenly (unless $one_client)
sub prefill
{
	my ($name, $script, $vars, $batches, $one_client) = @_;
	my @c = (!$one_client && $batches % 2 == 0) ? (-c => 2, -j => 2, -t => $batches / 2) : (-c => 1, -j => 1, -t => $batches);
	return pgbench($name, $script, $vars, @c);
}

# ---------------------------------------------------------------------------
# Time-sliced, rotating schedule of the fixed-duration benchmarks (1 and 2).
# Each contender gets BENCH_SECONDS per repeat, split into BENCH_SLICES slices
# (at most one per second); the slices run round-robin over the contenders,
# the starting contender rotating from slice to slice and repeat to repeat,
# each slice after a CHECKPOINT.  A load burst on a shared machine then hits
# every contender alike.  A repeat's events/s of a contender = its events in
# all slices / their time (pgbench: transactions / tps, i.e. without connection
# time; COPY: committed rows / wall time), recorded with add_val.
#
# A contender is { label, tag, per (events per transaction), script, vars }
# for pgbench, or { label, tag, copy => \&slice } where slice($seconds, $log)
# returns (events, seconds) or nothing.  Returns label => { n, t, bad }.
# ---------------------------------------------------------------------------
sub run_sliced
{
	my ($b, $r, $contenders, @pgbench_args) = @_;
	my $nslice = $K{BENCH_SLICES} > $K{BENCH_SECONDS} ? $K{BENCH_SECONDS} : $K{BENCH_SLICES};
	my $secs = int($K{BENCH_SECONDS} / $nslice);
	my %tot;
	for my $s (1 .. $nslice)
	{
		for my $x (rotated($s + $r - 2, @$contenders))
		{
			my $t = $tot{ $x->{label} } //= {};
			next if $t->{bad};
			checkpoint();
			my $log = "${b}_$x->{tag}_r${r}_s$s";
			my ($n, $sec) = $x->{copy} ? $x->{copy}->($secs, $log) : pgbench_slice($x, $secs, $log, @pgbench_args);
			if (!defined $n) { $t->{bad} = 1; next; }
			add_time($t, n => $n, $sec);
		}
	}
	for my $x (@$contenders)
	{
		my $t = $tot{ $x->{label} };
		add_val("$b|$x->{label}", $t->{bad} || !defined $t->{n} ? 'ERR' : sprintf('%.1f', $t->{n} / $t->{t}));
	}
	return \%tot;
}

sub pgbench_slice
{
	my ($x, $secs, $log, @args) = @_;
	my $res = pgbench($log, $x->{script}, $x->{vars}, @args, -T => $secs) or return;
	return ($res->{processed} * $x->{per}, $res->{processed} / $res->{tps});
}

# adds $n to $acc->{$field} and $seconds to $acc->{t}: the totals of which
# a repeat's events/s is made
sub add_time
{
	my ($acc, $field, $n, $seconds) = @_;
	$acc->{$field} = ($acc->{$field} // 0) + $n;
	$acc->{t} = sprintf('%.6f', ($acc->{t} // 0) + $seconds);
	return;
}

# @list rotated left by $k (the contender order of repeat / slice k)
sub rotated
{
	my ($k, @list) = @_;
	return @list[ map { ($_ + $k) % @list } 0 .. $#list ];
}

# ---------------------------------------------------------------------------
# Results: "benchmark|contender" => per-repeat events/s (or ERR / PENDING),
# and notes.
# ---------------------------------------------------------------------------
our (%VALS, %NOTES);

sub add_val { my ($key, $v) = @_; push @{ $VALS{$key} }, $v; return; }
sub add_note { my ($key, $note) = @_; note_to(\%NOTES, $key, $note); return; }

# appends $note to $h->{$key} unless it is there already
sub note_to
{
	my ($h, $key, $note) = @_;
	return if defined $h->{$key} && index($h->{$key}, $note) >= 0;
	$h->{$key} = defined $h->{$key} && $h->{$key} ne '' ? "$h->{$key}; $note" : $note;
	return;
}

# the numbers of a list (ERR, PENDING and blanks left out)
sub num_list { return grep { defined && /^[0-9.]+$/ } @_; }

# median of the numbers in @$v, formatted with $fmt (default %.0f; '': not
# formatted), or undef
sub median
{
	my ($v, $fmt) = @_;
	my @a = sort { $a <=> $b } num_list(@$v);
	return unless @a;
	my $m = @a % 2 ? $a[ $#a / 2 ] : ($a[ @a / 2 - 1 ] + $a[ @a / 2 ]) / 2;
	$fmt //= '%.0f';
	return $fmt eq '' ? $m : sprintf($fmt, $m);
}

# median over the repeats of a[i] / b[i] (paired by repeat), or undef
sub paired_ratio
{
	my ($a, $b) = @_;
	my @r;
	for my $i (0 .. $#$a)
	{
		my ($x, $y) = ($a->[$i], $b->[$i]);
		push @r, sprintf('%.6g', $x / $y) if num_list($x) && num_list($y) && $y > 0;
	}
	return median(\@r, '');
}

# 1234567.8 -> 1,234,567 (truncated); '' for undef or ''
sub fmt
{
	my ($v) = @_;
	return '' unless defined $v && $v ne '';
	my $s = sprintf('%d', $v);
	my $n = length $s;
	my $o = '';
	for my $i (1 .. $n)
	{
		$o .= substr($s, $i - 1, 1);
		$o .= ',' if ($n - $i) % 3 == 0 && $i < $n;
	}
	return $o;
}

1;
