#!/usr/bin/perl
# docs/internals.md matches the tree: every C file of src/ has its row (its
# path, `folder/name.c`, in backquotes), and every file of ours the page
# names exists (PostgreSQL's own files it cites are told apart by their
# folder, or listed below).
#
#   perl scripts/internals-check.pl    # exit 1 and what is missing or stale

use strict;
use warnings;

use FindBin;

chdir("$FindBin::RealBin/..") or die "cannot chdir: $!";

# PostgreSQL's files the page cites by name alone
my %POSTGRES = map { $_ => 1 } qw(libpq-be-fe-helpers.h libpqwalreceiver.c fd.c);

open(my $fh, '<', 'docs/internals.md') or die "docs/internals.md: $!";
my $doc = do { local $/; <$fh> };
close $fh;

my (%ours, %base);
for my $f (glob('src/*.[ch] src/*/*.[ch] tools/sgctl/*.[ch]'))
{
	(my $rel = $f) =~ s{^src/}{};
	$ours{$rel} = 1;
	$ours{$f} = 1;
	$base{ (split m{/}, $f)[-1] } = 1;
}

my @problems;
for my $f (sort glob('src/*.c src/*/*.c'))
{
	(my $rel = $f) =~ s{^src/}{};
	push @problems, "no row for $rel" unless $doc =~ /`\Q$rel\E`/;
}
my %seen;
while ($doc =~ /`([\w\/.-]+\.[ch])`/g)
{
	my $name = $1;
	next if $seen{$name}++;
	# PostgreSQL's headers and sources, cited by their own folders
	next if $name =~ m{^(?:src/backend/|src/include/|contrib/|utils/|access/|storage/|postmaster/|replication/|libpq/|commands/|executor/|nodes/|lib/|port/|tcop/|common/|fe_utils/|catalog/(?!sg_catalog\.h|catalog\.c|catalog_meta\.c|pipeline_catalog\.[ch]))};
	next if $POSTGRES{$name};
	next if $ours{$name} || ($name !~ m{/} && $base{$name});
	push @problems, "names $name, which is not in the tree";
}
if (@problems)
{
	print "docs/internals.md: $_\n" for @problems;
	exit 1;
}
printf "docs/internals.md has a row for each of the %d C files of src/ and names no file that is gone\n",
  scalar(() = glob('src/*.c src/*/*.c'));
exit 0;
