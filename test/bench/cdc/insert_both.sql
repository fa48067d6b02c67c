-- the outage writer of the cdc benchmark: one transaction, one row into each
-- path's table (captured.t for streamguard, logical.t for the slot), so both
-- consumers have the same backlog of changes to catch up on
\set acc random(1, 100000)
BEGIN;
INSERT INTO captured.t (account, amount, note) VALUES (:acc, :acc * 0.01, 'payment');
INSERT INTO logical.t (account, amount, note) VALUES (:acc, :acc * 0.01, 'payment');
END;
