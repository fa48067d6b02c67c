/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		The catalog's helpers: the storage segments (their one name,
 *		StreamSegmentName, their one iterator, StreamSegmentScan*, and
 *		their partitions' rows, StreamPartitionsAdd), the counters' loader
 *		(StreamMaxSeq), the switch to the data owner, the plan cache, and
 *		the helpers every statement of ours goes through: SgExec /
 *		SgExecCached (run it or raise an internal error) and SgColumn (a
 *		result's column by name).  A stream's metadata, its cache, the
 *		caller's privileges and the stream's locks are in catalog_meta.c;
 *		the stream SQL API (create/drop/grant/alter) is in streams.c; the
 *		pipeline rows several modules share are in pipeline_catalog.c.
 *
 * Metadata lives in ordinary tables of schema streamguard (stream,
 * stream_partition, stream_grant, segment, consumer, append_dedup).
 * Events live in segment tables streamguard_data.s<stream id>_<segment>,
 * each (partition, seq)-keyed and append-only; retention drops whole
 * segments (see maintenance.c).  All of these belong to the role that
 * owns schema streamguard_data (the extension's installer); SQL callers
 * never touch them directly.  Entry points check the caller's stream
 * privileges (catalog_meta.c) and then run their SPI work as that owner,
 * with every name fixed by us and every value passed as a parameter.
 *
 * Locks: a segment table is locked for reading (AccessShareLock, held to
 * the end of the transaction, StreamSegmentLock) as the segment iterator
 * opens it, so that retention cannot drop it under a reader.  The plan
 * cache is the backend's own, in CacheMemoryContext, and takes no lock.
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

/*
 * The stream's partition counters in shared memory, loaded from storage the
 * first time the stream is used after startup (HorizonSeqToLoad,
 * HorizonInstallSeqs): every path that takes, reads or compares seqs calls
 * it first.  Runs as the data owner; SPI connected.
 */
void
StreamEnsureSeqReady(SgStreamRef ref, int32 stream_id)
{
	int32		min_seg,
				cur_seg;
	int			nparts;
	int64	   *maxima;
	int			p;

	if (!HorizonSeqToLoad(ref, &min_seg, &cur_seg, &nparts))
		return;
	maxima = palloc(sizeof(int64) * nparts);
	for (p = 0; p < nparts; p++)
		maxima[p] = StreamMaxSeq(stream_id, p, min_seg, cur_seg);
	HorizonInstallSeqs(ref, nparts, maxima);
	pfree(maxima);
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
