#
# test/bench/lib/Bench/Group.pm -- benchmark 10, consumer groups: 1, 2 and 4
# clients, each a member of one consumer group (poll(..., member => m), 1,000
# events per poll; each poll records the seq range it got per partition in a
# log table, in the poll's transaction), drain BENCH_GROUP_EVENTS events of a
# 4-partition stream, in an order rotating from repeat to repeat; for
# reference, 2 clients polling the same consumer without member names
# (partitions shared by SKIP LOCKED, as in 0.1).  events/s = events / wall
# time from the moment every client is connected (they wait for a go row) to
# the end of the last.  The logged ranges must tile every partition exactly:
# no event lost, none twice.
#
package Bench::Group;

use strict;
use warnings;

use parent 'Bench::Benchmark';

use Time::HiRes qw(time);

use Bench;
use Bench::Pg;
use Bench::SG;

my %S = (1 => 'group of 1 poll client', 2 => 'group of 2 poll clients', 4 => 'group of 4 poll clients',
	p2 => '2 poll clients without member (0.1 sharing)');
my $MEMBER = q{
CREATE OR REPLACE PROCEDURE bench_group_member(st text, con text, m text, total bigint)
LANGUAGE plpgsql AS $$
DECLARE
	n int;
	done bigint;
	t0 timestamptz := clock_timestamp();
BEGIN
	-- connected: say so, and start when every client is (the driver's go)
	INSERT INTO grp_ready VALUES (1);
	COMMIT;
	WHILE NOT EXISTS (SELECT FROM grp_go) LOOP
		IF clock_timestamp() > t0 + interval '120 s' THEN
			RAISE EXCEPTION 'no start signal within 120 s';
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
	LOOP
		INSERT INTO grp_log (partition, first_seq, last_seq, n)
		SELECT partition, min(seq), max(seq), count(*)
		  FROM streamguard.poll(st, con, 1000, wait => '20 ms', member => nullif(m, ''))
		 GROUP BY partition;
		GET DIAGNOSTICS n = ROW_COUNT;
		COMMIT;
		IF n = 0 THEN
			SELECT coalesce(sum(committed_seq), 0) INTO done
			  FROM streamguard.consumers WHERE stream = st AND consumer = con;
			EXIT WHEN done >= total;
		END IF;
	END LOOP;
	IF m <> '' THEN
		PERFORM streamguard.leave_group(st, con, m);
	END IF;
	-- the CPU time this backend used (Linux; nothing elsewhere)
	BEGIN
		INSERT INTO grp_cpu SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint;
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
	COMMIT;
END $$;
};

sub knobs { return (BENCH_GROUP_EVENTS => [ 2000000, 'k2' ]); }

sub contenders { return ([ 'group', [ @S{qw(1 2 4 p2)} ] ]); }

sub run
{
	my ($self, $r) = @_;
	my $stream = "s8r$r";
	my $n = $K{BENCH_GROUP_EVENTS};
	my $ready = have('sg') && create_stream($stream, 4)
	  && prefill("prefill_grp_r$r", 'append_batch_sg.sql', { stream => $stream }, $n / 1000);
	sql($MEMBER) if $ready;
	for my $k (rotated($r, 1, 2, 4, 'p2'))
	{
		my $key = "group|$S{$k}";
		if (!$ready) { $self->add_val($key, have('sg') ? 'ERR' : 'PENDING'); next; }
		$self->drain($key, $k, $stream, $r);
	}
	sql_try('DROP TABLE IF EXISTS grp_log, grp_cpu, grp_ready, grp_go');
	drop_stream($stream) if have('sg');
	return;
}

# one contender: $k clients (p2: 2 without member names) drain the stream
sub drain
{
	my ($self, $key, $k, $stream, $r) = @_;
	my $n = $K{BENCH_GROUP_EVENTS};
	my ($clients, $plain) = $k eq 'p2' ? (2, 1) : ($k, 0);
	sql('DROP TABLE IF EXISTS grp_log, grp_cpu, grp_ready, grp_go;'
		. ' CREATE TABLE grp_log (partition int, first_seq bigint, last_seq bigint, n int);'
		. ' CREATE TABLE grp_cpu (ns bigint); CREATE TABLE grp_ready (x int); CREATE TABLE grp_go (x int)');
	checkpoint();
	my $con = "grp${k}_r$r";
	my @pids = map { [ $_, background_call("CALL bench_group_member('$stream', '$con', '" . ($plain ? '' : "m$_")
		  . "', $n)", "group_${con}_m$_") ] } 1 .. $clients;
	my $err;
	# the clock starts once every client is connected (their connections
	# and process starts are not the drain's work)
	wait_until(60, 0.005, sub { (sql_value('SELECT count(*) FROM grp_ready') // -1) == $clients })
	  or $err = 'the clients did not all connect within 60 s';
	my $t0 = time;
	sql('INSERT INTO grp_go VALUES (1)');
	for my $p (@pids)
	{
		my $rc = reap($p->[1], $K{BENCH_PIPELINE_TIMEOUT});
		$err //= "member m$p->[0] failed (logs/group_${con}_m$p->[0].log)" unless defined $rc && $rc == 0;
	}
	my $t = time - $t0;
	# per partition, the polls' seq ranges must tile 1 .. last without gap
	# or overlap (the pre-fill commits every seq), and add up to $n
	my $got = sql_value(q{SELECT coalesce(sum(n), 0) || ' ' || count(*) FILTER (WHERE n <> last_seq - first_seq + 1
			OR first_seq <> coalesce(prev, 0) + 1)
		FROM (SELECT *, lag(last_seq) OVER (PARTITION BY partition ORDER BY first_seq) AS prev FROM grp_log) r}) // '';
	$err //= "polls' ranges: (events, bad ranges) = ($got), expected ($n, 0)" unless $got eq "$n 0";
	return $self->fail_all([$key], 'ERR', $err) if $err;
	$self->add_val($key, sprintf('%.1f', $n / $t));
	# the work done, whatever the load: the CPU time of the clients' backends
	my $cpu = sql_value("SELECT round(sum(ns) / 1e6 / ($n / 1000.0), 2) FROM grp_cpu HAVING count(*) = $clients") // '';
	if ($cpu ne '')
	{
		push @{ $self->{cpu}{$key} }, $cpu;
		$self->notes->{$key} = 'backend CPU ms per 1,000 events, per repeat: ' . join(' ', @{ $self->{cpu}{$key} });
	}
	return;
}

sub rows
{
	my ($self) = @_;
	return (
		$self->row('group', $S{1}, $S{1}, undef, 'baseline'),
		$self->row('group', $S{2}, $S{1}, 1.6, '≥ 1.60 × 1 client'),
		$self->row('group', $S{4}, $S{1}, undef, 'reference (2 cores)'),
		$self->row('group', $S{p2}, $S{1}, undef, 'reference: the same without groups'));
}

1;
