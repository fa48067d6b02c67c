/*-------------------------------------------------------------------------
 *
 * pipeline.h
 *		Pipelines: shared state (pipeline.c) and the worker (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_PIPELINE_H
#define SG_PIPELINE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "nodes/pg_list.h"
#include "storage/spin.h"
#include "utils/array.h"
#include "utils/tuplestore.h"

#include "streamguard.h"

#define SG_BATCH_HISTORY	64	/* checkpoint log entries per pipeline */
#define SG_HIST_BUCKETS		12	/* batch-duration histogram (metrics) */
#define SG_BATCH_SIZE		1000	/* create_pipeline's batch_size by default */
#define SG_KAFKA_SINK_BATCH_SIZE 10000	/* the same, for a Kafka sink */

typedef enum SgGuarantee
{
	SG_EXACTLY_ONCE,
	SG_AT_LEAST_ONCE,
	SG_AT_MOST_ONCE
} SgGuarantee;

typedef enum SgErrorPolicy
{
	SG_POLICY_STOP,
	SG_POLICY_SKIP,
	SG_POLICY_DEAD_LETTER
} SgErrorPolicy;

typedef enum SgSinkMode
{
	SG_SINK_TWO_PHASE,
	SG_SINK_OFFSETS
} SgSinkMode;

typedef enum SgStartFrom
{
	SG_START_BEGINNING,
	SG_START_END
} SgStartFrom;

/* the words of each, in enum order (pipeline_slots.c) */
extern const SgWordList SgGuaranteeWords;
extern const SgWordList SgErrorPolicyWords;
extern const SgWordList SgSinkModeWords;
extern const SgWordList SgStartFromWords;

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

typedef struct SgRemoteStatus
{
	char		server[NAMEDATALEN];	/* empty: no remote on this side */
	bool		connected;
	int64		rtt_us;
	char		last_error[256];
} SgRemoteStatus;

typedef struct SgPipelineSlot
{
	/* identity, protected by the slots' LWLock */
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
	bool		no_worker_slot;	/* the last start found no worker slot */
	char		wait_reason[128];	/* and why, when a cap refused it ('' otherwise) */
	int32		failures;		/* consecutive failed starts or batches */
	TimestampTz next_start;		/* backoff: not before this */
	double		events_per_sec;	/* exponential moving average */
	TimestampTz last_batch_end;
	SgBatchRecord history[SG_BATCH_HISTORY];
	int64		nhistory;		/* records ever written (ring index) */
	int64		hist_counts[SG_HIST_BUCKETS];	/* batches per duration bucket */
	double		hist_sum;		/* seconds over all batches counted */
	SgRemoteStatus remote[2];	/* [0] source, [1] sink */
	SgFaultPoint fault_point;
	SgFaultAction fault_action;
	int32		fault_count;
} SgPipelineSlot;

extern int	sg_max_pipelines;

extern Size PipelineShmemSize(void);
extern void PipelineShmemRequest(void);
extern void PipelineShmemInit(void);
extern bool PipelineCleanStart(void);

/* events_per_sec is 0 after this long without a batch (at least) */
#define SG_RATE_IDLE_USECS	INT64CONST(10000000)
extern SgPipelineSlot *PipelineSlot(Oid dbid, int32 pipeline_id, int32 worker, bool create);
extern SgPipelineSlot *PipelineSlotOrNull(Oid dbid, int32 pipeline_id, int32 worker);
extern int	PipelineRequestFence(Oid dbid, int32 pipeline_id, pid_t *pids, int max);
extern void PipelineWakePipeline(Oid dbid, int32 pipeline_id);
extern void PipelineResetBackoff(Oid dbid, int32 pipeline_id);
extern void PipelineFreeWorkers(Oid dbid, int32 pipeline_id, int32 worker);

/* a pipeline worker's bgw_main_arg: the pipeline and which of its workers */
#define SgWorkerArg(pipeline_id, worker) \
	UInt64GetDatum((uint64) (uint32) (pipeline_id) | ((uint64) (uint32) (worker) << 32))
#define SgWorkerArgPipeline(arg)	((int32) (DatumGetUInt64(arg) & 0xFFFFFFFF))
#define SgWorkerArgWorker(arg)		((int32) (DatumGetUInt64(arg) >> 32))
extern void PipelineFreeSlot(Oid dbid, int32 pipeline_id);
extern void PipelineFreeDatabase(Oid dbid);
extern void PipelineDropForStream(int32 stream_id);
extern int	PipelineSlotDatabases(Oid *dbids, int max);
extern void PipelineWakeStream(Oid dbid, int32 stream_id);
extern void PipelineWakeWorker(SgPipelineSlot *slot);

extern const double SgHistBounds[SG_HIST_BUCKETS];
extern void PipelineCountDuration(SgPipelineSlot *slot, double seconds);

/* twophase.c */
struct SgRemote;
extern char *PipelineGidPrefix(int32 pipeline_id);
extern char *PipelineGid(int32 pipeline_id, int32 worker, int64 epoch, int64 attempt);
extern char *PipelineSinkKey(int32 pipeline_id);
extern char *PipelineWorkerKey(int32 pipeline_id, int32 worker);
extern void PipelineSinkMarker(struct SgRemote *r, int32 pipeline_id, int32 worker, const char *gid);
extern char *PipelineResolveInDoubt(struct SgRemote *r, int32 pipeline_id, const char *name,
									int32 resolver, int32 nworkers);


/* pipeline.c: a pipeline row as the control calls see it */
typedef struct SgPipeRow
{
	int32		id;
	Oid			owner;
	char	   *stream;
	char	   *state;
	int64		epoch;
	int32		workers;
} SgPipeRow;
extern SgPipeRow PipelineLockExt(const char *name, Oid caller, bool fence, bool missing_ok);
extern SgPipeRow PipelineLock(const char *name, Oid caller, bool fence);
extern void PipelineExec(const char *sql, int nargs, Oid *types, Datum *values, int expect);
extern void PipelineSetState(int32 id, const char *state, bool bump_epoch);
extern void PipelineNotifyChange(int32 pipeline_id);
extern char *PipelineConsumerName(const char *pipeline);

/* pipeline_validate.c */
extern void PipelineValidateSql(const char *sql);
extern void PipelineValidateSqlFor(const char *sql, bool kafka);
extern int	PipelineCheckKafkaSource(const char *server, const char *topic);
extern char *PipelineValidateSelect(const char *sql);
extern char *PipelineOutputColumns(const char *sql);
extern char *PipelineQuoteTable(const char *name);
extern void PipelineCheckRemoteSink(const char *server, const char *table, const char *cols, const char *mode,
									const char *conflict);
extern List *PipelineOutputNames(const char *sql);
extern TupleDesc PipelineOutputDesc(const char *sql);
extern char *PipelineCheckSinkConflict(const char *sql, ArrayType *arr);
extern int	PipelineCheckRemoteSource(const char *server, const char *stream);
extern void PipelineCheckRemoteReset(int32 pipeline_id, Oid owner, int32 partition, int64 seq);
extern void PipelineCheckBatchSize(int32 n);
extern void PipelineCheckRetry(int32 max_attempts, Interval *backoff, Interval *max_backoff);
extern void PipelineCheckBatchTimeout(Interval *iv);
extern void PipelineCheckWorkers(int32 workers);
extern void PipelineCheckWorkersRemote(int32 workers, const char *source_server, const char *sink_server);

/* batchexec.c: a pipeline's SQL as its owner */
typedef struct SgOwnerContext
{
	Oid			save_user;
	int			save_sec;
	int			nest;
	int			timeout_ms;
} SgOwnerContext;

extern void BatchEnterOwner(SgOwnerContext *ctx, Oid owner, const char *search_path, int timeout_ms,
							Tuplestorestate *store, TupleDesc desc, int64 n);
extern void BatchLeaveOwner(SgOwnerContext *ctx);

/* worker.c */
extern PGDLLEXPORT void PipelineWorkerMain(Datum arg);

#endif							/* SG_PIPELINE_H */
