/*-------------------------------------------------------------------------
 *
 * streams.c
 *		The stream SQL API: create_stream, drop_stream, grant_stream,
 *		revoke_stream, alter_stream.
 *
 * Above the metadata layer (catalog.c) and the shared-memory layer
 * (horizon*.c): the caller's privileges are checked first, then the work
 * runs as the data owner with search_path pinned.  A forced drop_stream
 * drops the stream's pipelines through the pipeline API, the way
 * drop_pipeline does, and removes the captures into it (capture.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/pipeline.h"
#include "api/streams.h"
#include "capture/capture.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "shmem/launcher_mailbox.h"
#include "stream/repartition.h"

PG_FUNCTION_INFO_V1(sg_create_stream);
PG_FUNCTION_INFO_V1(sg_drop_stream);
PG_FUNCTION_INFO_V1(sg_grant_stream);
PG_FUNCTION_INFO_V1(sg_revoke_stream);

int			sg_role_max_streams = 64;
int			sg_role_max_partitions = 1024;
int			sg_database_max_streams = -1;
int			sg_database_max_partitions = -1;

/* ------------------------------------------------------- SQL functions */

/*
 * create_stream(name, partitions, retention, dedup_window, segment_interval)
 */
Datum
sg_create_stream(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		nparts;
	Interval   *retention = NULL;
	Interval   *dedup_window;
	Interval   *segment_interval = NULL;
	SgUserSave	save;
	int32		stream_id;
	bool		isnull;
	int			ret;

	SgCheckWritable("create_stream", "it creates the stream");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "stream name");
	SgCheckName("stream", name);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("partitions must not be NULL")));
	nparts = PG_GETARG_INT32(1);
	if (nparts < 1 || nparts > SG_MAX_PARTITIONS_PER_STREAM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partitions must be between 1 and %d, got %d",
						SG_MAX_PARTITIONS_PER_STREAM, nparts)));
	if (!PG_ARGISNULL(2))
	{
		retention = PG_GETARG_INTERVAL_P(2);
		SgCheckInterval("retention", retention);
	}
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("dedup_window must not be NULL")));
	dedup_window = PG_GETARG_INTERVAL_P(3);
	SgCheckDedupWindow(dedup_window);
	if (!PG_ARGISNULL(4))
	{
		segment_interval = PG_GETARG_INTERVAL_P(4);
		SgCheckInterval("segment_interval", segment_interval);
		if (retention == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("segment_interval needs a retention"),
					 errdetail("Without retention a stream keeps all events in one segment.")));
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgLockRoleForCreate(GetUserId());
	SgBecomeDataOwner(&save, true);
	{
		Oid			types[1] = {OIDOID};
		Datum		values[1] = {ObjectIdGetDatum(save.userid)};

		if (SPI_execute_with_args("SELECT pg_catalog.count(*), "
								  "COALESCE(pg_catalog.sum(partitions), 0)::bigint "
								  "FROM streamguard.stream WHERE owner OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "stream quota lookup failed");
		SgCheckRoleQuota("streams", save.userid,
						 DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
						 1, sg_role_max_streams, "streamguard.role_max_streams");
		SgCheckRoleQuota("partitions", save.userid,
						 DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
						 nparts, sg_role_max_partitions, "streamguard.role_max_partitions");
		/* and the database's share of the server's slots, every role's streams */
		SgLockDatabaseForCreate();
		if (SPI_execute("SELECT pg_catalog.count(*), COALESCE(pg_catalog.sum(partitions), 0)::bigint "
						"FROM streamguard.stream", true, 0) != SPI_OK_SELECT)
			elog(ERROR, "stream count failed");
		SgCheckDatabaseCap("streams",
						   DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
						   1, SgDatabaseCap(sg_database_max_streams, sg_max_streams),
						   "streamguard.database_max_streams");
		SgCheckDatabaseCap("stream partitions",
						   DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
						   nparts, SgDatabaseCap(sg_database_max_partitions, sg_max_partitions),
						   "streamguard.database_max_partitions");
	}
	{
		Oid			types[6] = {TEXTOID, INT4OID, OIDOID, INTERVALOID, INTERVALOID, INTERVALOID};
		Datum		values[6];
		char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

		values[0] = CStringGetTextDatum(name);
		values[1] = Int32GetDatum(nparts);
		values[2] = ObjectIdGetDatum(save.userid);
		if (retention)
			values[3] = IntervalPGetDatum(retention);
		else
			nulls[3] = 'n';
		values[4] = IntervalPGetDatum(dedup_window);
		if (segment_interval)
			values[5] = IntervalPGetDatum(segment_interval);
		else if (retention)
			values[5] = DirectFunctionCall2(interval_div, IntervalPGetDatum(retention),
											Float8GetDatum(4.0));
		else
			nulls[5] = 'n';
		if (!nulls[5] && SgIntervalUsecs(DatumGetIntervalP(values[5])) < USECS_PER_SEC)
		{
			Interval   *one = palloc0(sizeof(Interval));

			one->time = USECS_PER_SEC;
			values[5] = IntervalPGetDatum(one);
		}
		if (retention)
			SgCheckSegments(retention, DatumGetIntervalP(values[5]));

		ret = SPI_execute_with_args("INSERT INTO streamguard.stream "
									"(name, partitions, owner, retention, dedup_window, segment_interval) "
									"VALUES ($1, $2, $3, $4, $5, $6) "
									"ON CONFLICT (name) DO NOTHING RETURNING id",
									6, types, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "could not insert stream: %s", SPI_result_code_string(ret));
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("stream \"%s\" already exists", name)));
		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		/* a slot attached before this transaction ends must not outlive an abort */
		HorizonFreeOnAbort(stream_id);
	}
	StreamPartitionsAdd(stream_id, 0, nparts);
	SgCreateSegment(stream_id, 0);
	SgLeaveCatalog(&save);

	LauncherWake();
	PG_RETURN_VOID();
}

/*
 * drop_stream(name, force)
 */
Datum
sg_drop_stream(PG_FUNCTION_ARGS)
{
	char	   *name;
	bool		force;
	int32		stream_id;
	SgUserSave	save;
	int			ret;
	bool		isnull;
	int64		nconsumers;
	int64		npipelines;
	int64		ncaptures;
	int32		min_seg,
				cur_seg,
				seg;
	StringInfoData sql;

	SgCheckWritable("drop_stream", "it drops the stream");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "stream name");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("force must not be NULL")));
	force = PG_GETARG_BOOL(1);

	SgCheckName("stream", name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/*
	 * Straight from the catalog, without attaching the stream to shared
	 * memory: a drop must work even when no slot is free.
	 */
	SgBecomeDataOwner(&save, true);
	{
		Oid			ntypes[1] = {TEXTOID};
		Datum		nvalues[1] = {CStringGetTextDatum(name)};
		Oid			owner;

		/* serialize against concurrent drops and maintenance */
		ret = SPI_execute_with_args("SELECT id, owner, current_seg, min_seg FROM streamguard.stream "
									"WHERE name OPERATOR(pg_catalog.=) $1 FOR UPDATE",
									1, ntypes, nvalues, NULL, false, 0);
		if (ret != SPI_OK_SELECT || SPI_processed == 0)
		{
			SgRestoreUser(&save);
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" does not exist", name)));
		}
		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		cur_seg = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		min_seg = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
		SgRestoreUser(&save);
		if (!superuser() && !has_privs_of_role(GetUserId(), owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must be owner of stream \"%s\"", name)));
		if (SgRunningSourceIs(stream_id))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a pipeline cannot drop its own source stream \"%s\"", name)));
		SgBecomeDataOwner(&save, true);
	}
	{
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(stream_id)};

		ret = SPI_execute_with_args("SELECT (SELECT count(*) FROM streamguard.pipeline WHERE stream_id = $1), "
									"(SELECT count(DISTINCT name) FROM streamguard.consumer WHERE stream_id = $1 "
									" AND name NOT LIKE 'pipeline:%')",
									1, types, values, NULL, false, 0);
		npipelines = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		nconsumers = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		ncaptures = CaptureCountForStream(stream_id);
		if (ncaptures > 0 && !force)
		{
			SgRestoreUser(&save);
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop stream \"%s\" because %lld table(s) are captured into it",
							name, (long long) ncaptures),
					 errhint("Uncapture them with streamguard.uncapture_table, or use force => true.")));
		}
		if (npipelines > 0 && !force)
		{
			SgRestoreUser(&save);
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop stream \"%s\" because %lld pipeline(s) read it",
							name, (long long) npipelines),
					 errhint("Drop the pipelines with streamguard.drop_pipeline, or use force => true.")));
		}
		if (nconsumers > 0 && !force)
		{
			SgRestoreUser(&save);
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop stream \"%s\" because %lld consumer(s) depend on it",
							name, (long long) nconsumers),
					 errhint("Drop the consumers with streamguard.drop_consumer, or use force => true.")));
		}

		/* forced: the stream's pipelines go with it, dropped as drop_pipeline does */
		if (npipelines > 0)
			PipelineDropForStream(stream_id);
		/* ... and its captures, triggers and all */
		if (ncaptures > 0)
			CaptureDropForStream(stream_id);
		/* consumers, grants, partitions and segments cascade */
		if (SPI_execute_with_args("DELETE FROM streamguard.append_dedup WHERE stream_id = $1",
								  1, types, values, NULL, false, 0) != SPI_OK_DELETE ||
			SPI_execute_with_args("DELETE FROM streamguard.stream WHERE id = $1",
								  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not drop stream \"%s\"", name);
	}
	initStringInfo(&sql);
	appendStringInfoString(&sql, "DROP TABLE IF EXISTS ");
	for (seg = min_seg; seg <= cur_seg; seg++)
		appendStringInfo(&sql, "%s%s", seg > min_seg ? ", " : "", StreamSegmentName(stream_id, seg));
	ret = SPI_execute(sql.data, false, 0);
	if (ret != SPI_OK_UTILITY)
		elog(ERROR, "could not drop segments of stream \"%s\"", name);
	SgLeaveCatalog(&save);

	HorizonFreeAtCommit(stream_id);
	PG_RETURN_VOID();
}

/* grant_stream/revoke_stream's privilege words, in the switch's order */
static const SgWordList privilege_words = {
	"stream privilege", "privileges", {"append", "read", "all", "watch", NULL}
};

static void
sg_change_grant(FunctionCallInfo fcinfo, bool grant)
{
	char	   *name;
	Oid			grantee;
	char	   *priv;
	bool		p_append,
				p_read,
				p_watch;
	SgStreamMeta *meta;
	SgUserSave	save;
	int			ret;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "stream name");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("grantee must not be NULL")));
	grantee = PG_GETARG_OID(1);
	priv = SgTextArg(fcinfo, 2, "privilege");
	if (grant)
	{
		/* a grant to a role that a DROP ROLE cannot see would outlive it */
		LockSharedObject(AuthIdRelationId, grantee, 0, AccessShareLock);
		if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(grantee)))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("role with OID %u does not exist", grantee)));
	}
	switch (SgParseWord(&privilege_words, priv))
	{
		case 0:
			p_append = true, p_read = false, p_watch = false;
			break;
		case 1:
			p_append = false, p_read = true, p_watch = false;
			break;
		case 3:
			/* the consumers' positions and lag, never an event */
			p_append = false, p_read = false, p_watch = true;
			break;
		default:
			p_append = true, p_read = true, p_watch = true;
			break;
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_OWNER);

	SgBecomeDataOwner(&save, true);
	{
		Oid			types[5] = {INT4OID, OIDOID, BOOLOID, BOOLOID, BOOLOID};
		Datum		values[5] = {Int32GetDatum(meta->stream_id), ObjectIdGetDatum(grantee),
			BoolGetDatum(p_append), BoolGetDatum(p_read), BoolGetDatum(p_watch)};

		if (grant)
			ret = SPI_execute_with_args("INSERT INTO streamguard.stream_grant AS g "
										"(stream_id, grantee, can_append, can_read, can_watch) "
										"VALUES ($1, $2, $3, $4, $5) "
										"ON CONFLICT (stream_id, grantee) DO UPDATE SET "
										"can_append = g.can_append OR excluded.can_append, "
										"can_read = g.can_read OR excluded.can_read, "
										"can_watch = g.can_watch OR excluded.can_watch",
										5, types, values, NULL, false, 0);
		else
		{
			ret = SPI_execute_with_args("UPDATE streamguard.stream_grant SET "
										"can_append = can_append AND NOT $3, can_read = can_read AND NOT $4, "
										"can_watch = can_watch AND NOT $5 "
										"WHERE stream_id = $1 AND grantee = $2",
										5, types, values, NULL, false, 0);
			if (ret >= 0)
				ret = SPI_execute_with_args("DELETE FROM streamguard.stream_grant "
											"WHERE stream_id = $1 AND grantee = $2 "
											"AND NOT can_append AND NOT can_read AND NOT can_watch",
											2, types, values, NULL, false, 0);
		}
		if (ret < 0)
			elog(ERROR, "could not change grant: %s", SPI_result_code_string(ret));
	}
	SgLeaveCatalog(&save);
	HorizonBumpGenerationAtCommit(meta->stream_id);
}

Datum
sg_grant_stream(PG_FUNCTION_ARGS)
{
	SgCheckWritable("grant_stream", "it changes the stream's privileges");
	sg_change_grant(fcinfo, true);
	PG_RETURN_VOID();
}

Datum
sg_revoke_stream(PG_FUNCTION_ARGS)
{
	SgCheckWritable("revoke_stream", "it changes the stream's privileges");
	sg_change_grant(fcinfo, false);
	PG_RETURN_VOID();
}

/* ------------------------------------------------------------ alter_stream */

PG_FUNCTION_INFO_V1(sg_alter_stream);
PG_FUNCTION_INFO_V1(sg_set_payload_check);

/*
 * alter_stream(name, partitions, retention, dedup_window, segment_interval):
 * NULL keeps a setting; retention => '0' removes the retention (events are
 * kept forever again).  Owner only.  The partition count can grow, never
 * shrink (repartition.c).
 */
Datum
sg_alter_stream(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	int32		stream_id;
	int32		nparts;
	Oid			owner;
	bool		isnull;
	bool		had_retention;
	Datum		retention = (Datum) 0;
	bool		retention_null;
	Datum		segment = (Datum) 0;
	bool		segment_null;

	SgCheckWritable("alter_stream", "it changes the stream");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "stream name");
	SgCheckName("stream", name);
	if (!PG_ARGISNULL(2) && SgIntervalUsecs(PG_GETARG_INTERVAL_P(2)) != 0)
		SgCheckInterval("retention", PG_GETARG_INTERVAL_P(2));
	if (!PG_ARGISNULL(3))
		SgCheckDedupWindow(PG_GETARG_INTERVAL_P(3));
	if (!PG_ARGISNULL(4))
		SgCheckInterval("segment_interval", PG_GETARG_INTERVAL_P(4));

	SgEnterCatalog(&save);
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(name)};

		/* NO KEY: a consumer being created (FOR KEY SHARE) need not wait for us */
		if (SPI_execute_with_args("SELECT id, owner, partitions, retention, segment_interval "
								  "FROM streamguard.stream WHERE name OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
								  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "stream lookup failed");
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" does not exist", name)));
		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		nparts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		retention = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &retention_null);
		segment = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &segment_null);
		had_retention = !retention_null;
	}
	if (!superuser_arg(save.userid) && !has_privs_of_role(save.userid, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of stream \"%s\"", name)));
	if (!PG_ARGISNULL(1) && PG_GETARG_INT32(1) != nparts)
	{
		int32		new_n = PG_GETARG_INT32(1);

		if (new_n < nparts)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("the partition count of stream \"%s\" cannot decrease", name),
					 errdetail("The stream has %d partitions; %d were asked for.", nparts, new_n),
					 errhint("Create a new stream with fewer partitions and move producers and consumers to it.")));
		if (new_n > SG_MAX_PARTITIONS_PER_STREAM)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partitions must be between 1 and %d, got %d",
							SG_MAX_PARTITIONS_PER_STREAM, new_n)));
		/* the owner's quota, counted as create_stream counts it */
		SgLockRoleForCreate(owner);
		{
			Oid			types[1] = {OIDOID};
			Datum		values[1] = {ObjectIdGetDatum(owner)};

			if (SPI_execute_with_args("SELECT COALESCE(pg_catalog.sum(partitions), 0)::bigint "
									  "FROM streamguard.stream WHERE owner OPERATOR(pg_catalog.=) $1",
									  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
				elog(ERROR, "partition quota lookup failed");
			SgCheckRoleQuota("partitions", owner,
							 DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
							 new_n - nparts, sg_role_max_partitions, "streamguard.role_max_partitions");
			SgLockDatabaseForCreate();
			if (SPI_execute("SELECT COALESCE(pg_catalog.sum(partitions), 0)::bigint FROM streamguard.stream",
							true, 0) != SPI_OK_SELECT)
				elog(ERROR, "partition count failed");
			SgCheckDatabaseCap("stream partitions",
							   DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
							   new_n - nparts, SgDatabaseCap(sg_database_max_partitions, sg_max_partitions),
							   "streamguard.database_max_partitions");
		}
		RepartitionGrow(name, stream_id, nparts, new_n);
	}

	if (!PG_ARGISNULL(2))
	{
		if (SgIntervalUsecs(PG_GETARG_INTERVAL_P(2)) == 0)
		{
			/* keep forever: no retention, no rotation */
			retention_null = segment_null = true;
		}
		else
		{
			retention = PG_GETARG_DATUM(2);
			retention_null = false;
			if (!had_retention || segment_null)
			{
				/* as create_stream: a quarter of the retention, at least a second */
				segment = DirectFunctionCall2(interval_div, retention, Float8GetDatum(4.0));
				if (SgIntervalUsecs(DatumGetIntervalP(segment)) < USECS_PER_SEC)
				{
					Interval   *one = palloc0(sizeof(Interval));

					one->time = USECS_PER_SEC;
					segment = IntervalPGetDatum(one);
				}
				segment_null = false;
			}
		}
	}
	if (!PG_ARGISNULL(4))
	{
		if (retention_null)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("segment_interval needs a retention"),
					 errdetail("Without retention a stream keeps all events in one segment.")));
		segment = PG_GETARG_DATUM(4);
		segment_null = false;
	}
	/* a change of either: the segments it makes (a stream of 0.2 may be above) */
	if ((!PG_ARGISNULL(2) || !PG_ARGISNULL(4)) && !retention_null && !segment_null)
		SgCheckSegments(DatumGetIntervalP(retention), DatumGetIntervalP(segment));
	{
		Oid			types[4] = {INT4OID, INTERVALOID, INTERVALOID, INTERVALOID};
		Datum		values[4] = {Int32GetDatum(stream_id), retention, segment,
		PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3)};
		char		nulls[4] = {' ', retention_null ? 'n' : ' ', segment_null ? 'n' : ' ',
		PG_ARGISNULL(3) ? 'n' : ' '};

		if (SPI_execute_with_args("UPDATE streamguard.stream SET retention = $2, segment_interval = $3, "
								  "dedup_window = COALESCE($4, dedup_window) "
								  "WHERE id OPERATOR(pg_catalog.=) $1",
								  4, types, values, nulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "alter_stream failed");
	}
	SgLeaveCatalog(&save);
	HorizonBumpGenerationAtCommit(stream_id);
	LauncherWake();
	PG_RETURN_VOID();
}

/*
 * set_payload_check(stream, 'any' | 'object'): with 'object', appends to
 * the stream refuse payloads that are not JSON objects (append.c).  Owner
 * only.  Appends that start after this transaction commits see the change.
 */
Datum
sg_set_payload_check(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *check;
	SgUserSave	save;
	int32		stream_id;
	Oid			owner;
	bool		isnull;

	SgCheckWritable("set_payload_check", "it changes the stream");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "stream name");
	SgCheckName("stream", name);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload_check must not be NULL")));
	check = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (strcmp(check, "any") != 0 && strcmp(check, "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payload_check must be 'any' or 'object', got \"%s\"", check)));

	SgEnterCatalog(&save);
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(name)};

		if (SPI_execute_with_args("SELECT id, owner FROM streamguard.stream "
								  "WHERE name OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
								  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "stream lookup failed");
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" does not exist", name)));
		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	}
	if (!superuser_arg(save.userid) && !has_privs_of_role(save.userid, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of stream \"%s\"", name)));
	{
		Oid			types[2] = {INT4OID, TEXTOID};
		Datum		values[2] = {Int32GetDatum(stream_id), CStringGetTextDatum(check)};

		if (SPI_execute_with_args("UPDATE streamguard.stream SET payload_check = $2 "
								  "WHERE id OPERATOR(pg_catalog.=) $1",
								  2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "set_payload_check failed");
	}
	SgLeaveCatalog(&save);
	HorizonBumpGenerationAtCommit(stream_id);
	PG_RETURN_VOID();
}
