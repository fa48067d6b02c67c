#!/usr/bin/env perl
# call-graph.pl: the layers of src/ and the calls between its files.
#
# The C sources sit in one folder per layer; a file may call only files of
# its own layer or of a layer below it, and the files of one layer must not
# call each other in a cycle.  This script reads every src/**/*.c and finds:
#
#   direct calls    a use of a function defined, not static, in another file;
#   pointer calls   a call through a function pointer: a struct field or a
#                   variable assigned a function somewhere (a designated
#                   initializer ".fetch = LocalFetch", "x->cb = F", "v = F",
#                   or F passed to one of our functions, which will call it),
#                   invoked somewhere else ("->fetch(", ".fetch(", "v(");
#                   the call runs from the invoking file to the file that
#                   defines F, static or not;
#   hooks           a pointer variable of a lower layer that module load
#                   (src/streamguard.c) sets to a function of a higher
#                   layer: the way a lower layer asks for a service from
#                   above without depending on it.  Every hook must be
#                   listed in %HOOKS below with the reason; an unlisted one
#                   is an upward call.
#
# It prints the layers with each file's exported and static functions, the
# edges between files, and every violation: an upward call (direct or
# through a pointer) and every cycle among files (strongly connected
# components of more than one file).  Exit status 1 when there is one.
#
#   perl scripts/call-graph.pl            # layers, edges, violations
#   perl scripts/call-graph.pl --dot      # the graph in Graphviz dot
#
# Positional struct initializers of function pointers are not seen: use
# designated ones (".field = Func") for every routine table.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use CSource qw(strip);

# the layers, bottom first; "top" is src/*.c (module load)
my @LAYERS = qw(core io shmem catalog stream capture pipeline workers api top);
my %RANK = map { $LAYERS[$_] => $_ } 0 .. $#LAYERS;

# hooks: pointer variable => why a lower layer calls up through it.  None
# is left: each dependency that went up now goes down (the upper layer
# hands the lower one what it needs, or the state moved down).  A new one
# must be listed here, with its reason, or the check fails.
my %HOOKS = (
);

my $dot = grep { $_ eq '--dot' } @ARGV;

my (%src, %layer, %exported, %static, %fnptr);

# the names our own sources declare as function pointers: fields and
# variables "(*name)(", and those declared with a function-pointer typedef
# of ours; calls through PostgreSQL's own pointers (a DestReceiver's
# receiveSlot, ...) are PostgreSQL calling us, not a call between our files
{
	my $all = '';
	for my $f (sort glob('src/*.[ch] src/*/*.[ch] src/*/*/*.[ch]'))
	{
		open(my $fh, '<', $f) or die "$f: $!";
		local $/;
		$all .= strip(scalar <$fh>);
		close $fh;
	}
	my %types;
	while ($all =~ /\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(/g) { $fnptr{$1} = 1; }
	while ($all =~ /\btypedef\b[^;]*?\(\s*\*\s*([A-Za-z_]\w*)\s*\)/g) { $types{$1} = 1; }
	for my $t (sort keys %types)
	{
		while ($all =~ /\b\Q$t\E\s+\**\s*([A-Za-z_]\w*)\s*[;=,)\[]/g) { $fnptr{$1} = 1; }
	}
}
for my $f (sort glob('src/*.c src/*/*.c src/*/*/*.c'))
{
	open(my $fh, '<', $f) or die "$f: $!";
	local $/;
	my $s = <$fh>;
	close $fh;
	(my $name = $f) =~ s{^src/|\.c$}{}g;
	$layer{$name} = $name =~ m{^([^/]+)/} ? $1 : 'top';
	die "$f: folder '$layer{$name}' is not a layer (scripts/call-graph.pl \@LAYERS)\n"
	  unless exists $RANK{ $layer{$name} };
	$src{$name} = strip($s);
	definitions($name);
}

# every function name => the files defining it (static ones only resolve in their own file)
my %defined_in;
for my $f (keys %exported) { $defined_in{$_} = $f for keys %{ $exported{$f} }; }

my %edges;    # from => to => "kind name" => 1
direct_calls();
pointer_calls();

my @violations;
for my $from (sort keys %edges)
{
	for my $to (sort keys %{ $edges{$from} })
	{
		next if $RANK{ $layer{$to} } <= $RANK{ $layer{$from} };
		for my $what (sort keys %{ $edges{$from}{$to} })
		{
			next if $what =~ /^hook /;
			push @violations, "upward call: $from ($layer{$from}) -> $to ($layer{$to}): $what";
		}
	}
}
push @violations, map { 'cycle: ' . join(' <-> ', @$_) . ' (' . cycle_calls($_) . ')' } cycles();

if ($dot)
{
	print "digraph streamguard {\n  rankdir=BT;\n";
	for my $l (@LAYERS)
	{
		my @f = grep { $layer{$_} eq $l } sort keys %layer;
		next unless @f;
		print "  subgraph \"cluster_$l\" { label=\"$l\"; ", join(' ', map { "\"$_\";" } @f), " }\n";
	}
	for my $from (sort keys %edges)
	{
		for my $to (sort keys %{ $edges{$from} })
		{
			my $style = (grep { !/^direct / } keys %{ $edges{$from}{$to} }) ? ' [style=dashed]' : '';
			print "  \"$from\" -> \"$to\"$style;\n";
		}
	}
	print "}\n";
	exit(@violations ? 1 : 0);
}

print "layers, bottom first (file: exported / static functions):\n";
for my $l (@LAYERS)
{
	my @f = grep { $layer{$_} eq $l } sort keys %layer;
	next unless @f;
	printf "  %-9s %s\n", $l,
	  join(', ', map { sprintf '%s %d/%d', $_, scalar keys %{ $exported{$_} }, scalar keys %{ $static{$_} } } @f);
}
print "\ncalls between files (direct; *: through a pointer; hook: a registered hook):\n";
for my $from (sort keys %edges)
{
	for my $to (sort keys %{ $edges{$from} })
	{
		my @what = map { s/^direct //r =~ s/^pointer (\S+)/*$1/r =~ s/^hook (\S+)/hook $1/r }
		  sort keys %{ $edges{$from}{$to} };
		printf "%-28s -> %-28s %s\n", $from, $to, join(', ', @what);
	}
}
print "\nhooks (a lower layer calling up through a pointer set at module load):\n";
for my $h (sort keys %HOOKS) { print "  $h: $HOOKS{$h}\n"; }
if (@violations)
{
	print "\nviolations:\n", map { "  $_\n" } @violations;
	exit 1;
}
print "\nno upward call, no cycle\n";
exit 0;


# function definitions: at brace depth 0, a "name(...)" followed by "{";
# static when the declaration it ends (since the last ";" or "}" at depth 0)
# says so
sub definitions
{
	my ($f) = @_;
	my $s = $src{$f};
	my ($depth, $start) = (0, 0);
	$exported{$f} = {};
	$static{$f} = {};
	while ($s =~ /([{};])/g)
	{
		my ($c, $pos) = ($1, pos($s) - 1);
		if ($c eq '{')
		{
			if ($depth == 0)
			{
				my $decl = substr($s, $start, $pos - $start);
				if ($decl =~ /\b([A-Za-z_]\w*)\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s*$/
					&& $decl !~ /=\s*[^=]*$/)
				{
					my $name = $1;
					my $kind = $decl =~ /\bstatic\b/ ? \%static : \%exported;
					$kind->{$f}{$name} = 1;
				}
			}
			$depth++;
		}
		elsif ($c eq '}')
		{
			$depth--;
			$start = $pos + 1 if $depth == 0;
		}
		elsif ($depth == 0)
		{
			$start = $pos + 1;
		}
	}
	return;
}

sub resolve
{
	my ($from, $name) = @_;
	return $from if $static{$from}{$name} || $exported{$from}{$name};
	return $defined_in{$name};
}

sub direct_calls
{
	for my $from (sort keys %src)
	{
		while ($src{$from} =~ /(->|\.)?\s*\b([A-Za-z_]\w*)\s*\(/g)
		{
			next if defined $1;
			my $to = $defined_in{$2};
			next unless defined $to && $to ne $from && !$static{$from}{$2};
			$edges{$from}{$to}{"direct $2"} = 1;
		}
	}
	return;
}

sub pointer_calls
{
	# where each pointer (field or variable) gets its functions
	my (%impl, %assigned_in);
	for my $f (sort keys %src)
	{
		my $s = $src{$f};
		# .field = F, ->field = F, var = F  (F a function, not a call)
		while ($s =~ /(?:(?:->|\.)\s*([A-Za-z_]\w*)|\b([A-Za-z_]\w*))\s*=\s*&?\s*([A-Za-z_]\w*)\s*([,;}])/g)
		{
			my ($field, $var, $fn) = ($1, $2, $3);
			my $to = resolve($f, $fn);
			next unless defined $to;
			next unless $fnptr{ $field // $var };
			my $ptr = defined $field ? "->$field" : $var;
			$impl{$ptr}{$to}{$fn} = 1;
			$assigned_in{$ptr}{$f} = 1;
		}
		# F passed to one of our functions: that function's file calls it
		while ($s =~ /\b([A-Za-z_]\w*)\s*\(([^;{}]*)\)/g)
		{
			my ($callee, $args) = ($1, $2);
			my $cfile = resolve($f, $callee);
			next unless defined $cfile;
			for my $arg (split /,/, $args)
			{
				next unless $arg =~ /^\s*&?\s*([A-Za-z_]\w*)\s*$/;
				my $to = resolve($f, $1);
				next unless defined $to;
				$edges{$cfile}{$to}{"pointer $1"} = 1 if $cfile ne $to;
			}
		}
	}
	# where they are invoked
	for my $from (sort keys %src)
	{
		my $s = $src{$from};
		for my $ptr (sort keys %impl)
		{
			my $re = $ptr =~ /^->(.*)/ ? qr/(?:->|\.)\s*\Q$1\E\s*\(/ : qr/(?<![\w.>])\(?\s*\*?\s*\Q$ptr\E\s*\)?\s*\(/;
			next unless $s =~ $re;
			for my $to (sort keys %{ $impl{$ptr} })
			{
				next if $to eq $from;
				# a file that sets the pointer itself calls its own functions through it
				next if $impl{$ptr}{$from};
				my $hook = $ptr !~ /^->/ && exists $HOOKS{$ptr} && $assigned_in{$ptr}{'streamguard'};
				for my $fn (sort keys %{ $impl{$ptr}{$to} })
				{
					next if $fn eq $ptr;
					$edges{$from}{$to}{ ($hook ? 'hook' : 'pointer') . " $ptr=$fn" } = 1;
				}
			}
		}
	}
	return;
}

# strongly connected components with more than one file (Tarjan)
sub cycles
{
	my ($index, @stack, %on, %idx, %low, @out) = (0);
	my $visit;
	$visit = sub {
		my ($v) = @_;
		$idx{$v} = $low{$v} = $index++;
		push @stack, $v;
		$on{$v} = 1;
		for my $w (sort keys %{ $edges{$v} // {} })
		{
			next if (grep { /^hook / } keys %{ $edges{$v}{$w} }) == keys %{ $edges{$v}{$w} };
			if (!exists $idx{$w}) { $visit->($w); $low{$v} = $low{$w} if $low{$w} < $low{$v}; }
			elsif ($on{$w}) { $low{$v} = $idx{$w} if $idx{$w} < $low{$v}; }
		}
		if ($low{$v} == $idx{$v})
		{
			my @c;
			while (1) { my $w = pop @stack; delete $on{$w}; push @c, $w; last if $w eq $v; }
			push @out, [ sort @c ] if @c > 1;
		}
	};
	$visit->($_) for grep { !exists $idx{$_} } sort keys %src;
	return @out;
}

sub cycle_calls
{
	my ($c) = @_;
	my %in = map { $_ => 1 } @$c;
	my @calls;
	for my $from (@$c)
	{
		for my $to (grep { $in{$_} } sort keys %{ $edges{$from} // {} })
		{
			push @calls, "$from -> $to: " . join(', ', map { s/^\w+ //r } sort keys %{ $edges{$from}{$to} });
		}
	}
	return join('; ', @calls);
}
