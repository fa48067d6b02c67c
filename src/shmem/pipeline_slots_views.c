/*-------------------------------------------------------------------------
 *
 * pipeline_slots_views.c
 *		The runtime views over the pipeline slots: _pipeline_runtime,
 *		_pipeline_batches (the checkpoint log), _remote_runtime and
 *		_pipeline_histogram.
 *
 * The slot struct and the contract are in pipeline_slots_int.h.  A view
 * reads a slot of the caller's database through a copy taken under the
 * slot's spinlock (sg_copy_slot), so that what it shows of one pipeline is
 * consistent; the identity fields are written under that spinlock too
 * (and the LWLock, pipeline_slots.c), so the copy has them whole.  No
 * other lock is taken here, and nothing in a slot is written.
 *
 * Calls up: none.  A pipeline's errors and its checkpoint log are shown
 * only to whom may see them; whether the caller may is asked through a
 * callback installed by _PG_init (PipelineSlotsVisibleToCaller, views.c's
 * PipelineVisibleToCaller).
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
PG_FUNCTION_INFO_V1(sg_pipeline_batches);
PG_FUNCTION_INFO_V1(sg_pipeline_histogram);
PG_FUNCTION_INFO_V1(sg_remote_runtime);

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
