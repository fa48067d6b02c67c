/*-------------------------------------------------------------------------
 *
 * views.c
 *		Set-returning functions behind the progress views
 *		(streamguard.streams, stream_partitions, consumers, horizon_holders),
 *		and the predicates the views filter rows with (_is_member, _can_watch).
 *
 * Counters and horizons come from shared memory; first/last seqs are
 * index probes on the retained segments.  Nothing here scans a stream.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "api/views.h"
#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "stream/group.h"

PG_FUNCTION_INFO_V1(sg_partition_stats);
PG_FUNCTION_INFO_V1(sg_next_event_time);
PG_FUNCTION_INFO_V1(sg_open_appends);
PG_FUNCTION_INFO_V1(sg_can_watch);
PG_FUNCTION_INFO_V1(sg_can_read);
PG_FUNCTION_INFO_V1(sg_group_members);

static bool sg_catalog_has_watch(void);
static bool sg_stream_visible(int32 stream_id, bool watch);

/*
 * First or last seq of a partition over the retained segments (0 = none).
 */
static int64
sg_edge_seq(int32 stream_id, int partition, int32 min_seg, int32 cur_seg,
			bool first, Snapshot snap)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(partition)};
	Datum		d;

	if (StreamSegmentProbe(stream_id, first ? min_seg : cur_seg, first ? cur_seg : min_seg,
						   first ? "SELECT pg_catalog.min(seq) FROM %s WHERE partition OPERATOR(pg_catalog.=) $1" :
						   "SELECT pg_catalog.max(seq) FROM %s WHERE partition OPERATOR(pg_catalog.=) $1",
						   1, types, values, snap, &d))
		return DatumGetInt64(d);
	return 0;
}

/*
 * _partition_stats() -> (stream_id, partition, first_seq, last_seq,
 *						  next_seq, readable_horizon, in_flight, append_rate)
 */
Datum
sg_partition_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgUserSave	save;
	SPITupleTable *streams;
	uint64		nstreams,
				i;
	Snapshot	snap;
	Oid			catalog_oid;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	catalog_oid = StreamCatalogOid();
	SgBecomeDataOwner(&save, true);
	snap = SgFreshSnapshot();
	if (SPI_execute_snapshot(SgPlanCached(NULL, "SELECT id, partitions, current_seg, min_seg "
										  "FROM streamguard.stream ORDER BY id", 0, NULL),
							 NULL, NULL, snap, InvalidSnapshot, true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "stream list failed");
	streams = SPI_tuptable;
	nstreams = SPI_processed;
	for (i = 0; i < nstreams; i++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(streams->vals[i], streams->tupdesc, 1, &isnull));
		int32		nparts = DatumGetInt32(SPI_getbinval(streams->vals[i], streams->tupdesc, 2, &isnull));
		int32		cur_seg = DatumGetInt32(SPI_getbinval(streams->vals[i], streams->tupdesc, 3, &isnull));
		int32		min_seg = DatumGetInt32(SPI_getbinval(streams->vals[i], streams->tupdesc, 4, &isnull));
		/*
		 * Without a free slot (shared memory is full) the stream shows its
		 * stored range only: a view must not fail for everyone because of
		 * one stream.
		 */
		SgStreamRef ref = HorizonTryAttachStream(id, nparts, cur_seg, min_seg, catalog_oid);
		bool		attached = ref.slot >= 0;
		double		rate = 0;
		int			p;

		if (attached)
		{
			StreamEnsureSeqReady(ref, id);
			rate = HorizonAppendRate(ref.slot);
			HorizonSegments(ref.slot, &min_seg, &cur_seg);
		}
		for (p = 0; p < nparts; p++)
		{
			Datum		values[8];
			bool		nulls[8] = {false};
			int64		next_seq = 0;
			int			in_flight = 0;
			int64		horizon = attached ? HorizonReadable(ref.slot, p, &next_seq, &in_flight) : 0;
			int64		first = sg_edge_seq(id, p, min_seg, cur_seg, true, snap);
			int64		last = sg_edge_seq(id, p, min_seg, cur_seg, false, snap);

			values[0] = Int32GetDatum(id);
			values[1] = Int32GetDatum(p);
			values[2] = Int64GetDatum(first);
			nulls[2] = (first == 0);
			values[3] = Int64GetDatum(last);
			nulls[3] = (last == 0);
			values[4] = Int64GetDatum(next_seq);
			values[5] = Int64GetDatum(horizon);
			values[6] = Int32GetDatum(in_flight);
			values[7] = Float8GetDatum(rate);
			nulls[4] = nulls[5] = nulls[6] = nulls[7] = !attached;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	UnregisterSnapshot(snap);
	SgLeaveCatalog(&save);
	return (Datum) 0;
}

/*
 * _next_event_time(stream_id, partition, after_seq): appended_at of the
 * first retained event after after_seq, or NULL; NULL too for a caller who
 * may not read the stream (it filters by itself: PUBLIC may call it).
 */
Datum
sg_next_event_time(PG_FUNCTION_ARGS)
{
	int32		stream_id = PG_GETARG_INT32(0);
	int32		partition = PG_GETARG_INT32(1);
	int64		after = PG_GETARG_INT64(2);
	SgUserSave	save;
	int32		min_seg,
				cur_seg;
	int			slot;
	Datum		result = (Datum) 0;
	bool		found = false;

	StreamguardCheckLoaded();
	if (!sg_stream_visible(stream_id, sg_catalog_has_watch()))
		PG_RETURN_NULL();
	slot = HorizonFindSlot(MyDatabaseId, stream_id);
	if (slot < 0)
		PG_RETURN_NULL();
	HorizonSegments(slot, &min_seg, &cur_seg);

	SgEnterCatalog(&save);
	{
		Oid			types[2] = {INT4OID, INT8OID};
		Datum		values[2] = {Int32GetDatum(partition), Int64GetDatum(after)};

		found = StreamSegmentProbe(stream_id, min_seg, cur_seg,
								   "SELECT appended_at FROM %s WHERE partition OPERATOR(pg_catalog.=) $1 "
								   "AND seq OPERATOR(pg_catalog.>) $2 ORDER BY seq LIMIT 1",
								   2, types, values, NULL, &result);
	}
	SgLeaveCatalog(&save);
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/*
 * _open_appends() -> (stream_id, partition, pid, first_seq): the
 * transactions that hold a partition's readable horizon back.
 */
Datum
sg_open_appends(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			max = 1024;
	SgOpenAppendInfo *info;
	int			n,
				i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	info = palloc(sizeof(SgOpenAppendInfo) * max);
	n = HorizonListOpenAppends(info, max);
	if (n > max)
	{
		max = n + 64;
		info = repalloc(info, sizeof(SgOpenAppendInfo) * max);
		n = Min(HorizonListOpenAppends(info, max), max);
	}
	for (i = 0; i < n; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {false};

		values[0] = Int32GetDatum(info[i].stream_id);
		values[1] = Int32GetDatum(info[i].partition);
		values[2] = Int32GetDatum(info[i].pid);
		values[3] = Int64GetDatum(info[i].first_seq);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ------------------------------------------------------ view predicates */

PG_FUNCTION_INFO_V1(sg_is_member);

/* the current role acts as `role`: superuser, the role, or a member */
static bool
sg_acts_as(Oid role)
{
	if (superuser())
		return true;
	/* a role dropped from another database: nobody is its member */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		return false;
	return has_privs_of_role(GetUserId(), role);
}

/*
 * _is_member(role) -> whether the current role may see what `role` owns.
 * Never fails for a role that no longer exists.
 */
Datum
sg_is_member(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(sg_acts_as(PG_GETARG_OID(0)));
}

/*
 * _can_watch(stream_id) -> whether the current role may see the stream's
 * consumers and group members (their positions and lag, never an event):
 * the owner or a member of the owner, a read or watch grant to a role it
 * acts as, or a member of pg_read_all_stats (pg_monitor is one), which sees
 * every session's activity in PostgreSQL too.  Reading events is checked
 * elsewhere, at every poll and read.  Reads the catalog directly, so a view
 * using it works even when shared memory has no room for the stream.
 *
 * The views call it once per row (consumers: in the filter and through
 * _next_event_time), mostly for the same stream row after row: the last
 * answer is kept for the same stream, role, statement and command.  The
 * function is STABLE, so PostgreSQL already takes its answer as fixed
 * within a statement; a grant or revoke by this backend bumps the command.
 */
static struct
{
	bool		valid;
	bool		watch;
	int32		stream_id;
	Oid			userid;
	TimestampTz statement;
	CommandId	cid;
	bool		result;
}			sg_visible_last;

/*
 * Whether the installed SQL objects have the watch grant (0.3 on): the
 * functions below serve the views of 0.1 and 0.2 too until the update,
 * whose stream_grant has no can_watch.  Syscache lookups only.
 */
static bool
sg_catalog_has_watch(void)
{
	Oid			nsp = get_namespace_oid("streamguard", true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid("stream_grant", nsp) : InvalidOid;

	return OidIsValid(rel) && get_attnum(rel, "can_watch") != InvalidAttrNumber;
}

static bool
sg_stream_visible(int32 stream_id, bool watch)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(stream_id)};
	SgUserSave	save;
	bool		result = false;
	uint64		i;
	Oid			userid = GetUserId();
	TimestampTz statement = GetCurrentStatementStartTimestamp();
	CommandId	cid = GetCurrentCommandId(false);

	if (superuser() || (watch && has_privs_of_role(userid, ROLE_PG_READ_ALL_STATS)))
		return true;
	if (sg_visible_last.valid && sg_visible_last.watch == watch &&
		sg_visible_last.stream_id == stream_id &&
		sg_visible_last.userid == userid && sg_visible_last.statement == statement &&
		sg_visible_last.cid == cid)
		return sg_visible_last.result;
	sg_visible_last.valid = false;
	SgEnterCatalog(&save);
	if (SPI_execute_plan(watch
						 ? SgPlanCached(NULL,
										"SELECT owner FROM streamguard.stream WHERE id OPERATOR(pg_catalog.=) $1 "
										"UNION ALL SELECT grantee FROM streamguard.stream_grant "
										"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND (can_read OR can_watch)",
										1, types)
						 : SgPlanCached(NULL,
										"SELECT owner FROM streamguard.stream WHERE id OPERATOR(pg_catalog.=) $1 "
										"UNION ALL SELECT grantee FROM streamguard.stream_grant "
										"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND can_read",
										1, types),
						 values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "stream privilege lookup failed");
	SgRestoreUser(&save);
	for (i = 0; i < SPI_processed && !result; i++)
	{
		bool		isnull;

		result = sg_acts_as(DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
														   SPI_tuptable->tupdesc, 1, &isnull)));
	}
	SPI_finish();
	sg_visible_last.watch = watch;
	sg_visible_last.stream_id = stream_id;
	sg_visible_last.userid = userid;
	sg_visible_last.statement = statement;
	sg_visible_last.cid = cid;
	sg_visible_last.result = result;
	sg_visible_last.valid = true;
	return result;
}

Datum
sg_can_watch(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(sg_stream_visible(PG_GETARG_INT32(0), true));
}

/*
 * _can_read(stream_id) of the 0.1 and 0.2 scripts, whose views this library
 * still serves until ALTER EXTENSION UPDATE: their stream_grant has no
 * watch column, and they showed consumers to readers only.
 */
Datum
sg_can_read(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(sg_stream_visible(PG_GETARG_INT32(0), false));
}

/*
 * _group_members() -> the members of this database's groups on streams
 * whose consumers the caller may see: the view consumer_group_members.
 */
Datum
sg_group_members(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgGroupMemberRow *rows;
	bool		watch;
	int			n;
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	n = GroupMembersSnapshot(&rows);
	watch = sg_catalog_has_watch();
	for (i = 0; i < n; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {0};

		if (!sg_stream_visible(rows[i].stream_id, watch))
			continue;
		values[0] = Int32GetDatum(rows[i].stream_id);
		values[1] = CStringGetTextDatum(rows[i].consumer);
		values[2] = CStringGetTextDatum(rows[i].member);
		values[3] = Int32GetDatum(rows[i].pid);
		values[4] = TimestampTzGetDatum(rows[i].joined_at);
		values[5] = TimestampTzGetDatum(rows[i].last_poll_at);
		values[6] = TimestampTzGetDatum(rows[i].lease_until);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Whether the current role may see what only a pipeline's owner sees (its
 * errors, its checkpoint log): superuser, the owner or a member of it.
 * False for a pipeline that no longer exists.  The internal functions
 * behind the views call it, so that they filter by themselves whoever
 * calls them (docs/security.md, "Function privileges").
 */
bool
PipelineVisibleToCaller(int32 pipeline_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	SgUserSave	save;
	bool		result = false;

	if (superuser())
		return true;
	SgEnterCatalog(&save);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "SELECT owner FROM streamguard.pipeline WHERE id OPERATOR(pg_catalog.=) $1",
									  1, types),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "pipeline owner lookup failed");
	SgRestoreUser(&save);
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		owner = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

		result = !isnull && sg_acts_as(DatumGetObjectId(owner));
	}
	SPI_finish();
	return result;
}
