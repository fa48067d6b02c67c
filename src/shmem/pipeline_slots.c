/*-------------------------------------------------------------------------
 *
 * pipeline_slots.c
 *		Pipelines in shared memory, the table: its memory, a worker's slot
 *		found, made and freed, a slot's identity (its source stream), the
 *		wake-ups, and the control calls' fence and backoff reset.
 *
 * The slot struct and the field-by-field contract of who writes what
 * under which lock are in pipeline_slots_int.h; one slot's runtime fields
 * are read and written in pipeline_slots_state.c, the views in
 * pipeline_slots_views.c.
 *
 * LOCKS here:
 *	- the "streamguard pipelines" LWLock (sg_pipes->lock) protects slot
 *	  identity: dbid, pipeline_id, worker and stream_id are written only
 *	  with it held exclusively, and also under the slot's spinlock, so that
 *	  a reader holding either sees them whole: slot creation
 *	  (sg_pipeline_slot), freeing (sg_free_slot_locked), the source stream
 *	  (PipelineSlotSetStream).  Lookups read them under the LWLock, shared
 *	  or exclusive.
 *	- PipelineWakeStream, called from the commit callback of an append
 *	  (horizon_xact.c, through HorizonCommitWake), reads dbid, stream_id
 *	  and worker_procno with no lock at all (it must not fail or wait): a
 *	  stale value costs a wake-up missed or spent on the wrong worker, and
 *	  a worker that misses one finds the events at its next idle timeout.
 *	- the slot's spinlock (mutex) around the runtime fields touched here:
 *	  all of them reset when a slot is made (sg_pipeline_slot),
 *	  fence_requested set and the worker's pid read (PipelineRequestFence),
 *	  failures and next_start reset (PipelineResetBackoff), worker_procno
 *	  read (PipelineWakeWorker), stream_id read (PipelineSlotStream).
 *	- clean_start (sg_pipes) is written once, at shared memory creation.
 * Helpers named *_locked expect the LWLock held and assert it.
 *
 * Calls: none in the other files of the module.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "core/compat.h"
#include "core/util.h"
#include "shmem/pipeline_slots_int.h"

int			sg_max_pipelines = 64;

/* the shared memory, attached by PipelineShmemInit (pipeline_slots_int.h) */
SgPipelineShared *sg_pipes = NULL;

/* ------------------------------------------------------- shared memory */

Size
PipelineShmemSize(void)
{
	return add_size(offsetof(SgPipelineShared, slots),
					mul_size(sg_max_pipelines, sizeof(SgPipelineSlot)));
}

void
PipelineShmemRequest(void)
{
	RequestAddinShmemSpace(PipelineShmemSize());
	RequestNamedLWLockTranche("streamguard pipelines", 1);
}

/*
 * Whether the last shutdown was clean, read from pg_control before the
 * startup process rewrites it: shared memory is made (again) by the
 * postmaster at its start and after a crash of any process, and only a
 * clean shutdown leaves the state "shut down".  Outside the postmaster
 * (EXEC_BACKEND re-attaching) the struct exists already and this is not
 * called.
 */
static bool
sg_read_clean_shutdown(void)
{
	ControlFileData *control;
	bool		crc_ok;
	bool		clean;

	if (DataDir == NULL)
		return false;
	control = get_controlfile(DataDir, &crc_ok);
	clean = crc_ok && (control->state == DB_SHUTDOWNED ||
					   control->state == DB_SHUTDOWNED_IN_RECOVERY);
	pfree(control);
	return clean;
}

/*
 * Whether the server started after a clean shutdown (pg_ctl stop or restart
 * in mode smart or fast), not after a crash or an immediate shutdown: a
 * pipeline worker's first start then is no restart (worker.c).
 */
bool
PipelineCleanStart(void)
{
	return sg_pipes != NULL && sg_pipes->clean_start;
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
		sg_pipes->clean_start = sg_read_clean_shutdown();
		for (i = 0; i < sg_max_pipelines; i++)
		{
			SpinLockInit(&sg_pipes->slots[i].mutex);
			sg_pipes->slots[i].worker_procno = -1;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The slot of worker `worker` of a pipeline; with `create`, made if there
 * is none, and if the table is full an error (PipelineSlot) or NULL
 * (PipelineSlotOrNull).
 */
static SgPipelineSlot *
sg_pipeline_slot(Oid dbid, int32 pipeline_id, int32 worker, bool create, bool full_ok)
{
	int			i,
				free_slot = -1;
	SgPipelineSlot *slot = NULL;

	LWLockAcquire(sg_pipes->lock, create ? LW_EXCLUSIVE : LW_SHARED);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid && s->pipeline_id == pipeline_id && s->worker == worker)
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
			if (full_ok)
				return NULL;
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many pipelines"),
					 errdetail("All %d pipeline slots in shared memory are in use.", sg_max_pipelines),
					 errhint("Raise streamguard.max_pipelines and restart the server.")));
		}
		slot = &sg_pipes->slots[free_slot];
		Assert(LWLockHeldByMeInMode(sg_pipes->lock, LW_EXCLUSIVE));
		SpinLockAcquire(&slot->mutex);
		slot->dbid = dbid;
		slot->pipeline_id = pipeline_id;
		slot->worker = worker;
		slot->stream_id = 0;
		slot->worker_pid = 0;
		slot->worker_procno = -1;
		slot->clean_exit = false;
		slot->fence_requested = false;
		slot->no_worker_slot = false;
		slot->wait_reason[0] = '\0';
		slot->failures = 0;
		slot->next_start = 0;
		slot->events_per_sec = 0;
		slot->last_batch_end = 0;
		slot->nhistory = 0;
		memset(slot->hist_counts, 0, sizeof(slot->hist_counts));
		slot->hist_sum = 0;
		memset(slot->remote, 0, sizeof(slot->remote));
		slot->fault_point = SG_FAULT_NONE;
		slot->fault_count = 0;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(sg_pipes->lock);
	return slot;
}

SgPipelineSlot *
PipelineSlot(Oid dbid, int32 pipeline_id, int32 worker, bool create)
{
	return sg_pipeline_slot(dbid, pipeline_id, worker, create, false);
}

/* the slot of a pipeline's worker, made if need be; NULL if the table is full */
SgPipelineSlot *
PipelineSlotOrNull(Oid dbid, int32 pipeline_id, int32 worker)
{
	return sg_pipeline_slot(dbid, pipeline_id, worker, true, true);
}

/* a slot is free again: its identity cleared (LWLock held exclusively) */
static void
sg_free_slot_locked(SgPipelineSlot *s)
{
	Assert(LWLockHeldByMeInMode(sg_pipes->lock, LW_EXCLUSIVE));
	SpinLockAcquire(&s->mutex);
	s->dbid = InvalidOid;
	s->pipeline_id = 0;
	SpinLockRelease(&s->mutex);
}

/* free the slot of one worker of a pipeline, or of all (worker < 0) */
void
PipelineFreeWorkers(Oid dbid, int32 pipeline_id, int32 worker)
{
	int			i;

	LWLockAcquire(sg_pipes->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid && s->pipeline_id == pipeline_id && (worker < 0 || s->worker == worker))
		{
			PipelineWakeWorker(s);
			sg_free_slot_locked(s);
		}
	}
	LWLockRelease(sg_pipes->lock);
}

void
PipelineFreeSlot(Oid dbid, int32 pipeline_id)
{
	PipelineFreeWorkers(dbid, pipeline_id, -1);
}

/*
 * A control call wants the pipeline row: ask every worker of the pipeline
 * to step aside at its next batch, wake them, and return their pids (to
 * cancel a batch in flight).
 */
int
PipelineRequestFence(Oid dbid, int32 pipeline_id, pid_t *pids, int max)
{
	int			i,
				n = 0;

	LWLockAcquire(sg_pipes->lock, LW_SHARED);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid != dbid || s->pipeline_id != pipeline_id)
			continue;
		SpinLockAcquire(&s->mutex);
		s->fence_requested = true;
		if (s->worker_pid != 0 && n < max)
			pids[n++] = s->worker_pid;
		SpinLockRelease(&s->mutex);
		PipelineWakeWorker(s);
	}
	LWLockRelease(sg_pipes->lock);
	return n;
}

/* wake every worker of a pipeline (its definition or state changed) */
void
PipelineWakePipeline(Oid dbid, int32 pipeline_id)
{
	int			i;

	LWLockAcquire(sg_pipes->lock, LW_SHARED);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid && s->pipeline_id == pipeline_id)
			PipelineWakeWorker(s);
	}
	LWLockRelease(sg_pipes->lock);
}

/* a resumed pipeline's workers start at once, without the crash backoff */
void
PipelineResetBackoff(Oid dbid, int32 pipeline_id)
{
	int			i;

	LWLockAcquire(sg_pipes->lock, LW_SHARED);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid != dbid || s->pipeline_id != pipeline_id)
			continue;
		SpinLockAcquire(&s->mutex);
		s->failures = 0;
		s->next_start = 0;
		SpinLockRelease(&s->mutex);
	}
	LWLockRelease(sg_pipes->lock);
}

/* Free every pipeline slot of a database (dropped, or its extension). */
void
PipelineFreeDatabase(Oid dbid)
{
	int			i;

	LWLockAcquire(sg_pipes->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineSlot *s = &sg_pipes->slots[i];

		if (s->dbid == dbid)
			sg_free_slot_locked(s);
	}
	LWLockRelease(sg_pipes->lock);
}

/* databases that hold pipeline slots, added to dbids[] (no repeats) */
int
PipelineSlotDatabases(Oid *dbids, int max)
{
	int			i,
				n = 0;

	LWLockAcquire(sg_pipes->lock, LW_SHARED);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		n = SgAddOid(dbids, n, max, sg_pipes->slots[i].dbid);
	}
	LWLockRelease(sg_pipes->lock);
	return n;
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

/*
 * The pipeline's source stream (0: none), for PipelineWakeStream: set by
 * the worker when it loads its definition and by the supervisor every
 * round.  Identity: the LWLock exclusively and the spinlock.
 */
void
PipelineSlotSetStream(SgPipelineSlot *slot, int32 stream_id)
{
	/* the same as before (every round but the first): nothing to write */
	if (PipelineSlotStream(slot) == stream_id)
		return;
	LWLockAcquire(sg_pipes->lock, LW_EXCLUSIVE);
	SpinLockAcquire(&slot->mutex);
	slot->stream_id = stream_id;
	SpinLockRelease(&slot->mutex);
	LWLockRelease(sg_pipes->lock);
}

int32
PipelineSlotStream(SgPipelineSlot *slot)
{
	int32		stream_id;

	SpinLockAcquire(&slot->mutex);
	stream_id = slot->stream_id;
	SpinLockRelease(&slot->mutex);
	return stream_id;
}
