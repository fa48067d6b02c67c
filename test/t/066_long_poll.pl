# Long-poll: poll(stream, consumer, max_events, wait => interval) returns as
# soon as events are readable or when the wait has passed; it sleeps on the
# commit-time wake-up of the stream (no polling loop), so
#   - an append that commits wakes a waiting poller at once (bounded here by
#     a generous 5 s; the benchmark measures the real latency);
#   - an append that rolls back wakes nobody: the poller returns empty at
#     the end of its wait;
#   - an append that commits late, below one already committed, is still
#     delivered in order (the horizon holds the poller back until then);
#   - a waiting poller burns no CPU, can be cancelled, and its wait is
#     bounded (0 to 1 hour, 22023 otherwise);
#   - without wait (or wait NULL), poll returns at once as before.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $node = sg_node('longpoll');
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('lp', 2);
});

# a poller in its own psql process: returns (handle, \$out, \$err)
sub start_poller
{
	my ($sql) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	return ($h, \$out, \$err);
}

# the pid of the backend waiting in a poll (within 20 s), or undef
sub waiting_poller_pid
{
	my $waiting = q{FROM pg_stat_activity
		WHERE query LIKE '%streamguard.poll%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()};
	return undef unless wait_for_value($node, "SELECT count(*) > 0 $waiting", 't', 20);
	my $pid = $node->safe_psql('postgres', "SELECT pid $waiting");
	return $pid ne '' ? $pid : undef;
}

# --------------------------------------------------- no wait: at once
my $t0 = time;
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.poll('lp', 'c1', 10)}), '0',
	'without wait an empty stream returns at once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.poll('lp', 'c1', 10, wait => NULL)}), '0',
	'wait => NULL does not wait');
ok(time - $t0 < 2, 'both returned at once');

# --------------------------------------------- the wait elapses: empty
$t0 = time;
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.poll('lp', 'c1', 10, wait => '600 ms')}), '0',
	'an empty stream: poll waits and returns nothing');
my $took = time - $t0;
ok($took >= 0.55 && $took < 5, sprintf('... after the wait (%.2f s)', $took));

# ----------------------------------- a commit wakes the waiting poller
my ($h, $out, $err) = start_poller(q{SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM streamguard.poll('lp', 'c1', 10, wait => '30 s')});
my $pid = waiting_poller_pid();
ok(defined $pid, 'the poller is waiting (wait event type Extension)');

# CPU time of the waiting backend over one second: no busy loop
sub cpu_ticks
{
	my ($p) = @_;
	open(my $fh, '<', "/proc/$p/stat") or return undef;
	my @f = split ' ', scalar <$fh>;
	close $fh;
	return $f[13] + $f[14];
}
SKIP:
{
	skip 'no /proc', 1 unless defined $pid && -r "/proc/$pid/stat";
	my $c0 = cpu_ticks($pid);
	sleep 1;
	my $c1 = cpu_ticks($pid);
	ok($c1 - $c0 <= 2, "the waiting backend used no CPU over 1 s (" . ($c1 - $c0) . " ticks)");
}

$t0 = time;
$node->safe_psql('postgres', q{SELECT streamguard.append('lp', '{"n": 1}', partition => 0)});
$h->finish;
chomp $$out;
my $latency = time - $t0;
is($$out, '1', 'the committed append is returned');
ok($latency < 5, sprintf('... as soon as it committed (%.3f s after the append call began)', $latency));

# -------------------------------------- a rolled-back append wakes nobody
($h, $out, $err) = start_poller(q{SELECT count(*) FROM streamguard.poll('lp', 'c1', 10, wait => '1500 ms')});
ok(defined waiting_poller_pid(), 'a second poller waits');
$t0 = time;
$node->safe_psql('postgres', q{BEGIN; SELECT streamguard.append('lp', '{"n": "rolled back"}', partition => 0); ROLLBACK;});
$h->finish;
chomp $$out;
is($$out, '0', 'a rolled-back append is never returned');
ok(time - $t0 > 0.5, 'and does not end the wait early');

# -------------- a late commit below a committed seq: delivered, in order
my ($in_a, $out_a, $err_a) = ('', '', '');
my $late = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$in_a, '>', \$out_a, '2>', \$err_a, IPC::Run::timeout(60));
$in_a .= "BEGIN;\nSELECT seq FROM streamguard.append('lp', '{\"n\": 2}', partition => 0);\n";
my $deadline = time + 20;
$late->pump while $out_a !~ /^\d+$/m && time < $deadline;
like($out_a, qr/^\d+$/m, 'a producer holds an append to partition 0 open');

($h, $out, $err) = start_poller(q{SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM streamguard.poll('lp', 'c1', 10, wait => '30 s')});
ok(defined waiting_poller_pid(), 'a poller waits behind the open append');
$node->safe_psql('postgres', q{SELECT streamguard.append('lp', '{"n": 3}', partition => 0)});
usleep(500_000);
ok($h->pumpable, 'a later append that committed is not returned while an earlier one is in flight');
$in_a .= "COMMIT;\n\\q\n";
$late->finish;
$h->finish;
chomp $$out;
is($$out, '2,3', 'when the earlier append commits, both are returned in seq order');

# ----------------------------------------------------------- cancel
($h, $out, $err) = start_poller(q{SELECT count(*) FROM streamguard.poll('lp', 'c1', 10, wait => '30 s')});
$pid = waiting_poller_pid();
$t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
eval { $h->finish; };
like($$err, qr/canceling statement due to user request/, 'a waiting poll can be cancelled');
ok(time - $t0 < 5, '... at once');

# ------------------------------------------------------- bad input
for my $bad ([ q{'-1 s'}, 'a negative wait' ], [ q{'2 hours'}, 'a wait over 1 hour' ])
{
	my ($ret, $o, $e) = $node->psql('postgres',
		"SELECT * FROM streamguard.poll('lp', 'c1', 10, wait => $bad->[0])", on_error_stop => 0);
	like($e, qr/wait must be between 0 and 1 hour/, "$bad->[1] is refused");
}
my ($ret, $o, $e) = $node->psql('postgres', q{\set VERBOSITY verbose
SELECT * FROM streamguard.poll('lp', 'c1', 10, wait => '-1 s')}, on_error_stop => 0);
like($e, qr/22023/, '... with SQLSTATE 22023');

$node->stop;
done_testing();
