#!/usr/bin/env perl
# call-graph.pl: which src/ file calls which (a call is a use of a function
# defined in another file), the calls that go up the layers (a file calling
# one in a folder above its own, in the order of @layers below), and the
# cycles among files (strongly connected components with more than one
# file).  Exit status 1 when there is an upward call or a cycle.
#
#   perl scripts/call-graph.pl            # edges and cycles
#   perl scripts/call-graph.pl --dot      # the graph in Graphviz dot
use strict;
use warnings;

my $dot = grep { $_ eq '--dot' } @ARGV;

# the folders of src/, from the bottom up; src/streamguard.c (module load)
# sits above them all.  A file may call files of its own folder and of the
# folders below it.
my @layers = qw(core io shmem catalog stream capture pipeline workers api streamguard);
my %rank;
@rank{@layers} = (0 .. $#layers);
sub layer_of
{
	my ($file) = @_;
	my ($top) = split m{/}, $file;
	die "$file: not in a known layer (scripts/call-graph.pl, \@layers)\n"
	  unless exists $rank{$top};
	return $rank{$top};
}
my (%defined_in, %src);
for my $f (sort glob('src/*.c src/*/*.c'))
{
	open(my $fh, '<', $f) or die "$f: $!";
	local $/;
	my $s = <$fh>;
	close $fh;
	$s =~ s{/\*.*?\*/}{}gs;              # comments
	$s =~ s{"(?:[^"\\\n]|\\.)*"}{""}g;   # strings
	(my $name = $f) =~ s{^src/|\.c$}{}g;
	$src{$name} = $s;
	# definitions: a name at the start of a line followed by "(" and, after
	# the parameters, a "{" line; not static (the storage class sits on the
	# line before, PostgreSQL style, or on the same line)
	while ($s =~ /^(?:([^\n]*)\n)?([A-Za-z_]\w*)\((?:[^;{]*)\)\s*\n\{/mg)
	{
		my ($before, $fn) = ($1 // '', $2);
		next if $before =~ /^static\b/;
		$defined_in{$fn} = $name;
	}
}
my %edges;
for my $from (sort keys %src)
{
	while ($src{$from} =~ /\b([A-Za-z_]\w*)\s*\(/g)
	{
		my $to = $defined_in{$1};
		next unless defined $to && $to ne $from;
		$edges{$from}{$to}{$1} = 1;
	}
}
if ($dot)
{
	print "digraph calls {\n\trankdir=TB;\n";
	for my $f (sort keys %edges)
	{
		printf "\t\"%s\" -> \"%s\" [label=\"%d\"];\n", $f, $_, scalar keys %{ $edges{$f}{$_} }
		  for sort keys %{ $edges{$f} };
	}
	print "}\n";
	exit 0;
}
for my $f (sort keys %edges)
{
	printf "%-12s -> %-12s %s\n", $f, $_, join(', ', sort keys %{ $edges{$f}{$_} })
	  for sort keys %{ $edges{$f} };
}
my @up;
for my $f (sort keys %edges)
{
	for my $t (sort keys %{ $edges{$f} })
	{
		push @up, sprintf("  %s -> %s: %s\n", $f, $t, join(', ', sort keys %{ $edges{$f}{$t} }))
		  if layer_of($f) < layer_of($t);
	}
}
if (@up)
{
	print "\nupward calls (a file calling a layer above its own):\n", @up;
}
else
{
	print "\nno upward call\n";
}
# Tarjan's strongly connected components
my ($index, @stack, %idx, %low, %on, @sccs) = (0);
my $visit;
$visit = sub {
	my ($v) = @_;
	$idx{$v} = $low{$v} = $index++;
	push @stack, $v;
	$on{$v} = 1;
	for my $w (sort keys %{ $edges{$v} // {} })
	{
		if (!exists $idx{$w}) { $visit->($w); $low{$v} = $low{$w} if $low{$w} < $low{$v}; }
		elsif ($on{$w}) { $low{$v} = $idx{$w} if $idx{$w} < $low{$v}; }
	}
	if ($low{$v} == $idx{$v})
	{
		my @c;
		while (1) { my $w = pop @stack; $on{$w} = 0; push @c, $w; last if $w eq $v; }
		push @sccs, [ sort @c ] if @c > 1;
	}
};
$visit->($_) for grep { !exists $idx{$_} } sort keys %src;
if (@sccs)
{
	print "\ncycles (files that call each other, directly or not):\n";
	print "  ", join(' <-> ', @$_), "\n" for @sccs;
	exit 1;
}
print "\nno cycle\n";
exit(@up ? 1 : 0);
