-- one row per transaction (table t of the search_path): pgbench -D rows=<rows in t>
\set id random(1, :rows)
UPDATE t SET amount = amount + 1, updated_at = now() WHERE id = :id;
