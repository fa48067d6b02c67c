
# Shared helpers of the two-server TAP tests (070_remote_sink.pl,
# 080_remote_source.pl, 090_remote_security.pl): a "local" node and a
# "remote" node that accepts password (SCRAM) authentication over TCP
# loopback, psql calls that never die and report the SQLSTATE, bounded
# waits, server log scanning, and the remote backends serving a pipeline.
#
# Every wait here has a deadline; none loops forever.

package RemoteTest;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use POSIX ();
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(rt_node try_psql sqlstate q1 wait_for_value wait_running
  log_offset wait_log count_log wait_crash_recovery pipelines_report
  remote_pids tcp_connstr expect_error remote_status_report start_proxy);

# A node with streamguard preloaded, started.
#   extra      => more postgresql.conf lines
#   remote     => 1: listen on 127.0.0.1 and ask TCP clients for a SCRAM
#                 password (placed before initdb's trust lines)
#   trust_tcp  => [roles]: those roles are trusted on 127.0.0.1 (a line
#                 before the SCRAM line): a server that does not ask
#   mpx        => max_prepared_transactions (default 10 for remotes)
sub rt_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	my $conf = "shared_preload_libraries='streamguard'\n"
	  . "streamguard.maintenance_naptime='200ms'\n"
	  . "max_worker_processes=16\n"
	  . "max_connections=60\n"
	  . "restart_after_crash=on\n"
	  . "log_statement=none\n";
	if ($opt{remote})
	{
		$conf .= "listen_addresses='127.0.0.1'\n"
		  . "password_encryption='scram-sha-256'\n"
		  . "max_prepared_transactions=" . ($opt{mpx} // 10) . "\n";
	}
	elsif (defined $opt{mpx})
	{
		$conf .= "max_prepared_transactions=$opt{mpx}\n";
	}
	$conf .= $opt{extra} // '';
	$node->append_conf('postgresql.conf', $conf);
	if ($opt{remote})
	{
		my $hba_file = $node->data_dir . '/pg_hba.conf';
		my $old = slurp_file($hba_file);
		my $new = '';
		$new .= "host all $_ 127.0.0.1/32 trust\n" for @{ $opt{trust_tcp} // [] };
		$new .= "host all all 127.0.0.1/32 scram-sha-256\n";
		open(my $fh, '>', $hba_file) or die "cannot write $hba_file: $!";
		print $fh $new . $old;
		close $fh;
	}
	$node->start;
	return $node;
}

# libpq connection string to $node over TCP loopback
sub tcp_connstr
{
	my ($node, $user, $password, $db) = @_;
	my $s = "host=127.0.0.1 port=" . $node->port . " dbname=" . ($db // 'postgres');
	$s .= " user=$user" if defined $user;
	$s .= " password=$password" if defined $password;
	return $s;
}

# Run SQL through psql; never dies.  Returns ($ok, $stdout, $stderr);
# errors are reported verbosely (SQLSTATE included).
#   user => role, connstr => a whole connection string, timeout => s
sub try_psql
{
	my ($node, $sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my $conn = $opt{connstr} // $node->connstr($opt{dbname} // 'postgres');
	$conn .= " user=$opt{user}" if $opt{user};
	my $ok = eval {
		IPC::Run::run(
			[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', '-d', $conn ],
			'<', \$sql, '>', \$out, '2>', \$err,
			IPC::Run::timeout($opt{timeout} // 60));
	};
	$err .= $@ if $@;
	chomp $out;
	chomp $err;
	return ($ok ? 1 : 0, $out, $err);
}

# the SQLSTATE of a verbose psql error, or ''
sub sqlstate
{
	my ($err) = @_;
	return $1 if ($err // '') =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/;
	return '';
}

# Run $sql that must fail with $state and a message matching $re.
# Returns the elapsed seconds.
sub expect_error
{
	my ($node, $sql, $state, $re, $name, %opt) = @_;
	my $t0 = time;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	my $elapsed = time - $t0;
	ok(!$ok, "$name: fails") or diag("unexpected success: [$out]");
	is(sqlstate($err), $state, "$name: SQLSTATE $state") or diag($err);
	like($err, $re, "$name: message") if defined $re;
	return $elapsed;
}

# One query that must succeed; retried (the server may be restarting) until
# the deadline.  Returns stdout, or undef after the deadline.
sub q1
{
	my ($node, $sql, $timeout, %opt) = @_;
	my $deadline = time + ($timeout // 60);
	my ($ok, $out, $err);
	while (1)
	{
		($ok, $out, $err) = try_psql($node, $sql, %opt, timeout => 30);
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
	my ($node, $sql, $expected, $timeout, %opt) = @_;
	$expected //= 't';
	my $deadline = time + ($timeout // 60);
	my ($ok, $out, $err) = (0, '', '');
	while (time <= $deadline)
	{
		($ok, $out, $err) = try_psql($node, $sql, %opt, timeout => 30);
		return 1 if $ok && $out eq $expected;
		usleep(100_000);
	}
	diag("timed out waiting for [$sql] = [$expected]; last output [$out] stderr [$err]");
	return 0;
}

# Wait until each named pipeline is 'running' with a live worker process.
sub wait_running
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
	   restarts, epoch, left(coalesce(last_error, ''), 200)
FROM streamguard.pipelines ORDER BY pipeline});
	return $ok ? $out : "(pipelines view unavailable: $err)";
}

sub remote_status_report
{
	my ($node) = @_;
	my ($ok, $out, $err) = try_psql($node, q{
SELECT pipeline, side, server, connected, round(rtt_ms::numeric, 2), prepared_pending,
	   left(coalesce(last_error, ''), 200)
FROM streamguard.remote_status ORDER BY pipeline, side});
	return $ok ? $out : "(remote_status unavailable: $err)";
}

# pids of the client backends on $remote whose application_name is $app
sub remote_pids
{
	my ($remote, $app) = @_;
	my ($ok, $out) = try_psql($remote, qq{
SELECT pid FROM pg_stat_activity
WHERE application_name = '$app' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
ORDER BY pid}, timeout => 20);
	return () unless $ok;
	return grep { /^\d+$/ } split /\n/, $out;
}

# ------------------------------------------------------------------ proxy
#
# A TCP proxy in front of a server, to model a network that delays a
# client's message: it forwards bytes both ways, except that once armed
# (write a Perl regex into $dir/hold) the first client->server chunk that
# matches is held, with everything that client sends after it (Terminate
# included), even after the client closed its end; the server side of that
# connection stays open, idle, as a real server would be while the message
# is delayed.  Touching $dir/release delivers what was held, in order (so
# the server executes the delayed statement then), and $dir/exit stops the
# proxy.  $dir/log records what happened.
#
# Returns ($port, $pid); the proxy is a forked child.
sub start_proxy
{
	my ($target_port, $dir) = @_;
	require IO::Socket::INET;
	require IO::Select;
	mkdir $dir;
	unlink "$dir/$_" for qw(hold release exit log);
	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Listen    => 32,
		Proto     => 'tcp',
		ReuseAddr => 1) or die "proxy: cannot listen: $!";
	my $port = $listen->sockport;
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	return ($port, $pid) if $pid;

	# child
	my $log = sub {
		if (open(my $fh, '>>', "$dir/log"))
		{
			printf $fh "%.3f %s\n", time, $_[0];
			close $fh;
		}
	};
	my @conns;    # { c, s, held, holding, c_eof }
	my $sel = sub {
		my $s = IO::Select->new($listen);
		for my $k (@conns)
		{
			$s->add($k->{c}) if $k->{c} && !$k->{c_eof};
			$s->add($k->{s}) if $k->{s};
		}
		return $s;
	};
	my $drop = sub {
		my ($k) = @_;
		close $k->{c} if $k->{c};
		close $k->{s} if $k->{s};
		$k->{c} = $k->{s} = undef;
	};
	while (!-e "$dir/exit")
	{
		if (-e "$dir/release")
		{
			for my $k (grep { $_->{holding} && $_->{s} } @conns)
			{
				$log->(sprintf('release %d bytes', length $k->{held}));
				syswrite($k->{s}, $k->{held});
				$k->{held} = '';
				$k->{holding} = 0;
				if ($k->{c_eof})
				{
					# the client is gone: just let the server answer and end
					$k->{orphan} = 1;
				}
			}
			unlink "$dir/release";
		}
		my @ready = $sel->()->can_read(0.05);
		for my $fh (@ready)
		{
			if ($fh == $listen)
			{
				my $c = $listen->accept or next;
				my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $target_port, Proto => 'tcp');
				if (!$s)
				{
					close $c;
					next;
				}
				push @conns, { c => $c, s => $s, held => '', holding => 0, c_eof => 0 };
				next;
			}
			my ($k) = grep { ($_->{c} && $_->{c} == $fh) || ($_->{s} && $_->{s} == $fh) } @conns;
			next unless $k;
			my $buf = '';
			my $n = sysread($fh, $buf, 65536);
			if ($k->{c} && $fh == $k->{c})
			{
				if (!$n)
				{
					$k->{c_eof} = 1;
					close $k->{c};
					$k->{c} = undef;
					$drop->($k) unless $k->{holding};
					next;
				}
				if ($k->{holding})
				{
					$k->{held} .= $buf;
					next;
				}
				if (-s "$dir/hold")
				{
					my $re = slurp_file("$dir/hold");
					chomp $re;
					if ($buf =~ /$re/)
					{
						unlink "$dir/hold";
						$k->{holding} = 1;
						$k->{held} = $buf;
						$log->("hold [$re]");
						next;
					}
				}
				syswrite($k->{s}, $buf);
			}
			else
			{
				if (!$n)
				{
					$log->('server closed an orphan connection') if $k->{orphan};
					$drop->($k);
					next;
				}
				syswrite($k->{c}, $buf) if $k->{c};
			}
		}
		@conns = grep { $_->{c} || $_->{s} } @conns;
	}
	POSIX::_exit(0);
}

1;
