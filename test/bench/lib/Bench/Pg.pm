#
# test/bench/lib/Bench/Pg.pm -- the servers of a run and SQL on them.
#
# start_cluster() starts a throwaway server with the bench settings (any
# benchmark may start its own, with extra settings); bench_node() is the
# shared bench server, started by the first benchmark that needs it, with
# streamguard, PgQ and the suite's SQL helpers, and what can run on it
# (have()).  SQL goes to the current node ($NODE, or node => ...);
# on_node() makes a node current, for psql and pgbench too (PGHOST, PGPORT).
# SQL runs through psql by PostgreSQL::Test::Cluster, which run.pl loads.
#
package Bench::Pg;

use strict;
use warnings;

use Exporter qw(import);

use Bench;

our @EXPORT = qw($NODE sql sql_try sql_value checkpoint sql_file_once psql_file start_cluster bench_node have on_node);

our $NODE;     # the current node
my $MAIN;      # the bench server, once started
my @NODES;     # every node started, to stop at the end
my %HAVE;      # sg_lib (the library is installed), sg (the extension), pipe (its pipelines), pgq
my %ONCE;      # "port|file" => 1: SQL files run once per node
my $VERSION;   # server_version of the first node

sub user { return scalar getpwuid($<); }

# what can run: sg_lib, sg, pipe, pgq (the last three: on the bench server,
# once it runs)
sub have
{
	my ($what) = @_;
	if (!exists $HAVE{sg_lib})
	{
		my $pkglib = Bench::pg_config($ENV{PG_CONFIG}, '--pkglibdir');
		my $share  = Bench::pg_config($ENV{PG_CONFIG}, '--sharedir');
		$HAVE{sg_lib} = -f "$pkglib/streamguard.so" && -f "$share/extension/streamguard.control";
		$HAVE{pgq_lib} = -f "$share/extension/pgq.control";
	}
	return $HAVE{$what};
}

sub main_started   { return defined $MAIN; }
sub server_version { return $VERSION // 'unknown'; }

# A bench cluster: the settings below first put the test settings of
# PostgreSQL::Test::Cluster (fsync off, every statement logged, wal_level
# minimal, ...) back to PostgreSQL's defaults; @extra_conf lines come last
# (a benchmark's own settings win).  Returns the started node (with a database
# "bench"), or nothing.
sub start_cluster
{
	my ($name, @extra_conf) = @_;
	my $preload = have('sg_lib') ? 'streamguard' : '';
	for my $try (1 .. 3)   # a failed start may be a port race: a new node, a new port
	{
		my $node = PostgreSQL::Test::Cluster->new($try == 1 ? $name : "${name}_$try");
		$node->init(extra => [ '-E', 'UTF8', '--no-locale', '--auth-local=trust', '--auth-host=scram-sha-256' ]);
		$node->append_conf('postgresql.conf', <<"EOF" . join("\n", @extra_conf));
# --- streamguard benchmark cluster (2-core box) ---
fsync = on
log_statement = none
wal_level = replica
max_wal_senders = 10
restart_after_crash = on
log_line_prefix = '%m [%p] '
log_replication_commands = off
wal_retrieve_retry_interval = '5s'
listen_addresses = '127.0.0.1'
shared_preload_libraries = '$preload'
max_connections = 40
shared_buffers = $K{BENCH_SHARED_BUFFERS}
synchronous_commit = on
max_wal_size = 4GB
checkpoint_timeout = 15min
log_min_messages = warning
log_checkpoints = on
log_autovacuum_min_duration = 0
# latency benchmark: commit times of the append and of the sink transaction
track_commit_timestamp = on
EOF
		next unless $node->start(fail_ok => 1);
		push @NODES, $node;
		$node->safe_psql('postgres', 'CREATE DATABASE bench');
		$VERSION //= $node->safe_psql('bench', 'SHOW server_version');
		log_msg("$name server up on port ", $node->port, ' (socket dir ', $node->host, "), preload='$preload'");
		return $node;
	}
	return;
}

# stops every node started (fast), the last started first
sub stop_all
{
	$_->stop('fast', fail_ok => 1) for reverse @NODES;
	@NODES = ();
	return;
}

# The bench server, started on first use, made the current node and the
# default of psql and pgbench (PGHOST ...), with what it can run: streamguard
# (have sg), its pipelines and the wait procedure (pipe), PgQ (pgq), and
# sql/setup.sql.  Dies when it cannot start.
sub bench_node
{
	return $MAIN if $MAIN;
	no warnings "once";
	$MAIN = $NODE = start_cluster('bench')
	  or die "bench: could not start the server (see $PostgreSQL::Test::Utils::log_path)\n";
	@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER PGAPPNAME PGOPTIONS)} =
	  ($MAIN->host, $MAIN->port, 'bench', user(), 'streamguard-bench', '-c client_min_messages=warning');
	if (!have('sg_lib'))
	{
		log_msg('streamguard is not installed (streamguard.so missing): its rows will be pending');
	}
	else
	{
		my ($ok, undef, $err) = sql_try('CREATE EXTENSION streamguard');
		$HAVE{sg} = $ok;
		log_msg("CREATE EXTENSION streamguard failed: $err") unless $ok;
	}
	if ($HAVE{sg} && sql("SELECT to_regproc('streamguard.create_pipeline') IS NOT NULL") eq 't')
	{
		my ($ok, undef, $err) = sql_try(slurp("$SQL/setup_pipeline.sql"));
		$HAVE{pipe} = $ok;
		log_msg("could not create the pipeline wait procedure: $err") unless $ok;
	}
	log_msg('streamguard pipelines not available: their rows will be pending') unless $HAVE{pipe};
	$HAVE{pgq} = have('pgq_lib') && (sql_try('CREATE EXTENSION pgq'))[0];
	log_msg('PgQ not available: its rows will be pending') unless $HAVE{pgq};
	sql_try(slurp("$SQL/setup.sql"));
	return $MAIN;
}

# runs $code with $node current (SQL, psql and pgbench go to it); $node
# undef: the current one
sub on_node
{
	my ($node, $code) = @_;
	return $code->() unless $node;
	local $NODE = $node;
	local @ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} = ($node->host, $node->port, 'bench', user());
	return $code->();
}

# ---------------------------------------------------------------------------
# SQL on the current node (or node => another).  No statement may take longer
# than $SQL_TIMEOUT seconds (or timeout => ...).
# ---------------------------------------------------------------------------
my $SQL_TIMEOUT = 600;

# dies on error, like the TAP tests' safe_psql
sub sql
{
	my ($sql, %o) = @_;
	return ($o{node} // $NODE)->safe_psql('bench', $sql, timeout => $o{timeout} // $SQL_TIMEOUT);
}

# returns (ok, stdout, stderr)
sub sql_try
{
	my ($sql, %o) = @_;
	my ($rc, $out, $err) = ($o{node} // $NODE)->psql(
		'bench', $sql,
		timeout   => $o{timeout} // $SQL_TIMEOUT,
		timed_out => \my $timed_out);
	$err .= "\nERROR:  timed out after " . ($o{timeout} // $SQL_TIMEOUT) . ' s' if $timed_out;
	return (!$timed_out && defined $rc && $rc == 0, $out, $err);
}

# the value a query returns, or undef when it fails
sub sql_value
{
	my ($ok, $out) = sql_try(@_);
	return $ok ? $out : undef;
}

sub checkpoint { my (%o) = @_; sql('CHECKPOINT', %o); return; }

# runs sql/$file once per node (later calls do nothing)
sub sql_file_once
{
	my ($file, %o) = @_;
	my $node = $o{node} // $NODE;
	sql(slurp("$SQL/$file"), %o) unless $ONCE{ $node->port . "|$file" }++;
	return;
}

# psql -f $file (a path) on the current node with psql variables %$vars,
# stopping at the first error; output into logs/$log.log.  Returns true when
# it succeeded within $timeout s.
sub psql_file
{
	my ($file, $vars, $log, $timeout) = @_;
	my @cmd = ("$BIN/psql", '-X', '-q', '-h', $NODE->host, '-p', $NODE->port, '-d', 'bench', '-v', 'ON_ERROR_STOP=1',
		(map { ('-v', "$_=$vars->{$_}") } sort keys %$vars), '-f', $file);
	my $rc = reap(spawn(\@cmd, "$LOGS/$log.log"), $timeout // 3600);
	return defined $rc && $rc == 0;
}

1;
