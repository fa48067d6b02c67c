#
# test/bench/lib/Bench/Broker.pm -- the test Kafka broker of the benchmarks:
# test/kafka/sg_mock_broker (librdkafka's in-memory mock cluster on
# loopback), driven over its standard input and output, one command a line
# ("topic <name> <partitions>", "produce_json <topic> <n>", "watermarks
# <topic> <partition>"), each answered by one line ("ok ...").  Started and
# stopped by its pid; every answer is awaited at most 120 s.
#
package Bench::Broker;

use strict;
use warnings;

use IPC::Run ();

use Bench;

my %RUNNING;   # pid => broker, stopped at exit if still running

# starts the broker ($tool), its standard error into $log; dies when it does
# not say where it listens
sub start
{
	my ($class, $tool, $log) = @_;
	my ($in, $out) = ('', '');
	my $timer = IPC::Run::timeout(120);
	my $h = IPC::Run::start([$tool], '<', \$in, '>', \$out, '2>', $log, $timer);
	my $self = bless { h => $h, in => \$in, out => \$out, timer => $timer, pid => $h->{KIDS}[0]{PID} }, $class;
	$RUNNING{ $self->{pid} } = $self;
	($self->{bootstrap}) = $self->line =~ /^bootstrap (\S+)/ or die "bench: the broker did not start (see $log)\n";
	return $self;
}

sub bootstrap { return $_[0]{bootstrap}; }

# the next line of its output
sub line
{
	my ($self) = @_;
	$self->{timer}->start(120);
	my $out = $self->{out};
	$self->{h}->pump until $$out =~ s/^([^\n]*)\n//;
	return $1;
}

# sends a command; returns its answer, dies unless it is "ok ..."
sub cmd
{
	my ($self, $cmd) = @_;
	${ $self->{in} } .= "$cmd\n";
	my $line = $self->line;
	die "bench: sg_mock_broker: [$cmd] answered [$line]\n" unless $line =~ /^ok/;
	return $line;
}

# TERM, at most 5 s, then KILL
sub stop
{
	my ($self) = @_;
	return unless delete $RUNNING{ $self->{pid} };
	eval { $self->{h}->kill_kill(grace => 5); 1 } or kill 'KILL', $self->{pid};
	return;
}

END
{
	my $rc = $?;
	$_->stop for values %RUNNING;
	$? = $rc;
}

1;
