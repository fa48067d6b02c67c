/*-------------------------------------------------------------------------
 *
 * workerstate.c
 *		The steps every part of the pipeline worker uses.
 *
 * Transactions (each begins with an SPI connection and a snapshot), fault
 * injection for the crash tests, the remote ends (connected on first use
 * as the owner's user mapping, their status published in shared memory)
 * and the record of an error in the pipeline row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "io/remote.h"
#include "pipeline/pipeline.h"
#include "pipeline/worker.h"
#include "shmem/pipeline_slots.h"

/*
 * The "hold" action: wait, interruptibly, until the fault is disarmed
 * (inject_fault(pipeline, 'none')), for at most 60 s.  Lets a test commit
 * a control call inside a window the worker would otherwise cross at once.
 */
static void
sg_fault_hold(SgWorker *w, SgFaultPoint point)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60000);

	elog(LOG, "streamguard pipeline \"%s\": injected fault, holding", w->def.name);
	for (;;)
	{
		if (!PipelineSlotFaultArmed(w->slot, point) || GetCurrentTimestamp() >= until)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50L,
						 sg_wait_event(SG_WE_FAULT));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	elog(LOG, "streamguard pipeline \"%s\": injected fault, released", w->def.name);
}

/*
 * A worker's connections to remote servers and Kafka clusters outlive the
 * catalog rows that allowed them: DROP SERVER, ALTER SERVER, REVOKE USAGE
 * ON FOREIGN SERVER, DROP or ALTER USER MAPPING.  Any change to
 * pg_foreign_server or pg_user_mapping (an invalidation, processed when a
 * batch's transaction starts) marks them stale; the next batch closes the
 * routines, as after a failed batch, and opens them again, which checks the
 * server, the owner's USAGE and its user mapping once more (and so fails
 * the batch, with the reason, when they are gone).  As postgres_fdw does
 * with its cached connections.
 */
static bool sg_servers_changed = false;

static void
sg_servers_invalidated(Datum arg, int cacheid, uint32 hashvalue)
{
	sg_servers_changed = true;
}

void
WorkerWatchServers(void)
{
	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, sg_servers_invalidated, (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, sg_servers_invalidated, (Datum) 0);
}

/*
 * In a batch's transaction, before its source and sink are used: whether a
 * server or user mapping changed since the last batch and this pipeline
 * has a remote or Kafka side, so that the batch closes its routines (the
 * next use opens them again).  Clears the mark.
 */
bool
WorkerServersChanged(SgWorker *w)
{
	if (!sg_servers_changed)
		return false;
	sg_servers_changed = false;
	if (w->def.source_server == NULL && w->def.sink_server == NULL)
		return false;
	ereport(LOG,
			(errmsg("streamguard pipeline \"%s\": a foreign server or user mapping changed; connecting again",
					w->def.name)));
	return true;
}

void
WorkerFault(SgWorker *w, SgFaultPoint point)
{
	SgFaultAction action;

	if (!PipelineSlotTakeFault(w->slot, point, &action))
		return;
	switch (action)
	{
		case SG_FAULT_KILL:
			elog(LOG, "streamguard pipeline \"%s\": injected fault, killing the worker", w->def.name);
			kill(MyProcPid, SIGKILL);
			pg_usleep(10 * USECS_PER_SEC);	/* never reached */
			break;
		case SG_FAULT_ERROR:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("injected fault in pipeline \"%s\"", w->def.name)));
			break;
		case SG_FAULT_EXIT:
			elog(LOG, "streamguard pipeline \"%s\": injected fault, exiting", w->def.name);
			proc_exit(1);
			break;
		case SG_FAULT_HOLD:
			sg_fault_hold(w, point);
			break;
	}
}

void
WorkerBegin(const char *what)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, what);
}

void
WorkerCommit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

void
WorkerAbort(void)
{
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
}

void
WorkerRemoteStatus(SgWorker *w, int side, SgRemote *r)
{
	PipelineSlotSetRemote(w->slot, side, r->server_name, RemoteConnected(r), r->rtt_us, r->last_error);
}

/*
 * A remote end of the worker (`side`: its source or its sink), connected
 * on first use: `r` is the handle its routine keeps.
 */
SgRemote *
WorkerRemote(SgWorker *w, SgRemote *r, int side)
{
	const char *server = side == SG_SIDE_SOURCE ? w->def.source_server : w->def.sink_server;

	if (!RemoteConnected(r))
	{
		PG_TRY();
		{
			/* as the owner's user mapping, with the password rule */
			RemoteConnect(r, server, w->def.owner);
			RemoteExecOk(r, "SET datestyle = ISO");
			RemoteExecOk(r, "SET intervalstyle = postgres");
			RemoteExecOk(r, "SET extra_float_digits = 3");
		}
		PG_CATCH();
		{
			strlcpy(r->server_name, server, sizeof(r->server_name));
			if (r->last_error[0] == '\0')
				strlcpy(r->last_error, "connection failed", sizeof(r->last_error));
			WorkerRemoteStatus(w, side, r);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	WorkerRemoteStatus(w, side, r);
	return r;
}

/* the error (and with fail, the failed state) in the current transaction */
void
WorkerRecordError(SgWorker *w, const char *message, bool fail)
{
	PipelineRecordError(w->def.id, w->def.generation, message, fail);
}

/*
 * Whether a failed batch's error looks transient (contention, a lost
 * connection, a cancel): retried for ever, never isolated.  Remote sinks
 * use it too, to tell an event's own error from the batch's.
 */
bool
WorkerTransientError(ErrorData *edata)
{
	int			sqlerrcode = edata->sqlerrcode;

	/*
	 * The batch timeout (the only statement timeout a worker arms) is the
	 * SQL's own doing, not contention: it counts as a failed attempt, so a
	 * batch that never finishes ends up isolated and under the error policy.
	 */
	if (sqlerrcode == ERRCODE_QUERY_CANCELED && edata->message_id &&
		strcmp(edata->message_id, "canceling statement due to statement timeout") == 0)
		return false;
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_TRANSACTION_ROLLBACK ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_OPERATOR_INTERVENTION ||
		sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
		sqlerrcode == ERRCODE_QUERY_CANCELED ||
		sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
		sqlerrcode == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
}

/* the words of a pipeline's closed vocabularies, in enum order (pipeline.h) */
const SgWordList SgGuaranteeWords = {
	"guarantee", "guarantees", {"exactly_once", "at_least_once", "at_most_once", NULL}
};
const SgWordList SgErrorPolicyWords = {
	"error policy", "error policies", {"stop", "skip", "dead_letter", NULL}
};
const SgWordList SgSinkModeWords = {
	"sink_mode", "sink modes", {"two_phase", "offsets", NULL}
};
const SgWordList SgStartFromWords = {
	"start_from", "values", {"beginning", "end", NULL}
};
