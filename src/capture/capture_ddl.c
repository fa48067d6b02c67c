/*-------------------------------------------------------------------------
 *
 * capture_ddl.c
 *		What DDL does to a capture: the event triggers
 *		streamguard_capture_drop (sql_drop), streamguard_capture_rewrite
 *		(table_rewrite) and streamguard_capture_ddl (ddl_command_end), and
 *		the utility hook's checks of TRUNCATE of a partition and of a
 *		capture trigger's rename (api/ownership.c calls them).  The SQL API
 *		that makes and removes captures is capture.c.
 *
 * A capture's row and its triggers must come and go together (capture.c):
 *	- DROP TABLE (and DROP SCHEMA ... CASCADE, DROP OWNED of the table's
 *	  owner) drops the triggers with the table; the event trigger
 *	  streamguard_capture_drop then deletes the capture's row
 *	  (CaptureRemove);
 *	- a DDL command that would leave a capture without its triggers or
 *	  without a unique key (DROP TRIGGER, DROP COLUMN of a key column,
 *	  DROP INDEX of the key's index) is refused by that event trigger, and
 *	  so is ALTER TRIGGER ... RENAME of a capture's trigger
 *	  (CaptureCheckRename), and TRUNCATE of a partition of a captured table
 *	  (CaptureCheckTruncate: the TRUNCATE trigger is on the partitioned
 *	  table only);
 *	- while a backfill is not done, a rewrite of the table (which gives
 *	  every row a new xmin) and a change of the key's order (type,
 *	  collation, operator class, another unique index) are refused by the
 *	  event triggers streamguard_capture_rewrite and streamguard_capture_ddl
 *	  (capture_chunk.c says why the backfill needs both to stay).
 *
 * Locking: the event triggers run under the command's locks;
 * streamguard_capture_drop and streamguard_capture_ddl open the captured
 * tables they look at with ACCESS SHARE, and streamguard_capture_ddl looks
 * only at the tables the transaction already holds in SHARE mode or
 * stronger.  A capture whose table is gone is removed without a lock on it
 * (there is none to take).  The utility hook's checks take no lock: they
 * run before the command, which takes its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
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

PG_FUNCTION_INFO_V1(sg_capture_sql_drop);
PG_FUNCTION_INFO_V1(sg_capture_table_rewrite);
PG_FUNCTION_INFO_V1(sg_capture_ddl_end);

/* ------------------------------------------------ the utility hook's checks */

/*
 * TRUNCATE names a partition of a captured partitioned table: the
 * capture's TRUNCATE trigger is on the partitioned table (statement
 * triggers are not cloned to partitions), so refuse here.
 */
void
CaptureCheckTruncate(List *relations)
{
	ListCell   *lc;

	foreach(lc, relations)
	{
		Oid			relid = RangeVarGetRelid(lfirst(lc), NoLock, true);
		List	   *ancestors;
		SgUserSave	save;
		Oid			types[1] = {OIDARRAYOID};
		Datum		values[1];
		ListCell   *a;
		Datum	   *elems;
		int			n = 0;

		if (!OidIsValid(relid) || !get_rel_relispartition(relid))
			continue;
		ancestors = get_partition_ancestors(relid);
		elems = palloc(sizeof(Datum) * Max(list_length(ancestors), 1));
		foreach(a, ancestors)
			elems[n++] = ObjectIdGetDatum(lfirst_oid(a));
		values[0] = PointerGetDatum(construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
		SgEnterCatalog(&save);
		SgExec("SELECT c.relid::pg_catalog.text, s.name FROM streamguard.capture c "
			   "JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
			   "WHERE c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1) "
			   "AND 'delete' OPERATOR(pg_catalog.=) ANY (c.operations) ORDER BY c.id LIMIT 1",
			   1, types, values, NULL, SPI_OK_SELECT);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot truncate table \"%s\" because it is a partition of table %s, which is captured into stream \"%s\"",
							get_rel_name(relid),
							SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
							SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
					 errdetail("A TRUNCATE would remove rows without an event for each."),
					 errhint("DELETE the rows (each delete is captured), or run streamguard.uncapture_table first.")));
		SgLeaveCatalog(&save);
	}
}

/*
 * ALTER TRIGGER ... RENAME of a capture's trigger: refused, as dropping it
 * is (sql_drop does not see a rename, and the trigger checks its name).
 */
void
CaptureCheckRename(RenameStmt *stmt)
{
	Oid			relid;
	int32		id;
	char		extra;
	SgUserSave	save;
	Oid			types[2] = {INT4OID, OIDOID};
	Datum		values[2];

	if (stmt->renameType != OBJECT_TRIGGER || stmt->subname == NULL ||
		sscanf(stmt->subname, "streamguard_capture_%d%c", &id, &extra) < 1)
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid))
		return;
	values[0] = Int32GetDatum(id);
	values[1] = ObjectIdGetDatum(relid);
	SgEnterCatalog(&save);
	SgExec("SELECT s.name FROM streamguard.capture c "
		   "JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		   "WHERE c.id OPERATOR(pg_catalog.=) $1 AND c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) $2",
		   2, types, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot rename trigger \"%s\" on table \"%s\" because it captures the table into stream \"%s\"",
						stmt->subname, get_rel_name(relid),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1))));
	SgLeaveCatalog(&save);
}

/* ------------------------------------------------------- the event trigger */

/*
 * streamguard_capture_drop, ON sql_drop: after any command that dropped
 * something, every capture must still have its table, its triggers and a
 * unique key; a capture whose table is gone goes too.
 */
Datum
sg_capture_sql_drop(PG_FUNCTION_ARGS)
{
	SgUserSave	save;
	SPITupleTable *tt;
	uint64		n,
				i;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		elog(ERROR, "streamguard._capture_sql_drop() must be called as an event trigger");
	/* never block a DROP because of us: without our catalog there is nothing to keep */
	if (!SgLoaded || !SgCatalogHas("capture") ||
		!OidIsValid(get_extension_oid("streamguard", true)))
		PG_RETURN_VOID();

	SgEnterCatalog(&save);
	SgExec("SELECT c.id, c.relid::pg_catalog.oid, s.name, c.key_attnums, c.column_attnums, "
		   "'delete' OPERATOR(pg_catalog.=) ANY (c.operations) "
		   "FROM streamguard.capture c JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		   "ORDER BY c.id",
		   0, NULL, NULL, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	n = SPI_processed;
	for (i = 0; i < n; i++)
	{
		HeapTuple	t = tt->vals[i];
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(t, tt->tupdesc, 1, &isnull));
		Oid			relid = DatumGetObjectId(SPI_getbinval(t, tt->tupdesc, 2, &isnull));
		char	   *stream = SPI_getvalue(t, tt->tupdesc, 3);
		ArrayType  *keys = DatumGetArrayTypeP(SPI_getbinval(t, tt->tupdesc, 4, &isnull));
		Datum		colsd = SPI_getbinval(t, tt->tupdesc, 5, &isnull);
		bool		has_cols = !isnull;
		bool		truncate_guard = DatumGetBool(SPI_getbinval(t, tt->tupdesc, 6, &isnull));
		Relation	rel;
		int16	   *k;
		int			nk,
					j;
		bool		nullable;
		char		name[NAMEDATALEN];

		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		{
			/* the table was dropped, and its triggers with it */
			CaptureRemove(id, relid);
			continue;
		}
		rel = table_open(relid, AccessShareLock);
		nk = ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys));
		k = (int16 *) ARR_DATA_PTR(keys);
		for (j = 0; j < nk; j++)
			if (k[j] > RelationGetDescr(rel)->natts ||
				TupleDescAttr(RelationGetDescr(rel), k[j] - 1)->attisdropped)
				ereport(ERROR,
						(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
						 errmsg("cannot drop a key column of table \"%s\" because it is captured into stream \"%s\"",
								RelationGetRelationName(rel), stream),
						 errhint("Run streamguard.uncapture_table first.")));
		if (!OidIsValid(CaptureFindKeyIndex(rel, nk, k, &nullable)))
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop the unique index on the key of table \"%s\" because it is captured into stream \"%s\"",
							RelationGetRelationName(rel), stream),
					 errdetail("The key of a captured table must stay unique."),
					 errhint("Run streamguard.uncapture_table first.")));
		for (j = 0; j < 2; j++)
		{
			if (j == 1 && !truncate_guard)
				break;
			snprintf(name, sizeof(name), j == 0 ? SG_CAPTURE_TRIGGER_FMT : SG_CAPTURE_TRUNCATE_FMT, id);
			if (!OidIsValid(get_trigger_oid(relid, name, true)))
				ereport(ERROR,
						(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
						 errmsg("cannot drop trigger \"%s\" on table \"%s\" because it captures the table into stream \"%s\"",
								name, RelationGetRelationName(rel), stream),
						 errhint("Run streamguard.uncapture_table instead.")));
		}
		/* a captured column that was dropped leaves the payload */
		if (has_cols)
		{
			ArrayType  *cols = DatumGetArrayTypeP(colsd);
			int			nc = ArrayGetNItems(ARR_NDIM(cols), ARR_DIMS(cols));
			int16	   *c = (int16 *) ARR_DATA_PTR(cols);
			AttrNumber *live = palloc(sizeof(AttrNumber) * Max(nc, 1));
			int			m = 0;

			for (j = 0; j < nc; j++)
				if (c[j] <= RelationGetDescr(rel)->natts &&
					!TupleDescAttr(RelationGetDescr(rel), c[j] - 1)->attisdropped)
					live[m++] = c[j];
			if (m < nc)
			{
				Oid			types[2] = {INT4OID, INT2ARRAYOID};
				Datum		values[2] = {Int32GetDatum(id), CaptureAttnumArray(live, m)};

				SgExec("UPDATE streamguard.capture SET column_attnums = $2 WHERE id OPERATOR(pg_catalog.=) $1",
					   2, types, values, NULL, SPI_OK_UPDATE);
				CaptureInvalidate(relid);
			}
		}
		table_close(rel, AccessShareLock);
	}
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}

/*
 * Is our catalog there, at a version with the backfill's key column?  An
 * event trigger never blocks a command because of a catalog it cannot read.
 */
static bool
sg_capture_catalog_ready(void)
{
	Oid			nsp = get_namespace_oid("streamguard", true);
	Oid			relid;

	if (!OidIsValid(nsp) || !OidIsValid(get_extension_oid("streamguard", true)))
		return false;
	relid = get_relname_relid("capture", nsp);
	return OidIsValid(relid) && get_attnum(relid, "backfill_key") != InvalidAttrNumber;
}

/*
 * streamguard_capture_rewrite, ON table_rewrite: a table (or a partition of
 * one) whose capture's backfill is not done may not be rewritten.  A
 * rewrite gives every row the rewriting transaction's xmin, so the versions
 * that writers sent and claimed would look unsent to the backfill, which
 * would send them again.  After the backfill the xmins no longer matter.
 */
Datum
sg_capture_table_rewrite(PG_FUNCTION_ARGS)
{
	SgUserSave	save;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		elog(ERROR, "streamguard._capture_table_rewrite() must be called as an event trigger");
	if (!sg_capture_catalog_ready())
		PG_RETURN_VOID();

	SgEnterCatalog(&save);
	SgExec("SELECT pg_catalog.pg_event_trigger_table_rewrite_oid(), s.name, "
		   "c.backfill_state::pg_catalog.text, c.relid::pg_catalog.oid "
		   "FROM streamguard.capture c JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		   "WHERE c.backfill_state OPERATOR(pg_catalog.=) ANY ('{pending,running}') "
		   "AND (c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) pg_catalog.pg_event_trigger_table_rewrite_oid() "
		   "OR c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (ARRAY("
		   "SELECT a.relid::pg_catalog.oid FROM pg_catalog.pg_partition_ancestors("
		   "pg_catalog.pg_event_trigger_table_rewrite_oid()) a))) "
		   "ORDER BY c.id LIMIT 1",
		   0, NULL, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		HeapTuple	t = SPI_tuptable->vals[0];
		TupleDesc	d = SPI_tuptable->tupdesc;
		bool		isnull;
		Oid			relid = DatumGetObjectId(SPI_getbinval(t, d, 1, &isnull));
		Oid			captured = DatumGetObjectId(SPI_getbinval(t, d, 4, &isnull));

		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot rewrite table \"%s\" while the backfill of its capture into stream \"%s\" is %s",
						get_rel_name(relid), SPI_getvalue(t, d, 2), SPI_getvalue(t, d, 3)),
				 errdetail("A rewrite gives every row a new version; the backfill of table \"%s\" would send again rows that writers have sent.",
						   get_rel_name(captured)),
				 errhint("Wait until backfill_state in streamguard.captures is done, or run streamguard.uncapture_table first.")));
	}
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}

/*
 * streamguard_capture_ddl, ON ddl_command_end of ALTER TABLE and of CREATE,
 * ALTER and DROP INDEX: the key of a table whose backfill has begun keeps
 * the order the backfill began with (backfill_key): its position is a key
 * in that order.  Runs after the command, under its locks, so it sees what
 * the command made, whichever subcommand or recursion made it; it looks at
 * the captured tables the transaction holds in SHARE mode or stronger.
 */
Datum
sg_capture_ddl_end(PG_FUNCTION_ARGS)
{
	SgUserSave	save;
	SPITupleTable *tt;
	uint64		n,
				i;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		elog(ERROR, "streamguard._capture_ddl_end() must be called as an event trigger");
	if (!sg_capture_catalog_ready())
		PG_RETURN_VOID();

	SgEnterCatalog(&save);
	SgExec("SELECT c.relid::pg_catalog.oid, s.name, c.key_attnums, c.backfill_key "
		   "FROM streamguard.capture c JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		   "WHERE c.backfill_state OPERATOR(pg_catalog.=) ANY ('{pending,running}') "
		   "AND c.backfill_key IS NOT NULL ORDER BY c.id",
		   0, NULL, NULL, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	n = SPI_processed;
	for (i = 0; i < n; i++)
	{
		HeapTuple	t = tt->vals[i];
		bool		isnull;
		Oid			relid = DatumGetObjectId(SPI_getbinval(t, tt->tupdesc, 1, &isnull));
		ArrayType  *keys = DatumGetArrayTypeP(SPI_getbinval(t, tt->tupdesc, 3, &isnull));
		Datum		stored = SPI_getbinval(t, tt->tupdesc, 4, &isnull);
		int			nk = ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys));
		int16	   *k = (int16 *) ARR_DATA_PTR(keys);
		Relation	rel;
		Oid			indexoid;
		bool		nullable;
		Datum		now;
		int			j;
		bool		gone = false;

		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
			continue;

		/*
		 * Only tables this transaction changed: a command that can change
		 * the key's order locks the table at least in SHARE mode (ALTER
		 * TABLE, DROP INDEX and a partition's share of a recursing ALTER:
		 * ACCESS EXCLUSIVE), and a table we did not lock is none of this
		 * command's business (nor waited for).
		 */
		rel = RelationIdGetRelation(relid);
		if (!RelationIsValid(rel))
			continue;
		j = CheckRelationLockedByMe(rel, ShareLock, true);
		RelationClose(rel);
		if (!j)
			continue;
		rel = table_open(relid, AccessShareLock);
		for (j = 0; j < nk; j++)
			if (k[j] > RelationGetDescr(rel)->natts ||
				TupleDescAttr(RelationGetDescr(rel), k[j] - 1)->attisdropped)
				gone = true;
		/* a key without its index or columns: the sql_drop trigger refuses */
		indexoid = gone ? InvalidOid : CaptureFindKeyIndex(rel, nk, k, &nullable);
		if (OidIsValid(indexoid))
		{
			now = CaptureBackfillKey(rel, indexoid);
			if (!CaptureBackfillKeySame(stored, now))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_IN_USE),
						 errmsg("cannot change the key of table \"%s\" while the backfill of its capture into stream \"%s\" runs",
								RelationGetRelationName(rel), SPI_getvalue(t, tt->tupdesc, 2)),
						 errdetail("The backfill walks the table in the key's order when it began (%s); the command would change it to %s, and the backfill would skip or repeat rows.",
								   CaptureBackfillKeyText(stored), CaptureBackfillKeyText(now)),
						 errhint("Wait until backfill_state in streamguard.captures is done, or run streamguard.uncapture_table first.")));
		}
		table_close(rel, AccessShareLock);
	}
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}
