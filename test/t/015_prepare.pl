
# Two-phase commit and appends (docs/sql-reference.md, append: "A transaction
# that appended cannot be prepared (PREPARE TRANSACTION fails with 0A000)").
#
#  - PREPARE TRANSACTION of a transaction that appended fails with 0A000 and a
#    message that says why; nothing is left prepared, the event is never
#    delivered and the horizon is not stuck behind it;
#  - the same for append_batch and for an append inside a released savepoint;
#  - a prepared transaction that did not append still works (COMMIT PREPARED
#    and ROLLBACK PREPARED), and does not hold the horizon back while prepared.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $node = sg_node('prepare', mpx => 4);

$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('pp', 1);
CREATE TABLE t (a int);
});

sub try_prepare
{
	my ($what, $body, $gid) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nBEGIN;\n$body\nPREPARE TRANSACTION '$gid';\nROLLBACK;\nSELECT 'still alive';\n",
		on_error_stop => 0);
	like($err, qr/ERROR:\s+0A000:/, "$what: PREPARE TRANSACTION fails with 0A000")
	  or diag $err;
	like($err, qr/ERROR:\s+0A000:[^\n]*(prepare|two-phase|2PC)/i,
		"$what: the error message says it is about PREPARE")
	  or diag $err;
	note "PREPARE error: $1" if $err =~ /(ERROR:[^\n]*)/;
	like($out, qr/still alive/, "$what: session still usable afterwards");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_prepared_xacts WHERE gid = '$gid'"),
		'0', "$what: nothing left prepared");
}

sub val { return $node->safe_psql('postgres', $_[0]) }

# prepare a transaction that inserts $n into t, as $gid
sub prepare_insert
{
	my ($n, $gid) = @_;
	val(qq{BEGIN; INSERT INTO t VALUES ($n); PREPARE TRANSACTION '$gid';});
}

# append {"tag": $tag}, then what consumer c polls: "tag,tag,..."
sub append_and_poll
{
	my ($tag) = @_;
	val(qq{SELECT streamguard.append('pp', '{"tag": "$tag"}')});
	return val(q{SELECT string_agg(payload->>'tag', ',' ORDER BY seq) FROM streamguard.poll('pp', 'c', 100)});
}

try_prepare('append',
	q{SELECT streamguard.append('pp', '{"tag": "phantom-1"}');}, 'g1');
try_prepare('append_batch',
	q{SELECT count(*) FROM streamguard.append_batch('pp', ARRAY['{"tag": "phantom-2"}', '{"tag": "phantom-3"}']::jsonb[]);},
	'g2');
try_prepare('append in a released savepoint',
	q{SAVEPOINT s; SELECT streamguard.append('pp', '{"tag": "phantom-4"}'); RELEASE SAVEPOINT s;},
	'g3');
try_prepare('append with a dedup key',
	q{SELECT streamguard.append('pp', '{"tag": "phantom-5"}', dedup_key => 'dk1');},
	'g4');

# A prepared transaction that did not append works, and an append committed
# while it is prepared is readable.
prepare_insert(1, 'ok1');
is(val(q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'ok1'}),
	'1', 'a transaction that did not append can be prepared');
is(append_and_poll('committed-1'), 'committed-1',
	'a prepared transaction does not hold the horizon back; no phantom from failed prepares');
val(q{COMMIT PREPARED 'ok1'});
is(val('SELECT count(*) FROM t'), '1', 'COMMIT PREPARED works');

prepare_insert(3, 'ok3');
val(q{ROLLBACK PREPARED 'ok3'});
is(val('SELECT count(*) FROM t'), '1', 'ROLLBACK PREPARED works');

# The dedup key of the failed prepare was never committed.
my $r = $node->safe_psql('postgres',
	q{SELECT seq FROM streamguard.append('pp', '{"tag": "committed-2"}', dedup_key => 'dk1')});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(seq || ':' || (payload->>'tag'), ',' ORDER BY seq) FROM streamguard.poll('pp', 'c', 100)}),
	"$r:committed-2",
	'dedup key of a failed prepare is free; its append is a new event');

# Prepared transactions survive a restart; the stream still works after.
prepare_insert(4, 'ok4');
$node->restart;
is(append_and_poll('committed-3'), 'committed-3',
	'horizon not held back by a prepared transaction recovered at startup');
$node->safe_psql('postgres', q{COMMIT PREPARED 'ok4'});
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'2', 'recovered prepared transaction commits');

$node->stop;
done_testing();
