/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The pipeline worker: start, the batch loop, errors and backoff.
 *
 * One dynamic background worker per running pipeline, started by the
 * database's maintenance worker (maintenance.c).  It
 * connects as the bootstrap superuser, pins its session settings
 * (SgHardenWorkerSession) and runs the pipeline's SQL as the pipeline's
 * owner in the execution context of batchexec.c.  Catalog work runs as the
 * storage owner.
 *
 * Where the events come from and where the effects go are the source's and
 * the sink's: their routines (routine.h) are chosen here once, from the
 * definition, and opened; after a failed batch they are closed, and the
 * next batch starts afresh.  One batch is batch.c's job (see worker.h for
 * the files of the worker).
 *
 * Failures: a failed batch is retried with exponential backoff (the
 * pipeline's retry_backoff, doubling up to max_backoff).  Errors that look
 * transient (serialization failures, deadlocks, lock timeouts, cancels) are
 * retried indefinitely; any other error, the batch timeout included, after
 * max_attempts attempts, switches the batch to isolation: each event runs in its
 * own subtransaction and a failing one is handled by the error policy —
 * stop (state failed, nothing skipped), skip (counted) or dead_letter
 * (stored with its error, in the same transaction that moves past it).
 * A failure that is the sink's own, not an event's (a window pipeline's
 * state or emission, window_apply.c), is not isolated: after max_attempts
 * attempts it stops the pipeline.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/extension.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timeout.h"

#include "catalog/pipeline_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "io/kafka.h"
#include "pipeline/window.h"
#include "pipeline/worker.h"

static void
sg_worker_exit(int code, Datum arg)
{
	SgWorker   *w = (SgWorker *) DatumGetPointer(arg);

	if (w->slot)
		PipelineSlotWorkerExited(w->slot);
}

static void
sg_clean_exit(SgWorker *w)
{
	if (w->slot)
		PipelineSlotCleanExit(w->slot);
	proc_exit(0);
}

static void
sg_note_error(SgWorker *w, const char *message, bool fail)
{
	WorkerBegin("error");
	WorkerRecordError(w, message, fail);
	WorkerCommit();
}

static bool
sg_load_definition(SgWorker *w)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(w->def.id)};
	SgUserSave	save;
	bool		isnull;
	MemoryContext old;
	int32		stream_id;
	bool		ok;

	WorkerBegin("start");
	SgBecomeDataOwner(&save, true);
	/* a new epoch, a restart counted, the definition (pipeline_catalog.c) */
	ok = PipelineDefLoad(&w->def, PipelineCleanStart(), TopMemoryContext, &stream_id);
	if (ok)
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		/* a remote source: NULL, which reads as 0 (0 in a 0.2 catalog) */
		PipelineSlotSetStream(w->slot, stream_id);
		w->consumer_name = PipelineConsumerName(w->def.name);
		SgRunningPipelineSet(w->def.id, PipelineSlotStream(w->slot), w->def.allow_source_append);
		MemoryContextSwitchTo(old);
	}
	if (ok && w->def.worker >= w->def.nworkers)
		ok = false;				/* the pipeline has fewer workers now */
	if (ok)
	{
		Oid			wtypes[3] = {INT4OID, INT4OID, INT8OID};
		Datum		wvalues[3] = {Int32GetDatum(w->def.id), Int32GetDatum(w->def.worker),
		Int64GetDatum(w->def.epoch)};

		/* this incarnation's epoch: the fence of every batch it runs */
		if (SPI_execute_with_args("INSERT INTO streamguard.pipeline_worker AS w (pipeline_id, worker, epoch) "
								  "VALUES ($1, $2, $3) ON CONFLICT (pipeline_id, worker) DO UPDATE "
								  "SET epoch = excluded.epoch, started_at = pg_catalog.now()",
								  3, wtypes, wvalues, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not register worker %d of pipeline %d", w->def.worker, w->def.id);
	}
	if (ok)
	{
		uint64		i;

		if (SPI_execute_with_args("SELECT partition, seq FROM streamguard.pipeline_skip "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not load the events to skip");
		w->nskips = (int) SPI_processed;
		w->skips = MemoryContextAlloc(TopMemoryContext, sizeof(SgSkip) * Max(w->nskips, 1));
		for (i = 0; i < SPI_processed; i++)
		{
			w->skips[i].partition = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
			w->skips[i].seq = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
	SgRestoreUser(&save);
	WorkerCommit();
	return ok;
}

/*
 * The pipeline's source and sink routines (routine.h), by its definition,
 * then opened: each builds its state and checks what it needs.  A
 * pipeline without a sink server is a window pipeline when it has a
 * window definition (its state, loaded here).  Returns NULL, or why the
 * pipeline cannot run.
 */
static const char *
sg_open_routines(SgWorker *w)
{
	SgWindow   *win;

	if (w->def.source_kafka)
		w->source = &SgKafkaSourceRoutine;
	else if (w->def.source_server)
		w->source = &SgRemoteSourceRoutine;
	else
		w->source = &SgLocalSourceRoutine;

	if (w->def.sink_kafka)
		w->sink = &SgKafkaSinkRoutine;
	else if (w->def.sink_server)
		w->sink = &SgRemoteSinkRoutine;
	else if ((win = WindowLoad(w)) != NULL)
	{
		w->sink = &SgWindowSinkRoutine;
		w->sink_state = win;
	}
	else
		w->sink = &SgSqlSinkRoutine;

	w->source->open(w);
	return w->sink->open ? w->sink->open(w) : NULL;
}

/*
 * What a failed batch records and logs of its error: the message, and for a
 * connection that failed (class 08: a remote server's or Kafka's) its
 * detail too, which is where the reason is (libpq's "Connection refused",
 * a timeout): the pipeline's last_error says why, not only that.  The
 * detail on one line, as remote_status shows it (libpq's has a newline and
 * a tab before its hint).
 */
static char *
sg_error_text(ErrorData *edata)
{
	const char *message = edata->message ? edata->message : "";

	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_CONNECTION_EXCEPTION ||
		edata->detail == NULL || edata->detail[0] == '\0')
		return pstrdup(message);
	return psprintf("%s: %s", message, SgOneLine(edata->detail));
}

/*
 * A failed batch (its transaction aborted, `edata` its error): the attempt
 * counted and recorded, the next one isolated once max_attempts attempts
 * failed for a reason that is not transient, then the backoff.  A control
 * call that cancelled the batch, DROP EXTENSION, and an error that is the
 * sink's own after max_attempts end the worker.
 */
static void
sg_batch_failed(SgWorker *w, ErrorData *edata, int *attempts, bool *isolate)
{
	long		backoff;
	const char *own;
	char	   *text;

	if (PipelineSlotFenceRequested(w->slot))
	{
		/* a control call cancelled the batch: it takes over from here */
		FreeErrorData(edata);
		sg_clean_exit(w);
	}
	own = w->sink->own_error ? w->sink->own_error(w) : NULL;

	/* DROP EXTENSION takes the pipelines with it */
	if (!SgExtensionPresent())
		sg_clean_exit(w);

	(*attempts)++;
	text = sg_error_text(edata);
	if (w->last_error)
		pfree(w->last_error);
	w->last_error = MemoryContextStrdup(TopMemoryContext, text);
	ereport(LOG,
			(errmsg("streamguard pipeline \"%s\": batch failed (attempt %d): %s",
					w->def.name, *attempts, text)));
	if (own && !WorkerTransientError(edata) && *attempts >= w->def.max_attempts)
	{
		/* the sink's own work (a window's state or emission): stop, skip nothing */
		char	   *msg = psprintf("%s after %d attempts: %s", own, *attempts, text);

		ereport(LOG,
				(errmsg("streamguard pipeline \"%s\" failed and stopped: %s", w->def.name, msg)));
		sg_note_error(w, msg, true);
		sg_clean_exit(w);
	}
	sg_note_error(w, text, false);
	pfree(text);
	if (!WorkerTransientError(edata) && *attempts >= w->def.max_attempts)
		*isolate = true;
	backoff = Min(w->def.retry_backoff_ms << Min(*attempts - 1, 20), w->def.max_backoff_ms);
	FreeErrorData(edata);
	(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, backoff,
					 sg_wait_event(SG_WE_PIPELINE_RETRY));
}

void
PipelineWorkerMain(Datum arg)
{
	SgWorker   *w = MemoryContextAllocZero(TopMemoryContext, sizeof(SgWorker));
	Oid			dbid;
	int			attempts = 0;
	bool		isolate = false;
	const char *refused;

	w->def.id = SgWorkerArgPipeline(arg);
	w->def.worker = SgWorkerArgWorker(arg);
	memcpy(&dbid, MyBgworkerEntry->bgw_extra, sizeof(Oid));

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	SgHardenWorkerSession();
	pgstat_report_appname("streamguard pipeline");
	/* our commits are durable whatever server, database, role or SQL say */
	SetConfigOption("synchronous_commit", synchronous_commit >= SYNCHRONOUS_COMMIT_REMOTE_FLUSH ?
					pstrdup(GetConfigOption("synchronous_commit", false, false)) : "on",
					PGC_SUSET, PGC_S_OVERRIDE);

	WorkerWatchServers();
	w->slot = PipelineSlot(dbid, w->def.id, w->def.worker, true);
	PipelineSlotWorkerStarted(w->slot);
	before_shmem_exit(sg_worker_exit, PointerGetDatum(w));

	w->batch_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard batch", ALLOCSET_DEFAULT_SIZES);
	/*
	 * Requests to step aside were for our predecessor; a control call made
	 * from now on sets the flag again and we see it at the first batch.
	 */
	PipelineSlotClearFence(w->slot);
	if (!sg_load_definition(w))
		sg_clean_exit(w);
	refused = sg_open_routines(w);
	if (w->def.worker == 0)
		SgSetWorkerTitle(psprintf("streamguard pipeline %s", w->def.name));
	else
		SgSetWorkerTitle(psprintf("streamguard pipeline %s worker %d", w->def.name, w->def.worker));
	if (refused)
	{
		ereport(LOG,
				(errmsg("streamguard pipeline \"%s\" failed and stopped: %s", w->def.name, refused)));
		sg_note_error(w, refused, true);
		sg_clean_exit(w);
	}
	elog(DEBUG1, "streamguard pipeline \"%s\" started (epoch %lld, %s; %s to %s)",
		 w->def.name, (long long) w->def.epoch, SgWordName(&SgGuaranteeWords, w->def.guarantee),
		 w->source->name, w->sink->name);

	for (;;)
	{
		SgBatchResult result = SG_BATCH_EMPTY;
		ErrorData  *edata = NULL;
		MemoryContext oldcxt = CurrentMemoryContext;

		SgWorkerLoopTop();
		ResetLatch(MyLatch);
		/* a cancel (batch timeout, a control call) was for a batch now over */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		PG_TRY();
		{
			result = BatchRun(w, isolate);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(oldcxt);
			edata = CopyErrorData();
			FlushErrorState();
			disable_all_timeouts(false);
			w->deadline_armed = false;
			QueryCancelPending = false;
			WorkerAbort();
			BatchCloseRoutines(w);
		}
		PG_END_TRY();

		if (edata != NULL)
		{
			sg_batch_failed(w, edata, &attempts, &isolate);
			continue;
		}

		switch (result)
		{
			case SG_BATCH_DONE:
				attempts = 0;
				isolate = false;
				break;
			case SG_BATCH_EMPTY:
				{
					long		idle_ms = w->source->idle_ms;

					attempts = 0;
					isolate = false;
					if (w->sink->idle_ms)
						idle_ms = w->sink->idle_ms(w, idle_ms);
					(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									 idle_ms, sg_wait_event(SG_WE_PIPELINE_IDLE));
				}
				break;
			case SG_BATCH_FENCED:
				sg_clean_exit(w);
				break;
			case SG_BATCH_STOPPED:
				ereport(LOG,
						(errmsg("streamguard pipeline \"%s\" failed and stopped: %s",
								w->def.name, w->stop_error)));
				sg_note_error(w, w->stop_error, true);
				sg_clean_exit(w);
				break;
		}
	}
}
