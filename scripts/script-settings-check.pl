#!/usr/bin/env perl
# script-settings-check.pl: the extension's SQL scripts leave the caller's
# session settings as they found them.
#
# CREATE EXTENSION and ALTER EXTENSION UPDATE run a script inside a GUC nest
# level of their own and undo, at its end, what the script set *locally*;
# a plain top-level SET (or RESET, or set_config(..., false)) is merged into
# the caller's session instead: after ALTER EXTENSION UPDATE its
# search_path would still be the script's.  So every setting a script makes
# at its top level must be local: set_config(name, value, true) or SET
# LOCAL.  A SET clause of CREATE FUNCTION / PROCEDURE is the function's and
# is fine; so is anything inside a function's or DO block's body (a body is
# quoted).
#
# Checked: src/sql/*.sql (the sources make assembles the scripts from) and
# the shipped streamguard--*.sql.  Run from the repository root; exits 1 and
# names file:line of each violation.
use strict;
use warnings;

my @files = (sort(glob('src/sql/*.sql')), sort(glob('streamguard--*.sql')));
my ($nfiles, $nstmts, @bad) = (0, 0);
for my $file (@files)
{
	open(my $fh, '<', $file) or die "$file: $!";
	local $/;
	my $src = <$fh>;
	close $fh;
	$nfiles++;

	# blank out comments and quoted text (keeping newlines, for line numbers)
	my $blank = sub { (my $t = $_[0]) =~ s/[^\n]/ /g; return $t; };
	my $out = '';
	pos($src) = 0;
	while (pos($src) < length($src))
	{
		if ($src =~ /\G(--[^\n]*)/gc) { $out .= $blank->($1); }
		elsif ($src =~ m{\G(/\*.*?\*/)}gcs) { $out .= $blank->($1); }
		elsif ($src =~ /\G(\$([A-Za-z_]\w*)?\$)/gc)
		{
			my $tag = $1;
			my $start = pos($src) - length($tag);
			my $end = index($src, $tag, pos($src));
			$end = length($src) - length($tag) if $end < 0;
			my $body = substr($src, $start, $end + length($tag) - $start);
			$out .= "'" . $blank->(substr($body, 1, length($body) - 2)) . "'";
			pos($src) = $end + length($tag);
		}
		elsif ($src =~ /\G('(?:[^']|'')*')/gc) { $out .= "'" . $blank->(substr($1, 1, -1)) . "'"; }
		elsif ($src =~ /\G("(?:[^"]|"")*")/gc) { $out .= $1; }
		elsif ($src =~ /\G(\\[^\n]*)/gc) { $out .= $blank->($1) . ';'; }    # psql meta-command
		elsif ($src =~ /\G([^-\/\$'"\\]+|.)/gcs) { $out .= $1; }
	}

	# statements: split on ';', keeping each one's first line
	my $line = 1;
	for my $stmt (split /;/, $out)
	{
		my $lead = ($stmt =~ /^(\s*)/)[0];
		my $at = $line + ($lead =~ tr/\n//);
		$line += ($stmt =~ tr/\n//);
		next if $stmt !~ /\S/;
		$nstmts++;
		if ($stmt =~ /^\s*(?:SET|RESET)\b(?!\s+LOCAL\b)/i && $stmt !~ /^\s*SET\s+(?:CONSTRAINTS|TRANSACTION|SESSION\s+CHARACTERISTICS)\b/i)
		{
			push @bad, sprintf("%s:%d: a top-level %s outlives the script in the caller's session; use set_config(name, value, true) or SET LOCAL",
				$file, $at, ($stmt =~ /^\s*(\w+)/)[0]);
		}
	}

	# set_config anywhere, bodies included (a DO block runs in the script's
	# nest level; a function runs in its caller's session): its third
	# argument must be true
	(my $flat = $src) =~ s/--[^\n]*//g;
	$flat =~ s/'(?:[^'\n]|'')*'/''/g;    # strings (their newlines kept: they hold none)
	while ($flat =~ /\bset_config\s*\(/gi)
	{
		my ($depth, $i, $last) = (1, pos($flat), pos($flat));
		while ($i < length($flat) && $depth > 0)
		{
			my $ch = substr($flat, $i++, 1);
			$depth++ if $ch eq '(';
			$depth-- if $ch eq ')';
			$last = $i if $ch eq ',' && $depth == 1;
		}
		my $arg = substr($flat, $last, $i - 1 - $last);
		next if $arg =~ /^\s*true\s*$/i;
		my $at = 1 + (substr($flat, 0, pos($flat)) =~ tr/\n//);
		push @bad, sprintf("%s:%d: set_config(..., %s) outlives the script or the function in the caller's session; pass true",
			$file, $at, $arg =~ s/^\s+|\s+$//gr);
	}
}
print "$_\n" for @bad;
printf "%d files, %d top-level statements, %d setting(s) that would outlive a script\n", $nfiles, $nstmts, scalar @bad;
exit(@bad ? 1 : 0);
