
# Window pipelines under crashes (docs/windows.md, "Exactly once"): each
# closed window is emitted exactly once, with aggregates equal to a
# recomputation from the stream (the Kafka Streams EOS driver's check).
#
# Stream `wsrc` (3 partitions) gets rounds of events {"ts": T, "n": N} keyed
# k0..k6, with event times increasing (a second apart per event).  Three
# window pipelines read it:
#   w_evt  event time, tumbling 10 s, count and sum per key
#   w_hop  event time, hopping 20 s every 10 s, count, sum, min, max, avg
#   w_app  append time, tumbling 300 ms, count and sum per key
# and a second stream `wlate` gets the same events plus, at the start of each
# round, a few events 23-25 s older than the last round's newest, which
# correct windows closed already:
#   w_upd  event time, tumbling 10 s, late => 'update' (keep_closed 1 hour):
#          every window's highest revision equals the recomputation, and
#          its revisions are 0, 1, 2, ... each emitted once
# and a third stream `wses` (2 partitions) gets events keyed s0..s4 in groups
# of ten, 20 s of event time apart (each key's events 5 s apart within a
# group: one session per key and group), plus, at the start of each round,
# an event per key 12.5 s after a closed group's session began, which
# bridges it and the next group's (closed) session:
#   w_ses  event time, session gap 8 s, late => 'update' (keep_closed 1
#          hour): the merged session's row with the next revision, the next
#          group's row retracted; the latest rows equal the recomputation
#   w_scl  the same sessions, emit => 'on_update' into stream `wses_cl` (a
#          changelog): per window, revisions once each; the latest events
#          equal the recomputation
# and two more pipelines of wsrc:
#   w_str  event time, tumbling 10 s, appended to stream `wout` (windows of
#          windows): each window once, equal to the recomputation
#   w_aps  append time, session gap 200 ms: each session once, equal to the
#          sessions recomputed from appended_at
# Two rounds of faults, each fired in a batch with events: a kill -9 of a window pipeline's worker
# at mid_batch, before_commit (its window rows inserted, not committed) and
# after_commit (each kill restarts the whole server), injected errors at
# before_commit (enough for the batch to be isolated, event by event), and
# an immediate shutdown and restart.  At the end a far-future event in every
# partition closes the event-time windows (its own windows stay open), and
# the append-time windows close as time passes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('windows');
my @pipes = qw(w_evt w_hop w_app w_upd w_ses w_scl w_str w_aps);

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('wsrc', 3);
CREATE TABLE out_evt (window_start timestamptz, window_end timestamptz, key text, events numeric, total numeric);
CREATE TABLE out_hop (window_start timestamptz, window_end timestamptz, key text, events numeric,
	total numeric, lo numeric, hi numeric, mean numeric);
CREATE TABLE out_app (LIKE out_evt);
SELECT streamguard.create_stream('wlate', 2);
CREATE TABLE out_upd (window_start timestamptz, window_end timestamptz, key text, revision int,
	events numeric, total numeric);
SELECT streamguard.create_window_pipeline('w_upd', 'wlate', 'out_upd', '10 s',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
	event_time => $$payload->>'ts'$$, late => 'update', keep_closed => '1 hour', batch_size => 150);
SELECT streamguard.create_window_pipeline('w_evt', 'wsrc', 'out_evt', '10 s',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
	event_time => $$payload->>'ts'$$, batch_size => 150);
SELECT streamguard.create_window_pipeline('w_hop', 'wsrc', 'out_hop', '20 s', kind => 'hopping',
	slide => '10 s',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')", "lo": "min(payload->>''n'')",
	                "hi": "max(payload->>''n'')", "mean": "avg(payload->>''n'')"}',
	event_time => $$payload->>'ts'$$, batch_size => 150);
SELECT streamguard.create_window_pipeline('w_app', 'wsrc', 'out_app', '300 ms',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}', batch_size => 150);
SELECT streamguard.create_stream('wses', 2);
SELECT streamguard.create_stream('wses_cl', 1);
SELECT streamguard.create_stream('wout', 1);
CREATE TABLE out_ses (window_start timestamptz, window_end timestamptz, key text, revision int,
	retracted boolean, events numeric, total numeric);
SELECT streamguard.create_window_pipeline('w_ses', 'wses', 'out_ses', '8 s', kind => 'session',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
	event_time => $$payload->>'ts'$$, late => 'update', keep_closed => '1 hour', batch_size => 150);
SELECT streamguard.create_window_pipeline('w_scl', 'wses', NULL, '8 s', kind => 'session',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
	event_time => $$payload->>'ts'$$, late => 'update', keep_closed => '1 hour', emit => 'on_update',
	target_stream => 'wses_cl', batch_size => 150);
SELECT streamguard.create_window_pipeline('w_str', 'wsrc', NULL, '10 s',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
	event_time => $$payload->>'ts'$$, target_stream => 'wout', batch_size => 150);
CREATE TABLE out_aps (LIKE out_evt);
SELECT streamguard.create_window_pipeline('w_aps', 'wsrc', 'out_aps', '200 ms', kind => 'session',
	aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}', batch_size => 150);
});
ok(wait_pipelines_running($node, \@pipes, 60), 'the window pipelines run');

my $fx = fault_context($node, \@pipes);
my $next = 0;
my $per_round = 400;

# a round: events next+1 .. next+$per_round in a few transactions
sub produce
{
	if ($next > 0)
	{
		# late events for w_upd: 23-25 s before the last round's newest
		BAIL_OUT('could not append late events') unless defined q1($node, qq{
SELECT count(*) FROM streamguard.append_batch('wlate',
	(SELECT array_agg(jsonb_build_object('ts', timestamptz '2026-01-01 00:00:00+00' + ($next - g) * interval '1 s', 'n', 100000 + g) ORDER BY g)
	 FROM generate_series(23, 25) g),
	keys => ARRAY['late', 'k1', 'k2'],
	dedup_keys => (SELECT array_agg('late$next-' || g ORDER BY g) FROM generate_series(23, 25) g))}, 90);
		# for w_ses and w_scl: bridge group G's sessions with group G+1's
		my $grp = int($next / 10) - 5;
		BAIL_OUT('could not append bridging events') unless defined q1($node, qq{
SELECT count(*) FROM streamguard.append_batch('wses',
	(SELECT array_agg(jsonb_build_object('ts', timestamptz '2026-01-01 00:00:00+00' + (20 * $grp + k + 12.5) * interval '1 s',
	                                     'n', 200000 + k) ORDER BY k) FROM generate_series(0, 4) k),
	keys => (SELECT array_agg('s' || k ORDER BY k) FROM generate_series(0, 4) k),
	dedup_keys => (SELECT array_agg('bridge$grp-' || k ORDER BY k) FROM generate_series(0, 4) k))}, 90);
	}
	for my $chunk (1 .. 4)
	{
		my $from = $next + 1;
		my $to = $next + $per_round / 4;
		my $ok = defined q1($node, join(";\n", map { qq{
SELECT count(*) FROM streamguard.append_batch('$_',
	(SELECT array_agg(jsonb_build_object('ts', timestamptz '2026-01-01 00:00:00+00' + g * interval '1 s', 'n', g) ORDER BY g)
	 FROM generate_series($from, $to) g),
	keys => (SELECT array_agg('k' || (g % 7) ORDER BY g) FROM generate_series($from, $to) g),
	dedup_keys => (SELECT array_agg('e' || g ORDER BY g) FROM generate_series($from, $to) g))} } qw(wsrc wlate))
		  . qq{;
SELECT count(*) FROM streamguard.append_batch('wses',
	(SELECT array_agg(jsonb_build_object('ts', timestamptz '2026-01-01 00:00:00+00' + (g + 10 * (g / 10)) * interval '1 s',
	                                     'n', g) ORDER BY g) FROM generate_series($from, $to) g),
	keys => (SELECT array_agg('s' || (g % 5) ORDER BY g) FROM generate_series($from, $to) g),
	dedup_keys => (SELECT array_agg('e' || g ORDER BY g) FROM generate_series($from, $to) g))}, 90);
		# q1 retries across a restart; the dedup keys make a retry harmless
		BAIL_OUT("could not append events $from..$to") unless $ok;
		$next = $to;
	}
}

# arm a fault, produce a round (the fault fires in a batch that has
# events), wait until it fired, and for the recovery after a kill
sub fault_round
{
	my ($kind, $pipe, $point, $action, $times) = @_;
	$action //= 'kill';
	$times //= 1;
	my $off = log_offset($node);
	$fx->{armed}{$kind}++;
	return -1 unless defined q1($node, "SELECT streamguard.inject_fault('$pipe', '$point', '$action', $times)", 60);
	produce();
	my $re = $action eq 'kill'
	  ? qr/pipeline "$pipe": injected fault, killing the worker/
	  : qr/pipeline "$pipe": batch failed \(attempt \d+\): injected fault/;
	if (!defined wait_log($node, qr/(?:$re.*?){$times}/s, $off, 60))
	{
		diag("$kind: did not fire $times times");
		q1($node, "SELECT streamguard.inject_fault('$pipe', 'none')", 60);
		return 0;
	}
	return fault_fired($fx, $kind, $action eq 'kill' ? $off : undef);
}

my @plan = (
	[ 'kill at mid_batch',     sub { fault_round('mid_batch', 'w_evt', 'mid_batch') } ],
	[ 'kill at before_commit', sub { fault_round('before_commit', 'w_hop', 'before_commit') } ],
	[ 'kill at after_commit',  sub { fault_round('after_commit', 'w_app', 'after_commit') } ],
	[ 'kill at before_commit (append time)', sub { fault_round('before_commit_app', 'w_app', 'before_commit') } ],
	[ 'kill at before_commit (late update)', sub { fault_round('before_commit_upd', 'w_upd', 'before_commit') } ],
	[ 'kill at before_commit (sessions, late update)', sub { fault_round('before_commit_ses', 'w_ses', 'before_commit') } ],
	[ 'kill at mid_batch (session changelog)', sub { fault_round('mid_batch_scl', 'w_scl', 'mid_batch') } ],
	[ 'kill at before_commit (session changelog)', sub { fault_round('before_commit_scl', 'w_scl', 'before_commit') } ],
	[ 'kill at before_commit (target stream)', sub { fault_round('before_commit_str', 'w_str', 'before_commit') } ],
	[ 'kill at after_commit (target stream)', sub { fault_round('after_commit_str', 'w_str', 'after_commit') } ],
	[ 'kill at before_commit (append-time sessions)', sub { fault_round('before_commit_aps', 'w_aps', 'before_commit') } ],
	[ 'errors at before_commit (isolation)', sub { fault_round('errors', 'w_evt', 'before_commit', 'error', 4) } ],
	[ 'immediate restart', sub {
		produce();
		$node->stop('immediate');
		$node->start;
		$fx->{armed}{restart}++;
		fault_wait_pipelines($fx, 'restart') ? ++$fx->{fired}{restart} : -1;
	} ],
);
for my $round (1 .. 2)
{
	for my $step (@plan)
	{
		my $r = $step->[1]->();
		ok($r > 0, "round $round, $step->[0]: fired, and the server and the pipelines came back");
	}
}
produce();

# close the event-time windows: a far-future event in every partition
$node->safe_psql('postgres', q{
SELECT count(*) FROM streamguard.append_batch('wsrc',
	ARRAY['{"ts": "2026-02-01 00:00:00+00", "n": 0}', '{"ts": "2026-02-01 00:00:00+00", "n": 0}',
	      '{"ts": "2026-02-01 00:00:00+00", "n": 0}']::jsonb[],
	keys => ARRAY['flush', 'flush', 'flush'], partitions => ARRAY[0, 1, 2]);
SELECT count(*) FROM streamguard.append_batch('wlate',
	ARRAY['{"ts": "2026-02-01 00:00:00+00", "n": 0}', '{"ts": "2026-02-01 00:00:00+00", "n": 0}']::jsonb[],
	keys => ARRAY['flush', 'flush'], partitions => ARRAY[0, 1]);
SELECT count(*) FROM streamguard.append_batch('wses',
	ARRAY['{"ts": "2026-02-01 00:00:00+00", "n": 0}', '{"ts": "2026-02-01 00:00:00+00", "n": 0}']::jsonb[],
	keys => ARRAY['flush', 'flush'], partitions => ARRAY[0, 1])});
note("events produced: $next");

ok(wait_for_value($node, "SELECT sum(events) FROM out_evt", $next, 120), 'w_evt: every event in a closed window');
ok(wait_for_value($node, "SELECT sum(events) FROM out_hop", 2 * $next, 120),
	'w_hop: every event in its two closed windows');
ok(wait_for_value($node, "SELECT sum(events) FROM out_app", $next + 3, 120), 'w_app: every event in a closed window');

# the recomputation from the stream
my $events = q{
(SELECT * FROM streamguard.read('wsrc', 0, 0, 100000)
 UNION ALL SELECT * FROM streamguard.read('wsrc', 1, 0, 100000)
 UNION ALL SELECT * FROM streamguard.read('wsrc', 2, 0, 100000))};
is($node->safe_psql('postgres', "SELECT count(*) FROM $events e WHERE key <> 'flush'"), $next,
	'the stream holds every event produced');

for my $t (qw(out_evt out_hop out_app))
{
	is($node->safe_psql('postgres', "SELECT count(*) FROM (SELECT 1 FROM $t GROUP BY window_start, key HAVING count(*) > 1) d"),
		'0', "$t: each window emitted once");
}
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (
	SELECT date_bin('10 s', (payload->>'ts')::timestamptz, 'epoch') AS ws, key, count(*) AS events,
	       sum((payload->>'n')::numeric) AS total
	FROM $events e WHERE key <> 'flush' GROUP BY 1, 2) r
FULL JOIN out_evt o ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total
   OR o.window_end IS DISTINCT FROM r.ws + interval '10 s'}), '0', 'w_evt: the windows equal the recomputation');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (
	SELECT h.ws, key, count(*) AS events, sum((payload->>'n')::numeric) AS total,
	       min((payload->>'n')::numeric) AS lo, max((payload->>'n')::numeric) AS hi,
	       avg((payload->>'n')::numeric) AS mean
	FROM $events e,
	     LATERAL (VALUES (date_bin('10 s', (payload->>'ts')::timestamptz, 'epoch')),
	                     (date_bin('10 s', (payload->>'ts')::timestamptz, 'epoch') - interval '10 s')) h(ws)
	WHERE key <> 'flush' GROUP BY 1, 2) r
FULL JOIN out_hop o ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total OR o.lo IS DISTINCT FROM r.lo
   OR o.hi IS DISTINCT FROM r.hi OR o.mean IS DISTINCT FROM r.mean
   OR o.window_end IS DISTINCT FROM r.ws + interval '20 s'}), '0', 'w_hop: the windows equal the recomputation');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (
	SELECT date_bin('300 ms', appended_at, 'epoch') AS ws, key, count(*) AS events,
	       sum((payload->>'n')::numeric) AS total
	FROM $events e GROUP BY 1, 2) r
FULL JOIN out_app o ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total
   OR o.window_end IS DISTINCT FROM r.ws + interval '300 ms'}), '0', 'w_app: the windows equal the recomputation');
is($node->safe_psql('postgres', "SELECT sum(late_events) FROM streamguard.windows WHERE pipeline IN ('w_evt', 'w_hop', 'w_app', 'w_str', 'w_aps')"), '0',
	'no event was late in wsrc');

# w_upd: the last revision of every window equals the recomputation from wlate
my $late_events = q{
(SELECT * FROM streamguard.read('wlate', 0, 0, 100000)
 UNION ALL SELECT * FROM streamguard.read('wlate', 1, 0, 100000))};
my $expected_upd = $node->safe_psql('postgres', "SELECT count(*) FROM $late_events e WHERE key <> 'flush'");
ok(wait_for_value($node, qq{
SELECT sum(events) FROM (SELECT DISTINCT ON (window_start, key) events FROM out_upd
                         ORDER BY window_start, key, revision DESC) l}, $expected_upd, 120),
	'w_upd: every event in the last revision of its window');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (
	SELECT date_bin('10 s', (payload->>'ts')::timestamptz, 'epoch') AS ws, key, count(*) AS events,
	       sum((payload->>'n')::numeric) AS total
	FROM $late_events e WHERE key <> 'flush' GROUP BY 1, 2) r
FULL JOIN (SELECT DISTINCT ON (window_start, key) * FROM out_upd ORDER BY window_start, key, revision DESC) o
  ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total}), '0',
	'w_upd: the last revisions equal the recomputation');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT window_start, key FROM out_upd GROUP BY 1, 2
                      HAVING count(*) <> max(revision) + 1 OR count(DISTINCT revision) <> count(*)) d}), '0',
	'w_upd: each revision of a window emitted once, none missing');
cmp_ok($node->safe_psql('postgres', "SELECT corrections FROM streamguard.windows WHERE pipeline = 'w_upd'"), '>', 0,
	'w_upd: late events corrected closed windows');

# w_str: the windows appended to wout equal w_evt's recomputation
ok(wait_for_value($node, "SELECT sum((payload->>'events')::numeric) FROM streamguard.read('wout', 0, 0, 100000)",
	$next, 120), 'w_str: every event in a window appended to the target stream');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (
	SELECT date_bin('10 s', (payload->>'ts')::timestamptz, 'epoch') AS ws, key, count(*) AS events,
	       sum((payload->>'n')::numeric) AS total
	FROM $events e WHERE key <> 'flush' GROUP BY 1, 2) r
FULL JOIN (SELECT key, (payload->>'window_start')::timestamptz AS ws, (payload->>'window_end')::timestamptz AS we,
                  (payload->>'events')::numeric AS events, (payload->>'total')::numeric AS total
           FROM streamguard.read('wout', 0, 0, 100000)) o ON o.ws = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total
   OR o.we IS DISTINCT FROM r.ws + interval '10 s'}), '0', 'w_str: each window appended once, equal to the recomputation');

# w_aps: sessions recomputed from appended_at (gaps and islands, gap 200 ms)
ok(wait_for_value($node, "SELECT sum(events) FROM out_aps", $next + 3, 120),
	'w_aps: every event in a closed append-time session');
is($node->safe_psql('postgres', "SELECT count(*) FROM (SELECT 1 FROM out_aps GROUP BY window_start, key HAVING count(*) > 1) d"),
	'0', 'out_aps: each session emitted once');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (
	SELECT key, min(appended_at) AS ws, max(appended_at) + interval '200 ms' AS we, count(*) AS events,
	       sum((payload->>'n')::numeric) AS total
	FROM (SELECT e1.*, sum(brk) OVER (PARTITION BY key ORDER BY appended_at, partition, seq) AS isl
	      FROM (SELECT e.*, CASE WHEN appended_at < lag(appended_at) OVER (PARTITION BY key ORDER BY appended_at, partition, seq)
	                             + interval '200 ms' THEN 0 ELSE 1 END AS brk FROM $events e) e1) e2
	GROUP BY key, isl) r
FULL JOIN out_aps o ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total
   OR o.window_end IS DISTINCT FROM r.we}), '0', 'w_aps: the sessions equal the recomputation');

# w_ses and w_scl: sessions recomputed from wses (gaps and islands, gap 8 s)
my $ses_events = q{
(SELECT * FROM streamguard.read('wses', 0, 0, 100000)
 UNION ALL SELECT * FROM streamguard.read('wses', 1, 0, 100000))};
my $ses_recomputed = qq{
(SELECT key, min(t) AS ws, max(t) + interval '8 s' AS we, count(*) AS events, sum(n) AS total
 FROM (SELECT key, t, n, sum(brk) OVER (PARTITION BY key ORDER BY t, seq) AS isl
       FROM (SELECT key, t, n, seq,
                    CASE WHEN t < lag(t) OVER (PARTITION BY key ORDER BY t, seq) + interval '8 s' THEN 0 ELSE 1 END AS brk
             FROM (SELECT key, seq, (payload->>'ts')::timestamptz AS t, (payload->>'n')::numeric AS n
                   FROM $ses_events e WHERE key <> 'flush') e1) e2) e3
 GROUP BY key, isl)};
my $ses_total = $node->safe_psql('postgres', "SELECT count(*) FROM $ses_events e WHERE key <> 'flush'");
ok(wait_for_value($node, qq{
SELECT sum(events) FROM (SELECT DISTINCT ON (window_start, key) * FROM out_ses
                         ORDER BY window_start, key, revision DESC) l WHERE NOT retracted}, $ses_total, 120),
	'w_ses: every event in the latest row of its session');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM $ses_recomputed r
FULL JOIN (SELECT * FROM (SELECT DISTINCT ON (window_start, key) * FROM out_ses
                          ORDER BY window_start, key, revision DESC) l WHERE NOT retracted) o
  ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total
   OR o.window_end IS DISTINCT FROM r.we}), '0', 'w_ses: the latest rows equal the recomputed sessions');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT window_start, key FROM out_ses GROUP BY 1, 2
                      HAVING count(DISTINCT revision) <> count(*) OR count(*) FILTER (WHERE retracted) > 1) d}), '0',
	'w_ses: each revision of a session emitted once, each retraction once');
cmp_ok($node->safe_psql('postgres', "SELECT superseded FROM streamguard.windows WHERE pipeline = 'w_ses'"), '>', 0,
	'w_ses: late events merged emitted sessions');
my $changelog = q{
(SELECT key, (payload->>'window_start')::timestamptz AS window_start, (payload->>'window_end')::timestamptz AS window_end,
        (payload->>'revision')::int AS revision, (payload->>'retracted')::boolean AS retracted,
        (payload->>'events')::numeric AS events, (payload->>'total')::numeric AS total
 FROM streamguard.read('wses_cl', 0, 0, 100000) WHERE key <> 'flush')};
ok(wait_for_value($node, qq{
SELECT sum(events) FROM (SELECT DISTINCT ON (window_start, key) * FROM $changelog c
                         ORDER BY window_start, key, revision DESC) l WHERE NOT retracted}, $ses_total, 120),
	'w_scl: every event in the latest changelog event of its session');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM $ses_recomputed r
FULL JOIN (SELECT * FROM (SELECT DISTINCT ON (window_start, key) * FROM $changelog c
                          ORDER BY window_start, key, revision DESC) l WHERE NOT retracted) o
  ON o.window_start = r.ws AND o.key = r.key
WHERE o.events IS DISTINCT FROM r.events OR o.total IS DISTINCT FROM r.total
   OR o.window_end IS DISTINCT FROM r.we}), '0', 'w_scl: the latest changelog events equal the recomputed sessions');
is($node->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT window_start, key FROM $changelog c GROUP BY 1, 2
                      HAVING count(DISTINCT revision) <> count(*)) d}), '0',
	'w_scl: each revision of a session in the changelog once');
fault_summary($fx);

$node->stop;
done_testing();
