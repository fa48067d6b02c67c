#!/usr/bin/perl
#
# test/mutation/run.pl — mutation testing: prove that the tests catch what
# they guard.
#
# Each mutant (test/mutation/mutants.pl) breaks one guarantee with a small
# source edit.  For each one this script copies the tree, applies the edit,
# builds, installs into a PRIVATE relocated copy of PostgreSQL (made here,
# under a temporary directory, from the install PG_CONFIG names: never the
# system install, never /usr), runs the tests listed for the mutant, in
# order, each under a timeout, and stops at the first one that fails: that
# test killed the mutant.  A mutant that every listed test passes SURVIVED,
# and the script exits non-zero.
#
# Not part of `make installcheck`.  Usage (as a user other than root; run
# as root it re-runs itself as $SG_MUTATION_USER, default postgres):
#
#	make mutation PG_CONFIG=/path/to/pg_config
#	SG_MUTANTS=fence_always_passes,dedup_never_matches make mutation ...
#
# Environment:
#	PG_CONFIG				the install to copy (default: pg_config in PATH)
#	SG_MUTANTS				comma-separated mutant names (default: all)
#	SG_MUTATION_TIMEOUT		seconds per test run (default 600)
#	SG_MUTATION_BASELINE	1: first run every listed test on the unmutated
#							build; any failure aborts (a failing test kills
#							nothing)
#	SG_MUTATION_KEEP		1: keep the temporary directory
#	SG_MUTATION_TMPDIR		where to make it (default /tmp)
#	SG_MUTATION_USER		user to run as when started as root
#
# The list is checked before anything is built: a search text that is not
# found exactly once in its file is an error, so the list cannot rot.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Find;
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use POSIX qw(strftime);
use Time::HiRes qw(time);

my $root = abs_path(dirname(abs_path($0)) . '/../..');

# ------------------------------------------------------------ run as a user
if ($> == 0)
{
	my $user = $ENV{SG_MUTATION_USER} // 'postgres';
	my @keep = grep { /^(PG_CONFIG|SG_|PATH$)/ } sort keys %ENV;
	my $envs = join(' ', map { "$_=" . shq($ENV{$_}) } @keep);
	print "running as root: re-running as $user\n";
	exec('su', $user, '-s', '/bin/sh', '-c',
		"cd " . shq($root) . " && env $envs perl " . shq(abs_path($0)));
	die "cannot exec su: $!";
}

sub shq
{
	my ($s) = @_;
	$s =~ s/'/'\\''/g;
	return "'$s'";
}

sub run_cmd
{
	my ($cmd, $log) = @_;
	my $rc = system('/bin/sh', '-c', "( $cmd ) >>" . shq($log) . " 2>&1");
	return $rc;
}

sub slurp
{
	my ($f) = @_;
	open(my $fh, '<', $f) or die "cannot read $f: $!";
	local $/;
	my $s = <$fh>;
	close $fh;
	return $s;
}

sub spew
{
	my ($f, $s) = @_;
	open(my $fh, '>', $f) or die "cannot write $f: $!";
	print $fh $s;
	close $fh;
}

# ----------------------------------------------------------- the mutant list
my $list = "$root/test/mutation/mutants.pl";
my @mutants = do $list;
die "cannot load $list: " . ($@ || $!) unless @mutants;

my %by_name;
for my $m (@mutants)
{
	for my $k (qw(name breaks edits tests))
	{
		die "mutant " . ($m->{name} // '?') . ": no '$k'\n" unless $m->{$k};
	}
	die "duplicate mutant $m->{name}\n" if $by_name{ $m->{name} }++;
	for my $e (@{ $m->{edits} })
	{
		my ($file, $search, $replace) = @$e;
		my $text = slurp("$root/$file");
		my $n = 0;
		my $at = 0;
		while (($at = index($text, $search, $at)) >= 0)
		{
			$n++;
			$at += length($search);
		}
		die "mutant $m->{name}: search text found $n times in $file (must be exactly once):\n$search\n"
		  if $n != 1;
	}
	for my $t (@{ $m->{tests} })
	{
		my ($kind, $what) = split(/:/, $t, 2);
		my $path =
			$kind eq 'regress' ? "$root/sql/$what.sql"
		  : $kind eq 'isolation' ? "$root/test/isolation/specs/$what.spec"
		  : $kind eq 'tap' ? "$root/test/t/$what"
		  : die "mutant $m->{name}: unknown test kind in '$t'\n";
		die "mutant $m->{name}: no such test $path\n" unless -f $path;
	}
}

my @selected = @mutants;
if ($ENV{SG_MUTANTS})
{
	my %want = map { $_ => 1 } split(/\s*,\s*/, $ENV{SG_MUTANTS});
	for my $w (keys %want)
	{
		die "unknown mutant '$w'\n" unless $by_name{$w};
	}
	@selected = grep { $want{ $_->{name} } } @mutants;
}
my $timeout = $ENV{SG_MUTATION_TIMEOUT} // 600;
# a mutant's run is expected to fail: its waits keep the tests' own
# deadlines (no 90 s floor, docs/testing.md) unless SG_WAIT_MIN says otherwise
$ENV{SG_WAIT_MIN} //= 0;

# ------------------------------------------------- a private PostgreSQL copy
my $tmp = tempdir('sg-mutation-XXXXXX', DIR => $ENV{SG_MUTATION_TMPDIR} // '/tmp',
	CLEANUP => 0);
my $logdir = "$tmp/logs";
make_path($logdir);
my $src_pgc = $ENV{PG_CONFIG} // 'pg_config';

sub pgc
{
	my ($pgc, $opt) = @_;
	my $v = `$pgc $opt`;
	die "$pgc $opt failed\n" if $? != 0;
	chomp $v;
	return $v;
}

my $pg = "$tmp/pg";
{
	my $bindir = pgc($src_pgc, '--bindir');
	my $sharedir = pgc($src_pgc, '--sharedir');
	my $incdir = pgc($src_pgc, '--includedir');
	for my $d (dirname($bindir), $sharedir, $incdir)
	{
		make_path(dirname("$pg$d"));
		system('cp', '-a', $d, "$pg$d") == 0 or die "cannot copy $d\n";
	}
}
my $pg_config = $pg . pgc($src_pgc, '--bindir') . '/pg_config';
my $pg_bindir = pgc($pg_config, '--bindir');
die "the private copy is not relocated ($pg_bindir)\n" unless index($pg_bindir, $pg) == 0;
print "private PostgreSQL copy: $pg (pg_config $pg_config)\n";

# ---------------------------------------------------------------- build/test
# the tree as git sees it, untracked files included (not build outputs)
my @files = split(/\0/, `git -c safe.directory=\Q$root\E -C \Q$root\E ls-files -z -co --exclude-standard`);
die "git ls-files failed\n" if $? != 0 || !@files;

my $base = "$tmp/base";
for my $f (@files)
{
	next unless -f "$root/$f";
	make_path(dirname("$base/$f"));
	system('cp', '-p', "$root/$f", "$base/$f") == 0 or die "cannot copy $f\n";
}
my $make = "make -j2 PG_CONFIG=" . shq($pg_config);
print "building the unmutated tree...\n";
run_cmd("cd " . shq($base) . " && $make && $make install", "$logdir/base.build.log") == 0
  or die "the unmutated tree does not build; see $logdir/base.build.log\n";

# stop every server a test left running under $dir (only ours)
sub stop_leftovers
{
	my ($dir) = @_;
	my @pids;
	find(sub { push @pids, $File::Find::dir if $_ eq 'postmaster.pid' }, $dir) if -d $dir;
	for my $d (@pids)
	{
		system("$pg_bindir/pg_ctl", '-D', $d, '-m', 'immediate', 'stop', '-w', '-t', '30');
	}
}

sub run_test
{
	my ($tree, $test, $log) = @_;
	my ($kind, $what) = split(/:/, $test, 2);
	my $vars =
		$kind eq 'regress' ? "REGRESS='00_helpers $what' ISOLATION= TAP_TESTS="
	  : $kind eq 'isolation' ? "REGRESS= ISOLATION=$what TAP_TESTS="
	  : "REGRESS= ISOLATION= PROVE_TESTS=test/t/$what";
	my $t0 = time;
	my $rc = run_cmd("cd " . shq($tree) . " && PATH=" . shq($pg_bindir) . ":\$PATH "
		  . "timeout -k 20 $timeout make installcheck PG_CONFIG=" . shq($pg_config) . " $vars",
		$log);
	stop_leftovers($tree);
	# keep what the failure looked like: the tree is removed afterwards
	if ($rc != 0)
	{
		for my $d ("$tree/regression.diffs", "$tree/output_iso/regression.diffs")
		{
			system("head -c 20000 " . shq($d) . " >> " . shq($log)) if -f $d;
		}
		find(sub { system("tail -n 60 " . shq($_) . " >> " . shq($log)) if /^regress_log_/ }, "$tree/tmp_check/log")
		  if -d "$tree/tmp_check/log";
	}
	my $status = $rc == 0 ? 'pass' : (($rc >> 8) == 124 || ($rc >> 8) == 137) ? 'timeout' : 'fail';
	return ($status, time - $t0);
}

if ($ENV{SG_MUTATION_BASELINE})
{
	my %seen;
	for my $t (map { @{ $_->{tests} } } @selected)
	{
		next if $seen{$t}++;
		(my $tag = $t) =~ s/[^\w.]+/_/g;
		my ($status, $secs) = run_test($base, $t, "$logdir/baseline.$tag.log");
		printf "baseline %-40s %s (%.0f s)\n", $t, $status, $secs;
		die "baseline: $t does not pass on the unmutated build; see $logdir/baseline.$tag.log\n"
		  if $status ne 'pass';
	}
}

my @rows;
my $survived = 0;
my $broken = 0;
for my $m (@selected)
{
	my $tree = "$tmp/m-$m->{name}";
	my $t0 = time;
	my %edited;

	print "\n== $m->{name}: $m->{breaks}\n";
	system('cp', '-a', $base, $tree) == 0 or die "cannot copy the tree\n";
	for my $e (@{ $m->{edits} })
	{
		my ($file, $search, $replace) = @$e;
		my $text = slurp("$tree/$file");
		my $at = index($text, $search);
		substr($text, $at, length($search)) = $replace;
		spew("$tree/$file", $text);
		$edited{$file} = 1;
	}
	# PGXS tracks no header dependencies: a mutated header rebuilds all
	my $clean = (grep { /\.h$/ } keys %edited) ? "$make clean && " : '';
	my $blog = "$logdir/$m->{name}.build.log";
	if (run_cmd("cd " . shq($tree) . " && $clean$make && $make install", $blog) != 0)
	{
		push @rows, [ $m->{name}, 'BUILD FAILED', $blog, time - $t0 ];
		$broken++;
		print "   build failed: $blog\n";
		remove_tree($tree) unless $ENV{SG_MUTATION_KEEP};
		next;
	}
	my ($result, $killer) = ('SURVIVED', '-');
	for my $t (@{ $m->{tests} })
	{
		(my $tag = $t) =~ s/[^\w.]+/_/g;
		my $log = "$logdir/$m->{name}.$tag.log";
		my ($status, $secs) = run_test($tree, $t, $log);
		printf "   %-40s %s (%.0f s)\n", $t, $status, $secs;
		if ($status ne 'pass')
		{
			$result = $status eq 'timeout' ? 'killed (timeout)' : 'killed';
			$killer = $t;
			last;
		}
	}
	$survived++ if $result eq 'SURVIVED';
	push @rows, [ $m->{name}, $result, $killer, time - $t0 ];
	remove_tree($tree) unless $ENV{SG_MUTATION_KEEP};
}

# ------------------------------------------------------------------- report
my $report = sprintf("%-34s %-17s %-40s %s\n", 'mutant', 'result', 'killed by', 'seconds');
$report .= sprintf("%-34s %-17s %-40s %.0f\n", @$_) for @rows;
print "\n$report";
spew("$logdir/report.txt", $report);
print "logs: $logdir\n";
if (!$ENV{SG_MUTATION_KEEP} && !$survived && !$broken)
{
	remove_tree($pg);
	remove_tree($base);
}
exit(($survived || $broken) ? 1 : 0);
