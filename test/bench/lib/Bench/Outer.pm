#
# test/bench/lib/Bench/Outer.pm -- the outer part of the suite: runs as
# whoever started it (root: the server work is re-run as the `postgres` OS
# user), before run.pl loads the test modules.  Checks the knobs, prepares a
# temp dir with a copy of the suite, runs `run.pl --inner <dir>` there,
# publishes latest.md and the charts, stops what the inner part may have left
# running, cleans up, exits.
#
package Bench::Outer;

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(basename dirname);
use File::Copy qw(copy);
use File::Find qw(find);
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

use Bench;
use Bench::Registry;

sub main
{
	my ($script) = @_;
	my $rc = eval { outer_run($script) };
	print STDERR $@ unless defined $rc;
	exit($rc // 1);
}

# an older driver's command (test/bench/capture/run.pl, kafka/run.pl): its
# knob names (%$rename: old => new) mapped onto the suite's, then the suite
# ($suite: test/bench/run.pl) with BENCH_ONLY=$only
sub legacy_driver
{
	my ($suite, $only, $rename) = @_;
	for my $old (sort keys %$rename)
	{
		my $v = delete $ENV{$old};
		$ENV{ $rename->{$old} } = $v if defined $v && $v ne '';
	}
	$ENV{BENCH_ONLY} = $only;
	exec($^X, $suite) or die "bench: cannot run $suite: $!\n";
}

sub outer_run
{
	my ($script) = @_;
	my $pg_config = resolve_pg_config();
	Bench::Registry::load();
	Bench::check_knobs();
	my $here = dirname(abs_path($script));
	for my $name (Bench::Registry::selected())
	{
		my $why = Bench::Registry::module($name)->preflight($here);
		die "bench: $name: $why\n" if $why;
	}
	my $repo = abs_path("$here/../..");
	my $out  = Bench::env_or('BENCH_OUT', "$repo/bench-results");
	my $work = tempdir('streamguard-bench.XXXXXX', DIR => $ENV{TMPDIR} || '/tmp');
	my ($bindir) = Bench::pg_config($pg_config, '--bindir');
	my $pgxs = dirname(Bench::pg_config($pg_config, '--pgxs'));
	copy_suite($here, "$work/bench");

	my $pg_regress = "$pgxs/../../src/test/regress/pg_regress";
	my %env = (
		(map { $_ => $K{$_} } keys %K),
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

# a copy of the suite (test/bench) that the cluster's OS user can read, and
# the files outside it that the selected benchmarks need (their files(),
# relative to test/bench), at the same places relative to the copy
sub copy_suite
{
	my ($here, $to) = @_;
	my @files;
	find({ no_chdir => 1, wanted => sub { push @files, substr($_, length($here) + 1) if -f $_ } }, $here);
	push @files, map { Bench::Registry::module($_)->files } Bench::Registry::selected();
	for my $f (@files)
	{
		make_path(dirname("$to/$f"));
		copy("$here/$f", "$to/$f") or die "bench: copy $f: $!\n";
		chmod((stat "$here/$f")[2] & 07777, "$to/$f");
	}
	return;
}

sub resolve_pg_config
{
	my $pc = Bench::env_or('PG_CONFIG', '');
	for my $cand ($pc, '/usr/lib/postgresql/15/bin/pg_config', 'pg_config')
	{
		next if $cand eq '';
		my $path = $cand =~ m{/} ? $cand : (map { "$_/$cand" } grep { -x "$_/$cand" } split /:/, $ENV{PATH})[0];
		return $path if defined $path && -x $path;
		die "bench: PG_CONFIG=$pc not found\n" if $cand eq $pc;
	}
	die "bench: pg_config not found (set PG_CONFIG)\n";
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
		# the charts (Bench::Chart), with their data and gnuplot scripts
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
# the benchmarks' own), stop them here: pg_ctl signals the pid in postmaster.pid.
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

1;
