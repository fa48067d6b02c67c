#
# scripts/CSource.pm -- what the source checkers (call-graph.pl,
# size-check.pl, writable-check.pl, sql-audit.pl) share: a file's text, and
# C text with what is not code blanked out.
#
package CSource;

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(strip slurp);

# the whole text of a file
sub slurp
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "$file: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

# comments, strings, character constants and preprocessor lines removed;
# newlines kept, so line numbers stay
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

1;
