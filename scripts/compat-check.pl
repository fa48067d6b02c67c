#!/usr/bin/perl
# A file that uses a name core/compat.h defines for the differences between
# PostgreSQL majors (a shim such as ShmemInitHash, pg_class_ownercheck or
# SG_MY_PROC_INDEX) includes core/compat.h, directly or through one of our
# headers that does.  Without it the file builds against the majors where
# PostgreSQL's own name fits and fails on the others (a file moved out of
# launcher.c once lost its include and broke the build on 19 only).
#
#   perl scripts/compat-check.pl    # exit 1 and the files, if any

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use CSource qw(strip);

chdir("$FindBin::RealBin/..") or die "cannot chdir: $!";

my $compat = do { local $/; open(my $fh, '<', 'src/core/compat.h') or die $!; <$fh> };
my %names;
$names{$1} = 1 while $compat =~ /^\s*#\s*define\s+(\w+)/mg;
delete $names{SG_COMPAT_H};

my (%raw, %includes);
for my $f (glob('src/*.[ch] src/*/*.[ch]'))
{
	open(my $fh, '<', $f) or die "$f: $!";
	$raw{$f} = do { local $/; <$fh> };
	close $fh;
	(my $code = $raw{$f}) =~ s{/\*.*?\*/}{}gs;
	$includes{$f} = [ $code =~ /^\s*#\s*include\s+"([^"]+)"/mg ];
}

# does $f see compat.h (itself or through our headers, transitively)?
my %sees;
sub sees_compat
{
	my ($f, $depth) = @_;
	return $sees{$f} if exists $sees{$f};
	return 0 if $depth > 10;
	my $yes = 0;
	for my $inc (@{ $includes{$f} // [] })
	{
		my $path = "src/$inc";
		if ($inc eq 'core/compat.h') { $yes = 1; last }
		if (exists $raw{$path} && sees_compat($path, $depth + 1)) { $yes = 1; last }
	}
	return $sees{$f} = $yes;
}

my @problems;
my $users = 0;
for my $f (sort grep { /\.c$/ } keys %raw)
{
	my $text = strip($raw{$f});
	my @used = sort grep { $text =~ /\b\Q$_\E\b/ } keys %names;
	next unless @used;
	$users++;
	push @problems, "$f uses @used from core/compat.h and does not include it"
	  unless sees_compat($f, 0);
}
if (@problems)
{
	print "compat violation: $_\n" for @problems;
	exit 1;
}
print "$users C files use names of core/compat.h, each including it\n";
exit 0;
