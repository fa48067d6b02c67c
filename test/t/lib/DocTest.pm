
# Executable documentation: the runner behind test/t/110_docs.pl.
#
# Every ```sql block of README.md and docs/*.md runs against a real server,
# file by file, top to bottom, each file in a fresh database of its own (and
# with the roles it created dropped afterwards).  A block runs in a psql
# session (psql -X -q, aligned output) that lives for the whole file, the way
# a reader would paste the examples one after the other.  When a block is
# followed (blank lines aside) by a fenced block with the info string
# `output`, what psql printed for the block must equal it.  The syntax is
# described in docs/contributing.md; in short, HTML comments on the lines
# right before a fence change how it runs:
#
#   <!-- doctest: skip — <reason> -->         not run (a reason is required)
#   <!-- doctest: expect-error <SQLSTATE> --> the block must fail with it
#   <!-- doctest: wait-for <SQL> -->          first poll <SQL> until it is t
#   <!-- doctest: as role <name> -->          SET ROLE <name> around the block
#   <!-- doctest: session <name> -->          run in another psql session
#   <!-- doctest: database <name> -->         run in that database instead
#   <!-- doctest: on remote <database> -->    run on the second server
#   <!-- doctest: hidden                      SQL that runs but is not shown
#   ...SQL...
#   -->
#
# Before a block that runs DROP DATABASE <name>, the runner ends its own
# sessions connected to <name>.
#
# In an output block the character … stands for any text within a line
# (pids, times, rates); such lines are compared with runs of spaces and
# dashes collapsed, since a volatile value changes the column widths.
#
# The example remote server of the docs, host '10.0.0.5' port '5432', is
# the test's second server (127.0.0.1, its port, SCRAM passwords).
#
# Nodes, one-shot queries and waits come from StreamguardTest.pm; this
# module adds the markdown parsing and the long-lived psql sessions.  Every
# wait has a deadline; nothing loops forever.

package DocTest;

use strict;
use warnings;

use Exporter 'import';
use Encode qw(encode_utf8 decode_utf8);
use File::Basename qw(basename);
use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest qw(try_psql wait_for_value);

our @EXPORT = qw(doc_parse doc_run_file);

my $BLOCK_TIMEOUT = 60;    # seconds one block may take
my $WAIT_TIMEOUT  = 60;    # seconds a wait-for may take
my $ELLIPSIS      = "\x{2026}";

# ------------------------------------------------------------------ parsing

# Parse one markdown file into a list of runnable blocks:
#   { line, sql, output (undef if none), output_line, skip, error, wait,
#     role, session, remote }
sub doc_parse
{
	my ($path) = @_;
	open(my $fh, '<:encoding(UTF-8)', $path) or die "cannot read $path: $!";
	my @lines = <$fh>;
	close $fh;
	chomp @lines;

	my (@blocks, @pending, @problems);
	my $i = 0;
	while ($i < @lines)
	{
		my $l = $lines[$i];

		# a hidden block: <!-- doctest: hidden ... -->
		if ($l =~ /^\s*<!--\s*doctest:\s*hidden\s*$/)
		{
			my $start = $i + 1;
			my @sql;
			$i++;
			while ($i < @lines && $lines[$i] !~ /^\s*-->\s*$/)
			{
				push @sql, $lines[$i];
				$i++;
			}
			push @problems, "$path:$start: unterminated hidden block" if $i >= @lines;
			push @blocks, _block($path, $start, join("\n", @sql), \@pending, \@problems);
			@pending = ();
			$i++;
			next;
		}

		# a one-line annotation
		if ($l =~ /^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$/)
		{
			push @pending, [ $i + 1, $1 ];
			$i++;
			next;
		}

		# a fence
		if ($l =~ /^(\s*)```\s*(\S*)\s*$/)
		{
			my ($indent, $info) = ($1, $2);
			my $start = $i + 1;
			my @body;
			$i++;
			while ($i < @lines && $lines[$i] !~ /^\s*```\s*$/)
			{
				(my $b = $lines[$i]) =~ s/^\Q$indent\E//;
				push @body, $b;
				$i++;
			}
			push @problems, "$path:$start: unterminated fence" if $i >= @lines;
			$i++;
			if ($info eq 'sql')
			{
				my $blk = _block($path, $start, join("\n", @body), \@pending, \@problems);

				# an output block right after it (blank lines aside)
				my $j = $i;
				$j++ while $j < @lines && $lines[$j] =~ /^\s*$/;
				if ($j < @lines && $lines[$j] =~ /^(\s*)```\s*output\s*$/)
				{
					my $oindent = $1;
					my @out;
					$blk->{output_line} = $j + 1;
					$j++;
					while ($j < @lines && $lines[$j] !~ /^\s*```\s*$/)
					{
						(my $o = $lines[$j]) =~ s/^\Q$oindent\E//;
						push @out, $o;
						$j++;
					}
					$blk->{output} = join("\n", @out);
					$i = $j + 1;
				}
				push @blocks, $blk;
			}
			elsif ($info eq 'output')
			{
				push @problems, "$path:$start: output block without a sql block before it";
			}
			elsif (@pending)
			{
				push @problems, "$path:$start: doctest annotation before a ```$info block";
			}
			@pending = ();
			next;
		}

		# annotations must sit right before their fence
		if (@pending && $l !~ /^\s*$/)
		{
			push @problems, "$path:$pending[0][0]: doctest annotation not followed by a fence";
			@pending = ();
		}
		$i++;
	}
	push @problems, "$path:$pending[0][0]: doctest annotation at the end of the file"
	  if @pending;
	return (\@blocks, \@problems);
}

sub _block
{
	my ($path, $line, $sql, $pending, $problems) = @_;
	my %b = (file => $path, line => $line, sql => $sql, session => 'main');
	for my $p (@$pending)
	{
		my ($at, $a) = @$p;
		if ($a =~ /^skip\b\s*(?:[-\x{2014}:]\s*)?(.*)$/)
		{
			push @$problems, "$path:$at: a skip needs a reason" if $1 eq '';
			$b{skip} = $1;
		}
		elsif ($a =~ /^expect-error\s+([0-9A-Z]{5})$/) { $b{error} = $1; }
		elsif ($a =~ /^wait-for\s+(.+)$/)             { push @{ $b{wait} }, $1; }
		elsif ($a =~ /^as role\s+(\w+)$/)              { $b{role} = $1; }
		elsif ($a =~ /^session\s+(\w+)$/)              { $b{session} = $1; }
		elsif ($a =~ /^on remote\s+(\w+)$/)            { $b{remote} = $1; }
		elsif ($a =~ /^database\s+(\w+)$/)             { $b{database} = $1; }
		else { push @$problems, "$path:$at: unknown doctest annotation: $a"; }
	}
	return \%b;
}

# ------------------------------------------------------------------ running

# One psql session, kept open for the whole file.
sub _session_start
{
	my ($node, $db) = @_;
	my %s = (in => '', out => '', err => '', n => 0);
	$s{timer} = IPC::Run::timer($BLOCK_TIMEOUT);
	$s{h} = IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr($db) ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err}, $s{timer});
	$s{in} .= "\\set VERBOSITY verbose\n\\set SHOW_CONTEXT never\n"
	  . "SET client_min_messages = warning;\n";
	return \%s;
}

# Send SQL; wait until psql has done it.  Returns (ok, stdout, stderr).
sub _session_run
{
	my ($s, $sql) = @_;
	my $marker = '__doctest_' . (++$s->{n}) . '__';
	$s->{out} = '';
	$s->{err} = '';
	$s->{in} .= encode_utf8("$sql\n") . "\\echo $marker\n\\warn $marker\n";
	$s->{timer}->start($BLOCK_TIMEOUT);
	my $ok = eval {
		$s->{h}->pump
		  until $s->{out} =~ /^\Q$marker\E$/m && $s->{err} =~ /^\Q$marker\E$/m;
		1;
	};
	my ($out, $err) = (decode_utf8($s->{out}), decode_utf8($s->{err}));
	$out =~ s/^\Q$marker\E\n?//m;
	$err =~ s/^\Q$marker\E\n?//m;
	$err .= "\n(runner: $@)" unless $ok;
	return ($ok ? 1 : 0, $out, $err);
}

sub _session_stop
{
	my ($s) = @_;
	$s->{in} .= "\\q\n";
	eval { $s->{timer}->start(10); $s->{h}->finish; 1 } or $s->{h}->kill_kill;
}

# one-shot query, stdout trimmed; undef on error
sub _query
{
	my ($node, $db, $sql) = @_;
	my ($ok, $out) = try_psql($node, encode_utf8($sql), dbname => $db, timeout => 30);
	return $ok ? $out =~ s/\s+$//r : undef;
}

# the error lines of psql's stderr the way a reader sees them (default
# verbosity): no "psql:<stdin>:N:" prefix, no SQLSTATE, no LOCATION
sub _reader_errors
{
	my ($err) = @_;
	my @l;
	for my $line (split /\n/, $err)
	{
		$line =~ s/^psql:[^:]*:\d+:\s*//;
		next if $line =~ /^LOCATION:/;
		$line =~ s/^(ERROR|WARNING|FATAL):  [0-9A-Z]{5}: /$1:  /;
		push @l, $line;
	}
	return join("\n", @l);
}

sub _normalize
{
	my ($t) = @_;
	my @l = map { s/\s+$//r } split /\n/, $t;
	pop @l while @l && $l[-1] eq '';
	# blank lines before the output (psql 17 writes one ahead of an error
	# after a command that printed nothing)
	shift @l while @l && $l[0] eq '';
	return join("\n", @l);
}

sub _squeeze
{
	my ($l) = @_;
	$l =~ s/ +/ /g;
	$l =~ s/-+/-/g;
	$l =~ s/^ //;
	return $l;
}

# does the actual output match the documented one?
sub _matches
{
	my ($got, $want) = @_;
	return $got eq $want if index($want, $ELLIPSIS) < 0;
	my @g = split /\n/, $got, -1;
	my @w = split /\n/, $want, -1;
	return 0 unless @g == @w;
	for my $k (0 .. $#w)
	{
		my $gl = _squeeze($g[$k]);
		my $wl = _squeeze($w[$k]);
		my $re = join('.*?', map { quotemeta } split /\Q$ELLIPSIS\E/, $wl, -1);
		return 0 unless $gl =~ /^$re$/;
	}
	return 1;
}

sub _diff
{
	my ($want, $got) = @_;
	my $dir = tempdir(CLEANUP => 1);
	for ([ 'documented', $want ], [ 'actual', $got ])
	{
		open(my $fh, '>:encoding(UTF-8)', "$dir/$_->[0]") or die;
		print $fh $_->[1], "\n";
		close $fh;
	}
	my $d = `cd $dir && diff -u documented actual`;
	return $d;
}

# drop every role created since initdb (the file's own roles)
sub _drop_roles
{
	my ($node) = @_;
	my $roles = _query($node, 'postgres',
		"SELECT string_agg(quote_ident(rolname), ',') FROM pg_roles WHERE oid >= 16384");
	return unless defined $roles && $roles ne '';
	_query($node, 'postgres', "DROP ROLE IF EXISTS $_") for split /,/, $roles;
}

# Run one markdown file.  $env: { node, remote (a node or undef),
# remote_port, root }.
sub doc_run_file
{
	my ($env, $path) = @_;
	my $rel = $path;
	$rel =~ s/^\Q$env->{root}\E\/?//;
	my ($blocks, $problems) = doc_parse($path);
	fail("$rel: $_") for @$problems;

	my @runnable = grep { !defined $_->{skip} } @$blocks;
	note(sprintf("%s: %d sql blocks, %d with output, %d skipped",
		$rel, scalar(@$blocks), scalar(grep { defined $_->{output} } @$blocks),
		scalar(@$blocks) - scalar(@runnable)));
	note("$rel:$_->{line}: skipped: $_->{skip}")
	  for grep { defined $_->{skip} } @$blocks;
	return 0 unless @runnable;

	(my $db = 'doc_' . lc(basename($rel, '.md'))) =~ s/[^a-z0-9_]/_/g;
	my $node = $env->{node};
	_query($node, 'postgres', "DROP DATABASE IF EXISTS $db WITH (FORCE)");
	die "cannot create database $db" unless defined _query($node, 'postgres', "CREATE DATABASE $db");

	my %sessions;
	my %remote_dbs;
	my %local_dbs;
	my $failed = 0;
	for my $b (@runnable)
	{
		my $where = "$rel:$b->{line}";
		my ($srv, $sdb) = ($node, $db);
		if (defined $b->{remote})
		{
			die "$where: on remote, but there is no remote node" unless $env->{remote};
			($srv, $sdb) = ($env->{remote}, $b->{remote});
			if (!$remote_dbs{$sdb}++)
			{
				_query($srv, 'postgres', "DROP DATABASE IF EXISTS $sdb WITH (FORCE)");
				_query($srv, 'postgres', "CREATE DATABASE $sdb");
			}
		}
		elsif (defined $b->{database})
		{
			$sdb = $b->{database};
			if (!$local_dbs{$sdb}++)
			{
				_query($srv, 'postgres', "DROP DATABASE IF EXISTS $sdb WITH (FORCE)");
				_query($srv, 'postgres', "CREATE DATABASE $sdb");
			}
		}
		my $key = (defined $b->{remote} ? 'remote:' : '') . "$sdb:$b->{session}";

		# a block that drops a database: end our own sessions there first,
		# as a reader would before connecting elsewhere
		if ($b->{sql} =~ /DROP DATABASE\s+(\w+)/i)
		{
			my $gone = $1;
			for my $k (grep { /^(?:remote:)?\Q$gone\E:/ } keys %sessions)
			{
				_session_stop($sessions{$k});
				delete $sessions{$k};
			}
		}
		my $s = $sessions{$key} //= _session_start($srv, $sdb);

		for my $w (@{ $b->{wait} // [] })
		{
			if (!wait_for_value($srv, encode_utf8($w), 't', $WAIT_TIMEOUT, dbname => $sdb))
			{
				fail("$where: wait-for did not become true within ${WAIT_TIMEOUT}s: $w");
				$failed++;
			}
		}

		my $sql = $b->{sql};
		$sql =~ s/host '10\.0\.0\.5'/host '127.0.0.1'/g;
		$sql =~ s/port '5432'/port '$env->{remote_port}'/g if $env->{remote_port};
		(my $bare = $sql) =~ s/--[^\n]*//g;
		if ($bare !~ /;\s*\z/)
		{
			fail("$where: the block must end with a semicolon");
			$failed++;
			next;
		}
		$sql = "SET ROLE $b->{role};\n$sql\nRESET ROLE;" if $b->{role};

		my ($ok, $out, $err) = _session_run($s, $sql);
		my @errors = ($err =~ /^(?:psql:[^:]*:\d+:\s*)?(?:ERROR|FATAL|PANIC):  ([0-9A-Z]{5}):/mg);
		if (!$ok)
		{
			fail("$where: psql did not finish the block within ${BLOCK_TIMEOUT}s\n$err");
			$failed++;
			# the session is unusable; start a new one for the next block
			$s->{h}->kill_kill;
			delete $sessions{$key};
			next;
		}
		if (defined $b->{error})
		{
			if (!grep { $_ eq $b->{error} } @errors)
			{
				fail("$where: expected an error with SQLSTATE $b->{error}, got "
					  . (@errors ? join(', ', @errors) : 'none') . "\n$err");
				$failed++;
				next;
			}
			$out .= _reader_errors($err);
		}
		elsif (@errors)
		{
			fail("$where: the block failed\n" . _reader_errors($err));
			$failed++;
			next;
		}

		if (defined $b->{output})
		{
			my $got  = _normalize($out);
			my $want = _normalize($b->{output});
			if (_matches($got, $want))
			{
				pass("$where: output as documented (line $b->{output_line})");
			}
			else
			{
				fail("$where: output differs from the one documented at line $b->{output_line}");
				diag(_diff($want, $got));
				$failed++;
			}
		}
		else
		{
			pass("$where: ran");
		}
	}

	_session_stop($_) for values %sessions;
	_query($node, 'postgres', "DROP DATABASE IF EXISTS $_ WITH (FORCE)") for ($db, keys %local_dbs);
	_drop_roles($node);
	if ($env->{remote})
	{
		_query($env->{remote}, 'postgres', "DROP DATABASE IF EXISTS $_ WITH (FORCE)")
		  for keys %remote_dbs;
		_drop_roles($env->{remote}) if %remote_dbs;
	}
	return $failed;
}

1;
