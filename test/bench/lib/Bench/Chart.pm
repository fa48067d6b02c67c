#
# test/bench/lib/Bench/Chart.pm -- PNG charts of a run, drawn by gnuplot
# (Debian package gnuplot-nox; scripts/install-deps.sh installs it).  Without
# gnuplot the charts are skipped with a message; the table is the result
# either way.
#   bars():    median events/s per contender, horizontal bars, a panel per
#              group (Bench::Benchmark's bar_charts);
#   latency(): p50, p99 and max latency per contender (log scale);
#   curve():   measures against the amount of work, a panel per measure
#              (Bench::Curves).
# Each chart's data file (tab-separated) and gnuplot script sit next to it.
#
package Bench::Chart;

use strict;
use warnings;

use File::Path qw(make_path);
use POSIX qw(strftime);

use Bench;

# a chart maker writing into $dir, or undef (logged) without gnuplot; every
# chart's subtitle says what ran, when, and the 1-minute load average at the
# start and the end of the run ($load0, $load1: loadavg() strings)
sub new
{
	my ($class, $dir, $load0, $load1) = @_;
	my ($gnuplot) = grep { -x } map { "$_/gnuplot" } split /:/, $ENV{PATH};
	if (!$gnuplot)
	{
		log_msg('charts skipped: gnuplot is not installed (Debian: apt-get install gnuplot-nox)');
		return;
	}
	make_path($dir);
	my @load = map { (split ' ', $_ // '?')[0] } $load0, $load1;
	return bless { gnuplot => $gnuplot, dir => $dir, load => \@load }, $class;
}

# the title line every chart carries: what, when, the machine's load
sub subtitle
{
	my ($self) = @_;
	return sprintf('streamguard %s, %s; load average (1 min) %s at the start, %s at the end',
		$ENV{BENCH_REV} || 'unknown', strftime('%Y-%m-%d %H:%M UTC', gmtime), @{ $self->{load} });
}

# a gnuplot double-quoted string
sub gp_str { my ($s) = @_; $s =~ s/\\/\\\\/g; $s =~ s/"/\\"/g; $s =~ s/\n/\\n/g; return qq("$s"); }

# a label for a tab-separated data file: gnuplot reads double quotes there
sub gp_label { my ($s) = @_; $s =~ tr/"\t/' /; return $s; }

# runs gnuplot on $script; 1 if $png was written
sub run_gnuplot
{
	my ($self, $script, $png) = @_;
	my $rc = system("'$self->{gnuplot}' '$script' >'$script.log' 2>&1");
	if ($rc != 0 || !-s $png)
	{
		log_msg("chart $png failed: " . slurp("$script.log"));
		return 0;
	}
	return 1;
}

# one bar chart, bench-$name.png: a panel per [group, [[label, median
# events/s, ratio to the baseline], ...]], under $title (by default, what
# the core benchmarks compare with)
sub bars
{
	my ($self, $name, $panels, $title) = @_;
	$title //= "$name: throughput vs raw PostgreSQL and PgQ";
	my $dir = $self->{dir};
	my $png = "$dir/bench-$name.png";
	my $n = 0;
	$n += @{ $_->[1] } for @$panels;
	my $height = 120 + 60 * @$panels + 34 * $n;
	my @gp = ("set terminal pngcairo noenhanced size 1000,$height font 'Sans,10'\n", "set output " . gp_str($png) . "\n",
		"set datafile separator tab\n", "set style fill solid 0.85 border -1\n", "unset key\n",
		"set xlabel 'thousand events/s (median over the repeats); x baseline: the ratio of the table'\n", "set xrange [0:*]\n",
		"set offsets 0, graph 0.3, 0.5, 0.5\n", "set grid xtics\n", "set lmargin 52\n",
		"set multiplot layout " . scalar(@$panels) . ",1 title " . gp_str("$title\n" . $self->subtitle) . "\n");
	my $i = 0;
	for my $p (@$panels)
	{
		my ($bench, $rows) = @$p;
		my $dat = "$dir/bench-$name-" . ++$i . '.dat';
		# top to bottom as in the table: gnuplot's y grows upwards
		spurt($dat, map { sprintf("%s\t%.1f\t%s\n", gp_label($_->[0]), $_->[1], defined $_->[2] ? sprintf('%.2f', $_->[2]) : '?') } reverse @$rows);
		push @gp, "set title " . gp_str($bench) . "\n",
		  "plot " . gp_str($dat) . " using (0):0:(0):(\$2/1000):(\$0-0.35):(\$0+0.35):ytic(1) with boxxyerror lc rgb '#4a7ebb', \\\n",
		  "     '' using (\$2/1000):0:(sprintf(' %s/s, %s x baseline', gprintf('%.1s%c', \$2), strcol(3))) with labels left\n";
	}
	push @gp, "unset multiplot\n";
	spurt("$dir/bench-$name.gp", @gp);
	return $self->run_gnuplot("$dir/bench-$name.gp", $png);
}

# p50 / p99 / max latency per contender, log scale: $rows = [[label, p50,
# p99, max], ...]
sub latency
{
	my ($self, $name, $title, $rows) = @_;
	my $dir = $self->{dir};
	my $png = "$dir/bench-$name.png";
	return 0 unless @$rows;
	spurt("$dir/bench-$name.dat", map { join("\t", gp_label($_->[0]), @$_[ 1 .. 3 ]) . "\n" } reverse @$rows);
	my $height = 200 + 70 * @$rows;
	spurt("$dir/bench-$name.gp",
		"set terminal pngcairo noenhanced size 1000,$height font 'Sans,10'\n", "set output " . gp_str($png) . "\n",
		"set datafile separator tab\n", "set style fill solid 0.85 border -1\n",
		"set title " . gp_str("$title\n" . $self->subtitle) . "\n",
		"set logscale x\n", "set xlabel 'milliseconds (log scale)'\n", "set grid xtics mxtics\n",
		"set key outside bottom center horizontal\n", "set lmargin 40\n", "set offsets 0, 0, 0.5, 0.5\n", "set xrange [0.1:*]\n",
		"plot " . gp_str("$dir/bench-$name.dat") . " using (0.1):0:(0.1):2:(\$0-0.3):(\$0-0.05):ytic(1) with boxxyerror lc rgb '#4a7ebb' title 'p50 (median over repeats)', \\\n",
		"     '' using (0.1):0:(0.1):3:(\$0+0.05):(\$0+0.3) with boxxyerror lc rgb '#d9822b' title 'p99 (median over repeats)', \\\n",
		"     '' using 4:0 with points pt 7 ps 1.3 lc rgb '#b03030' title 'max', \\\n",
		"     '' using 2:(\$0-0.175):(sprintf(' %.2f', \$2)) with labels left notitle, \\\n",
		"     '' using 3:(\$0+0.175):(sprintf(' %.2f', \$3)) with labels left notitle\n");
	return $self->run_gnuplot("$dir/bench-$name.gp", $png);
}

# a curve, bench-$name.png: a panel per measure, each plotted against the
# points @$x (log scale when none is 0); $series = [[label, [value per
# point]], ...], undef for a missing value
sub curve
{
	my ($self, $name, $title, $xlabel, $x, $series) = @_;
	my $dir = $self->{dir};
	my $png = "$dir/bench-$name.png";
	my @s = grep { grep { defined } @{ $_->[1] } } @$series;
	return 0 unless @s && @$x;
	spurt("$dir/bench-$name.dat", map { my $i = $_; join("\t", $x->[$i], map { $_->[1][$i] // 'NaN' } @s) . "\n" } 0 .. $#$x);
	my @gp = ("set terminal pngcairo noenhanced size 900," . (100 + 230 * @s) . " font 'Sans,10'\n",
		"set output " . gp_str($png) . "\n", "set datafile separator tab\n", "set datafile missing 'NaN'\n", "unset key\n",
		((grep { $_ <= 0 } @$x) ? () : "set logscale x\n"), "set xlabel " . gp_str($xlabel) . "\n", "set grid\n",
		"set yrange [0:*]\n", "set rmargin 10\n", "set offsets graph 0.03, graph 0.03, graph 0.1, 0\n",
		"set xtics (" . join(', ', map { "\"$_\" $_" } @$x) . ")\n",
		"set multiplot layout " . scalar(@s) . ",1 title " . gp_str("$title\n" . $self->subtitle) . "\n");
	for my $i (0 .. $#s)
	{
		push @gp, "set title " . gp_str($s[$i][0]) . "\n",
		  "plot " . gp_str("$dir/bench-$name.dat") . " using 1:" . ($i + 2) . " with linespoints pt 7 lw 2 lc rgb '#4a7ebb', \\\n",
		  "     '' using 1:" . ($i + 2) . ":(sprintf(' %.4g', \$" . ($i + 2) . ")) with labels left offset 0.5,0.5\n";
	}
	push @gp, "unset multiplot\n";
	spurt("$dir/bench-$name.gp", @gp);
	return $self->run_gnuplot("$dir/bench-$name.gp", $png);
}

1;
