/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		Pipelines: the SQL API (create / pause / resume / drop / reset /
 *		alter / inject_fault), their shared-memory slots, the supervisor
 *		that keeps one worker per running pipeline, and the runtime views.
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
 * Shared memory: one SgPipelineSlot per pipeline (streamguard.max_pipelines
 * of them), found by (database, pipeline id).  The slot array's identity
 * fields are protected by PipelineLock; each slot's runtime fields by its
 * spinlock.  Slots hold what must be cheap to read (worker pid, rates,
 * the checkpoint history ring) or must not survive a crash (fault
 * injection); durable counters live in the pipeline row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
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
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "pipeline.h"
#include "remote.h"
#include "streamguard.h"

PG_FUNCTION_INFO_V1(sg_create_pipeline);
PG_FUNCTION_INFO_V1(sg_pause_pipeline);
PG_FUNCTION_INFO_V1(sg_resume_pipeline);
PG_FUNCTION_INFO_V1(sg_drop_pipeline);
PG_FUNCTION_INFO_V1(sg_reset_pipeline);
PG_FUNCTION_INFO_V1(sg_alter_pipeline);
PG_FUNCTION_INFO_V1(sg_inject_fault);
PG_FUNCTION_INFO_V1(sg_pipeline_runtime);
PG_FUNCTION_INFO_V1(sg_pipeline_batches);
PG_FUNCTION_INFO_V1(sg_remote_runtime);
PG_FUNCTION_INFO_V1(sg_purge_dead_letters);

int			sg_max_pipelines = 64;

typedef struct SgPipelineShared
{
	LWLock	   *lock;
	SgPipelineSlot slots[FLEXIBLE_ARRAY_MEMBER];
} SgPipelineShared;

static SgPipelineShared *sg_pipes = NULL;

/* ------------------------------------------------------- shared memory */

Size
PipelineShmemSize(void)
{
	return add_size(offsetof(SgPipelineShared, slots),
					mul_size(sg_max_pipelines, sizeof(SgPipelineSlot)));
}

void
PipelineShmemInit(void)
{
	bool		found;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sg_pipes = ShmemInitStruct("streamguard pipelines", PipelineShmemSize(), &found);
	if (!found)
	{
		memset(sg_pipes, 0, PipelineShmemSize());
		sg_pipes->lock = &(GetNamedLWLockTranche("streamguard pipelines"))->lock;
		for (i = 0; i < sg_max_pipelines; i++)
		{
			SpinLockInit(&sg_pipes->slots[i].mutex);
			sg_pipes->slots[i].worker_procno = -1;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

SgPipelineSlot *
PipelineSlot(Oid dbid, int32 pipeline_id, bool create)
{
	int			i,
				free_slot = -1;
	SgPipelineSlot *slot = NULL;

	LWLockAcquire(sg_pipes->lock, create ? LW_EXCLUSIVE : LW_SHARED);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid && s->pipeline_id == pipeline_id)
		{
			slot = s;
			break;
		}
		if (s->dbid == InvalidOid && free_slot < 0)
			free_slot = i;
	}
	if (slot == NULL && create)
	{
		if (free_slot < 0)
		{
			LWLockRelease(sg_pipes->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many pipelines"),
					 errdetail("All %d pipeline slots in shared memory are in use.", sg_max_pipelines),
					 errhint("Raise streamguard.max_pipelines and restart the server.")));
		}
		slot = &sg_pipes->slots[free_slot];
		SpinLockAcquire(&slot->mutex);
		slot->dbid = dbid;
		slot->pipeline_id = pipeline_id;
		slot->stream_id = 0;
		slot->worker_pid = 0;
		slot->worker_procno = -1;
		slot->clean_exit = false;
		slot->fence_requested = false;
		slot->failures = 0;
		slot->next_start = 0;
		slot->events_per_sec = 0;
		slot->last_batch_end = 0;
		slot->nhistory = 0;
		memset(slot->remote, 0, sizeof(slot->remote));
		slot->fault_point = SG_FAULT_NONE;
		slot->fault_count = 0;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(sg_pipes->lock);
	return slot;
}

void
PipelineFreeSlot(Oid dbid, int32 pipeline_id)
{
	int			i;

	LWLockAcquire(sg_pipes->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid && s->pipeline_id == pipeline_id)
		{
			PipelineWakeWorker(s);
			s->dbid = InvalidOid;
			s->pipeline_id = 0;
		}
	}
	LWLockRelease(sg_pipes->lock);
}

void
PipelineWakeWorker(SgPipelineSlot *slot)
{
	int			procno;

	SpinLockAcquire(&slot->mutex);
	procno = slot->worker_procno;
	SpinLockRelease(&slot->mutex);
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * An append to this stream committed: wake the pipelines reading it.
 * Called from the commit callback, so it must not fail.
 */
void
PipelineWakeStream(Oid dbid, int32 stream_id)
{
	int			i;

	if (sg_pipes == NULL)
		return;
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid && s->stream_id == stream_id && s->worker_procno >= 0)
			PipelineWakeWorker(s);
	}
}

const char *
GuaranteeName(SgGuarantee g)
{
	switch (g)
	{
		case SG_EXACTLY_ONCE:
			return "exactly_once";
		case SG_AT_LEAST_ONCE:
			return "at_least_once";
		case SG_AT_MOST_ONCE:
			return "at_most_once";
	}
	return "?";
}

/* ------------------------------------------------------------ helpers */

/* prefix of a pipeline's global transaction ids on its sink */
char *
PipelineGidPrefix(int32 pipeline_id)
{
	return psprintf("sg:" UINT64_FORMAT ":%u:%d:", GetSystemIdentifier(), MyDatabaseId, pipeline_id);
}

/*
 * Settle a pipeline's prepared transactions on its sink: commit those whose
 * batch committed here (recorded in remote_prepared), roll back the others,
 * and forget the records.  In a transaction that holds the pipeline row.
 */
void
PipelineResolveInDoubt(SgRemote *r, int32 pipeline_id, const char *name)
{
	const char *params[1];
	PGresult   *res;
	SgUserSave	save;
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	bool	   *known;
	uint64		k;
	int			i;

	params[0] = psprintf("%s%%", PipelineGidPrefix(pipeline_id));
	res = RemoteExec(r, "SELECT gid FROM pg_catalog.pg_prepared_xacts "
					 "WHERE gid LIKE $1 AND database = pg_catalog.current_database()", 1, params);
	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("SELECT gid FROM streamguard.remote_prepared WHERE pipeline_id = $1",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "in-doubt lookup failed");
	known = palloc0(sizeof(bool) * Max(PQntuples(res), 1));
	for (i = 0; i < PQntuples(res); i++)
		for (k = 0; k < SPI_processed; k++)
			if (strcmp(PQgetvalue(res, i, 0), SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1)) == 0)
				known[i] = true;
	for (i = 0; i < PQntuples(res); i++)
	{
		char	   *gid = RemoteLiteral(r, PQgetvalue(res, i, 0));

		ereport(LOG,
				(errmsg("streamguard pipeline \"%s\": %s in-doubt remote transaction %s",
						name, known[i] ? "committing" : "rolling back", gid)));
		RemoteExecOk(r, psprintf("%s PREPARED %s", known[i] ? "COMMIT" : "ROLLBACK", gid));
	}
	PQclear(res);
	if (SPI_execute_with_args("DELETE FROM streamguard.remote_prepared WHERE pipeline_id = $1",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "in-doubt cleanup failed");
	SgRestoreUser(&save);
}

typedef struct SgPipeRow
{
	int32		id;
	Oid			owner;
	char	   *stream;
	char	   *state;
	int64		epoch;
} SgPipeRow;

/*
 * Lock a pipeline's row and check that the caller may change it.
 * SPI connected, running as the data owner.
 */
static SgPipeRow
sg_lock_pipeline(const char *name, Oid caller, bool fence)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	SgPipeRow	row;
	bool		isnull;
	int			ret;

	SgCheckName("pipeline", name);
	values[0] = CStringGetTextDatum(name);

	/*
	 * A running worker takes the row lock at the start of every batch; ask
	 * it to stop taking it, or a steady backlog would keep us waiting
	 * behind batch after batch.  It finishes the batch in flight and exits;
	 * the supervisor starts a fresh one if the pipeline still runs.
	 */
	if (fence &&
		SPI_execute_with_args("SELECT id FROM streamguard.pipeline WHERE name = $1",
							  1, types, values, NULL, true, 0) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		SgPipelineSlot *slot;

		slot = PipelineSlot(MyDatabaseId,
							DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
							false);
		if (slot)
		{
			SpinLockAcquire(&slot->mutex);
			slot->fence_requested = true;
			SpinLockRelease(&slot->mutex);
			PipelineWakeWorker(slot);
		}
	}
	ret = SPI_execute_with_args("SELECT p.id, p.owner, s.name, p.state, p.epoch "
								"FROM streamguard.pipeline p LEFT JOIN streamguard.stream s ON s.id = p.stream_id "
								"WHERE p.name = $1 FOR UPDATE OF p",
								1, types, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "pipeline lookup failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pipeline \"%s\" does not exist", name)));
	row.id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	row.owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	row.stream = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	row.state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
	row.epoch = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull));
	if (!superuser_arg(caller) && !has_privs_of_role(caller, row.owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", name)));
	return row;
}

static void
sg_pipeline_exec(const char *sql, int nargs, Oid *types, Datum *values, int expect)
{
	int			ret = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);

	if (ret != expect)
		elog(ERROR, "pipeline statement failed (%s): %s", SPI_result_code_string(ret), sql);
}

static void
sg_set_state(int32 id, const char *state, bool bump_epoch)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2] = {Int32GetDatum(id), CStringGetTextDatum(state)};

	sg_pipeline_exec(bump_epoch ?
					 "UPDATE streamguard.pipeline SET state = $2, epoch = epoch + 1 WHERE id = $1" :
					 "UPDATE streamguard.pipeline SET state = $2 WHERE id = $1",
					 2, types, values, SPI_OK_UPDATE);
}

char *
PipelineConsumerName(const char *pipeline)
{
	return psprintf("pipeline:%s", pipeline);
}

TupleDesc
SgEventTupleDesc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(6);

	TupleDescInitEntry(desc, 1, "partition", INT4OID, -1, 0);
	TupleDescInitEntry(desc, 2, "seq", INT8OID, -1, 0);
	TupleDescInitEntry(desc, 3, "key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 4, "payload", JSONBOID, -1, 0);
	TupleDescInitEntry(desc, 5, "dedup_key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 6, "appended_at", TIMESTAMPTZOID, -1, 0);
	return BlessTupleDesc(desc);
}

/*
 * Make the batch visible to the SPI connection as the relation "batch".
 */
void
PipelineRegisterBatch(Tuplestorestate *store, TupleDesc desc, int64 ntuples)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	int			ret;

	enr->md.name = "batch";
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = (double) ntuples;
	enr->reldata = store;
	ret = SPI_register_relation(enr);
	if (ret != SPI_OK_REL_REGISTER)
		elog(ERROR, "could not register the batch relation: %s", SPI_result_code_string(ret));
}

/*
 * Parse and analyze the pipeline's SQL against an empty batch, as the
 * current user with the current search_path: syntax and reference errors
 * are reported now, with their position.  SPI connected.
 */
static void
sg_validate_sql(const char *sql)
{
	TupleDesc	desc = SgEventTupleDesc();
	Tuplestorestate *store = tuplestore_begin_heap(false, false, work_mem);
	SPIPlanPtr	plan;
	List	   *sources;
	ListCell   *lc;

	if (sql[strspn(sql, " \t\r\n;")] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pipeline SQL must not be empty")));
	PipelineRegisterBatch(store, desc, 0);
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("invalid pipeline SQL: %s", SPI_result_code_string(SPI_result))));
	sources = SPI_plan_get_plan_sources(plan);
	foreach(lc, sources)
	{
		CachedPlanSource *ps = lfirst(lc);

		if (ps->raw_parse_tree &&
			(IsA(ps->raw_parse_tree->stmt, TransactionStmt) ||
			 IsA(ps->raw_parse_tree->stmt, CallStmt) ||
			 IsA(ps->raw_parse_tree->stmt, VacuumStmt)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline SQL must not contain %s", ps->commandTag == CMDTAG_UNKNOWN ?
							"transaction control" : GetCommandTagName(ps->commandTag)),
					 errdetail("streamguard commits each batch itself.")));
	}
	SPI_freeplan(plan);
	SPI_unregister_relation("batch");
	tuplestore_end(store);
}

/*
 * The output columns of a pipeline's SQL, quoted and comma-separated (the
 * COPY column list of a remote sink), or NULL when the SQL is not a single
 * query returning rows.  SPI connected.
 */
char *
PipelineOutputColumns(const char *sql)
{
	TupleDesc	desc = SgEventTupleDesc();
	Tuplestorestate *store = tuplestore_begin_heap(false, false, work_mem);
	SPIPlanPtr	plan;
	List	   *sources;
	CachedPlanSource *ps;
	char	   *result = NULL;

	PipelineRegisterBatch(store, desc, 0);
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	sources = SPI_plan_get_plan_sources(plan);
	ps = list_length(sources) == 1 ? linitial(sources) : NULL;
	if (ps != NULL && ps->commandTag == CMDTAG_SELECT && ps->resultDesc != NULL)
	{
		StringInfoData cols;
		int			i;

		initStringInfo(&cols);
		for (i = 0; i < ps->resultDesc->natts; i++)
			appendStringInfo(&cols, "%s%s", i ? ", " : "",
							 quote_identifier(NameStr(TupleDescAttr(ps->resultDesc, i)->attname)));
		result = cols.data;
	}
	SPI_freeplan(plan);
	SPI_unregister_relation("batch");
	tuplestore_end(store);
	return result;
}

static char *
sg_validate_select(const char *sql)
{
	char	   *cols = PipelineOutputColumns(sql);

	if (cols == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the SQL of a pipeline with a remote sink must be a single SELECT"),
				 errdetail("Its rows are copied into the remote table, matched by column name.")));
	return cols;
}

/* "schema.table" or "table", each part quoted */
static char *
sg_quote_table(const char *name)
{
	List	   *parts = stringToQualifiedNameList(name);
	StringInfoData buf;
	ListCell   *lc;

	if (list_length(parts) > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid sink table name \"%s\"", name)));
	initStringInfo(&buf);
	foreach(lc, parts)
		appendStringInfo(&buf, "%s%s", buf.len ? "." : "", quote_identifier(strVal(lfirst(lc))));
	return buf.data;
}

/*
 * Check a remote sink now, as the creating role: reachable, table there
 * with the columns the SQL produces, and 2PC available if asked for.
 */
static void sg_check_remote_sink_on(SgRemote *rp, const char *server, const char *table,
									const char *cols, const char *mode);

static void
sg_check_remote_sink(const char *server, const char *table, const char *cols, const char *mode)
{
	SgRemote	r;

	memset(&r, 0, sizeof(r));
	RemoteConnect(&r, server, GetUserId());
	PG_TRY();
	{
		sg_check_remote_sink_on(&r, server, table, cols, mode);
	}
	PG_FINALLY();
	{
		RemoteDisconnect(&r);
	}
	PG_END_TRY();
}

static void
sg_check_remote_sink_on(SgRemote *rp, const char *server, const char *table, const char *cols,
						const char *mode)
{
	PGresult   *res;

	PQclear(RemoteExec(rp, psprintf("SELECT %s FROM %s LIMIT 0", cols, table), 0, NULL));
	if (strcmp(mode, "two_phase") == 0)
	{
		res = RemoteExec(rp, "SELECT pg_catalog.current_setting('max_prepared_transactions')::int", 0, NULL);
		if (atoi(PQgetvalue(res, 0, 0)) <= 0)
		{
			PQclear(res);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("remote server \"%s\" has max_prepared_transactions = 0", server),
					 errdetail("sink_mode two_phase needs prepared transactions on the remote server."),
					 errhint("Set max_prepared_transactions > 0 there and restart it, or use sink_mode => 'offsets'.")));
		}
		PQclear(res);
	}
	else
		RemoteExecOk(rp, "CREATE TABLE IF NOT EXISTS public.streamguard_sink_offsets ("
					 " pipeline text NOT NULL, partition int NOT NULL, position bigint NOT NULL,"
					 " PRIMARY KEY (pipeline, partition))");
}

/* the stream on a remote server: its partition count, or an error */
static int
sg_check_remote_source(const char *server, const char *stream)
{
	SgRemote	r;
	PGresult   *res;
	const char *params[1] = {stream};
	int			nparts;

	memset(&r, 0, sizeof(r));
	RemoteConnect(&r, server, GetUserId());
	PG_TRY();
	{
		res = RemoteExec(&r, "SELECT partitions FROM streamguard.streams WHERE stream = $1", 1, params);
		if (PQntuples(res) != 1)
		{
			PQclear(res);
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" does not exist on server \"%s\"", stream, server)));
		}
		nparts = atoi(PQgetvalue(res, 0, 0));
		PQclear(res);
		/* the remote checks our read privilege at every read; check it now too */
		PQclear(RemoteExec(&r, "SELECT count(*) FROM streamguard.read($1, 0, 0, 1)", 1, params));
	}
	PG_FINALLY();
	{
		RemoteDisconnect(&r);
	}
	PG_END_TRY();
	return nparts;
}

static SgGuarantee
sg_parse_guarantee(const char *g)
{
	if (strcmp(g, "exactly_once") == 0)
		return SG_EXACTLY_ONCE;
	if (strcmp(g, "at_least_once") == 0)
		return SG_AT_LEAST_ONCE;
	if (strcmp(g, "at_most_once") == 0)
		return SG_AT_MOST_ONCE;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid guarantee \"%s\"", g),
			 errhint("Valid guarantees are \"exactly_once\", \"at_least_once\" and \"at_most_once\".")));
	return SG_EXACTLY_ONCE;		/* keep compiler quiet */
}

static void
sg_check_policy(const char *p)
{
	if (strcmp(p, "stop") != 0 && strcmp(p, "skip") != 0 && strcmp(p, "dead_letter") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid error policy \"%s\"", p),
				 errhint("Valid error policies are \"stop\", \"skip\" and \"dead_letter\".")));
}

static void
sg_check_batch_size(int32 n)
{
	if (n < 1 || n > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_size must be between 1 and 100000, got %d", n)));
}

static void
sg_notify_change(int32 pipeline_id)
{
	SgPipelineSlot *slot = PipelineSlot(MyDatabaseId, pipeline_id, false);

	if (slot)
		PipelineWakeWorker(slot);
	MaintenanceWakeLauncher();
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
	SgStreamMeta *meta = NULL;
	SgUserSave	save;
	Oid			owner = GetUserId();
	char	   *search_path;
	char	   *source_server = NULL;
	char	   *sink_server = NULL;
	char	   *sink_table = NULL;
	char	   *sink_mode;
	int			remote_nparts = 0;
	int32		id;
	bool		isnull;
	int			ret;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgCheckName("pipeline", name);
	source = SgTextArg(fcinfo, 1, "source");
	sql = SgTextArg(fcinfo, 2, "sql");
	guarantee = SgTextArg(fcinfo, 3, "guarantee");
	(void) sg_parse_guarantee(guarantee);
	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("batch_size must not be NULL")));
	batch_size = PG_GETARG_INT32(4);
	sg_check_batch_size(batch_size);
	policy = SgTextArg(fcinfo, 5, "error_policy");
	sg_check_policy(policy);
	if (PG_ARGISNULL(6) || PG_ARGISNULL(7))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(6) ? "dedup" : "dedup_window")));
	dedup = PG_GETARG_BOOL(6);
	dedup_window = PG_GETARG_INTERVAL_P(7);
	start_from = SgTextArg(fcinfo, 8, "start_from");
	if (strcmp(start_from, "beginning") != 0 && strcmp(start_from, "end") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid start_from \"%s\"", start_from),
				 errhint("Valid values are \"beginning\" and \"end\".")));

	if (!PG_ARGISNULL(9))
		source_server = text_to_cstring(PG_GETARG_TEXT_PP(9));
	if (!PG_ARGISNULL(10))
		sink_server = text_to_cstring(PG_GETARG_TEXT_PP(10));
	if (!PG_ARGISNULL(11))
		sink_table = text_to_cstring(PG_GETARG_TEXT_PP(11));
	sink_mode = SgTextArg(fcinfo, 12, "sink_mode");
	if (strcmp(sink_mode, "two_phase") != 0 && strcmp(sink_mode, "offsets") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid sink_mode \"%s\"", sink_mode),
				 errhint("Valid sink modes are \"two_phase\" and \"offsets\".")));
	if (source_server && sink_server)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a pipeline cannot have both a remote source and a remote sink")));
	if ((sink_server == NULL) != (sink_table == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink_server and sink_table go together")));
	if (sink_table)
		sink_table = sg_quote_table(sink_table);
	if (source_server)
		SgCheckName("stream", source);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the owner must be able to read the source */
	if (source_server)
		remote_nparts = sg_check_remote_source(source_server, source);
	else
	{
		meta = StreamLookup(source, SG_PRIV_READ);
		StreamLockShare(meta);
	}
	sg_validate_sql(sql);
	if (sink_server)
		sg_check_remote_sink(sink_server, sink_table, sg_validate_select(sql), sink_mode);
	search_path = GetConfigOptionByName("search_path", NULL, false);

	SgBecomeDataOwner(&save, true);
	if (SPI_execute("SELECT count(*) FROM streamguard.pipeline", true, 0) == SPI_OK_SELECT &&
		atoi(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)) >= sg_max_pipelines)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many pipelines"),
				 errdetail("streamguard.max_pipelines is %d.", sg_max_pipelines),
				 errhint("Drop a pipeline, or raise streamguard.max_pipelines and restart the server.")));
	{
		Oid			types[15] = {TEXTOID, INT4OID, TEXTOID, TEXTOID, INT4OID, TEXTOID,
		BOOLOID, INTERVALOID, OIDOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum		values[15];
		char		nulls[15];

		memset(nulls, ' ', sizeof(nulls));
		values[0] = CStringGetTextDatum(name);
		values[1] = Int32GetDatum(meta ? meta->stream_id : 0);
		values[2] = CStringGetTextDatum(sql);
		values[3] = CStringGetTextDatum(guarantee);
		values[4] = Int32GetDatum(batch_size);
		values[5] = CStringGetTextDatum(policy);
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
		values[14] = sink_server ? CStringGetTextDatum(sink_mode) : (Datum) 0;
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
	if (source_server)
	{
		/* positions on a remote stream live here; "end" is settled at first run */
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3] = {Int32GetDatum(id), Int32GetDatum(remote_nparts),
		Int64GetDatum(strcmp(start_from, "end") == 0 ? -1 : 0)};

		sg_pipeline_exec("INSERT INTO streamguard.remote_position (pipeline_id, partition, position) "
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
								HorizonReadableOwn(HorizonStream(meta->ref.slot), p));
		}
		else
			ConsumerSeekSeq(meta, cname, -1, 0);
	}
	SgRestoreUser(&save);
	SPI_finish();
	sg_notify_change(id);
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
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, true);
	sg_set_state(row.id, "paused", true);
	SgRestoreUser(&save);
	SPI_finish();
	sg_notify_change(row.id);
	PG_RETURN_VOID();
}

Datum
sg_resume_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	SgPipelineSlot *slot;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, true);
	{
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(row.id)};

		sg_pipeline_exec("UPDATE streamguard.pipeline SET state = 'running', epoch = epoch + 1, "
						 "started_once = false WHERE id = $1",
						 1, types, values, SPI_OK_UPDATE);
	}
	SgRestoreUser(&save);
	SPI_finish();
	/* a resumed pipeline starts at once, without the crash backoff */
	slot = PipelineSlot(MyDatabaseId, row.id, false);
	if (slot)
	{
		SpinLockAcquire(&slot->mutex);
		slot->failures = 0;
		slot->next_start = 0;
		SpinLockRelease(&slot->mutex);
	}
	sg_notify_change(row.id);
	PG_RETURN_VOID();
}

Datum
sg_drop_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, true);
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
		PipelineResolveInDoubt(&r, row.id, name);
		RemoteDisconnect(&r);
	}
	sg_pipeline_exec("DELETE FROM streamguard.consumer c USING streamguard.pipeline p "
					 "WHERE p.id = $1 AND c.stream_id = p.stream_id AND c.name = $2",
					 2, types, values, SPI_OK_DELETE);
	sg_pipeline_exec("DELETE FROM streamguard.pipeline_dedup WHERE pipeline_id = $1", 1, types, values, SPI_OK_DELETE);
	sg_pipeline_exec("DELETE FROM streamguard.remote_position WHERE pipeline_id = $1", 1, types, values, SPI_OK_DELETE);
	sg_pipeline_exec("DELETE FROM streamguard.remote_prepared WHERE pipeline_id = $1", 1, types, values, SPI_OK_DELETE);
	sg_pipeline_exec("DELETE FROM streamguard.dead_letter WHERE pipeline_id = $1", 1, types, values, SPI_OK_DELETE);
	sg_pipeline_exec("DELETE FROM streamguard.pipeline WHERE id = $1", 1, types, values, SPI_OK_DELETE);
	SgRestoreUser(&save);
	SPI_finish();
	sg_notify_change(row.id);
	PG_RETURN_VOID();
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
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, true);
	if (row.stream == NULL)
	{
		/* a remote source: the positions are ours, in remote_position */
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3];
		char		nulls[3] = {' ', ' ', ' '};

		if (!PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("reset_pipeline by time is not supported for a remote source"),
					 errhint("Reset to a seq instead.")));
		values[0] = Int32GetDatum(row.id);
		values[1] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
		nulls[1] = PG_ARGISNULL(3) ? 'n' : ' ';
		values[2] = Int64GetDatum(PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1) - 1);
		sg_set_state(row.id, row.state, true);
		if (SPI_execute_with_args("UPDATE streamguard.remote_position SET position = $3, updated_at = now() "
								  "WHERE pipeline_id = $1 AND ($2 IS NULL OR partition = $2)",
								  3, types, values, nulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "reset failed");
		if (!PG_ARGISNULL(3) && SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partition %d is out of range for the source of pipeline \"%s\"",
							PG_GETARG_INT32(3), name)));
		SgRestoreUser(&save);
		SPI_finish();
		sg_notify_change(row.id);
		PG_RETURN_VOID();
	}
	meta = StreamLookup(row.stream, SG_PRIV_NONE);
	if (!PG_ARGISNULL(3))
		StreamCheckPartition(meta, PG_GETARG_INT32(3));
	cname = PipelineConsumerName(name);
	/* fence the running worker first: its batch cannot commit past this */
	sg_set_state(row.id, row.state, true);
	if (!PG_ARGISNULL(2))
		ConsumerSeekTime(meta, cname, PG_GETARG_TIMESTAMPTZ(2));
	else
		ConsumerSeekSeq(meta, cname, PG_ARGISNULL(3) ? -1 : PG_GETARG_INT32(3),
						PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1));
	SgRestoreUser(&save);
	SPI_finish();
	sg_notify_change(row.id);
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
	Oid			types[4] = {INT4OID, TEXTOID, INT4OID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = {' ', 'n', 'n', 'n'};
	char	   *search_path = NULL;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (!PG_ARGISNULL(2))
		sg_check_batch_size(PG_GETARG_INT32(2));
	if (!PG_ARGISNULL(3))
		sg_check_policy(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!PG_ARGISNULL(1))
	{
		/* validated as the caller, like create_pipeline */
		sg_validate_sql(text_to_cstring(PG_GETARG_TEXT_PP(1)));
		search_path = GetConfigOptionByName("search_path", NULL, false);
	}
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, true);
	values[0] = Int32GetDatum(row.id);
	if (!PG_ARGISNULL(1))
	{
		values[1] = PG_GETARG_DATUM(1);
		nulls[1] = ' ';
	}
	if (!PG_ARGISNULL(2))
	{
		values[2] = PG_GETARG_DATUM(2);
		nulls[2] = ' ';
	}
	if (!PG_ARGISNULL(3))
	{
		values[3] = PG_GETARG_DATUM(3);
		nulls[3] = ' ';
	}
	if (SPI_execute_with_args("UPDATE streamguard.pipeline SET "
							  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
							  "error_policy = coalesce($4, error_policy), epoch = epoch + 1 "
							  "WHERE id = $1",
							  4, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "alter_pipeline failed");
	if (search_path)
	{
		Oid			t2[2] = {INT4OID, TEXTOID};
		Datum		v2[2] = {Int32GetDatum(row.id), CStringGetTextDatum(search_path)};

		sg_pipeline_exec("UPDATE streamguard.pipeline SET search_path = $2 WHERE id = $1",
						 2, t2, v2, SPI_OK_UPDATE);
	}
	SgRestoreUser(&save);
	SPI_finish();
	sg_notify_change(row.id);
	PG_RETURN_VOID();
}

/*
 * purge_dead_letters(pipeline, older_than) -> rows removed.  Owner only.
 */
Datum
sg_purge_dead_letters(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	Oid			types[2] = {INT4OID, INTERVALOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int64		removed;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, false);
	values[0] = Int32GetDatum(row.id);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
	if (SPI_execute_with_args("DELETE FROM streamguard.dead_letter WHERE pipeline_id = $1 "
							  "AND ($2 IS NULL OR failed_at < now() - $2)",
							  2, types, values, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "purge_dead_letters failed");
	removed = (int64) SPI_processed;
	SgRestoreUser(&save);
	SPI_finish();
	PG_RETURN_INT64(removed);
}

/* names of SgFaultPoint and SgFaultAction values, in enum order */
static const char *const sg_fault_points[] = {
	"none", "mid_batch", "before_commit", "between_commits", "after_commit",
	"after_prepare", "after_local_commit", "after_remote_commit", "mid_copy"
};
static const char *const sg_fault_actions[] = {"kill", "error", "exit"};

/*
 * inject_fault(pipeline, point, action, times): TEST ONLY.  Arms a
 * deterministic fault in the pipeline's worker; superuser only.
 */
Datum
sg_inject_fault(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *point;
	char	   *action;
	int32		times;
	SgFaultPoint fp;
	SgFaultAction fa;
	int			i;
	SgUserSave	save;
	SgPipeRow	row;
	SgPipelineSlot *slot;

	StreamguardCheckLoaded();
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may inject faults")));
	name = SgTextArg(fcinfo, 0, "pipeline name");
	point = SgTextArg(fcinfo, 1, "point");
	action = SgTextArg(fcinfo, 2, "action");
	times = PG_ARGISNULL(3) ? 1 : PG_GETARG_INT32(3);
	for (i = 0; i < lengthof(sg_fault_points); i++)
		if (strcmp(point, sg_fault_points[i]) == 0)
			break;
	if (i == lengthof(sg_fault_points))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault point \"%s\"", point),
				 errhint("Valid points are \"mid_batch\", \"before_commit\", \"between_commits\", \"after_commit\", \"after_prepare\", \"after_local_commit\", \"after_remote_commit\", \"mid_copy\" and \"none\".")));
	fp = (SgFaultPoint) i;
	for (i = 0; i < lengthof(sg_fault_actions); i++)
		if (strcmp(action, sg_fault_actions[i]) == 0)
			break;
	if (i == lengthof(sg_fault_actions))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault action \"%s\"", action),
				 errhint("Valid actions are \"kill\", \"error\" and \"exit\".")));
	fa = (SgFaultAction) i;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, save.userid, false);
	SgRestoreUser(&save);
	SPI_finish();
	slot = PipelineSlot(MyDatabaseId, row.id, true);
	SpinLockAcquire(&slot->mutex);
	slot->fault_point = fp;
	slot->fault_action = fa;
	slot->fault_count = times;
	SpinLockRelease(&slot->mutex);
	PG_RETURN_VOID();
}

/* ------------------------------------------------------------- views */

/*
 * _pipeline_runtime() -> (pipeline_id, worker_pid, events_per_sec,
 *		last_batch_ms, last_fetch_ms, last_process_ms, last_commit_ms)
 */
Datum
sg_pipeline_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];
		Datum		values[7];
		bool		nulls[7] = {false};
		SgBatchRecord last;
		int64		n;
		pid_t		pid;
		double		eps;

		if (s->dbid != MyDatabaseId)
			continue;
		SpinLockAcquire(&s->mutex);
		n = s->nhistory;
		if (n > 0)
			last = s->history[(n - 1) % SG_BATCH_HISTORY];
		pid = s->worker_pid;
		eps = s->events_per_sec;
		SpinLockRelease(&s->mutex);

		values[0] = Int32GetDatum(s->pipeline_id);
		values[1] = Int32GetDatum(pid);
		nulls[1] = (pid == 0);
		values[2] = Float8GetDatum(eps);
		if (n > 0)
		{
			values[3] = Float8GetDatum((last.fetch_us + last.process_us + last.commit_us) / 1000.0);
			values[4] = Float8GetDatum(last.fetch_us / 1000.0);
			values[5] = Float8GetDatum(last.process_us / 1000.0);
			values[6] = Float8GetDatum(last.commit_us / 1000.0);
		}
		else
			nulls[3] = nulls[4] = nulls[5] = nulls[6] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * _pipeline_batches() -> the checkpoint log held in shared memory
 */
Datum
sg_pipeline_batches(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];
		SgBatchRecord *copy;
		int64		n,
					k,
					from;
		int32		id;

		if (s->dbid != MyDatabaseId)
			continue;
		copy = palloc(sizeof(SgBatchRecord) * SG_BATCH_HISTORY);
		SpinLockAcquire(&s->mutex);
		id = s->pipeline_id;
		n = s->nhistory;
		memcpy(copy, s->history, sizeof(SgBatchRecord) * SG_BATCH_HISTORY);
		SpinLockRelease(&s->mutex);
		from = Max(0, n - SG_BATCH_HISTORY);
		for (k = from; k < n; k++)
		{
			SgBatchRecord *r = &copy[k % SG_BATCH_HISTORY];
			Datum		values[12];
			bool		nulls[12] = {false};

			values[0] = Int32GetDatum(id);
			values[1] = Int64GetDatum(r->batch_id);
			values[2] = Int64GetDatum(r->epoch);
			values[3] = TimestampTzGetDatum(r->committed_at);
			values[4] = Int32GetDatum(r->events_in);
			values[5] = Int64GetDatum(r->rows_out);
			values[6] = Int32GetDatum(r->partitions);
			values[7] = Int64GetDatum(r->first_seq);
			values[8] = Int64GetDatum(r->last_seq);
			values[9] = Float8GetDatum(r->fetch_us / 1000.0);
			values[10] = Float8GetDatum(r->process_us / 1000.0);
			values[11] = Float8GetDatum(r->commit_us / 1000.0);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
		pfree(copy);
	}
	return (Datum) 0;
}

/* -------------------------------------------------------- supervisor */

typedef struct SgSupervised
{
	int32		pipeline_id;
	BackgroundWorkerHandle *handle;
	bool		seen;
} SgSupervised;

static SgSupervised *sg_supervised = NULL;
static int	sg_nsupervised = 0;

static void
sg_start_worker(int32 pipeline_id, SgSupervised *sup)
{
	char		name[BGW_MAXLEN];

	snprintf(name, sizeof(name), "streamguard pipeline %d", pipeline_id);
	sup->handle = SgStartDynamicWorker("PipelineWorkerMain", "streamguard pipeline", name,
									   Int32GetDatum(pipeline_id), MyDatabaseId);
}

/*
 * Keep one worker per running pipeline of this database; restart crashed
 * workers with exponential backoff.  Runs in the maintenance worker, in a
 * transaction with SPI connected.
 */
void
PipelineSupervise(void)
{
	uint64		i;
	int			j;
	TimestampTz now = GetCurrentTimestamp();

	if (SPI_execute("SELECT id, state, stream_id FROM streamguard.pipeline", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline list failed");
	if (sg_supervised == NULL)
		sg_supervised = MemoryContextAllocZero(TopMemoryContext, sizeof(SgSupervised) * sg_max_pipelines);
	for (j = 0; j < sg_nsupervised; j++)
		sg_supervised[j].seen = false;

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		char	   *state = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		int32		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull));
		SgSupervised *sup = NULL;
		SgPipelineSlot *slot;
		pid_t		pid;
		bool		alive;

		for (j = 0; j < sg_nsupervised; j++)
			if (sg_supervised[j].pipeline_id == id)
				sup = &sg_supervised[j];
		if (sup == NULL)
		{
			if (sg_nsupervised >= sg_max_pipelines)
				continue;
			sup = &sg_supervised[sg_nsupervised++];
			sup->pipeline_id = id;
			sup->handle = NULL;
		}
		sup->seen = true;
		slot = PipelineSlot(MyDatabaseId, id, true);
		slot->stream_id = stream_id;

		alive = sup->handle != NULL &&
			GetBackgroundWorkerPid(sup->handle, &pid) != BGWH_STOPPED;
		if (alive)
		{
			if (strcmp(state, "running") != 0)
				PipelineWakeWorker(slot);	/* it will see the fence and exit */
			continue;
		}
		if (sup->handle != NULL)
		{
			/* the worker is gone: was that on purpose? */
			SpinLockAcquire(&slot->mutex);
			if (!slot->clean_exit)
			{
				slot->failures++;
				slot->next_start = now + Min((int64) 250000 << Min(slot->failures, 7), 30 * USECS_PER_SEC);
			}
			slot->worker_pid = 0;
			slot->worker_procno = -1;
			SpinLockRelease(&slot->mutex);
			pfree(sup->handle);
			sup->handle = NULL;
		}
		if (strcmp(state, "running") != 0)
			continue;
		if (slot->next_start > now)
			continue;			/* backing off after a crash */
		SpinLockAcquire(&slot->mutex);
		slot->clean_exit = false;
		SpinLockRelease(&slot->mutex);
		sg_start_worker(id, sup);
	}

	/* pipelines that were dropped */
	for (j = 0; j < sg_nsupervised; j++)
	{
		if (sg_supervised[j].seen)
			continue;
		if (sg_supervised[j].handle)
		{
			pid_t		pid;

			if (GetBackgroundWorkerPid(sg_supervised[j].handle, &pid) != BGWH_STOPPED)
			{
				TerminateBackgroundWorker(sg_supervised[j].handle);
				continue;
			}
			pfree(sg_supervised[j].handle);
		}
		PipelineFreeSlot(MyDatabaseId, sg_supervised[j].pipeline_id);
		sg_supervised[j] = sg_supervised[--sg_nsupervised];
		j--;
	}
}

/*
 * _remote_runtime() -> (pipeline_id, side, server, connected, rtt_ms, last_error)
 */
Datum
sg_remote_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i,
				side;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];
		SgRemoteStatus copy[2];
		int32		id;

		if (s->dbid != MyDatabaseId)
			continue;
		SpinLockAcquire(&s->mutex);
		id = s->pipeline_id;
		memcpy(copy, s->remote, sizeof(copy));
		SpinLockRelease(&s->mutex);
		for (side = 0; side < 2; side++)
		{
			Datum		values[6];
			bool		nulls[6] = {false};

			if (copy[side].server[0] == '\0')
				continue;
			values[0] = Int32GetDatum(id);
			values[1] = CStringGetTextDatum(side == 0 ? "source" : "sink");
			values[2] = CStringGetTextDatum(copy[side].server);
			values[3] = BoolGetDatum(copy[side].connected);
			values[4] = Float8GetDatum(copy[side].rtt_us / 1000.0);
			nulls[4] = copy[side].rtt_us == 0;
			values[5] = CStringGetTextDatum(copy[side].last_error);
			nulls[5] = copy[side].last_error[0] == '\0';
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
