-- one row per transaction (table t of the search_path); at is stamped by
-- its default, clock_timestamp()
\set acc random(1, 100000)
INSERT INTO t (account, amount, note) VALUES (:acc, :acc * 0.01, 'payment');
