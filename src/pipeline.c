/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		Pipelines: the SQL API (create / pause / resume / drop / reset /
 *		alter / skip_event / redrive_dead_letters / purge_dead_letters /
 *		inject_fault), the validation of a pipeline's SQL, and the in-doubt
 *		resolution of two-phase remote sinks.  Shared memory, the supervisor
 *		and the runtime views are in pipeline_slots.c.
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
PG_FUNCTION_INFO_V1(sg_purge_dead_letters);
PG_FUNCTION_INFO_V1(sg_skip_event);
PG_FUNCTION_INFO_V1(sg_redrive_dead_letters);


/* ------------------------------------------------------------ helpers */

/*
 * This installation's identity: a random value drawn at CREATE EXTENSION.
 * A copy of the data directory taken before that (a clone, a restored base
 * backup) shares the system identifier and the database OIDs but not this,
 * so the names we leave on remote servers (transaction ids, offsets and
 * marker keys) stay apart.  SPI connected.
 */
static char *
sg_installation_id(void)
{
	SgUserSave	save;
	char	   *id = NULL;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute("SELECT id::pg_catalog.text FROM streamguard.installation", true, 0) == SPI_OK_SELECT &&
		SPI_processed == 1)
		id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	SgRestoreUser(&save);
	if (id == NULL)
		elog(ERROR, "streamguard.installation must hold exactly one row");
	return id;
}

/* prefix of a pipeline's global transaction ids on its sink */
char *
PipelineGidPrefix(int32 pipeline_id)
{
	return psprintf("sg:" UINT64_FORMAT ":%s:%u:%d:", GetSystemIdentifier(), sg_installation_id(),
					MyDatabaseId, pipeline_id);
}

/* a pipeline's key in the sink's offsets and marker tables */
char *
PipelineSinkKey(int32 pipeline_id)
{
	return psprintf(UINT64_FORMAT ":%s:%u:%d", GetSystemIdentifier(), sg_installation_id(),
					MyDatabaseId, pipeline_id);
}

/*
 * two_phase: inside the remote transaction about to be prepared as `gid`,
 * record gid as the pipeline's last batch on the sink.  After COMMIT
 * PREPARED the marker proves the batch committed there; a prepared
 * transaction that vanished without it was lost (PipelineResolveInDoubt).
 */
void
PipelineSinkMarker(SgRemote *r, int32 pipeline_id, const char *gid)
{
	const char *params[2];

	params[0] = PipelineSinkKey(pipeline_id);
	params[1] = gid;
	PQclear(RemoteExec(r, "INSERT INTO public.streamguard_sink_marker AS m (pipeline, gid) VALUES ($1, $2) "
					   "ON CONFLICT (pipeline) DO UPDATE SET gid = excluded.gid", 2, params));
}

/*
 * Settle a pipeline's prepared transactions on its sink: commit those whose
 * batch committed here (recorded in remote_prepared), roll back the others,
 * and forget the records.  A record whose transaction is no longer prepared
 * there committed if the sink's marker names it; if not, the sink lost a
 * batch that this database committed (restored from a backup, failed over
 * to a standby that had not received it): its id is returned, for the
 * caller to stop the pipeline.  In a transaction that holds the pipeline
 * row.
 */
char *
PipelineResolveInDoubt(SgRemote *r, int32 pipeline_id, const char *name)
{
	const char *params[1];
	PGresult   *res;
	SgUserSave	save;
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	bool	   *known;
	char	   *key = PipelineSinkKey(pipeline_id);
	char	   *marker = NULL;
	char	   *lost = NULL;
	SPITupleTable *recs;
	uint64		nrecs,
				k;
	int			i;

	params[0] = psprintf("%s%%", PipelineGidPrefix(pipeline_id));
	res = RemoteExec(r, "SELECT gid FROM pg_catalog.pg_prepared_xacts "
					 "WHERE gid OPERATOR(pg_catalog.~~) $1 "
					 "AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()", 1, params);
	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("SELECT gid FROM streamguard.remote_prepared WHERE pipeline_id = $1",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "in-doubt lookup failed");
	recs = SPI_tuptable;
	nrecs = SPI_processed;
	known = palloc0(sizeof(bool) * Max(PQntuples(res), 1));
	for (k = 0; k < nrecs; k++)
	{
		char	   *rec = SPI_getvalue(recs->vals[k], recs->tupdesc, 1);
		bool		prepared = false;

		for (i = 0; i < PQntuples(res); i++)
			if (strcmp(PQgetvalue(res, i, 0), rec) == 0)
				known[i] = prepared = true;
		if (prepared)
			continue;
		/* committed there already, or lost: the marker tells */
		if (marker == NULL)
		{
			PGresult   *mres;

			params[0] = key;
			mres = RemoteExec(r, "SELECT gid FROM public.streamguard_sink_marker "
							  "WHERE pipeline OPERATOR(pg_catalog.=) $1", 1, params);
			marker = pstrdup(PQntuples(mres) == 1 ? PQgetvalue(mres, 0, 0) : "");
			PQclear(mres);
		}
		if (strcmp(marker, rec) != 0)
			lost = pstrdup(rec);
	}
	/* the decisions recorded here must be durable before they act there */
	HorizonMakeDurable();
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
	return lost;
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
static SgPipeRow
sg_lock_pipeline_ext(const char *name, Oid caller, bool fence, bool missing_ok)
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
	if (row.id == SgRunningPipelineId)
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
		SgPipelineSlot *slot = PipelineSlot(MyDatabaseId, row.id, false);
		Oid			itypes[1] = {INT4OID};
		Datum		ivalues[1] = {Int32GetDatum(row.id)};

		if (slot)
		{
			pid_t		pid;

			SpinLockAcquire(&slot->mutex);
			slot->fence_requested = true;
			pid = slot->worker_pid;
			SpinLockRelease(&slot->mutex);
			PipelineWakeWorker(slot);
			ret = SPI_execute_with_args("SELECT 1 FROM streamguard.pipeline "
										"WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED",
										1, itypes, ivalues, NULL, false, 0);
			if (ret == SPI_OK_SELECT && SPI_processed == 0 && pid > 0 &&
				BackendPidGetProc(pid) != NULL)
				(void) kill(pid, SIGINT);
		}
	}
	/* the owner may have changed while we waited: checked again */
	if (!sg_find_pipeline("SELECT p.id, p.owner, s.name, p.state, p.epoch "
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
	return row;
}

static SgPipeRow
sg_lock_pipeline(const char *name, Oid caller, bool fence)
{
	return sg_lock_pipeline_ext(name, caller, fence, false);
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


/*
 * Statements that can never run in a pipeline's batch: the worker commits
 * each batch itself, runs the SQL as the owner inside a security-
 * restricted operation and rolls back its settings after each batch.
 * Refusing them at creation beats a pipeline that fails at run time.
 * Returns why, or NULL.  (Statements inside functions are found only when
 * they run.)
 */
static const char *
sg_statement_refused(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_TransactionStmt:
		case T_CallStmt:
		case T_VacuumStmt:
			return "streamguard commits each batch itself.";
		case T_DoStmt:
			return "A DO block cannot see the batch and may run transaction control; use a function called from the SQL.";
		case T_CopyStmt:
			return "COPY cannot run in a background worker's batch; use INSERT ... SELECT.";
		case T_AlterSystemStmt:
		case T_CreatedbStmt:
		case T_DropdbStmt:
		case T_CreateTableSpaceStmt:
		case T_DropTableSpaceStmt:
		case T_ReindexStmt:
		case T_ClusterStmt:
		case T_LoadStmt:
		case T_DiscardStmt:
			return "It cannot run inside the batch's transaction, or changes the server or the worker's session.";
		case T_DeclareCursorStmt:
		case T_PrepareStmt:
		case T_DeallocateStmt:
			return "Cursors and prepared statements would outlive the batch.";
		case T_IndexStmt:
			if (((IndexStmt *) stmt)->concurrent)
				return "CREATE INDEX CONCURRENTLY cannot run inside a transaction.";
			return NULL;
		case T_VariableSetStmt:
			{
				VariableSetStmt *v = (VariableSetStmt *) stmt;

				if (v->name && (strcmp(v->name, "role") == 0 ||
								strcmp(v->name, "session_authorization") == 0))
					return "The SQL runs as the pipeline's owner and cannot change role.";
				if (v->kind == VAR_SET_MULTI)
					return "Transaction characteristics are the worker's to set.";
				return NULL;
			}
		default:
			return NULL;
	}
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
		const char *why;

		if (ps->raw_parse_tree == NULL)
			continue;
		why = sg_statement_refused(ps->raw_parse_tree->stmt);
		if (why)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline SQL must not contain %s", ps->commandTag == CMDTAG_UNKNOWN ?
							"transaction control" : GetCommandTagName(ps->commandTag)),
					 errdetail("%s", why)));
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

/*
 * A bookkeeping table of ours on the sink: created now if the remote role
 * may; if it may not, the error says what a remote administrator runs.
 */
static void
sg_ensure_remote_table(SgRemote *rp, const char *server, const char *relname, const char *ddl)
{
	const char *params[1] = {relname};
	PGresult   *res;
	bool		exists;
	bool		may_create;

	res = RemoteExec(rp, "SELECT pg_catalog.to_regclass($1) IS NOT NULL, "
					 "pg_catalog.has_schema_privilege('public', 'CREATE')", 1, params);
	exists = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	may_create = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	PQclear(res);
	if (exists)
		return;
	if (!may_create)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("table %s does not exist on remote server \"%s\" and its user may not create it",
						relname, server),
				 errhint("On the remote, as a role with CREATE on schema public, run: %s; "
						 "then GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO the pipeline's remote user.",
						 ddl, relname)));
	RemoteExecOk(rp, ddl);
}

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
		/* each batch's transaction id, written with its rows (in-doubt resolution) */
		sg_ensure_remote_table(rp, server, "public.streamguard_sink_marker",
							   "CREATE TABLE public.streamguard_sink_marker ("
							   " pipeline text PRIMARY KEY, gid text NOT NULL)");
	}
	else
		sg_ensure_remote_table(rp, server, "public.streamguard_sink_offsets",
							   "CREATE TABLE public.streamguard_sink_offsets ("
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

/*
 * A reset of a remote source to `seq` (partition < 0: every partition)
 * must stay within the remote stream, as a seek does locally: a position
 * past its end would silently skip the events appended there until the
 * stream catches up.  Asks the remote as the pipeline's owner.
 */
static void
sg_check_remote_reset(int32 pipeline_id, Oid owner, int32 partition, int64 seq)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	char	   *server;
	const char *params[1];
	SgRemote	r;
	PGresult   *res;
	int			i,
				bad = -1;
	int64		bad_next = 0;

	if (SPI_execute_with_args("SELECT source_server, remote_stream FROM streamguard.pipeline "
							  "WHERE id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pipeline %d vanished", pipeline_id);
	server = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	params[0] = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

	memset(&r, 0, sizeof(r));
	RemoteConnect(&r, server, owner);
	PG_TRY();
	{
		res = RemoteExec(&r, "SELECT partition, next_seq FROM streamguard.stream_partitions "
						 "WHERE stream OPERATOR(pg_catalog.=) $1 ORDER BY partition", 1, params);
		for (i = 0; i < PQntuples(res); i++)
		{
			int			p = atoi(PQgetvalue(res, i, 0));
			int64		next_seq = strtoll(PQgetvalue(res, i, 1), NULL, 10);

			if ((partition < 0 || p == partition) && seq > next_seq && bad < 0)
			{
				bad = p;
				bad_next = next_seq;
			}
		}
		PQclear(res);
	}
	PG_FINALLY();
	{
		RemoteDisconnect(&r);
	}
	PG_END_TRY();
	if (bad >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seq %lld is out of range for partition %d of stream \"%s\" on server \"%s\"",
						(long long) seq, bad, params[0], server),
				 errdetail("Valid seqs are 1 to %lld.", (long long) bad_next)));
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

/* names of create_pipeline's arguments from 13 on (the 0.2 settings) */
static const char *const sg_create_args[] = {
	"batch_timeout", "allow_source_append", "max_attempts", "retry_backoff", "max_backoff"
};

/*
 * Retries of a failing batch: how many attempts before isolation (1 to
 * 1000), the first backoff and the longest (10 ms to 1 hour, doubling).
 */
static void
sg_check_retry(int32 max_attempts, Interval *backoff, Interval *max_backoff)
{
	int64		b = SgIntervalUsecs(backoff);
	int64		m = SgIntervalUsecs(max_backoff);

	if (max_attempts < 1 || max_attempts > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_attempts must be between 1 and 1000, got %d", max_attempts)));
	if (b < 10000 || b > 3600 * USECS_PER_SEC || m < 10000 || m > 3600 * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_backoff and max_backoff must be between 10 milliseconds and 1 hour")));
	if (m < b)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_backoff must not be shorter than retry_backoff")));
}

/* a bound on each run of the SQL: 1 second to 24 days (milliseconds in an int) */
static void
sg_check_batch_timeout(Interval *iv)
{
	int64		us = SgIntervalUsecs(iv);

	if (us < USECS_PER_SEC || us / 1000 > INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_timeout must be between 1 second and 24 days, got \"%s\"",
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv))))));
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
	bool		new_settings;
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
	SgCheckInterval("dedup_window", dedup_window);
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
		sg_check_batch_timeout(PG_GETARG_INTERVAL_P(13));
		sg_check_retry(PG_GETARG_INT32(15), PG_GETARG_INTERVAL_P(16), PG_GETARG_INTERVAL_P(17));
	}
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

	SgLockRoleForCreate(owner);
	SgBecomeDataOwner(&save, true);
	{
		Oid			qtypes[1] = {OIDOID};
		Datum		qvalues[1] = {ObjectIdGetDatum(owner)};

		if (SPI_execute_with_args("SELECT pg_catalog.count(*) FROM streamguard.pipeline "
								  "WHERE owner OPERATOR(pg_catalog.=) $1",
								  1, qtypes, qvalues, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "pipeline quota lookup failed");
		SgCheckRoleQuota("pipelines", owner,
						 DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
						 1, sg_role_max_pipelines, "streamguard.role_max_pipelines");
	}
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

		sg_pipeline_exec("UPDATE streamguard.pipeline SET batch_timeout = $2, allow_source_append = $3, "
						 "max_attempts = $4, retry_backoff = $5, max_backoff = $6 WHERE id = $1",
						 6, types, values, SPI_OK_UPDATE);
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

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline_ext(name, caller, true, missing_ok);
	if (row.id == 0)
	{
		/* dropped meanwhile by someone else */
		SgRestoreUser(&save);
		SPI_finish();
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
		(void) PipelineResolveInDoubt(&r, row.id, name);
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

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
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
	SgRestoreUser(&save);
	SPI_finish();
	foreach(lc, names)
		sg_drop_one(lfirst(lc), BOOTSTRAP_SUPERUSERID, true);
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
		if (!PG_ARGISNULL(1))
			sg_check_remote_reset(row.id, row.owner, PG_ARGISNULL(3) ? -1 : PG_GETARG_INT32(3),
								  PG_GETARG_INT64(1));
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
	Oid			types[8] = {INT4OID, TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT4OID, INTERVALOID,
	INTERVALOID};
	Datum		values[8];
	char		nulls[8] = {' ', 'n', 'n', 'n', 'n', 'n', 'n', 'n'};
	char	   *search_path = NULL;
	int			a;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (!PG_ARGISNULL(2))
		sg_check_batch_size(PG_GETARG_INT32(2));
	if (!PG_ARGISNULL(3))
		sg_check_policy(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	/* arguments 4 and on are absent from the 0.1 signature */
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
		sg_check_batch_timeout(PG_GETARG_INTERVAL_P(4));
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
	for (a = 1; a < 8 && a < PG_NARGS(); a++)
		if (!PG_ARGISNULL(a))
		{
			values[a] = PG_GETARG_DATUM(a);
			nulls[a] = ' ';
		}
	if (SPI_execute_with_args(PG_NARGS() > 5 ?
							  "UPDATE streamguard.pipeline SET "
							  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
							  "error_policy = coalesce($4, error_policy), "
							  "batch_timeout = coalesce($5, batch_timeout), "
							  "max_attempts = coalesce($6, max_attempts), "
							  "retry_backoff = coalesce($7, retry_backoff), "
							  "max_backoff = coalesce($8, max_backoff), epoch = epoch + 1 "
							  "WHERE id = $1 RETURNING max_attempts, retry_backoff, max_backoff" :
							  "UPDATE streamguard.pipeline SET "
							  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
							  "error_policy = coalesce($4, error_policy), epoch = epoch + 1 "
							  "WHERE id = $1",
							  PG_NARGS() > 5 ? 8 : 4, types, values, nulls, false, 0) < 0)
		elog(ERROR, "alter_pipeline failed");
	if (PG_NARGS() > 5)
	{
		bool		isnull;

		/* the combination, old settings included */
		sg_check_retry(DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
					   DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
					   DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)));
	}
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

/*
 * skip_event(pipeline, partition, seq): the pipeline passes over exactly
 * this event (counted in skipped) when it reaches it; every other event of
 * its batch is processed.  Owner only.  The worker is fenced, so it
 * restarts and loads the request before its next batch.
 */
Datum
sg_skip_event(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		partition;
	int64		seq;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	SgStreamMeta *meta;
	int64		next_seq;
	bool		isnull;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(1) ? "partition" : "seq")));
	partition = PG_GETARG_INT32(1);
	seq = PG_GETARG_INT64(2);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	row = sg_lock_pipeline(name, caller, true);
	if (row.stream == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("skip_event is not supported for a pipeline with a remote source"),
				 errhint("Use reset_pipeline with a seq instead.")));
	meta = StreamLookup(row.stream, SG_PRIV_NONE);
	StreamCheckPartition(meta, partition);
	HorizonEnsureSeqReady(meta->ref, meta->stream_id);
	(void) HorizonReadable(HorizonStream(meta->ref.slot), partition, &next_seq, NULL);
	if (seq < 1 || seq >= next_seq)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seq %lld is out of range for partition %d of stream \"%s\"",
						(long long) seq, partition, row.stream),
				 errdetail("Seqs handed out so far are 1 to %lld.", (long long) (next_seq - 1))));
	{
		Oid			types[3] = {INT4OID, TEXTOID, INT4OID};
		Datum		values[3] = {Int32GetDatum(meta->stream_id),
		CStringGetTextDatum(PipelineConsumerName(name)), Int32GetDatum(partition)};
		int64		position;

		if (SPI_execute_with_args("SELECT position FROM streamguard.consumer "
								  "WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
								  "AND partition OPERATOR(pg_catalog.=) $3",
								  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "position lookup failed");
		position = SPI_processed == 1 ?
			DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) : 0;
		if (seq <= position)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline \"%s\" has already passed seq %lld of partition %d", name,
							(long long) seq, partition),
					 errdetail("Its position in partition %d is %lld.", partition, (long long) position)));
	}
	{
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3] = {Int32GetDatum(row.id), Int32GetDatum(partition), Int64GetDatum(seq)};

		sg_pipeline_exec("INSERT INTO streamguard.pipeline_skip (pipeline_id, partition, seq) "
						 "VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
						 3, types, values, SPI_OK_INSERT);
	}
	/* a new epoch: the worker restarts and loads the request */
	sg_set_state(row.id, row.state, true);
	SgRestoreUser(&save);
	SPI_finish();
	sg_notify_change(row.id);
	PG_RETURN_VOID();
}

/*
 * redrive_dead_letters(pipeline, partition, min_seq, max_seq, sqlstate)
 *		-> dead letters redriven
 *
 * Runs the pipeline's SQL (as its owner, as the worker would) over the
 * selected dead letters and deletes them, all in the caller's transaction:
 * if it commits, each was applied once; if the SQL fails, nothing was
 * applied and the dead letters stay.  Dead letters another redrive holds
 * are skipped, so two redrives never apply the same one.  Owner only.
 */
Datum
sg_redrive_dead_letters(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	int32		id;
	Oid			owner;
	char	   *sql;
	char	   *search_path;
	int			timeout_ms;
	bool		isnull;
	Tuplestorestate *store;
	TupleDesc	desc;
	Datum	   *ctids;
	uint64		n,
				i;
	SgOwnerContext ctx;

	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgCheckName("pipeline", name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SgBecomeDataOwner(&save, true);
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(name)};
		HeapTuple	t;
		TupleDesc	d;

		if (SPI_execute_with_args("SELECT id, owner, sql, search_path, sink_server IS NOT NULL, "
								  "(pg_catalog.date_part('epoch', batch_timeout) OPERATOR(pg_catalog.*) 1000)::float8 "
								  "FROM streamguard.pipeline WHERE name OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "pipeline lookup failed");
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("pipeline \"%s\" does not exist", name)));
		t = SPI_tuptable->vals[0];
		d = SPI_tuptable->tupdesc;
		id = DatumGetInt32(SPI_getbinval(t, d, 1, &isnull));
		owner = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
		sql = SPI_getvalue(t, d, 3);
		search_path = SPI_getvalue(t, d, 4);
		if (DatumGetBool(SPI_getbinval(t, d, 5, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("pipeline \"%s\" has a remote sink and keeps no dead letters", name)));
		timeout_ms = (int) DatumGetFloat8(SPI_getbinval(t, d, 6, &isnull));
	}
	if (!superuser_arg(caller) && !has_privs_of_role(caller, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", name)));

	/* the dead letters, locked for this transaction */
	{
		Oid			types[5] = {INT4OID, INT4OID, INT8OID, INT8OID, TEXTOID};
		Datum		values[5];
		char		nulls[5];
		int			a;

		values[0] = Int32GetDatum(id);
		nulls[0] = ' ';
		for (a = 1; a < 5; a++)
		{
			nulls[a] = PG_ARGISNULL(a) ? 'n' : ' ';
			values[a] = PG_ARGISNULL(a) ? (Datum) 0 : PG_GETARG_DATUM(a);
		}
		if (SPI_execute_with_args("SELECT ctid, partition, seq, key, payload, dedup_key, appended_at "
								  "FROM streamguard.dead_letter WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND ($2 IS NULL OR partition OPERATOR(pg_catalog.=) $2) "
								  "AND ($3 IS NULL OR seq OPERATOR(pg_catalog.>=) $3) "
								  "AND ($4 IS NULL OR seq OPERATOR(pg_catalog.<=) $4) "
								  "AND ($5 IS NULL OR sqlstate OPERATOR(pg_catalog.=) $5) "
								  "ORDER BY partition, seq FOR UPDATE SKIP LOCKED",
								  5, types, values, nulls, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "dead letter lookup failed");
	}
	SgRestoreUser(&save);
	n = SPI_processed;
	desc = SgEventTupleDesc();
	store = tuplestore_begin_heap(false, false, work_mem);
	ctids = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	t = SPI_tuptable->vals[i];
		Datum		v[6];
		bool		nl[6];
		int			c;

		ctids[i] = SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull);
		for (c = 0; c < 6; c++)
			v[c] = SPI_getbinval(t, SPI_tuptable->tupdesc, c + 2, &nl[c]);
		tuplestore_putvalues(store, desc, v, nl);
	}
	if (n > 0)
	{
		int			ret;

		BatchEnterOwner(&ctx, owner, search_path, timeout_ms, store, desc, (int64) n);
		ret = SPI_execute(sql, false, 0);
		if (ret < 0)
			elog(ERROR, "the SQL of pipeline \"%s\" failed: %s", name, SPI_result_code_string(ret));
		BatchLeaveOwner(&ctx);

		SgBecomeDataOwner(&save, true);
		{
			Oid			types[1] = {TIDARRAYOID};
			Datum		values[1];

			values[0] = PointerGetDatum(construct_array(ctids, (int) n, TIDOID, sizeof(ItemPointerData),
														false, TYPALIGN_SHORT));
			sg_pipeline_exec("DELETE FROM streamguard.dead_letter WHERE ctid = ANY ($1)",
							 1, types, values, SPI_OK_DELETE);
			if (SPI_processed != n)
				elog(ERROR, "redriven dead letters changed under us");
		}
		SgRestoreUser(&save);
	}
	tuplestore_end(store);
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}

/* names of SgFaultPoint and SgFaultAction values, in enum order */
static const char *const sg_fault_points[] = {
	"none", "mid_batch", "before_commit", "between_commits", "after_commit",
	"after_prepare", "after_local_commit", "after_remote_commit", "mid_copy",
	"before_fence"
};
static const char *const sg_fault_actions[] = {"kill", "error", "exit", "hold"};

/*
 * inject_fault(pipeline, point, action, times): TEST ONLY.  Arms a
 * deterministic fault in the pipeline's worker; superuser only.
 * "hold" keeps the next `times` arrivals at the point waiting until the
 * fault is disarmed with inject_fault(pipeline, 'none'), for at most 60 s.
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
				 errhint("Valid points are \"mid_batch\", \"before_commit\", \"between_commits\", \"after_commit\", \"after_prepare\", \"after_local_commit\", \"after_remote_commit\", \"mid_copy\", \"before_fence\" and \"none\".")));
	fp = (SgFaultPoint) i;
	for (i = 0; i < lengthof(sg_fault_actions); i++)
		if (strcmp(action, sg_fault_actions[i]) == 0)
			break;
	if (i == lengthof(sg_fault_actions))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault action \"%s\"", action),
				 errhint("Valid actions are \"kill\", \"error\", \"exit\" and \"hold\".")));
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

