/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		Pipelines' lifecycle SQL API: create / pause / resume / drop /
 *		reset / alter, and the lookup and locking of a pipeline row that
 *		every control call uses.  Elsewhere: the validation of a pipeline's
 *		SQL and settings (pipeline_validate.c), the operator's tools on
 *		dead letters and faults (pipeline_ops.c), the in-doubt resolution of
 *		two-phase sinks (twophase.c), shared memory, the supervisor and the
 *		runtime views (pipeline_slots.c), the worker (worker.h).
 *
 * A pipeline is a row of streamguard.pipeline; its positions are the
 * consumer rows named "pipeline:<name>" of its source stream, so retention
 * accounting and the consumers view cover pipelines too.
 *
 * Fencing.  The pipeline row carries an epoch.  Every batch transaction of
 * a worker starts by locking the row (FOR UPDATE) and checking that the
 * epoch is still the one the worker took when it started; pause, reset,
 * alter, drop and every worker start bump the epoch under the same row
 * lock.  A worker that lost ownership therefore finds out before it can
 * commit anything, and a batch that commits proves ownership.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "api/pipeline.h"
#include "api/pipeline_validate.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/util.h"
#include "io/kafka.h"
#include "io/remote.h"
#include "pipeline/pipeline.h"
#include "pipeline/twophase.h"
#include "shmem/horizon.h"
#include "shmem/pipeline_slots.h"
#include "shmem/worker_units.h"
#include "stream/seek.h"
#include "workers/launcher.h"

PG_FUNCTION_INFO_V1(sg_create_pipeline);
PG_FUNCTION_INFO_V1(sg_pause_pipeline);
PG_FUNCTION_INFO_V1(sg_resume_pipeline);
PG_FUNCTION_INFO_V1(sg_drop_pipeline);
PG_FUNCTION_INFO_V1(sg_reset_pipeline);
PG_FUNCTION_INFO_V1(sg_alter_pipeline);

int			sg_role_max_pipelines = 16;
int			sg_database_max_pipelines = -1;


/*
 * Look a pipeline up by name with `sql` (its id and owner first), and check
 * that the caller may change it: 42704 if there is none, 42501 if the
 * caller is not its owner, a member, or a superuser.
 */
static bool
sg_find_pipeline(const char *sql, const char *name, bool read_only, Oid caller, SgPipeRow *row,
				 bool missing_ok)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	bool		isnull;
	int			ret;

	ret = SPI_execute_with_args(sql, 1, types, values, NULL, read_only, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "pipeline lookup failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
	{
		if (missing_ok)
			return false;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pipeline \"%s\" does not exist", name)));
	}
	row->id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	row->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (!superuser_arg(caller) && !has_privs_of_role(caller, row->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", name)));
	return true;
}

/*
 * Lock a pipeline's row and check that the caller may change it.
 * SPI connected, running as the data owner.
 */
SgPipeRow
PipelineLockExt(const char *name, Oid caller, bool fence, bool missing_ok)
{
	SgPipeRow	row;
	bool		isnull;
	int			ret;

	SgCheckName("pipeline", name);

	/* who may touch it: checked before anything else happens */
	memset(&row, 0, sizeof(row));
	/* not read-only: a fresh snapshot, for callers that waited for a lock */
	if (!sg_find_pipeline("SELECT id, owner FROM streamguard.pipeline "
						  "WHERE name OPERATOR(pg_catalog.=) $1", name, false, caller, &row, missing_ok))
		return row;				/* id 0: gone, and the caller said that is fine */
	if (SgRunningPipelineIs(row.id))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pipeline \"%s\" cannot control itself from its own SQL", name),
				 errdetail("Its batch holds the pipeline; the call could never take effect.")));

	/*
	 * A running worker takes the row lock at the start of every batch; ask
	 * it to stop taking it, or a steady backlog would keep us waiting
	 * behind batch after batch.  A batch in flight is cancelled rather
	 * than waited for (it rolls back; its events are processed again by
	 * the next worker, if any).  The supervisor starts a fresh worker if
	 * the pipeline still runs.
	 */
	if (fence)
	{
		pid_t		pids[SG_MAX_PIPELINE_WORKERS];
		int			npids = PipelineRequestFence(MyDatabaseId, row.id, pids, SG_MAX_PIPELINE_WORKERS);
		Oid			itypes[1] = {INT4OID};
		Datum		ivalues[1] = {Int32GetDatum(row.id)};

		if (npids > 0)
		{
			int			k;

			ret = SPI_execute_with_args("SELECT 1 FROM streamguard.pipeline "
										"WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED",
										1, itypes, ivalues, NULL, false, 0);
			if (ret == SPI_OK_SELECT && SPI_processed == 0)
				for (k = 0; k < npids; k++)
					if (BackendPidGetProc(pids[k]) != NULL)
						(void) kill(pids[k], SIGINT);
		}
	}
	/* the owner may have changed while we waited: checked again */
	if (!sg_find_pipeline("SELECT p.id, p.owner, s.name, p.state, p.epoch, p.workers "
						  "FROM streamguard.pipeline p LEFT JOIN streamguard.stream s "
						  "ON s.id OPERATOR(pg_catalog.=) p.stream_id "
						  "WHERE p.name OPERATOR(pg_catalog.=) $1 FOR UPDATE OF p", name, false, caller, &row,
						  missing_ok))
	{
		row.id = 0;
		return row;
	}
	row.stream = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	row.state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
	row.epoch = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull));
	row.workers = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 6, &isnull));
	return row;
}

SgPipeRow
PipelineLock(const char *name, Oid caller, bool fence)
{
	return PipelineLockExt(name, caller, fence, false);
}

void
PipelineExec(const char *sql, int nargs, Oid *types, Datum *values, int expect)
{
	int			ret = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);

	if (ret != expect)
		elog(ERROR, "pipeline statement failed (%s): %s", SPI_result_code_string(ret), sql);
}

void
PipelineSetState(int32 id, const char *state, bool bump_epoch)
{
	Oid			types[2] = {INT4OID, InvalidOid};
	Datum		values[2];

	values[0] = Int32GetDatum(id);
	values[1] = SgWordParam("pipeline_state", state, &types[1]);
	PipelineExec(bump_epoch ?
					 "UPDATE streamguard.pipeline SET state = $2, epoch = epoch + 1, generation = generation + 1 "
					 "WHERE id = $1" :
					 "UPDATE streamguard.pipeline SET state = $2 WHERE id = $1",
					 2, types, values, SPI_OK_UPDATE);
}

char *
PipelineConsumerName(const char *pipeline)
{
	return psprintf("pipeline:%s", pipeline);
}

/*
 * alter_pipeline raised a pipeline's worker count by `adding`, in this
 * transaction: the owner's quota and the server-wide slots, counted after
 * the change, must still hold (the role's lock serializes its creates).
 */
static void
sg_check_more_workers(Oid owner, int adding)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(owner)};
	bool		isnull;
	int64		mine,
				all;

	SgLockRoleForCreate(owner);
	if (SPI_execute_with_args("SELECT coalesce(pg_catalog.sum(workers) FILTER (WHERE owner OPERATOR(pg_catalog.=) $1), 0)::int8, "
							  "coalesce(pg_catalog.sum(workers), 0)::int8 FROM streamguard.pipeline",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline quota lookup failed");
	mine = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	all = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SgCheckRoleQuota("pipeline workers", owner, mine - adding, adding, sg_role_max_pipelines,
					 "streamguard.role_max_pipelines");
	SgLockDatabaseForCreate();
	SgCheckDatabaseCap("pipeline workers", all - adding, adding,
					   SgDatabaseCap(sg_database_max_pipelines, sg_max_pipelines),
					   "streamguard.database_max_pipelines");
}

/* names of create_pipeline's arguments from 13 on (the 0.2 settings) */
static const char *const sg_create_args[] = {
	"batch_timeout", "allow_source_append", "max_attempts", "retry_backoff", "max_backoff"
};

void
PipelineNotifyChange(int32 pipeline_id)
{
	PipelineWakePipeline(MyDatabaseId, pipeline_id);
	LauncherWake();
}

/* ------------------------------------------------------- SQL functions */

/*
 * create_pipeline(name, source, sql, guarantee, batch_size, error_policy,
 *				   dedup, dedup_window, start_from)
 */
Datum
sg_create_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name,
			   *source,
			   *sql,
			   *guarantee,
			   *policy,
			   *start_from;
	int32		batch_size;
	bool		dedup;
	Interval   *dedup_window;
	bool		new_settings;
	int32		workers = 1;
	SgStreamMeta *meta = NULL;
	SgUserSave	save;
	Oid			owner = GetUserId();
	char	   *search_path;
	char	   *source_server = NULL;
	char	   *sink_server = NULL;
	char	   *sink_table = NULL;
	char	   *sink_mode;
	int			remote_nparts = 0;
	ArrayType  *sink_on_conflict = NULL;
	bool		kafka = false;
	bool		kafka_sink = false;
	int32		id;
	bool		isnull;
	int			ret;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgCheckName("pipeline", name);
	source = SgTextArg(fcinfo, 1, "source");
	sql = SgTextArg(fcinfo, 2, "sql");
	guarantee = SgTextArg(fcinfo, 3, "guarantee");
	(void) SgParseWord(&SgGuaranteeWords, guarantee);
	/* NULL: the default, which depends on the sink (below) */
	batch_size = PG_ARGISNULL(4) ? -1 : PG_GETARG_INT32(4);
	if (!PG_ARGISNULL(4))
		PipelineCheckBatchSize(batch_size);
	policy = SgTextArg(fcinfo, 5, "error_policy");
	(void) SgParseWord(&SgErrorPolicyWords, policy);
	if (PG_ARGISNULL(6) || PG_ARGISNULL(7))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(6) ? "dedup" : "dedup_window")));
	dedup = PG_GETARG_BOOL(6);
	dedup_window = PG_GETARG_INTERVAL_P(7);
	SgCheckDedupWindow(dedup_window);
	/* the settings added in 0.2 (absent from the 0.1 signature: defaults) */
	new_settings = PG_NARGS() >= 18;
	if (new_settings)
	{
		int			a;

		for (a = 13; a < 18; a++)
			if (PG_ARGISNULL(a))
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("%s must not be NULL", sg_create_args[a - 13])));
		PipelineCheckBatchTimeout(PG_GETARG_INTERVAL_P(13));
		PipelineCheckRetry(PG_GETARG_INT32(15), PG_GETARG_INTERVAL_P(16), PG_GETARG_INTERVAL_P(17));
	}
	if (PG_NARGS() >= 19)
	{
		if (PG_ARGISNULL(18))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("workers must not be NULL")));
		workers = PG_GETARG_INT32(18);
		PipelineCheckWorkers(workers);
	}
	start_from = SgTextArg(fcinfo, 8, "start_from");
	(void) SgParseWord(&SgStartFromWords, start_from);

	if (!PG_ARGISNULL(9))
		source_server = text_to_cstring(PG_GETARG_TEXT_PP(9));
	if (!PG_ARGISNULL(10))
		sink_server = text_to_cstring(PG_GETARG_TEXT_PP(10));
	if (!PG_ARGISNULL(11))
		sink_table = text_to_cstring(PG_GETARG_TEXT_PP(11));
	sink_mode = SgTextArg(fcinfo, 12, "sink_mode");
	(void) SgParseWord(&SgSinkModeWords, sink_mode);
	if (PG_NARGS() >= 20 && !PG_ARGISNULL(19))
	{
		sink_on_conflict = PG_GETARG_ARRAYTYPE_P(19);
		if (sink_server == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink_on_conflict needs a remote sink (sink_server and sink_table)")));
	}
	PipelineCheckWorkersRemote(workers, source_server, sink_server);
	if ((sink_server == NULL) != (sink_table == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink_server and sink_table go together")));
	if (sink_server && KafkaIsKafkaServer(sink_server))
	{
		/* a topic, not a table */
		kafka_sink = true;
		KafkaCheckTopicName(sink_table);

		/*
		 * A Kafka transaction costs several round trips to the broker:
		 * larger batches under a backlog (Kafka Streams commits its
		 * exactly-once transactions every 100 ms).  A batch never waits
		 * to fill, so a quiet stream's latency is the same.
		 */
		if (batch_size < 0)
			batch_size = SG_KAFKA_SINK_BATCH_SIZE;
		/*
		 * A stream, local or on a remote PostgreSQL server (the checkpoint
		 * then holds the remote positions); not a topic: Kafka to Kafka is
		 * not built.
		 */
		if (source_server && KafkaIsKafkaServer(source_server))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a pipeline with a Kafka sink reads a stream, not a Kafka topic"),
					 errdetail("Servers \"%s\" and \"%s\" are both Kafka servers.",
							   source_server, sink_server),
					 errhint("Read the topic into a stream with one pipeline and write the stream to Kafka with another.")));
		if (strcmp(guarantee, "at_most_once") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a pipeline with a Kafka sink is exactly_once or at_least_once")));
		if (sink_on_conflict)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink_on_conflict does not apply to a Kafka sink")));
		/* the Kafka-side analogue of offsets: positions kept by the sink */
		sink_mode = "offsets";
	}
	else if (sink_table)
		sink_table = PipelineQuoteTable(sink_table);
	if (source_server)
	{
		/* the server's wrapper says what the source names: a topic or a stream */
		kafka = KafkaIsKafkaServer(source_server);
		if (kafka)
			KafkaCheckTopicName(source);
		else
			SgCheckName("stream", source);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the owner must be able to read the source */
	if (kafka)
		remote_nparts = PipelineCheckKafkaSource(source_server, source);
	else if (source_server)
		remote_nparts = PipelineCheckRemoteSource(source_server, source);
	else
	{
		meta = StreamLookup(source, SG_PRIV_READ);
		StreamLockShare(meta);
	}
	PipelineValidateSqlFor(sql, kafka);
	if (kafka_sink)
	{
		KafkaSinkCheckShape(sql);
		KafkaSinkCheck(sink_server, sink_table, strcmp(guarantee, "exactly_once") == 0);
	}
	else if (sink_server)
	{
		char	   *cols = PipelineValidateSelect(sql);

		PipelineCheckRemoteSink(sink_server, sink_table, cols, sink_mode,
								sink_on_conflict ? PipelineCheckSinkConflict(sql, sink_on_conflict) : NULL);
	}
	search_path = GetConfigOptionByName("search_path", NULL, false);

	WorkerUnitsCheckCouldRun(owner, workers);
	SgLockRoleForCreate(owner);
	SgBecomeDataOwner(&save, true);
	{
		Oid			qtypes[1] = {OIDOID};
		Datum		qvalues[1] = {ObjectIdGetDatum(owner)};

		/*
		 * Each worker of a pipeline takes a shared-memory slot and a
		 * background worker, so the quota counts workers (under a 0.1
		 * catalog, reached through the 0.1 signature, pipelines).
		 */
		if (SPI_execute_with_args(PG_NARGS() >= 19 ?
								  "SELECT coalesce(pg_catalog.sum(workers), 0)::int8 FROM streamguard.pipeline "
								  "WHERE owner OPERATOR(pg_catalog.=) $1" :
								  "SELECT pg_catalog.count(*) FROM streamguard.pipeline "
								  "WHERE owner OPERATOR(pg_catalog.=) $1",
								  1, qtypes, qvalues, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "pipeline quota lookup failed");
		SgCheckRoleQuota("pipeline workers", owner,
						 DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
						 workers, sg_role_max_pipelines, "streamguard.role_max_pipelines");
	}
	/* the database's share of the server's pipeline slots, every role's pipelines */
	SgLockDatabaseForCreate();
	if (SPI_execute(PG_NARGS() >= 19 ?
					"SELECT coalesce(pg_catalog.sum(workers), 0)::int8 FROM streamguard.pipeline" :
					"SELECT pg_catalog.count(*) FROM streamguard.pipeline", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline count failed");
	SgCheckDatabaseCap("pipeline workers",
					   DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
					   workers, SgDatabaseCap(sg_database_max_pipelines, sg_max_pipelines),
					   "streamguard.database_max_pipelines");
	{
		Oid			types[15] = {TEXTOID, INT4OID, TEXTOID, TEXTOID, INT4OID, TEXTOID,
		BOOLOID, INTERVALOID, OIDOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum		values[15];
		char		nulls[15];

		memset(nulls, ' ', sizeof(nulls));
		values[0] = CStringGetTextDatum(name);
		/* a remote source: no stream here (NULL; 0 in a 0.1 or 0.2 catalog) */
		values[1] = Int32GetDatum(meta ? meta->stream_id : 0);
		nulls[1] = meta == NULL && SgPipelineStatsCatalog() ? 'n' : ' ';
		values[2] = CStringGetTextDatum(sql);
		values[3] = SgWordParam("guarantee", guarantee, &types[3]);
		values[4] = Int32GetDatum(batch_size < 0 ? SG_BATCH_SIZE : batch_size);
		values[5] = SgWordParam("error_policy", policy, &types[5]);
		values[6] = BoolGetDatum(dedup);
		values[7] = IntervalPGetDatum(dedup_window);
		values[8] = ObjectIdGetDatum(owner);
		values[9] = CStringGetTextDatum(search_path);
		values[10] = source_server ? CStringGetTextDatum(source_server) : (Datum) 0;
		nulls[10] = source_server ? ' ' : 'n';
		values[11] = source_server ? CStringGetTextDatum(source) : (Datum) 0;
		nulls[11] = source_server ? ' ' : 'n';
		values[12] = sink_server ? CStringGetTextDatum(sink_server) : (Datum) 0;
		nulls[12] = sink_server ? ' ' : 'n';
		values[13] = sink_table ? CStringGetTextDatum(sink_table) : (Datum) 0;
		nulls[13] = sink_table ? ' ' : 'n';
		values[14] = SgWordParam("sink_mode", sink_server ? sink_mode : NULL, &types[14]);
		nulls[14] = sink_server ? ' ' : 'n';
		ret = SPI_execute_with_args("INSERT INTO streamguard.pipeline "
									"(name, stream_id, sql, guarantee, batch_size, error_policy, dedup, "
									" dedup_window, owner, search_path, source_server, remote_stream, "
									" sink_server, sink_table, sink_mode) "
									"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) "
									"ON CONFLICT (name) DO NOTHING RETURNING id",
									15, types, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "could not insert pipeline: %s", SPI_result_code_string(ret));
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("pipeline \"%s\" already exists", name)));
		id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (SgPipelineStatsCatalog())
	{
		/* its counters start at 0 (a 0.2 catalog has them in its row) */
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(id)};

		PipelineExec("INSERT INTO streamguard.pipeline_stats (pipeline_id) VALUES ($1)",
					 1, types, values, SPI_OK_INSERT);
	}
	/*
	 * A slot with this id can only be left by an earlier incarnation of the
	 * extension (DROP + CREATE EXTENSION reuse ids): its backoff and armed
	 * faults are not this pipeline's.
	 */
	PipelineFreeSlot(MyDatabaseId, id);
	if (new_settings)
	{
		/* through the 0.1 signature the catalog is 0.1's, without these columns */
		Oid			types[6] = {INT4OID, INTERVALOID, BOOLOID, INT4OID, INTERVALOID, INTERVALOID};
		Datum		values[6] = {Int32GetDatum(id), PG_GETARG_DATUM(13), PG_GETARG_DATUM(14),
		PG_GETARG_DATUM(15), PG_GETARG_DATUM(16), PG_GETARG_DATUM(17)};

		PipelineExec("UPDATE streamguard.pipeline SET batch_timeout = $2, allow_source_append = $3, "
						 "max_attempts = $4, retry_backoff = $5, max_backoff = $6 WHERE id = $1",
						 6, types, values, SPI_OK_UPDATE);
	}
	if (sink_on_conflict)
	{
		Oid			types[2] = {INT4OID, TEXTARRAYOID};
		Datum		values[2] = {Int32GetDatum(id), PointerGetDatum(sink_on_conflict)};

		PipelineExec("UPDATE streamguard.pipeline SET sink_on_conflict = $2 WHERE id = $1",
					 2, types, values, SPI_OK_UPDATE);
	}
	if (workers > 1)
	{
		Oid			types[2] = {INT4OID, INT4OID};
		Datum		values[2] = {Int32GetDatum(id), Int32GetDatum(workers)};

		PipelineExec("UPDATE streamguard.pipeline SET workers = $2 WHERE id = $1",
					 2, types, values, SPI_OK_UPDATE);
	}
	if (kafka)
	{
		/* offsets in the topic live here; "end" is settled at first run */
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3] = {Int32GetDatum(id), Int32GetDatum(remote_nparts),
		Int64GetDatum(strcmp(start_from, "end") == 0 ? -1 : -2)};

		PipelineExec("UPDATE streamguard.pipeline SET source_kafka = true WHERE id = $1",
					 1, types, values, SPI_OK_UPDATE);
		PipelineExec("INSERT INTO streamguard.kafka_position (pipeline_id, partition, next_offset) "
					 "SELECT $1, g, $3 FROM pg_catalog.generate_series(0, $2 - 1) g",
					 3, types, values, SPI_OK_INSERT);
	}
	else if (source_server)
	{
		/* positions on a remote stream live here; "end" is settled at first run */
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3] = {Int32GetDatum(id), Int32GetDatum(remote_nparts),
		Int64GetDatum(strcmp(start_from, "end") == 0 ? -1 : 0)};

		PipelineExec("INSERT INTO streamguard.remote_position (pipeline_id, partition, position) "
						 "SELECT $1, g, $3 FROM pg_catalog.generate_series(0, $2 - 1) g",
						 3, types, values, SPI_OK_INSERT);
	}
	else
	{
		char	   *cname = PipelineConsumerName(name);

		if (strcmp(start_from, "end") == 0)
		{
			int			p;

			/*
			 * The end is the readable horizon (Kafka's last stable offset),
			 * not next_seq: other transactions' appends still in flight are
			 * delivered when they commit.  Ours commit with the pipeline.
			 */
			HorizonEnsureSeqReady(meta->ref, meta->stream_id);
			for (p = 0; p < meta->nparts; p++)
				ConsumerSeekSeq(meta, cname, p,
								HorizonReadableOwn(meta->ref.slot, p));
		}
		else
			ConsumerSeekSeq(meta, cname, -1, 0);
	}
	SgLeaveCatalog(&save);
	PipelineNotifyChange(id);
	PG_RETURN_VOID();
}

Datum
sg_pause_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgEnterCatalog(&save);
	row = PipelineLock(name, caller, true);
	PipelineSetState(row.id, "paused", true);
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
	PG_RETURN_VOID();
}

Datum
sg_resume_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgEnterCatalog(&save);
	row = PipelineLock(name, caller, true);
	{
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(row.id)};

		PipelineExec("UPDATE streamguard.pipeline SET state = 'running', epoch = epoch + 1, "
					 "generation = generation + 1, "
						 "started_once = false WHERE id = $1",
						 1, types, values, SPI_OK_UPDATE);
	}
	SgLeaveCatalog(&save);
	/* a resumed pipeline starts at once, without the crash backoff */
	PipelineResetBackoff(MyDatabaseId, row.id);
	PipelineNotifyChange(row.id);
	PG_RETURN_VOID();
}

/*
 * Drop one pipeline: fence its worker, settle what it left prepared on its
 * sink, delete its rows.  `caller` must own it (or act as its owner).
 */
static void
sg_drop_one(const char *name, Oid caller, bool missing_ok)
{
	SgUserSave	save;
	SgPipeRow	row;
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];

	SgEnterCatalog(&save);
	row = PipelineLockExt(name, caller, true, missing_ok);
	if (row.id == 0)
	{
		/* dropped meanwhile by someone else */
		SgLeaveCatalog(&save);
		return;
	}
	values[0] = Int32GetDatum(row.id);
	values[1] = CStringGetTextDatum(PipelineConsumerName(name));

	/* no prepared transaction of ours may outlive the pipeline on its sink */
	if (SPI_execute_with_args("SELECT sink_server, owner FROM streamguard.pipeline "
							  "WHERE id = $1 AND sink_mode = 'two_phase'",
							  1, types, values, NULL, false, 0) == SPI_OK_SELECT && SPI_processed == 1)
	{
		SgRemote	r;
		char	   *server = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));

		memset(&r, 0, sizeof(r));
		RemoteConnect(&r, server, owner);
		(void) PipelineResolveInDoubt(&r, row.id, name, -1, row.workers);
		RemoteDisconnect(&r);
	}
	PipelineExec("DELETE FROM streamguard.consumer c USING streamguard.pipeline p "
					 "WHERE p.id = $1 AND c.stream_id = p.stream_id AND c.name = $2",
					 2, types, values, SPI_OK_DELETE);
	PipelineExec("DELETE FROM streamguard.pipeline_dedup WHERE pipeline_id = $1", 1, types, values, SPI_OK_DELETE);
	/* remote positions, prepared records, dead letters, skips, the log cascade */
	PipelineExec("DELETE FROM streamguard.pipeline WHERE id = $1", 1, types, values, SPI_OK_DELETE);
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
}

Datum
sg_drop_pipeline(PG_FUNCTION_ARGS)
{
	StreamguardCheckLoaded();
	sg_drop_one(SgTextArg(fcinfo, 0, "pipeline name"), GetUserId(), false);
	PG_RETURN_VOID();
}

/*
 * drop_stream(force): the pipelines reading the stream go with it, each
 * dropped the way drop_pipeline drops it (fenced, in-doubt work on its sink
 * settled), whoever owns them: the stream's owner decided, as DROP ...
 * CASCADE drops other roles' dependent objects.
 */
void
PipelineDropForStream(int32 stream_id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(stream_id)};
	SgUserSave	save;
	List	   *names = NIL;
	ListCell   *lc;
	uint64		i;
	MemoryContext caller_cxt = CurrentMemoryContext;

	SgEnterCatalog(&save);
	/*
	 * A statement snapshot taken now (not read-only): it sees every pipeline
	 * committed while the caller waited for the stream's row lock, and none
	 * can be created on the stream until the caller's transaction ends.
	 */
	if (SPI_execute_with_args("SELECT name FROM streamguard.pipeline WHERE stream_id = $1 ORDER BY name",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline list failed");
	for (i = 0; i < SPI_processed; i++)
	{
		MemoryContext spi_cxt = MemoryContextSwitchTo(caller_cxt);

		/* the list and the names outlive SPI_finish */
		names = lappend(names, pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1)));
		MemoryContextSwitchTo(spi_cxt);
	}
	SgLeaveCatalog(&save);
	foreach(lc, names)
		sg_drop_one(lfirst(lc), BOOTSTRAP_SUPERUSERID, true);
}

/* does the pipeline read a Kafka topic?  SPI connected, in the catalog */
static bool
sg_is_kafka_source(int32 id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(id)};

	if (SPI_execute_with_args("SELECT source_kafka FROM streamguard.pipeline WHERE id = $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pipeline %d vanished", id);
	return strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "t") == 0;
}

/* is the pipeline a window pipeline?  SPI connected, in the catalog */
static bool
sg_is_window_pipeline(int32 id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(id)};

	if (SPI_execute_with_args("SELECT 1 FROM streamguard.window_def WHERE pipeline_id = $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "window lookup failed");
	return SPI_processed > 0;
}

/*
 * reset_pipeline(name, seq, from_time, partition): deliberate replay.
 * Neither seq nor from_time: back to the beginning of the retained stream.
 */
Datum
sg_reset_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	SgStreamMeta *meta;
	char	   *cname;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (!PG_ARGISNULL(1) && !PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("give either seq or from_time, not both")));
	if (!PG_ARGISNULL(1) && PG_GETARG_INT64(1) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seq must be at least 1, got %lld", (long long) PG_GETARG_INT64(1))));
	SgEnterCatalog(&save);
	row = PipelineLock(name, caller, true);

	/*
	 * A window pipeline's state holds what it has read: replayed events
	 * would be counted a second time in the windows that are still open
	 * (or kept for corrections), and only be late for the closed ones.
	 */
	if (sg_is_window_pipeline(row.id))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("reset_pipeline is not supported for window pipeline \"%s\"", name),
				 errdetail("Replayed events would be counted a second time in the windows that hold them, "
						   "and be late for the windows already closed."),
				 errhint("To compute the windows again, drop the pipeline, empty its target and create it "
						 "again with start_from => 'beginning'.")));
	if (row.stream == NULL)
	{
		/*
		 * A remote source or a Kafka topic: the positions are ours, one row
		 * per partition.  A remote position is the last seq read; a Kafka
		 * one the next offset to read (-2: the beginning).
		 */
		bool		kafka = sg_is_kafka_source(row.id);
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3];
		char		nulls[3] = {' ', ' ', ' '};
		int64		pos;

		if (!PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("reset_pipeline by time is not supported for a %s source",
							kafka ? "Kafka" : "remote"),
					 errhint(kafka ? "Reset to an offset (seq) instead." : "Reset to a seq instead.")));
		if (kafka)
			pos = PG_ARGISNULL(1) ? -2 : PG_GETARG_INT64(1);
		else
		{
			if (!PG_ARGISNULL(1))
				PipelineCheckRemoteReset(row.id, row.owner, PG_ARGISNULL(3) ? -1 : PG_GETARG_INT32(3),
										 PG_GETARG_INT64(1));
			pos = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1) - 1;
		}
		values[0] = Int32GetDatum(row.id);
		values[1] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
		nulls[1] = PG_ARGISNULL(3) ? 'n' : ' ';
		values[2] = Int64GetDatum(pos);
		PipelineSetState(row.id, row.state, true);
		if (SPI_execute_with_args(kafka ?
								  "UPDATE streamguard.kafka_position SET next_offset = $3, updated_at = now() "
								  "WHERE pipeline_id = $1 AND ($2 IS NULL OR partition = $2)" :
								  "UPDATE streamguard.remote_position SET position = $3, updated_at = now() "
								  "WHERE pipeline_id = $1 AND ($2 IS NULL OR partition = $2)",
								  3, types, values, nulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "reset failed");
		if (!PG_ARGISNULL(3) && SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partition %d is out of range for the source of pipeline \"%s\"",
							PG_GETARG_INT32(3), name)));
		SgLeaveCatalog(&save);
		PipelineNotifyChange(row.id);
		PG_RETURN_VOID();
	}
	meta = StreamLookup(row.stream, SG_PRIV_NONE);
	if (!PG_ARGISNULL(3))
		StreamCheckPartition(meta, PG_GETARG_INT32(3));
	cname = PipelineConsumerName(name);
	/* fence the running worker first: its batch cannot commit past this */
	PipelineSetState(row.id, row.state, true);
	if (!PG_ARGISNULL(2))
		ConsumerSeekTime(meta, cname, PG_GETARG_TIMESTAMPTZ(2));
	else
		ConsumerSeekSeq(meta, cname, PG_ARGISNULL(3) ? -1 : PG_GETARG_INT32(3),
						PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1));
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
	PG_RETURN_VOID();
}

/*
 * alter_pipeline(name, sql, batch_size, error_policy): NULL keeps a setting.
 */
Datum
sg_alter_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	Oid			types[9] = {INT4OID, TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT4OID, INTERVALOID,
	INTERVALOID, INT4OID};
	Datum		values[9];
	char		nulls[9] = {' ', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n'};
	char	   *search_path = NULL;
	int			a;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (!PG_ARGISNULL(2))
		PipelineCheckBatchSize(PG_GETARG_INT32(2));
	if (!PG_ARGISNULL(3))
		(void) SgParseWord(&SgErrorPolicyWords, text_to_cstring(PG_GETARG_TEXT_PP(3)));
	/* arguments 4 and on are absent from the 0.1 signature */
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
		PipelineCheckBatchTimeout(PG_GETARG_INTERVAL_P(4));
	if (PG_NARGS() > 8 && !PG_ARGISNULL(8))
		PipelineCheckWorkers(PG_GETARG_INT32(8));
	if (PG_NARGS() > 5)
	{
		/*
		 * The retry settings given, before the row's constraints see them
		 * (an absent one as a valid extreme); with the old ones after the
		 * change.
		 */
		Interval   *shortest = palloc0(sizeof(Interval));
		Interval   *longest = palloc0(sizeof(Interval));

		shortest->time = 10 * 1000;
		longest->time = 3600 * USECS_PER_SEC;
		PipelineCheckRetry(PG_ARGISNULL(5) ? 1 : PG_GETARG_INT32(5),
						   PG_ARGISNULL(6) ? shortest : PG_GETARG_INTERVAL_P(6),
						   PG_ARGISNULL(7) ? longest : PG_GETARG_INTERVAL_P(7));
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!PG_ARGISNULL(1))
	{
		Oid			ktypes[1] = {TEXTOID};
		Datum		kvalues[1] = {CStringGetTextDatum(name)};
		bool		kafka;
		char	   *sink = NULL;

		/* the batch's columns: a Kafka source has two more */
		SgBecomeDataOwner(&save, true);
		if (SPI_execute_with_args("SELECT source_kafka, sink_server FROM streamguard.pipeline WHERE name = $1",
								  1, ktypes, kvalues, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "pipeline lookup failed");
		kafka = SPI_processed == 1 &&
			strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "t") == 0;
		if (SPI_processed == 1)
			sink = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		SgRestoreUser(&save);
		/* validated as the caller, like create_pipeline */
		PipelineValidateSqlFor(text_to_cstring(PG_GETARG_TEXT_PP(1)), kafka);
		/* a Kafka sink's messages are the SELECT's rows */
		if (sink && KafkaIsKafkaServer(sink))
			KafkaSinkCheckShape(text_to_cstring(PG_GETARG_TEXT_PP(1)));
		search_path = GetConfigOptionByName("search_path", NULL, false);
	}
	SgBecomeDataOwner(&save, true);
	row = PipelineLock(name, caller, true);
	values[0] = Int32GetDatum(row.id);
	for (a = 1; a < 9 && a < PG_NARGS(); a++)
		if (!PG_ARGISNULL(a))
		{
			values[a] = PG_GETARG_DATUM(a);
			nulls[a] = ' ';
		}
	values[3] = SgWordParam("error_policy",
							PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3)), &types[3]);
	if (SPI_execute_with_args(PG_NARGS() > 5 ?
							  "UPDATE streamguard.pipeline SET "
							  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
							  "error_policy = coalesce($4, error_policy), "
							  "batch_timeout = coalesce($5, batch_timeout), "
							  "max_attempts = coalesce($6, max_attempts), "
							  "retry_backoff = coalesce($7, retry_backoff), "
							  "max_backoff = coalesce($8, max_backoff), workers = coalesce($9, workers), "
							  "epoch = epoch + 1, generation = generation + 1 "
							  "WHERE id = $1 RETURNING max_attempts, retry_backoff, max_backoff, "
							  "workers, source_server, sink_server" :
							  "UPDATE streamguard.pipeline SET "
							  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
							  "error_policy = coalesce($4, error_policy), epoch = epoch + 1 "
							  "WHERE id = $1",
							  PG_NARGS() > 5 ? 9 : 4, types, values, nulls, false, 0) < 0)
		elog(ERROR, "alter_pipeline failed");
	if (PG_NARGS() > 5)
	{
		bool		isnull;

		/* the combination, old settings included */
		PipelineCheckRetry(DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
					   DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
					   DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)));
		PipelineCheckWorkersRemote(DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull)),
								   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5),
								   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 6));
		if (PG_NARGS() > 8 && !PG_ARGISNULL(8) && PG_GETARG_INT32(8) > row.workers)
		{
			WorkerUnitsCheckCouldRun(row.owner, PG_GETARG_INT32(8));
			sg_check_more_workers(row.owner, PG_GETARG_INT32(8) - row.workers);
		}
	}
	if (search_path)
	{
		Oid			t2[2] = {INT4OID, TEXTOID};
		Datum		v2[2] = {Int32GetDatum(row.id), CStringGetTextDatum(search_path)};

		PipelineExec("UPDATE streamguard.pipeline SET search_path = $2 WHERE id = $1",
						 2, t2, v2, SPI_OK_UPDATE);
	}
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
	PG_RETURN_VOID();
}
