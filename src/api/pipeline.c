/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		Pipelines' lifecycle SQL API: create / pause / resume / drop /
 *		reset / alter, and the lookup and locking of a pipeline row that
 *		every control call uses.  Elsewhere: the reading of create's and
 *		alter's arguments (pipeline_args.c), the validation of a pipeline's
 *		SQL and settings (pipeline_validate.c), the operator's tools on
 *		dead letters and faults (pipeline_ops.c), the in-doubt resolution of
 *		two-phase sinks (twophase.c), shared memory, the supervisor and the
 *		runtime views (pipeline_slots*.c), the worker (worker.h), the
 *		statements on the pipeline's row that other modules share
 *		(pipeline_catalog.c).
 *
 * One C symbol per SQL signature, as pg_stat_statements does it: the 0.3
 * scripts bind create_pipeline and alter_pipeline to
 * sg_create_pipeline_0_3 and sg_alter_pipeline_0_3; sg_create_pipeline and
 * sg_alter_pipeline are the symbols of the 0.1 and 0.2 scripts, kept for a
 * database that has not run ALTER EXTENSION UPDATE yet, and serve both of
 * those signatures (SgCalledAs01 tells which).  Each is a thin entry: it
 * reads its arguments (pipeline_args.c), each checked on its own and
 * every word parsed into its C enum, into an SgPipelineSpec or
 * SgPipelineChange (pipeline_catalog.h), and calls the one implementation
 * (PipelineCreate, which create_window_pipeline calls too; sg_alter).  A call through a
 * 0.1 signature meets a 0.1 catalog, without 0.2's settings: the
 * implementation is told so (catalog_0_1) rather than counting arguments.
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
#include "api/pipeline_int.h"
#include "api/pipeline_validate.h"
#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/util.h"
#include "io/kafka.h"
#include "io/remote.h"
#include "pipeline/pipeline.h"
#include "pipeline/twophase.h"
#include "shmem/horizon.h"
#include "shmem/launcher_mailbox.h"
#include "shmem/pipeline_slots.h"
#include "shmem/worker_units.h"
#include "stream/seek.h"

PG_FUNCTION_INFO_V1(sg_create_pipeline);
PG_FUNCTION_INFO_V1(sg_create_pipeline_0_3);
PG_FUNCTION_INFO_V1(sg_pause_pipeline);
PG_FUNCTION_INFO_V1(sg_resume_pipeline);
PG_FUNCTION_INFO_V1(sg_drop_pipeline);
PG_FUNCTION_INFO_V1(sg_reset_pipeline);
PG_FUNCTION_INFO_V1(sg_alter_pipeline);
PG_FUNCTION_INFO_V1(sg_alter_pipeline_0_3);

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
	row->id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										  SgColumn(SPI_tuptable->tupdesc, "id"), &isnull));
	row->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												SgColumn(SPI_tuptable->tupdesc, "owner"), &isnull));
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
	HeapTuple	t;
	TupleDesc	d;
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
	t = SPI_tuptable->vals[0];
	d = SPI_tuptable->tupdesc;
	row.stream = SPI_getvalue(t, d, SgColumn(d, "name"));	/* the stream's */
	row.state = SPI_getvalue(t, d, SgColumn(d, "state"));
	row.epoch = DatumGetInt64(SPI_getbinval(t, d, SgColumn(d, "epoch"), &isnull));
	row.workers = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "workers"), &isnull));
	return row;
}

SgPipeRow
PipelineLock(const char *name, Oid caller, bool fence)
{
	return PipelineLockExt(name, caller, fence, false);
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
	if (SPI_execute_with_args("SELECT coalesce(pg_catalog.sum(workers) FILTER (WHERE owner OPERATOR(pg_catalog.=) $1), 0)::int8 AS mine, "
							  "coalesce(pg_catalog.sum(workers), 0)::int8 AS all_workers FROM streamguard.pipeline",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline quota lookup failed");
	mine = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									   SgColumn(SPI_tuptable->tupdesc, "mine"), &isnull));
	all = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  SgColumn(SPI_tuptable->tupdesc, "all_workers"), &isnull));
	SgCheckRoleQuota("pipeline workers", owner, mine - adding, adding, sg_role_max_pipelines,
					 "streamguard.role_max_pipelines");
	SgLockDatabaseForCreate();
	SgCheckDatabaseCap("pipeline workers", all - adding, adding,
					   SgDatabaseCap(sg_database_max_pipelines, sg_max_pipelines),
					   "streamguard.database_max_pipelines");
}

void
PipelineNotifyChange(int32 pipeline_id)
{
	PipelineWakePipeline(MyDatabaseId, pipeline_id);
	LauncherWake();
}

/* ------------------------------------------------------ create_pipeline */

/*
 * The owner's quota and the database's share of the server's pipeline
 * slots, with room for `workers` more; each under its lock, which this
 * transaction keeps until it ends (creates of one role, and of one
 * database, are serialized).  Each worker of a pipeline takes a
 * shared-memory slot and a background worker, so they count workers; a
 * 0.1 catalog (reached through the 0.1 signature) has no workers column,
 * and counts pipelines.  As the data owner.
 */
static void
sg_check_pipeline_quota(Oid owner, int32 workers, bool catalog_0_1)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(owner)};
	bool		isnull;

	if (SPI_execute_with_args(!catalog_0_1 ?
							  "SELECT coalesce(pg_catalog.sum(workers), 0)::int8 AS n FROM streamguard.pipeline "
							  "WHERE owner OPERATOR(pg_catalog.=) $1" :
							  "SELECT pg_catalog.count(*) AS n FROM streamguard.pipeline "
							  "WHERE owner OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline quota lookup failed");
	SgCheckRoleQuota("pipeline workers", owner,
					 DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												 SgColumn(SPI_tuptable->tupdesc, "n"), &isnull)),
					 workers, sg_role_max_pipelines, "streamguard.role_max_pipelines");
	/* the database's share of the server's pipeline slots, every role's pipelines */
	SgLockDatabaseForCreate();
	if (SPI_execute(!catalog_0_1 ?
					"SELECT coalesce(pg_catalog.sum(workers), 0)::int8 AS n FROM streamguard.pipeline" :
					"SELECT pg_catalog.count(*) AS n FROM streamguard.pipeline", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline count failed");
	SgCheckDatabaseCap("pipeline workers",
					   DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												   SgColumn(SPI_tuptable->tupdesc, "n"), &isnull)),
					   workers, SgDatabaseCap(sg_database_max_pipelines, sg_max_pipelines),
					   "streamguard.database_max_pipelines");
}

/*
 * Where the new pipeline starts reading.  A remote stream's positions (the
 * last seq read) and a topic's (the next offset) are rows of ours, "end"
 * settled at the first run; a local stream's are the pipeline's consumer
 * rows.
 */
static void
sg_set_start(const SgPipelineSpec *spec, int32 id, bool kafka_source, int remote_nparts,
			 SgStreamMeta *meta)
{
	bool		at_end = spec->start_from == SG_START_END;

	if (kafka_source)
		KafkaPositionsAdd(id, remote_nparts, at_end ? -1 : -2);
	else if (spec->source_server)
	{
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3] = {Int32GetDatum(id), Int32GetDatum(remote_nparts),
		Int64GetDatum(at_end ? -1 : 0)};

		SgExec("INSERT INTO streamguard.remote_position (pipeline_id, partition, position) "
			   "SELECT $1, g, $3 FROM pg_catalog.generate_series(0, $2 - 1) g",
			   3, types, values, NULL, SPI_OK_INSERT);
	}
	else
	{
		char	   *cname = PipelineConsumerName(spec->name);

		if (at_end)
		{
			int			p;

			/*
			 * The end is the readable horizon (Kafka's last stable offset),
			 * not next_seq: other transactions' appends still in flight are
			 * delivered when they commit.  Ours commit with the pipeline.
			 */
			StreamEnsureSeqReady(meta->ref, meta->stream_id);
			for (p = 0; p < meta->nparts; p++)
				ConsumerSeekSeq(meta, cname, p,
								HorizonReadableOwn(meta->ref.slot, p));
		}
		else
			ConsumerSeekSeq(meta, cname, -1, 0);
	}
}

/*
 * Create a pipeline from what create_pipeline (or create_window_pipeline)
 * was given, checked on its own (PipelineCreateArgs): the checks of the whole,
 * the row, where it starts.  The caller's user is the owner.
 */
void
PipelineCreate(SgPipelineSpec *spec)
{
	SgStreamMeta *meta;
	SgUserSave	save;
	Oid			owner = GetUserId();
	char	   *search_path;
	int			remote_nparts;
	bool		kafka_source;
	bool		kafka_sink;
	int32		id;

	PipelineCheckEnds(spec, &kafka_source, &kafka_sink);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PipelineCheckAccess(spec, kafka_source, kafka_sink, &meta, &remote_nparts);
	search_path = GetConfigOptionByName("search_path", NULL, false);

	WorkerUnitsCheckCouldRun(owner, spec->workers);
	SgLockRoleForCreate(owner);
	SgBecomeDataOwner(&save, true);
	sg_check_pipeline_quota(owner, spec->workers, spec->catalog_0_1);
	if (spec->batch_size < 0)
		spec->batch_size = SG_BATCH_SIZE;
	id = PipelineInsert(spec, meta ? meta->stream_id : 0, owner, search_path, kafka_source);

	/*
	 * A slot with this id can only be left by an earlier incarnation of the
	 * extension (DROP + CREATE EXTENSION reuse ids): its backoff and armed
	 * faults are not this pipeline's.
	 */
	PipelineFreeSlot(MyDatabaseId, id);
	sg_set_start(spec, id, kafka_source, remote_nparts, meta);
	SgLeaveCatalog(&save);
	PipelineNotifyChange(id);
}

/* ------------------------------------------------------- SQL functions */

/*
 * create_pipeline(name, source, sql, guarantee, batch_size, error_policy,
 *				   dedup, dedup_window, start_from, source_server,
 *				   sink_server, sink_table, sink_mode, batch_timeout,
 *				   allow_source_append, max_attempts, retry_backoff,
 *				   max_backoff, workers, sink_on_conflict)
 *
 * One C symbol per SQL signature, each a thin entry over PipelineCreate:
 * sg_create_pipeline_0_3 is what the 0.3 scripts bind.  sg_create_pipeline
 * is the symbol of the older scripts, kept for a database that still has
 * their objects (until ALTER EXTENSION UPDATE): 0.1's thirteen arguments,
 * and 0.2's twenty (the same as 0.3's).
 */
Datum
sg_create_pipeline_0_3(PG_FUNCTION_ARGS)
{
	SgPipelineSpec spec;

	SgCheckWritable("create_pipeline", "it creates the pipeline");
	StreamguardCheckLoaded();
	PipelineCreateArgs(fcinfo, false, &spec);
	PipelineCreate(&spec);
	PG_RETURN_VOID();
}

Datum
sg_create_pipeline(PG_FUNCTION_ARGS)
{
	SgPipelineSpec spec;
	bool		signature_0_1;

	SgCheckWritable("create_pipeline", "it creates the pipeline");
	StreamguardCheckLoaded();
	signature_0_1 = SgCalledAs01(fcinfo, "create_pipeline", 13, 20);
	PipelineCreateArgs(fcinfo, signature_0_1, &spec);
	PipelineCreate(&spec);
	PG_RETURN_VOID();
}

Datum
sg_pause_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;

	SgCheckWritable("pause_pipeline", "it changes the pipeline's state");
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

	SgCheckWritable("resume_pipeline", "it changes the pipeline's state");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgEnterCatalog(&save);
	row = PipelineLock(name, caller, true);
	PipelineResumeRow(row.id);
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
		HeapTuple	t = SPI_tuptable->vals[0];
		TupleDesc	d = SPI_tuptable->tupdesc;
		char	   *server = SPI_getvalue(t, d, SgColumn(d, "sink_server"));
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(t, d, SgColumn(d, "owner"), &isnull));

		memset(&r, 0, sizeof(r));
		RemoteConnect(&r, server, owner);
		(void) PipelineResolveInDoubt(&r, row.id, name, -1, row.workers);
		RemoteDisconnect(&r);
	}
	SgExec("DELETE FROM streamguard.consumer c USING streamguard.pipeline p "
		   "WHERE p.id = $1 AND c.stream_id = p.stream_id AND c.name = $2",
		   2, types, values, NULL, SPI_OK_DELETE);
	SgExec("DELETE FROM streamguard.pipeline_dedup WHERE pipeline_id = $1", 1, types, values, NULL, SPI_OK_DELETE);
	/* no foreign key there either (objects.sql) */
	SgExec("DELETE FROM streamguard.window_state WHERE pipeline_id = $1", 1, types, values, NULL, SPI_OK_DELETE);
	/* remote positions, prepared records, dead letters, skips, the log cascade */
	SgExec("DELETE FROM streamguard.pipeline WHERE id = $1", 1, types, values, NULL, SPI_OK_DELETE);
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
}

Datum
sg_drop_pipeline(PG_FUNCTION_ARGS)
{
	SgCheckWritable("drop_pipeline", "it drops the pipeline");
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
	int			col;
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
	col = SgColumn(SPI_tuptable->tupdesc, "name");
	for (i = 0; i < SPI_processed; i++)
	{
		MemoryContext spi_cxt = MemoryContextSwitchTo(caller_cxt);

		/* the list and the names outlive SPI_finish */
		names = lappend(names, pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, col)));
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
	return strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							   SgColumn(SPI_tuptable->tupdesc, "source_kafka")), "t") == 0;
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

	SgCheckWritable("reset_pipeline", "it moves the pipeline's positions");
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

/* ------------------------------------------------------- alter_pipeline */

/*
 * Change pipeline `name` as alter_pipeline was asked (checked on its own
 * by PipelineAlterArgs): the new SQL checked as the caller, the row changed
 * under its lock, the settings checked together, old ones included, and
 * more workers against the quotas.
 */
static void
sg_alter(const char *name, const SgPipelineChange *change)
{
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	SgPipelineSettings after;
	char	   *search_path = NULL;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (change->sql)
	{
		PipelineCheckNewSql(name, change->sql);
		search_path = GetConfigOptionByName("search_path", NULL, false);
	}
	SgBecomeDataOwner(&save, true);
	row = PipelineLock(name, caller, true);
	PipelineAlterRow(row.id, change, &after);
	if (!change->catalog_0_1)
	{
		PipelineCheckRetry(after.max_attempts, after.retry_backoff, after.max_backoff);
		PipelineCheckWorkersRemote(after.workers, after.source_server, after.sink_server);
		if (change->set_workers && change->workers > row.workers)
		{
			WorkerUnitsCheckCouldRun(row.owner, change->workers);
			sg_check_more_workers(row.owner, change->workers - row.workers);
		}
	}
	if (search_path)
		PipelineSetSearchPath(row.id, search_path);
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
}

/*
 * alter_pipeline(name, sql, batch_size, error_policy, batch_timeout,
 *				  max_attempts, retry_backoff, max_backoff, workers)
 *
 * As create_pipeline: sg_alter_pipeline_0_3 for the 0.3 scripts,
 * sg_alter_pipeline for the older ones (0.1's four arguments, 0.2's nine).
 */
Datum
sg_alter_pipeline_0_3(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgPipelineChange change;

	SgCheckWritable("alter_pipeline", "it changes the pipeline");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	PipelineAlterArgs(fcinfo, false, &change);
	sg_alter(name, &change);
	PG_RETURN_VOID();
}

Datum
sg_alter_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgPipelineChange change;

	SgCheckWritable("alter_pipeline", "it changes the pipeline");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	PipelineAlterArgs(fcinfo, SgCalledAs01(fcinfo, "alter_pipeline", 4, 9), &change);
	sg_alter(name, &change);
	PG_RETURN_VOID();
}
