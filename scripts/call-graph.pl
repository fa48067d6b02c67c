#!/usr/bin/env perl
# call-graph.pl: which src/ file calls which (a call is a use of a function
# defined in another file), and the cycles among files (strongly connected
# components with more than one file).  Exit status 1 when there is a cycle.
#
#   perl scripts/call-graph.pl            # edges and cycles
#   perl scripts/call-graph.pl --dot      # the graph in Graphviz dot
use strict;
use warnings;

my $dot = grep { $_ eq '--dot' } @ARGV;
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
	# definitions: a name at the start of a line followed by "(", not static
	while ($s =~ /^(?!static\b)(?:[A-Za-z_][\w \t\*]*\n)?([A-Za-z_]\w*)\((?:[^;{]*)\)\s*\n\{/mg)
	{
		$defined_in{$1} = $name;
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
exit 0;
