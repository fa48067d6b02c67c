# pg_upgrade of a cluster with streamguard at work (docs/operations.md,
# "Upgrading PostgreSQL").
#
# First, binary-upgrade mode: pg_upgrade starts the old and the new server
# with "postgres -b"; streamguard must not start its launcher (nor any
# worker) then.  A server with a stream, a pipeline and pending events is
# started with -b: the log says the workers are not started, no
# streamguard process appears and the pipeline does not move; restarted
# normally, the pipeline catches up.
#
# Then, for each target installation, pg_upgrade from this PostgreSQL to
# that one.  The old cluster holds
#   - stream ev (4 partitions, retention with rotating segments, dedup
#     keys), with events in flight: appended while the pipelines run;
#   - pipelines of every guarantee (p_eo exactly_once, p_alo at_least_once,
#     p_amo at_most_once) into local tables, two remote sinks on a second
#     server (p_2pc two_phase, p_off offsets); p_eo paused half-way, p_2pc
#     with a batch in doubt (committed here, still prepared on the sink: its
#     worker exited in between and could not log in again), the others
#     running at the shutdown;
#   - a tumbling window pipeline w_t with open windows;
#   - a captured table whose backfill is in progress, mirrored by a pipeline;
#   - a plain consumer and a consumer group member part-way through ev.
# After pg_upgrade (copy mode) the new cluster has the same views and
# positions; the paused pipeline resumes; p_2pc, which can log in again,
# commits its batch prepared under the old cluster's system identifier (the
# new cluster has another one); with more events appended (and
# one appended again under a dedup key already used, which appends
# nothing), every sink holds every committed event exactly once, the window
# closes with every event counted once, the backfill completes with the
# mirror equal to the table, the consumers resume where they committed.
#
# Targets: the current installation (pg_upgrade between two clusters of the
# same major, always run), and every installation named in
# SG_UPGRADE_TO, a space-separated list of bin directories of newer
# PostgreSQL majors with streamguard installed (scripts/test.sh sets it for
# the majors it built).
#
# The old server is the current installation, except when it stamps a
# column option pg_attver on every column (some builds of PostgreSQL 15 do:
# a fresh cluster has it on its catalogs' columns; newer majors refuse the
# option, so pg_upgrade to them fails at its schema restore, whatever the
# extensions).  Then the upgrades to a newer major start from
# SG_UPGRADE_FROM, the bin directory of an installation of the same major
# without that change (with streamguard and the client programs psql and
# pg_config installed; scripts/test.sh prepares one), and are skipped with
# one line when it is not set.  The output says which old server each
# target uses, and why.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Basename qw(dirname);
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;

my $N = 2000;    # events before the upgrade
my $M = 500;     # events after it
my $ROWS = 1500; # rows of the captured table
my $conf = qq{
streamguard.backfill_chunk_rows = 20
streamguard.backfill_naptime = '300ms'
};

# ------------------------------------------------ binary-upgrade mode ----
{
	my $node = sg_node('binup');
	$node->safe_psql('postgres', q{
CREATE EXTENSION streamguard;
SELECT streamguard.create_stream('s', 2);
CREATE TABLE sink (id bigint);
SELECT streamguard.create_pipeline('p', 's', $$INSERT INTO sink SELECT (payload->>'id')::bigint FROM batch$$);
});
	ok(wait_pipelines_running($node, ['p'], 60), 'binary-upgrade mode: a pipeline runs normally');
	$node->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('p')});
	ok(wait_for_value($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamguard pipeline'}, '0', 60),
		'... paused');
	$node->safe_psql('postgres', q{SELECT streamguard.resume_pipeline('p')});
	$node->stop;
	my $off = log_offset($node);
	command_ok(['pg_ctl', '-w', '-D', $node->data_dir, '-l', $node->logfile, '-o', '-b', 'start'],
		'the server starts in binary-upgrade mode');
	$node->_update_pid(1);
	ok(defined wait_log($node, qr/streamguard: binary-upgrade mode, background workers are not started/, $off, 60),
		'... and says streamguard starts no worker');
	# appends need a transaction: the binary-upgrade server accepts them,
	# but nothing may consume them
	$node->safe_psql('postgres', q{SELECT count(*) FROM streamguard.append_batch('s',
		ARRAY(SELECT jsonb_build_object('id', g) FROM generate_series(1, 50) g))});
	# no launcher, maintenance or pipeline process within a few launcher
	# rounds (the launcher starts within milliseconds of a normal start)
	my $seen = 0;
	for (1 .. 30)
	{
		$seen += q1($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'streamguard%'}) // 0;
		usleep(100_000);
	}
	is($seen, 0, '... no streamguard process runs in binary-upgrade mode');
	is(q1($node, 'SELECT count(*) FROM sink'), '0', '... and the pipeline consumed nothing');
	$node->stop;
	$node->start;
	ok(wait_for_value($node, 'SELECT count(*) FROM sink', '50', 60),
		'restarted normally, the pipeline delivers the events');
	$node->stop;
}

# ------------------------------------------------------------ targets ----
my $current = dirname(`pg_config --bindir` =~ s/\s+$//r);
my @targets = ($current);
# a newer major only, and each once: run on 19, a target of 18 would be a
# downgrade (pg_upgrade refuses it) and 19 itself is the current one
{
	my %seen = ($current => 1);
	for my $to (map { dirname($_) } split ' ', ($ENV{SG_UPGRADE_TO} // ''))
	{
		next if $seen{$to}++;
		if (major_of($to) <= major_of($current))
		{
			diag("pg_upgrade to $to skipped: PostgreSQL " . major_of($to) . ' is not newer than the current '
				  . major_of($current));
			next;
		}
		push @targets, $to;
	}
}
diag('pg_upgrade targets: ' . join(', ', @targets) .
	  ($ENV{SG_UPGRADE_TO} ? '' : ' (only the current major: set SG_UPGRADE_TO to bin directories of newer majors)'));

# whether the current installation stamps pg_attver: a fresh cluster's
# catalog columns carry it
my $stamps = stamped_columns($current);
my $from = $ENV{SG_UPGRADE_FROM} ? dirname($ENV{SG_UPGRADE_FROM} =~ s{/+$}{}r) : undef;
my $i = 0;
for my $install (@targets)
{
	my $n = $i++;
	my $t = 'to PostgreSQL ' . major_of($install);
	my $cur = version_of($current);
	if (!$stamps || major_of($install) == major_of($current))
	{
		diag("$t: old server $cur, the current installation ($current)"
			  . ($stamps ? ': it keeps pg_attver column options, which its own major accepts' : ''));
		run_upgrade($install, $n, $current);
		next;
	}
	my $why = "$cur keeps a pg_attver option on every column ($stamps in a fresh cluster's catalogs),"
	  . " which PostgreSQL " . major_of($install) . " refuses: pg_upgrade from it fails at its schema restore";
	if (!$from)
	{
		diag("$t: SKIPPED: $why; set SG_UPGRADE_FROM to the bin directory of a PostgreSQL "
			  . major_of($current) . " without that change (scripts/test.sh prepares one as root)");
		next;
	}
	my $vfrom = version_of($from);
	if (major_of($from) != major_of($current) || (my $s = stamped_columns($from)))
	{
		diag("$t: SKIPPED: $why; SG_UPGRADE_FROM ($from, $vfrom) is no replacement: "
			  . (major_of($from) != major_of($current) ? 'another major' : "it stamps pg_attver too ($s columns)"));
		next;
	}
	diag("$t: old server $vfrom from SG_UPGRADE_FROM ($from), not the current installation: $why");
	run_upgrade($install, $n, $from);
}
done_testing();

# "PostgreSQL 15.18 (Debian ...)" and 15 of an installation
sub version_of
{
	my ($install) = @_;
	return `$install/bin/postgres --version` =~ s/^postgres \(PostgreSQL\) //r =~ s/\s+$//r;
}

sub major_of
{
	my ($install) = @_;
	return version_of($install) =~ s/^(\d+).*/$1/sr;
}

# the catalog columns with a pg_attver option in a fresh cluster of an
# installation (0 for an unmodified PostgreSQL)
my $probes = 0;

sub stamped_columns
{
	my ($install) = @_;
	my $node = PostgreSQL::Test::Cluster->new('probe' . ++$probes, install_path => $install);
	$node->init;
	$node->start;
	my $n = $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_catalog.pg_attribute WHERE attoptions::text LIKE '%pg_attver=%'});
	$node->stop;
	return $n + 0;
}

# the views and positions an upgrade must carry, as text
sub state_of
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
SELECT 'stream ' || stream || ' ' || partitions || ' ' || coalesce(retention::text, '-') FROM streamguard.streams
UNION ALL
SELECT 'pipeline ' || pipeline || ' ' || source || ' ' || state || ' ' || guarantee || ' '
	|| coalesce(sink_server, '-') || ' ' || coalesce(sink_table, '-') || ' ' || workers
FROM streamguard.pipelines
UNION ALL
SELECT 'consumer ' || stream || ' ' || consumer || ' ' || partition || ' ' || committed_seq || ' ' || lost_events
FROM streamguard.consumers
UNION ALL
SELECT 'window ' || pipeline || ' ' || kind || ' ' || size || ' ' || coalesce(watermark::text, '-') || ' ' || open_windows
FROM streamguard.windows
UNION ALL
SELECT 'capture ' || tab || ' ' || stream FROM streamguard.captures
UNION ALL
SELECT 'dedup ' || count(*) FROM streamguard.append_dedup
UNION ALL
SELECT 'batches ' || pipeline || ' ' || count(*) FROM streamguard.pipeline_batches GROUP BY pipeline
ORDER BY 1});
}

# the sealed segments of the streams (later ones are sealed as time passes)
sub segments_of
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{SELECT stream_id || ' ' || seg || ' ' || coalesce(seq_bounds::text, '-')
FROM streamguard.segment WHERE sealed_at IS NOT NULL ORDER BY 1});
}

# Whether pg_upgrade can carry this PostgreSQL's tables to the new node at
# all: some builds of PostgreSQL 15 keep an attribute option pg_attver on
# every column of every table, which pg_dump copies and a server without
# that change refuses ("unrecognized parameter"): then pg_upgrade fails for
# any table, whatever the extensions.  Returns the reason, or undef.
sub cannot_upgrade
{
	my ($old, $new) = @_;
	return undef unless $old->safe_psql('postgres', q{CREATE TABLE sg_probe (a int);
SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid = 'sg_probe'::pg_catalog.regclass
	AND attoptions::text LIKE '%pg_attver=%';
DROP TABLE sg_probe}) > 0;
	$new->start;
	my ($ret, $out, $err) = $new->psql('postgres',
		'CREATE TABLE sg_probe (a int); ALTER TABLE sg_probe ALTER COLUMN a SET (pg_attver = 1)');
	$new->safe_psql('postgres', 'DROP TABLE IF EXISTS sg_probe');
	$new->stop;
	return undef if $ret == 0;
	return "the old server keeps attribute versions (pg_attver) that the new one does not know ($err)";
}

sub run_upgrade
{
	my ($install, $n, $oldinstall) = @_;
	my $newbin = "$install/bin";
	my $major = major_of($install);
	my $t = "to PostgreSQL $major";

	my $old = sg_node("old$n", extra => $conf, install_path => $oldinstall);
	my $new = PostgreSQL::Test::Cluster->new("new$n", install_path => $install);
	# pg_upgrade wants data checksums on both sides or on neither; initdb
	# of 18 and later enables them by default
	my @cs = $old->safe_psql('postgres', 'SHOW data_checksums') eq 'on' ? ('--data-checksums')
	  : $major >= 18 ? ('--no-data-checksums') : ();
	$new->init(extra => \@cs);
	if (my $why = cannot_upgrade($old, $new))
	{
		diag("$t: SKIPPED, pg_upgrade cannot run here: $why");
		$old->stop;
		return;
	}
	$new->append_conf('postgresql.conf', "shared_preload_libraries = 'streamguard'\n"
		  . "streamguard.maintenance_naptime = '200ms'\nmax_worker_processes = 16\n$conf");
	my $remote = sg_node("sink$n", remote => 1, mpx => 10);
	my $pw = 'Sink-pw-2718';
	$remote->safe_psql('postgres', qq{
CREATE ROLE sinker LOGIN PASSWORD '$pw';
GRANT CREATE ON SCHEMA public TO sinker;
SET ROLE sinker;
CREATE TABLE sink_2pc (id bigint NOT NULL, partition int, seq bigint);
CREATE TABLE sink_off (id bigint NOT NULL, partition int, seq bigint);
});
	$old->safe_psql('postgres', "CREATE EXTENSION streamguard;\n"
		  . remote_server_sql('warehouse', $remote, user => 'sinker', password => $pw) . qq{
SELECT streamguard.create_stream('ev', 4, retention => '30 minutes', segment_interval => '2 s');
CREATE TABLE out_eo (id bigint NOT NULL, partition int, seq bigint);
CREATE TABLE out_alo (LIKE out_eo);
CREATE TABLE out_amo (LIKE out_eo);
CREATE TABLE out_win (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_pipeline('p_eo', 'ev',
	\$\$INSERT INTO out_eo SELECT (payload->>'id')::bigint, partition, seq FROM batch\$\$, batch_size => 50);
SELECT streamguard.create_pipeline('p_alo', 'ev',
	\$\$INSERT INTO out_alo SELECT (payload->>'id')::bigint, partition, seq FROM batch\$\$,
	guarantee => 'at_least_once', batch_size => 50);
SELECT streamguard.create_pipeline('p_amo', 'ev',
	\$\$INSERT INTO out_amo SELECT (payload->>'id')::bigint, partition, seq FROM batch\$\$,
	guarantee => 'at_most_once', batch_size => 50);
SELECT streamguard.create_pipeline('p_2pc', 'ev',
	\$\$SELECT (payload->>'id')::bigint AS id, partition, seq FROM batch\$\$,
	sink_server => 'warehouse', sink_table => 'sink_2pc', batch_size => 50);
SELECT streamguard.create_pipeline('p_off', 'ev',
	\$\$SELECT (payload->>'id')::bigint AS id, partition, seq FROM batch\$\$,
	sink_server => 'warehouse', sink_table => 'sink_off', sink_mode => 'offsets', batch_size => 50);
SELECT streamguard.create_window_pipeline('w_t', 'ev', 'out_win', '1 hour',
	event_time => \$\$payload->>'ts'\$\$, batch_size => 50);

SELECT streamguard.create_stream('cdc', 2);
CREATE TABLE acct (id int PRIMARY KEY, bal numeric NOT NULL);
INSERT INTO acct SELECT g, g FROM generate_series(1, $ROWS) g;
CREATE TABLE mirror (id int PRIMARY KEY, bal numeric NOT NULL);
SELECT streamguard.create_pipeline('mirror', 'cdc', \$\$
	WITH last AS (SELECT DISTINCT ON (key) key, payload->>'op' AS op, payload->'row' AS r
		FROM batch ORDER BY key, seq DESC),
	gone AS (DELETE FROM mirror m USING last WHERE last.op = 'delete' AND m.id = last.key::int)
	INSERT INTO mirror SELECT (r->>'id')::int, (r->>'bal')::numeric FROM last WHERE op <> 'delete'
	ON CONFLICT (id) DO UPDATE SET bal = excluded.bal\$\$, batch_size => 100);
SELECT streamguard.capture_table('acct', 'cdc');
});
	my @pipes = qw(p_eo p_alo p_amo p_2pc p_off w_t mirror);
	ok(wait_pipelines_running($old, \@pipes, 90), "$t: the old cluster's pipelines run");

	# events 1..N in 20 transactions, in one hour of event time (the
	# window stays open), each with a dedup key; half-way the operator
	# pauses the remote two_phase pipeline (its prepared batch is settled by
	# the worker before it exits) and the exactly_once one: they are left
	# with pending events, the others run into the shutdown
	my $fault_off;
	for my $b (0 .. 19)
	{
		if ($b == 10)
		{
			# p_2pc's worker stops between its local commit and COMMIT
			# PREPARED (held there), and, ended, its next incarnation cannot
			# log in to the sink: the batch stays in doubt through the
			# upgrade (the mapping changes while it holds: a mapping changed
			# under a running worker makes it connect again at its next batch)
			my $off = log_offset($old);
			$old->safe_psql('postgres', q{SELECT streamguard.inject_fault('p_2pc', 'after_local_commit', 'hold')});
			$old->safe_psql('postgres', q{SELECT streamguard.pause_pipeline('p_eo')});
			ok(wait_for_value($old, q{SELECT count(*) FROM streamguard.pipelines p JOIN pg_stat_activity a ON a.pid = p.worker_pid
				WHERE p.pipeline = 'p_eo'}, '0', 60), "$t: p_eo paused");
			$fault_off = $off;
		}
		my ($lo, $hi) = ($b * $N / 20 + 1, ($b + 1) * $N / 20);
		$old->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.append_batch('ev',
	ARRAY(SELECT jsonb_build_object('id', g, 'ts', '2030-01-01 10:00:00+00'::timestamptz + g * interval '1 s')
		FROM generate_series($lo, $hi) g),
	ARRAY(SELECT 'k' || (g % 7) FROM generate_series($lo, $hi) g),
	ARRAY(SELECT 'd' || g FROM generate_series($lo, $hi) g))});
		# capture traffic during the backfill
		$old->safe_psql('postgres', qq{UPDATE acct SET bal = bal + 1 WHERE id % 20 = $b});
	}
	# consumers part-way: a plain one and a group member
	is($old->safe_psql('postgres', q{SELECT count(*) FROM streamguard.poll('ev', 'c1', 300)}), '300',
		"$t: consumer c1 read 300 events");
	is($old->safe_psql('postgres', q{SELECT count(*) FROM streamguard.poll('ev', 'g', 200, member => 'm1')}), '200',
		"$t: group member m1 read 200 events");
	ok(wait_for_value($old, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'acct'::regclass}, 'running', 60),
		"$t: the backfill is in progress");
	ok(wait_for_value($old, q{SELECT open_windows > 0 FROM streamguard.windows WHERE pipeline = 'w_t'}, 't', 60),
		"$t: the window pipeline has open windows");

	ok(defined wait_log($old, qr/pipeline "p_2pc": injected fault, holding/, $fault_off, 180),
		"$t: p_2pc holds with a batch in doubt");
	$old->safe_psql('postgres', q{ALTER USER MAPPING FOR CURRENT_USER SERVER warehouse OPTIONS (SET password 'wrong')});
	my $held = q1($old, q{SELECT worker_pid FROM streamguard.pipelines WHERE pipeline = 'p_2pc'});
	is(q1($old, qq{SELECT pg_terminate_backend($held)}), 't', "$t: ... and is ended there");
	ok(wait_for_value($old, qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $held}, '0', 60), "$t: ... gone");
	my $old_sysid = q1($old, 'SELECT system_identifier FROM pg_catalog.pg_control_system()');
	is(q1($old, q{SELECT count(*) FROM streamguard.remote_prepared}) . ' '
		  . q1($remote, q{SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'sg:%'}), '1 1',
		"$t: at the upgrade p_2pc has a batch committed here and prepared on the sink");
	my $eo_pos = $old->safe_psql('postgres', q{SELECT partition || ':' || committed_seq FROM streamguard.consumers
		WHERE consumer IN ('c1', 'g') ORDER BY consumer, partition});
	$old->stop;
	my ($before, $segs_before) = state_of_stopped($old);

	# ------------------------------------------------------- pg_upgrade
	my $oldbin = "$oldinstall/bin";
	my $out = PostgreSQL::Test::Utils::tempdir();
	my ($stdout, $stderr);
	my $ok;
	{
		local $ENV{PATH} = "$newbin:$ENV{PATH}";
		local $ENV{LD_LIBRARY_PATH} = "$install/lib" . ($ENV{LD_LIBRARY_PATH} ? ":$ENV{LD_LIBRARY_PATH}" : '');
		$ok = IPC::Run::run(["$newbin/pg_upgrade", '--no-sync', '-d', $old->data_dir, '-D', $new->data_dir,
				'-b', $oldbin, '-B', $newbin, '-s', $new->host, '-p', $old->port, '-P', $new->port],
			'>', \$stdout, '2>', \$stderr, init => sub { chdir $out });
	}
	ok($ok, "$t: pg_upgrade succeeds") or diag("stdout:\n$stdout\nstderr:\n$stderr");
	return unless $ok;
	$new->start;

	# ------------------------------------------------------------ after
	is($new->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'streamguard'}), '0.3',
		"$t: the extension is there");
	my $after = state_of($new);
	is($after, $before, "$t: views and positions as before the upgrade")
	  or diag(diff_lines($before, $after));
	my $segs_after = segments_of($new);
	is(join("\n", grep { index("\n$segs_after\n", "\n$_\n") < 0 } split /\n/, $segs_before), '',
		"$t: the sealed segments are all there");
	for my $p (qw(p_eo p_2pc))
	{
		my $done = 0;
		$done += $1 while $before =~ /^consumer ev pipeline:$p \d+ (\d+) /mg;
		cmp_ok($done, '<', $N, "$t: $p was held mid-stream ($done of $N events)");
	}
	is($new->safe_psql('postgres', q{SELECT partition || ':' || committed_seq FROM streamguard.consumers
		WHERE consumer IN ('c1', 'g') ORDER BY consumer, partition}), $eo_pos, "$t: consumer positions kept");
	$new->safe_psql('postgres', qq{ALTER USER MAPPING FOR CURRENT_USER SERVER warehouse OPTIONS (SET password '$pw');
		SELECT streamguard.resume_pipeline('p_eo')});

	# an event again under a used dedup key: nothing appended
	$new->safe_psql('postgres', q{SELECT streamguard.append('ev', '{"id": -5}', 'k5', dedup_key => 'd5')});
	$new->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.append_batch('ev',
	ARRAY(SELECT jsonb_build_object('id', g, 'ts', '2030-01-01 10:00:00+00'::timestamptz + g * interval '1 s')
		FROM generate_series($N + 1, $N + $M) g),
	ARRAY(SELECT 'k' || (g % 7) FROM generate_series($N + 1, $N + $M) g),
	ARRAY(SELECT 'd' || g FROM generate_series($N + 1, $N + $M) g))});
	# an event an hour later in every partition closes the window of 10:00
	my $total = $N + $M + 4;
	$new->safe_psql('postgres', qq{SELECT count(*) FROM generate_series(0, 3) p,
		streamguard.append('ev', jsonb_build_object('id', $N + $M + 1 + p, 'ts', '2030-01-01 12:00:00+00'), 'z',
			dedup_key => 'z' || p, partition => p)});
	$new->safe_psql('postgres', q{UPDATE acct SET bal = bal * 2 WHERE id % 3 = 0});

	for my $tab (qw(out_eo out_alo out_amo))
	{
		ok(wait_for_value($new, "SELECT count(DISTINCT id) FROM $tab", $total, 120),
			"$t: $tab has every committed event") or diag(pipelines_report($new));
		is($new->safe_psql('postgres', "SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) || ' ' || max(id)
			FROM $tab"), "$total $total 1 $total", "$t: $tab: no duplicate, nothing else");
	}
	for my $tab (qw(sink_2pc sink_off))
	{
		ok(wait_for_value($remote, "SELECT count(DISTINCT id) FROM $tab", $total, 120),
			"$t: remote $tab has every committed event") or diag(pipelines_report($new));
		is($remote->safe_psql('postgres', "SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) || ' ' || max(id)
			FROM $tab"), "$total $total 1 $total", "$t: remote $tab: no duplicate, nothing else");
	}
	ok(wait_for_value($new, q{SELECT coalesce(sum(events), 0) FROM out_win WHERE window_start = '2030-01-01 10:00:00+00'},
		$N + $M, 120), "$t: the window open across the upgrade counts every event once")
	  or diag($new->safe_psql('postgres', 'SELECT * FROM streamguard.windows'));
	is($new->safe_psql('postgres', q{SELECT count(*) FROM streamguard.remote_prepared}), '0',
		"$t: no in-doubt batch recorded");
	is($remote->safe_psql('postgres', q{SELECT count(*) FROM pg_prepared_xacts}), '0',
		"$t: no prepared transaction left on the remote");
	ok(wait_for_value($new, q{SELECT backfill_state FROM streamguard.captures WHERE tab = 'acct'::regclass}, 'done', 180),
		"$t: the backfill resumes and completes");
	ok(wait_for_value($new, q{SELECT count(*) FROM (SELECT * FROM acct EXCEPT SELECT * FROM mirror) d}, '0', 120)
		  && wait_for_value($new, q{SELECT count(*) FROM (SELECT * FROM mirror EXCEPT SELECT * FROM acct) d}, '0', 60),
		"$t: the mirror equals the captured table");
	is($new->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.poll('ev', 'c1', $total)}), $total - 300,
		"$t: consumer c1 resumes after its 300 events");
	is($new->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.poll('ev', 'g', $total, member => 'm1')}),
		$total - 200, "$t: group member m1 resumes after its 200 events");
	# the retained segments hold every event: a new consumer reads them all
	is($new->safe_psql('postgres', qq{SELECT count(*) FROM streamguard.poll('ev', 'audit', 2 * $total)}), $total,
		"$t: the stream holds every event once");
	isnt(q1($new, 'SELECT system_identifier FROM pg_catalog.pg_control_system()'), $old_sysid,
		"$t: the new cluster has a system identifier of its own");
	ok(count_log($new, qr/pipeline "p_2pc": committing in-doubt remote transaction 'sg:$old_sysid:/) == 1,
		"$t: p_2pc committed its batch prepared before the upgrade, under the old system identifier");
	is($new->safe_psql('postgres', q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'p_2pc'}), 'running',
		"$t: p_2pc runs");

	$new->stop;
	$remote->stop;
}

# the lines only in one of two texts, for diag
sub diff_lines
{
	my ($a, $b) = @_;
	my %a = map { $_ => 1 } split /\n/, $a;
	my %b = map { $_ => 1 } split /\n/, $b;
	return join("\n", 'only before:', grep({ !$b{$_} } split /\n/, $a), 'only after:', grep({ !$a{$_} } split /\n/, $b));
}

# the state of a stopped cluster: started once more (pg_upgrade's copy
# mode leaves it as it was), with the pipelines held back by binary-upgrade
# mode so that nothing moves
sub state_of_stopped
{
	my ($node) = @_;
	command_ok([$node->installed_command('pg_ctl'), '-w', '-D', $node->data_dir, '-l', $node->logfile, '-o', '-b', 'start'],
		'the old cluster starts in binary-upgrade mode to read its state');
	$node->_update_pid(1);
	my @s = (state_of($node), segments_of($node));
	$node->stop;
	return @s;
}
