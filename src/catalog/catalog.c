/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		Stream metadata: the per-backend metadata cache, privileges, the
 *		storage segments (their one name, StreamSegmentName, and their
 *		partitions' rows, StreamPartitionsAdd), the switch to the data
 *		owner, the plan cache, and the helpers every statement of ours
 *		goes through: SgExec / SgExecCached (run it or raise an internal
 *		error) and SgColumn (a result's column by name).  The stream SQL
 *		API (create/drop/grant/alter) is in streams.c; the pipeline rows
 *		several modules share are in pipeline_catalog.c.
 *
 * Metadata lives in ordinary tables of schema streamguard (stream,
 * stream_partition, stream_grant, segment, consumer, append_dedup).
 * Events live in segment tables streamguard_data.s<stream id>_<segment>,
 * each (partition, seq)-keyed and append-only; retention drops whole
 * segments (see maintenance.c).  All of these belong to the role that
 * owns schema streamguard_data (the extension's installer); SQL callers
 * never touch them directly.  Entry points check the caller's stream
 * privileges here and then run their SPI work as that owner, with every
 * name fixed by us and every value passed as a parameter.
 *
 * The metadata cache: a backend keeps each stream's row, grants and its
 * shared-memory handle in a hash keyed by name.  It is valid while the
 * shared slot's incarnation and generation are unchanged; changes bump
 * the generation when they commit (HorizonBumpGenerationAtCommit).
 * Metadata is read with a fresh snapshot, so a REPEATABLE READ caller
 * still sees the current definition.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/regproc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "shmem/horizon.h"


static HTAB *sg_meta_cache = NULL;
static HTAB *sg_plan_cache = NULL;

#define SG_PLAN_KEY_LEN 1024
#define SG_PLAN_CACHE_MAX 1024	/* prepared plans a backend keeps */

typedef struct SgPlanEntry
{
	char		key[SG_PLAN_KEY_LEN];
	SPIPlanPtr	plan;
} SgPlanEntry;

/* ---------------------------------------------------------------- helpers */

Oid
StreamDataOwner(void)
{
	Oid			nsp = get_namespace_oid(SG_DATA_SCHEMA, true);
	HeapTuple	tup;
	Oid			owner;

	if (!OidIsValid(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"streamguard\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION streamguard.")));
	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nsp));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for namespace %u", nsp);
	owner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Run as the owner of the storage, normally with search_path pinned so
 * that no object of the caller's can stand in for a built-in one.  The
 * hot paths (append, poll) skip the pin to save its cost; every statement
 * they run names functions and operators with pg_catalog explicitly.  An
 * error unwinds both through transaction (or subtransaction) abort.
 */
/* the OID of streamguard.stream: changes when the extension is re-created */
Oid
StreamCatalogOid(void)
{
	return get_relname_relid("stream", get_namespace_oid("streamguard", false));
}

void
SgBecomeDataOwner(SgUserSave *save, bool pin_search_path)
{
	Oid			owner = StreamDataOwner();

	GetUserIdAndSecContext(&save->userid, &save->sec_context);
	SetUserIdAndSecContext(owner, save->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save->guc_nest = -1;
	if (!pin_search_path)
		return;
	save->guc_nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

void
SgRestoreUser(SgUserSave *save)
{
	if (save->guc_nest >= 0)
		AtEOXact_GUC(false, save->guc_nest);
	SetUserIdAndSecContext(save->userid, save->sec_context);
}

/*
 * The way in and out of an entry point that works on our catalog: an SPI
 * connection, the storage owner's identity in a security-restricted
 * operation and search_path pinned to pg_catalog (see SgBecomeDataOwner).
 * Leave in reverse order; an ERROR in between unwinds both.
 */
void
SgEnterCatalog(SgUserSave *save)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(save, true);
}

void
SgLeaveCatalog(SgUserSave *save)
{
	SgRestoreUser(save);
	SPI_finish();
}

/*
 * The one spelling of a segment table's name: s<stream id>_<segment> in
 * schema streamguard_data.  StreamSegmentRelname writes the bare name into
 * a NAMEDATALEN buffer (no allocation: the append path opens segments by
 * it); StreamSegmentName gives the qualified name for SQL text, quoted as
 * an identifier (the name never needs quotes: the quoting is there so
 * that no caller has to know that).
 */
void
StreamSegmentRelname(int32 stream_id, int32 seg, char *relname)
{
	snprintf(relname, NAMEDATALEN, "s%d_%d", stream_id, seg);
}

char *
StreamSegmentName(int32 stream_id, int32 seg)
{
	char		relname[NAMEDATALEN];

	StreamSegmentRelname(stream_id, seg, relname);
	return quote_qualified_identifier(SG_DATA_SCHEMA, relname);
}

/*
 * Lock a storage segment for reading; false if retention dropped it.
 * Holding the lock keeps maintenance from dropping it until we commit.
 */
bool
StreamSegmentLock(int32 stream_id, int32 seg)
{
	char	   *relname = StreamSegmentName(stream_id, seg);
	Oid			relid;

	relid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(relname)),
							 AccessShareLock, true);
	pfree(relname);
	return OidIsValid(relid);
}

/*
 * The one way to visit a stream's segment tables: from `first` to `last`
 * (either direction), each segment locked for reading as it is opened and
 * skipped if retention dropped it meanwhile, the statement built from a
 * format with one %s for the table and planned once per backend.
 */
void
StreamSegmentScanBegin(SgSegmentScan *scan, int32 stream_id, int32 first, int32 last)
{
	scan->stream_id = stream_id;
	scan->last = last;
	scan->step = first <= last ? 1 : -1;
	scan->seg = first - scan->step;
}

/* advance to the next segment number; false past the last */
bool
StreamSegmentScanNext(SgSegmentScan *scan)
{
	if (scan->seg == scan->last)
		return false;
	scan->seg += scan->step;
	return true;
}

/*
 * Lock the current segment and return the cached plan of `fmt` over it,
 * or NULL if the segment is gone.  SPI connected.
 */
SPIPlanPtr
StreamSegmentScanPlan(SgSegmentScan *scan, const char *fmt, int nargs, Oid *types)
{
	char	   *sql;
	SPIPlanPtr	plan;

	if (!StreamSegmentLock(scan->stream_id, scan->seg))
		return NULL;
	sql = psprintf(fmt, StreamSegmentName(scan->stream_id, scan->seg));
	plan = SgPlanCached(NULL, sql, nargs, types);
	pfree(sql);
	return plan;
}

/*
 * Run a one-row, one-column query (`fmt`, see above) over the segments
 * from `first` to `last` and return the first non-NULL value it gives, in
 * *result (a pass-by-value type); false if none does.  With a snapshot the
 * query runs under it.  SPI connected.
 */
bool
StreamSegmentProbe(int32 stream_id, int32 first, int32 last, const char *fmt,
				   int nargs, Oid *types, Datum *values, Snapshot snap, Datum *result)
{
	SgSegmentScan scan;

	StreamSegmentScanBegin(&scan, stream_id, first, last);
	while (StreamSegmentScanNext(&scan))
	{
		SPIPlanPtr	plan = StreamSegmentScanPlan(&scan, fmt, nargs, types);
		int			ret;
		bool		isnull;
		Datum		d;

		if (plan == NULL)
			continue;
		ret = snap ? SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot, true, false, 1) :
			SPI_execute_plan(plan, values, NULL, true, 1);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "segment probe failed: %s", SPI_result_code_string(ret));
		if (SPI_processed == 0)
			continue;
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
		{
			*result = d;
			return true;
		}
	}
	return false;
}

/*
 * Run a statement of ours that must succeed: `expect` is the SPI result it
 * gives when it does (SPI_OK_UPDATE, ...); anything else is an internal
 * error naming the statement.  `nulls` as SPI_execute_with_args takes it
 * (NULL: no argument is NULL).  The caller is connected to SPI and chose
 * the user and search_path; every statement names its objects fully.
 */
void
SgExec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	int			ret = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);

	if (ret != expect)
		elog(ERROR, "streamguard statement failed (%s): %s", SPI_result_code_string(ret), sql);
}

/* the same, through a plan kept for the backend (SgPlanCached) */
void
SgExecCached(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	int			ret = SPI_execute_plan(SgPlanCached(NULL, sql, nargs, types), values, nulls, false, 0);

	if (ret != expect)
		elog(ERROR, "streamguard statement failed (%s): %s", SPI_result_code_string(ret), sql);
}

/*
 * Positions kept in a table of ours, one row per partition: `sql` (run as
 * the data owner through a kept plan) returns (partition, position); pos[p]
 * is the position of partition p, -1 where there is no row.  Rows of
 * partitions outside 0 .. nparts - 1 are ignored.  SPI connected.
 */
void
SgLoadPositions(const char *sql, int nargs, Oid *types, Datum *values, int64 *pos, int nparts)
{
	SgUserSave	save;
	uint64		i;
	int			p;

	for (p = 0; p < nparts; p++)
		pos[p] = -1;
	SgBecomeDataOwner(&save, false);
	SgExecCached(sql, nargs, types, values, NULL, SPI_OK_SELECT);
	for (i = 0; i < SPI_processed; i++)	/* bounded: a row per partition */
	{
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		if (p >= 0 && p < nparts)
			pos[p] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgRestoreUser(&save);
}

/*
 * The attribute number of `column` in a result: our statements' results
 * are read by column name, looked up once per result (a missing column is
 * our bug).
 */
int
SgColumn(TupleDesc desc, const char *column)
{
	int			attno = SPI_fnumber(desc, column);

	if (attno <= 0)
		elog(ERROR, "column \"%s\" is not in the result", column);
	return attno;
}

/*
 * A fresh, registered snapshot taken now.  Callers UnregisterSnapshot it.
 */
Snapshot
SgFreshSnapshot(void)
{
	return RegisterSnapshot(GetLatestSnapshot());
}

/*
 * Prepared SPI plans, kept for the life of the backend, keyed by their
 * text.  The plan cache re-plans them when the objects they name change.
 *
 * Always generic plans: every statement of ours finds rows by key, and a
 * generic plan is the index scan that does that.  The plan cache would
 * otherwise make custom plans for the first five executions in each
 * backend, and for the event read (partition = $1 AND seq > $2 AND
 * seq < $3 ORDER BY seq LIMIT $4) the planner, seeing the actual range
 * cover a whole backlog, chose a bitmap scan of all of it and a sort:
 * the first five batches of a new worker or poll session over 500,000
 * waiting events took 30-50 ms each instead of 0.5 ms.
 */
SPIPlanPtr
SgPlanCached(const char *key, const char *sql, int nargs, Oid *argtypes)
{
	SgPlanEntry *entry;
	bool		found;
	char		hkey[SG_PLAN_KEY_LEN];

	if (sg_plan_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = SG_PLAN_KEY_LEN;
		ctl.entrysize = sizeof(SgPlanEntry);
		ctl.hcxt = CacheMemoryContext;
		sg_plan_cache = hash_create("streamguard plans", 64, &ctl,
									HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	if (strlen(key ? key : sql) >= SG_PLAN_KEY_LEN)
		elog(ERROR, "plan key too long: %s", key ? key : sql);	/* keys must not collide */
	memset(hkey, 0, sizeof(hkey));
	strlcpy(hkey, key ? key : sql, SG_PLAN_KEY_LEN);
	entry = hash_search(sg_plan_cache, hkey, HASH_FIND, &found);
	if (entry == NULL && hash_get_num_entries(sg_plan_cache) >= SG_PLAN_CACHE_MAX)
	{
		/*
		 * Plans for segments that retention dropped pile up over time;
		 * start over rather than grow without bound.  Callers use a plan
		 * right away and never hold one across calls.
		 */
		HASH_SEQ_STATUS seq;
		SgPlanEntry *e;

		hash_seq_init(&seq, sg_plan_cache);
		while ((e = hash_seq_search(&seq)) != NULL)
			if (e->plan)
				SPI_freeplan(e->plan);
		hash_destroy(sg_plan_cache);
		sg_plan_cache = NULL;
		return SgPlanCached(key, sql, nargs, argtypes);
	}
	entry = hash_search(sg_plan_cache, hkey, HASH_ENTER, &found);
	if (!found || entry->plan == NULL)
	{
		SPIPlanPtr	plan;

		entry->plan = NULL;
		plan = SPI_prepare_cursor(sql, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		entry->plan = plan;
	}
	return entry->plan;
}

/* an interval in microseconds, a month as 30 days; saturated, never wrapped */
int64
SgIntervalUsecs(Interval *iv)
{
	int64		days_us,
				months_us,
				us;

	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &days_us) ||
		pg_mul_s64_overflow((int64) iv->month, (int64) DAYS_PER_MONTH * USECS_PER_DAY, &months_us) ||
		pg_add_s64_overflow(days_us, months_us, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		return (iv->time < 0 && iv->day <= 0 && iv->month <= 0) ? PG_INT64_MIN : PG_INT64_MAX;
	return us;
}

void
SgCheckInterval(const char *what, Interval *iv)
{
	int64		us = SgIntervalUsecs(iv);

	if (us < USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at least 1 second, got \"%s\"", what,
						DatumGetCString(DirectFunctionCall1(interval_out,
															IntervalPGetDatum(iv))))));
}

/* a dedup_window: 1 second to SG_MAX_DEDUP_WINDOW_US (bounds.h) */
void
SgCheckDedupWindow(Interval *iv)
{
	SgCheckInterval("dedup_window", iv);
	if (SgIntervalUsecs(iv) > SG_MAX_DEDUP_WINDOW_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_window must be at most %d days, got \"%s\"",
						(int) (SG_MAX_DEDUP_WINDOW_US / USECS_PER_DAY),
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv))))));
}

/*
 * The segments a stream keeps, ceil(retention / segment_interval), at most
 * SG_MAX_SEGMENTS_PER_STREAM (bounds.h): each is a table the maintenance
 * worker creates and drops.
 */
void
SgCheckSegments(Interval *retention, Interval *segment)
{
	int64		r = SgIntervalUsecs(retention);
	int64		s = Max(SgIntervalUsecs(segment), SG_MIN_SEGMENT_US);
	int64		n = r / s + (r % s != 0);

	if (n > SG_MAX_SEGMENTS_PER_STREAM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a retention of \"%s\" in segments of \"%s\" would keep %lld segments, more than the %d allowed",
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(retention))),
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(segment))),
						(long long) n, SG_MAX_SEGMENTS_PER_STREAM),
				 errhint("Use a longer segment_interval.")));
}

/*
 * Does the catalog have streamguard.stream_repartition?  Not under the
 * 0.1 schema, which the 0.2 library serves until ALTER EXTENSION UPDATE:
 * there a stream's partition count never changed.
 */
bool
StreamRepartitionCatalog(void)
{
	return SgCatalogHas("stream_repartition");
}

/* ------------------------------------------------------- metadata cache */

static void
sg_load_meta(SgStreamMeta *meta, const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	SPIPlanPtr	plan;
	Snapshot	snap;
	int			ret;
	bool		isnull;
	int32		cur_seg,
				min_seg;
	uint32		gen_before = 0;
	int			i;
	SgUserSave	save;

	SgBecomeDataOwner(&save, true);
	/* a 0.2 catalog (served until ALTER EXTENSION UPDATE) has no payload_check */
	plan = SgPlanCached(NULL,
						get_attnum(get_relname_relid("stream", get_namespace_oid("streamguard", false)),
								   "payload_check") != InvalidAttrNumber ?
						"SELECT id, partitions, owner, current_seg, min_seg, dedup_window, "
						"payload_check OPERATOR(pg_catalog.=) 'object' "
						"FROM streamguard.stream WHERE name OPERATOR(pg_catalog.=) $1" :
						"SELECT id, partitions, owner, current_seg, min_seg, dedup_window, false "
						"FROM streamguard.stream WHERE name OPERATOR(pg_catalog.=) $1",
						1, types);
	values[0] = CStringGetTextDatum(name);
	snap = SgFreshSnapshot();
	ret = SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot,
							   true, false, 1);
	UnregisterSnapshot(snap);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "stream lookup failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
	{
		SgRestoreUser(&save);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", name)));
	}
	meta->stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	meta->nparts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	meta->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	cur_seg = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	min_seg = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull));
	meta->dedup_window_us = SgIntervalUsecs(DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0],
																				SPI_tuptable->tupdesc, 6, &isnull)));
	meta->payload_object = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 7, &isnull));
	strlcpy(meta->name, name, NAMEDATALEN);
	meta->write_seg = -1;
	meta->write_relid = InvalidOid;

	meta->ref = HorizonAttachStream(meta->stream_id, meta->nparts, cur_seg, min_seg,
									StreamCatalogOid());
	gen_before = HorizonGeneration(meta->ref.slot);

	/* changes of the partition count (repartition.c) */
	for (i = 0; i < meta->nchanges; i++)
		pfree(meta->changes[i].switch_seqs);
	if (meta->changes)
		pfree(meta->changes);
	meta->changes = NULL;
	meta->nchanges = 0;
	if (StreamRepartitionCatalog())
	{
		Oid			rtypes[1] = {INT4OID};
		Datum		rvalues[1];

		plan = SgPlanCached(NULL,
							"SELECT epoch, old_partitions, switch_seqs FROM streamguard.stream_repartition "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1 ORDER BY epoch",
							1, rtypes);
		rvalues[0] = Int32GetDatum(meta->stream_id);
		snap = SgFreshSnapshot();
		ret = SPI_execute_snapshot(plan, rvalues, NULL, snap, InvalidSnapshot,
								   true, false, 0);
		UnregisterSnapshot(snap);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "partition change lookup failed: %s", SPI_result_code_string(ret));
		if (SPI_processed > 0)
			meta->changes = MemoryContextAllocZero(CacheMemoryContext,
												   sizeof(SgRepartition) * SPI_processed);
		for (i = 0; i < (int) SPI_processed; i++)
		{
			HeapTuple	t = SPI_tuptable->vals[i];
			SgRepartition *ch = &meta->changes[i];
			Datum	   *elems;
			bool	   *enulls;
			int			n,
						j;

			ch->epoch = DatumGetInt32(SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull));
			ch->old_nparts = DatumGetInt32(SPI_getbinval(t, SPI_tuptable->tupdesc, 2, &isnull));
			deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(t, SPI_tuptable->tupdesc, 3, &isnull)),
							  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &enulls, &n);
			if (n != ch->old_nparts)
				elog(ERROR, "change %d of stream \"%s\" has %d switch points for %d partitions",
					 ch->epoch, name, n, ch->old_nparts);
			ch->switch_seqs = MemoryContextAlloc(CacheMemoryContext, sizeof(int64) * Max(n, 1));
			for (j = 0; j < n; j++)
				ch->switch_seqs[j] = enulls[j] ? 0 : DatumGetInt64(elems[j]);
			meta->nchanges++;
		}
	}

	/* grants */
	{
		Oid			gtypes[1] = {INT4OID};
		Datum		gvalues[1];

		plan = SgPlanCached(NULL,
							"SELECT grantee, can_append, can_read FROM streamguard.stream_grant "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1",
							1, gtypes);
		gvalues[0] = Int32GetDatum(meta->stream_id);
		snap = SgFreshSnapshot();
		ret = SPI_execute_snapshot(plan, gvalues, NULL, snap, InvalidSnapshot,
								   true, false, 0);
		UnregisterSnapshot(snap);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "grant lookup failed: %s", SPI_result_code_string(ret));
		if (meta->grant_roles)
		{
			pfree(meta->grant_roles);
			pfree(meta->grant_append);
			pfree(meta->grant_read);
		}
		meta->ngrants = (int) SPI_processed;
		meta->grant_roles = MemoryContextAlloc(CacheMemoryContext, sizeof(Oid) * (meta->ngrants + 1));
		meta->grant_append = MemoryContextAlloc(CacheMemoryContext, sizeof(bool) * (meta->ngrants + 1));
		meta->grant_read = MemoryContextAlloc(CacheMemoryContext, sizeof(bool) * (meta->ngrants + 1));
		for (i = 0; i < meta->ngrants; i++)
		{
			HeapTuple	t = SPI_tuptable->vals[i];

			meta->grant_roles[i] = DatumGetObjectId(SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull));
			meta->grant_append[i] = DatumGetBool(SPI_getbinval(t, SPI_tuptable->tupdesc, 2, &isnull));
			meta->grant_read[i] = DatumGetBool(SPI_getbinval(t, SPI_tuptable->tupdesc, 3, &isnull));
		}
	}
	SgRestoreUser(&save);
	meta->generation = gen_before;
}

static bool
sg_role_has_privilege(SgStreamMeta *meta, Oid user, SgPrivilege priv)
{
	int			i;

	if (superuser_arg(user) || has_privs_of_role(user, meta->owner))
		return true;
	for (i = 0; i < meta->ngrants; i++)
	{
		bool		granted = (priv == SG_PRIV_APPEND) ? meta->grant_append[i] : meta->grant_read[i];

		if (granted && has_privs_of_role(user, meta->grant_roles[i]))
			return true;
	}
	return false;
}

static bool
sg_has_privilege(SgStreamMeta *meta, SgPrivilege priv)
{
	return sg_role_has_privilege(meta, GetUserId(), priv);
}

/*
 * Whether `role`, which need not be the current user, may append to the
 * stream: for code that appends on behalf of the role that set it up
 * (change capture).  False for a role that no longer exists.
 */
bool
StreamRoleMayAppend(SgStreamMeta *meta, Oid role)
{
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		return false;
	return sg_role_has_privilege(meta, role, SG_PRIV_APPEND);
}

/* a pipeline feeding its own source would grow it without bound */
void
StreamCheckNotOwnSource(SgStreamMeta *meta)
{
	if (SgRunningForbidsAppendTo(meta->stream_id))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a pipeline cannot append to its own source stream \"%s\"", meta->name),
				 errdetail("Each batch would feed the next one without end."),
				 errhint("Create the pipeline with allow_source_append => true if this is intended.")));
}

/*
 * Find a stream of the current database by name and check the caller's
 * privilege on it.  The caller must be connected to SPI.  The result is
 * valid until the next call.
 */
SgStreamMeta *
StreamLookup(const char *name, SgPrivilege priv)
{
	SgStreamMeta *meta;
	bool		found;
	char		key[NAMEDATALEN];

	SgCheckName("stream", name);
	if (sg_meta_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = NAMEDATALEN;
		ctl.entrysize = sizeof(SgStreamMeta);
		ctl.hcxt = CacheMemoryContext;
		sg_meta_cache = hash_create("streamguard streams", 32, &ctl,
									HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	memset(key, 0, sizeof(key));
	strlcpy(key, name, NAMEDATALEN);
	meta = hash_search(sg_meta_cache, key, HASH_ENTER, &found);
	if (!found)
	{
		memset(((char *) meta) + NAMEDATALEN, 0, sizeof(SgStreamMeta) - NAMEDATALEN);
		meta->ref.slot = -1;
	}
	if (!found ||
		!HorizonRefValid(meta->ref, MyDatabaseId, meta->stream_id) ||
		HorizonGeneration(meta->ref.slot) != meta->generation)
	{
		PG_TRY();
		{
			sg_load_meta(meta, name);
		}
		PG_CATCH();
		{
			meta->ref.slot = -1;
			PG_RE_THROW();
		}
		PG_END_TRY();
	}

	if (priv == SG_PRIV_APPEND)
		StreamCheckNotOwnSource(meta);
	if (priv == SG_PRIV_OWNER)
	{
		if (!superuser() && !has_privs_of_role(GetUserId(), meta->owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must be owner of stream \"%s\"", meta->name)));
	}
	else if (priv != SG_PRIV_NONE && !sg_has_privilege(meta, priv))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s stream \"%s\"",
						priv == SG_PRIV_APPEND ? "append to" : "read", name),
				 errhint("The stream's owner can run streamguard.grant_stream('%s', '%s', '%s').",
						 name, GetUserNameFromId(GetUserId(), false),
						 priv == SG_PRIV_APPEND ? "append" : "read")));
	return meta;
}

/*
 * The stream's metadata when the backend's copy is current and the
 * stream's counters are loaded, else NULL; no privilege check.  For a hot
 * path that connects to SPI only when it must: on NULL, connect and call
 * StreamLookup (and the append loads the counters).
 */
SgStreamMeta *
StreamLookupReady(const char *name)
{
	SgStreamMeta *meta;
	char		key[NAMEDATALEN];

	if (sg_meta_cache == NULL)
		return NULL;
	memset(key, 0, sizeof(key));
	strlcpy(key, name, NAMEDATALEN);
	meta = hash_search(sg_meta_cache, key, HASH_FIND, NULL);
	if (meta == NULL || !HorizonRefValid(meta->ref, MyDatabaseId, meta->stream_id) ||
		HorizonGeneration(meta->ref.slot) != meta->generation ||
		!HorizonSeqReady(meta->ref.slot))
		return NULL;
	return meta;
}

/*
 * Keep the stream from being dropped until this transaction ends (a share
 * lock on its catalog row, which drop_stream locks FOR UPDATE): taken by
 * whatever creates something that depends on the stream.
 */
void
StreamLockShare(SgStreamMeta *meta)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(meta->stream_id)};
	SgUserSave	save;
	bool		gone;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "SELECT 1 FROM streamguard.stream "
									  "WHERE id OPERATOR(pg_catalog.=) $1 FOR KEY SHARE",
									  1, types),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "stream lock failed");
	gone = (SPI_processed == 0);
	SgRestoreUser(&save);
	if (gone)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", meta->name)));
}

/*
 * The stream's append lock (an advisory lock tag of ours, held to the end
 * of the transaction): appends take it in RowExclusiveLock before they
 * choose a partition, alter_stream in ExclusiveLock when it changes the
 * partition count (repartition.c), so that every event appended under the
 * old count has a lower seq in its partition than any appended under the
 * new one.  Returns false when the metadata changed while we waited: the
 * caller then looks the stream up again (StreamLookup) before it appends.
 */
#define SG_LOCKTAG_APPEND 0x5348

bool
StreamLockAppend(SgStreamMeta *meta)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) meta->stream_id, 0, SG_LOCKTAG_APPEND);
	if (LockAcquire(&tag, RowExclusiveLock, false, false) != LOCKACQUIRE_OK)
		return true;			/* held since an earlier append of ours */
	return HorizonRefValid(meta->ref, MyDatabaseId, meta->stream_id) &&
		HorizonGeneration(meta->ref.slot) == meta->generation;
}

void
StreamLockAppendExclusive(int32 stream_id)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) stream_id, 0, SG_LOCKTAG_APPEND);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * Does this transaction hold the stream's append lock, shared by appenders
 * (StreamLockAppend) or exclusively (StreamLockAppendExclusive)?  For the
 * assertions of the callers of horizon*.c that rely on it: taking seqs
 * (HorizonAssignSeqs, horizon_seq.c) and moving a stream's partition
 * entries (HorizonGrowStream, horizon.c).
 */
bool
StreamAppendLockHeld(int32 stream_id, bool exclusive)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) stream_id, 0, SG_LOCKTAG_APPEND);
	return LockHeldByMe(&tag, exclusive ? ExclusiveLock : RowExclusiveLock);
}

/* a partition number of this stream, or a clear error */
void
StreamCheckPartition(SgStreamMeta *meta, int32 partition)
{
	if (partition < 0 || partition >= meta->nparts)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partition %d is out of range for stream \"%s\"", partition, meta->name),
				 errdetail("The stream has partitions 0 to %d.", meta->nparts - 1)));
}

void
StreamSegmentRange(SgStreamMeta *meta, int32 *min_seg, int32 *cur_seg)
{
	HorizonSegments(meta->ref.slot, min_seg, cur_seg);
}

/*
 * The highest seq a partition may have handed out before a restart: the
 * highest retained one, the floor left by retention, every consumer's
 * position (a seek to the end can sit on an aborted seq; reusing it would
 * hide new events from that consumer) and the switch points of changes of
 * the partition count (a seq at or below one belongs to the old mapping).  Runs as the data owner; SPI
 * connected.
 */
int64
StreamMaxSeq(int32 stream_id, int partition, int32 min_seg, int32 cur_seg)
{
	int64		result = 0;
	SgUserSave	save;
	Snapshot	snap;
	bool		isnull;
	Datum		d;

	SgBecomeDataOwner(&save, true);
	snap = SgFreshSnapshot();
	{
		Oid			types[2] = {INT4OID, INT4OID};
		Datum		values[2] = {Int32GetDatum(stream_id), Int32GetDatum(partition)};
		SPIPlanPtr	plan;
		/* the switch points: not under the 0.1 schema (StreamRepartitionCatalog) */
		bool		switches = StreamRepartitionCatalog();
		char	   *sql;

		sql = psprintf("SELECT pg_catalog.max(x) FROM ("
					   " SELECT seq_floor AS x FROM streamguard.stream_partition "
					   " WHERE stream_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2 "
					   " UNION ALL SELECT position FROM streamguard.consumer "
					   " WHERE stream_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2"
					   "%s) f",
					   switches ?
					   " UNION ALL SELECT switch_seqs[$2 OPERATOR(pg_catalog.+) 1] FROM streamguard.stream_repartition "
					   " WHERE stream_id OPERATOR(pg_catalog.=) $1" : "");
		plan = SgPlanCached(NULL, sql, 2, types);
		pfree(sql);
		if (SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot, true, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "seq floor lookup failed");
		if (SPI_processed > 0)
		{
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
			if (!isnull)
				result = DatumGetInt64(d);
		}
	}
	{
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(partition)};

		/* the newest segment holding the partition has its highest seq */
		if (StreamSegmentProbe(stream_id, cur_seg, min_seg,
							   "SELECT pg_catalog.max(seq) FROM %s WHERE partition OPERATOR(pg_catalog.=) $1",
							   1, types, values, snap, &d) &&
			DatumGetInt64(d) > result)
			result = DatumGetInt64(d);
	}
	UnregisterSnapshot(snap);
	SgRestoreUser(&save);
	return result;
}

/*
 * Partitions from..to-1 of a stream: their rows in stream_partition (a new
 * stream's from 0, alter_stream's more from the old count).  SPI
 * connected, as the data owner.
 */
void
StreamPartitionsAdd(int32 stream_id, int from, int to)
{
	Oid			types[3] = {INT4OID, INT4OID, INT4OID};
	Datum		values[3] = {Int32GetDatum(stream_id), Int32GetDatum(from), Int32GetDatum(to)};

	SgExec("INSERT INTO streamguard.stream_partition (stream_id, partition) "
		   "SELECT $1, g FROM pg_catalog.generate_series($2, $3 OPERATOR(pg_catalog.-) 1) g",
		   3, types, values, NULL, SPI_OK_INSERT);
}

/*
 * Create storage segment `seg` of a stream.  Runs as the data owner.
 */
Oid
SgCreateSegment(int32 stream_id, int32 seg)
{
	char	   *relname = StreamSegmentName(stream_id, seg);
	char	   *sql;
	SgUserSave	save;
	Oid			relid;

	SgBecomeDataOwner(&save, true);
	sql = psprintf("CREATE TABLE %s ("
				   " partition int NOT NULL,"
				   " seq bigint NOT NULL,"
				   " key text,"
				   " payload jsonb NOT NULL,"
				   " dedup_key text,"
				   " appended_at timestamptz NOT NULL,"
				   " PRIMARY KEY (partition, seq)) USING heap", relname);
	if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create segment %s", relname);
	sql = psprintf("INSERT INTO streamguard.segment (stream_id, seg, created_at) "
				   "VALUES (%d, %d, pg_catalog.clock_timestamp())", stream_id, seg);
	if (SPI_execute(sql, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record segment %s", relname);
	relid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(relname)),
							 NoLock, false);
	SgRestoreUser(&save);
	return relid;
}
