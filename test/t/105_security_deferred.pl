# Commit-time code of the pipeline owner must never run as the superuser.
#
# A pipeline's SQL runs as its owner, but the worker (a superuser session)
# commits the batch.  A deferred constraint trigger on the owner's sink
# table would fire at that COMMIT, as the superuser.  The SQL runs in a
# security-restricted operation, where PostgreSQL refuses to queue deferred
# trigger events (42501): the batch fails, the error policy dead-letters the
# events, and the trigger never runs, as anyone.  The same for
# redrive_dead_letters called by a superuser (its COMMIT is the
# superuser's): the redrive fails and the dead letter stays.  The trigger
# function records who ran it and tries to make the attacker a superuser.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('deferred');
$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
CREATE ROLE mallory LOGIN;
GRANT CREATE ON DATABASE postgres TO mallory;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO mallory;
CREATE TABLE public.who_ran (who name, at text);
GRANT INSERT, SELECT ON public.who_ran TO PUBLIC;
});

expect_ok($node, q{
CREATE SCHEMA mal;
CREATE TABLE mal.sink (n int);
CREATE FUNCTION mal.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.who_ran VALUES (current_user, TG_ARGV[0]);
	BEGIN
		EXECUTE 'ALTER ROLE mallory SUPERUSER';
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER late AFTER INSERT ON mal.sink DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION mal.escalate('batch');
SELECT streamguard.create_stream('mal_src', 1);
SELECT streamguard.create_pipeline('mal_p', 'mal_src', $$INSERT INTO mal.sink SELECT (payload->>'n')::int FROM batch$$,
	error_policy => 'dead_letter', max_attempts => 1, retry_backoff => '10 ms', max_backoff => '20 ms');
SELECT count(*) FROM streamguard.append('mal_src', '{"n": 1}');
}, 'mallory sets up a sink with a deferred constraint trigger and a pipeline', user => 'mallory');

ok(wait_for_value($node, q{SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'mal_p'}, '1'),
	'the batch is refused and its event dead-lettered');
is($node->safe_psql('postgres', q{SELECT sqlstate || ' ' || error FROM streamguard.dead_letters WHERE pipeline = 'mal_p'}),
	'42501 cannot fire deferred trigger within security-restricted operation',
	'... because a deferred trigger cannot be queued in the owner\'s restricted context');
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.who_ran}), '0', 'the trigger never ran');
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f',
	'mallory is not a superuser');

# the dead letter, redriven by a superuser: refused the same way, nothing runs
my ($ok, $out, $err) = try_psql($node, q{SELECT streamguard.redrive_dead_letters('mal_p')});
like($err, qr/cannot fire deferred trigger within security-restricted operation/,
	'a superuser\'s redrive of it is refused the same way');
is($node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'mal_p'}), '1',
	'the dead letter stays');
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.who_ran}), '0', 'the trigger never ran');
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f',
	'mallory is still not a superuser');

$node->stop;
done_testing();
