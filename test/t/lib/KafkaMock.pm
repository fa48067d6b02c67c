
# KafkaMock: the Kafka test broker of the TAP tests (test/kafka/sg_mock_broker,
# librdkafka's mock cluster on loopback), started and driven from Perl.
#
#   my $k = KafkaMock->start;          # builds nothing: make kafka-tools
#   KafkaMock->start(port => 9092)     # bootstrap at a fixed port (--port)
#   $k->bootstrap                      # "127.0.0.1:port"
#   $k->cmd('topic orders 4')          # "ok ..." or dies with the error
#   $k->try_cmd('...')                 # the answer line, never dies
#   $k->kill9; $k->stop                # SIGKILL / quit and reap
#   $k->freeze; $k->thaw               # SIGSTOP / SIGCONT: a broker that hangs
#                                      # (connections accepted, never answered)
#   $k->audit($node, $topic)           # the topic, read_committed, into table audit
#   $k->check_topic($node, $topic, $n, $what)  # a sink test's events: once, in order
#
# Every command is bounded (60 s); a broker that does not answer is killed
# and the test dies.  See docs/kafka.md for what the mock cannot model.

package KafkaMock;

use strict;
use warnings;

use FindBin;
use IPC::Run ();
use PostgreSQL::Test::Utils ();
use Test::More;

our $BROKER = "$FindBin::RealBin/../kafka/sg_mock_broker";

sub start
{
	my ($class, %opt) = @_;
	die "$BROKER is missing: run make kafka-tools\n" unless -x $BROKER;
	my $self = bless { in => '', out => '', err => '' }, $class;
	$self->{timer} = IPC::Run::timeout(60);
	my @args = (defined $opt{port} ? ('--port', $opt{port}) : (), $opt{brokers} // 1);
	$self->{h} = IPC::Run::start([ $BROKER, @args ],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err}, $self->{timer});
	my $line = $self->_line;
	die "sg_mock_broker did not start: $line $self->{err}\n" unless $line =~ /^bootstrap (\S+)$/;
	$self->{bootstrap} = $1;
	return $self;
}

sub bootstrap { return $_[0]->{bootstrap} }

sub pid { return $_[0]->{h}{KIDS}[0]{PID} }

sub _line
{
	my ($self) = @_;
	$self->{timer}->start(60);
	$self->{h}->pump until $self->{out} =~ s/^([^\n]*)\n//;
	return $1;
}

# the broker's answer to one command line, whatever it is
sub try_cmd
{
	my ($self, $line) = @_;
	$self->{in} .= "$line\n";
	return $self->_line;
}

# one command that must succeed: its answer after "ok"
sub cmd
{
	my ($self, $line) = @_;
	my $answer = $self->try_cmd($line);
	die "sg_mock_broker: [$line] answered [$answer]\n" unless $answer =~ /^ok ?(.*)$/;
	return $1;
}

# audit($node, $topic): the read_committed audit consumer (the broker's
# "dump") of $topic loaded into table audit on $node (partition, off, key,
# value, headers; created if missing); returns how many messages it read
sub audit
{
	my ($self, $node, $topic) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir() . '/audit.tsv';
	my $n = $self->cmd("dump $topic $file");
	$node->safe_psql('postgres', qq{
CREATE TABLE IF NOT EXISTS audit (partition int, off bigint, key text, value text, headers text);
TRUNCATE audit; COPY audit FROM '$file'});
	return $n;
}

# check_topic($node, $topic, $total, $what): a sink test's topic holds the
# events {"i": i}, i = 0 .. $total - 1, each once, keyed k<i> into partition
# i % 4, in order per partition
sub check_topic
{
	my ($self, $node, $topic, $total, $what) = @_;
	is($self->audit($node, $topic), $total, "$what: $total messages in the topic");
	is($node->safe_psql('postgres', q{SELECT count(DISTINCT (value::jsonb->>'i')::int), min((value::jsonb->>'i')::int), max((value::jsonb->>'i')::int) FROM audit}),
		"$total|0|" . ($total - 1), "$what: every event exactly once")
	  or diag($node->safe_psql('postgres', q{SELECT value, count(*) FROM audit GROUP BY 1 HAVING count(*) > 1 ORDER BY 1 LIMIT 10}));
	is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT (value::jsonb->>'i')::int AS i, lag((value::jsonb->>'i')::int) OVER (PARTITION BY partition ORDER BY off) AS prev FROM audit) s
WHERE prev IS NOT NULL AND i <= prev}), '0', "$what: order kept per partition");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM audit WHERE partition <> (value::jsonb->>'i')::int % 4 OR key <> 'k' || (value::jsonb->>'i')}),
		'0', "$what: keys and partitions as the SELECT said");
	return;
}

# a frozen broker answers no command either: thaw it before the next one
sub freeze { my ($self) = @_; kill 'STOP', $self->pid; return; }
sub thaw { my ($self) = @_; kill 'CONT', $self->pid; return; }

sub kill9
{
	my ($self) = @_;
	return unless $self->{h};
	kill 'KILL', $self->pid;
	eval { $self->{h}->finish };
	delete $self->{h};
}

sub stop
{
	my ($self) = @_;
	return unless $self->{h};
	eval { $self->{in} .= "quit\n"; $self->{h}->finish; 1 } or $self->kill9;
	delete $self->{h};
}

sub DESTROY { my ($self) = @_; $self->kill9 if $self->{h}; }

1;
