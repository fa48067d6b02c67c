
# Security attack suite, part 8: work a user sizes must stay stoppable
# (docs/security.md, "Bounded work" and "Bounds").
#
# The attack (found in 0.2): create_window_pipeline(kind => 'hopping',
# size => '1 hour', slide => '1 microsecond') put each event into 3.6e9
# windows in a C loop that ran outside batch_timeout and never checked for
# interrupts: pause_pipeline, pg_cancel_backend and a 2 s batch_timeout
# were ignored, temp files grew by gigabytes a minute and pg_ctl stop -m
# fast could not stop the server.  Now the windows per event are bounded
# (streamguard.max_windows_per_event, 1000 by default, sql/17_bounds.sql
# tries the bound) and the loop checks for interrupts under the batch's
# timeout.  Here alice, an ordinary role, runs the worst window the bounds
# allow: a hopping window of 1000 windows per event over batches of the
# largest size (100,000 events), each event with a key of its own: 1e8
# (window, key) partial aggregates a batch, which outgrow work_mem and go
# to temp files (window_partial.c), which takes a minute or more and
# gigabytes of temp files to run to its end.  While it
# runs (its worker's temp files at 100 to 400 MB: early in the windows'
# work):
#  (pause)    pause_pipeline ends the worker within 20 s;
#  (cancel)   pg_cancel_backend on the worker fails the batch within 20 s
#             (last_error: canceling statement due to user request);
#  (timeout)  with batch_timeout => '3 s' the batch fails with the
#             statement timeout within 20 s, and after 3 such attempts the
#             pipeline is failed (like a window emission that cannot
#             succeed), nothing emitted;
#  (stop)     pg_ctl stop -m fast stops the server within 20 s.
#  (legacy)   a window defined before the bound (1 hour sliding by 1
#             microsecond, written into the catalog directly) is refused by
#             its worker: the pipeline fails, saying why.
# Without the checks each of these waits for the batch's end: with the
# checks reverted, pause took 61 s, the cancel 37 s, and the timeout never
# came (measured on a loaded 2-core machine).
# temp_file_limit (8 GB) only keeps a regression from filling the disk.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $t_start = time;
my $limit = 20;    # seconds each action may take (the bug: a minute or more)
my $node = sg_node('sec107', extra => "temp_file_limit = '8GB'\nlog_min_messages = warning\n");

sub val { return $node->safe_psql('postgres', $_[0]) }

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
CREATE ROLE alice LOGIN;
SELECT streamguard.create_stream('hot', 1);
SELECT streamguard.grant_stream('hot', 'alice');
CREATE TABLE public.hop_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
GRANT INSERT, SELECT ON public.hop_out TO alice;
SELECT count(*) FROM streamguard.append_batch('hot',
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 100000)),
	keys => ARRAY(SELECT 'k' || i FROM generate_series(1, 100000) i));
});

# the worst window the default bounds allow, at the largest batch size
expect_error($node, q{SELECT streamguard.create_window_pipeline('hop_over', 'hot', 'public.hop_out', '1000 s',
	kind => 'hopping', slide => '999 ms', batch_size => 100000)}, '22023', qr/more than the 1000 allowed/,
	'1002 windows per event refused (22023)', user => 'alice');
expect_ok($node, q{SELECT streamguard.create_window_pipeline('hop', 'hot', 'public.hop_out', '1000 s',
	kind => 'hopping', slide => '1 s', batch_size => 100000)},
	'alice creates a hopping window of 1000 windows per event, batches of 100000', user => 'alice')
  or BAIL_OUT('no window pipeline: nothing to test');

sub worker_pid
{
	return val(q{SELECT coalesce(worker_pid, 0) FROM streamguard.pipelines WHERE pipeline = 'hop'});
}

# wait until the worker is deep in a batch's windows; returns its pid or 0
sub deep_in_windows
{
	my ($what) = @_;
	my $ok = wait_for_value($node, q{SELECT coalesce(sum(t.size), 0) BETWEEN 100 * 1024 * 1024 AND 400 * 1024 * 1024
		FROM streamguard.pipelines p, pg_catalog.pg_ls_tmpdir() t
		WHERE p.pipeline = 'hop' AND t.name LIKE 'pgsql_tmp' || p.worker_pid || '.%'}, 't', 120);
	ok($ok, "($what) the worker is in the windows of a batch (100 to 400 MB of temp files, of gigabytes)")
	  or diag(pipelines_report($node));
	return $ok ? worker_pid() : 0;
}

# seconds until $sql returns 't' (polled), or undef after $limit * 2
sub seconds_until
{
	my ($sql) = @_;
	my $t0 = time;
	while (time - $t0 < 2 * $limit)
	{
		return time - $t0 if val($sql) eq 't';
		usleep(100_000);
	}
	return undef;
}

sub within
{
	my ($secs, $what) = @_;
	ok(defined $secs && $secs <= $limit,
		sprintf('%s within %d s (%s)', $what, $limit, defined $secs ? sprintf('%.1f s', $secs) : 'not at all'))
	  or diag(pipelines_report($node));
}

# ================================================================= (pause)

if (my $pid = deep_in_windows('pause'))
{
	my $t0 = time;
	expect_ok($node, q{SELECT streamguard.pause_pipeline('hop')}, '(pause) pause_pipeline returns', user => 'alice');
	my $secs = seconds_until(qq{SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = $pid)});
	within(defined $secs ? time - $t0 : undef, '(pause) the worker has stopped');
	is(val(q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'hop'}), 'paused', '(pause) the pipeline is paused');
	ok(wait_for_value($node, qq{SELECT count(*) FROM pg_catalog.pg_ls_tmpdir() WHERE name LIKE 'pgsql_tmp$pid.%'}, 0, 30),
		'(pause) and its temp files are gone');
}
expect_ok($node, q{SELECT streamguard.resume_pipeline('hop')}, 'resume_pipeline', user => 'alice');

# ================================================================ (cancel)

if (my $pid = deep_in_windows('cancel'))
{
	is(val(q{SELECT coalesce(last_error, '') ~ 'canceling statement' FROM streamguard.pipelines WHERE pipeline = 'hop'}),
		'f', '(cancel) no cancel recorded before pg_cancel_backend');
	val(qq{SELECT pg_catalog.pg_cancel_backend($pid)});
	within(seconds_until(q{SELECT coalesce(last_error, '') ~ 'canceling statement due to user request'
		FROM streamguard.pipelines WHERE pipeline = 'hop'}), '(cancel) pg_cancel_backend failed the batch');
}

# =============================================================== (timeout)

expect_ok($node, q{SELECT streamguard.alter_pipeline('hop', batch_timeout => '3 s')},
	'(timeout) alter_pipeline(batch_timeout => 3 s)', user => 'alice');
if (my $pid = deep_in_windows('timeout'))
{
	is(val(q{SELECT coalesce(last_error, '') ~ 'statement timeout' FROM streamguard.pipelines WHERE pipeline = 'hop'}),
		'f', '(timeout) no timeout recorded before');
	within(seconds_until(q{SELECT coalesce(last_error, '') ~ 'canceling statement due to statement timeout'
		FROM streamguard.pipelines WHERE pipeline = 'hop'}), '(timeout) the batch timeout ended the batch');
	is(val(q{SELECT count(*) FROM public.hop_out}), 0, '(timeout) nothing was emitted');
	# the windows' work failing max_attempts (3) times fails the pipeline
	ok(wait_for_value($node, q{SELECT state = 'failed' AND last_error ~ 'could not emit the windows after 3 attempts'
		FROM streamguard.pipelines WHERE pipeline = 'hop'}, 't', 90),
		'(timeout) after 3 timed-out attempts the pipeline is failed, saying so')
	  or diag(pipelines_report($node));
}
expect_ok($node, q{SELECT streamguard.alter_pipeline('hop', batch_timeout => '1 hour');
	SELECT streamguard.resume_pipeline('hop')},
	'alter_pipeline(batch_timeout => 1 hour), resume_pipeline', user => 'alice');

# ================================================================ (legacy)
# a window defined before the bound existed (0.2 let slide be 1 microsecond;
# here the definition is changed behind create_window_pipeline's back): its
# worker refuses to expand it and the pipeline fails, saying why

expect_ok($node, q{SELECT streamguard.create_window_pipeline('legacy', 'hot', 'public.hop_out', '1 hour',
	kind => 'hopping', slide => '1 hour', batch_size => 10, start_from => 'end');
	SELECT streamguard.pause_pipeline('legacy')}, '(legacy) a paused hopping window', user => 'alice');
val(q{UPDATE streamguard.window_def SET slide = '1 microsecond'
	WHERE pipeline_id = (SELECT id FROM streamguard.pipeline WHERE name = 'legacy')});
expect_ok($node, q{SELECT streamguard.resume_pipeline('legacy')}, '(legacy) resumed', user => 'alice');
ok(wait_for_value($node, q{SELECT state = 'failed' AND last_error ~ 'more than 100000 windows'
	FROM streamguard.pipelines WHERE pipeline = 'legacy'}, 't', 60),
	'(legacy) a 1 hour / 1 microsecond window defined before the bound fails at its start, saying why')
  or diag(pipelines_report($node));
expect_ok($node, q{SELECT streamguard.drop_pipeline('legacy')}, '(legacy) dropped', user => 'alice');

# ================================================================== (stop)

if (deep_in_windows('stop'))
{
	my $t0 = time;
	my $stopped = eval { local $ENV{PGCTLTIMEOUT} = 2 * $limit; $node->stop('fast', fail_ok => 1) };
	my $secs = time - $t0;
	ok($stopped && $secs <= $limit, sprintf('(stop) pg_ctl stop -m fast stopped the server within %d s (%.1f s)', $limit, $secs));
	if (!$stopped)
	{
		diag('the fast stop did not finish: stopping immediately');
		$node->stop('immediate', fail_ok => 1);
	}
}
else
{
	$node->stop('immediate', fail_ok => 1);
}

diag(sprintf('duration %.0f s', time - $t_start));
done_testing();
