/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The state of one pipeline worker, passed down through the files
 *		that run its batches.
 *
 * The pipeline worker is cut by job, from the top:
 *	worker.c		the process: start, definition, the routines chosen and
 *					opened, the loop, errors and backoff, exit
 *	batch.c			one batch by guarantee: the fence, the transactions,
 *					counters and the checkpoint log, the routines' steps
 *	source_*.c, sink_*.c	the kinds of source and sink (routine.h)
 *	window*.c		a window pipeline's windows (the window sink's work)
 *	twophase.c		names left on a remote sink, in-doubt resolution
 *	batchexec.c		the user's SQL as the owner: plain, isolated event by
 *					event with the error policy, dedup and skip filters
 *	workerstate.c	the steps they all use: transactions, fault injection,
 *					remote ends, error records
 * Every function gets the worker's state as its first argument; nothing
 * about the running pipeline lives in a file-level variable.  SgWorker
 * holds what every kind of source and sink needs; what one kind keeps is
 * behind source_state or sink_state, in that kind's file.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_WORKER_H
#define SG_WORKER_H

#include "postgres.h"

#include "executor/spi.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "utils/elog.h"
#include "utils/tuplestore.h"

/*
 * What the worker's files use from the modules below and beside them: they
 * include this header, and these through it.
 */
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "io/remote.h"
#include "pipeline/batchexec.h"
#include "pipeline/pipeline.h"
#include "pipeline/routine.h"
#include "pipeline/twophase.h"
#include "pipeline/window.h"
#include "shmem/horizon.h"
#include "shmem/pipeline_slots.h"
#include "stream/append.h"
#include "stream/consumer.h"
#include "stream/repartition.h"
#include "stream/store.h"

/* the pipeline's definition, loaded once at start */
typedef struct SgPipeDef
{
	int32		id;
	char	   *name;
	char	   *stream;			/* source stream, NULL once dropped */
	char	   *sql;
	SgGuarantee guarantee;
	int			batch_size;
	SgErrorPolicy policy;
	bool		dedup;
	int64		dedup_window_us;
	Oid			owner;
	char	   *search_path;
	int64		epoch;			/* this worker's, taken at start */
	int64		generation;		/* the pipeline's: bumped by control calls */
	int32		worker;			/* which of the pipeline's workers */
	int32		nworkers;		/* it owns partitions p % nworkers = worker */
	char	   *source_server;	/* remote source, or NULL */
	bool		source_kafka;	/* ... a Kafka server: remote_stream is a topic */
	char	   *remote_stream;
	int			remote_nparts;
	char	   *sink_server;	/* remote sink, or NULL */
	char	   *sink_table;		/* ... its table, or a Kafka sink's topic */
	bool		sink_kafka;		/* the sink server is a Kafka server */
	bool		two_phase;		/* exactly_once to the sink through 2PC */
	char	  **sink_conflict;	/* upserting sink: ON CONFLICT columns */
	int			sink_nconflict; /* 0: a plain (COPY) sink */
	int			batch_timeout_ms;	/* bound on each run of the user's SQL */
	bool		allow_source_append;	/* the SQL may append to the source */
	int			max_attempts;	/* failed attempts before isolation */
	long		retry_backoff_ms;	/* first backoff, doubling ... */
	long		max_backoff_ms; /* ... up to this */
} SgPipeDef;

/* an event the owner asked to skip (skip_event), loaded at start */
typedef struct SgSkip
{
	int32		partition;
	int64		seq;
} SgSkip;

typedef struct SgWorker
{
	SgPipeDef	def;
	SgPipelineSlot *slot;		/* our slot in shared memory */
	TupleDesc	event_desc;		/* columns of relation "batch" (the source's) */
	MemoryContext batch_cxt;	/* reset at the start of every batch */
	SPIPlanPtr	user_plan;		/* the pipeline's SQL, prepared once */
	char	   *consumer_name;	/* "pipeline:<name>" */
	SgSkip	   *skips;
	int			nskips;
	bool		deadline_armed; /* BatchDeadlineArm: the timeout is running */

	/* where the events come from and where the effects go (routine.h) */
	const SgSourceRoutine *source;
	void	   *source_state;	/* the source kind's own */
	const SgSinkRoutine *sink;
	void	   *sink_state;		/* the sink kind's own */

	/* the current batch */
	int64		batch_skipped;	/* skipped by skip_event or the policy */
	int64		batch_dead;		/* dead-lettered by the policy */
	char	   *stop_error;		/* why the pipeline stops (TopMemoryContext) */
	char	   *last_error;		/* the last failed batch's error (TopMemoryContext) */
} SgWorker;

typedef enum
{
	SG_BATCH_EMPTY,
	SG_BATCH_DONE,
	SG_BATCH_FENCED,
	SG_BATCH_STOPPED			/* error policy stop: pipeline failed */
} SgBatchResult;

#define SG_SIDE_SOURCE 0
#define SG_SIDE_SINK 1

/* workerstate.c */
extern void WorkerBegin(const char *what);
extern void WorkerCommit(void);
extern void WorkerAbort(void);
extern void WorkerFault(SgWorker *w, SgFaultPoint point);
extern SgRemote *WorkerRemote(SgWorker *w, SgRemote *r, int side);
extern void WorkerRemoteStatus(SgWorker *w, int side, SgRemote *r);
extern void WorkerRecordError(SgWorker *w, const char *message, bool fail);
extern void WorkerWatchServers(void);
extern bool WorkerServersChanged(SgWorker *w);
extern bool WorkerTransientError(ErrorData *edata);

/* batchexec.c: the worker's part */
typedef int64 (*SgRunSql) (SgWorker *w, Tuplestorestate *store, int64 n);
extern Tuplestorestate *BatchStore(SgWorker *w, int max_kbytes);
extern SPIPlanPtr BatchOwnerEnter(SgWorker *w, SgOwnerContext *ctx, Tuplestorestate *store, int64 n);
extern void BatchDeadlineArm(SgWorker *w);
extern void BatchDeadlineDisarm(SgWorker *w);
extern int	BatchOwnerTimeoutMs(SgWorker *w);
extern int64 BatchRunSql(SgWorker *w, Tuplestorestate *store, int64 n);
extern int64 BatchRunIsolated(SgWorker *w, Tuplestorestate *store, SgRunSql run);
extern bool BatchApplyPolicy(SgWorker *w, TupleTableSlot *ev, ErrorData *edata);
extern Tuplestorestate *BatchDedupFilter(SgWorker *w, Tuplestorestate *store, int *n);
extern Tuplestorestate *BatchSkipFilter(SgWorker *w, Tuplestorestate *store, int *n);
extern void BatchDeadLetter(SgWorker *w, TupleTableSlot *ev, const char *message, const char *sqlstate);

/* batch.c */
extern SgBatchResult BatchRun(SgWorker *w, bool isolate);
extern void BatchCloseRoutines(SgWorker *w);

/*
 * A sink's view of the source: the positions it settles against
 * (routine.h).
 */
static inline void
SourcePositions(SgWorker *w, SgBatch *b, int64 *pos, int nparts)
{
	w->source->positions(w, b, pos, nparts);
}

static inline void
SourceAdvance(SgWorker *w, SgBatch *b, int64 *to, int nparts)
{
	w->source->advance(w, b, to, nparts);
}

#endif							/* SG_WORKER_H */
