/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The state of one pipeline worker, passed down through the files
 *		that run its batches.
 *
 * The pipeline worker is cut by job, from the top:
 *	worker.c		the process: start, definition, the loop, errors and
 *					backoff, exit
 *	batch.c			one batch by guarantee: the fence, the transactions,
 *					counters and the checkpoint log
 *	source.c		reading a batch and advancing positions (local stream
 *					or remote streamguard server)
 *	kafka_source.c	... or a Kafka topic (source.c dispatches to it)
 *	kafka_sink.c	a Kafka topic as the sink: producer, transactions,
 *					checkpoints in Kafka and recovery from them
 *	sink.c			remote sinks: the owner's SELECT rendered as COPY, the
 *					remote transaction (two_phase or offsets), settling
 *					what a crash left between the databases
 *	batchexec.c		the user's SQL as the owner: plain, isolated event by
 *					event with the error policy, dedup and skip filters
 *	workerstate.c	the steps they all use: transactions, fault injection,
 *					remote ends, error records
 * Every function gets the worker's state as its first argument; nothing
 * about the running pipeline lives in a file-level variable.
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

typedef struct SgKafkaSource SgKafkaSource;	/* kafka_source.c */
typedef struct SgKafkaSink SgKafkaSink;	/* kafka_sink.c */

typedef struct SgWorker
{
	SgPipeDef	def;
	SgPipelineSlot *slot;		/* our slot in shared memory */
	TupleDesc	event_desc;		/* columns of relation "batch" */
	MemoryContext batch_cxt;	/* reset at the start of every batch */
	SPIPlanPtr	user_plan;		/* the pipeline's SQL, prepared once */
	char	   *consumer_name;	/* "pipeline:<name>" */
	SgSkip	   *skips;
	int			nskips;

	/* remote ends */
	SgRemote	src_remote;
	SgRemote	sink_remote;
	char	   *copy_sql;		/* COPY <sink or staging table> (<cols>) FROM STDIN */
	char	   *upsert_sql;		/* upserting sink: staging table -> sink */
	char	   *stage_table;	/* upserting sink: its staging table */
	char	   *stage_ddl[2];	/* ... created by these, once per connection */
	bool		stage_ready;	/* ... and known to exist */
	bool		need_resolve;	/* settle in-doubt work before the next batch */
	bool		deadline_armed; /* BatchDeadlineArm: the timeout is running */
	char	   *done_gid;		/* COMMIT PREPARED done; local record to drop */
	int64		sink_attempts;	/* remote transactions tried by this worker */
	uint32		remote_rotor;	/* remote source: partition read first */
	char	   *remote_read_sql;	/* remote source: its read (source.c) */
	uint64		read_ahead;		/* remote source: ticket of the next batch's
								 * read, sent ahead (0: none) ... */
	int64	   *read_ahead_pos; /* ... from these positions ... */
	uint32		read_ahead_rotor;	/* ... with this rotor */
	StringInfo	copy_buf;		/* remote sink: rows being rendered */
	bool		sink_end_pending;	/* remote sink: the remote transaction's end
									 * sent, not confirmed (SinkConfirm) */
	uint64		sink_ticket;	/* ... the ticket of its last result */
	int			sink_moved;		/* ... offsets mode: partitions it moves */
	char	   *sink_sql;		/* ... the message (batch memory) */
	int64	   *remote_lost;	/* remote source: seqs retention removed ahead
								 * of each position, found by the last fetch */
	bool		sink_resolved;	/* SinkResolve ran in this batch's transaction */
	bool		sink_dead_pending;	/* offsets mode: dead letters of ours may be
									 * left in the sink's table */
	SgKafkaSource *kafka;		/* Kafka source: consumer and positions */
	SgKafkaSink *kafka_sink;	/* Kafka sink: producer and checkpoints */

	/* the current batch */
	int64		batch_skipped;	/* skipped by skip_event or the policy */
	int64		batch_dead;		/* dead-lettered by the policy */
	char	   *stop_error;		/* why the pipeline stops (TopMemoryContext) */
	char	   *last_error;		/* the last failed batch's error (TopMemoryContext) */

	SgWindow   *window;			/* a window pipeline's (window.c), or NULL */
	/* runs the pipeline's SQL instead of BatchRunSql's plain run (window.c) */
	int64		(*run_sql) (struct SgWorker *w, Tuplestorestate *store, int64 n);
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
extern SgRemote *WorkerRemote(SgWorker *w, int side);
extern void WorkerRemoteStatus(SgWorker *w, int side, SgRemote *r);
extern void WorkerRecordError(SgWorker *w, const char *message, bool fail);
extern bool WorkerTransientError(ErrorData *edata);

/* batchexec.c: the worker's part */
extern Tuplestorestate *BatchStore(SgWorker *w, int max_kbytes);
extern SPIPlanPtr BatchOwnerEnter(SgWorker *w, SgOwnerContext *ctx, Tuplestorestate *store, int64 n);
extern void BatchDeadlineArm(SgWorker *w);
extern void BatchDeadlineDisarm(SgWorker *w);
extern int	BatchOwnerTimeoutMs(SgWorker *w);
extern int64 BatchRunSql(SgWorker *w, Tuplestorestate *store, int64 n);
extern int64 BatchRunIsolated(SgWorker *w, Tuplestorestate *store);
extern bool BatchApplyPolicy(SgWorker *w, TupleTableSlot *ev, ErrorData *edata);
extern Tuplestorestate *BatchDedupFilter(SgWorker *w, Tuplestorestate *store, int *n);
extern Tuplestorestate *BatchSkipFilter(SgWorker *w, Tuplestorestate *store, int *n);
extern void BatchDeadLetter(SgWorker *w, TupleTableSlot *ev, const char *message, const char *sqlstate);

/* source.c */
extern SgStreamMeta *SourceOpen(SgWorker *w);
extern int	SourceFetch(SgWorker *w, SgStreamMeta *meta, Tuplestorestate *store,
						int64 *first, int64 *last, bool advance);
extern void SourceAdvance(SgWorker *w, SgStreamMeta *meta, int64 *last, int nparts);
extern void SourcePositions(SgWorker *w, SgStreamMeta *meta, int64 *pos, int nparts);
extern int	SourcePartitions(SgWorker *w);

/* kafka_source.c */
extern int	KafkaSourcePartitions(SgWorker *w);
extern int	KafkaSourceFetch(SgWorker *w, Tuplestorestate *store, int64 *first, int64 *last, bool advance);
extern void KafkaSourceAdvance(SgWorker *w, int64 *last, int nparts);
extern void KafkaSourceClose(SgWorker *w);

/* kafka_sink.c */
extern bool KafkaSinkResolve(SgWorker *w, SgStreamMeta *meta, int nparts);
extern void KafkaSinkNoteFrom(SgWorker *w, SgStreamMeta *meta, int nparts);
extern int64 KafkaSinkWrite(SgWorker *w, SgStreamMeta *meta, Tuplestorestate *store, int64 n, int nparts,
							int64 events_in);
extern void KafkaSinkClose(SgWorker *w);

/* sink.c */
extern void SinkSetup(SgWorker *w, List *cols);
extern bool SinkResolve(SgWorker *w, SgStreamMeta *meta);
extern void SinkForgetCommitted(SgWorker *w);
extern StringInfo SinkRunSelect(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows,
								SgRemote *stream);
extern char *SinkWrite(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows,
					   int64 *first, int64 *last, int nparts);
extern void SinkConfirm(SgWorker *w);
extern int64 SinkRunIsolated(SgWorker *w, Tuplestorestate *store, int64 *first, int64 *last,
							 int nparts, char **gid);
extern void SinkRecordPrepared(SgWorker *w, const char *gid);
extern void SinkCommitPrepared(SgWorker *w, const char *gid);

/* batch.c */
extern SgBatchResult BatchRun(SgWorker *w, bool isolate);

#endif							/* SG_WORKER_H */
