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

my $MAX_FILE = 800;
my $MAX_FUNCTION = 150;

# "file" or "file:function" => why it may be longer
my %EXCEPTIONS = ();

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
		if (exists $EXCEPTIONS{$f}) { $used{$f} = 1 }
		else { push @bad, "file $f: $lines lines (at most $MAX_FILE)" }
	}
	next unless $f =~ /\.c$/;
	for my $fn (functions(strip($text)))
	{
		my ($name, $len) = @$fn;
		push @all_functions, [ "$f:$name", $len ];
		next if $len <= $MAX_FUNCTION;
		if (exists $EXCEPTIONS{"$f:$name"}) { $used{"$f:$name"} = 1 }
		else { push @bad, "function $f:$name: $len lines (at most $MAX_FUNCTION)" }
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
print "no file over $MAX_FILE lines, no function over $MAX_FUNCTION\n";
exit 0;

# comments, strings, character constants and preprocessor lines blanked,
# newlines kept (so line numbers stay)
sub strip
{
	my ($s) = @_;
	$s =~ s{/\*.*?\*/}{ $& =~ tr/\n//cdr }gse;
	$s =~ s{//[^\n]*}{}g;
	$s =~ s{"(?:[^"\\\n]|\\.)*"}{""}g;
	$s =~ s{'(?:[^'\\\n]|\\.)+'}{'x'}g;
	$s =~ s{^[ \t]*#(?:[^\n]*\\\n)*[^\n]*}{ $& =~ tr/\n//cdr }gme;
	return $s;
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
