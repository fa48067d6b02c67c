
# Change capture under failure (docs/capture.md, "Guarantees").
#
# Table acct holds 3,000 rows when it is captured, with a backfill, into
# stream cdc (4 partitions); a pipeline applies the stream to a mirror table.
# Writers run a mix of transactions all along: single-row and multi-row
# updates, inserts, deletes, key changes, updates that change nothing, work
# undone by a savepoint, and whole transactions rolled back.  Every change
# bumps the row's version column ver, so (key, ver) names a row version.
# While the backfill runs, the test
#   round 1: kills -9 the backfill worker (the postmaster restarts everything),
#   round 2: kills -9 the postmaster and starts the server again,
#   round 3: kills -9 a writer's backend in the middle of its transactions,
#   round 4: stops the server in immediate mode once the backfill is done,
#   round 5: lets the writers finish.
# Then, with everything committed and consumed:
#   - replaying the stream per key (last event wins, deletes remove) gives
#     the table exactly;
#   - no row version (key, ver) was delivered twice, no dedup key twice, and
#     each key's events are in one partition;
#   - no event comes from a transaction that did not commit (rolled back,
#     undone by a savepoint, or killed);
#   - the backfill resumed where it stopped and covered every row once;
#   - the pipeline's mirror equals the table.
# Every wait is bounded; the server listens on a unix socket only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $ROWS = 3000;
my $node = sg_node('capture', extra => qq{
streamguard.backfill_chunk_rows = 25
streamguard.backfill_naptime = '200ms'
deadlock_timeout = '200ms'
});

$node->safe_psql('postgres', qq{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('cdc', 4);
CREATE TABLE acct (id int PRIMARY KEY, ver int NOT NULL, bal numeric NOT NULL, note text);
INSERT INTO acct SELECT g, 0, g, 'old' FROM generate_series(1, $ROWS) g;
ANALYZE acct;
CREATE SEQUENCE acct_new_id START 1000000;
CREATE TABLE mirror (id int PRIMARY KEY, ver int NOT NULL, bal numeric NOT NULL, note text);

-- one writer: n transactions of random work; 15% end in ROLLBACK
CREATE PROCEDURE writer(seed float8, n int) LANGUAGE plpgsql AS \$\$
DECLARE
	op int;
	k int;
BEGIN
	PERFORM setseed(seed);
	FOR i IN 1 .. n LOOP
		op := floor(random() * 20);
		k := 1 + floor(random() * $ROWS)::int;
		BEGIN
			IF op < 7 THEN
				UPDATE acct SET ver = ver + 1, bal = round((random() * 1000)::numeric, 2) WHERE id = k;
			ELSIF op < 9 THEN
				UPDATE acct SET ver = ver + 1, bal = bal + 1 WHERE id BETWEEN k AND k + 7;
			ELSIF op < 11 THEN
				INSERT INTO acct VALUES (nextval('acct_new_id'), 0, k, 'new');
			ELSIF op < 12 THEN
				DELETE FROM acct WHERE id = k;
			ELSIF op < 13 THEN
				UPDATE acct SET id = nextval('acct_new_id'), ver = ver + 1 WHERE id = k;
			ELSIF op < 15 THEN
				UPDATE acct SET note = note WHERE id = k;
			ELSIF op < 17 THEN
				UPDATE acct SET ver = ver + 1 WHERE id = k;
				UPDATE acct SET ver = ver + 1, note = 'twice' WHERE id = k;
			ELSE
				UPDATE acct SET ver = ver + 1 WHERE id = k;
				BEGIN
					UPDATE acct SET ver = ver + 1, note = 'undone' WHERE id = k + 1;
					RAISE EXCEPTION 'undo';
				EXCEPTION WHEN raise_exception THEN NULL;
				END;
			END IF;
			IF random() < 0.15 THEN
				UPDATE acct SET ver = ver + 1, note = 'rolled back' WHERE id = k;
				INSERT INTO acct VALUES (nextval('acct_new_id'), 0, 0, 'rolled back');
				RAISE EXCEPTION 'roll back';
			END IF;
		EXCEPTION WHEN raise_exception OR deadlock_detected OR lock_not_available THEN NULL;
		END;
		COMMIT;
		PERFORM pg_sleep(0.001);
	END LOOP;
END \$\$;

SELECT streamguard.create_pipeline('mirror', 'cdc', \$\$
	WITH last AS (
		SELECT DISTINCT ON (key) key, payload->>'op' AS op, payload->'row' AS r
		FROM batch ORDER BY key, seq DESC),
	gone AS (
		DELETE FROM mirror m USING last
		WHERE last.op = 'delete' AND m.id = last.key::int)
	INSERT INTO mirror
	SELECT (r->>'id')::int, (r->>'ver')::int, (r->>'bal')::numeric, r->>'note'
	FROM last WHERE op <> 'delete'
	ON CONFLICT (id) DO UPDATE SET ver = excluded.ver, bal = excluded.bal, note = excluded.note
\$\$, batch_size => 500);
SELECT streamguard.capture_table('acct', 'cdc');
});

# ------------------------------------------------------------ helpers

my $seed = 0;

# $n writers, each running `CALL writer(seed, $per)`; they may be cut off by a
# crash, which is part of the test
sub start_writers
{
	my ($n, $per) = @_;
	my @w;
	for (1 .. $n)
	{
		my ($out, $err) = ('', '');
		$seed++;
		my $h = IPC::Run::start(
			[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
				sprintf("CALL writer(%.4f, %d)", $seed / 1000, $per) ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(300));
		push @w, { h => $h, out => \$out, err => \$err };
	}
	return \@w;
}

# wait for the writers to end (successfully or cut off); returns how many succeeded
sub finish_writers
{
	my ($w) = @_;
	my $ok = 0;
	for my $x (@$w)
	{
		my $r = eval { $x->{h}->finish; 1 };
		$ok++ if $r && $x->{h}->result == 0;
		$x->{h}->kill_kill if !$r;
	}
	return $ok;
}

# (state, rows covered, position) of the backfill: the position is the last
# key it covered (ids 1 to $ROWS were there at the start)
sub progress
{
	my $r = q1($node, q{SELECT backfill_state || ' ' || (backfill_rows + backfill_skipped)
		|| ' ' || coalesce(backfill_position[1], '0') FROM streamguard.captures WHERE tab = 'acct'::regclass}, 60);
	return split / /, ($r // 'unknown 0 0');
}

# wait (bounded) until the backfill is past $pct percent of the keys
sub wait_backfill_past
{
	my ($pct) = @_;
	my $deadline = time + 90;
	while (time < $deadline)
	{
		my ($state, $done, $pos) = progress();
		return ($state, $done, $pos) if $state eq 'done' || $pos > $ROWS * $pct / 100;
		usleep(50_000);
	}
	return progress();
}

sub backfill_pid
{
	return q1($node, q{SELECT coalesce(max(pid), 0) FROM pg_stat_activity
		WHERE backend_type = 'streamguard backfill'}, 30) // 0;
}

# wait (bounded) for a process to be gone
sub wait_gone
{
	my ($pid) = @_;
	my $deadline = time + 60;
	usleep(50_000) while kill(0, $pid) && time < $deadline;
	return !kill(0, $pid);
}

# Rounds 1, 3 and 4 end in a crash: their writers run until it cuts them off.
my $LONG = 100000;

# ------------------------------------------------------------ round 1
ok(wait_pipelines_running($node, ['mirror'], 60), 'the mirror pipeline runs');
my $w = start_writers(3, $LONG);
my ($state, $done, $pct) = wait_backfill_past(10);
my $pid = 0;
my $deadline = time + 30;
while (!$pid && time < $deadline)
{
	$pid = backfill_pid();
	usleep(20_000) unless $pid;
}
ok($pid > 0 && $state eq 'running', "round 1: the backfill worker runs ($state, at key $pct)");
my $off = log_offset($node);
kill 'KILL', $pid if $pid;
ok(defined wait_crash_recovery($node, $off), 'round 1: kill -9 of the backfill worker, crash recovery');
finish_writers($w);
my ($state1, $done1) = progress();
ok($state1 eq 'running' || $state1 eq 'done', "round 1: the backfill goes on after the crash ($state1, $done1 rows)");

# ------------------------------------------------------------ round 2
# (backends orphaned by the postmaster's death finish their CALL before they
# notice: these writers are short)
$w = start_writers(3, 500);
($state, $done, $pct) = wait_backfill_past(40);
ok($state eq 'running', "round 2: the backfill is under way (at key $pct) when the postmaster is killed");
my ($pm) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
my @children = grep { /^\d+$/ } split /\n/, `pgrep -P $pm 2>/dev/null`;
$node->kill9;
my $gone = 1;
$gone &&= wait_gone($_) for $pm, @children;
ok($gone, 'round 2: every process of the killed server has exited');
finish_writers($w);
$node->start;
my ($state2, $done2) = progress();
ok($done2 >= $done1, "round 2: after a restart the backfill resumes from its progress ($done2 >= $done1 rows)");

# ------------------------------------------------------------ round 3
$w = start_writers(3, $LONG);
($state, $done, $pct) = wait_backfill_past(70);
my $writer_pid = q1($node, q{SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query LIKE 'CALL writer%'}, 30);
ok($writer_pid > 0 && $state eq 'running', "round 3: a writer runs while the backfill is at key $pct ($state)");
$off = log_offset($node);
kill 'KILL', $writer_pid if $writer_pid;
ok(defined wait_crash_recovery($node, $off), 'round 3: kill -9 of a writer mid-transaction, crash recovery');
finish_writers($w);

# ------------------------------------------------------------ round 4
ok(wait_for_value($node, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'acct'::regclass},
	'done', 120), 'round 4: the backfill completes');
$w = start_writers(3, $LONG);
usleep(500_000);
$node->stop('immediate');
finish_writers($w);
$node->start;
pass('round 4: immediate stop with writers running, after the backfill');

# ------------------------------------------------------------ round 5
$w = start_writers(3, 200);
my $finished = finish_writers($w);
is($finished, 3, 'round 5: the writers finish');

# ------------------------------------------------------------ verification
ok( wait_for_value($node, q{
	SELECT count(*) FROM ((SELECT * FROM acct EXCEPT SELECT * FROM mirror)
		UNION ALL (SELECT * FROM mirror EXCEPT SELECT * FROM acct)) d}, '0', 180),
	'the pipeline\'s mirror equals the table');

# every event, read page by page
$node->safe_psql('postgres', q{
CREATE TABLE ev AS SELECT * FROM streamguard.read('cdc', 0, 0, 1) WITH NO DATA;
DO $$
DECLARE
	after bigint;
	n int;
BEGIN
	FOR p IN 0 .. 3 LOOP
		after := 0;
		LOOP
			INSERT INTO ev SELECT * FROM streamguard.read('cdc', p, after, 100000);
			GET DIAGNOSTICS n = ROW_COUNT;
			EXIT WHEN n = 0;
			SELECT max(seq) INTO after FROM ev WHERE partition = p;
		END LOOP;
	END LOOP;
END $$;
});
my $events = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
cmp_ok($events, '>', $ROWS, "the stream holds $events events");

is( $node->safe_psql('postgres', q{
	WITH last AS (SELECT DISTINCT ON (key) key, payload FROM ev ORDER BY key, seq DESC),
	replay AS (SELECT (payload->'row'->>'id')::int AS id, (payload->'row'->>'ver')::int AS ver,
					  (payload->'row'->>'bal')::numeric AS bal, payload->'row'->>'note' AS note
			   FROM last WHERE payload->>'op' <> 'delete')
	SELECT count(*) FROM ((SELECT * FROM acct EXCEPT SELECT * FROM replay)
		UNION ALL (SELECT * FROM replay EXCEPT SELECT * FROM acct)) d}),
	'0', 'replaying the stream per key gives the table exactly');

is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT key, payload->'row'->>'ver' FROM ev
		WHERE payload->>'op' <> 'delete' GROUP BY 1, 2 HAVING count(*) > 1) d}),
	'0', 'no row version (key, ver) was delivered twice');
is($node->safe_psql('postgres', q{SELECT count(*) - count(DISTINCT dedup_key) FROM ev}),
	'0', 'no dedup key twice');
is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT key FROM ev GROUP BY key
	HAVING count(DISTINCT partition) > 1) d}), '0', 'each key\'s events are in one partition');

is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ev WHERE payload->'row'->>'note' IN ('rolled back', 'undone')}),
	'0', 'no event of work rolled back or undone by a savepoint');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT DISTINCT (payload->>'xid')::xid8 AS x FROM ev WHERE payload ? 'xid') t
	WHERE pg_xact_status(x) IS DISTINCT FROM 'committed'}),
	'0', 'every live event comes from a committed transaction (none from a killed one)');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM ev WHERE payload->'row'->>'note' = 'twice'}),
	'>', 0, 'rows changed twice in a transaction were sent');

my ($bf_rows, $bf_skipped) = split /\|/, $node->safe_psql('postgres', q{
	SELECT backfill_rows, backfill_skipped FROM streamguard.captures WHERE tab = 'acct'::regclass});
is($node->safe_psql('postgres', q{SELECT count(*) FROM ev WHERE payload->>'op' = 'backfill'}),
	$bf_rows, "the backfill's events are those it counted ($bf_rows, and $bf_skipped rows sent by writers)");
cmp_ok($bf_rows + $bf_skipped, '>=', 1, 'the backfill covered rows');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM ev e WHERE payload->>'op' = 'backfill' AND payload->'row'->>'ver' <> '0'}),
	'0', 'the backfill sent only versions no writer had sent');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamguard.capture_claim'), '0',
	'no claims are left once the backfill is done');

# rows nobody touched reached the stream once, through the backfill
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM acct a WHERE a.ver = 0 AND a.note = 'old'
	AND (SELECT count(*) FROM ev WHERE ev.key = a.id::text) <> 1}),
	'0', 'every untouched row was sent exactly once');

$node->stop;
done_testing();
