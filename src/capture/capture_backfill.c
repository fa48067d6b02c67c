/*-------------------------------------------------------------------------
 *
 * capture_backfill.c
 *		The backfill worker of a captured table: one chunk per READ
 *		COMMITTED transaction until the backfill is over; its supervision
 *		by the maintenance worker; and run_backfill_chunk, one chunk by
 *		hand.  What a chunk does, and why the backfill is exact, is
 *		capture_chunk.c; the key it walks the table by,
 *		capture_backfill_key.c.
 *
 * Waits are bounded: lock_timeout and a short deadlock_timeout (so that in
 * a deadlock with a writer the chunk, not the writer, is the one to fail);
 * a failed chunk is retried with half the rows, down to one, and its error
 * shown in streamguard.captures.
 *
 * SUPERVISION.  The maintenance worker (maintenance.c) calls
 * CaptureSuperviseBackfills every round: one backfill worker per capture
 * whose backfill is pending or running, at most
 * streamguard.max_backfill_workers at a time in the database, restarted
 * after a crash; and it deletes the claims of captures whose backfill is
 * over.  run_backfill_chunk runs the same chunk in the caller's
 * transaction.
 *
 * Locking: a chunk's are capture_chunk.c's; the supervisor runs in the
 * maintenance worker's transaction, where its cleanup deletes claims, and
 * takes no lock of its own beyond those rows'.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "capture/capture.h"
#include "capture/capture_int.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "shmem/worker_units.h"

PGDLLEXPORT void CaptureBackfillMain(Datum arg);

#define SG_BACKFILL_MAX_BACKOFF_MS	30000

int			sg_backfill_chunk_rows = 1000;
int			sg_backfill_naptime_ms = 0;
int			sg_max_backfill_workers = 2;

/* record a failed chunk's error where streamguard.captures shows it */
static void
sg_record_error(int32 capture_id, const char *message)
{
	MemoryContext oldcxt = CurrentMemoryContext;

	PG_TRY();
	{
		Oid			t[2] = {INT4OID, TEXTOID};
		Datum		v[2] = {Int32GetDatum(capture_id), CStringGetTextDatum(message)};

		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		SgExec("UPDATE streamguard.capture SET backfill_error = $2 WHERE id OPERATOR(pg_catalog.=) $1",
			   2, t, v, NULL, SPI_OK_UPDATE);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
}

static void
sg_nap(long ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
					 sg_wait_event(SG_WE_BACKFILL));
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Name the worker after the table it backfills, as the pipeline and
 * maintenance workers are named (SgSetWorkerTitle): "streamguard backfill
 * public.orders", or "... capture <id>" once the capture is gone.
 */
static void
sg_backfill_title(int32 capture_id)
{
	SgCaptureDef *def;
	char	   *title = NULL;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	def = CaptureDefLoad(capture_id, true);
	if (def != NULL)
	{
		char	   *rel = get_rel_name(def->relid);
		char	   *nsp = get_namespace_name(get_rel_namespace(def->relid));

		if (rel != NULL && nsp != NULL)
			title = MemoryContextStrdup(TopMemoryContext,
										psprintf("streamguard backfill %s",
												 quote_qualified_identifier(nsp, rel)));
	}
	if (title == NULL)
		title = MemoryContextStrdup(TopMemoryContext,
									psprintf("streamguard backfill capture %d", capture_id));
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	SgSetWorkerTitle(title);
}

void
CaptureBackfillMain(Datum arg)
{
	int32		capture_id = DatumGetInt32(arg);
	Oid			dbid;
	MemoryContext chunk_cxt;
	int			chunk = sg_backfill_chunk_rows;
	int			failures = 0;

	memcpy(&dbid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	SgHardenWorkerSession();
	sg_backfill_title(capture_id);
	chunk_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard backfill chunk",
									  ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		volatile SgChunkResult result = SG_CHUNK_MORE;
		volatile bool failed = false;
		int			covered;
		MemoryContext oldcxt;

		SgWorkerLoopTop();
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			chunk = Min(chunk, sg_backfill_chunk_rows);
		}
		MemoryContextReset(chunk_cxt);
		oldcxt = MemoryContextSwitchTo(chunk_cxt);
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PG_TRY();
		{
			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "SPI_connect failed");
			PushActiveSnapshot(GetTransactionSnapshot());
			pgstat_report_activity(STATE_RUNNING, "streamguard backfill chunk");
			/* bounded waits; in a deadlock with a writer, the chunk gives way */
			(void) set_config_option("lock_timeout", "1s", PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
			(void) set_config_option("deadlock_timeout", "100ms", PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
			result = CaptureBackfillChunk(capture_id, chunk, &covered);
			SPI_finish();
			PopActiveSnapshot();
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(chunk_cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			/* DROP EXTENSION takes the backfills with it */
			if (!SgExtensionPresent())
				proc_exit(0);
			ereport(LOG,
					(errmsg("streamguard backfill of capture %d: chunk of %d rows failed: %s",
							capture_id, chunk, edata->message)));
			sg_record_error(capture_id, edata->message);
			failed = true;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(oldcxt);
		pgstat_report_activity(STATE_IDLE, NULL);

		if (failed)
		{
			/* smaller chunks wait on fewer rows; back off exponentially */
			chunk = Max(1, chunk / 2);
			failures++;
			sg_nap(Min(100L << Min(failures, 10), SG_BACKFILL_MAX_BACKOFF_MS));
			continue;
		}
		failures = 0;
		if (result != SG_CHUNK_MORE)
			break;
		chunk = Min(sg_backfill_chunk_rows, chunk * 2);
		if (sg_backfill_naptime_ms > 0)
			sg_nap(sg_backfill_naptime_ms);
	}
	proc_exit(0);
}

/* ------------------------------------------------------------ supervisor */

typedef struct SgBackfillWorker
{
	int32		capture_id;
	BackgroundWorkerHandle *handle;
	int			starts;			/* starts without finishing, for the backoff */
	TimestampTz next_start;
	bool		seen;
	bool		waiting;		/* a worker-unit cap keeps it waiting (logged) */
} SgBackfillWorker;

static List *sg_backfill_workers = NIL;	/* in TopMemoryContext */

/* backfill workers of this database that are still running */
static int
sg_live_backfill_workers(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, sg_backfill_workers)
	{
		SgBackfillWorker *w = lfirst(lc);
		pid_t		pid;

		if (w->handle != NULL && GetBackgroundWorkerPid(w->handle, &pid) != BGWH_STOPPED)
			n++;
	}
	return n;
}

/*
 * One backfill worker per capture whose backfill is pending or running.
 * Runs in the maintenance worker, in a transaction, SPI connected.
 */
void
CaptureSuperviseBackfills(void)
{
	ListCell   *lc;
	uint64		i;
	TimestampTz now = GetCurrentTimestamp();
	List	   *keep = NIL;
	MemoryContext old;

	/* a database still on the 0.1 schema (before ALTER EXTENSION UPDATE) has no captures */
	if (!SgCatalogHas("capture_claim"))
		return;

	/* claims of backfills that are over: writers that had not yet seen it */
	if (SPI_execute("DELETE FROM streamguard.capture_claim WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
					"SELECT cl.ctid FROM streamguard.capture c JOIN streamguard.capture_claim cl "
					"ON cl.capture_id OPERATOR(pg_catalog.=) c.id "
					"WHERE c.backfill_state OPERATOR(pg_catalog.=) ANY ('{none,done}') LIMIT 10000))",
					false, 0) != SPI_OK_DELETE)
		elog(ERROR, "claim cleanup failed");

	if (SPI_execute("SELECT id, owner FROM streamguard.capture "
					"WHERE backfill_state OPERATOR(pg_catalog.=) ANY ('{pending,running}') ORDER BY id",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "capture list failed");
	foreach(lc, sg_backfill_workers)
		((SgBackfillWorker *) lfirst(lc))->seen = false;

	old = MemoryContextSwitchTo(TopMemoryContext);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		Oid			owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		SgBackfillWorker *w = NULL;
		char		why[128];
		pid_t		pid;

		foreach(lc, sg_backfill_workers)
			if (((SgBackfillWorker *) lfirst(lc))->capture_id == id)
				w = lfirst(lc);
		if (w == NULL)
		{
			w = palloc0(sizeof(SgBackfillWorker));
			w->capture_id = id;
			sg_backfill_workers = lappend(sg_backfill_workers, w);
		}
		w->seen = true;
		if (w->handle != NULL && GetBackgroundWorkerPid(w->handle, &pid) != BGWH_STOPPED)
			continue;
		if (w->handle != NULL)
		{
			/* it stopped with work left: crashed or killed */
			pfree(w->handle);
			w->handle = NULL;
			WorkerUnitRelease(SG_UNIT_BACKFILL, id, 0);
			w->next_start = now + Min((int64) 250000 << Min(w->starts, 7), 30 * USECS_PER_SEC);
		}
		if (w->next_start > now)
			continue;
		if (sg_live_backfill_workers() >= sg_max_backfill_workers)
			continue;
		{
			char		name[BGW_MAXLEN];

			snprintf(name, sizeof(name), "streamguard backfill %d", id);
			/* a worker unit first (worker_units.c): the caps are server-wide */
			if (!WorkerUnitClaim(SG_UNIT_BACKFILL, owner, id, 0, why, sizeof(why)))
			{
				if (!w->waiting)
					ereport(LOG,
							(errmsg("%s waits for a worker slot: %s", name, why)));
				w->waiting = true;
				continue;
			}
			w->waiting = false;
			w->handle = SgStartDynamicWorker("CaptureBackfillMain", "streamguard backfill", name,
											 Int32GetDatum(id), MyDatabaseId);
			if (w->handle != NULL)
				w->starts++;
			else
				WorkerUnitRelease(SG_UNIT_BACKFILL, id, 0);
		}
	}

	/* backfills that are over or gone: their workers exit by themselves */
	foreach(lc, sg_backfill_workers)
	{
		SgBackfillWorker *w = lfirst(lc);
		pid_t		pid;

		if (w->seen || (w->handle != NULL && GetBackgroundWorkerPid(w->handle, &pid) != BGWH_STOPPED))
			keep = lappend(keep, w);
		else
		{
			if (w->handle)
			{
				pfree(w->handle);
				WorkerUnitRelease(SG_UNIT_BACKFILL, w->capture_id, 0);
			}
			pfree(w);
		}
	}
	list_free(sg_backfill_workers);
	sg_backfill_workers = keep;
	MemoryContextSwitchTo(old);
}

/* ------------------------------------------------------------ by hand */

PG_FUNCTION_INFO_V1(sg_run_backfill_chunk);

/*
 * run_backfill_chunk(tab, stream, max_rows) -> rows the chunk covered (0:
 * the backfill is over): one chunk of a capture's backfill in the
 * caller's transaction, which must be READ COMMITTED (each statement of
 * the chunk needs a fresh snapshot; the argument at the top of
 * capture_chunk.c depends on it).  For streamguard.max_backfill_workers = 0 (backfills
 * driven from outside), and for tests that interleave a chunk with
 * writers.  The capture's owner, the table's owner or a superuser.
 */
Datum
sg_run_backfill_chunk(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *stream;
	int32		max_rows;
	int32		capture_id;
	Oid			owner;
	SgUserSave	save;
	int			covered = 0;
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	SgTableStreamArgs(fcinfo, "run_backfill_chunk", true, &relid, &stream);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_rows must not be NULL")));
	max_rows = PG_GETARG_INT32(2);
	if (max_rows < 1 || max_rows > SG_MAX_BACKFILL_ROWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be between 1 and %d, got %d", SG_MAX_BACKFILL_ROWS, max_rows)));
	if (XactIsoLevel != XACT_READ_COMMITTED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("run_backfill_chunk must run in a READ COMMITTED transaction"),
				 errdetail("Each statement of a chunk needs a snapshot of its own.")));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(stream);
	SgEnterCatalog(&save);
	SgExec("SELECT c.id, c.owner FROM streamguard.capture c "
		   "JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		   "WHERE c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) $1 AND s.name OPERATOR(pg_catalog.=) $2",
		   2, types, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table \"%s\" is not captured into stream \"%s\"",
						get_rel_name(relid) ? get_rel_name(relid) : "?", stream)));
	capture_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SgRestoreUser(&save);
	if (!superuser() && !has_privs_of_role(GetUserId(), owner) && !pg_class_ownercheck(relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to run the backfill of table \"%s\"", get_rel_name(relid)),
				 errdetail("The owner of the capture or of the table may.")));
	(void) CaptureBackfillChunk(capture_id, max_rows, &covered);
	SPI_finish();
	PG_RETURN_INT32(covered);
}
