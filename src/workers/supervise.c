/*-------------------------------------------------------------------------
 *
 * supervise.c
 *		The pipeline supervisor, run by the maintenance worker
 *		(maintenance.c) every round: one pipeline worker per worker of each
 *		running pipeline of the database, restarted with exponential backoff
 *		after a crash; each start first claims a worker unit
 *		(worker_units.c).
 *
 * What it remembers of the workers it started (their handles) lives in
 * the maintenance worker's TopMemoryContext; what other processes see
 * (waiting, backoff) is in the pipeline slots (pipeline_slots_state.c), read
 * and written through their functions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "pipeline/pipeline.h"
#include "shmem/pipeline_slots.h"
#include "shmem/worker_units.h"
#include "workers/supervise.h"


typedef struct SgSupervised
{
	int32		pipeline_id;
	int32		worker;
	BackgroundWorkerHandle *handle;
	bool		seen;
} SgSupervised;

static SgSupervised *sg_supervised = NULL;
static int	sg_nsupervised = 0;

/*
 * Start a worker of a pipeline, if the worker units allow it
 * (worker_units.c): a worker the caps leave waiting says why in the
 * pipelines view, and in the log when it starts waiting or the reason
 * changes.  Retried every maintenance round.
 */
static void
sg_start_worker(SgSupervised *sup, SgPipelineSlot *slot, Oid owner)
{
	char		name[BGW_MAXLEN];
	char		why[SG_WAIT_REASON_LEN];
	bool		changed;

	if (sup->worker == 0)
		snprintf(name, sizeof(name), "streamguard pipeline %d", sup->pipeline_id);
	else
		snprintf(name, sizeof(name), "streamguard pipeline %d worker %d", sup->pipeline_id, sup->worker);
	why[0] = '\0';
	sup->handle = NULL;
	if (WorkerUnitClaim(SG_UNIT_PIPELINE, owner, sup->pipeline_id, sup->worker, why, sizeof(why)))
	{
		sup->handle = SgStartDynamicWorker("PipelineWorkerMain", "streamguard pipeline", name,
										   SgWorkerArg(sup->pipeline_id, sup->worker), MyDatabaseId);
		if (sup->handle == NULL)
			WorkerUnitRelease(SG_UNIT_PIPELINE, sup->pipeline_id, sup->worker);
	}
	changed = PipelineSlotSetWaiting(slot, sup->handle == NULL, why);
	if (changed && why[0] != '\0')
		ereport(LOG,
				(errmsg("%s waits for a worker slot: %s", name, why),
				 errdetail("Background workers are shared by the whole server; streamguard caps what one database and one role may take."),
				 errhint("It starts once a worker under the same cap stops.  The view streamguard.worker_slots shows the use against each cap; a superuser can change streamguard.role_max_workers, streamguard.database_max_workers and streamguard.reserved_worker_processes.")));
}

/*
 * One worker of a pipeline: keep it running while the pipeline runs,
 * restart it with exponential backoff after a crash.
 */
static void
sg_supervise_worker(SgSupervised *sup, SgPipelineSlot *slot, bool running, Oid owner,
					TimestampTz now)
{
	pid_t		pid;

	if (sup->handle != NULL &&
		GetBackgroundWorkerPid(sup->handle, &pid) != BGWH_STOPPED)
	{
		if (!running)
			PipelineWakeWorker(slot);	/* it will see the fence and exit */
		return;
	}
	if (sup->handle != NULL)
	{
		/* the worker is gone: was that on purpose? */
		PipelineSlotWorkerGone(slot, now);
		pfree(sup->handle);
		sup->handle = NULL;
		WorkerUnitRelease(SG_UNIT_PIPELINE, sup->pipeline_id, sup->worker);
	}
	if (!running || PipelineSlotBackingOff(slot, now))
	{
		/* paused or failed, or backing off after a crash */
		(void) PipelineSlotSetWaiting(slot, false, "");
		return;
	}
	PipelineSlotStarting(slot);
	sg_start_worker(sup, slot, owner);
}

/*
 * Keep the workers of every running pipeline of this database (`workers`
 * of them, each owning the partitions p with p % workers = its index).
 * Runs in the maintenance worker, in a transaction with SPI connected.
 */
void
SupervisePipelines(void)
{
	uint64		i;
	int			j;
	TimestampTz now = GetCurrentTimestamp();
	int			col_id,
				col_state,
				col_stream,
				col_workers,
				col_owner;

	if (SPI_execute("SELECT id, state, stream_id, workers, owner FROM streamguard.pipeline ORDER BY id",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline list failed");
	col_id = SgColumn(SPI_tuptable->tupdesc, "id");
	col_state = SgColumn(SPI_tuptable->tupdesc, "state");
	col_stream = SgColumn(SPI_tuptable->tupdesc, "stream_id");
	col_workers = SgColumn(SPI_tuptable->tupdesc, "workers");
	col_owner = SgColumn(SPI_tuptable->tupdesc, "owner");
	if (sg_supervised == NULL)
		sg_supervised = MemoryContextAllocZero(TopMemoryContext, sizeof(SgSupervised) * sg_max_pipelines);
	for (j = 0; j < sg_nsupervised; j++)
		sg_supervised[j].seen = false;

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	t = SPI_tuptable->vals[i];
		TupleDesc	d = SPI_tuptable->tupdesc;
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(t, d, col_id, &isnull));
		bool		running = strcmp(SPI_getvalue(t, d, col_state), "running") == 0;
		/* a remote source: NULL, which reads as 0 (0 in a 0.2 catalog) */
		int32		stream_id = DatumGetInt32(SPI_getbinval(t, d, col_stream, &isnull));
		int32		nworkers = DatumGetInt32(SPI_getbinval(t, d, col_workers, &isnull));
		Oid			owner = DatumGetObjectId(SPI_getbinval(t, d, col_owner, &isnull));
		int32		w;

		for (w = 0; w < nworkers; w++)
		{
			SgSupervised *sup = NULL;
			SgPipelineSlot *slot;

			for (j = 0; j < sg_nsupervised; j++)
				if (sg_supervised[j].pipeline_id == id && sg_supervised[j].worker == w)
					sup = &sg_supervised[j];
			if (sup == NULL)
			{
				if (sg_nsupervised >= sg_max_pipelines)
					break;
				sup = &sg_supervised[sg_nsupervised++];
				sup->pipeline_id = id;
				sup->worker = w;
				sup->handle = NULL;
			}
			sup->seen = true;

			/*
			 * The slot table is the server's: when other databases filled
			 * it, this worker waits (and the others of this database are
			 * still supervised).
			 */
			slot = PipelineSlotOrNull(MyDatabaseId, id, w);
			if (slot == NULL)
			{
				static TimestampTz last_report = 0;

				if (last_report == 0 || TimestampDifferenceExceeds(last_report, now, 60 * 1000))
				{
					last_report = now;
					ereport(LOG,
							(errmsg("streamguard pipeline %d worker %d waits for a pipeline slot: all %d are in use",
									id, w, sg_max_pipelines),
							 errhint("Raise streamguard.max_pipelines and restart the server, or lower streamguard.database_max_pipelines.")));
				}
				continue;
			}
			PipelineSlotSetStream(slot, stream_id);
			sg_supervise_worker(sup, slot, running, owner, now);
		}
	}

	/* pipelines that were dropped, workers beyond a lowered count */
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
			WorkerUnitRelease(SG_UNIT_PIPELINE, sg_supervised[j].pipeline_id, sg_supervised[j].worker);
		}
		PipelineFreeWorkers(MyDatabaseId, sg_supervised[j].pipeline_id, sg_supervised[j].worker);
		sg_supervised[j] = sg_supervised[--sg_nsupervised];
		j--;
	}
}
