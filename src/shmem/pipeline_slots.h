/*-------------------------------------------------------------------------
 *
 * pipeline_slots.h
 *		Pipelines in shared memory (pipeline_slots.c, the table;
 *		pipeline_slots_state.c, one slot's runtime fields;
 *		pipeline_slots_views.c, the runtime views): one slot per worker of
 *		a pipeline, its wake-ups, batch history and histogram, fault
 *		injection, and the runtime views that read them (or copies of the
 *		slots for the views that filter them, api/pipeline_views.c).
 *
 * The slot is opaque: those files own it and take its locks, and
 * pipeline_slots_int.h says which lock protects which field.  A slot
 * pointer stays valid for the life of the server (the array never moves);
 * what it holds is a pipeline's worker until the slot is freed.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_PIPELINE_SLOTS_H
#define SG_PIPELINE_SLOTS_H

#include "postgres.h"

#include "datatype/timestamp.h"

typedef struct SgPipelineSlot SgPipelineSlot;

/* the GUC sizing it (registered by streamguard.c) */
extern int	sg_max_pipelines;

/* deterministic fault-injection points (test-only; see inject_fault) */
typedef enum SgFaultPoint
{
	SG_FAULT_NONE = 0,
	SG_FAULT_MID_BATCH,			/* after the fetch, before the user SQL */
	SG_FAULT_BEFORE_COMMIT,		/* after the user SQL, before the commit */
	SG_FAULT_BETWEEN_COMMITS,	/* between the two commits (weaker modes) */
	SG_FAULT_AFTER_COMMIT,		/* right after the (last) commit */
	SG_FAULT_AFTER_PREPARE,		/* remote PREPAREd, local not committed */
	SG_FAULT_AFTER_LOCAL_COMMIT,	/* local committed, no COMMIT PREPARED yet */
	SG_FAULT_AFTER_REMOTE_COMMIT,	/* remote committed, local not (offsets) */
	SG_FAULT_MID_COPY,			/* rows copied to the remote, not committed */
	SG_FAULT_BEFORE_FENCE,		/* a batch about to take the fence */
	SG_FAULT_REMOTE_END_SENT,	/* remote PREPARE / COMMIT sent, not confirmed */
	SG_FAULT_READ_AHEAD			/* remote source: next batch's read in flight */
} SgFaultPoint;

typedef enum SgFaultAction
{
	SG_FAULT_KILL,				/* SIGKILL itself: a real crash */
	SG_FAULT_ERROR,				/* ereport(ERROR) */
	SG_FAULT_EXIT,				/* exit(1) without cleanup of the batch */
	SG_FAULT_HOLD				/* wait until disarmed (at most 60 s) */
} SgFaultAction;

/*
 * One committed batch, as the worker hands it to PipelineSlotRecordBatch
 * (which copies it into the slot's history under the slot's spinlock).
 */
typedef struct SgBatchRecord
{
	int64		batch_id;
	int64		epoch;
	TimestampTz committed_at;
	int32		events_in;
	int64		rows_out;
	int64		first_seq;		/* over all partitions of the batch */
	int64		last_seq;
	int32		partitions;		/* partitions the batch read from */
	int32		fetch_us;
	int32		process_us;
	int32		commit_us;
} SgBatchRecord;

/* bytes of a slot's wait reason (the caps that keep a worker waiting) */
#define SG_WAIT_REASON_LEN	128

/*
 * The slots of this database as the copy-outs of pipeline_slots_views.c
 * hand them to the views that filter them (api/pipeline_views.c): plain
 * rows, palloc'd in the current memory context, not shared.
 */
typedef struct SgPipelineBatchesRow
{
	int32		pipeline_id;
	int			nbatches;
	SgBatchRecord *batches;		/* the checkpoint log, oldest first */
} SgPipelineBatchesRow;

typedef struct SgRemoteSideRow
{
	char	   *server;			/* "": no remote on this side */
	bool		connected;
	int64		rtt_us;
	char	   *last_error;		/* "": none */
} SgRemoteSideRow;

typedef struct SgRemoteRuntimeRow
{
	int32		pipeline_id;
	SgRemoteSideRow side[2];	/* [0] source, [1] sink */
} SgRemoteRuntimeRow;

extern Size PipelineShmemSize(void);
extern void PipelineShmemRequest(void);
extern void PipelineShmemInit(void);
extern bool PipelineCleanStart(void);

/* finding, making and freeing slots (pipeline_slots.c) */
extern SgPipelineSlot *PipelineSlot(Oid dbid, int32 pipeline_id, int32 worker, bool create);
extern SgPipelineSlot *PipelineSlotOrNull(Oid dbid, int32 pipeline_id, int32 worker);
extern void PipelineFreeWorkers(Oid dbid, int32 pipeline_id, int32 worker);
extern void PipelineFreeSlot(Oid dbid, int32 pipeline_id);
extern void PipelineFreeDatabase(Oid dbid);
extern int	PipelineSlotDatabases(Oid *dbids, int max);

/* wake-ups and control calls (pipeline_slots.c) */
extern int	PipelineRequestFence(Oid dbid, int32 pipeline_id, pid_t *pids, int max);
extern void PipelineWakePipeline(Oid dbid, int32 pipeline_id);
extern void PipelineResetBackoff(Oid dbid, int32 pipeline_id);
extern void PipelineWakeStream(Oid dbid, int32 stream_id);
extern void PipelineWakeWorker(SgPipelineSlot *slot);

/* one slot: the source stream (identity; pipeline_slots.c) */
extern void PipelineSlotSetStream(SgPipelineSlot *slot, int32 stream_id);
extern int32 PipelineSlotStream(SgPipelineSlot *slot);

/* one slot: its worker (the pipeline worker itself; pipeline_slots_state.c) */
extern void PipelineSlotWorkerStarted(SgPipelineSlot *slot);
extern void PipelineSlotWorkerExited(SgPipelineSlot *slot);
extern void PipelineSlotCleanExit(SgPipelineSlot *slot);
extern bool PipelineSlotFenceRequested(SgPipelineSlot *slot);
extern void PipelineSlotClearFence(SgPipelineSlot *slot);
extern void PipelineSlotRecordBatch(SgPipelineSlot *slot, const SgBatchRecord *r, double seconds);
extern void PipelineSlotSetRemote(SgPipelineSlot *slot, int side, const char *server, bool connected,
								  int64 rtt_us, const char *error);
extern bool PipelineSlotFaultArmed(SgPipelineSlot *slot, SgFaultPoint point);
extern bool PipelineSlotTakeFault(SgPipelineSlot *slot, SgFaultPoint point, SgFaultAction *action);

/* one slot: its supervision (the maintenance worker) and inject_fault (the same) */
extern void PipelineSlotWorkerGone(SgPipelineSlot *slot, TimestampTz now);
extern bool PipelineSlotBackingOff(SgPipelineSlot *slot, TimestampTz now);
extern void PipelineSlotStarting(SgPipelineSlot *slot);
extern bool PipelineSlotSetWaiting(SgPipelineSlot *slot, bool no_worker_slot, const char *why);
extern void PipelineSlotArmFault(SgPipelineSlot *slot, SgFaultPoint point, SgFaultAction action,
								 int32 count);

/* copies of this database's slots for the views (pipeline_slots_views.c) */
extern int	PipelineBatchesSnapshot(SgPipelineBatchesRow **rows);
extern int	PipelineRemoteSnapshot(SgRemoteRuntimeRow **rows);

#endif							/* SG_PIPELINE_SLOTS_H */
