/*-------------------------------------------------------------------------
 *
 * pipeline_slots_int.h
 *		What the files of the pipeline slots share, and only they: the
 *		slot struct, the array that holds the slots and the contract of
 *		who writes which field under which lock.  Included by
 *		src/shmem/pipeline_slots*.c only; the API is shmem/pipeline_slots.h.
 *
 *		pipeline_slots.c		the shared memory, the slots found, made and
 *								freed, their identity (the source stream),
 *								the wake-ups and the control calls' fence
 *		pipeline_slots_state.c	one slot's runtime fields: its worker, the
 *								batches it commits, remote ends, faults,
 *								the supervisor's backoff
 *		pipeline_slots_views.c	the runtime views, from a copy of a slot,
 *								and copies of the slots for api's views
 *
 * The three share the struct and its array only: none calls another.
 *
 * One SgPipelineSlot per worker of a pipeline (streamguard.max_pipelines
 * of them), found by (database, pipeline id, worker).  Slots hold what
 * must be cheap to read (worker pid, rates, the recent batches) or must
 * not survive a crash (fault injection); durable counters live in the
 * pipeline row.  The slot struct is private to the files above: the
 * pipeline worker (worker.c and the files of its batch), the maintenance
 * worker's supervisor (maintenance.c) and the control calls (pipeline.c,
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
 * Calls up: none.  A pipeline's errors and its checkpoint log are shown
 * only to whom may see them by the views of api/pipeline_views.c, which
 * filter the copies pipeline_slots_views.c makes of the slots.  The
 * pipeline SQL API (pipeline.c), the worker (worker.c), the maintenance
 * worker and those views call into these files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_PIPELINE_SLOTS_INT_H
#define SG_PIPELINE_SLOTS_INT_H

#include "storage/lwlock.h"
#include "storage/spin.h"

#include "shmem/pipeline_slots.h"

#define SG_BATCH_HISTORY	64	/* checkpoint log entries per pipeline */
#define SG_HIST_BUCKETS		12	/* batch-duration histogram (metrics) */

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

/* the shared memory (pipeline_slots.c attaches it) */
extern SgPipelineShared *sg_pipes;

/* upper bounds (seconds) of the batch-duration histogram's buckets */
extern const double sg_hist_bounds[SG_HIST_BUCKETS];

#endif							/* SG_PIPELINE_SLOTS_INT_H */
