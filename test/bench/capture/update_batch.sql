-- :batch consecutive rows per statement and transaction (table t of the
-- search_path): pgbench -D rows=<rows in t> -D batch=<rows>
\set first random(1, :rows - :batch)
\set last :first + :batch - 1
UPDATE t SET amount = amount + 1, updated_at = now() WHERE id BETWEEN :first AND :last;
