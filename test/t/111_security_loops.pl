
# A static check that keeps unbounded, uninterruptible loops out of the
# code that runs batches (docs/security.md, "Bounded work").  Every loop of
# src/*.c over a tuplestore (a batch, a window's rows: their length is the
# user's to decide) and every loop of the batch path (window*.c, batch.c,
# batchexec.c, the sources and sinks -- source_*.c, sink_*.c --, append.c,
# consumer.c, pipeline_ops.c) over
# query results (SPI_processed, RemoteNTuples, nrows) or a window's slide
# must either call CHECK_FOR_INTERRUPTS() in its body, run a statement in
# its body (SPI_execute*, which checks for interrupts), or say on its first
# line why its length is bounded: /* bounded: ... */.  It needs no server.
# The check failed on the 0.2 code: the hopping window expansion, the
# window's merge and emission loops, and the batch's dedup, skip and
# isolation filters.

use strict;
use warnings;

use FindBin;
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use Test::More;

my $root = abs_path(dirname(dirname($FindBin::RealBin)));
my %batch_path = map { $_ => 1 }
  qw(window.c window_apply.c window_emit.c window_sql.c batch.c batchexec.c append.c consumer.c
  consumer_read.c pipeline_ops.c);
my @files = sort glob("$root/src/*.c $root/src/*/*.c");
ok(scalar(@files) > 20, 'the sources are there (' . scalar(@files) . ' files)');

my ($loops, @bad) = (0);
for my $f (@files)
{
	(my $name = $f) =~ s{.*/}{};
	open my $fh, '<', $f or die "$f: $!";
	my @l = <$fh>;
	close $fh;
	for my $i (0 .. $#l)
	{
		my $h = $l[$i];
		next unless $h =~ /^\s*(?:for|while)\s*\(/;
		my $over_store = $h =~ /tuplestore_gettupleslot/;
		my $over_rows = $h =~ /SPI_processed|RemoteNTuples|\bnrows\b|slide_us|StreamSegmentScanNext/;
		next unless $over_store || ($over_rows && ($batch_path{$name} || $name =~ /^(source|sink)_\w+\.c$/));
		$loops++;
		next if $h =~ m{/\*\s*bounded:};
		# the body: a braced block, or one statement
		my $body = '';
		my $j = $i + 1;
		if ($l[$j] =~ /^\s*\{\s*$/)
		{
			my $depth = 0;
			for (; $j <= $#l; $j++)
			{
				$body .= $l[$j];
				$depth += () = $l[$j] =~ /\{/g;
				$depth -= () = $l[$j] =~ /\}/g;
				last if $depth <= 0;
			}
		}
		else
		{
			$body = $l[$j];
		}
		next if $body =~ /CHECK_FOR_INTERRUPTS\(\)|SPI_execute|SPI_exec\(/;
		(my $line = $h) =~ s/^\s+|\s+$//g;
		push @bad, sprintf('%s:%d: %s', $name, $i + 1, $line);
	}
}
cmp_ok($loops, '>=', 20, "found the loops to check ($loops)");
is(scalar(@bad), 0, 'every loop a user sizes checks for interrupts or says why it is bounded')
  or diag(join("\n", 'loops without CHECK_FOR_INTERRUPTS() or a /* bounded: ... */ note:', @bad));

# Every background worker's main loop (the for (;;) of a function *Main)
# starts by checking that the postmaster lives (SgExitIfPostmasterDead): a
# worker that always has work never reaches the WaitLatch that would end
# it, and blocks the server's restart while it runs.  A backfill of a large
# table did, before this check.  The loops of the workers that work in a
# database (all but the launcher's) do it through SgWorkerLoopTop, which
# also reports their table statistics: without, autovacuum never saw what
# they wrote.
my ($mains, @deaf) = (0);
for my $f (@files)
{
	(my $name = $f) =~ s{.*/}{};
	open my $fh, '<', $f or die "$f: $!";
	my $text = do { local $/; <$fh> };
	close $fh;
	while ($text =~ /^(\w+Main)\s*\(\s*Datum\s+\w+\s*\)\s*\n\{(.*?)^\}/msg)
	{
		my ($fn, $body) = ($1, $2);
		next unless $body =~ /for \(;;\)\s*\{(.*)/s;
		my $loop = $1;
		$mains++;
		push @deaf, "$name: $fn" unless $loop =~ /SgWorkerLoopTop\(\)/
		  || ($fn eq 'LauncherMain' && $loop =~ /SgExitIfPostmasterDead\(\)/);
	}
}
cmp_ok($mains, '>=', 4, "found the workers' main loops ($mains)");
is(scalar(@deaf), 0, 'every worker main loop checks that the postmaster lives (and reports its statistics)')
  or diag(join("\n", 'main loops without SgWorkerLoopTop() (the launcher: SgExitIfPostmasterDead()):', @deaf));
done_testing();
