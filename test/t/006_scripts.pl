# The install scripts and what the docs say of them (no server):
#   - scripts/install-deps.sh --list MODE prints each mode's packages without
#     root, and refuses an unknown mode;
#   - the demo's mode (what `bash scripts/demo.sh` installs on a bare Debian)
#     is the build packages and procps, none of the test tools;
#   - scripts/test.sh refuses an unknown layer in SG_LAYERS at once;
#   - the package lists in README.md ("Two commands", and the test tools of
#     the install section) and docs/operations.md
#     ("The scripted way") are exactly the script's, so that the docs cannot
#     drift from what a fresh machine gets.

use strict;
use warnings;

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";

sub list
{
	my ($mode) = @_;
	my $out = `bash '$root/scripts/install-deps.sh' --list $mode 2>&1`;
	my $status = $? >> 8;
	is($status, 0, "install-deps.sh --list $mode exits 0 without installing") or diag($out);
	my @p = grep { length } split /\n/, $out;
	ok(@p > 0, "install-deps.sh --list $mode prints packages");
	return @p;
}

my @all   = list('all');
my @build = list('build');
my @demo  = list('demo');
my @deb   = list('deb');

my $bad = `bash '$root/scripts/install-deps.sh' --list nosuchmode 2>&1`;
isnt($? >> 8, 0, 'an unknown mode is refused');
like($bad, qr/usage: install-deps\.sh/, '... with the usage line');

my %build = map { $_ => 1 } @build;
my %all   = map { $_ => 1 } @all;
ok(!(grep { !$all{$_} } @build), 'the default mode includes every build package');
ok(!(grep { !$build{$_} } grep { !/^(git|dpkg-dev|debhelper|postgresql-server-dev-all)$/ } @deb),
	'the deb mode is the build packages and the packaging tools');
is_deeply([ sort grep { !$build{$_} } @demo ], ['procps'],
	'the demo installs the build packages and procps, nothing else');
my %demo = map { $_ => 1 } @demo;
ok(!(grep { !$demo{$_} } @build), 'the demo mode includes every build package (the server too)');
for my $heavy (qw(chromium prometheus valgrind sqlsmith))
{
	ok(!(grep { $_ eq $heavy } @demo), "the demo does not install $heavy");
	ok((grep { $_ eq $heavy } @all), "the test command installs $heavy");
}

# scripts/test.sh's layer selection refuses an unknown layer before it
# installs or builds anything
my $t = `SG_LAYERS='regress nosuchlayer' bash '$root/scripts/test.sh' 2>&1 </dev/null`;
isnt($? >> 8, 0, 'test.sh: SG_LAYERS with an unknown layer fails');
like($t, qr/SG_LAYERS: unknown layer 'nosuchlayer' \(the layers are: regress isolation tap fuzz\)/,
	'... naming it and the layers');
unlike($t, qr/build:|installing/, '... before installing or building');

# the package names a docs paragraph lists: the backticked words of the text
# from START up to the first END
sub doc_packages
{
	my ($file, $start, $end) = @_;
	open(my $fh, '<', "$root/$file") or die "cannot read $file: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	$text =~ s/\s+/ /g;
	my $i = index($text, $start);
	return undef if $i < 0;
	my $j = index($text, $end, $i);
	return undef if $j < 0;
	my $par = substr($text, $i, $j - $i);
	my %seen;
	return [ sort grep { !$seen{$_}++ } $par =~ /`([a-z0-9][a-z0-9.+-]*)`/g ];
}

my %want = map { $_ => 1 } @all, @demo;
my @want = sort keys %want;
for my $doc (
	[ 'README.md', 'Both first install whatever is missing', 'apt-get update' ],
	[ 'docs/operations.md', 'Both install the missing Debian packages first', 'then build' ])
{
	my $got = doc_packages(@$doc);
	ok(defined $got, "$doc->[0]: the paragraph on the installed packages is there")
	  or next;
	is_deeply($got, \@want, "$doc->[0]: it lists exactly the packages of the demo and the test command");
}

# README's install section: what install-deps.sh installs without --build
# beyond the build packages, exactly
{
	my $got = doc_packages('README.md', 'Without `--build` it also installs the test tools', 'which');
	ok(defined $got, 'README.md: the sentence on the test tools is there') or diag('not found');
	is_deeply($got // [], [ sort grep { !$build{$_} } @all ],
		'README.md: it names exactly the packages the default mode adds to the build ones');
}

done_testing();
