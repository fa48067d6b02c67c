-- comments: every function, view, table and type (enum, domain, composite)
-- of the extension says what it is in \df+, \dv+, \dt+ and \dT+ (COMMENT
-- ON ... in src/sql/comments.sql, part of the install and update scripts);
-- a new object without a comment is listed here
SELECT pg_describe_object(d.classid, d.objid, 0) AS without_comment
FROM pg_depend d
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'streamguard'
WHERE d.deptype = 'e'
  AND (d.classid IN ('pg_proc'::regclass, 'pg_type'::regclass)
	   OR (d.classid = 'pg_class'::regclass
		   AND (SELECT relkind FROM pg_class c WHERE c.oid = d.objid) IN ('r', 'p', 'v', 'm')))
  AND coalesce(obj_description(d.objid, (SELECT relname FROM pg_class WHERE oid = d.classid)), '') = ''
  -- not the types PostgreSQL makes by itself (a table's or view's row type,
  -- a type's array type), which 17 and later record as members too
  AND NOT (d.classid = 'pg_type'::regclass AND EXISTS (
	SELECT 1 FROM pg_type t WHERE t.oid = d.objid
	  AND ((t.typrelid <> 0 AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) <> 'c')
		   OR EXISTS (SELECT 1 FROM pg_type el WHERE el.typarray = t.oid))))
ORDER BY 1;
-- and the comments are what psql shows
SELECT obj_description('streamguard.pipelines'::regclass, 'pg_class') AS pipelines_view;
SELECT obj_description('streamguard.append(text,jsonb,text,text,integer)'::regprocedure, 'pg_proc') AS append;
SELECT obj_description('streamguard.object_name'::regtype, 'pg_type') AS name_domain;
