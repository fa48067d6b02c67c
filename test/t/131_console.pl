# sgctl serve, the read-only web console, against a server with live
# pipelines (two producers appending all along):
#   - the JSON snapshot as a restricted role: its streams, pipelines (rate,
#     lag, workers), consumers, consumer group, window, capture (backfill)
#     and dead letters; another role's pipeline shows, but not its
#     last_error; a role without grants sees no consumer, group, window or
#     dead letter of streams and pipelines that are not its own, and no
#     error text; the owner does see its error;
#   - read-only: every snapshot runs in a READ ONLY transaction (the
#     console's session never writes: no transaction id);
#   - HTTP: the page and its script with a Content-Security-Policy and
#     nosniff, no CORS header; POST is 405, an unknown path 404, an
#     oversize request head 431, a Host that is not loopback 421, a
#     request that never ends is dropped after the timeout and the
#     console goes on serving;
#   - binding: a bare port and the default bind 127.0.0.1;
#   - a real browser (headless Chromium through chromedriver's WebDriver
#     protocol): the page shows the pipelines, the chart paths change
#     between two looks, and a screenshot goes to docs/images/console.png.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Temp ();
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use MIME::Base64 ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamguardTest;
use Time::HiRes qw(time usleep);

my $node = sg_node('console');
my $bindir = $node->config_data('--bindir');
my $sgctl = "$bindir/sgctl";
plan skip_all => "sgctl is not installed in $sgctl (make install)" unless -x $sgctl;

sub sql { return $node->safe_psql('postgres', $_[0]) }

$node->safe_psql('postgres', 'CREATE EXTENSION streamguard');
my $base = $node->connstr('postgres');
my $json = JSON::PP->new->canonical;
my $http = HTTP::Tiny->new(timeout => 30, max_redirect => 0);

# alice owns stream orders and its pipelines (one failing: its error quotes
# an event's key); bob owns clicks, reads orders, and has a pipeline, a
# window, a capture, a dead-letter pipeline and a consumer group; carol
# has nothing
sql(q{
CREATE ROLE alice LOGIN;
CREATE ROLE bob LOGIN;
CREATE ROLE carol LOGIN;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO alice, bob;
CREATE SCHEMA a AUTHORIZATION alice;
CREATE SCHEMA b AUTHORIZATION bob;
SET ROLE alice;
SELECT streamguard.create_stream('orders', 2);
SELECT streamguard.grant_stream('orders', 'bob', 'read');
CREATE TABLE a.order_sink (seq bigint, payload jsonb);
CREATE TABLE a.bad (n int);
SELECT streamguard.create_pipeline('orders_sink', 'orders',
	$$INSERT INTO a.order_sink SELECT seq, payload FROM batch$$);
SELECT streamguard.create_pipeline('orders_bad', 'orders',
	$$INSERT INTO a.bad SELECT ('SECRET_' || key)::int FROM batch$$);
RESET ROLE;
SET ROLE bob;
SELECT streamguard.create_stream('clicks', 3);
SELECT streamguard.create_stream('profiles', 1);
CREATE TABLE b.click_sink (seq bigint, payload jsonb);
CREATE TABLE b.click_dl (n int);
CREATE TABLE b.clicks_10s (window_start timestamptz, window_end timestamptz, key text, events numeric);
CREATE TABLE b.profile (id int PRIMARY KEY, name text);
INSERT INTO b.profile SELECT g, 'p' || g FROM generate_series(1, 3000) g;
SELECT streamguard.create_pipeline('clicks_sink', 'clicks',
	$$INSERT INTO b.click_sink SELECT seq, payload FROM batch$$, workers => 2, batch_size => 20);
SELECT streamguard.create_pipeline('clicks_dl', 'clicks',
	$$INSERT INTO b.click_dl SELECT 100 / ((payload->>'n')::int % 40) FROM batch$$,
	error_policy => 'dead_letter');
SELECT streamguard.create_window_pipeline('clicks_10s', 'clicks', 'b.clicks_10s', '10 s');
SELECT streamguard.capture_table('b.profile', 'profiles');
RESET ROLE;
});

# producers: alice appends to orders, bob to clicks (and polls them as the
# member web-1 of group dashboard); each loop is bounded (some 15 minutes; stopped at the end)
my $psql = "$bindir/psql";
my @producers;
sub start_producer
{
	my ($user, $body) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(
		[ $psql, '-X', '-q', '-d', "$base user=$user", '-c', $body ],
		'<', \$in, '>', \$out, '2>', \$err);
	push @producers, $h;
	return $h;
}
start_producer('alice', q{DO $$
BEGIN
	FOR i IN 1..30000 LOOP
		PERFORM streamguard.append('orders', jsonb_build_object('n', i), 'k' || (i % 7));
		COMMIT;
		PERFORM pg_sleep(0.03 + 0.03 * sin(i / 40.0));
	END LOOP;
END $$});
start_producer('bob', q{DO $$
BEGIN
	FOR i IN 1..30000 LOOP
		PERFORM streamguard.append('clicks', jsonb_build_object('n', i), 'u' || (i % 11));
		IF i % 20 = 0 THEN
			PERFORM count(*) FROM streamguard.poll('clicks', 'dashboard', 10, member => 'web-1');
		END IF;
		COMMIT;
		PERFORM pg_sleep(0.02 + 0.02 * cos(i / 30.0));
	END LOOP;
END $$});

ok(wait_pipelines_running($node, [qw(orders_sink clicks_sink clicks_dl clicks_10s)], 90),
	'the pipelines run');
ok(wait_for_value($node, q{SELECT state FROM streamguard.pipelines WHERE pipeline = 'orders_bad'}, 'failed', 90),
	'orders_bad failed');
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM streamguard.dead_letters WHERE pipeline = 'clicks_dl'}, 't', 90),
	'clicks_dl has dead letters');
ok(wait_for_value($node, q{SELECT count(*) > 0 FROM streamguard.consumer_group_members WHERE consumer = 'dashboard'}, 't', 90),
	'web-1 is a member of dashboard');

# ------------------------------------------------------------ the console

# start sgctl serve as $user with @args; (harness, url, \$stderr)
sub serve
{
	my ($user, @args) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ $sgctl, 'serve', '-d', "$base user=$user application_name=console_$user", @args ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(600));
	my $deadline = time + 60;
	while (time < $deadline && $err !~ m{on http://\S+/\n} && $h->pumpable)
	{
		eval { $h->pump_nb };
		usleep(50_000);
	}
	my ($url) = $err =~ m{on (http://\S+/)\n};
	diag("sgctl serve: $err") unless $url;
	return ($h, $url, \$err);
}

sub stop_serve
{
	my ($h) = @_;
	$h->signal('INT');
	my $ok = eval { $h->finish; 1 };
	if (!$ok)
	{
		$h->kill_kill;
		return -1;
	}
	return $h->result(0);
}

sub snapshot
{
	my ($url) = @_;
	my $r = $http->get("${url}api/snapshot");
	return undef unless $r->{success};
	return $json->decode($r->{content});
}

sub by_name
{
	my ($rows, $col, $name) = @_;
	return (grep { $_->{$col} eq $name } @{ $rows // [] })[0];
}

# poll snapshots until $cond->($snap) holds (60 s); the last snapshot
sub snapshot_until
{
	my ($url, $cond, $what) = @_;
	my $deadline = time + 90;
	my $snap;
	while (time < $deadline)
	{
		$snap = snapshot($url);
		return $snap if $snap && $cond->($snap);
		usleep(250_000);
	}
	diag("no snapshot with $what: " . ($snap ? $json->encode($snap) : 'none'));
	return $snap;
}

my ($bob, $url, $bob_err) = serve('bob', '--listen', '127.0.0.1:0');
ok($url, 'sgctl serve as bob serves') or BAIL_OUT('no console');
like($url, qr{^http://127\.0\.0\.1:\d+/$}, 'on loopback');

{
	my $snap = snapshot_until($url, sub {
		my $s = shift;
		my $p = by_name($s->{pipelines}, 'pipeline', 'clicks_sink');
		my $c = by_name($s->{captures}, 'stream', 'profiles');
		$p && $p->{events_per_sec} > 0 && $c && $c->{backfill_state} eq 'done'
		  && @{ $s->{consumer_groups} // [] } && @{ $s->{windows} // [] };
	}, 'a running clicks_sink and a finished backfill');
	is($snap->{session}{role}, 'bob', 'the snapshot names the role');
	is($snap->{session}{read_only}, 'on', 'the snapshot runs in a READ ONLY transaction');
	is($snap->{session}{statement_timeout}, '5s', '... with a statement_timeout');
	is_deeply($snap->{errors}, {}, 'no view failed');
	my $clicks = by_name($snap->{streams}, 'stream', 'clicks');
	ok($clicks && $clicks->{partitions} == 3 && $clicks->{last_seq} > 0 && defined $clicks->{readable_horizon},
		'stream clicks: partitions, last seq, horizon');
	ok($clicks && $clicks->{append_rate} > 0, 'stream clicks has an append rate');
	my $cs = by_name($snap->{pipelines}, 'pipeline', 'clicks_sink');
	ok($cs && $cs->{state} eq 'running' && $cs->{workers} == 2 && defined $cs->{lag_events},
		'pipeline clicks_sink: running, 2 workers, lag');
	is(scalar(grep { $_->{pipeline} eq 'clicks_sink' } @{ $snap->{pipeline_workers} }), 2,
		'its two workers are listed');
	my $bad = by_name($snap->{pipelines}, 'pipeline', 'orders_bad');
	ok($bad && $bad->{state} eq 'failed', "bob sees alice's failed pipeline");
	ok($bad && !defined $bad->{last_error}, '... but not its last_error');
	unlike($json->encode($snap), qr/SECRET_/, 'no error text of alice anywhere in the snapshot');
	ok(by_name($snap->{consumers}, 'consumer', 'pipeline:orders_sink'), 'bob sees the consumers of orders (he may read it)');
	my $g = by_name($snap->{consumer_groups}, 'member', 'web-1');
	ok($g && $g->{consumer} eq 'dashboard' && $g->{stream} eq 'clicks', 'the consumer group member');
	my $w = by_name($snap->{windows}, 'pipeline', 'clicks_10s');
	ok($w && $w->{kind} eq 'tumbling' && defined $w->{open_windows}, 'the window');
	my $cap = by_name($snap->{captures}, 'stream', 'profiles');
	ok($cap && $cap->{backfill_percent} == 100 && $cap->{backfill_rows} == 3000, 'the capture and its backfill');
	my $dl = by_name($snap->{dead_letters}, 'pipeline', 'clicks_dl');
	ok($dl && $dl->{error} =~ /division by zero/, 'the dead letters of clicks_dl with their error');

	# one section alone
	my $r = $http->get("${url}api/pipelines");
	is($r->{status}, 200, '/api/pipelines');
	my $one = $json->decode($r->{content});
	ok($one->{pipelines} && !exists $one->{streams}, '... holds the pipelines only');
	is($r->{headers}{'content-type'}, 'application/json', '... as application/json');
}

# the console's session runs READ ONLY transactions: it never gets an xid
{
	my $ro = wait_for_value($node, q{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE application_name = 'console_bob' AND state = 'idle'}, 't', 30);
	ok($ro, 'the console session is idle between snapshots');
	# a snapshot running while we look: its transaction is read-only
	is(sql(q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'console_bob'
		AND backend_xid IS NOT NULL}), '0', 'the console session holds no transaction id');
}

# carol: no grants
{
	my ($carol, $curl) = serve('carol', '--listen', '127.0.0.1:0');
	my $snap = snapshot_until($curl, sub { $_[0]{pipelines} && @{ $_[0]{pipelines} } >= 5 }, 'carol: pipelines');
	is($snap->{session}{role}, 'carol', 'a console as carol');
	is_deeply($snap->{errors}, {}, 'no view failed for carol');
	is(scalar(@{ $snap->{consumers} }), 0, 'carol sees no consumer (she may read no stream)');
	is(scalar(@{ $snap->{consumer_groups} }), 0, 'no consumer group member');
	is(scalar(@{ $snap->{windows} }), 0, 'no window');
	is(scalar(@{ $snap->{dead_letters} }), 0, 'no dead letter');
	ok(!(grep { defined $_->{last_error} } @{ $snap->{pipelines} }), 'no last_error');
	ok(!(grep { defined $_->{backfill_error} } @{ $snap->{captures} }), 'no backfill error');
	unlike($json->encode($snap), qr/SECRET_|division by zero/, 'no error text at all');
	is(stop_serve($carol), 0, 'the console stops on SIGINT with 0');
}

# a view that cannot answer in time: its section says so, the others show
{
	my ($h, $turl) = serve('bob', '--listen', '127.0.0.1:0', '--statement-timeout', '300');
	my ($in, $out, $err) = ('', '', '');
	my $locker = IPC::Run::start([ $psql, '-X', '-q', '-d', "$base application_name=locker", '-c',
		'BEGIN; LOCK TABLE streamguard.capture; SELECT pg_sleep(30); COMMIT;' ],
		'<', \$in, '>', \$out, '2>', \$err);
	ok(wait_for_value($node, q{SELECT count(*) > 0 FROM pg_locks
		WHERE relation = 'streamguard.capture'::regclass AND mode = 'AccessExclusiveLock' AND granted}, 't', 30),
		'streamguard.capture is locked');
	my $snap = snapshot($turl);
	like($snap->{errors}{captures} // '', qr/statement timeout/, 'the captures section timed out');
	ok(!defined $snap->{captures}, '... and is null');
	ok(by_name($snap->{pipelines}, 'pipeline', 'clicks_sink'), '... the other sections still show');
	is($snap->{session}{statement_timeout}, '300ms', '--statement-timeout');
	sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'locker'});
	eval { $locker->finish; 1 } or $locker->kill_kill;
	is(stop_serve($h), 0, 'stopped');
}

# the console's session is terminated: the next snapshots reconnect
{
	my $n = sql(q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'console_bob'});
	is($n, '1', "bob's console session terminated");
	my $snap = snapshot_until($url, sub { !%{ $_[0]{errors} } && $_[0]{streams} }, 'a snapshot after the reconnect');
	ok($snap && !%{ $snap->{errors} } && by_name($snap->{streams}, 'stream', 'clicks'), 'the console reconnected');
	is($snap->{session}{role}, 'bob', '... as bob');
}

# the owner sees the error
{
	my ($alice, $aurl) = serve('alice', '--listen', '127.0.0.1:0');
	my $snap = snapshot_until($aurl, sub { by_name($_[0]{pipelines}, 'pipeline', 'orders_bad') }, 'alice: orders_bad');
	my $bad = by_name($snap->{pipelines}, 'pipeline', 'orders_bad');
	like($bad->{last_error} // '', qr/SECRET_k/, 'alice sees the last_error of her pipeline');
	is(stop_serve($alice), 0, 'stopped');
}

# ------------------------------------------------------------------- HTTP
{
	my $r = $http->get($url);
	is($r->{status}, 200, 'GET / is 200');
	like($r->{headers}{'content-type'}, qr{^text/html}, '... text/html');
	like($r->{content}, qr{<script src="/console\.js"}, '... the page loads its script');
	my $csp = $r->{headers}{'content-security-policy'} // '';
	like($csp, qr/default-src 'none'/, 'Content-Security-Policy: default-src none');
	like($csp, qr/script-src 'self'/, '... scripts only from the console');
	unlike($csp, qr/unsafe/, '... nothing unsafe');
	is($r->{headers}{'x-content-type-options'}, 'nosniff', 'X-Content-Type-Options: nosniff');
	ok(!(grep { /^access-control-/ } keys %{ $r->{headers} }), 'no CORS header');
	$r = $http->get("${url}console.js");
	is($r->{status}, 200, 'GET /console.js');
	unlike($r->{content}, qr/innerHTML|insertAdjacentHTML|document\.write/, 'the script never writes markup');

	$r = $http->post("${url}api/snapshot", { content => '{}' });
	is($r->{status}, 405, 'POST is 405');
	is($r->{headers}{allow}, 'GET', '... Allow: GET');
	$r = $http->request('DELETE', "${url}api/pipelines");
	is($r->{status}, 405, 'DELETE is 405');
	for my $p ('nope', 'api/nope', 'api/', '../etc/passwd', 'console.html', 'api/snapshot/x')
	{
		$r = $http->get("$url$p");
		is($r->{status}, 404, "/$p is 404");
	}
	$r = $http->get("$url?x=1");
	is($r->{status}, 200, 'a query string is ignored');
}

# raw requests: ($status line, whole response)
my ($port) = $url =~ m{:(\d+)/$};
sub raw
{
	my ($req, %opt) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 30)
	  or return ('', "connect: $!");
	print $s $req;
	my $resp = '';
	my $deadline = time + ($opt{wait} // 30);
	$s->blocking(0);
	while (time < $deadline)
	{
		my $n = sysread($s, my $buf, 65536);
		if (defined $n && $n == 0) { last }
		$resp .= $buf if $n;
		usleep(20_000) unless $n;
	}
	close $s;
	my ($status) = $resp =~ m{^HTTP/1\.1 (\d+)};
	return ($status // '', $resp);
}

{
	my ($st, $resp) = raw("GET /api/streams HTTP/1.1\r\nHost: 127.0.0.1:$port\r\n" . ("X-Pad: " . ('a' x 100) . "\r\n") x 100 . "\r\n");
	is($st, '431', 'a request head over 8 kB is 431');
	($st) = raw("GET /api/streams HTTP/1.1\r\nHost: evil.example:$port\r\n\r\n");
	is($st, '421', 'a Host that is not loopback is 421 (DNS rebinding)');
	($st) = raw("GET /api/streams HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n");
	is($st, '421', 'another port in Host is 421');
	($st) = raw("GET /api/streams HTTP/1.1\r\n\r\n");
	is($st, '421', 'no Host is 421');
	($st) = raw("GET /api/streams HTTP/1.1\r\nHost: localhost:$port\r\n\r\n");
	is($st, '200', 'Host localhost is fine');
	($st) = raw("garbage\r\n\r\n");
	is($st, '400', 'a malformed request is 400');

	# a client that sends half a request and waits: dropped after 5 s
	my $t0 = time;
	($st, $resp) = raw("GET / HTTP/1.1\r\nHost: 127.0.0.1:$port\r\n", wait => 30);
	my $took = time - $t0;
	ok($took >= 4 && $took < 29, sprintf('a request that never ends is dropped after the timeout (%.1f s)', $took));
	my $r = $http->get("${url}api/streams");
	is($r->{status}, 200, 'the console serves on after it');
}

# ---------------------------------------------------------------- binding
{
	my ($h, $u, $err) = serve('bob', '--listen', '0');
	like($u // '', qr{^http://127\.0\.0\.1:\d+/$}, 'a bare port binds 127.0.0.1');
	unlike($$err, qr/warning/, 'no warning on loopback');
	is(stop_serve($h), 0, 'stopped');

	# another loopback address: no warning, and its own name is a fine Host
	($h, $u, $err) = serve('bob', '--listen', '127.0.0.2:0');
	like($u // '', qr{^http://127\.0\.0\.2:\d+/$}, '--listen 127.0.0.2:0 binds there');
	unlike($$err, qr/warning/, '... no warning (loopback)');
	my $r2 = $http->get("${u}api/streams");
	is($r2->{status}, 200, '... Host 127.0.0.2:PORT is fine');
	is(stop_serve($h), 0, 'stopped');

	# no --listen: 127.0.0.1:19188 (or, when another program holds it, the
	# error names that address)
	my ($in, $out, $e) = ('', '', '');
	$h = IPC::Run::start([ $sgctl, 'serve', '-d', "$base user=bob" ], '<', \$in, '>', \$out, '2>', \$e,
		IPC::Run::timeout(120));
	my $deadline = time + 60;
	while (time < $deadline && $e !~ /127\.0\.0\.1:19188/ && $h->pumpable)
	{
		eval { $h->pump_nb };
		usleep(50_000);
	}
	like($e, qr/127\.0\.0\.1:19188/, 'the default address is 127.0.0.1:19188');
	$h->signal('INT') if $h->pumpable;
	eval { $h->finish; 1 } or $h->kill_kill;

	my ($rc, $o2, $e2) = (0, '', '');
	IPC::Run::run([ $sgctl, 'serve', '--listen', 'nowhere', '-d', $base ], '>', \$o2, '2>', \$e2, IPC::Run::timeout(60));
	is($? >> 8, 2, '--listen without a port is a usage error');
	IPC::Run::run([ $sgctl, 'serve', '--statement-timeout', '0', '-d', $base ], '>', \$o2, '2>', \$e2, IPC::Run::timeout(60));
	is($? >> 8, 2, '--statement-timeout 0 is a usage error');
	IPC::Run::run([ $sgctl, 'serve', '--help' ], '>', \$o2, '2>', \$e2, IPC::Run::timeout(60));
	like($o2, qr/read-only web console/, 'serve --help');
}

# --------------------------------------------------------- a real browser
SKIP:
{
	my $chromium = (grep { -x } '/usr/bin/chromium', '/usr/bin/chromium-browser')[0];
	my $driver = (grep { -x } '/usr/bin/chromedriver', '/usr/lib/chromium/chromedriver')[0];
	skip 'browser test skipped: chromium and chromedriver (Debian chromium, chromium-driver) are not installed', 1
	  unless $chromium && $driver;

	my $home = PostgreSQL::Test::Utils::tempdir();
	my $profile = PostgreSQL::Test::Utils::tempdir();
	my $dport = PostgreSQL::Test::Cluster::get_free_port();
	my ($din, $dout, $derr) = ('', '', '');
	local $ENV{HOME} = $home;
	my $dh = IPC::Run::start([ $driver, "--port=$dport", '--allowed-ips=127.0.0.1' ],
		'<', \$din, '>', \$dout, '2>', \$derr, IPC::Run::timeout(600));
	my $wd = "http://127.0.0.1:$dport";
	my $deadline = time + 60;
	while (time < $deadline)
	{
		my $r = $http->get("$wd/status");
		last if $r->{success} && $json->decode($r->{content})->{value}{ready};
		usleep(200_000);
	}

	my $call = sub {
		my ($method, $path, $body) = @_;
		my $r = $http->request($method, "$wd$path",
			{ headers => { 'Content-Type' => 'application/json' },
			  defined $body ? (content => $json->encode($body)) : () });
		my $v = eval { $json->decode($r->{content}) } // {};
		diag("WebDriver $method $path: $r->{status} $r->{content}") unless $r->{success};
		return $v->{value};
	};
	my $session = $call->('POST', '/session', {
		capabilities => { alwaysMatch => {
			browserName => 'chrome',
			'goog:chromeOptions' => {
				binary => $chromium,
				args => [ '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
					'--disable-background-networking', '--disable-component-update', '--disable-sync',
					'--disable-dev-shm-usage', "--user-data-dir=$profile", '--window-size=1400,1900' ] } } } });
	my $sid = ref $session eq 'HASH' ? $session->{sessionId} : undef;
	ok($sid, 'chromium started through chromedriver') or diag("chromedriver: $derr");
	skip 'no WebDriver session', 5 unless $sid;

	my $js = sub { return $call->('POST', "/session/$sid/execute/sync", { script => $_[0], args => [] }) };
	$call->('POST', "/session/$sid/url", { url => $url });

	# the tables fill in
	my $text = '';
	$deadline = time + 60;
	while (time < $deadline)
	{
		$text = $js->(q{return document.getElementById('pipelines').textContent + '|' +
			document.getElementById('streams').textContent}) // '';
		last if $text =~ /clicks_sink/ && $text =~ /orders_bad/ && $text =~ /clicks/;
		usleep(250_000);
	}
	like($text, qr/clicks_sink.*orders_bad|orders_bad.*clicks_sink/s, 'the page shows the pipelines');
	my $status = $js->(q{return document.getElementById('status').textContent}) // '';
	like($status, qr/^live/, "the page's status says live ($status)");

	# the charts move: the path of clicks_sink's rate, twice
	my $path_js = q{var p = document.querySelector('#chart-pipeline-rate path[data-series="clicks_sink"]');
		return p ? p.getAttribute('d') : null;};
	my $d1;
	$deadline = time + 60;
	while (time < $deadline)
	{
		$d1 = $js->($path_js);
		last if defined $d1 && ($d1 =~ tr/L//) >= 3;
		usleep(250_000);
	}
	ok(defined $d1 && $d1 =~ /^M/, 'the rate chart has a path for clicks_sink');
	my $d2 = $d1;
	$deadline = time + 30;
	while (time < $deadline && defined $d1 && ($d2 // '') eq $d1)
	{
		usleep(500_000);
		$d2 = $js->($path_js);
	}
	isnt($d2, $d1, 'the chart moved between two looks');

	# a few more points for the picture, then the screenshot
	usleep($ENV{SG_CONSOLE_SCREENSHOT} ? 40_000_000 : 3_000_000);
	my $png = $call->('GET', "/session/$sid/screenshot");
	my $bytes = defined $png ? MIME::Base64::decode_base64($png) : '';
	ok(length($bytes) > 10_000 && substr($bytes, 0, 8) eq "\x89PNG\r\n\x1a\n", 'a PNG screenshot');
	# into the test's directory; SG_CONSOLE_SCREENSHOT=FILE also writes it
	# there (docs/images/console.png is made that way)
	for my $file ("$PostgreSQL::Test::Utils::tmp_check/console.png", $ENV{SG_CONSOLE_SCREENSHOT} // ())
	{
		open(my $fh, '>:raw', $file) or die "cannot write $file: $!";
		print $fh $bytes;
		close $fh;
		note("screenshot written to $file");
	}
	$call->('DELETE', "/session/$sid");
	$dh->kill_kill;
}

# the server restarts: the console's next snapshot answers on a new
# connection, not one failed request per restart
$_->kill_kill for @producers;
@producers = ();
$node->restart;
{
	my $r = $http->get("${url}api/streams");
	is($r->{status}, 200, 'the first snapshot after a server restart answers 200');
	my $snap = $r->{success} ? eval { $json->decode($r->{content}) } : undef;
	ok($snap && !exists $snap->{error} && ref($snap->{streams}) eq 'ARRAY' && @{ $snap->{streams} },
		'... with the streams');
}

is(stop_serve($bob), 0, "bob's console stops on SIGINT with 0");
$node->stop;
done_testing();
