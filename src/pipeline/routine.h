/*-------------------------------------------------------------------------
 *
 * routine.h
 *		The routines of a pipeline's source and sink: what each kind of
 *		source and each kind of sink does at each step of a batch.
 *
 * A pipeline reads events from its source and puts what its SQL makes of
 * them into its sink.  Each kind of source and of sink is a constant
 * struct of callbacks (SgSourceRoutine, SgSinkRoutine), the way PostgreSQL
 * reaches a foreign-data wrapper or a table access method: worker.c
 * chooses the two routines once, from the definition, and the batch loop
 * (batch.c) drives every batch through the steps below without ever
 * asking which kinds it runs.  What a kind keeps between batches is its
 * own: a state struct declared in its file, which the worker holds only
 * as an opaque pointer (source_state, sink_state).  A new kind is a new
 * routine in files of its own and one more case where worker.c chooses.
 *
 *	source_local.c	a stream of this database, read through the pipeline's
 *					consumer
 *	source_remote.c	a stream on another streamguard server, over libpq
 *	source_kafka.c	a Kafka topic, through librdkafka
 *	sink_sql.c		the pipeline's SQL in this database, nothing more
 *	sink_window.c	a window pipeline: the SQL evaluates each event, window*.c
 *					keep the windows and emit the closed ones
 *	sink_remote.c	a table on a remote PostgreSQL server: two_phase, offsets
 *					or a plain remote transaction (sink_remote_write.c)
 *	sink_kafka.c	a Kafka topic: a Kafka transaction with a checkpoint, or
 *					acknowledged messages (sink_kafka_messages.c)
 *
 * The steps of a batch, in order (batch.c; docs/internals.md draws them).
 * T1 is the batch's first local transaction, which starts with the fence:
 *	T1	source->begin		the batch's partitions (b->nparts), the local
 *							stream (b->stream) if it reads one
 *		sink->begin			settle what a failed batch or a crash left
 *							between this database and the sink
 *		sink->before_fetch	note what the sink needs from before the fetch
 *		source->fetch		the events into b->store, first/last seq per
 *							partition; the positions move with them when
 *							b->advance (every guarantee but at_least_once)
 *		sink->empty			only when nothing was fetched: what the sink
 *							does anyway; 0 rows out and the batch commits
 *							as an empty one
 *		(skip and dedup filters; at_most_once commits T1 here and runs the
 *		 rest in T2)
 *		sink->write			run the SQL or send its rows; rows out, or -1
 *							when the error policy stops the pipeline
 *		(counters, checkpoint log)
 *		sink->confirm		what the sink must know before the local COMMIT
 *		COMMIT
 *		sink->committed		what the sink does once the batch committed here
 *	T2	source->advance		at_least_once only: the positions, after the
 *							effects committed
 * After a failed batch the worker calls sink->close and source->close
 * (worker.c); it asks sink->own_error whether the failure was the sink's
 * own, and an idle worker sleeps as long as source->idle_ms and
 * sink->idle_ms say.  A sink reaches the source's positions through
 * source->positions and source->advance (it settles against them).
 *
 * Callbacks marked "may be NULL" are skipped when NULL.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_ROUTINE_H
#define SG_ROUTINE_H

#include "postgres.h"

#include "utils/tuplestore.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"

struct SgWorker;

/* one batch, as the routines see it (batch.c fills the rest) */
typedef struct SgBatch
{
	/* set by source->begin */
	SgStreamMeta *stream;		/* the local stream read, or NULL */
	int			nparts;			/* partitions of the source's positions */

	/* the batch, in the worker's batch memory */
	Tuplestorestate *store;		/* the events read, then filtered */
	int64	   *first;			/* per partition: the first seq read (0: none) */
	int64	   *last;			/* ... and the last one, or the position */
	int			fetched;		/* events read */
	int			n;				/* ... left by the skip and dedup filters */
	int64		rows_out;		/* rows out so far (sink->empty may emit) */
	bool		advance;		/* the fetch moves the positions */
	bool		isolate;		/* the SQL runs event by event under the error
								 * policy (the batch failed max_attempts times) */
} SgBatch;

typedef struct SgSourceRoutine
{
	const char *name;
	/* an idle worker sleeps at most this long (a commit here wakes it) */
	long		idle_ms;
	/* the events are this database's: durable here before output leaves */
	bool		local_events;

	/*
	 * At start, outside a transaction (it opens its own): the source's state
	 * (w->source_state) and the columns of relation "batch" (w->event_desc).
	 */
	void		(*open) (struct SgWorker *w);
	/* T1, fenced: b->nparts, b->stream; false: the pipeline stops (w->stop_error) */
	bool		(*begin) (struct SgWorker *w, SgBatch *b);
	/* T1: read the batch; the events read, or -1: stop (w->stop_error) */
	int			(*fetch) (struct SgWorker *w, SgBatch *b);
	/* the committed positions as this transaction sees them (-1: none) */
	void		(*positions) (struct SgWorker *w, SgBatch *b, int64 *pos, int nparts);
	/* move the positions forward to `to` (a partition not read keeps its own) */
	void		(*advance) (struct SgWorker *w, SgBatch *b, int64 *to, int nparts);
	/* after a failed batch, outside a transaction (may be NULL) */
	void		(*close) (struct SgWorker *w);
} SgSourceRoutine;

typedef struct SgSinkRoutine
{
	const char *name;

	/*
	 * At start, after source->open, outside a transaction (it opens its own
	 * when it needs one): the sink's state, its statements, its checks.
	 * Returns NULL, or why the pipeline cannot run (it then fails).  May be
	 * NULL.
	 */
	const char *(*open) (struct SgWorker *w);
	/* T1, after source->begin: settle; false: the pipeline stops (may be NULL) */
	bool		(*begin) (struct SgWorker *w, SgBatch *b);
	/* T1, just before the fetch (may be NULL) */
	void		(*before_fetch) (struct SgWorker *w, SgBatch *b);
	/* T1, nothing fetched: rows out anyway, 0 for an empty batch (may be NULL) */
	int64		(*empty) (struct SgWorker *w, SgBatch *b);
	/* the batch's effects: rows out, or -1: the error policy stops (w->stop_error) */
	int64		(*write) (struct SgWorker *w, SgBatch *b);
	/* just before the local COMMIT of the batch's effects (may be NULL) */
	void		(*confirm) (struct SgWorker *w, SgBatch *b);
	/* after that COMMIT, also of an empty batch (may be NULL) */
	void		(*committed) (struct SgWorker *w, SgBatch *b);
	/* after a failed batch, outside a transaction (may be NULL) */
	void		(*close) (struct SgWorker *w);

	/*
	 * After a failed batch: NULL, or what the sink failed to do when the
	 * error was its own, not an event's (isolating the events cannot help:
	 * the worker stops the pipeline after max_attempts).  May be NULL.
	 */
	const char *(*own_error) (struct SgWorker *w);
	/* how long an idle worker may sleep, at most `ms` (may be NULL) */
	long		(*idle_ms) (struct SgWorker *w, long ms);
} SgSinkRoutine;

/* the kinds */
extern const SgSourceRoutine SgLocalSourceRoutine;	/* source_local.c */
extern const SgSourceRoutine SgRemoteSourceRoutine; /* source_remote.c */
extern const SgSourceRoutine SgKafkaSourceRoutine;	/* source_kafka.c */
extern const SgSinkRoutine SgSqlSinkRoutine;	/* sink_sql.c */
extern const SgSinkRoutine SgWindowSinkRoutine; /* sink_window.c */
extern const SgSinkRoutine SgRemoteSinkRoutine; /* sink_remote.c */
extern const SgSinkRoutine SgKafkaSinkRoutine;	/* sink_kafka.c */

#endif							/* SG_ROUTINE_H */
