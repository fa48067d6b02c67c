#!/usr/bin/env perl
# writable-check.pl: every SQL-callable C function of src/ (a
# PG_FUNCTION_INFO_V1) either calls SgCheckWritable() -- it writes, so it
# refuses a read-only transaction and a standby up front, naming itself --
# or is listed below as one that does not write on the caller's behalf.
# sql/21_read_only.sql calls each writer in a read-only transaction.  A new
# entry point has to be put in one class or the other.  Run from the
# repository root; exits 1 naming each function in neither.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use CSource qw(strip slurp);

# read only, or not called by users in their own transactions
my %READS = map { $_ => 1 } qw(
  sg_read sg_seq_at_time sg_pipeline_batches sg_remote_runtime sg_partition_stats
  sg_next_event_time sg_open_appends sg_can_watch sg_can_read sg_group_members sg_is_member
  sg_window_time sg_pipeline_runtime sg_pipeline_histogram sg_worker_slots
  sg_kafka_validator sg_remote_validator
  sg_inject_fault
  sg_run_backfill_chunk
  sg_capture_trigger sg_capture_sql_drop sg_capture_table_rewrite sg_capture_ddl_end
);
# sg_inject_fault: test hooks in shared memory, superuser only;
# sg_run_backfill_chunk: the backfill worker's; the capture functions are
# triggers and event triggers, run by the statements that write

my (%body, @bad);
my @all;
for my $file (sort glob('src/*.c src/*/*.c'))
{
	# a call in a comment does not count
	my $src = strip(slurp($file));
	push @all, map { [ $_, $file ] } ($src =~ /^PG_FUNCTION_INFO_V1\((\w+)\);/mg);
	while ($src =~ /^(\w+)\(PG_FUNCTION_ARGS\)\n\{\n(.*?)^\}/msg)
	{
		$body{$1} = $2;
	}
}
my $writers = 0;
for my $f (@all)
{
	my ($name, $file) = @$f;
	my $b = $body{$name};
	if (!defined $b) { push @bad, "$file: $name: its body was not found"; next; }
	my $checks = $b =~ /\bSgCheckWritable\s*\(/;
	$writers++ if $checks;
	push @bad, "$file: $name neither calls SgCheckWritable() nor is listed as a reader in scripts/writable-check.pl"
	  if !$checks && !$READS{$name};
	push @bad, "$file: $name calls SgCheckWritable() but is listed as a reader" if $checks && $READS{$name};
}
print "$_\n" for @bad;
printf "%d SQL-callable functions: %d writers (SgCheckWritable), %d listed readers; %d problem(s)\n",
  scalar @all, $writers, scalar(@all) - $writers, scalar @bad;
exit(@bad ? 1 : 0);
