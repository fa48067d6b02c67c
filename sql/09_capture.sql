-- change capture: capture_table / uncapture_table, the events' shape, what
-- DDL and TRUNCATE do to a capture, privileges, bad input (docs/capture.md)
SET client_min_messages = warning;
-- test/regress.conf leaves backfills to run_backfill_chunk; here the workers run them
ALTER SYSTEM SET streamguard.max_backfill_workers = 2;
SELECT pg_reload_conf();

SELECT streamguard.create_stream('cap', 1);
SELECT streamguard.create_stream('cap3', 3);

-- the events a consumer has not seen yet, with the volatile parts checked
-- and dropped: "xid" (present in every live event) and the dedup key's
-- transaction (its shape says whether it is a live change or a backfill row)
CREATE FUNCTION cap_take(s text) RETURNS TABLE (p int, key text, payload jsonb, kind text)
LANGUAGE sql AS $$
SELECT partition, key, payload - 'xid',
	   CASE WHEN dedup_key ~ '^[0-9]+:[0-9]+:[0-9]+$' AND payload ? 'xid' THEN 'live'
			WHEN dedup_key ~ '^[0-9]+:b[0-9]+:[0-9a-f]{16}$' AND NOT payload ? 'xid' THEN 'backfill'
			ELSE 'unexpected dedup key ' || coalesce(dedup_key, 'NULL') END
FROM streamguard.poll(s, 'test', 10000) ORDER BY partition, seq
$$;

-- ------------------------------------------------------- payload shapes
CREATE TABLE cap_acc (id int PRIMARY KEY, owner text NOT NULL, balance numeric, opened timestamptz,
	tags text[], note text);
SELECT streamguard.capture_table('cap_acc', 'cap', backfill => false);
SELECT tab, stream, key_columns, operations, columns, owner, backfill_state, backfill_rows
FROM streamguard.captures;
-- the triggers it installed, enabled ALWAYS
SELECT tgname, tgenabled, pg_get_triggerdef(oid) FROM pg_trigger
WHERE tgrelid = 'cap_acc'::regclass ORDER BY tgname;

INSERT INTO cap_acc VALUES (1, 'ann', 10.50, '2024-03-01 12:00+01', '{a,b}', NULL);
UPDATE cap_acc SET balance = balance + 1 WHERE id = 1;
-- no captured value changed: no event
UPDATE cap_acc SET owner = owner WHERE id = 1;
-- the key changes: a delete of the old key and an insert of the new one
UPDATE cap_acc SET id = 2, note = 'moved' WHERE id = 1;
DELETE FROM cap_acc WHERE id = 2;
SELECT * FROM cap_take('cap');

-- several rows in one statement, a transaction, a rollback
BEGIN;
INSERT INTO cap_acc SELECT g, 'o' || g, g FROM generate_series(10, 12) g;
SAVEPOINT s;
INSERT INTO cap_acc VALUES (13, 'rolled back', 0);
ROLLBACK TO SAVEPOINT s;
UPDATE cap_acc SET balance = balance * 2 WHERE id >= 11;
SELECT pg_current_xact_id()::text AS writer_xid \gset
COMMIT;
BEGIN;
INSERT INTO cap_acc VALUES (14, 'aborted', 0);
ROLLBACK;
SELECT * FROM cap_take('cap');
-- "xid" is the writer's transaction
SELECT count(*) FROM streamguard.read('cap', 0, 0, 1000)
WHERE payload->>'xid' = :'writer_xid';

-- a transaction that changed a captured table cannot be prepared (two-phase
-- commit): its events hold the stream's horizon, which a prepared
-- transaction without a backend could hold forever
BEGIN;
INSERT INTO cap_acc VALUES (15, 'prepared', 0);
PREPARE TRANSACTION 'cap_2pc';
SELECT count(*) FROM pg_prepared_xacts;
SELECT count(*) FROM cap_acc WHERE id = 15;

-- ON CONFLICT, COPY, MERGE
INSERT INTO cap_acc VALUES (10, 'upsert', 0) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner;
COPY cap_acc (id, owner) FROM stdin;
20	copied
\.
MERGE INTO cap_acc a USING (VALUES (20, 'merged'), (21, 'new')) v(id, o) ON a.id = v.id
WHEN MATCHED THEN UPDATE SET owner = v.o
WHEN NOT MATCHED THEN INSERT (id, owner) VALUES (v.id, v.o);
SELECT * FROM cap_take('cap');

-- the writer's settings do not change the bytes: same key and payload
-- (a table of built-in types only, encoded without the pinned settings,
-- and one with an array column, encoded with them)
CREATE TABLE cap_tz (at timestamptz PRIMARY KEY, f float8, b bytea);
SELECT streamguard.capture_table('cap_tz', 'cap', backfill => false);
SET TimeZone = 'Asia/Tokyo';
SET extra_float_digits = -10;
SET bytea_output = 'escape';
INSERT INTO cap_tz VALUES ('2024-03-01 12:00+01', 0.1, '\x00ff');
RESET TimeZone;
RESET extra_float_digits;
RESET bytea_output;
SELECT key, payload->'row' AS row FROM cap_take('cap');
SELECT streamguard.uncapture_table('cap_tz');
SET TimeZone = 'Asia/Tokyo';
SET DateStyle = 'SQL, DMY';
SET extra_float_digits = -10;
SET bytea_output = 'escape';
INSERT INTO cap_acc VALUES (30, 'tokyo', 1.5, '2024-03-01 12:00+01');
RESET TimeZone;
RESET DateStyle;
RESET extra_float_digits;
RESET bytea_output;
INSERT INTO cap_acc VALUES (31, 'tokyo', 1.5, '2024-03-01 12:00+01');
SELECT payload->'row'->'opened' FROM cap_take('cap');

-- every type: the row is what to_jsonb gives with the settings pinned (UTC,
-- ISO dates, shortest floats, hex bytea), NULLs and large values included
CREATE TYPE cap_mood AS ENUM ('sad', 'happy');
CREATE TYPE cap_pair AS (a int, b text);
CREATE DOMAIN cap_posint AS int CHECK (VALUE > 0);
-- A server built without libxml rejects every xml value: there the column
-- is text, which encodes '<a/>' the same way.
SELECT CASE WHEN try($$SELECT '<a/>'::xml$$) = 'ok' THEN 'xml' ELSE 'text' END AS cap_xml_type \gset
CREATE TABLE cap_types (id int PRIMARY KEY, b bool, i2 int2, i4 int4, i8 int8, n numeric, f4 float4,
	f8 float8, t text, vc varchar(10), c char(5), nm name, d date, ts timestamp, tz timestamptz, j json,
	jb jsonb, by bytea, u uuid, ip inet, mood cap_mood, iv interval, arr int[], pair cap_pair,
	dom cap_posint, tm time, ttz timetz, m money, o oid, bt bit(3), x :cap_xml_type, r int4range);
SELECT streamguard.capture_table('cap_types', 'cap', backfill => false);
INSERT INTO cap_types VALUES
	(1, true, 1, 2, 3, 1.50, 1.5, 0.1, 'a"b\c', 'vc', 'c', 'nm', '2024-02-29', '2024-01-01 10:00',
	 '2024-01-01 10:00+05', '{"a": [1, 2]}', '{"b": null}', '\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
	 '10.0.0.1/8', 'happy', '1 day 2 hours 3.5 seconds', '{1,NULL,3}', '(1,x)', 7, '10:11:12', '10:11:12+03',
	 12.5, 42, B'101', '<a/>', '[1,5)'),
	(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
	(3, false, -32768, -2147483648, -9223372036854775808, 'NaN', 'Infinity', '-Infinity',
	 repeat('x', 1000000), '', ' ', '', 'infinity', '-infinity', 'infinity', '"s"', '123.40', '\x', NULL,
	 '::1', 'sad', '-1 year', '{}', '(,)', 1, '00:00', '00:00+00', -0.01, 0, B'000', NULL, 'empty'),
	(4, false, 0, 0, 0, -0.000001, 3.4e38, 1e-300, '€ ü', NULL, NULL, NULL, '0001-01-01 BC',
	 '2000-01-01 00:00:00.000001', '1999-12-31 23:59:59.999999-08', '[]', '[1, "x", {"y": []}]', '\xdeadbeef',
	 NULL, NULL, NULL, '1 mon', '{{1,2},{3,4}}', NULL, 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
CREATE TEMP TABLE cap_ev AS SELECT * FROM cap_take('cap');
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
SET extra_float_digits = 1;
SET bytea_output = 'hex';
SET lc_monetary = 'C';
SELECT ct.id, e.kind, e.payload->'row' = to_jsonb(ct) AS same_as_to_jsonb,
	   length(e.payload->'row'->>'t') AS text_length
FROM cap_types ct JOIN cap_ev e ON e.key = ct.id::text ORDER BY ct.id;
SELECT jsonb_pretty(payload->'row') FROM cap_ev WHERE key = '1';
RESET ALL;
SET client_min_messages = warning;
SELECT streamguard.uncapture_table('cap_types');

-- a key's events land in the partition append gives the key
CREATE TABLE cap_multi (region text NOT NULL, n int NOT NULL, v float8, b bytea, PRIMARY KEY (region, n));
SELECT streamguard.capture_table('cap_multi', 'cap3', key_columns => '{n,region}', backfill => false);
INSERT INTO cap_multi SELECT r, g, g / 3.0, '\x0102' FROM unnest('{eu,us}'::text[]) r, generate_series(1, 3) g;
SELECT p, key, payload FROM cap_take('cap3') ORDER BY key;
SELECT count(*) AS events, count(*) FILTER (WHERE e.partition = a.partition) AS same_partition
FROM (SELECT * FROM streamguard.read('cap3', 0, 0, 100) UNION ALL
	  SELECT * FROM streamguard.read('cap3', 1, 0, 100) UNION ALL
	  SELECT * FROM streamguard.read('cap3', 2, 0, 100)) e
CROSS JOIN LATERAL streamguard.append('cap3', '{"probe": true}', key => e.key) a
WHERE e.payload ? 'op';
SELECT streamguard.uncapture_table('cap_multi');

-- columns: the payload's row is those columns; an update that changes only
-- other columns emits nothing
CREATE TABLE cap_cols (id int PRIMARY KEY, a int, b int, secret text);
SELECT streamguard.capture_table('cap_cols', 'cap', columns => '{a,b}', backfill => false);
INSERT INTO cap_cols VALUES (1, 1, 1, 'pw');
UPDATE cap_cols SET secret = 'pw2' WHERE id = 1;
UPDATE cap_cols SET a = 2 WHERE id = 1;
SELECT * FROM cap_take('cap');
SELECT columns FROM streamguard.captures WHERE tab = 'cap_cols'::regclass;

-- operations: only inserts
CREATE TABLE cap_log (id int PRIMARY KEY, msg text);
SELECT streamguard.capture_table('cap_log', 'cap', operations => '{insert}', backfill => false);
INSERT INTO cap_log VALUES (1, 'one');
UPDATE cap_log SET msg = 'uno';
DELETE FROM cap_log;
-- an insert-only capture lets TRUNCATE through, as it lets DELETE
INSERT INTO cap_log VALUES (2, 'two');
TRUNCATE cap_log;
SELECT * FROM cap_take('cap');

-- a row changed again by the user's own AFTER trigger: the event of the
-- outer change fires after the nested one and is left out, so the last
-- event per key is the row's final state
CREATE TABLE cap_nested (id int PRIMARY KEY, v int);
CREATE FUNCTION cap_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.v < 100 THEN UPDATE cap_nested SET v = NEW.v + 100 WHERE id = NEW.id; END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER a_bump AFTER INSERT OR UPDATE ON cap_nested FOR EACH ROW EXECUTE FUNCTION cap_bump();
SELECT streamguard.capture_table('cap_nested', 'cap', backfill => false);
INSERT INTO cap_nested VALUES (1, 1), (2, 2);
SELECT * FROM cap_nested ORDER BY id;
SELECT * FROM cap_take('cap');
-- a delete whose trigger puts the key back: the delete is left out
CREATE FUNCTION cap_undelete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO cap_nested VALUES (OLD.id, 500);
	RETURN NULL;
END $$;
CREATE TRIGGER a_undelete AFTER DELETE ON cap_nested FOR EACH ROW EXECUTE FUNCTION cap_undelete();
DELETE FROM cap_nested WHERE id = 1;
SELECT * FROM cap_nested ORDER BY id;
SELECT * FROM cap_take('cap');
SELECT streamguard.uncapture_table('cap_nested');

-- partitioned tables: the trigger is cloned to every partition, also one
-- attached later, and fires for rows written to a partition directly
CREATE TABLE cap_part (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE cap_part_eu PARTITION OF cap_part FOR VALUES IN ('eu');
SELECT streamguard.capture_table('cap_part', 'cap', backfill => false);
CREATE TABLE cap_part_us (v int, region text NOT NULL, id int NOT NULL);
ALTER TABLE cap_part ATTACH PARTITION cap_part_us FOR VALUES IN ('us');
INSERT INTO cap_part VALUES (1, 'eu', 1), (2, 'us', 2);
INSERT INTO cap_part_us VALUES (3, 'us', 3);
UPDATE cap_part SET region = 'eu' WHERE id = 2;
SELECT * FROM cap_take('cap');
SELECT tgrelid::regclass, tgname, tgenabled FROM pg_trigger
WHERE tgname LIKE 'streamguard_capture_%' AND tgrelid::regclass::text LIKE 'cap_part%' ORDER BY 1, 2;
SELECT try('TRUNCATE cap_part_eu');
SELECT try('TRUNCATE cap_part');
-- a partition and its partitioned table cannot both be captured into a stream
SELECT try($$SELECT streamguard.capture_table('cap_part_us', 'cap')$$);
-- a detached partition keeps nothing of the capture
ALTER TABLE cap_part DETACH PARTITION cap_part_us;
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cap_part_us'::regclass;

-- ------------------------------------------------------------- backfill
CREATE TABLE cap_old (id bigint PRIMARY KEY, v text);
INSERT INTO cap_old SELECT g, 'v' || g FROM generate_series(1, 5) g;
SELECT streamguard.capture_table('cap_old', 'cap');
SELECT wait_for($$(SELECT backfill_state FROM streamguard.captures WHERE tab = 'cap_old'::regclass) = 'done'$$);
SELECT backfill_state, backfill_rows, backfill_skipped, backfill_percent,
	   backfill_started_at IS NOT NULL AS started, backfill_done_at IS NOT NULL AS done, backfill_error
FROM streamguard.captures WHERE tab = 'cap_old'::regclass;
SELECT * FROM cap_take('cap');
-- without backfill: existing rows produce nothing
CREATE TABLE cap_quiet (id int PRIMARY KEY);
INSERT INTO cap_quiet VALUES (1);
SELECT streamguard.capture_table('cap_quiet', 'cap', backfill => false);
SELECT backfill_state FROM streamguard.captures WHERE tab = 'cap_quiet'::regclass;
SELECT count(*) FROM cap_take('cap');
-- the claims of a finished backfill are gone
SELECT count(*) FROM streamguard.capture_claim;

-- --------------------------------------------------------- TRUNCATE, DDL
SELECT try('TRUNCATE cap_acc');
SELECT try('TRUNCATE cap_old, cap_quiet');
-- a key column, the key's unique index, a capture's trigger: refused
SELECT try('ALTER TABLE cap_acc DROP COLUMN id');
SELECT try('ALTER TABLE cap_acc DROP CONSTRAINT cap_acc_pkey');
SELECT try('DROP TRIGGER streamguard_capture_1 ON cap_acc');
SELECT try('ALTER TRIGGER streamguard_capture_1 ON cap_acc RENAME TO x');
-- another column goes, from the row and from the capture's columns
ALTER TABLE cap_acc DROP COLUMN tags;
ALTER TABLE cap_cols DROP COLUMN b;
SELECT columns FROM streamguard.captures WHERE tab = 'cap_cols'::regclass;
UPDATE cap_cols SET a = 3;
-- a renamed column is named anew
ALTER TABLE cap_acc RENAME COLUMN note TO remark;
UPDATE cap_acc SET remark = 'renamed' WHERE id = 10;
SELECT * FROM cap_take('cap');
-- a renamed table or schema too
CREATE SCHEMA cap_ns;
CREATE TABLE cap_ns.moved (id int PRIMARY KEY);
SELECT streamguard.capture_table('cap_ns.moved', 'cap', backfill => false);
INSERT INTO cap_ns.moved VALUES (1);
ALTER SCHEMA cap_ns RENAME TO cap_ns2;
INSERT INTO cap_ns2.moved VALUES (2);
ALTER TABLE cap_ns2.moved RENAME TO moved2;
INSERT INTO cap_ns2.moved2 VALUES (3);
SELECT key, payload->>'table' AS "table" FROM cap_take('cap');
-- COPY FREEZE into a table captured in the same transaction (its rows are
-- frozen at once): the backfill still sends them once
BEGIN;
CREATE TABLE cap_frozen (id int PRIMARY KEY);
SELECT streamguard.capture_table('cap_frozen', 'cap');
COPY cap_frozen FROM stdin WITH (FREEZE);
1
2
\.
COMMIT;
SELECT wait_for($$(SELECT backfill_state FROM streamguard.captures WHERE tab = 'cap_frozen'::regclass) = 'done'$$);
SELECT key, payload->>'op' AS op FROM cap_take('cap');
-- a dropped table takes its capture with it
CREATE TABLE cap_gone (id int PRIMARY KEY);
SELECT streamguard.capture_table('cap_gone', 'cap');
DROP TABLE cap_gone;
SELECT count(*) FROM streamguard.capture c WHERE NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = c.relid);
-- DROP EXTENSION refuses while tables are captured; CASCADE removes the triggers
-- (retried while it loses a deadlock with the database's workers: 40P01 once on 18 at load 15)
SELECT try_retry('DROP EXTENSION streamguard');
BEGIN;
SELECT try_retry('DROP EXTENSION streamguard CASCADE');
SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'streamguard_capture%';
INSERT INTO cap_acc VALUES (99, 'uncaptured');
ROLLBACK;
-- drop_stream refuses while tables are captured into it; force uncaptures them
SELECT streamguard.create_stream('cap_tmp');
CREATE TABLE cap_t (id int PRIMARY KEY);
SELECT streamguard.capture_table('cap_t', 'cap_tmp');
SELECT try($$SELECT streamguard.drop_stream('cap_tmp')$$);
SELECT streamguard.drop_stream('cap_tmp', force => true);
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cap_t'::regclass;
INSERT INTO cap_t VALUES (1);

-- ------------------------------------------------------------ privileges
CREATE ROLE cap_owner;
CREATE ROLE cap_writer;
CREATE ROLE cap_stranger;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO cap_owner;
CREATE SCHEMA cap_s AUTHORIZATION cap_owner;
GRANT USAGE ON SCHEMA cap_s TO PUBLIC;
SET search_path = cap_s, public;
SET ROLE cap_owner;
CREATE TABLE cap_priv (id int PRIMARY KEY, v text);
CREATE TABLE cap_priv2 (id int PRIMARY KEY);
SELECT streamguard.create_stream('cap_priv', 1);
SELECT streamguard.capture_table('cap_priv', 'cap_priv', backfill => false);
GRANT INSERT, UPDATE, SELECT ON cap_priv TO cap_writer;
RESET ROLE;
-- the writer needs no privilege on the stream
SET ROLE cap_writer;
INSERT INTO cap_priv VALUES (1, 'by writer');
SELECT try($$SELECT streamguard.append('cap_priv', '{}')$$);
RESET ROLE;
-- a stranger can neither capture the owner's table nor uncapture it
SET ROLE cap_stranger;
SELECT try($$SELECT streamguard.capture_table('cap_priv2', 'cap')$$);
SELECT try($$SELECT streamguard.uncapture_table('cap_priv')$$);
-- ... sees the capture, but not the backfill's position or error
SELECT tab, stream, owner, backfill_position IS NULL AS hidden FROM streamguard.captures
WHERE tab = 'cap_priv'::regclass;
RESET ROLE;
-- a reader whom a row-level security policy keeps from a row may SELECT the
-- table, but sees neither the backfill's position (a key) nor its error; a
-- member of the table's owner does (the capture's owner here is the superuser)
CREATE ROLE cap_reader;
CREATE ROLE cap_owner_member IN ROLE cap_owner;
SET ROLE cap_owner;
CREATE TABLE cap_rls (id int PRIMARY KEY, secret text);
INSERT INTO cap_rls VALUES (1, 'hidden'), (2, 'shown');
ALTER TABLE cap_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY only_two ON cap_rls FOR SELECT USING (id = 2);
GRANT SELECT ON cap_rls TO cap_reader;
RESET ROLE;
SELECT streamguard.capture_table('cap_rls', 'cap_priv');
SELECT streamguard.run_backfill_chunk('cap_rls', 'cap_priv', 1) >= 0 AS chunk;
SET ROLE cap_reader;
SELECT count(*) AS visible_rows FROM cap_rls;
SELECT backfill_position IS NULL AS position_hidden, backfill_error IS NULL AS error_hidden
FROM streamguard.captures WHERE tab = 'cap_rls'::regclass;
RESET ROLE;
SET ROLE cap_owner_member;
SELECT backfill_position IS NOT NULL AS position_shown FROM streamguard.captures
WHERE tab = 'cap_rls'::regclass;
RESET ROLE;
SELECT backfill_position IS NOT NULL AS position_shown FROM streamguard.captures
WHERE tab = 'cap_rls'::regclass;
SELECT streamguard.uncapture_table('cap_rls');
DROP TABLE cap_rls;
DROP ROLE cap_reader, cap_owner_member;
-- owning the table is not enough: append on the stream is needed too
SET ROLE cap_owner;
SELECT try($$SELECT streamguard.capture_table('cap_priv2', 'cap')$$);
RESET ROLE;
-- the capture's owner loses append: writes fail rather than go unrecorded
SELECT streamguard.grant_stream('cap', 'cap_owner', 'append');
SET ROLE cap_owner;
SELECT streamguard.capture_table('cap_priv2', 'cap', backfill => false);
RESET ROLE;
SELECT streamguard.revoke_stream('cap', 'cap_owner', 'append');
SET ROLE cap_owner;
SELECT try('INSERT INTO cap_priv2 VALUES (1)');
RESET ROLE;
SELECT streamguard.grant_stream('cap', 'cap_owner', 'append');
SET ROLE cap_owner;
INSERT INTO cap_priv2 VALUES (1);
RESET ROLE;
-- the table changes owner: the capture keeps appending as its owner
ALTER TABLE cap_priv2 OWNER TO cap_stranger;
INSERT INTO cap_priv2 VALUES (2);
SELECT key, payload->>'op' AS op FROM cap_take('cap');
-- DROP ROLE refuses while the role owns captures; REASSIGN OWNED moves
-- them; the table's owner may uncapture
CREATE FUNCTION public.try_detail(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE d text;
BEGIN
	EXECUTE cmd;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM || E'\n' || d;
END $$;
SELECT try_detail('DROP ROLE cap_owner');
REASSIGN OWNED BY cap_owner TO cap_stranger;
SELECT tab, owner FROM streamguard.captures WHERE tab IN ('cap_priv'::regclass, 'cap_priv2'::regclass) ORDER BY 1;
SET ROLE cap_stranger;
SELECT streamguard.uncapture_table('cap_priv2');
RESET ROLE;
-- DROP OWNED removes the role's captures (and its tables, and streams)
DROP OWNED BY cap_stranger;
SELECT count(*) FROM streamguard.captures WHERE stream = 'cap_priv';
RESET search_path;
REVOKE EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) FROM cap_owner;
DROP ROLE cap_owner, cap_writer, cap_stranger;

-- ------------------------------------------------------------ bad input
CREATE TABLE cap_bad (id int PRIMARY KEY, u int UNIQUE, nn int NOT NULL, d int, x int);
CREATE UNIQUE INDEX cap_bad_nn ON cap_bad (nn);
CREATE UNIQUE INDEX cap_bad_partial ON cap_bad (d) WHERE d > 0;
CREATE TABLE cap_nokey (a int);
CREATE VIEW cap_view AS SELECT 1 AS a;
CREATE MATERIALIZED VIEW cap_mv AS SELECT 1 AS a;
CREATE SEQUENCE cap_seq;
CREATE TEMP TABLE cap_temp (id int PRIMARY KEY);
CREATE UNLOGGED TABLE cap_unlogged (id int PRIMARY KEY);
CREATE TABLE cap_parent (id int PRIMARY KEY);
CREATE TABLE cap_child () INHERITS (cap_parent);
CREATE FOREIGN DATA WRAPPER cap_fdw;
CREATE SERVER cap_srv FOREIGN DATA WRAPPER cap_fdw;
CREATE FOREIGN TABLE cap_foreign (id int) SERVER cap_srv;
SELECT try($$SELECT streamguard.capture_table(NULL, 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', NULL)$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'nope')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'no such stream')$$);
SELECT try($$SELECT streamguard.capture_table(2147483647::oid::regclass, 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', operations => NULL)$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', operations => '{}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', operations => '{insert,upsert}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', operations => '{insert,insert}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', operations => '{insert,NULL}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', operations => '{{insert}}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', backfill => NULL)$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{nope}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{ctid}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{id,id}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{id,NULL}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{x}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{id,nn}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{u}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{d}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', columns => '{}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', columns => '{x,nope}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', columns => '{x,x}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap', columns => '{NULL}')$$);
SELECT try($$SELECT streamguard.capture_table('cap_nokey', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_view', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_mv', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_seq', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_foreign', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_temp', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_unlogged', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_parent', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('cap_child', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('pg_class', 'cap')$$);
SELECT try($$SELECT streamguard.capture_table('streamguard.stream', 'cap')$$);
-- the key given by a unique index works; a second capture into the same stream does not
SELECT streamguard.capture_table('cap_bad', 'cap', key_columns => '{nn}', backfill => false);
SELECT try($$SELECT streamguard.capture_table('cap_bad', 'cap')$$);
-- ... into another stream it does
SELECT streamguard.capture_table('cap_bad', 'cap3', backfill => false);
SELECT tab, stream, key_columns FROM streamguard.captures WHERE tab = 'cap_bad'::regclass ORDER BY stream;
-- uncapture
SELECT try($$SELECT streamguard.uncapture_table(NULL)$$);
SELECT try($$SELECT streamguard.uncapture_table('cap_nokey')$$);
SELECT try($$SELECT streamguard.uncapture_table('cap_bad', 'cap_priv')$$);
SELECT try($$SELECT streamguard.uncapture_table('cap_bad', 'no_such_stream')$$);
SELECT try($$SELECT streamguard.uncapture_table('cap_bad', 'bad name!')$$);
SELECT streamguard.uncapture_table('cap_bad', 'cap3');
SELECT stream FROM streamguard.captures WHERE tab = 'cap_bad'::regclass;
SELECT streamguard.uncapture_table('cap_bad');
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cap_bad'::regclass AND tgname LIKE 'streamguard%';
-- run_backfill_chunk
SELECT try($$SELECT streamguard.run_backfill_chunk(NULL, 'cap')$$);
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_old', NULL)$$);
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_old', 'cap', NULL)$$);
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_old', 'cap', 0)$$);
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_nokey', 'cap')$$);
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_old', 'cap3')$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_old', 'cap')$$);
ROLLBACK;
-- a finished backfill has nothing left
SELECT streamguard.run_backfill_chunk('cap_old', 'cap');
CREATE ROLE cap_nobody2;
GRANT SELECT ON cap_old TO cap_nobody2;
SET ROLE cap_nobody2;
SELECT try($$SELECT streamguard.run_backfill_chunk('cap_old', 'cap')$$);
RESET ROLE;
REVOKE SELECT ON cap_old FROM cap_nobody2;
DROP ROLE cap_nobody2;

-- the trigger function is for capture_table's triggers only: another name,
-- or the name of a capture of another table, is refused
CREATE TRIGGER x AFTER INSERT ON cap_nokey FOR EACH ROW EXECUTE FUNCTION streamguard._capture_trigger('1');
SELECT try('INSERT INTO cap_nokey VALUES (1)');
DROP TRIGGER x ON cap_nokey;
CREATE TRIGGER streamguard_capture_1 AFTER INSERT ON cap_nokey FOR EACH ROW EXECUTE FUNCTION streamguard._capture_trigger('1');
SELECT try('INSERT INTO cap_nokey VALUES (1)');
DROP TRIGGER streamguard_capture_1 ON cap_nokey;
SELECT try($$SELECT streamguard._capture_trigger()$$);
-- and nobody but its owner may attach it
CREATE ROLE cap_nobody;
GRANT ALL ON cap_nokey TO cap_nobody;
SET ROLE cap_nobody;
SELECT try($$CREATE TRIGGER y AFTER INSERT ON cap_nokey FOR EACH ROW EXECUTE FUNCTION streamguard._capture_trigger('1')$$);
RESET ROLE;
REVOKE ALL ON cap_nokey FROM cap_nobody;
DROP ROLE cap_nobody;

-- a stream that takes JSON objects only (set_payload_check) takes captured
-- changes: every captured payload is an object
SELECT streamguard.create_stream('cap_obj', 1);
SELECT streamguard.set_payload_check('cap_obj', 'object');
CREATE TABLE cap_objt (id int PRIMARY KEY, v text);
SELECT streamguard.capture_table('cap_objt', 'cap_obj', backfill => false);
INSERT INTO cap_objt VALUES (1, 'a');
UPDATE cap_objt SET v = 'b';
DELETE FROM cap_objt;
SELECT count(*) AS events, bool_and(jsonb_typeof(payload) = 'object') AS all_objects
FROM streamguard.poll('cap_obj', 'c', 100);
SELECT streamguard.drop_stream('cap_obj', force => true);
DROP TABLE cap_objt;

-- what is left
SELECT tab, stream, backfill_state FROM streamguard.captures ORDER BY tab::text, stream;

ALTER SYSTEM RESET streamguard.max_backfill_workers;
SELECT pg_reload_conf();
