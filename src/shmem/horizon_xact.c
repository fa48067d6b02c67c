/*-------------------------------------------------------------------------
 *
 * horizon_xact.c
 *		Stream shared memory at the end of a (sub)transaction: the open
 *		appends released at COMMIT and ABORT (and a subtransaction's when
 *		it aborts), the committed-append rate, the pipelines and readers
 *		woken, the actions queued for the end (generation bumps, wake-ups,
 *		slots freed), and PREPARE refused where it cannot be allowed.
 *
 * The structures and the contract are in horizon_int.h.  The entries
 * published by horizon_seq.c are cleared here, in the transaction
 * callbacks, which PostgreSQL runs after the transaction has left the
 * proc array: first_seq is set to SG_NO_SEQ, then nused reset after a
 * write barrier, and only then are the stream's pipelines and readers
 * woken, so that a woken worker finds the horizon moved.
 *
 * LOCKS here:
 *	- an entry is written only by its owning backend: these callbacks run
 *	  in it.
 *	- SgStream.rate_mutex (spinlock) protects rate_sec and rate_count
 *	  (sg_record_rate at commit, HorizonAppendRate).
 *	- generation is an atomic, bumped here when a queued action says so;
 *	  slots are found and freed through horizon.c, which takes
 *	  SgShared->lock itself (HorizonFindSlot shared, HorizonFreeStream
 *	  exclusive).
 *	- SgStream.readable is a condition variable (its own spinlock).
 *	- sg_pending is backend-local (TopTransactionContext).
 *
 * Calls: horizon.c, and up through HorizonCommitWake (pipeline_slots.c
 * wakes the pipeline workers of a stream when appends to it commit).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "shmem/horizon_int.h"

#define SG_RATE_WINDOW			10	/* seconds averaged by append_rate */

/* pending actions for this transaction */
typedef enum SgPendingAction
{
	SG_PENDING_BUMP,			/* commit: bump the generation */
	SG_PENDING_BUMP_ALWAYS,		/* commit, abort or abort of its subtransaction: bump */
	SG_PENDING_WAKE,			/* commit: wake the stream's readers */
	SG_PENDING_FREE,			/* commit or abort: free the slot */
	SG_PENDING_FREE_ON_ABORT	/* the stream was created here: free on abort */
} SgPendingAction;

typedef struct SgPending
{
	int32		stream_id;
	SgPendingAction action;
	SubTransactionId subid;		/* (sub)transaction that queued it */
} SgPending;

static List *sg_pending = NIL;
static bool sg_callbacks_registered = false;

static void sg_xact_callback(XactEvent event, void *arg);
static void sg_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

void
HorizonRegisterCallbacks(void)
{
	if (!sg_callbacks_registered)
	{
		RegisterXactCallback(sg_xact_callback, NULL);
		RegisterSubXactCallback(sg_subxact_callback, NULL);
		sg_callbacks_registered = true;
	}
}

/*
 * A subtransaction's appends die with it, so its entries stop holding the
 * horizon back at once.  Entries of a committed subtransaction pass to its
 * parent.  Subtransaction ids grow, so the entries at or above an aborting
 * subtransaction's id are its own and its children's.  The abort has
 * already been recorded when this runs; its rows can never become visible.
 */
static void
sg_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	SgBackendAppends *mine;
	uint32		n,
				i;
	ListCell   *lc;

	foreach(lc, sg_pending)
	{
		SgPending  *p = lfirst(lc);

		if (event == SUBXACT_EVENT_COMMIT_SUB && p->subid == mySubid)
			p->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB && p->subid >= mySubid &&
				 p->action == SG_PENDING_BUMP_ALWAYS)
		{
			/* this backend cached what the subtransaction changed: reload */
			int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

			if (slot >= 0)
				pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
		}
		else if (event == SUBXACT_EVENT_ABORT_SUB && p->subid >= mySubid)
		{
			/* what the subtransaction created is gone; its changes too */
			if (p->action == SG_PENDING_FREE_ON_ABORT)
				p->action = SG_PENDING_FREE;
			else if (p->action == SG_PENDING_FREE)
				p->action = SG_PENDING_BUMP;
		}
	}
	if (sg_backend_area == NULL || MyProc == NULL)
		return;
	mine = sg_backend(SG_MY_PROC_INDEX);
	n = pg_atomic_read_u32(&mine->nused);
	for (i = 0; i < n; i++)
	{
		SgOpenAppend *e = &mine->entries[i];

		if (pg_atomic_read_u64(&e->first_seq) == SG_NO_SEQ)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB && e->subid == mySubid)
			e->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB && e->subid >= mySubid)
			pg_atomic_write_u64(&e->first_seq, SG_NO_SEQ);
	}
}

double
HorizonAppendRate(int slot)
{
	SgStream   *st = &sg_streams[slot];
	int64		now = (int64) (GetCurrentTimestamp() / USECS_PER_SEC);
	int64		total = 0;
	int			i;

	SpinLockAcquire(&st->rate_mutex);
	for (i = 0; i < SG_RATE_BUCKETS; i++)
		if (st->rate_sec[i] < now && st->rate_sec[i] >= now - SG_RATE_WINDOW)
			total += st->rate_count[i];
	SpinLockRelease(&st->rate_mutex);
	return (double) total / SG_RATE_WINDOW;
}

static void
sg_record_rate(SgStream *st, int64 count)
{
	int64		now = (int64) (GetCurrentTimestamp() / USECS_PER_SEC);
	int			b = (int) (now % SG_RATE_BUCKETS);

	SpinLockAcquire(&st->rate_mutex);
	if (st->rate_sec[b] != now)
	{
		st->rate_sec[b] = now;
		st->rate_count[b] = 0;
	}
	st->rate_count[b] += count;
	SpinLockRelease(&st->rate_mutex);
}

static void
sg_release_open_appends(bool committed)
{
	SgBackendAppends *mine;
	uint32		n,
				i,
				j;
	int32		woken[16];
	int			nwoken = 0;

	if (sg_backend_area == NULL || MyProc == NULL)
		return;
	mine = sg_backend(SG_MY_PROC_INDEX);
	n = pg_atomic_read_u32(&mine->nused);
	for (i = 0; i < n; i++)
	{
		SgOpenAppend *e = &mine->entries[i];

		if (committed && e->count > 0 &&
			pg_atomic_read_u64(&e->first_seq) != SG_NO_SEQ)
			sg_record_rate(&sg_streams[e->stream_slot], e->count);
		pg_atomic_write_u64(&e->first_seq, SG_NO_SEQ);
	}
	pg_write_barrier();
	pg_atomic_write_u32(&mine->nused, 0);

	/*
	 * Wake the pipelines reading what we appended, only now that our
	 * entries are gone: a woken worker must find the horizon moved.
	 */
	if (!committed)
		return;
	for (i = 0; i < n; i++)
	{
		SgOpenAppend *e = &mine->entries[i];
		int32		slot = e->stream_slot;

		if (e->count <= 0)
			continue;
		for (j = 0; j < (uint32) nwoken; j++)
			if (woken[j] == slot)
				break;
		if (j < (uint32) nwoken)
			continue;
		if (nwoken < (int) lengthof(woken))
			woken[nwoken++] = slot;
		if (HorizonCommitWake)
			HorizonCommitWake(sg_streams[slot].dbid, sg_streams[slot].stream_id);
		ConditionVariableBroadcast(&sg_streams[slot].readable);
	}
}

static void
sg_add_pending(int32 stream_id, SgPendingAction action)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	SgPending  *p = palloc(sizeof(SgPending));

	p->stream_id = stream_id;
	p->action = action;
	p->subid = GetCurrentSubTransactionId();
	sg_pending = lappend(sg_pending, p);
	MemoryContextSwitchTo(old);
	HorizonRegisterCallbacks();
}

/* Metadata of a stream changed: other backends reload after we commit. */
void
HorizonBumpGenerationAtCommit(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_BUMP);
}

/*
 * Metadata of a stream changed and this backend may have cached the
 * change already (alter_stream adding partitions): every backend reloads
 * when the transaction ends, committed or not, and when the
 * subtransaction that queued this aborts.
 */
void
HorizonBumpGenerationAtEnd(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_BUMP_ALWAYS);
}

/*
 * A reader moved positions that may let other readers of the stream go on
 * (past a switch point, repartition.c): wake the long-polls and pipeline
 * workers of the stream when this commits, as a committed append does.
 */
void
HorizonWakeReadersAtCommit(int32 stream_id)
{
	ListCell   *lc;

	foreach(lc, sg_pending)
	{
		SgPending  *p = lfirst(lc);

		if (p->stream_id == stream_id && p->action == SG_PENDING_WAKE)
			return;
	}
	sg_add_pending(stream_id, SG_PENDING_WAKE);
}

/* The stream is dropped: free its slot once the drop commits. */
void
HorizonFreeAtCommit(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_FREE);
}

/*
 * The stream was created by this transaction: if it aborts (or the
 * subtransaction that created it does), a slot attached meanwhile
 * describes a stream that never existed and must not stay taken.
 */
void
HorizonFreeOnAbort(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_FREE_ON_ABORT);
}

static void
sg_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (sg_backend_area != NULL && MyProc != NULL &&
				pg_atomic_read_u32(&sg_backend(SG_MY_PROC_INDEX)->nused) > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that appended to a stream"),
						 errdetail("The readable horizon of a stream cannot advance past a prepared transaction's appends."),
						 errhint("Append in a transaction that is committed directly.")));
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				if (p->action == SG_PENDING_BUMP_ALWAYS)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that changed the partition count of a stream"),
							 errdetail("Appends to the stream would wait for the prepared transaction, and the new count would reach other sessions only at their next reload."),
							 errhint("Change the partition count in a transaction that is committed directly.")));
			}
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				/*
				 * What must happen when the transaction ends (other sessions
				 * reloading a stream's metadata, a slot freed) would not
				 * happen at COMMIT PREPARED, which runs elsewhere.
				 */
				if (p->action != SG_PENDING_WAKE)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that created, dropped or changed a stream"),
							 errhint("Create, drop or change streams in a transaction that is committed directly.")));
			}
			break;
		case XACT_EVENT_PREPARE:
			/* only wake-ups left (a poll's): the prepared transaction goes without */
			sg_pending = NIL;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			sg_release_open_appends(true);
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				if (p->action == SG_PENDING_FREE)
					HorizonFreeStream(MyDatabaseId, p->stream_id);
				else if (p->action == SG_PENDING_WAKE)
				{
					int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

					if (HorizonCommitWake)
						HorizonCommitWake(MyDatabaseId, p->stream_id);
					if (slot >= 0)
						ConditionVariableBroadcast(&sg_streams[slot].readable);
				}
				else if (p->action == SG_PENDING_BUMP || p->action == SG_PENDING_BUMP_ALWAYS)
				{
					int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

					if (slot >= 0)
						pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
				}
			}
			sg_pending = NIL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			sg_release_open_appends(false);
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				if (p->action == SG_PENDING_FREE_ON_ABORT)
					HorizonFreeStream(MyDatabaseId, p->stream_id);
				else if (p->action == SG_PENDING_BUMP_ALWAYS)
				{
					int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

					if (slot >= 0)
						pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
				}
			}
			sg_pending = NIL;
			break;
		default:
			break;
	}
}
