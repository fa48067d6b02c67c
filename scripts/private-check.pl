#!/usr/bin/perl
# Modules own their shared state (docs/internals.md, "Modules and their
# state"):
#   - a struct placed in shared memory (the variable a ShmemInitStruct or
#     ShmemInitHash call assigns) is declared in a .c file of the module
#     that creates it, or in a private header of that module's folder
#     (<name>_int.h), never in a public header;
#   - a private header <name>_int.h is included only by files of its own
#     folder;
#   - a function named *_locked (it expects its module's lock held) asserts
#     it: Assert(LWLockHeldByMe...) or another Assert(...HeldByMe...).
# Other files reach that state through the module's functions.
#
#   perl scripts/private-check.pl     # exit 1 and the violations, if any

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use CSource qw(strip);

chdir("$FindBin::RealBin/..") or die "cannot chdir: $!";

my (%text, %raw, @problems);
for my $f (sort glob('src/*.[ch] src/*/*.[ch]'))
{
	open(my $fh, '<', $f) or die "$f: $!";
	local $/;
	$raw{$f} = <$fh>;
	$text{$f} = strip($raw{$f});
	close $fh;
}

sub folder { my ($f) = @_; return $f =~ m{^src/([^/]+)/} ? $1 : ''; }

# private headers stay in their folder
for my $f (sort keys %text)
{
	# (the raw text: stripping blanks the string literals)
	my $code = $raw{$f};
	$code =~ s{/\*.*?\*/}{}gs;
	while ($code =~ /^\s*#\s*include\s+"(([^\/"]+)\/[^"\/]+_int\.h)"/mg)
	{
		my ($hdr, $dir) = ($1, $2);
		push @problems, "$f includes $hdr, private to src/$dir/" if folder($f) ne $dir;
	}
}

# where a type is defined: the files with "struct T {" or "typedef struct ... { ... } T;"
sub defined_in
{
	my ($type) = @_;
	my @where;
	for my $f (sort keys %text)
	{
		push @where, $f
		  if $text{$f} =~ /\bstruct\s+\Q$type\E\s*\{/
		  || $text{$f} =~ /\btypedef\s+struct\s*\w*\s*\{(?:[^{}]|\{[^{}]*\})*\}\s*\Q$type\E\s*;/s;
	}
	return @where;
}

my $shared = 0;
for my $f (sort grep { /\.c$/ } keys %text)
{
	while ($text{$f} =~ /\b(\w+)\s*=\s*(?:\([^)]*\)\s*)?Shmem(?:InitStruct|InitHash)\s*\(/g)
	{
		my $var = $1;
		my $dir = folder($f);
		# the variable's declaration: in this file, or a private header of
		# its folder
		my @decl = grep { (folder($_) eq $dir && /_int\.h$/) || $_ eq $f } keys %text;
		my $type;
		for my $d (@decl)
		{
			if ($text{$d} =~ /^\s*(?:static\s+|extern\s+)?(?:volatile\s+)?(?:struct\s+)?(\w+)\s*\*\s*\Q$var\E\s*(?:=[^;]*)?;/m)
			{
				$type = $1;
				last;
			}
		}
		if (!defined $type)
		{
			push @problems, "$f: shared variable $var: its declaration is not in the file or a private header of src/$dir/";
			next;
		}
		next if $type eq 'HTAB';	# a shared hash: its entry type is checked below
		$shared++;
		for my $where (defined_in($type))
		{
			push @problems, "$f: shared struct $type (of $var) is declared in $where, outside the module"
			  unless $where eq $f || (folder($where) eq $dir && $where =~ /(_int\.h|\.c)$/);
		}
	}
	# a shared hash's entries: the entrysize's type (a file with a shared
	# hash; backend-local hashes are the backend's own business)
	next unless $text{$f} =~ /\bShmemInitHash\s*\(/;
	while ($text{$f} =~ /ShmemInitHash\s*\((?:[^;]*?)entrysize\s*=\s*sizeof\s*\(\s*(?:struct\s+)?(\w+)\s*\)/sg
		|| $text{$f} =~ /\.entrysize\s*=\s*sizeof\s*\(\s*(?:struct\s+)?(\w+)\s*\)/g)
	{
		my $type = $1;
		my $dir = folder($f);
		$shared++;
		for my $where (defined_in($type))
		{
			push @problems, "$f: shared hash entry $type is declared in $where, outside the module"
			  unless $where eq $f || (folder($where) eq $dir && $where =~ /(_int\.h|\.c)$/);
		}
		last;
	}
}

# helpers that expect a lock held assert it
my $locked = 0;
for my $f (sort grep { /\.c$/ } keys %text)
{
	while ($text{$f} =~ /^(\w+_locked)\s*\([^)]*\)\s*\{(.*?)^\}/msg)
	{
		my ($fn, $body) = ($1, $2);
		$locked++;
		push @problems, "$f: $fn expects a lock held and does not assert it (Assert(LWLockHeldByMe...))"
		  unless $body =~ /\bAssert\s*\([^;]*HeldByMe/;
	}
}

if (@problems)
{
	print "private-state violation: $_\n" for @problems;
	exit 1;
}
print "$shared shared structs, each declared by the module that owns it; private headers used in their folders only; "
  . "$locked *_locked helpers, each asserting its lock\n";
exit 0;
