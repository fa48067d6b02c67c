
# Streams on a hot standby (docs/operations.md "Hot standbys").
#
# A standby has no registry of in-flight appends: its counters would be
# loaded once from replayed data, so read() would return events past an
# append still open on the primary and then never see anything new.  Every
# function that reads or moves positions, and append, refuses on a standby
# with SQLSTATE 25006 and a hint to run it on the primary.  The views stay
# readable.  The test uses a real streaming standby and checks, before and
# after promotion-free replay, that:
#  - read, poll, both seeks, append and append_batch fail with 25006, the
#    function's name in the message and the hint;
#  - the primary, meanwhile, reads what it should.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $primary = sg_node('primary', init => { allows_streaming => 1 });
$primary->safe_psql('postgres', q{CREATE EXTENSION streamguard});
$primary->safe_psql('postgres', q{SELECT streamguard.create_stream('sb', 1)});
$primary->safe_psql('postgres',
	q{SELECT streamguard.append('sb', jsonb_build_object('i', g)) FROM generate_series(1, 3) g});

$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;

# an append left open on the primary, and one committed after it
my $open = $primary->background_psql('postgres', on_error_stop => 1);
$open->query_safe(q{BEGIN});
$open->query_safe(q{SELECT streamguard.append('sb', '{"i": 4}')});
$primary->safe_psql('postgres', q{SELECT streamguard.append('sb', '{"i": 5}')});
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', q{SELECT pg_is_in_recovery()}), 't', 'standby in recovery');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM streamguard.stream_partitions}),
	'1', 'views stay readable on a standby');

my %calls = (
	read => q{SELECT count(*) FROM streamguard.read('sb', 0, 0, 100)},
	poll => q{SELECT count(*) FROM streamguard.poll('sb', 'c', 100)},
	seek => q{SELECT streamguard.seek('sb', 'c', 0, 1)},
	'seek' . ' by time' => q{SELECT streamguard.seek('sb', 'c', now() - interval '1 hour')},
	append => q{SELECT streamguard.append('sb', '{"i": 6}')},
	append_batch => q{SELECT streamguard.append_batch('sb', ARRAY['{"i": 7}'::jsonb])},
);
foreach my $what (sort keys %calls)
{
	my $fn = $what =~ s/ by time//r;
	my ($ret, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$calls{$what}", timeout => 60);
	isnt($ret, 0, "$what refused on a standby");
	like($err, qr/25006/, "$what: SQLSTATE read_only_sql_transaction");
	like($err, qr/streamguard\.$fn\(\) cannot run on a hot standby/, "$what: message names the function");
	like($err, qr/Run it on the primary/, "$what: hint names the primary");
}

# the primary reads below the open append only, then everything once it commits
is($primary->safe_psql('postgres', q{SELECT string_agg(payload->>'i', ',' ORDER BY seq) FROM streamguard.read('sb', 0, 0, 100)}),
	'1,2,3', 'primary: read stops below the open append');
$open->query_safe(q{COMMIT});
$open->quit;
is($primary->safe_psql('postgres', q{SELECT string_agg(payload->>'i', ',' ORDER BY seq) FROM streamguard.read('sb', 0, 0, 100)}),
	'1,2,3,4,5', 'primary: read returns every event once the append committed');

$standby->stop;
$primary->stop;
done_testing();
