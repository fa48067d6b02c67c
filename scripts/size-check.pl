#!/usr/bin/perl
#
# size-check.pl: no C source file of src/ over 800 lines and no function
# over 150 lines, except those listed in %EXCEPTIONS below with the reason.
# A function's length is counted from its name's line to its closing brace.
#
#   perl scripts/size-check.pl            # the violations (exit 1 if any)
#   perl scripts/size-check.pl --list     # also the 15 longest files and functions
#
# An exception that no longer applies (the file or function has shrunk, or
# is gone) is reported too, so the list stays true.

use strict;
use warnings;

use File::Find;
use FindBin;
use lib $FindBin::RealBin;
use CSource qw(strip);

my $MAX_FILE = 800;
my $MAX_FUNCTION = 150;

# "file" or "file:function" => "its most lines: why it may be longer";
# an excepted one may shrink but not grow past that number
my %EXCEPTIONS = (
	# each one is a debt with its reason: the check fails when one grows
	# unlisted, and when a listed one no longer applies
);

my $list = grep { $_ eq '--list' } @ARGV;
my $root = "$FindBin::RealBin/..";
chdir $root or die "size-check: cannot enter $root: $!\n";

my @files;
find(sub { push @files, $File::Find::name if /\.[ch]$/ }, 'src');
@files = sort map { s{^src/}{}r } @files;

my (@bad, %used, @all_files, @all_functions);
for my $f (@files)
{
	open(my $fh, '<', "src/$f") or die "size-check: src/$f: $!\n";
	my $text = do { local $/; <$fh> };
	close $fh;
	my $lines = () = $text =~ /\n/g;
	push @all_files, [ $f, $lines ];
	if ($lines > $MAX_FILE)
	{
		check_excepted($f, $lines, $MAX_FILE);
	}
	next unless $f =~ /\.c$/;
	for my $fn (functions(strip($text)))
	{
		my ($name, $len) = @$fn;
		push @all_functions, [ "$f:$name", $len ];
		next if $len <= $MAX_FUNCTION;
		check_excepted("$f:$name", $len, $MAX_FUNCTION);
	}
}
push @bad, "exception $_ no longer applies: remove it from %EXCEPTIONS"
  for grep { !$used{$_} } sort keys %EXCEPTIONS;

if ($list)
{
	print "longest files:\n";
	printf "  %5d %s\n", $_->[1], $_->[0] for (sort { $b->[1] <=> $a->[1] } @all_files)[0 .. 14];
	print "longest functions:\n";
	printf "  %5d %s\n", $_->[1], $_->[0] for (sort { $b->[1] <=> $a->[1] } @all_functions)[0 .. 14];
}
printf "%d files, %d functions; exceptions: %s\n", scalar @all_files, scalar @all_functions,
  %EXCEPTIONS ? join(', ', sort keys %EXCEPTIONS) : 'none';
if (@bad)
{
	print "size violation: $_\n" for @bad;
	exit 1;
}
printf "no file over %d lines, no function over %d, but the %d listed exceptions, none grown\n",
  $MAX_FILE, $MAX_FUNCTION, scalar keys %EXCEPTIONS;
exit 0;

# an item over its limit: fine if excepted and not grown past its recorded size
sub check_excepted
{
	my ($item, $len, $limit) = @_;
	my $what = $item =~ /:/ ? 'function' : 'file';
	if (!exists $EXCEPTIONS{$item})
	{
		push @bad, "$what $item: $len lines (at most $limit)";
		return;
	}
	$used{$item} = 1;
	my ($max) = $EXCEPTIONS{$item} =~ /^(\d+):/
	  or die "size-check: exception $item: its value must start with its most lines\n";
	push @bad, "$what $item: $len lines, grown past its excepted $max (split it, do not raise the number)"
	  if $len > $max;
	return;
}


# [name, lines] of every function definition: at brace depth 0, a
# "name(...)" followed by "{"
sub functions
{
	my ($s) = @_;
	my ($depth, $start, @out, $name, $from) = (0, 0);
	while ($s =~ /([{};])/g)
	{
		my ($c, $pos) = ($1, pos($s) - 1);
		if ($c eq '{')
		{
			if ($depth == 0)
			{
				my $decl = substr($s, $start, $pos - $start);
				undef $name;
				if ($decl =~ /\b([A-Za-z_]\w*)\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s*$/
					&& $decl !~ /=\s*[^=]*$/)
				{
					$name = $1;
					my $at = $start + $-[1];
					$from = () = substr($s, 0, $at) =~ /\n/g;
				}
			}
			$depth++;
		}
		elsif ($c eq '}')
		{
			$depth--;
			if ($depth == 0)
			{
				if (defined $name)
				{
					my $to = () = substr($s, 0, $pos) =~ /\n/g;
					push @out, [ $name, $to - $from + 1 ];
					undef $name;
				}
				$start = $pos + 1;
			}
		}
		elsif ($depth == 0)
		{
			$start = $pos + 1;
		}
	}
	return @out;
}
