/*-------------------------------------------------------------------------
 *
 * pipeline_slots_state.c
 *		One pipeline slot's runtime fields: its worker (start, exit, the
 *		fence it is asked to honour), each committed batch (history, rate,
 *		duration histogram), its remote ends, fault injection, and the
 *		supervisor's view of the worker (failures, backoff, waiting).
 *
 * The slot struct and the contract are in pipeline_slots_int.h.  The
 * callers hold a slot pointer (PipelineSlot, pipeline_slots.c), which
 * stays valid for the life of the server.
 *
 * LOCKS here: only the slot's spinlock (mutex), around every read and
 * write of the fields below, each for a few plain instructions:
 *	- worker_pid, worker_procno and clean_exit: the worker at its start
 *	  and exit, the supervisor when it finds the worker gone or starts it;
 *	- fence_requested: the worker clears it at start and reads it before
 *	  each batch (control calls set it, pipeline_slots.c);
 *	- no_worker_slot, wait_reason, failures and next_start: the
 *	  supervisor; each committed batch resets the backoff;
 *	- events_per_sec, last_batch_end, history, nhistory, hist_counts and
 *	  hist_sum: the worker after each committed batch;
 *	- remote: the worker, whenever a remote end or Kafka client changes
 *	  state;
 *	- fault_point, fault_action and fault_count: inject_fault arms, the
 *	  worker fires.
 * Identity fields are not written here (pipeline_slots.c, under the
 * LWLock and the spinlock).
 *
 * Calls: none in the other files of the module.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "shmem/pipeline_slots_int.h"

/* upper bounds (seconds) of the batch-duration histogram's buckets */
const double sg_hist_bounds[SG_HIST_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10
};

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
