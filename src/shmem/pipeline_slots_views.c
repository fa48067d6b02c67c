/*-------------------------------------------------------------------------
 *
 * pipeline_slots_views.c
 *		The runtime views over the pipeline slots: _pipeline_runtime and
 *		_pipeline_histogram; and copies of the slots for the views that
 *		show a pipeline's checkpoint log and remote ends (_pipeline_batches,
 *		_remote_runtime in api/pipeline_views.c).
 *
 * The slot struct and the contract are in pipeline_slots_int.h.  A view
 * (or a copy-out) reads a slot of the caller's database through a copy
 * taken under the slot's spinlock (sg_copy_slot), so that what it shows
 * of one pipeline is consistent; the identity fields are written under that spinlock too
 * (and the LWLock, pipeline_slots.c), so the copy has them whole.  No
 * other lock is taken here, and nothing in a slot is written.
 *
 * Calls up: none.  A pipeline's errors and its checkpoint log are shown
 * only to whom may see them: PipelineBatchesSnapshot and
 * PipelineRemoteSnapshot copy them out for every slot of the database, and
 * the views that show them (api/pipeline_views.c) filter the copies by
 * what the caller may see.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "core/compat.h"
#include "core/util.h"
#include "shmem/pipeline_slots_int.h"

PG_FUNCTION_INFO_V1(sg_pipeline_runtime);
PG_FUNCTION_INFO_V1(sg_pipeline_histogram);

/* events_per_sec is 0 after this long without a batch (at least) */
#define SG_RATE_IDLE_USECS	INT64CONST(10000000)

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
 * The checkpoint logs held in shared memory of this database's slots,
 * copied out into *rows (palloc'd in the current context, a row per slot,
 * its batches oldest first): their number.  Which of them the caller may
 * see is the view's business (_pipeline_batches, api/pipeline_views.c).
 */
int
PipelineBatchesSnapshot(SgPipelineBatchesRow **rows)
{
	SgPipelineSlot *s = palloc(sizeof(SgPipelineSlot));
	SgPipelineBatchesRow *out = palloc(sizeof(SgPipelineBatchesRow) * Max(sg_max_pipelines, 1));
	int			nrows = 0;
	int			i;

	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgPipelineBatchesRow *row;
		int64		n,
					k,
					from;

		if (!sg_copy_slot(i, s))
			continue;
		row = &out[nrows++];
		row->pipeline_id = s->pipeline_id;
		n = s->nhistory;
		from = Max(0, n - SG_BATCH_HISTORY);
		row->nbatches = (int) (n - from);
		row->batches = palloc(sizeof(SgBatchRecord) * Max(row->nbatches, 1));
		for (k = from; k < n; k++)
			row->batches[k - from] = s->history[k % SG_BATCH_HISTORY];
	}
	pfree(s);
	*rows = out;
	return nrows;
}

/*
 * The remote ends of this database's slots (server, connected, round trip,
 * last error), copied out into *rows (palloc'd in the current context, a
 * row per slot): their number.  Whether the caller may see a last error
 * (which can quote event values) is the view's business (_remote_runtime,
 * api/pipeline_views.c).
 */
int
PipelineRemoteSnapshot(SgRemoteRuntimeRow **rows)
{
	SgPipelineSlot *s = palloc(sizeof(SgPipelineSlot));
	SgRemoteRuntimeRow *out = palloc(sizeof(SgRemoteRuntimeRow) * Max(sg_max_pipelines, 1));
	int			nrows = 0;
	int			i,
				side;

	for (i = 0; i < sg_max_pipelines; i++)
	{
		SgRemoteStatus *copy = s->remote;
		SgRemoteRuntimeRow *row;

		if (!sg_copy_slot(i, s))
			continue;
		row = &out[nrows++];
		row->pipeline_id = s->pipeline_id;
		for (side = 0; side < 2; side++)
		{
			row->side[side].server = pstrdup(copy[side].server);
			row->side[side].connected = copy[side].connected;
			row->side[side].rtt_us = copy[side].rtt_us;
			row->side[side].last_error = pstrdup(copy[side].last_error);
		}
	}
	pfree(s);
	*rows = out;
	return nrows;
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
