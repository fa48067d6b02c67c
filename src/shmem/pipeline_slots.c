/*-------------------------------------------------------------------------
 *
 * pipeline_slots.c
 *		Pipelines in shared memory: their slots, the wake-ups, the batch
 *		history and duration histogram, the runtime views that read them,
 *		and the supervisor that keeps one worker per running pipeline (run
 *		by each database's maintenance worker).
 *
 * One SgPipelineSlot per pipeline (streamguard.max_pipelines of them),
 * found by (database, pipeline id).  The slot array's identity fields are
 * protected by the "streamguard pipelines" LWLock; each slot's runtime
 * fields by its spinlock.  Slots hold what must be cheap to read (worker
 * pid, rates, the recent batches) or must not survive a crash (fault
 * injection); durable counters live in the pipeline row.
 *
 * This file calls nothing above it: the pipeline SQL API (pipeline.c), the
 * worker (worker.c) and the maintenance worker call into it.
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
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "pipeline/pipeline.h"
#include "streamguard.h"

PG_FUNCTION_INFO_V1(sg_pipeline_runtime);
PG_FUNCTION_INFO_V1(sg_pipeline_batches);
PG_FUNCTION_INFO_V1(sg_pipeline_histogram);
PG_FUNCTION_INFO_V1(sg_remote_runtime);

int			sg_max_pipelines = 64;

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
			s->dbid = InvalidOid;
			s->pipeline_id = 0;
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
		{
			s->dbid = InvalidOid;
			s->pipeline_id = 0;
		}
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
const double SgHistBounds[SG_HIST_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10
};

/* count one committed batch of `seconds` (caller holds slot->mutex) */
void
PipelineCountDuration(SgPipelineSlot *slot, double seconds)
{
	int			b;

	for (b = 0; b < SG_HIST_BUCKETS; b++)
		if (seconds <= SgHistBounds[b])
		{
			slot->hist_counts[b]++;
			break;
		}
	slot->hist_sum += seconds;
}

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
		if (!PipelineVisibleToCaller(id))
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
			PipelineVisibleToCaller(id);
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
											psprintf("%g", SgHistBounds[b]) : "+Inf");
			values[2] = Int64GetDatum(b < SG_HIST_BUCKETS ? cum : total);
			values[3] = Float8GetDatum(sum);
			values[4] = Int64GetDatum(total);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
