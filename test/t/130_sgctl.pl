# sgctl, the command-line tool, against a real server: the installed
# binary (pg_config --bindir) runs each subcommand.
#   - usage: --help, --version, usage errors exit 2;
#   - produce: NDJSON from a file and from stdin, CSV, keys and dedup keys
#     taken from (nested) fields (the key decides the partition exactly as
#     append() does; dedup makes a re-run append nothing), a malformed line
#     (exit 1, its line number, everything before it appended, nothing
#     from it on; --skip-bad goes on), a huge line, kill -9 in the middle of
#     a large file and a re-run: every event exactly once;
#   - tail: --from beginning / seq / time / end with --no-follow; following
#     with --from end; --consumer follows a live producer with long-poll
#     and commits positions (a second tail resumes after them); SIGINT ends
#     a waiting tail at once with status 0 and commits nothing;
#   - verify: exit 0 for a clean sink (filled by a real pipeline), 3 with
#     a duplicated, a lost and a phantom row, counted in --json;
#   - hostile names: a stream name with quotes and spaces, a sink table
#     whose name needs quoting, in a schema whose name does too;
#   - top --once (plain text, no escape codes) and top in a pseudo-terminal
#     (draws the frame, quits on "q"); produce's progress line on a terminal;
#   - metrics: the text exposition, and --listen scraped over HTTP.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $node = sg_node('sgctl');
my $sgctl = $node->config_data('--bindir') . '/sgctl';
plan skip_all => "sgctl is not installed in $sgctl (make install)" unless -x $sgctl;

$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
# the test framework sets PGAPPNAME; the name tells sgctl's sessions apart
my $connstr = $node->connstr('postgres') . ' application_name=sgctl';
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $json = JSON::PP->new->canonical;

# sg(\@args, %opt): run sgctl to its end; (exit status, stdout, stderr)
#   stdin => text, timeout => seconds (60)
sub sg
{
	my ($args, %opt) = @_;
	my ($in, $out, $err) = ($opt{stdin} // '', '', '');
	my @cmd = ($sgctl, @$args);
	push @cmd, '-d', $connstr unless $opt{noconn};
	eval {
		IPC::Run::run(\@cmd, '<', \$in, '>', \$out, '2>', \$err,
			IPC::Run::timeout($opt{timeout} // 60));
	};
	if ($@)
	{
		diag("sgctl @$args: $@");
		return (-1, $out, $err);
	}
	return ($? >> 8, $out, $err);
}

# sg_start(\@args): sgctl in the background; (harness, \$out, \$err)
sub sg_start
{
	my ($args, %opt) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ $sgctl, @$args, '-d', $connstr ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout($opt{timeout} // 120));
	return ($h, \$out, \$err);
}

# finish a background sgctl; its exit status, or -1 if it had to be killed
sub sg_finish
{
	my ($h) = @_;
	my $ok = eval { $h->finish; 1 };
	if (!$ok)
	{
		diag("sgctl did not end: $@");
		eval { $h->kill_kill };
		return -1;
	}
	return $h->result(0);
}

# pump a background harness until $$ref matches $re, within $secs
sub pump_until_match
{
	my ($h, $ref, $re, $secs) = @_;
	my $deadline = time + $secs;
	while (time < $deadline)
	{
		return 1 if $$ref =~ $re;
		eval { $h->pump_nb };
		usleep(50_000);
	}
	return $$ref =~ $re ? 1 : 0;
}

sub write_file
{
	my ($name, $text) = @_;
	my $path = "$tmp/$name";
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh $text;
	close $fh;
	return $path;
}

sub sql { return $node->safe_psql('postgres', $_[0]) }

# ------------------------------------------------------------------ usage
{
	my ($rc, $out, $err) = sg(['--version'], noconn => 1);
	is($rc, 0, '--version exits 0');
	like($out, qr/^sgctl \(streamguard\) \d/, '--version prints the version');
	($rc, $out) = sg(['--help'], noconn => 1);
	is($rc, 0, '--help exits 0');
	like($out, qr/produce.*tail.*top.*verify.*metrics/s, '--help lists the commands');
	for my $cmd (qw(produce tail top verify metrics))
	{
		($rc, $out) = sg([ $cmd, '--help' ], noconn => 1);
		ok($rc == 0 && $out =~ /Usage:\n  sgctl $cmd/, "$cmd --help");
	}
	($rc, $out, $err) = sg([ '-d', 'host=/nonexistent-dir port=1', 'top', '--once' ], noconn => 1);
	is($rc, 1, 'a failed connection exits 1');
	like($err, qr/^sgctl: could not connect: .*nonexistent-dir/, 'a failed connection is reported');
	my @bad = ([], ['nope'], [ 'produce' ], [ 'produce', 's', '--batch', '0' ],
		[ 'produce', 's', '--key', '..' ], [ 'tail', 's', '--from', 'later' ],
		[ 'tail', 's', '--bogus' ], [ 'verify', '--stream', 's' ], [ 'top', 'extra' ],
		[ 'metrics', '--listen', 'noport' ]);
	for my $args (@bad)
	{
		($rc, $out, $err) = sg($args, noconn => 1);
		is($rc, 2, "usage error exits 2: sgctl @$args");
		like($err, qr/Try "sgctl.*--help"/, "usage error points at --help: sgctl @$args");
	}
}

# ---------------------------------------------- produce: keys and dedup
sql(q{SELECT streamguard.create_stream('orders', 4); SELECT streamguard.create_stream('orders_ref', 4)});
my $orders = '';
$orders .= sprintf(qq({"id":%d,"customer":{"name":"c%d"},"amount":%d}\n), $_, $_ % 5, $_ * 10) for 1 .. 40;
my $orders_file = write_file('orders.ndjson', $orders);
{
	my ($rc, $out, $err) = sg([ 'produce', 'orders', $orders_file, '--key', '.customer.name',
		'--dedup', '.id', '--batch', '7' ]);
	is($rc, 0, 'produce from a file exits 0') or diag($err);
	is($err, '', 'no progress line when stderr is not a terminal');
	is($out, qq(40 events sent to stream "orders" in 6 batches\n), 'off a terminal, one summary line on stdout');
	is(sql(q{SELECT count(*) FROM streamguard.streams s, LATERAL (SELECT 1 FROM pg_catalog.generate_series(0, s.partitions - 1) p,
		LATERAL streamguard.read('orders', p, 0, 1000)) e WHERE s.stream = 'orders'}), '40', 'all 40 events appended');

	# the key decides the partition as append(key => ...) does
	sql(q{SELECT streamguard.append('orders_ref', '{}', 'c' || i) FROM generate_series(0, 4) i});
	my $mismatch = sql(q{
		WITH ev AS (SELECT e.* FROM generate_series(0, 3) p, LATERAL streamguard.read('orders', p, 0, 1000) e),
		     ref AS (SELECT e.* FROM generate_series(0, 3) p, LATERAL streamguard.read('orders_ref', p, 0, 1000) e)
		SELECT count(*) FROM ev JOIN ref USING (key) WHERE ev.partition <> ref.partition
		UNION ALL SELECT count(*) FROM ev WHERE key IS DISTINCT FROM 'c' || ((payload->>'id')::int % 5)
		UNION ALL SELECT count(*) FROM ev WHERE dedup_key IS DISTINCT FROM payload->>'id'});
	is($mismatch, "0\n0\n0", 'keys from .customer.name land in their partition; dedup keys from .id');

	($rc, $out, $err) = sg([ 'produce', 'orders', $orders_file, '--key', '.customer.name', '--dedup', '.id', '-q' ]);
	is($rc, 0, 'the same produce again exits 0');
	is($out . $err, '', '--quiet: nothing printed');
	is(sql(q{SELECT sum(retained_events) FROM streamguard.streams WHERE stream = 'orders'}), '40',
		'a re-run appends nothing twice (dedup keys)');
}

# ------------------------------------ produce: stdin, empty lines, CSV
sql(q{SELECT streamguard.create_stream('misc')});
{
	my ($rc, $out, $err) = sg([ 'produce', 'misc', '--dedup-line' ],
		stdin => qq(\xEF\xBB\xBF{"a":1}\n\n   \n{"a":2}\r\n[3, "x"]\n));
	is($rc, 0, 'produce from stdin exits 0') or diag($err);
	is(sql(q{SELECT string_agg(payload::text || '|' || dedup_key, ' ' ORDER BY seq) FROM streamguard.read('misc', 0, 0, 100)}),
		'{"a": 1}|stdin:1 {"a": 2}|stdin:4 [3, "x"]|stdin:5',
		'stdin: a byte order mark and empty lines skipped, CRLF accepted, --dedup-line keys stdin:LINE');
	($rc) = sg([ 'produce', 'misc', '-', '--dedup-line' ], stdin => qq({"a":1}\n\n   \n{"a":2}\r\n[3, "x"]\n));
	is(sql(q{SELECT count(*) FROM streamguard.read('misc', 0, 0, 100)}), '3', 'stdin re-run with --dedup-line: nothing twice');

	sql(q{SELECT streamguard.create_stream('csv', 2)});
	my $csv = write_file('in.csv', qq(id,name,"the note"\r\n1,"Smith, Ann","said ""hi""\nthen left"\r\n\r\n2,Bob,\n3,"",x\n));
	($rc, $out, $err) = sg([ 'produce', 'csv', $csv, '--format', 'csv', '--key', '.name', '--dedup', 'id' ]);
	is($rc, 0, 'produce --format csv exits 0') or diag($err);
	is(sql(q{SELECT string_agg(payload::text, ' ' ORDER BY payload->>'id') FROM generate_series(0, 1) p, LATERAL streamguard.read('csv', p, 0, 100)}),
		'{"id": "1", "name": "Smith, Ann", "the note": "said \"hi\"\nthen left"} {"id": "2", "name": "Bob", "the note": ""} {"id": "3", "name": "", "the note": "x"}',
		'CSV rows become JSON objects of strings (quotes, separators and line breaks in fields)');
	is(sql(q{SELECT string_agg(key || '/' || dedup_key, ' ' ORDER BY dedup_key) FROM generate_series(0, 1) p, LATERAL streamguard.read('csv', p, 0, 100)}),
		'Smith, Ann/1 Bob/2 /3', 'CSV key and dedup key from the named columns');

	$csv = write_file('bad.csv', qq(id,name\n1,a\n2,b,extra\n3,c\n));
	($rc, $out, $err) = sg([ 'produce', 'csv', $csv, '--format', 'csv' ]);
	is($rc, 1, 'a CSV row with the wrong number of fields exits 1');
	like($err, qr/bad\.csv:3: invalid input: row has 3 fields, the header 2/, 'the CSV error names line 3');
}

# ------------------------------------------------ produce: malformed lines
sql(q{SELECT streamguard.create_stream('bad')});
{
	my @lines = map { qq({"id":$_}) } 1 .. 10;
	$lines[6] = '{"id":7,,}';
	my $file = write_file('bad.ndjson', join("\n", @lines) . "\n");
	my ($rc, $out, $err) = sg([ 'produce', 'bad', $file, '--batch', '4', '--dedup', '.id' ]);
	is($rc, 1, 'a malformed line exits 1');
	like($err, qr/bad\.ndjson:7: invalid input: .*character 9/, 'the error names line 7 and the character');
	like($err, qr/6 events before it were appended, none from it on/, 'the error says what was appended');
	is($out, '', 'a failed run prints no summary');
	is(sql(q{SELECT string_agg(payload->>'id', ',' ORDER BY seq) FROM streamguard.read('bad', 0, 0, 100)}),
		'1,2,3,4,5,6', 'lines 1-6 appended (also the half-built batch), nothing from line 7 on');

	($rc, $out, $err) = sg([ 'produce', 'bad', $file, '--skip-bad', '--dedup', '.id' ]);
	is($rc, 0, '--skip-bad exits 0');
	like($err, qr/bad\.ndjson:7: skipped: /, '--skip-bad reports the line');
	is($out, qq(9 events sent to stream "bad" in 1 batch, 1 bad line skipped\n), '--skip-bad: the summary counts the skipped line');
	is(sql(q{SELECT string_agg(payload->>'id', ',' ORDER BY seq) FROM streamguard.read('bad', 0, 0, 100)}),
		'1,2,3,4,5,6,8,9,10', '--skip-bad appends the rest, the re-run nothing twice');

	# jsonb refuses \u0000: caught before sending, not by a failed batch
	($rc, $out, $err) = sg([ 'produce', 'bad' ], stdin => qq({"id":11}\n{"s":"\\u0000"}\n));
	is($rc, 1, '\u0000 exits 1');
	like($err, qr/stdin:2: invalid input: \\u0000/, '\u0000 reported with its line');
	($rc, $out, $err) = sg([ 'produce', 'bad', '--dedup', '.nope' ], stdin => qq({"id":12}\n));
	is($rc, 1, 'a missing --dedup field exits 1');
	like($err, qr/stdin:1: invalid input: no dedup key/, 'a missing dedup field is reported with its line');

	# a huge line (no fixed line buffer)
	my $big = 'y' x (3 * 1024 * 1024);
	($rc, $out, $err) = sg([ 'produce', 'bad' ], stdin => qq({"id":13,"big":"$big"}\n{"id":14}\n));
	is($rc, 0, 'a 3 MB line is appended') or diag($err);
	is(sql(q{SELECT string_agg(length(payload->>'big')::text, ',' ORDER BY seq) FROM streamguard.read('bad', 0, 0, 100) WHERE payload->>'id' IN ('11', '13')}),
		'3145728', 'the huge line arrived whole; the line before the \u0000 one too');

	# a batch the server refuses is reported with its lines, nothing of it appended
	($rc, $out, $err) = sg([ 'produce', 'no_such_stream' ], stdin => qq({"id":1}\n{"id":2}\n));
	is($rc, 1, 'a refused batch exits 1');
	like($err, qr/lines 1-2: batch not appended: ERROR: /, 'a refused batch names its lines');
}

# ------------------------------------- produce: kill -9 mid-run, re-run
sql(q{SELECT streamguard.create_stream('bulk', 3)});
{
	my $n = 150_000;
	my $text = '';
	$text .= qq({"n":$_,"pad":"abcdefghijklmnopqrstuvwxyz0123456789"}\n) for 1 .. $n;
	my $file = write_file('bulk.ndjson', $text);
	my ($h) = sg_start([ 'produce', 'bulk', $file, '--dedup-line', '--batch', '200' ]);
	ok(wait_for_value($node, q{SELECT sum(retained_events) > 2000 FROM streamguard.streams WHERE stream = 'bulk'}, 't', 60),
		'the large produce is under way');
	$h->signal('KILL');
	eval { $h->finish };
	my $at_kill = sql(q{SELECT count(*) FROM generate_series(0, 2) p, LATERAL streamguard.read('bulk', p, 0, 100000) e});
	cmp_ok($at_kill, '<', $n, "killed mid-run ($at_kill of $n appended)");
	my ($rc, $out, $err) = sg([ 'produce', 'bulk', $file, '--dedup-line', '--batch', '200' ], timeout => 300);
	is($rc, 0, 'the re-run completes') or diag($err);
	is(sql(qq{SELECT count(*) || '/' || count(DISTINCT payload->>'n') || '/' || min((payload->>'n')::int) || '/' || max((payload->>'n')::int)
		FROM generate_series(0, 2) p, LATERAL streamguard.read('bulk', p, 0, 100000) e}),
		"$n/$n/1/$n", 'after kill -9 and a re-run every line is in the stream exactly once');

	# SIGINT: the batch in flight rolls back, exit 130, a message
	sql(q{SELECT streamguard.create_stream('bulk2')});
	my $herr;
	($h, undef, $herr) = sg_start([ 'produce', 'bulk2', $file, '--batch', '200' ]);
	ok(wait_for_value($node, q{SELECT sum(retained_events) > 2000 FROM streamguard.streams WHERE stream = 'bulk2'}, 't', 60),
		'another large produce is under way');
	$h->signal('INT');
	is(sg_finish($h), 130, 'SIGINT ends produce with exit status 130');
	like($$herr, qr/interrupted/, 'produce says it was interrupted');
	my $got = sql(q{SELECT count(*) FROM streamguard.read('bulk2', 0, 0, 100000)});
	ok($got > 0 && $got < $n && $got % 200 == 0, "whole batches only ($got events)");

	# the server ends produce's session mid-run: it says how far the input got
	sql(q{SELECT streamguard.create_stream('bulk3')});
	($h, undef, $herr) = sg_start([ 'produce', 'bulk3', $file, '--batch', '200' ]);
	ok(wait_for_value($node, q{SELECT sum(retained_events) > 2000 FROM streamguard.streams WHERE stream = 'bulk3'}, 't', 60),
		'a third large produce is under way');
	sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'sgctl' AND pid <> pg_backend_pid()});
	is(sg_finish($h), 1, 'a lost connection ends produce with exit status 1');
	my ($sent, $batches, $line) = $$herr =~ /(\d+) events in (\d+) batches were sent before line (\d+)/;
	ok(defined $sent, 'produce says how many events and batches went in before the lost connection')
	  or diag($$herr);
	$got = sql(q{SELECT count(*) FROM streamguard.read('bulk3', 0, 0, 100000)});
	# (the session can end after the batch's commit, before its answer:
	# then that batch is in too)
	ok(defined $sent && ($got == $sent || $got == $sent + 200), "... which is what the stream holds ($got)");
	is($line // -1, ($sent // -2) + 1, '... and the line the unacknowledged batch began with');
}

# a following tail without consumer has fixed its positions and reads
my $reading = q{SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'sgctl'
	AND query LIKE '%streamguard.read(%'};

# ------------------------------------------------------- tail, no consumer
{
	my ($rc, $out, $err) = sg([ 'tail', 'orders', '--from', 'beginning', '--no-follow' ]);
	is($rc, 0, 'tail --from beginning --no-follow exits 0');
	my @ev = map { $json->decode($_) } split /\n/, $out;
	is(scalar(@ev), 40, 'tail --from beginning prints every event');
	is(join(',', sort { $a <=> $b } map { $_->{payload}{id} } @ev), join(',', 1 .. 40), 'each event once, payload intact');
	ok(!(grep { !defined $_->{partition} || !defined $_->{seq} || !defined $_->{appended_at} || !exists $_->{key} || !exists $_->{dedup_key} } @ev),
		'every line carries partition, seq, key, dedup_key, appended_at');

	($rc, $out) = sg([ 'tail', 'orders', '--from', 'seq:5', '--no-follow' ]);
	is(scalar(split /\n/, $out),
		sql(q{SELECT count(*) FROM generate_series(0, 3) p, LATERAL streamguard.read('orders', p, 4, 1000)}),
		'tail --from seq:5 prints the events with seq >= 5 of every partition');
	ok(!(grep { $json->decode($_)->{seq} < 5 } split /\n/, $out), 'no seq below 5');

	($rc, $out) = sg([ 'tail', 'orders', '--no-follow', '--max', '3', '--payload-only' ]);
	is(scalar(split /\n/, $out), 3, '--max 3 prints 3 events');
	like((split /\n/, $out)[0], qr/^\{"id": \d+, "amount"/, '--payload-only prints only the payload');

	($rc, $out) = sg([ 'tail', 'orders', '--from', 'end', '--no-follow' ]);
	is($rc . '|' . $out, '0|', 'tail --from end --no-follow prints nothing');

	sql(q{SELECT streamguard.create_stream('tm', 2)});
	sql(q{SELECT streamguard.append('tm', jsonb_build_object('i', i)) FROM generate_series(1, 3) i});
	my $ts = sql(q{SELECT clock_timestamp()});
	usleep(20_000);
	sql(q{SELECT streamguard.append('tm', jsonb_build_object('i', i), 'k' || i) FROM generate_series(4, 5) i});
	($rc, $out) = sg([ 'tail', 'tm', '--from', "time:$ts", '--no-follow', '--payload-only' ]);
	is(join(' ', sort split /\n/, $out), '{"i": 4} {"i": 5}', 'tail --from time: prints the events appended after it');
	($rc, $out, $err) = sg([ 'tail', 'tm', '--from', 'time:yesterdayish', '--no-follow' ]);
	is($rc, 2, 'an invalid --from time exits 2');

	# following from the end: an append shows up, --max ends the run
	my ($h, $hout) = sg_start([ 'tail', 'tm', '--from', 'end', '--max', '1', '--payload-only', '--interval', '0.05' ]);
	ok(wait_for_value($node, $reading, 't', 30), 'the follower is reading');
	sql(q{SELECT streamguard.append('tm', '{"late": true}')});
	is(sg_finish($h), 0, 'tail --from end --max 1 ends after one event');
	is($$hout, qq({"late": true}\n), 'the follower printed the new event only');

	# the same positions through a consumer (seek)
	($rc, $out) = sg([ 'tail', 'tm', '--consumer', 'ct', '--from', "time:$ts", '--no-follow', '--payload-only' ]);
	is(join(' ', sort split /\n/, $out), '{"i": 4} {"i": 5} {"late": true}', 'tail --consumer --from time: seeks the consumer to the time');
	($rc, $out) = sg([ 'tail', 'tm', '--consumer', 'ct', '--from', 'beginning', '--no-follow', '--max', '4' ]);
	is(scalar(split /\n/, $out), 4, 'tail --consumer --from beginning starts over (--max 4)');
	($rc, $out) = sg([ 'tail', 'tm', '--consumer', 'ct', '--from', 'end', '--no-follow' ]);
	is($rc . '|' . $out, '0|', 'tail --consumer --from end prints nothing');
	sql(q{SELECT streamguard.append('tm', '{"after_end": true}')});
	($rc, $out) = sg([ 'tail', 'tm', '--consumer', 'ct', '--no-follow', '--payload-only' ]);
	is($out, qq({"after_end": true}\n), '... and the next run prints what came after');

	# output that cannot be written is not acknowledged (at-least-once)
	SKIP:
	{
		skip 'no /dev/full', 3 unless -c '/dev/full';
		my $full = '';
		my $ok = eval {
			IPC::Run::run([ $sgctl, 'tail', 'tm', '--consumer', 'cfull', '--from', 'beginning', '--no-follow', '-d', $connstr ],
				'<', \'', '>', '/dev/full', '2>', \$full, IPC::Run::timeout(60));
			1;
		};
		is($? >> 8, 1, 'tail --consumer into a full disk exits 1');
		like($full, qr/could not write to standard output/, '... saying why');
		($rc, $out) = sg([ 'tail', 'tm', '--consumer', 'cfull', '--no-follow' ]);
		is(scalar(split /\n/, $out), 7, 'the events it could not write were not acknowledged: all 7 again');
	}

	($rc, $out, $err) = sg([ 'tail', 'no_such', '--no-follow' ]);
	is($rc, 1, 'tail of a missing stream exits 1');
	like($err, qr/stream "no_such" does not exist/, 'tail of a missing stream says so');
}

# ---------------------------------------- tail --consumer with long-poll
sql(q{SELECT streamguard.create_stream('live', 2)});
{
	my $waiting = q{SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'sgctl'
		AND query LIKE '%streamguard.poll%' AND wait_event_type = 'Extension'};
	my ($h, $hout, $herr) = sg_start([ 'tail', 'live', '--consumer', 'c1', '--max', '30', '--wait', '30', '--payload-only' ]);
	ok(wait_for_value($node, $waiting, 't', 30), 'tail --consumer waits in a long-poll');

	# a live producer: three runs of ten events, a pause between them
	for my $round (0 .. 2)
	{
		my $lines = join('', map { sprintf(qq({"n":%d}\n), $round * 10 + $_) } 1 .. 10);
		my ($rc, $out, $err) = sg([ 'produce', 'live', '--key', '.n' ], stdin => $lines);
		is($rc, 0, "live producer round $round") or diag($err);
		usleep(200_000);
	}
	is(sg_finish($h), 0, 'tail --consumer --max 30 ends with 0') or diag($$herr);
	my @n = sort { $a <=> $b } map { $json->decode($_)->{n} } split /\n/, $$hout;
	is(join(',', @n), join(',', 1 .. 30), 'the consumer printed each live event once');
	is(sql(q{SELECT sum(committed_seq) FROM streamguard.consumers WHERE stream = 'live' AND consumer = 'c1'}),
		sql(q{SELECT sum(last_seq) FROM streamguard.stream_partitions WHERE stream = 'live'}),
		'the consumer committed its positions after printing');

	sg([ 'produce', 'live' ], stdin => join('', map { qq({"n":$_}\n) } 31 .. 35));
	my ($rc, $out) = sg([ 'tail', 'live', '--consumer', 'c1', '--no-follow', '--payload-only' ]);
	is(join(',', sort { $a <=> $b } map { $json->decode($_)->{n} } split /\n/, $out), '31,32,33,34,35',
		'a second tail --consumer resumes after the committed positions');
	($rc, $out) = sg([ 'tail', 'live', '--consumer', 'c1', '--no-follow' ]);
	is($rc . '|' . $out, '0|', 'and a third finds nothing left');
	my $seq = sql(q{SELECT last_seq - 2 FROM streamguard.stream_partitions WHERE stream = 'live' AND partition = 0});
	($rc, $out) = sg([ 'tail', 'live', '--consumer', 'c1', '--no-follow', '--from', "seq:$seq" ]);
	is(join(' ', sort map { my $e = $json->decode($_); "$e->{partition}:$e->{seq}" } split /\n/, $out),
		sql(qq{SELECT string_agg(partition || ':' || seq, ' ' ORDER BY (partition || ':' || seq) COLLATE "C") FROM generate_series(0, 1) p,
			LATERAL streamguard.read('live', p, $seq - 1, 100)}),
		'--from seq:N with a consumer seeks every partition to N');

	# SIGINT while waiting: ends at once with 0, commits nothing
	my $before = sql(q{SELECT sum(committed_seq) FROM streamguard.consumers WHERE stream = 'live' AND consumer = 'c1'});
	($h, $hout, $herr) = sg_start([ 'tail', 'live', '--consumer', 'c1', '--wait', '600' ]);
	ok(wait_for_value($node, $waiting, 't', 30), 'a second follower waits in its long-poll');
	my $t0 = time;
	$h->signal('INT');
	is(sg_finish($h), 0, 'SIGINT ends tail --consumer with exit status 0');
	cmp_ok(time - $t0, '<', 10, 'SIGINT ended it promptly (the poll was cancelled, not waited out)');
	is($$herr, '', 'no error message on SIGINT');
	ok(wait_for_value($node, q{SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'sgctl'}, 't', 30),
		'its session is gone');
	is(sql(q{SELECT sum(committed_seq) FROM streamguard.consumers WHERE stream = 'live' AND consumer = 'c1'}), $before,
		'the interrupted poll committed nothing');

	($h, $hout, $herr) = sg_start([ 'tail', 'live', '--interval', '0.1' ]);
	ok(wait_for_value($node, $reading, 't', 30), 'a follower without consumer is reading');
	$h->signal('INT');
	is(sg_finish($h), 0, 'SIGINT ends a following tail without consumer with 0');
}

# ------------------------------------------ verify, with hostile names
# stream names are letters, digits, "_" and "-": this one would break SQL
# spliced in unquoted; names with quotes and spaces are refused by the
# server, and sgctl passes them as values (below)
my $stream = q{We-ird_Stream-1};
(my $stream_lit = $stream) =~ s/'/''/g;
sql(qq{SELECT streamguard.create_stream('$stream_lit', 2)});
sql(q{CREATE SCHEMA "sink schema"; CREATE TABLE "sink schema"."Sink ""Tab""" (id bigint, note text)});
sql(qq{SELECT streamguard.create_pipeline('to_sink', '$stream_lit',
	\$\$INSERT INTO "sink schema"."Sink ""Tab""" (id, note) SELECT (payload->>'id')::bigint, key FROM batch\$\$)});
{
	my ($rc, $out, $err) = sg([ 'produce', $stream, '--key', '.id', '--dedup', '.id' ],
		stdin => join('', map { qq({"id":$_}\n) } 1 .. 25));
	is($rc, 0, 'produce into a stream whose name needs quoting') or diag($err);
	($rc, $out) = sg([ 'tail', $stream, '--no-follow', '--max', '1' ]);
	like($out, qr/"payload":\{"id": \d+\}/, 'tail of that stream');
	ok(wait_for_value($node, q{SELECT count(*) FROM "sink schema"."Sink ""Tab"""}, '25', 60), 'the pipeline filled the sink');

	my @v = ('verify', '--stream', $stream, '--sink', q{"sink schema"."Sink ""Tab"""}, '--id', q{(payload->>'id')::bigint});
	($rc, $out, $err) = sg(\@v);
	is($rc, 0, 'verify: a clean sink exits 0') or diag($out . $err);
	like($out, qr/duplicates: 0 .*\nlost: +0 .*\nphantoms: +0 .*\nOK: exactly once/s, 'verify: text report');

	sql(q{SELECT streamguard.pause_pipeline('to_sink')});
	sql(q{INSERT INTO "sink schema"."Sink ""Tab""" SELECT id, note FROM "sink schema"."Sink ""Tab""" WHERE id = 7});
	($rc, $out, $err) = sg([ @v, '--json' ]);
	is($rc, 3, 'verify: a duplicated row exits 3');
	my $r = $json->decode($out);
	is(join(',', @$r{qw(events sink_rows duplicates lost phantoms)}), '25,26,1,0,0', 'verify --json counts the duplicate');
	is_deeply($r->{examples}{duplicates}, ['7'], 'the duplicate id is listed');

	sql(q{DELETE FROM "sink schema"."Sink ""Tab""" WHERE id IN (7, 8)});
	($rc, $out, $err) = sg([ @v, '--json' ]);
	is($rc, 3, 'verify: lost rows exit 3');
	$r = $json->decode($out);
	is(join(',', @$r{qw(duplicates lost phantoms)}), '0,2,0', 'verify --json counts the lost ids');

	sql(q{INSERT INTO "sink schema"."Sink ""Tab""" VALUES (7, NULL), (8, NULL), (99, 'phantom')});
	($rc, $out, $err) = sg([ @v, '--json' ]);
	is($rc, 3, 'verify: a phantom row exits 3');
	$r = $json->decode($out);
	is(join(',', @$r{qw(duplicates lost phantoms)}), '0,0,1', 'verify --json counts the phantom');
	is_deeply($r->{examples}{phantoms}, ['99'], 'the phantom id is listed');

	($rc, $out, $err) = sg([ @v, '--where', q{note IS DISTINCT FROM 'phantom'} ]);
	is($rc, 0, 'verify --where leaves the phantom out: exit 0') or diag($out . $err);

	# the unquoted spelling of a name that needs quoting is found too
	sql(q{CREATE TABLE public."Plain Sink" (id bigint)});
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', 'Plain Sink', '--id', q{(payload->>'id')::bigint} ]);
	is($rc, 3, 'verify --sink "Plain Sink" (unquoted) resolves the table; all 25 lost');
	like($out, qr/sink public\."Plain Sink": 0 rows/, 'the sink is reported by its quoted name');
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', 'no_such_table', '--id', 'seq' ]);
	is($rc, 1, 'verify with a missing sink exits 1');
	like($err, qr/sink table "no_such_table" does not exist/, 'a missing sink is named');

	# a sink without an "id" column and no --sink-id: named as the sink's
	# problem, with the option to use, not as verify's temporary table
	sql(q{CREATE TABLE sink_noid (order_id bigint)});
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', 'sink_noid', '--id', 'seq' ]);
	is($rc, 1, 'verify of a sink without "id" and no --sink-id exits 1');
	like($err, qr/sink public\.sink_noid has no column "id".*--sink-id/, '... saying so and naming --sink-id');
	unlike($err, qr/sgctl_verify/, '... without naming verify\'s temporary tables');
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', 'sink_noid', '--id', 'seq', '--sink-id', 'nope' ]);
	is($rc, 1, 'verify with a --sink-id that is no column exits 1');
	like($err, qr/--sink-id: ERROR: +column "nope" does not exist/, '... the error is the column\'s');
	unlike($err, qr/sgctl_verify/, '... without a hint about verify\'s temporary tables');
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', 'Plain Sink', '--id', q{1); DELETE FROM "Plain Sink"; --} ]);
	is($rc, 1, 'verify with an --id that is no expression exits 1');
	# an --id with a side effect (once: for one event) fails, and nothing of it stays
	sql(q{SELECT streamguard.create_stream('victim')});
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', 'Plain Sink', '--id',
		q{CASE WHEN partition = 0 AND seq = 1 THEN (streamguard.drop_stream('victim') IS NULL)::text ELSE seq::text END} ]);
	is($rc, 1, 'verify runs read-only: an --id with side effects fails');
	like($err, qr/read-only transaction/, '... because the transaction is read only');
	is(sql(q{SELECT count(*) FROM streamguard.streams WHERE stream = 'victim'}), '1', 'and the stream is still there');
	sql(q{SELECT streamguard.resume_pipeline('to_sink')});

	# an id that several events share (an order created, then paid): a sink
	# with a row per event and a sink with one row per id both pass; one row
	# more than the id's events is a duplicate
	sql(q{SELECT streamguard.create_stream('outbox', 2);
		SELECT count(*) FROM streamguard.append_batch('outbox', ARRAY[
			'{"order_id": 1, "status": "created"}', '{"order_id": 1, "status": "paid"}',
			'{"order_id": 2, "status": "created"}']::jsonb[]);
		CREATE TABLE outbox_log (id bigint, status text);
		INSERT INTO outbox_log VALUES (1, 'created'), (1, 'paid'), (2, 'created');
		CREATE TABLE outbox_latest (id bigint PRIMARY KEY, status text);
		INSERT INTO outbox_latest VALUES (1, 'paid'), (2, 'created');});
	my @ov = ('verify', '--stream', 'outbox', '--id', q{(payload->>'order_id')::bigint});
	($rc, $out, $err) = sg([ @ov, '--sink', 'outbox_log' ]);
	is($rc, 0, 'verify: a row per event for an id two events share passes') or diag($out . $err);
	like($out, qr/note: 1 ids occur in more than one event/, '... and the repeated id is noted');
	($rc, $out, $err) = sg([ @ov, '--sink', 'outbox_latest' ]);
	is($rc, 0, 'verify: one row per id (an upsert) passes too') or diag($out . $err);
	sql(q{INSERT INTO outbox_log VALUES (1, 'paid')});
	($rc, $out, $err) = sg([ @ov, '--sink', 'outbox_log', '--json' ]);
	is($rc, 3, 'verify: a third row for an id of two events exits 3');
	$r = eval { $json->decode($out) } // {};
	is(join(',', @$r{qw(duplicates duplicate_rows lost phantoms)}), '1,1,0,0', '... one duplicate, one extra row');

	# names with quotes and spaces travel as values: refused or not found
	my $evil = q{orders'; DROP TABLE "Plain Sink"; --"};
	($rc, $out, $err) = sg([ 'tail', $evil, '--no-follow' ]);
	is($rc, 1, 'tail of a name with quotes exits 1');
	like($err, qr/stream "orders'; DROP TABLE "Plain Sink"; --"" does not exist/, '... not found, as a value');
	($rc, $out, $err) = sg([ 'produce', $evil ], stdin => qq({"a":1}\n));
	is($rc, 1, 'produce into a name with quotes exits 1');
	like($err, qr/invalid stream name/, '... the server refuses the name');
	($rc, $out, $err) = sg([ 'verify', '--stream', $stream, '--sink', q{"Plain Sink"; DROP TABLE x}, '--id', 'seq' ]);
	is($rc, 1, 'verify with a sink name that is no name exits 1');
	is(sql(q{SELECT count(*) FROM pg_class WHERE relname = 'Plain Sink'}), '1', 'nothing was dropped');
}

# ------------------------------------------------------------------- top
{
	my ($rc, $out, $err) = sg([ 'top', '--once' ]);
	is($rc, 0, 'top --once exits 0') or diag($err);
	like($out, qr/^Streams\n(?:.*\n)*?  orders +4 +40 /m, 'top --once lists the streams with partitions and events');
	like($out, qr/^Consumers\n(?:.*\n)*?  live +c1 /m, 'top --once lists the consumers');
	like($out, qr/^Pipelines\n(?:.*\n)*?  to_sink +We-ird_Stream-1 +running +exactly_once /m, 'top --once lists the pipeline and its state');
	like($out, qr/^Pipeline workers\n(?:.*\n)*?  to_sink +0 +\d+/m, 'top --once lists the pipeline workers');
	unlike($out, qr/\e/, 'top --once prints no escape codes');

	my ($in, $tout) = ('', '');
	my $h = IPC::Run::start([ $sgctl, 'top', '--interval', '0.5', '-d', $connstr ],
		'<pty<', \$in, '>pty>', \$tout, IPC::Run::timeout(60));
	# the pty has no window size: top draws the 24 lines of a default terminal
	ok(pump_until_match($h, \$tout, qr/sgctl top .*Streams.*\n  orders +4 +40 /s, 30), 'top on a terminal draws the frame');
	like($tout, qr/\e\[\?1049h/, 'top on a terminal uses the alternate screen');
	ok(pump_until_match($h, \$tout, qr/(?:\e\[H.*){3}/s, 30), 'top redraws the frame');
	$in .= 'q';
	my $t0 = time;
	is(sg_finish($h), 0, 'top quits on "q" with status 0');
	cmp_ok(time - $t0, '<', 10, 'promptly');
	like($tout, qr/\e\[\?1049l/, 'top restores the screen');

	# produce's progress line on a terminal
	($in, $tout) = ('', '');
	IPC::Run::run([ $sgctl, 'produce', 'misc', $orders_file, '--batch', '5', '-d', $connstr ],
		'<pty<', \$in, '>pty>', \$tout, IPC::Run::timeout(60));
	is($? >> 8, 0, 'produce on a terminal exits 0');
	like($tout, qr/\r\e\[K\[#{20}\] 100% 40 events, \d+ events\/s\r?\n/, 'produce on a terminal ends with a full progress bar');
}

# ----------------------------------------------------------------- metrics
{
	my ($rc, $out, $err) = sg(['metrics']);
	is($rc, 0, 'metrics exits 0');
	like($out, qr/^# TYPE streamguard_\w+ gauge$/m, 'metrics prints the exposition');
	like($out, qr/^streamguard_consumer_lag_events\{database="[^"]+",stream="live",consumer="c1",partition="0"\} \d+$/m,
		'metrics has the consumer lag of c1');

	my ($h, $hout, $herr) = sg_start([ 'metrics', '--listen', '127.0.0.1:0' ]);
	ok(pump_until_match($h, $herr, qr{serving http://127\.0\.0\.1:\d+/metrics}, 30), 'metrics --listen serves');
	my ($url) = $$herr =~ m{(http://127\.0\.0\.1:\d+/metrics)};
	my ($cout, $cerr) = ('', '');
	SKIP:
	{
		skip 'curl is not installed', 5 unless grep { -x "$_/curl" } split /:/, $ENV{PATH};
		IPC::Run::run([ 'curl', '-sS', '-i', $url ], '>', \$cout, '2>', \$cerr, IPC::Run::timeout(30));
		like($cout, qr{^HTTP/1\.1 200 OK\r\nContent-Type: text/plain; version=0\.0\.4}, 'a curl scrape gets 200 and the content type');
		like($cout, qr/^streamguard_pipeline_/m, 'the scrape has the pipeline metrics');
		IPC::Run::run([ 'curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', "$url/nope" ], '>', \$cout, '2>', \$cerr, IPC::Run::timeout(30));
		is($cout, '404', 'another path is 404');
		IPC::Run::run([ 'curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', '-H', 'X-Big: ' . ('x' x 9000), $url ],
			'>', \$cout, '2>', \$cerr, IPC::Run::timeout(30));
		is($cout, '431', 'a request head over 8 kB is 431');
		# the server restarts between two scrapes: the next scrape still
		# answers (a new connection), not one failed scrape per restart
		$node->restart;
		IPC::Run::run([ 'curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', $url ], '>', \$cout, '2>', \$cerr,
			IPC::Run::timeout(60));
		is($cout, '200', 'the first scrape after a server restart gets 200');
	}
	$h->signal('INT');
	is(sg_finish($h), 0, 'metrics --listen ends on SIGINT with 0');

	# an empty HOST is loopback (http.c, shared with sgctl serve), not every address
	($h, $hout, $herr) = sg_start([ 'metrics', '--listen', ':0' ]);
	ok(pump_until_match($h, $herr, qr{serving http://127\.0\.0\.1:\d+/metrics}, 30), 'metrics --listen :0 serves on 127.0.0.1');
	$h->signal('INT');
	is(sg_finish($h), 0, '... and ends on SIGINT with 0');
}

$node->stop;
done_testing();
