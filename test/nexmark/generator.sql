-- Nexmark event generator, in SQL (our own, after the Nexmark model).
--
-- Event n (0-based) of every 50 is a person when n % 50 = 0, an auction
-- when n % 50 in 1..3, else a bid: the 1:3:46 proportion.  Event time
-- advances by step_us microseconds per event from 2026-01-01 UTC (the
-- configured rate).  All randomness is a hash of (n, seed): the same seed
-- gives the same events.  Bids go to recent auctions (90 % to one of the
-- last hot_window auctions: "hot items") and recent bidders; auctions' sellers
-- are recent people.  Appended to one stream with a "kind" field (keys are
-- the kind), so that a join of people and auctions reads one ordered input.

CREATE OR REPLACE FUNCTION nexmark_rnd(n bigint, salt int, seed bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT abs(hashint8extended(n * 131 + salt, seed)) $$;

CREATE OR REPLACE FUNCTION nexmark_events(first bigint, n bigint, seed bigint DEFAULT 1,
	step_us bigint DEFAULT 100)
RETURNS TABLE (id bigint, kind text, payload jsonb)
LANGUAGE sql STABLE
AS $$
SELECT g, k,
	CASE k
	WHEN 'person' THEN jsonb_build_object('kind', k, 'id', g / 50 + 1000,
		'name', 'p' || (g / 50), 'city', (ARRAY['Phoenix', 'Los Angeles', 'San Francisco', 'Boise', 'Portland', 'Bend', 'Redmond', 'Seattle', 'Kent', 'Cheyenne'])[1 + nexmark_rnd(g, 1, seed) % 10],
		'state', (ARRAY['AZ', 'CA', 'ID', 'OR', 'WA', 'WY'])[1 + nexmark_rnd(g, 2, seed) % 6],
		'ts', ts)
	WHEN 'auction' THEN jsonb_build_object('kind', k, 'id', (g / 50) * 3 + (g % 50) - 1 + 1000,
		-- seller: a recent person, or a hot one (every 100th person)
		'seller', CASE WHEN nexmark_rnd(g, 3, seed) % 4 = 0 THEN (g / 50 / 100) * 100 + 1000
			ELSE g / 50 - least(g / 50, nexmark_rnd(g, 4, seed) % 20) + 1000 END,
		'category', 10 + nexmark_rnd(g, 5, seed) % 5,
		'initial', 1 + nexmark_rnd(g, 6, seed) % 1000,
		'expires', ts + (nexmark_rnd(g, 7, seed) % 2000 + 500) * step_us * interval '1 microsecond',
		'ts', ts)
	ELSE jsonb_build_object('kind', k,
		-- auction: 90 % one of the 10 newest, else one of the 100 newest
		'auction', (g / 50) * 3 + 2 + 1000 - least((g / 50) * 3 + 2,
			CASE WHEN nexmark_rnd(g, 8, seed) % 10 < 9 THEN nexmark_rnd(g, 9, seed) % 10
			ELSE nexmark_rnd(g, 9, seed) % 100 END),
		'bidder', g / 50 + 1000 - least(g / 50, nexmark_rnd(g, 10, seed) % 50),
		'price', 100 + nexmark_rnd(g, 11, seed) % 10000,
		'channel', (ARRAY['Google', 'Facebook', 'Baidu', 'Apple'])[1 + nexmark_rnd(g, 12, seed) % 4],
		'url', 'https://www.nexmark.com/item/' || nexmark_rnd(g, 13, seed) % 1000,
		'ts', ts)
	END
FROM generate_series(first, first + n - 1) g,
	LATERAL (SELECT CASE WHEN g % 50 = 0 THEN 'person' WHEN g % 50 <= 3 THEN 'auction' ELSE 'bid' END AS k,
		timestamptz '2026-01-01 00:00:00+00' + g * step_us * interval '1 microsecond' AS ts) x
$$;
