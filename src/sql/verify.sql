-- The check that ends the install script and every update script (make
-- builds both from src/sql/; keep this part the last one): nothing the
-- extension's objects, views, defaults, constraints (of its tables and of
-- its domains) and triggers use lives outside pg_catalog and the
-- extension.  An update runs with search_path set to the old schema, which
-- may hold look-alikes: what it could not rebind refuses the update instead
-- of staying bound to a look-alike (docs/security.md, "Install schema";
-- sql/15_trust.sql makes the same check).

DO $verify$
DECLARE
	bad text;
BEGIN
	WITH direct AS (
		SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
		WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		  AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
								WHERE e.extname OPERATOR(pg_catalog.=) 'streamguard')
		  AND d.deptype OPERATOR(pg_catalog.=) 'e'),
	-- and what PostgreSQL made along with them (array types, row types)
	members AS (
		SELECT classid, objid FROM direct
		UNION SELECT d.classid, d.objid FROM pg_catalog.pg_depend d JOIN direct m
			ON d.refclassid OPERATOR(pg_catalog.=) m.classid AND d.refobjid OPERATOR(pg_catalog.=) m.objid
			AND d.deptype OPERATOR(pg_catalog.=) 'i'),
	rels AS (SELECT objid AS relid FROM members
			 WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass),
	users(classid, objid) AS (
		SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, rw.oid
		FROM pg_catalog.pg_rewrite rw JOIN rels ON rw.ev_class OPERATOR(pg_catalog.=) rels.relid
		UNION ALL SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, ad.oid
		FROM pg_catalog.pg_attrdef ad JOIN rels ON ad.adrelid OPERATOR(pg_catalog.=) rels.relid
		UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid
		FROM pg_catalog.pg_constraint c JOIN rels ON c.conrelid OPERATOR(pg_catalog.=) rels.relid
		UNION ALL SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid
		FROM pg_catalog.pg_trigger t JOIN rels ON t.tgrelid OPERATOR(pg_catalog.=) rels.relid
		-- the constraints of its domains
		UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid
		FROM pg_catalog.pg_constraint c JOIN members m
			ON m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
			AND c.contypid OPERATOR(pg_catalog.=) m.objid
		-- signatures, argument defaults, column types
		UNION ALL SELECT classid, objid FROM members),
	refs AS (
		SELECT u.classid, u.objid, d.refclassid, d.refobjid,
			   CASE d.refclassid
					WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass THEN
						(SELECT pronamespace FROM pg_catalog.pg_proc WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
					WHEN 'pg_catalog.pg_operator'::pg_catalog.regclass THEN
						(SELECT oprnamespace FROM pg_catalog.pg_operator WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
					WHEN 'pg_catalog.pg_type'::pg_catalog.regclass THEN
						(SELECT typnamespace FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
					WHEN 'pg_catalog.pg_collation'::pg_catalog.regclass THEN
						(SELECT collnamespace FROM pg_catalog.pg_collation WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
			   END AS nsp
		FROM users u JOIN pg_catalog.pg_depend d
			ON d.classid OPERATOR(pg_catalog.=) u.classid AND d.objid OPERATOR(pg_catalog.=) u.objid)
	SELECT pg_catalog.string_agg(pg_catalog.format('%s uses %s',
			pg_catalog.pg_describe_object(r.classid, r.objid, 0),
			pg_catalog.pg_describe_object(r.refclassid, r.refobjid, 0)), ', ')
	INTO bad
	FROM refs r
	WHERE r.nsp OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace
	  AND NOT EXISTS (SELECT 1 FROM members m WHERE m.classid OPERATOR(pg_catalog.=) r.refclassid
					  AND m.objid OPERATOR(pg_catalog.=) r.refobjid);
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'objects of streamguard use objects that are neither in pg_catalog nor part of it'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = pg_catalog.format('%s.', bad),
				  HINT = 'Report this: the script should have bound them to pg_catalog.';
	END IF;
END
$verify$;
