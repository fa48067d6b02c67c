/*-------------------------------------------------------------------------
 *
 * pipeline_slots.c
 *		Pipelines in shared memory: their slots, the wake-ups, the batch
 *		history and duration histogram, fault injection, and the runtime
 *		views that read them.
 *
 * One SgPipelineSlot per worker of a pipeline (streamguard.max_pipelines
 * of them), found by (database, pipeline id, worker).  Slots hold what
 * must be cheap to read (worker pid, rates, the recent batches) or must
 * not survive a crash (fault injection); durable counters live in the
 * pipeline row.  The slot struct is private to this file: the pipeline
 * worker (worker.c and the files of its batch), the maintenance worker's
 * supervisor (maintenance.c) and the control calls (pipeline.c,
 * pipeline_ops.c) hold slot pointers and call the functions of
 * pipeline_slots.h, which take the locks.
 *
 * LOCKS, field by field:
 *	- the "streamguard pipelines" LWLock (sg_pipes->lock) protects slot
 *	  identity: dbid, pipeline_id, worker and stream_id are written only
 *	  with it held exclusively, and also under the slot's spinlock, so that
 *	  a reader holding either sees them whole: slot creation
 *	  (sg_pipeline_slot), freeing (sg_free_slot_locked), the source stream
 *	  (PipelineSlotSetStream, by the worker at start and the supervisor
 *	  every round).  Lookups read them under the LWLock; the views under
 *	  the spinlock (sg_copy_slot).  PipelineWakeStream, called from the
 *	  commit callback of an append, reads dbid, stream_id and worker_procno
 *	  with no lock at all (it must not fail or wait): a stale value costs a
 *	  wake-up missed or spent on the wrong worker, and a worker that misses
 *	  one finds the events at its next idle timeout.
 *	- the slot's spinlock (mutex) protects everything else: worker_pid,
 *	  worker_procno and clean_exit (the worker at its start and exit, the
 *	  supervisor when it finds the worker gone), fence_requested (control
 *	  calls set it, the worker clears it at start and reads it before each
 *	  batch), no_worker_slot, wait_reason, failures and next_start (the
 *	  supervisor; a resume and each committed batch reset the backoff),
 *	  events_per_sec, last_batch_end, history, nhistory, hist_counts and
 *	  hist_sum (the worker after each committed batch), remote (the worker,
 *	  whenever a remote end or Kafka client changes state), fault_point,
 *	  fault_action and fault_count (inject_fault arms, the worker fires).
 *	- clean_start (sg_pipes) is written once, at shared memory creation.
 * Helpers named *_locked expect the LWLock held and assert it.
 *
 * Calls up: none.  The runtime views show a pipeline's errors and its
 * checkpoint log only to whom may see them; whether the caller may is
 * asked through a callback installed by _PG_init (PipelineSlotsVisibleToCaller,
 * views.c's PipelineVisibleToCaller).  The pipeline SQL API (pipeline.c),
 * the worker (worker.c) and the maintenance worker call into this file.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_control.h"
#include "catalog/pg_type.h"
#include "common/controldata_utils.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "core/compat.h"
#include "core/util.h"
#include "shmem/pipeline_slots.h"

PG_FUNCTION_INFO_V1(sg_pipeline_runtime);
PG_FUNCTION_INFO_V1(sg_pipeline_batches);
PG_FUNCTION_INFO_V1(sg_pipeline_histogram);
PG_FUNCTION_INFO_V1(sg_remote_runtime);

int			sg_max_pipelines = 64;

PipelineVisibleFn PipelineSlotsVisibleToCaller = NULL;

#define SG_BATCH_HISTORY	64	/* checkpoint log entries per pipeline */
#define SG_HIST_BUCKETS		12	/* batch-duration histogram (metrics) */

/* events_per_sec is 0 after this long without a batch (at least) */
#define SG_RATE_IDLE_USECS	INT64CONST(10000000)

typedef struct SgRemoteStatus
{
	char		server[NAMEDATALEN];	/* empty: no remote on this side */
	bool		connected;
	int64		rtt_us;
	char		last_error[256];
} SgRemoteStatus;

/* see the banner for who writes which field under which lock */
struct SgPipelineSlot
{
	/* identity: the slots' LWLock (exclusive) and mutex to write */
	Oid			dbid;			/* InvalidOid = free */
	int32		pipeline_id;
	int32		worker;			/* which of the pipeline's workers */
	int32		stream_id;

	/* runtime, protected by mutex */
	slock_t		mutex;
	pid_t		worker_pid;
	int			worker_procno;	/* -1 when no worker */
	bool		clean_exit;		/* the worker exited on purpose */
	bool		fence_requested;	/* a control call waits for the row lock */
	bool		no_worker_slot; /* the last start found no worker slot */
	char		wait_reason[SG_WAIT_REASON_LEN];	/* and why, when a cap
													 * refused it ('' otherwise) */
	int32		failures;		/* consecutive failed starts or batches */
	TimestampTz next_start;		/* backoff: not before this */
	double		events_per_sec; /* exponential moving average */
	TimestampTz last_batch_end;
	SgBatchRecord history[SG_BATCH_HISTORY];
	int64		nhistory;		/* records ever written (ring index) */
	int64		hist_counts[SG_HIST_BUCKETS];	/* batches per duration bucket */
	double		hist_sum;		/* seconds over all batches counted */
	SgRemoteStatus remote[2];	/* [0] source, [1] sink */
	SgFaultPoint fault_point;
	SgFaultAction fault_action;
	int32		fault_count;
};

typedef struct SgPipelineShared
{
	LWLock	   *lock;
	bool		clean_start;	/* the server started after a clean shutdown */
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

/* upper bounds (seconds) of the batch-duration histogram's buckets */
static const double sg_hist_bounds[SG_HIST_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10
};

/* ------------------------------------------------------- one slot */

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

/* the calling process is the slot's worker now */
void
PipelineSlotWorkerStarted(SgPipelineSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	slot->worker_pid = MyProcPid;
	slot->worker_procno = SG_MY_PROC_INDEX;
	slot->clean_exit = false;
	SpinLockRelease(&slot->mutex);
}

/* the calling worker exits (before_shmem_exit) */
void
PipelineSlotWorkerExited(SgPipelineSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	/* a newer worker may have taken the slot over already */
	if (slot->worker_pid == MyProcPid)
	{
		slot->worker_pid = 0;
		slot->worker_procno = -1;
	}
	SpinLockRelease(&slot->mutex);
}

/* the worker exits on purpose: no backoff for its restart */
void
PipelineSlotCleanExit(SgPipelineSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	slot->clean_exit = true;
	SpinLockRelease(&slot->mutex);
}

/* does a control call wait for the pipeline row (PipelineRequestFence)? */
bool
PipelineSlotFenceRequested(SgPipelineSlot *slot)
{
	bool		requested;

	SpinLockAcquire(&slot->mutex);
	requested = slot->fence_requested;
	SpinLockRelease(&slot->mutex);
	return requested;
}

void
PipelineSlotClearFence(SgPipelineSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	slot->fence_requested = false;
	SpinLockRelease(&slot->mutex);
}

/*
 * A batch committed: its record into the history, its rate into the
 * moving average, its duration (fetch to commit, `seconds`) into the
 * histogram; the backoff starts over.
 */
void
PipelineSlotRecordBatch(SgPipelineSlot *slot, const SgBatchRecord *r, double seconds)
{
	double		secs;
	TimestampTz end = r->committed_at;
	int			b;

	SpinLockAcquire(&slot->mutex);
	secs = slot->last_batch_end > 0 ? (end - slot->last_batch_end) / 1e6 : 0;
	if (secs > 0)
	{
		double		rate = r->events_in / secs;
		double		weight = Min(1.0, secs / 5.0);	/* ~5 s averaging */

		slot->events_per_sec = slot->events_per_sec * (1 - weight) + rate * weight;
	}
	slot->last_batch_end = end;
	slot->history[slot->nhistory % SG_BATCH_HISTORY] = *r;
	slot->nhistory++;
	for (b = 0; b < SG_HIST_BUCKETS; b++)
		if (seconds <= sg_hist_bounds[b])
		{
			slot->hist_counts[b]++;
			break;
		}
	slot->hist_sum += seconds;
	slot->failures = 0;
	SpinLockRelease(&slot->mutex);
}

/*
 * A remote end (side 0 the source, 1 the sink) as the views show it; a
 * NULL error keeps the last one.
 */
void
PipelineSlotSetRemote(SgPipelineSlot *slot, int side, const char *server, bool connected,
					  int64 rtt_us, const char *error)
{
	SgRemoteStatus *st = &slot->remote[side];

	SpinLockAcquire(&slot->mutex);
	strlcpy(st->server, server, sizeof(st->server));
	st->connected = connected;
	st->rtt_us = rtt_us;
	if (error)
		strlcpy(st->last_error, error, sizeof(st->last_error));
	SpinLockRelease(&slot->mutex);
}

/* is a fault armed at this point (a hold waits until it is not)? */
bool
PipelineSlotFaultArmed(SgPipelineSlot *slot, SgFaultPoint point)
{
	bool		armed;

	SpinLockAcquire(&slot->mutex);
	armed = slot->fault_point == point;
	SpinLockRelease(&slot->mutex);
	return armed;
}

/*
 * The worker reached a fault point: if a fault is armed there, count it
 * off and return true with its action.  A hold stays armed until disarmed
 * (inject_fault(..., 'none')): that releases its waiters.
 */
bool
PipelineSlotTakeFault(SgPipelineSlot *slot, SgFaultPoint point, SgFaultAction *action)
{
	bool		fire = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->fault_point == point && slot->fault_count > 0)
	{
		fire = true;
		*action = slot->fault_action;
		if (--slot->fault_count == 0 && *action != SG_FAULT_HOLD)
			slot->fault_point = SG_FAULT_NONE;
	}
	SpinLockRelease(&slot->mutex);
	return fire;
}

/* inject_fault: arm (or with SG_FAULT_NONE, disarm) a fault point */
void
PipelineSlotArmFault(SgPipelineSlot *slot, SgFaultPoint point, SgFaultAction action, int32 count)
{
	SpinLockAcquire(&slot->mutex);
	slot->fault_point = point;
	slot->fault_action = action;
	slot->fault_count = count;
	SpinLockRelease(&slot->mutex);
}

/*
 * The supervisor found the slot's worker stopped: unless it exited on
 * purpose, one more failure, and the next start waits longer (exponential
 * backoff from 250 ms up to 30 s).
 */
void
PipelineSlotWorkerGone(SgPipelineSlot *slot, TimestampTz now)
{
	SpinLockAcquire(&slot->mutex);
	if (!slot->clean_exit)
	{
		slot->failures++;
		slot->next_start = now + Min((int64) 250000 << Min(slot->failures, 7), 30 * USECS_PER_SEC);
	}
	slot->worker_pid = 0;
	slot->worker_procno = -1;
	SpinLockRelease(&slot->mutex);
}

/* is the worker's next start still in its backoff? */
bool
PipelineSlotBackingOff(SgPipelineSlot *slot, TimestampTz now)
{
	bool		waiting;

	SpinLockAcquire(&slot->mutex);
	waiting = slot->next_start > now;
	SpinLockRelease(&slot->mutex);
	return waiting;
}

/* the supervisor is about to start the slot's worker */
void
PipelineSlotStarting(SgPipelineSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	slot->clean_exit = false;
	SpinLockRelease(&slot->mutex);
}

/*
 * Whether the last start found no worker slot, and why (a cap's reason,
 * or '' when PostgreSQL had none); returns whether the reason changed.
 */
bool
PipelineSlotSetWaiting(SgPipelineSlot *slot, bool no_worker_slot, const char *why)
{
	bool		changed;

	SpinLockAcquire(&slot->mutex);
	slot->no_worker_slot = no_worker_slot;
	changed = strcmp(slot->wait_reason, why) != 0;
	strlcpy(slot->wait_reason, why, sizeof(slot->wait_reason));
	SpinLockRelease(&slot->mutex);
	return changed;
}

/* ------------------------------------------------------------- views */

/*
 * The views read a slot through a copy taken under its spinlock, so that
 * what they show of one pipeline is consistent.  False for a slot of
 * another database or a free one.
 */
static bool
sg_copy_slot(int i, SgPipelineSlot *copy)
{
	SgPipelineSlot *s = &sg_pipes->slots[i];

	/* a first look without the lock skips the other databases' slots */
	if (s->dbid != MyDatabaseId)
		return false;
	SpinLockAcquire(&s->mutex);
	memcpy(copy, s, sizeof(SgPipelineSlot));
	SpinLockRelease(&s->mutex);
	return copy->dbid == MyDatabaseId;
}

/*
 * _pipeline_runtime() -> (pipeline_id, worker_pid, events_per_sec,
 *		last_batch_ms, last_fetch_ms, last_process_ms, last_commit_ms)
 */
Datum
sg_pipeline_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgPipelineSlot *s = palloc(sizeof(SgPipelineSlot));
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		Datum		values[9];
		bool		nulls[9] = {false};
		bool		no_slot;
		TimestampTz next_start;
		SgBatchRecord last;
		int64		n;
		pid_t		pid;
		double		eps;

		if (!sg_copy_slot(i, s))
			continue;
		n = s->nhistory;
		if (n > 0)
			last = s->history[(n - 1) % SG_BATCH_HISTORY];
		pid = s->worker_pid;
		eps = s->events_per_sec;

		/*
		 * The moving average moves at batches only: a pipeline with nothing
		 * to read reports 0 once it has been idle for longer than 10 s and
		 * twice the gap before its last batch (a pipeline with a batch
		 * every 30 s is not idle between them).
		 */
		if (pid == 0)
			eps = 0;
		else if (n > 0 && s->last_batch_end > 0)
		{
			int64		gap = n >= 2 ? last.committed_at -
				s->history[(n - 2) % SG_BATCH_HISTORY].committed_at : 0;

			if (GetCurrentTimestamp() - s->last_batch_end > Max(SG_RATE_IDLE_USECS, 2 * gap))
				eps = 0;
		}
		no_slot = s->no_worker_slot;
		next_start = s->next_start;

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
		values[7] = CStringGetTextDatum(pid != 0 ? "running" :
										no_slot && s->wait_reason[0] != '\0' ?
										psprintf("waiting for a worker slot: %s", s->wait_reason) :
										no_slot ? "waiting for a worker slot" :
										next_start > GetCurrentTimestamp() ? "backing off after a failure" :
										"starting");
		values[8] = Int32GetDatum(s->worker);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * _pipeline_batches() -> the checkpoint log held in shared memory, of the
 * pipelines the caller may see (owner, members, superusers)
 */
Datum
sg_pipeline_batches(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgPipelineSlot *s = palloc(sizeof(SgPipelineSlot));
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgBatchRecord *copy;
		int64		n,
					k,
					from;
		int32		id;

		if (!sg_copy_slot(i, s))
			continue;
		copy = s->history;
		id = s->pipeline_id;
		if (!PipelineSlotsVisibleToCaller(id))
			continue;
		n = s->nhistory;
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
	}
	return (Datum) 0;
}

/*
 * _remote_runtime() -> (pipeline_id, side, server, connected, rtt_ms, last_error);
 * last_error (which can quote event values) only for the pipeline's owner,
 * its members and superusers
 */
Datum
sg_remote_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgPipelineSlot *s = palloc(sizeof(SgPipelineSlot));
	int			i,
				side;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgRemoteStatus *copy = s->remote;
		int32		id;
		bool		visible;

		if (!sg_copy_slot(i, s))
			continue;
		id = s->pipeline_id;
		visible = (copy[0].last_error[0] == '\0' && copy[1].last_error[0] == '\0') ||
			PipelineSlotsVisibleToCaller(id);
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
			nulls[5] = copy[side].last_error[0] == '\0' || !visible;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * _pipeline_histogram() -> (pipeline_id, le, count, sum_seconds, total):
 * cumulative counts of committed batches by duration (fetch to commit),
 * since the pipeline's slot was created (a server restart starts over,
 * as monitoring systems expect of counters).
 */
Datum
sg_pipeline_histogram(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgPipelineSlot *s = palloc(sizeof(SgPipelineSlot));
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < sg_max_pipelines; i++)
	{
		int64	   *counts = s->hist_counts;
		int64		total;
		int64		cum = 0;
		double		sum;
		int32		id;
		int			b;

		if (!sg_copy_slot(i, s))
			continue;
		id = s->pipeline_id;
		sum = s->hist_sum;
		total = s->nhistory;
		for (b = 0; b <= SG_HIST_BUCKETS; b++)
		{
			Datum		values[5];
			bool		nulls[5] = {false};

			if (b < SG_HIST_BUCKETS)
				cum += counts[b];
			values[0] = Int32GetDatum(id);
			values[1] = CStringGetTextDatum(b < SG_HIST_BUCKETS ?
											psprintf("%g", sg_hist_bounds[b]) : "+Inf");
			values[2] = Int64GetDatum(b < SG_HIST_BUCKETS ? cum : total);
			values[3] = Float8GetDatum(sum);
			values[4] = Int64GetDatum(total);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
