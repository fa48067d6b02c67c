# Nexmark queries as streamguard pipelines, shared by the TAP test
# (test/t/155_nexmark.pl) and the benchmark (test/bench/lib/Bench/Nexmark.pm),
# read with `do`.  It returns a list of queries, each a hash:
#
#   name      q0 ... q8, and q7b (Nexmark's q7 as a plain pipeline)
#   setup     SQL: the query's output table, its state tables, its pipelines
#             (all exactly_once) over the stream `nx` (test/nexmark/generator.sql's
#             events, then one event {"kind": "end", "ts": "2030-01-01..."} that
#             moves every watermark past the input)
#   pipelines its pipelines, the last one writing the output
#   source    the stream the last pipeline reads (nx, or an intermediate one)
#   window    the window pipeline whose close latency is measured (or none)
#   out       SELECT of the result, to compare
#   plain     the same query as plain SQL over the table nx_input (the
#             generator's rows: id, kind, payload), its result over the whole
#             input: what `out` must equal once the pipelines have drained
#   drop      SQL removing what setup created
#
# docs/nexmark.md says what each query is and how it is expressed.  Window
# sizes are scaled to the generator's event time (100 µs per event by
# default: 10,000 events per second of event time).

use strict;
use warnings;

my $EPOCH = q{timestamptz '1970-01-01 00:00:00+00'};

# the winning bid of every auction: the highest bid made between the
# auction's start and its expiry (plain SQL, for q4 and q6)
my $WINNING = q{SELECT (a.payload->>'id')::bigint AS id, (a.payload->>'seller')::bigint AS seller,
		(a.payload->>'category')::int AS category, (a.payload->>'expires')::timestamptz AS expires,
		max((b.payload->>'price')::numeric) AS final
	FROM nx_input a JOIN nx_input b ON b.kind = 'bid'
		AND (b.payload->>'auction')::bigint = (a.payload->>'id')::bigint
		AND (b.payload->>'ts')::timestamptz BETWEEN (a.payload->>'ts')::timestamptz AND (a.payload->>'expires')::timestamptz
	WHERE a.kind = 'auction' GROUP BY 1, 2, 3, 4};

# the streaming side of the same: statements keeping the open auctions of
# table $t (with the given columns) and their highest valid bid, batch by
# batch; closing them is the query's own statement
sub open_auctions
{
	my ($t) = @_;
	return qq{INSERT INTO $t (id, seller, category, ts, expires)
	SELECT (payload->>'id')::bigint, (payload->>'seller')::bigint, (payload->>'category')::int,
		(payload->>'ts')::timestamptz, (payload->>'expires')::timestamptz
	FROM batch WHERE key = 'auction';
UPDATE $t o SET final = greatest(o.final, w.price)
	FROM (SELECT a.id, max((b.payload->>'price')::numeric) AS price
		FROM batch b JOIN $t a ON a.id = (b.payload->>'auction')::bigint
			AND (b.payload->>'ts')::timestamptz BETWEEN a.ts AND a.expires
		WHERE b.key = 'bid' GROUP BY a.id) w
	WHERE o.id = w.id};
}

# the watermark of a batch: the event time of its last event, which is its
# highest (the generator's event times increase with the stream's order,
# in one partition); one event's time read, not every event's parsed
my $WM = q{(SELECT (payload->>'ts')::timestamptz FROM (SELECT payload FROM batch ORDER BY seq DESC LIMIT 1) l)};

# q5's plain SQL (q5 and q5w): per hopping window, the auctions with the most bids
my $Q5_PLAIN = qq{WITH c AS (SELECT ws, (payload->>'auction')::bigint AS auction, count(*) AS n
			FROM nx_input, LATERAL generate_series(date_bin('10 ms', (payload->>'ts')::timestamptz, $EPOCH) - interval '40 ms',
				date_bin('10 ms', (payload->>'ts')::timestamptz, $EPOCH), interval '10 ms') ws
			WHERE kind = 'bid' GROUP BY 1, 2)
		SELECT ws, ws + interval '50 ms', auction, n FROM (SELECT *, max(n) OVER (PARTITION BY ws) AS mx FROM c) m WHERE n = mx};

my @Q = (
	{
		name => 'q0',
		setup => q{CREATE TABLE q0_out (payload jsonb);
SELECT streamguard.create_pipeline('q0', 'nx', $$INSERT INTO q0_out SELECT payload FROM batch$$);},
		out => 'SELECT payload FROM q0_out',
		plain => q{SELECT payload FROM nx_input UNION ALL SELECT '{"kind": "end", "ts": "2030-01-01T00:00:00Z"}'},
	},
	{
		name => 'q1',
		setup => q{CREATE TABLE q1_out (auction bigint, bidder bigint, price numeric, ts timestamptz);
SELECT streamguard.create_pipeline('q1', 'nx', $$INSERT INTO q1_out
	SELECT (payload->>'auction')::bigint, (payload->>'bidder')::bigint,
		0.908 * (payload->>'price')::numeric, (payload->>'ts')::timestamptz
	FROM batch WHERE key = 'bid'$$);},
		out => 'SELECT * FROM q1_out',
		plain => q{SELECT (payload->>'auction')::bigint, (payload->>'bidder')::bigint,
		0.908 * (payload->>'price')::numeric, (payload->>'ts')::timestamptz FROM nx_input WHERE kind = 'bid'},
	},
	{
		name => 'q2',
		setup => q{CREATE TABLE q2_out (auction bigint, price numeric);
SELECT streamguard.create_pipeline('q2', 'nx', $$INSERT INTO q2_out
	SELECT (payload->>'auction')::bigint, (payload->>'price')::numeric
	FROM batch WHERE key = 'bid' AND (payload->>'auction')::bigint % 123 = 0$$);},
		out => 'SELECT * FROM q2_out',
		plain => q{SELECT (payload->>'auction')::bigint, (payload->>'price')::numeric
		FROM nx_input WHERE kind = 'bid' AND (payload->>'auction')::bigint % 123 = 0},
	},
	{
		# person-auction join: a symmetric incremental join over two state
		# tables (each side joins what the other has stored; people first, so
		# a pair in one batch is found once, by its auction)
		name => 'q3',
		setup => q{CREATE TABLE q3_out (name text, city text, state text, auction bigint);
CREATE TABLE q3_people (id bigint PRIMARY KEY, name text, city text, state text);
CREATE TABLE q3_auctions (id bigint PRIMARY KEY, seller bigint);
CREATE INDEX ON q3_auctions (seller);
SELECT streamguard.create_pipeline('q3', 'nx', $$
INSERT INTO q3_people SELECT (payload->>'id')::bigint, payload->>'name', payload->>'city', payload->>'state'
	FROM batch WHERE key = 'person' AND payload->>'state' IN ('OR', 'ID', 'CA');
INSERT INTO q3_out SELECT p.name, p.city, p.state, a.id
	FROM q3_auctions a JOIN batch b ON b.key = 'person' AND a.seller = (b.payload->>'id')::bigint
	JOIN q3_people p ON p.id = a.seller;
INSERT INTO q3_out SELECT p.name, p.city, p.state, (b.payload->>'id')::bigint
	FROM batch b JOIN q3_people p ON p.id = (b.payload->>'seller')::bigint
	WHERE b.key = 'auction' AND (b.payload->>'category')::int = 10;
INSERT INTO q3_auctions SELECT (payload->>'id')::bigint, (payload->>'seller')::bigint
	FROM batch WHERE key = 'auction' AND (payload->>'category')::int = 10$$);},
		out => 'SELECT * FROM q3_out',
		plain => q{SELECT p.payload->>'name', p.payload->>'city', p.payload->>'state', (a.payload->>'id')::bigint
		FROM nx_input a JOIN nx_input p ON p.kind = 'person' AND (p.payload->>'id')::bigint = (a.payload->>'seller')::bigint
		WHERE a.kind = 'auction' AND (a.payload->>'category')::int = 10 AND p.payload->>'state' IN ('OR', 'ID', 'CA')},
		drop => 'DROP TABLE IF EXISTS q3_people, q3_auctions',
	},
	{
		# average closing price per category: open auctions in a state table
		# with their best valid bid; an auction closes when the watermark
		# passes its expiry, and its winning bid is added to its category
		name => 'q4',
		setup => q{CREATE TABLE q4_out (category int PRIMARY KEY, auctions bigint, total numeric, average numeric);
CREATE TABLE q4_open (id bigint PRIMARY KEY, seller bigint, category int, ts timestamptz, expires timestamptz, final numeric);
CREATE INDEX ON q4_open (expires);
SELECT streamguard.create_pipeline('q4', 'nx', $$} . open_auctions('q4_open') . qq{;
WITH closed AS (DELETE FROM q4_open WHERE expires < $WM RETURNING category, final)
INSERT INTO q4_out AS o SELECT category, count(*), sum(final), avg(final) FROM closed WHERE final IS NOT NULL GROUP BY category
ON CONFLICT (category) DO UPDATE SET auctions = o.auctions + excluded.auctions, total = o.total + excluded.total,
	average = (o.total + excluded.total) / (o.auctions + excluded.auctions)\$\$);},
		out => 'SELECT * FROM q4_out',
		plain => qq{SELECT category, count(*), sum(final), avg(final) FROM ($WINNING) w GROUP BY category},
		drop => 'DROP TABLE IF EXISTS q4_open',
	},
	{
		# hot items: per hopping window (50 ms every 10 ms), the auctions
		# with the most bids.  One pipeline counts the bids per 10 ms slice
		# and auction in a state table (a slice is in five windows: each
		# bid is counted once, not once per window, as Flink's slice
		# sharing does), and keeps the watermark it closed up to in a
		# one-row table; the windows that end past that watermark and at or
		# before the batch's close: each one's counts summed over its five
		# slices, its argmax (ties included) to the output; then the slices
		# no open window holds go.  (q5w does the same with a window
		# pipeline.)
		name => 'q5',
		setup => q{CREATE TABLE q5_out (window_start timestamptz, window_end timestamptz, auction bigint, bids numeric);
CREATE TABLE q5_slices (slice timestamptz, auction bigint, n bigint NOT NULL, PRIMARY KEY (slice, auction));
CREATE TABLE q5_wm (wm timestamptz NOT NULL);
INSERT INTO q5_wm VALUES ('-infinity');
SELECT streamguard.create_pipeline('q5', 'nx', $$} . qq{
INSERT INTO q5_slices AS c SELECT date_bin('10 ms', (b.payload->>'ts')::timestamptz, $EPOCH), (b.payload->>'auction')::bigint, count(*)
	FROM batch b WHERE b.key = 'bid' GROUP BY 1, 2
	ON CONFLICT (slice, auction) DO UPDATE SET n = c.n + excluded.n;
WITH cur AS (SELECT $WM AS wm),
	closing AS (SELECT DISTINCT s.slice - k * interval '10 ms' AS ws
		FROM q5_slices s, generate_series(0, 4) k, q5_wm p, cur
		WHERE s.slice - k * interval '10 ms' + interval '50 ms' > p.wm
			AND s.slice - k * interval '10 ms' + interval '50 ms' <= cur.wm),
	counts AS (SELECT c.ws, s.auction, sum(s.n) AS n FROM closing c
		JOIN q5_slices s ON s.slice >= c.ws AND s.slice < c.ws + interval '50 ms' GROUP BY 1, 2)
INSERT INTO q5_out SELECT ws, ws + interval '50 ms', auction, n
	FROM (SELECT *, max(n) OVER (PARTITION BY ws) AS mx FROM counts) m WHERE n = mx;
DELETE FROM q5_slices WHERE slice + interval '50 ms' <= $WM;
UPDATE q5_wm SET wm = greatest(wm, $WM)\$\$);},
		window => 'q5',
		out => 'SELECT * FROM q5_out',
		plain => $Q5_PLAIN,
		drop => 'DROP TABLE IF EXISTS q5_slices, q5_wm',
	},
	{
		# q5 with a window pipeline: a hopping window pipeline counts the
		# bids per auction (the events of other kinds fall in the NULL key
		# with a count of 0: a window pipeline has no filter) into the
		# stream nx_q5w; a plain
		# pipeline keeps, per window, the auctions with the most bids (an
		# argmax, which a window aggregate cannot be)
		name => 'q5w',
		setup => q{CREATE TABLE q5w_out (window_start timestamptz, window_end timestamptz, auction bigint, bids numeric);
CREATE INDEX ON q5w_out (window_start);
SELECT streamguard.create_stream('nx_q5w', 1);
SELECT streamguard.create_window_pipeline('q5w_count', 'nx', NULL, '50 ms', kind => 'hopping', slide => '10 ms',
	aggregates => $${"bids": "count(payload->>'auction')"}$$,
	event_time => $$payload->>'ts'$$, key => $$payload->>'auction'$$, target_stream => 'nx_q5w');
SELECT streamguard.create_pipeline('q5w', 'nx_q5w', $$
DELETE FROM q5w_out o USING (SELECT (payload->>'window_start')::timestamptz AS ws, max((payload->>'bids')::numeric) AS mx
		FROM batch WHERE payload->>'key' IS NOT NULL GROUP BY 1) b
	WHERE o.window_start = b.ws AND o.bids < b.mx;
INSERT INTO q5w_out SELECT ws, we, auction, n FROM (
	SELECT ws, we, auction, n, max(n) OVER (PARTITION BY ws) AS mx FROM (
		SELECT (payload->>'window_start')::timestamptz AS ws, (payload->>'window_end')::timestamptz AS we,
			(payload->>'key')::bigint AS auction, (payload->>'bids')::numeric AS n
		FROM batch WHERE payload->>'key' IS NOT NULL) e) x
	WHERE n = mx AND n >= coalesce((SELECT max(bids) FROM q5w_out o WHERE o.window_start = x.ws), 0)$$);},
		pipelines => [qw(q5w_count q5w)],
		source => 'nx_q5w',
		window => 'q5w_count',
		out => 'SELECT * FROM q5w_out',
		plain => $Q5_PLAIN,
		drop => q{SELECT streamguard.drop_stream('nx_q5w', force => true)},
	},
	{
		# average selling price per seller over its last 10 closed auctions,
		# one row per closed auction (Nexmark's OVER window of 10 rows): open
		# auctions as in q4; one statement closes them, takes each closed
		# one's average over it and its seller's last 9 (q6_recent), stores
		# it there and trims the seller's older ones (what a statement's CTEs
		# write, its other parts do not see: they read q6_recent as it was)
		name => 'q6',
		setup => q{CREATE TABLE q6_out (seller bigint, auction bigint, final numeric, average numeric);
CREATE TABLE q6_open (id bigint PRIMARY KEY, seller bigint, category int, ts timestamptz, expires timestamptz, final numeric);
CREATE INDEX ON q6_open (expires);
CREATE TABLE q6_recent (id bigint PRIMARY KEY, seller bigint, expires timestamptz, final numeric);
CREATE INDEX ON q6_recent (seller, expires, id);
SELECT streamguard.create_pipeline('q6', 'nx', $$} . open_auctions('q6_open') . qq{;
WITH closed AS (DELETE FROM q6_open WHERE expires < $WM RETURNING id, seller, expires, final),
	won AS (SELECT id, seller, expires, final FROM closed WHERE final IS NOT NULL),
	hist AS (SELECT id, seller, expires, final, false AS fresh FROM q6_recent WHERE seller IN (SELECT seller FROM won)
		UNION ALL SELECT id, seller, expires, final, true FROM won),
	ranked AS (SELECT *, avg(final) OVER (PARTITION BY seller ORDER BY expires, id ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS average,
			row_number() OVER (PARTITION BY seller ORDER BY expires DESC, id DESC) AS rn
		FROM hist),
	keep AS (INSERT INTO q6_recent SELECT id, seller, expires, final FROM won),
	trimmed AS (DELETE FROM q6_recent r USING ranked k WHERE r.id = k.id AND NOT k.fresh AND k.rn > 9)
INSERT INTO q6_out SELECT seller, id, final, average FROM ranked WHERE fresh\$\$);},
		out => 'SELECT * FROM q6_out',
		plain => qq{SELECT seller, id, final, avg(final) OVER (PARTITION BY seller ORDER BY expires, id
			ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) FROM ($WINNING) w},
		drop => 'DROP TABLE IF EXISTS q6_open, q6_recent',
	},
	{
		name => 'q7',
		setup => q{CREATE TABLE q7_out (window_start timestamptz, window_end timestamptz, key text, hi numeric);
SELECT streamguard.create_window_pipeline('q7', 'nx', 'q7_out', '100 ms',
	aggregates => $${"hi": "max((payload->>'price')::numeric)"}$$,
	event_time => $$payload->>'ts'$$, key => $$'all'$$);},
		window => 'q7',
		out => 'SELECT * FROM q7_out',
		plain => qq{SELECT date_bin('100 ms', (payload->>'ts')::timestamptz, $EPOCH) AS ws,
		date_bin('100 ms', (payload->>'ts')::timestamptz, $EPOCH) + interval '100 ms',
		'all', max((payload->>'price')::numeric) FROM nx_input GROUP BY 1},
	},
	{
		# Nexmark's q7 itself: the bids with the highest price of each
		# tumbling window (a row-valued result, which a window aggregate is
		# not): per open window, its highest price so far and the bids at that
		# price, in state tables; when the watermark passes the window's end,
		# its bids move to the output
		name => 'q7b',
		setup => q{CREATE TABLE q7b_out (auction bigint, bidder bigint, price numeric, ts timestamptz);
CREATE TABLE q7b_max (ws timestamptz PRIMARY KEY, price numeric);
CREATE TABLE q7b_bids (ws timestamptz, auction bigint, bidder bigint, price numeric, ts timestamptz);
CREATE INDEX ON q7b_bids (ws);
SELECT streamguard.create_pipeline('q7b', 'nx', $$} . qq{
INSERT INTO q7b_max AS m SELECT date_bin('100 ms', (payload->>'ts')::timestamptz, $EPOCH), max((payload->>'price')::numeric)
	FROM batch WHERE key = 'bid' GROUP BY 1
	ON CONFLICT (ws) DO UPDATE SET price = greatest(m.price, excluded.price);
DELETE FROM q7b_bids c USING q7b_max m WHERE c.ws = m.ws AND c.price < m.price;
INSERT INTO q7b_bids SELECT m.ws, (b.payload->>'auction')::bigint, (b.payload->>'bidder')::bigint,
		(b.payload->>'price')::numeric, (b.payload->>'ts')::timestamptz
	FROM batch b JOIN q7b_max m ON m.ws = date_bin('100 ms', (b.payload->>'ts')::timestamptz, $EPOCH)
		AND m.price = (b.payload->>'price')::numeric
	WHERE b.key = 'bid';
WITH closed AS (DELETE FROM q7b_max WHERE ws + interval '100 ms' <= $WM RETURNING ws),
	moved AS (DELETE FROM q7b_bids c USING closed WHERE c.ws = closed.ws RETURNING c.auction, c.bidder, c.price, c.ts)
INSERT INTO q7b_out SELECT * FROM moved\$\$);},
		out => 'SELECT * FROM q7b_out',
		plain => qq{SELECT (b.payload->>'auction')::bigint, (b.payload->>'bidder')::bigint, (b.payload->>'price')::numeric,
			(b.payload->>'ts')::timestamptz
		FROM nx_input b JOIN (SELECT date_bin('100 ms', (payload->>'ts')::timestamptz, $EPOCH) AS ws, max((payload->>'price')::numeric) AS mx
				FROM nx_input WHERE kind = 'bid' GROUP BY 1) m
			ON m.ws = date_bin('100 ms', (b.payload->>'ts')::timestamptz, $EPOCH) AND m.mx = (b.payload->>'price')::numeric
		WHERE b.kind = 'bid'},
		drop => 'DROP TABLE IF EXISTS q7b_max, q7b_bids',
	},
	{
		# new users who opened an auction in the same tumbling window: a join
		# inside a window, as two state tables keyed by (id, window) and an
		# insert of the pairs the batch completed; a window's state is
		# deleted once the watermark has passed its end
		name => 'q8',
		setup => q{CREATE TABLE q8_out (id bigint, name text, window_start timestamptz, window_end timestamptz,
	PRIMARY KEY (id, window_start));
CREATE TABLE q8_people (id bigint, name text, ws timestamptz, PRIMARY KEY (id, ws));
CREATE TABLE q8_sellers (seller bigint, ws timestamptz, PRIMARY KEY (seller, ws));
SELECT streamguard.create_pipeline('q8', 'nx', $$} . qq{
INSERT INTO q8_people SELECT (payload->>'id')::bigint, payload->>'name', date_bin('50 ms', (payload->>'ts')::timestamptz, $EPOCH)
	FROM batch WHERE key = 'person' ON CONFLICT DO NOTHING;
INSERT INTO q8_sellers SELECT DISTINCT (payload->>'seller')::bigint, date_bin('50 ms', (payload->>'ts')::timestamptz, $EPOCH)
	FROM batch WHERE key = 'auction' ON CONFLICT DO NOTHING;
INSERT INTO q8_out SELECT p.id, p.name, p.ws, p.ws + interval '50 ms'
	FROM (SELECT DISTINCT CASE key WHEN 'person' THEN (payload->>'id')::bigint ELSE (payload->>'seller')::bigint END AS id,
			date_bin('50 ms', (payload->>'ts')::timestamptz, $EPOCH) AS ws
		FROM batch WHERE key IN ('person', 'auction')) t
	JOIN q8_people p ON p.id = t.id AND p.ws = t.ws JOIN q8_sellers s ON s.seller = t.id AND s.ws = t.ws
	ON CONFLICT DO NOTHING;
DELETE FROM q8_people WHERE ws + interval '50 ms' <= $WM;
DELETE FROM q8_sellers WHERE ws + interval '50 ms' <= $WM\$\$);},
		out => 'SELECT * FROM q8_out',
		plain => qq{SELECT DISTINCT (p.payload->>'id')::bigint, p.payload->>'name',
			date_bin('50 ms', (p.payload->>'ts')::timestamptz, $EPOCH), date_bin('50 ms', (p.payload->>'ts')::timestamptz, $EPOCH) + interval '50 ms'
		FROM nx_input p JOIN nx_input a ON a.kind = 'auction' AND (a.payload->>'seller')::bigint = (p.payload->>'id')::bigint
			AND date_bin('50 ms', (a.payload->>'ts')::timestamptz, $EPOCH) = date_bin('50 ms', (p.payload->>'ts')::timestamptz, $EPOCH)
		WHERE p.kind = 'person'},
		drop => 'DROP TABLE IF EXISTS q8_people, q8_sellers',
	},
);

for my $q (@Q)
{
	$q->{pipelines} //= [ $q->{name} ];
	$q->{source}    //= 'nx';
	$q->{drop} = join('; ', (map { "SELECT streamguard.drop_pipeline('$_')" } reverse @{ $q->{pipelines} }),
		"DROP TABLE IF EXISTS $q->{name}_out", $q->{drop} // ());
}

return @Q;
