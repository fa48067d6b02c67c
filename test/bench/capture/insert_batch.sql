-- :batch rows per statement and transaction (table t of the search_path):
-- pgbench -D batch=<rows>
\set acc random(1, 100000)
INSERT INTO t (account, amount, note)
SELECT :acc + g, g * 0.01, 'payment' FROM generate_series(1, :batch) g;
