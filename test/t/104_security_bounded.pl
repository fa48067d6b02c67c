
# Security attack suite, part 5: bounded work and misuse of pipelines
# (docs/security.md, "Bounded work" and "Refused at creation").
#
# Threats and cases (alice is an ordinary role owning every pipeline here):
#  (timeout)  a batch that never ends holds a worker slot and the
#             pipeline's row lock forever: create_pipeline(...,
#             batch_timeout => '2 seconds') with a 60 s pg_sleep is
#             cancelled (last_error: statement timeout / 57014) within
#             about 15 s.
#  (control)  with the default batch timeout, a batch sleeping 60 s must
#             not make pause / reset / alter / drop wait for it: each
#             returns within 10 s (pause leaves the pipeline 'paused').
#  (input)    dedup_window => '-1 hour' is refused (22023); SQL that would
#             escape the owner's sandbox or that cannot run inside a batch
#             transaction (SET ROLE, SET SESSION AUTHORIZATION, COPY ... TO
#             PROGRAM, DO with COMMIT, ALTER SYSTEM, CREATE INDEX
#             CONCURRENTLY) is refused at creation (22023), creating nothing.
#  (self)     a pipeline that pauses itself must not restart in a tight loop
#             (restarts grow by at most 3 in 10 s; the error is recorded);
#             a pipeline that appends to its own source is refused at run
#             time (error naming the stream; the stream stays bounded)
#             unless created with allow_source_append => true.
#  (drop)     drop_stream(src, force => true) under a running pipeline: the
#             pipeline disappears and its worker does not keep logging
#             "lost ownership of its batch".
# Every wait has a deadline; a missing feature fails its case, it never
# hangs the file.

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
my $node = sg_node('sec104');
my $boot = sec_bootstrap_name($node);

sub val { return $node->safe_psql('postgres', $_[0]) }

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
CREATE ROLE alice LOGIN;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO alice;
CREATE TABLE public.t_out (seq bigint);
CREATE TABLE public.t_cic (n int);
CREATE TABLE public.v_out (seq bigint);
GRANT INSERT, SELECT ON public.t_out, public.v_out TO alice;
ALTER TABLE public.t_cic OWNER TO alice;
});

sub as_alice
{
	my ($sql, $label) = @_;
	return expect_ok($node, $sql, $label, user => 'alice');
}

as_alice(q{SELECT streamguard.create_stream('b1', 1); SELECT streamguard.create_stream('b2', 1);
SELECT streamguard.create_stream('b3', 1); SELECT streamguard.create_stream('loop', 1);
SELECT streamguard.create_stream('loop2', 1); SELECT streamguard.create_stream('victim', 1);},
	'alice creates her streams');

my $sleep_sql = q{INSERT INTO public.t_out SELECT seq FROM batch, LATERAL (SELECT pg_catalog.pg_sleep(60)) s};

# ============================================================= (timeout)

if (as_alice(qq{SELECT streamguard.create_pipeline('p_timeout', 'b1', \$\$$sleep_sql\$\$,
	batch_timeout => interval '2 seconds')}, '(timeout) create_pipeline with batch_timeout => 2 seconds'))
{
	val(q{SELECT streamguard.append('b1', '{}')});
	ok( wait_for_value($node, q{SELECT coalesce(last_error, '') ~ 'canceling statement due to statement timeout|57014'
			FROM streamguard.pipelines WHERE pipeline = 'p_timeout'}, 't', 15, user => 'alice'),
		'(timeout) within 15 s the owner sees the batch cancelled by its timeout')
	  or diag(pipelines_report($node));
	try_psql($node, q{SET statement_timeout = '11s'; SELECT streamguard.drop_pipeline('p_timeout')});
}

# ============================================================= (control)

# wait until the worker of $p is inside pg_sleep
sub sleeping
{
	my ($p) = @_;
	return wait_for_value($node, qq{SELECT count(*) FROM streamguard.pipelines p
		JOIN pg_stat_activity a ON a.pid = p.worker_pid
		WHERE p.pipeline = '$p' AND a.wait_event = 'PgSleep'}, 1, 20);
}

sub timed
{
	my ($what, $sql, $check_sql, $expect) = @_;
	my ($elapsed, $ok, $err) = timed_psql($node, "SET statement_timeout = '11s';\n$sql", user => 'alice');
	ok($ok && $elapsed <= 10, sprintf('(control) %s returns within 10 s while a batch sleeps (%.1f s)', $what, $elapsed))
	  or diag($err);
	if (defined $check_sql)
	{
		is(val($check_sql), $expect, "(control) ... and $what took effect");
	}
	return $ok;
}

if (as_alice(qq{SELECT streamguard.create_pipeline('p_sleep', 'b2', \$\$$sleep_sql\$\$)},
	'(control) a pipeline whose batch sleeps 60 s'))
{
	val(q{SELECT streamguard.append('b2', '{}')});
	ok(sleeping('p_sleep'), '(control) its batch is sleeping');
	my $paused = timed('pause_pipeline', q{SELECT streamguard.pause_pipeline('p_sleep')},
		q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'p_sleep'}, 'paused');
	if ($paused)
	{
		try_psql($node, q{SET statement_timeout = '11s'; SELECT streamguard.resume_pipeline('p_sleep')}, user => 'alice');
		ok(sleeping('p_sleep'), '(control) resumed, the batch sleeps again');
	}
	timed('reset_pipeline', q{SELECT streamguard.reset_pipeline('p_sleep')});
	ok(sleeping('p_sleep'), '(control) the batch sleeps again');
	timed('alter_pipeline', q{SELECT streamguard.alter_pipeline('p_sleep', batch_size => 5)},
		q{SELECT batch_size FROM streamguard.pipelines WHERE pipeline = 'p_sleep'}, 5);
	ok(sleeping('p_sleep'), '(control) the batch sleeps again');
	timed('drop_pipeline', q{SELECT streamguard.drop_pipeline('p_sleep')},
		q{SELECT count(*) FROM streamguard.pipelines WHERE pipeline = 'p_sleep'}, 0);
}

# =============================================================== (input)

my $count_before = val(q{SELECT count(*) FROM streamguard.pipelines});
expect_error($node, q{SELECT streamguard.create_pipeline('p_neg', 'b3', $$INSERT INTO public.t_out SELECT seq FROM batch$$,
	dedup => true, dedup_window => '-1 hour')}, '22023', qr/dedup_window/,
	'(input) dedup_window => -1 hour', user => 'alice');
my @forbidden = (
	[ 'SET ROLE', qq{SET ROLE $boot; INSERT INTO public.t_out SELECT seq FROM batch} ],
	[ 'SET SESSION AUTHORIZATION', qq{SET SESSION AUTHORIZATION $boot; INSERT INTO public.t_out SELECT seq FROM batch} ],
	[ 'COPY TO PROGRAM', q{COPY (SELECT 1) TO PROGRAM 'true'} ],
	[ 'DO with COMMIT', q{DO $d$BEGIN COMMIT; END$d$} ],
	[ 'ALTER SYSTEM', q{ALTER SYSTEM SET work_mem = '1MB'} ],
	[ 'CREATE INDEX CONCURRENTLY', q{CREATE INDEX CONCURRENTLY t_cic_n ON public.t_cic (n)} ],
);
my $i = 0;
for my $f (@forbidden)
{
	$i++;
	expect_error($node, qq{SELECT streamguard.create_pipeline('p_bad$i', 'b3', \$sg\$$f->[1]\$sg\$)}, '22023', undef,
		"(input) pipeline SQL with $f->[0] refused at creation", user => 'alice');
}
is(val(q{SELECT count(*) FROM streamguard.pipelines}), $count_before, '(input) none of them created a pipeline');
# whatever a lax build created must not run on
try_psql($node, qq{SELECT streamguard.drop_pipeline(pipeline) FROM streamguard.pipelines
	WHERE pipeline LIKE 'p\\_bad%' OR pipeline = 'p_neg'});

# ======================================================== (self) + (drop)

my $self_ok = as_alice(q{SELECT streamguard.create_pipeline('p_selfpause', 'b3',
	$$SELECT streamguard.pause_pipeline('p_selfpause') FROM batch$$)}, '(self) a pipeline that pauses itself');
my $loop_ok = as_alice(q{SELECT streamguard.create_pipeline('p_loop', 'loop',
	$$SELECT streamguard.append('loop', payload) FROM batch$$)}, '(self) a pipeline that appends to its own source');
my $loop2_ok = as_alice(q{SELECT streamguard.create_pipeline('p_loop2', 'loop2',
	$$SELECT streamguard.append('loop2', jsonb_build_object('n', (payload->>'n')::int + 1)) FROM batch
	  WHERE (payload->>'n')::int < 5$$, allow_source_append => true)},
	'(self) ... and one created with allow_source_append => true');
my $victim_ok = as_alice(q{SELECT streamguard.create_pipeline('p_victim', 'victim',
	$$INSERT INTO public.v_out SELECT seq FROM batch$$)}, '(drop) a pipeline on stream victim');
val(q{SELECT streamguard.append('b3', '{}'); SELECT streamguard.append('loop', '{"n": 1}');
SELECT streamguard.append('loop2', '{"n": 1}'); SELECT streamguard.append('victim', '{}');});

if ($self_ok)
{
	ok( wait_for_value($node, q{SELECT last_error IS NOT NULL FROM streamguard.pipelines WHERE pipeline = 'p_selfpause'},
			't', 15), '(self) the self-pausing pipeline records an error');
}
if ($loop_ok)
{
	ok( wait_for_value($node, q{SELECT coalesce(last_error, '') LIKE '%loop%' FROM streamguard.pipelines
		WHERE pipeline = 'p_loop'}, 't', 15), '(self) appending to its own source is refused, naming the stream');
}
if ($victim_ok)
{
	ok(wait_for_value($node, q{SELECT count(*) FROM public.v_out}, 1, 20), '(drop) p_victim processed its event');
}

# one observation window of 10 s: restarts and the looping stream; the
# stream drop at its start, the log over its first 5 s
my $restarts0 = val(q{SELECT coalesce(max(restarts), 0) FROM streamguard.pipelines WHERE pipeline = 'p_selfpause'});
my $off = log_offset($node);
my ($dok, $dout, $derr) = try_psql($node, q{SET statement_timeout = '11s';
SELECT streamguard.drop_stream('victim', force => true)}, user => 'alice');
ok($dok, '(drop) drop_stream(victim, force => true) under its running pipeline') or diag($derr);
my $t0 = time;
my $lost5;
while (time < $t0 + 10)
{
	$lost5 = count_log($node, qr/lost ownership of its batch/, $off) if !defined $lost5 && time >= $t0 + 5;
	usleep(100_000);
}
$lost5 //= count_log($node, qr/lost ownership of its batch/, $off);
if ($self_ok)
{
	my $restarts1 = val(q{SELECT coalesce(max(restarts), 0) FROM streamguard.pipelines WHERE pipeline = 'p_selfpause'});
	cmp_ok($restarts1 - $restarts0, '<=', 3,
		"(self) the self-pausing pipeline restarted " . ($restarts1 - $restarts0) . " times in 10 s (at most 3)");
}
if ($loop_ok)
{
	my $last = val(q{SELECT coalesce(last_seq, 0) FROM streamguard.streams WHERE stream = 'loop'});
	cmp_ok($last, '<=', 3, "(self) the stream a pipeline appends to its own source stays bounded (last_seq $last)");
}
if ($loop2_ok)
{
	ok(wait_for_value($node, q{SELECT last_seq FROM streamguard.streams WHERE stream = 'loop2'}, 5, 15),
		'(self) with allow_source_append the pipeline appends to its source (5 events)');
}
is(val(q{SELECT count(*) FROM streamguard.pipelines WHERE pipeline = 'p_victim'}), 0,
	'(drop) the pipeline of the dropped stream is gone from the views');
cmp_ok($lost5, '<=', 2, "(drop) 'lost ownership of its batch' logged $lost5 times in the 5 s after the drop");

state_diag($node);
diag(sprintf('duration %.0f s', time - $t_start));
$node->stop;
done_testing();
