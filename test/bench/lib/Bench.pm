#
# test/bench/lib/Bench.pm -- the core every benchmark module uses: the knobs,
# logging and files, child processes stopped by pid with bounded waits,
# pgbench runs and pre-fills, the contender rotation, statistics.
#
# The rest of the machinery is in small modules beside it: Bench::Pg (the
# servers and SQL on them), Bench::SG (streamguard's SQL steps), Bench::Sliced
# (the round-robin slices of the fixed-duration benchmarks), Bench::Report and
# Bench::Chart (the results table and the gnuplot charts), Bench::Outer (the
# part that runs before the servers: temp dir, re-run as `postgres`, publish),
# Bench::Suite (the run: set-up, repeats, report) and Bench::Registry (which
# benchmark modules exist).  docs/benchmarks.md, "Adding a benchmark", says how
# they fit together.
#
# It loads no PostgreSQL::Test module: the outer part runs before run.pl loads
# them (they redirect STDOUT and STDERR to a log file as they load).
#
package Bench;

use strict;
use warnings;

use Exporter qw(import);
use File::Path qw(make_path);
use POSIX qw(WNOHANG strftime);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(
  %K $BIN $LOGS $SQL $WORK $DIR
  log_msg slurp spurt q_lit q_sh
  spawn reap stop_pid alive run_sh wait_until pgbench prefill rotated add_time
  note_to median num_list paired_ratio fmt missing loadavg);

# ---------------------------------------------------------------------------
# Knobs: environment variable => [default, kind].  The knobs every benchmark
# may use are here; a benchmark module declares its own (Bench::Benchmark's
# knobs()), and Bench::Registry adds BENCH_ONLY.  An empty value counts as
# unset.  docs/benchmarks.md explains each one.
# ---------------------------------------------------------------------------
my %COMMON = (
	BENCH_SECONDS          => [ 15,      'int' ],
	BENCH_REPEAT           => [ 3,       'int' ],
	BENCH_SLICES           => [ 3,       'int' ],
	BENCH_CLIENTS          => [ 8,       'int' ],
	BENCH_BATCH_CLIENTS    => [ 2,       'int' ],
	BENCH_PIPELINE_TIMEOUT => [ 300,     'int' ],
	BENCH_LAT_SECONDS      => [ 20,      'int' ],
	BENCH_LAT_RATE         => [ 1000,    'int' ],
	BENCH_LAT_CLIENTS      => [ 4,       'int' ],
	BENCH_LAT_POLL_MS      => [ 10,      'int' ],
	BENCH_SHARED_BUFFERS   => [ '512MB', 'size' ],
	BENCH_KEEP             => [ 0,       'flag' ],
	BENCH_NICE             => [ '',      'nice' ],);

our %K;       # knob => its value
our %KNOBS;   # knob => [default, kind]

# kind => [check, what it must be]; a knob's kind may also be such a pair
my $INT = sub { $_[0] =~ /^[0-9]+$/ && $_[0] >= 1 };
my %KINDS = (
	int      => [ $INT, 'a positive integer' ],
	k1       => [ sub { $INT->($_[0]) && $_[0] % 1000 == 0 }, 'a positive multiple of 1000' ],
	k2       => [ sub { $INT->($_[0]) && $_[0] % 1000 == 0 && $_[0] >= 2000 }, 'a multiple of 1000, at least 2000' ],
	interval => [ sub { $_[0] =~ /^[0-9a-zA-Z .:]+$/ }, "an interval like '30 seconds' (or none)" ],
	size     => [ sub { $_[0] =~ /^[0-9]+(kB|MB|GB)$/ }, 'like 512MB' ],
	flag     => [ sub { 1 }, '' ],
	nice     => [ sub { $_[0] eq '' || ($_[0] =~ /^-?[0-9]+$/ && ($_[0] >= 0 || $> == 0)) }, 'an integer (negative: root only)' ],);

sub int_ok { return $INT->(@_); }

sub env_or
{
	my ($name, $default) = @_;
	return (defined $ENV{$name} && $ENV{$name} ne '') ? $ENV{$name} : $default;
}

# the common knobs plus %more (name => [default, kind]); reads the environment
sub init_knobs
{
	my (%more) = @_;
	for my $name (keys %more)
	{
		die "bench: knob $name is a common knob: a benchmark may not declare it again\n" if $COMMON{$name};
	}
	%KNOBS = (%COMMON, %more);
	%K = map { $_ => env_or($_, $KNOBS{$_}[0]) } keys %KNOBS;
	return;
}

sub check_knobs
{
	for my $name (sort keys %KNOBS)
	{
		my $kind = $KNOBS{$name}[1];
		my ($ok, $what) = @{ ref $kind ? $kind : $KINDS{$kind} };
		die "bench: $name must be $what\n" unless $ok->($K{$name});
	}
	return;
}

# ---------------------------------------------------------------------------
# Files and logging.  $DIR: the suite (test/bench or its copy in the temp
# dir); $WORK: the temp dir; $LOGS: logs/ in it; $SQL: the pgbench scripts;
# $BIN: PostgreSQL's bin dir.
# ---------------------------------------------------------------------------
our ($BIN, $LOGS, $SQL, $WORK, $DIR);
our $TTY_ERR;   # STDERR as it was when this module loaded
open($TTY_ERR, '>&', \*STDERR) or die "cannot dup STDERR: $!";

sub pg_config
{
	my ($pg_config, $opt) = @_;
	my $v = qx("$pg_config" $opt);
	die "bench: $pg_config $opt failed\n" if $?;
	chomp $v;
	return $v;
}

# After the test modules loaded: STDERR (progress, warnings, errors) back to the
# terminal; STDOUT (the test modules' chatter, initdb, pg_ctl) stays in
# tmp_check/log/regress_log_run.  Children are stopped by pid at exit.
sub inner_setup
{
	my ($work, $dir) = @_;
	open(STDERR, '>&', $TTY_ERR) or die "cannot restore STDERR: $!";
	STDERR->autoflush(1);
	($WORK, $DIR) = ($work, $dir);
	$LOGS = "$work/logs";
	$SQL  = "$dir/sql";
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
sub q_sh  { my ($s) = @_; $s =~ s/'/'\\''/g; return "'$s'"; }

sub loadavg { return join(' ', (split ' ', slurp('/proc/loadavg'))[ 0 .. 2 ]); }

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
# pgbench: `pgbench -n -M prepared <args> -D name=value ... -f <script>`
# (<script>: a file of sql/, or a path), its output (after the command line)
# in logs/<name>.log.  It connects where PGHOST / PGPORT say (Bench::Pg's
# on_node sets them).  Returns { tps, processed } (tps without the initial
# connection time), or nothing when it failed (logged): exit code, failed
# transactions, no tps.
# ---------------------------------------------------------------------------
sub pgbench
{
	my ($name, $script, $vars, @args) = @_;
	my $log = "$LOGS/$name.log";
	my @cmd = ("$BIN/pgbench", '-n', '-M', 'prepared', @args,
		(map { ('-D', "$_=$vars->{$_}") } sort keys %$vars), '-f', $script =~ m{/} ? $script : "$SQL/$script");
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

# @list rotated left by $k (the contender order of repeat / slice k)
sub rotated
{
	my ($k, @list) = @_;
	return @list[ map { ($_ + $k) % @list } 0 .. $#list ];
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

# ---------------------------------------------------------------------------
# Statistics and formatting
# ---------------------------------------------------------------------------

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

# what a result without numbers says: pending (not installed), error, not run
sub missing
{
	my ($v) = @_;
	return (grep { $_ eq 'PENDING' } @$v) ? 'pending' : @$v ? 'error' : 'not run';
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
