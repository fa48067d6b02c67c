/*-------------------------------------------------------------------------
 *
 * capture.c
 *		The change-capture SQL API: capture_table, uncapture_table; and
 *		captures as owned objects (drop_stream, DROP ROLE, REASSIGN OWNED,
 *		DROP OWNED call in here).  What DDL does to a capture (the event
 *		triggers, TRUNCATE of a partition, a trigger's rename) is
 *		capture_ddl.c.
 *
 * A capture is a row of streamguard.capture plus the triggers that
 * capture_table creates on the table (capture_emit.c has the trigger,
 * capture_backfill.c the backfill).  The two must come and go together:
 *	- capture_table checks everything (the caller owns the table and may
 *	  append to the stream; the table, its key and the arguments are
 *	  fit), then inserts the row and creates the triggers as the data
 *	  owner, in the caller's transaction;
 *	- uncapture_table, drop_stream(force), DROP OWNED delete the row and
 *	  drop the triggers (CaptureRemove, which capture_ddl.c's sql_drop
 *	  trigger also calls for a capture whose table is gone);
 *	- DDL is capture_ddl.c's: DROP TABLE, a DDL command that would leave a
 *	  capture without its triggers or its unique key, a rewrite or a change
 *	  of the key's order during a backfill;
 *	- DROP EXTENSION refuses while triggers use its function; with
 *	  CASCADE the triggers go and the tables are no longer captured.
 *
 * Locking: capture_table takes SHARE ROW EXCLUSIVE on the table before it
 * looks (what CREATE TRIGGER takes anyway): it waits for the table's
 * writers, and concurrent captures of one table serialize.  Removing a
 * capture takes ACCESS EXCLUSIVE on the table first, then the capture's
 * row: the order the backfill worker takes them in (table, then row).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "capture/capture.h"
#include "capture/capture_int.h"
#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "shmem/launcher_mailbox.h"

PG_FUNCTION_INFO_V1(sg_capture_table);
PG_FUNCTION_INFO_V1(sg_uncapture_table);

/* ------------------------------------------------------------ helpers */

static char *
sg_qualified_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/*
 * The columns of a text[] argument as attribute numbers of rel: no NULL,
 * not empty, every column exists, none twice.
 */
static AttrNumber *
sg_column_list(Relation rel, ArrayType *arr, const char *what, int *n)
{
	Datum	   *elems;
	bool	   *nulls;
	AttrNumber *attnums;
	int			i,
				j;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", what)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, n);
	if (*n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	attnums = palloc(sizeof(AttrNumber) * *n);
	for (i = 0; i < *n; i++)
	{
		char	   *name;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain NULL", what)));
		name = TextDatumGetCString(elems[i]);
		attnums[i] = get_attnum(RelationGetRelid(rel), name);
		if (attnums[i] <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of relation \"%s\" does not exist",
							name, RelationGetRelationName(rel)),
					 errdetail("%s names columns of the table.", what)));
		for (j = 0; j < i; j++)
			if (attnums[j] == attnums[i])
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column \"%s\" appears twice in %s", name, what)));
	}
	return attnums;
}

/* an int2[] of attribute numbers, as the capture's row keeps them */
Datum
CaptureAttnumArray(const AttrNumber *a, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Int16GetDatum(a[i]);
	return PointerGetDatum(construct_array(d, n, INT2OID, 2, true, TYPALIGN_SHORT));
}

/* what a relkind is called in a message */
static const char *
sg_relkind_name(char relkind)
{
	switch (relkind)
	{
		case RELKIND_VIEW:
			return "view";
		case RELKIND_MATVIEW:
			return "materialized view";
		case RELKIND_FOREIGN_TABLE:
			return "foreign table";
		case RELKIND_SEQUENCE:
			return "sequence";
		case RELKIND_INDEX:
		case RELKIND_PARTITIONED_INDEX:
			return "index";
		case RELKIND_COMPOSITE_TYPE:
			return "composite type";
		case RELKIND_TOASTVALUE:
			return "TOAST table";
		default:
			return "relation";
	}
}

/* a table capture_table accepts, or an error saying why not */
static void
sg_check_table(Relation rel)
{
	Form_pg_class c = rel->rd_rel;
	const char *nsp = get_namespace_name(c->relnamespace);

	if (c->relkind != RELKIND_RELATION && c->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot capture %s \"%s\"", sg_relkind_name(c->relkind),
						RelationGetRelationName(rel)),
				 errdetail("Only tables and partitioned tables can be captured.")));
	if (c->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot capture temporary table \"%s\"", RelationGetRelationName(rel)),
				 errdetail("A temporary table's rows are private to the session that created it.")));
	if (c->relpersistence == RELPERSISTENCE_UNLOGGED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot capture unlogged table \"%s\"", RelationGetRelationName(rel)),
				 errdetail("A crash empties an unlogged table without an event for its rows."),
				 errhint("ALTER TABLE ... SET LOGGED first.")));
	if (IsCatalogRelation(rel) || strcmp(nsp, "information_schema") == 0 ||
		strcmp(nsp, "streamguard") == 0 || strcmp(nsp, SG_DATA_SCHEMA) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot capture table \"%s.%s\"", nsp, RelationGetRelationName(rel)),
				 errdetail("Tables of schema \"%s\" belong to the system or to streamguard.", nsp)));
	if (c->relkind == RELKIND_RELATION && !c->relispartition &&
		(has_superclass(RelationGetRelid(rel)) ||
		 find_inheritance_children(RelationGetRelid(rel), NoLock) != NIL))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot capture table \"%s\" because it is part of an inheritance tree",
						RelationGetRelationName(rel)),
				 errdetail("Row triggers do not fire for the rows of child tables written through the parent."),
				 errhint("Declarative partitioning is supported: capture the partitioned table.")));
}

static char *
sg_column_names(Relation rel, const AttrNumber *attnums, int n)
{
	StringInfoData s;
	int			i;

	initStringInfo(&s);
	for (i = 0; i < n; i++)
		appendStringInfo(&s, "%s%s", i ? ", " : "",
						 quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), attnums[i] - 1)->attname)));
	return s.data;
}

/* the key: the columns of a NOT NULL unique index, the primary key by default */
static AttrNumber *
sg_check_key(Relation rel, ArrayType *key_columns, int *nkeys)
{
	AttrNumber *attnums;
	bool		nullable;
	int			i;

	if (key_columns == NULL)
	{
		Oid			pk = RelationGetPrimaryKeyIndex(rel);
		Relation	irel;

		if (!OidIsValid(pk))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
					 errmsg("table \"%s\" has no primary key", RelationGetRelationName(rel)),
					 errdetail("Each event's key identifies its row; the key must be unique."),
					 errhint("Name the columns of a unique index on NOT NULL columns in key_columns.")));
		irel = index_open(pk, AccessShareLock);
		*nkeys = IndexRelationGetNumberOfKeyAttributes(irel);
		attnums = palloc(sizeof(AttrNumber) * *nkeys);
		for (i = 0; i < *nkeys; i++)
			attnums[i] = irel->rd_index->indkey.values[i];
		index_close(irel, AccessShareLock);
		return attnums;
	}
	attnums = sg_column_list(rel, key_columns, "key_columns", nkeys);
	if (!OidIsValid(CaptureFindKeyIndex(rel, *nkeys, attnums, &nullable)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
				 errmsg("key_columns (%s) of table \"%s\" are not the columns of a unique index",
						sg_column_names(rel, attnums, *nkeys), RelationGetRelationName(rel)),
				 errdetail("The key must be exactly the columns of a unique, non-deferrable index without predicate or expressions."),
				 errhint("Create one with CREATE UNIQUE INDEX ON %s (%s).",
						 sg_qualified_name(RelationGetRelid(rel)),
						 sg_column_names(rel, attnums, *nkeys))));
	for (i = 0; i < *nkeys; i++)
		if (!TupleDescAttr(RelationGetDescr(rel), attnums[i] - 1)->attnotnull)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
					 errmsg("key column \"%s\" of table \"%s\" must be NOT NULL",
							NameStr(TupleDescAttr(RelationGetDescr(rel), attnums[i] - 1)->attname),
							RelationGetRelationName(rel)),
					 errdetail("A unique index allows any number of rows whose key is NULL.")));
	return attnums;
}

/* the operations argument as a bit set (and as the enum array for the row) */
static uint32
sg_check_operations(ArrayType *arr, Datum *ops_datum)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;
	uint32		ops = 0;
	Oid			typid;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operations must be a one-dimensional array")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("operations must not be empty"),
				 errhint("Valid operations are \"insert\", \"update\" and \"delete\".")));
	for (i = 0; i < n; i++)
	{
		int			op;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("operations must not contain NULL")));
		op = SgParseWord(&SgCaptureOpWords, TextDatumGetCString(elems[i]));
		if (ops & SG_CAPTURE_OP_BIT(op))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("operation \"%s\" appears twice in operations", TextDatumGetCString(elems[i]))));
		ops |= SG_CAPTURE_OP_BIT(op);
	}
	/* in enum order, as the row stores them */
	{
		Datum		words[3];
		int			m = 0;

		for (i = 0; i < 3; i++)
			if (ops & SG_CAPTURE_OP_BIT(i))
				words[m++] = SgWordParam("capture_operation", SgWordName(&SgCaptureOpWords, i), &typid);
		*ops_datum = PointerGetDatum(construct_array(words, m, typid, 4, true, TYPALIGN_INT));
	}
	return ops;
}

/*
 * A partition tree is captured into a stream once: not a partition of a
 * table captured into it, nor a table with a partition captured into it.
 */
static void
sg_check_tree(Relation rel, int32 stream_id, const char *stream)
{
	List	   *related = NIL;
	ListCell   *lc;

	if (rel->rd_rel->relispartition)
		related = get_partition_ancestors(RelationGetRelid(rel));
	if (rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
		related = list_concat(related, find_all_inheritors(RelationGetRelid(rel), NoLock, NULL));
	foreach(lc, related)
	{
		Oid			other = lfirst_oid(lc);
		Oid			types[2] = {OIDOID, INT4OID};
		Datum		values[2] = {ObjectIdGetDatum(other), Int32GetDatum(stream_id)};

		if (other == RelationGetRelid(rel))
			continue;
		SgExec("SELECT 1 FROM streamguard.capture WHERE relid::pg_catalog.oid OPERATOR(pg_catalog.=) $1 "
			   "AND stream_id OPERATOR(pg_catalog.=) $2",
			   2, types, values, NULL, SPI_OK_SELECT);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("table \"%s\" and table \"%s\" of the same partition tree cannot both be captured into stream \"%s\"",
							RelationGetRelationName(rel), get_rel_name(other), stream),
					 errdetail("Each change of a partition would be appended twice.")));
	}
}

static void
sg_create_triggers(int32 id, Oid relid, uint32 ops)
{
	char	   *tbl = sg_qualified_name(relid);
	StringInfoData events;
	char		name[NAMEDATALEN];

	initStringInfo(&events);
	if (ops & SG_CAPTURE_OP_BIT(SG_CAPTURE_INSERT))
		appendStringInfoString(&events, "INSERT");
	if (ops & SG_CAPTURE_OP_BIT(SG_CAPTURE_UPDATE))
		appendStringInfo(&events, "%sUPDATE", events.len ? " OR " : "");
	if (ops & SG_CAPTURE_OP_BIT(SG_CAPTURE_DELETE))
		appendStringInfo(&events, "%sDELETE", events.len ? " OR " : "");

	/* ENABLE ALWAYS: session_replication_role = replica does not skip it */
	snprintf(name, sizeof(name), SG_CAPTURE_TRIGGER_FMT, id);
	SgExec(psprintf("CREATE TRIGGER %s AFTER %s ON %s FOR EACH ROW "
					"EXECUTE FUNCTION streamguard._capture_trigger('%d')",
					quote_identifier(name), events.data, tbl, id),
		   0, NULL, NULL, NULL, SPI_OK_UTILITY);
	SgExec(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s", tbl, quote_identifier(name)),
		   0, NULL, NULL, NULL, SPI_OK_UTILITY);
	if (ops & SG_CAPTURE_OP_BIT(SG_CAPTURE_DELETE))
	{
		snprintf(name, sizeof(name), SG_CAPTURE_TRUNCATE_FMT, id);
		SgExec(psprintf("CREATE TRIGGER %s BEFORE TRUNCATE ON %s FOR EACH STATEMENT "
						"EXECUTE FUNCTION streamguard._capture_trigger('%d')",
						quote_identifier(name), tbl, id),
			   0, NULL, NULL, NULL, SPI_OK_UTILITY);
		SgExec(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s", tbl, quote_identifier(name)),
			   0, NULL, NULL, NULL, SPI_OK_UTILITY);
	}
}

/*
 * Remove a capture: its row, its claims and its triggers.  The caller
 * holds ACCESS EXCLUSIVE on the table (or the table is gone), runs as the
 * data owner with search_path pinned, SPI connected.
 */
void
CaptureRemove(int32 id, Oid relid)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(id)};

	SgExec("DELETE FROM streamguard.capture_claim WHERE capture_id OPERATOR(pg_catalog.=) $1",
		   1, types, values, NULL, SPI_OK_DELETE);
	SgExec("DELETE FROM streamguard.capture WHERE id OPERATOR(pg_catalog.=) $1",
		   1, types, values, NULL, SPI_OK_DELETE);
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		char	   *tbl = sg_qualified_name(relid);
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), SG_CAPTURE_TRIGGER_FMT, id);
		SgExec(psprintf("DROP TRIGGER IF EXISTS %s ON %s", quote_identifier(name), tbl),
			   0, NULL, NULL, NULL, SPI_OK_UTILITY);
		snprintf(name, sizeof(name), SG_CAPTURE_TRUNCATE_FMT, id);
		SgExec(psprintf("DROP TRIGGER IF EXISTS %s ON %s", quote_identifier(name), tbl),
			   0, NULL, NULL, NULL, SPI_OK_UTILITY);
		CaptureInvalidate(relid);
	}
}

/*
 * Remove the captures a query over streamguard.capture (id, relid) lists:
 * for each, its table is locked first, then its row (the backfill's
 * order), and it is removed if it still exists.  Runs as the data owner,
 * SPI connected.
 */
static int
sg_remove_listed(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls)
{
	SPITupleTable *tt;
	uint64		n,
				i;
	int			removed = 0;

	SgExec(sql, nargs, types, values, nulls, SPI_OK_SELECT);
	tt = SPI_tuptable;
	n = SPI_processed;
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(tt->vals[i], tt->tupdesc, 1, &isnull));
		Oid			relid = DatumGetObjectId(SPI_getbinval(tt->vals[i], tt->tupdesc, 2, &isnull));
		Oid			ltypes[1] = {INT4OID};
		Datum		lvalues[1] = {Int32GetDatum(id)};

		LockRelationOid(relid, AccessExclusiveLock);
		SgExec("SELECT 1 FROM streamguard.capture WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
			   1, ltypes, lvalues, NULL, SPI_OK_SELECT);
		if (SPI_processed == 0)
			continue;
		CaptureRemove(id, relid);
		removed++;
	}
	return removed;
}

/* ------------------------------------------------------- SQL functions */

/*
 * capture_table(tab, stream, key_columns, operations, columns, backfill)
 */
Datum
sg_capture_table(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *stream;
	Relation	rel;
	AttrNumber *keys;
	AttrNumber *cols = NULL;
	int			nkeys,
				ncols = 0;
	uint32		ops;
	Datum		ops_datum;
	bool		backfill;
	SgStreamMeta *meta;
	SgUserSave	save;
	int32		id;
	char	   *relname;

	SgCheckWritable("capture_table", "it installs the capture");
	SgTableStreamArgs(fcinfo, "capture_table", true, &relid, &stream);
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("operations must not be NULL")));
	ops = sg_check_operations(PG_GETARG_ARRAYTYPE_P(3), &ops_datum);
	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("backfill must not be NULL")));
	backfill = PG_GETARG_BOOL(5);

	/* ownership before the lock, so that a stranger cannot queue behind writers */
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, get_relkind_objtype(get_rel_relkind(relid)),
					   get_rel_name(relid));
	LockRelationOid(relid, ShareRowExclusiveLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	rel = table_open(relid, NoLock);
	sg_check_table(rel);
	keys = sg_check_key(rel, PG_ARGISNULL(2) ? NULL : PG_GETARG_ARRAYTYPE_P(2), &nkeys);
	if (!PG_ARGISNULL(4))
		cols = sg_column_list(rel, PG_GETARG_ARRAYTYPE_P(4), "columns", &ncols);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(stream, SG_PRIV_APPEND);
	StreamLockShare(meta);

	SgBecomeDataOwner(&save, true);
	sg_check_tree(rel, meta->stream_id, meta->name);
	relname = pstrdup(RelationGetRelationName(rel));
	/* ALTER TABLE below refuses a table this session still has open */
	table_close(rel, NoLock);
	{
		Oid			types[7] = {OIDOID, INT4OID, INT2ARRAYOID, INT2ARRAYOID, InvalidOid, OIDOID, InvalidOid};
		Datum		values[7];
		char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

		values[0] = ObjectIdGetDatum(relid);
		values[1] = Int32GetDatum(meta->stream_id);
		values[2] = CaptureAttnumArray(keys, nkeys);
		if (cols)
			values[3] = CaptureAttnumArray(cols, ncols);
		else
			nulls[3] = 'n';
		values[4] = ops_datum;
		types[4] = get_array_type(ARR_ELEMTYPE(DatumGetArrayTypeP(ops_datum)));
		values[5] = ObjectIdGetDatum(save.userid);
		values[6] = SgWordParam("backfill_state", backfill ? "pending" : "none", &types[6]);
		SgExec("INSERT INTO streamguard.capture "
			   "(relid, stream_id, key_attnums, column_attnums, operations, owner, backfill_state) "
			   "VALUES ($1, $2, $3, $4, $5, $6, $7) "
			   "ON CONFLICT (relid, stream_id) DO NOTHING RETURNING id",
			   7, types, values, nulls, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("table \"%s\" is already captured into stream \"%s\"",
							relname, meta->name)));
		{
			bool		isnull;

			id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		}
	}
	sg_create_triggers(id, relid, ops);
	CaptureInvalidate(relid);
	SgRestoreUser(&save);
	SPI_finish();

	/* the backfill worker starts once this commits */
	if (backfill)
		LauncherWake();
	PG_RETURN_VOID();
}

/*
 * uncapture_table(tab, stream): the table's captures, into that stream or
 * into any.  The capture's owner, the table's owner, the stream's owner
 * (members of each) and superusers may.
 */
Datum
sg_uncapture_table(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *stream = NULL;
	SgUserSave	save;
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	uint64		i,
				n;
	SPITupleTable *tt;
	const char *lookup =
		"SELECT c.id, c.relid::pg_catalog.oid, c.owner, s.owner, s.name FROM streamguard.capture c "
		"JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		"WHERE c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) $1 "
		"AND ($2 IS NULL OR s.name OPERATOR(pg_catalog.=) $2) ORDER BY c.id";

	SgCheckWritable("uncapture_table", "it removes the capture");
	SgTableStreamArgs(fcinfo, "uncapture_table", false, &relid, &stream);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	values[0] = ObjectIdGetDatum(relid);
	values[1] = stream ? CStringGetTextDatum(stream) : (Datum) 0;

	SgEnterCatalog(&save);
	if (stream)
	{
		SgExec("SELECT 1 FROM streamguard.stream WHERE name OPERATOR(pg_catalog.=) $1",
			   1, &types[1], &values[1], NULL, SPI_OK_SELECT);
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" does not exist", stream)));
	}

	/* who may: checked before any lock or side effect */
	SgExec(lookup, 2, types, values, stream ? NULL : " n", SPI_OK_SELECT);
	tt = SPI_tuptable;
	n = SPI_processed;
	if (n == 0)
	{
		if (stream)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("table \"%s\" is not captured into stream \"%s\"", get_rel_name(relid), stream)));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table \"%s\" is not captured", get_rel_name(relid))));
	}
	SgRestoreUser(&save);
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(tt->vals[i], tt->tupdesc, 3, &isnull));
		Oid			stream_owner = DatumGetObjectId(SPI_getbinval(tt->vals[i], tt->tupdesc, 4, &isnull));

		if (!superuser() && !has_privs_of_role(GetUserId(), owner) &&
			!has_privs_of_role(GetUserId(), stream_owner) &&
			!pg_class_ownercheck(relid, GetUserId()))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to uncapture table \"%s\" from stream \"%s\"",
							get_rel_name(relid), SPI_getvalue(tt->vals[i], tt->tupdesc, 5)),
					 errdetail("The owner of the capture, of the table or of the stream may.")));
	}
	SgBecomeDataOwner(&save, true);

	sg_remove_listed(lookup, 2, types, values, stream ? NULL : " n");
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}

/* ------------------------------------------------ callers from elsewhere */

/*
 * drop_stream: how many captures append to the stream.  Runs inside
 * drop_stream's catalog work (as the data owner, SPI connected).
 */
int64
CaptureCountForStream(int32 stream_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(stream_id)};
	bool		isnull;

	SgExec("SELECT pg_catalog.count(*) FROM streamguard.capture "
		   "WHERE stream_id OPERATOR(pg_catalog.=) $1",
		   1, types, values, NULL, SPI_OK_SELECT);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* drop_stream(force): remove the captures into the stream, triggers and all */
void
CaptureDropForStream(int32 stream_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(stream_id)};

	sg_remove_listed("SELECT id, relid::pg_catalog.oid FROM streamguard.capture "
					 "WHERE stream_id OPERATOR(pg_catalog.=) $1 ORDER BY id",
					 1, types, values, NULL);
}

/* DROP OWNED: remove the captures the roles own.  SPI connected. */
void
CaptureDropOwned(Datum role_oids)
{
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1] = {role_oids};
	SgUserSave	save;

	SgBecomeDataOwner(&save, true);
	sg_remove_listed("SELECT id, relid::pg_catalog.oid FROM streamguard.capture "
					 "WHERE owner OPERATOR(pg_catalog.=) ANY ($1) ORDER BY id",
					 1, types, values, NULL);
	SgRestoreUser(&save);
}

/* the ownership query's lines for DROP ROLE ("capture of table t into stream s") */
const char *CaptureOwnedSql =
"SELECT 'capture of table ' OPERATOR(pg_catalog.||) c.relid::pg_catalog.text "
"OPERATOR(pg_catalog.||) ' into stream ' OPERATOR(pg_catalog.||) s.name "
"FROM streamguard.capture c JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
"WHERE c.owner OPERATOR(pg_catalog.=) $1";
