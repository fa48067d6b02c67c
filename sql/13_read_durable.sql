-- read() makes what it returns durable: it flushes the WAL up to the insert
-- position.  When the last record ended exactly on a page boundary, that
-- position lies past the next page's header, where nothing is written yet;
-- the flush must stop at the boundary instead of failing ("xlog flush
-- request ... is not satisfied").  The WAL is filled with messages sized to
-- end on a page boundary, then read() runs there (a few times: other
-- backends' WAL may move the position in between).
SET client_min_messages = warning;
SELECT streamguard.create_stream('durable', 1);
SELECT count(*) FROM streamguard.append('durable', '{}');
CREATE FUNCTION read_at_page_boundary() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	off int;
	before int;
	ovh int := NULL;
	page bigint;
	mpage bigint := NULL;
	hits int := 0;
BEGIN
	FOR i IN 1 .. 3000 LOOP
		off := ((pg_current_wal_insert_lsn() - '0/0'::pg_lsn) % 8192)::int;
		page := floor((pg_current_wal_insert_lsn() - '0/0'::pg_lsn) / 8192)::bigint;
		IF off IN (24, 40) THEN
			-- right after a page header: nothing written past the boundary
			PERFORM count(*) FROM streamguard.read('durable', 0, 0, 10);
			hits := hits + 1;
			IF hits >= 5 THEN
				RETURN 'read at a page boundary ' || hits || ' times';
			END IF;
		END IF;
		IF ovh IS NULL OR mpage IS DISTINCT FROM page OR 8192 - off < ovh + 300 THEN
			-- measure a message's overhead (on the same page), or move on to
			-- the next page; measured again on every page (another backend's
			-- record in between would leave it wrong for good)
			before := off;
			PERFORM pg_logical_emit_message(false, 'p', repeat('x', 300));
			off := ((pg_current_wal_insert_lsn() - '0/0'::pg_lsn) % 8192)::int;
			IF off > before THEN
				ovh := off - before - 300;
				mpage := page;
			END IF;
		ELSE
			-- exactly the rest of the page (8-byte aligned both)
			PERFORM pg_logical_emit_message(false, 'p', repeat('x', 8192 - off - ovh));
		END IF;
	END LOOP;
	RETURN 'reached a page boundary ' || hits || ' times only';
END $$;
SELECT read_at_page_boundary();
DROP FUNCTION read_at_page_boundary();
SELECT streamguard.drop_stream('durable');
