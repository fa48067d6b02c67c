#!/usr/bin/env perl
# sql-audit.pl: list every SQL statement streamguard's C code runs (string
# literals that start with a SQL verb, concatenated as the compiler does) and
# say, for each, whether it names every operator and function through
# pg_catalog (or streamguard.) or relies on a pinned search_path.  A review
# aid, not a test: run it from the repository root, read the "unqualified"
# list, and check that each of those runs where search_path is pinned
# (workers; SgBecomeDataOwner(&save, true); sgctl-free paths).
#
#   perl scripts/sql-audit.pl [--all]
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use CSource qw(slurp);

my $all = grep { $_ eq '--all' } @ARGV;
my @verbs = qw(SELECT INSERT UPDATE DELETE WITH CREATE DROP LOCK SET COPY ALTER);
my $verb_re = join('|', @verbs);
my %keywords = map { $_ => 1 } qw(IN VALUES EXISTS COALESCE CASE ANY ALL ARRAY ROWS FROM
  NOT AND OR WHERE ON USING INTO SELECT TABLE KEY PRIMARY UNIQUE DO UPDATE CONFLICT
  OVER FILTER EXTRACT CAST LATERAL JOIN WITH AS UNNEST INTERVAL TIMESTAMPTZ NULLIF GREATEST LEAST
  INSERT DELETE LIMIT BY GROUP ORDER SET DEFAULT REFERENCES CHECK IF INDEX SEQUENCE
  FUNCTION THEN ELSE WHEN);
my ($n, $qualified, $nremote) = (0, 0, 0);
my @report;
for my $file (sort glob('src/*.c src/*/*.c'))
{
	my $src = slurp($file);
	# concatenate adjacent literals: "a" "b" -> "ab"
	my @lits;
	while ($src =~ /((?:"(?:[^"\\\n]|\\.)*"\s*)+)/g)
	{
		my ($chunk, $pos) = ($1, $-[1]);
		my $line = 1 + (substr($src, 0, $pos) =~ tr/\n//);
		my $text = join('', $chunk =~ /"((?:[^"\\\n]|\\.)*)"/g);
		# sent to a remote server (RemoteExec...): runs there, as the mapping's user
		my $remote = substr($src, $pos > 80 ? $pos - 80 : 0, $pos > 80 ? 80 : $pos) =~ /Remote\w*\([^;]*$/ ? 1 : 0;
		push @lits, [ $line, $text, $remote ] if $text =~ /^\s*(?:$verb_re)\b/ && $text =~ /\s/;
	}
	for my $l (@lits)
	{
		my ($line, $sql, $remote) = @$l;
		if ($remote)
		{
			$nremote++;
			push @report, sprintf("%s:%d: remote", $file, $line) if $all;
			next;
		}
		$n++;
		(my $s = $sql) =~ s/'(?:[^']|'')*'//g;                 # literals
		$s =~ s/OPERATOR\(pg_catalog\.[^)]*\)//g;                # qualified operators
		$s =~ s/\b(?:pg_catalog|streamguard|streamguard_data|public)\.\w+\s*\(/ (/g;  # qualified calls
		$s =~ s/::[\w.]+(?:\[\])?//g;                            # casts
		$s =~ s/%[sdlu]+//g;                                     # printf holes
		$s =~ s/^\s*SET\s+\w+\s*=.*//s;                            # a setting
		$s =~ s/\bAS\s+\w+\s*\(/AS (/g;                              # alias column lists
		$s =~ s/^\s*COPY\s+\S+\s*\(/COPY (/;                            # COPY's column list
		1 while $s =~ s/(\bSET\b[^;]*?(?:\bSET|,)\s*)\w+\s*=(?!=)/$1 /;    # SET col = ... assignments
		$s =~ s/\bSET\s+\w+\s*=(?!=)/SET /g;
		my @why;
		push @why, "operator '$1'" while $s =~ /(?<![<>!=:|])(=|<>|<=|>=|<|>|\|\||\+|-)(?![=>])/g;
		while ($s =~ /\b([A-Za-z_]\w*)\s*\(/g)
		{
			push @why, "function '$1'" unless $keywords{ uc $1 };
		}
		if (@why)
		{
			my %seen;
			push @report, sprintf("%s:%d: %s\n    %s", $file, $line, join(', ', grep { !$seen{$_}++ } @why),
				substr($sql, 0, 160));
		}
		else
		{
			$qualified++;
			push @report, sprintf("%s:%d: qualified", $file, $line) if $all;
		}
	}
}
print "$_\n" for @report;
printf "\n%d local statements: %d name every operator and function through pg_catalog, "
  . "%d rely on a pinned search_path; %d statements sent to remote servers\n",
  $n, $qualified, $n - $qualified, $nremote;
