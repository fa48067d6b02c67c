
# Shared helpers of the pipeline TAP tests (050_pipeline_crash_matrix.pl,
# 060_pipeline_runtime.pl): node setup, psql calls that tolerate a server
# that is restarting, bounded waits, and server log scanning.
#
# Every wait here has a deadline; none loops forever.

package SgPipeTest;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(sg_node try_psql q1 wait_for_value wait_pipelines_running
  log_offset wait_log count_log wait_crash_recovery pipelines_report);

# A node with streamguard preloaded, started.
sub sg_node
{
	my ($name, $extra) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries='streamguard'\n"
		  . "streamguard.maintenance_naptime='200ms'\n"
		  . "max_worker_processes=16\n"
		  . "restart_after_crash=on\n"
		  . "log_statement=none\n"
		  . ($extra // ''));
	$node->start;
	return $node;
}

# Run SQL through psql; never dies.  Returns ($ok, $stdout, $stderr).
sub try_psql
{
	my ($node, $sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my $db = $opt{dbname} // 'postgres';
	my $conn = $node->connstr($db);
	$conn .= " user=$opt{user}" if $opt{user};
	my $ok = eval {
		IPC::Run::run(
			[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $conn ],
			'<', \$sql, '>', \$out, '2>', \$err,
			IPC::Run::timeout($opt{timeout} // 60));
	};
	$err .= $@ if $@;
	chomp $out;
	chomp $err;
	return ($ok ? 1 : 0, $out, $err);
}

# One query that must succeed; retried (the server may be restarting) until
# the deadline.  Returns stdout, or undef after the deadline.
sub q1
{
	my ($node, $sql, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	my ($ok, $out, $err);
	while (1)
	{
		($ok, $out, $err) = try_psql($node, $sql);
		return $out if $ok;
		last if time > $deadline;
		usleep(200_000);
	}
	diag("query failed until its deadline: $sql\n$err");
	return undef;
}

# Poll $sql until it returns $expected (default 't'); 1 on success, 0 on
# timeout (with the last output in diag).
sub wait_for_value
{
	my ($node, $sql, $expected, $timeout, $dbname) = @_;
	$expected //= 't';
	my $deadline = time + ($timeout // 60);
	my ($ok, $out, $err) = (0, '', '');
	while (time <= $deadline)
	{
		($ok, $out, $err) = try_psql($node, $sql, timeout => 30, dbname => $dbname);
		return 1 if $ok && $out eq $expected;
		usleep(100_000);
	}
	diag("timed out waiting for [$sql] = [$expected]; last output [$out] stderr [$err]");
	return 0;
}

# Wait until each named pipeline is 'running' with a live worker process.
sub wait_pipelines_running
{
	my ($node, $names, $timeout) = @_;
	my $list = join(',', map { "'$_'" } @$names);
	my $n = scalar @$names;
	return wait_for_value(
		$node, qq{
SELECT count(*) FROM streamguard.pipelines p
JOIN pg_stat_activity a ON a.pid = p.worker_pid AND a.backend_type = 'streamguard pipeline'
WHERE p.pipeline IN ($list) AND p.state = 'running'},
		$n, $timeout // 60);
}

sub log_offset
{
	my ($node) = @_;
	return -s $node->logfile;
}

# Wait until $re matches the server log after $offset.  Returns the offset
# just after the (first) match, or undef on timeout.
sub wait_log
{
	my ($node, $re, $offset, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	while (1)
	{
		my $log = slurp_file($node->logfile, $offset);
		if ($log =~ $re)
		{
			return $offset + $+[0];
		}
		return undef if time > $deadline;
		usleep(100_000);
	}
}

sub count_log
{
	my ($node, $re, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset // 0);
	my $n = () = $log =~ /$re/g;
	return $n;
}

# After something killed a backend: wait for the postmaster to reinitialize
# and accept connections again.  Returns the log offset after "ready", or
# undef.
sub wait_crash_recovery
{
	my ($node, $offset, $timeout) = @_;
	$timeout //= 60;
	my $o = wait_log($node, qr/all server processes terminated; reinitializing/, $offset, $timeout);
	return undef unless defined $o;
	$o = wait_log($node, qr/database system is ready to accept connections/, $o, $timeout);
	return undef unless defined $o;
	return undef unless wait_for_value($node, 'SELECT 1', '1', $timeout);
	return $o;
}

sub pipelines_report
{
	my ($node) = @_;
	my ($ok, $out, $err) = try_psql($node, q{
SELECT pipeline, state, guarantee, worker_pid, batches, events_in, rows_out, lag_events,
	   restarts, skipped, dead_letters, epoch, left(coalesce(last_error, ''), 200)
FROM streamguard.pipelines ORDER BY pipeline});
	return $ok ? $out : "(pipelines view unavailable: $err)";
}

1;
