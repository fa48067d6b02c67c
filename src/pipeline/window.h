/*-------------------------------------------------------------------------
 *
 * window.h
 *		Windowed aggregation of a pipeline: tumbling, hopping and session
 *		windows over append time or event time (docs/windows.md).
 *
 *	window_api.c	create_window_pipeline: checks, the generated SQL, the
 *					definition row
 *	window.c		the worker's part: the definition, the evaluation of
 *					the user's expressions as the owner, the state, the
 *					watermark and the emission of closed windows, all in
 *					the batch's transaction
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_WINDOW_H
#define SG_WINDOW_H

#include "postgres.h"

#include "executor/spi.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"

struct SgWorker;

typedef enum SgWindowKind
{
	SG_WINDOW_TUMBLING,
	SG_WINDOW_HOPPING,
	SG_WINDOW_SESSION
} SgWindowKind;

typedef enum SgWindowEmit
{
	SG_EMIT_ON_CLOSE,
	SG_EMIT_ON_UPDATE
} SgWindowEmit;

typedef enum SgWindowLate
{
	SG_LATE_DROP,
	SG_LATE_DEAD_LETTER,
	SG_LATE_UPDATE
} SgWindowLate;

typedef enum SgWindowAgg
{
	SG_AGG_COUNT,
	SG_AGG_SUM,
	SG_AGG_MIN,
	SG_AGG_MAX,
	SG_AGG_AVG
} SgWindowAgg;

extern const SgWordList SgWindowKindWords;
extern const SgWordList SgWindowEmitWords;
extern const SgWordList SgWindowLateWords;
extern const SgWordList SgWindowAggWords;

/* columns of the evaluation's output, before the aggregates' inputs */
#define SG_WEVAL_PARTITION	0
#define SG_WEVAL_SEQ		1
#define SG_WEVAL_TIME		2
#define SG_WEVAL_KEY		3
#define SG_WEVAL_FIRST_AGG	4

/*
 * Windows in microseconds are aligned on the Unix epoch (as in Flink and
 * Kafka Streams), expressed in PostgreSQL's timestamp origin.
 */
#define SG_WINDOW_ORIGIN	(-((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY))

typedef struct SgWindow
{
	/* the definition, loaded once at start */
	SgWindowKind kind;
	int64		size_us;		/* tumbling, hopping: length; session: gap */
	int64		slide_us;		/* hopping; else size_us */
	bool		append_time;
	int			naggs;
	char	  **agg_names;
	SgWindowAgg *aggs;
	int			nacc;			/* accumulator slots: one per aggregate, plus
								 * one per avg (its count) */
	int		   *count_slot;		/* avg: its count slot; else -1 */
	char	   *target;			/* a table, or NULL and ... */
	char	   *target_stream;	/* ... a stream the windows are appended to */
	SgWindowEmit emit;
	int64		lateness_us;
	int64		idle_us;		/* -1: partitions never count as idle */
	SgWindowLate late;
	int64		keep_closed_us; /* late 'update': how long closed state is kept */
	bool		revisions;		/* emitted rows carry a revision (late 'update'
								 * with on_close, or a changelog) */
	bool		retractions;	/* ... and a retracted flag (sessions) */
	bool		changelog;		/* on_update into a target stream */

	/* generated statements (TopMemoryContext) */
	char	   *merge_sql;
	char	   *close_sql;
	char	   *emit_sql;		/* run as the owner */
	char	   *update_sql;		/* on_update: run as the owner */
	char	   *delete_sql;		/* on_update sessions: superseded rows, as the owner */
	char	   *changed_sql;	/* on_update: the windows the batch changed */
	SPIPlanPtr	merge_plan;		/* prepared at first use */
	SPIPlanPtr	close_plan;
	SPIPlanPtr	changed_plan;
	SPIPlanPtr	append_plan;

	/* append time: what is known per source partition (worker memory) */
	int			nparts;
	TimestampTz *bound;			/* every event appended before it is consumed */
	TimestampTz *mark_time;		/* a pending mark: once every seq below */
	int64	   *mark_seq;		/* mark_seq is consumed, bound >= mark_time */
	TimestampTz *cand_bound;	/* the same, as the current batch will leave */
	TimestampTz *cand_mark_time;	/* them if it commits */
	int64	   *cand_mark_seq;
	TimestampTz pre_time;		/* taken before the batch's fetch */
	int64	   *pre_horizon;
	int64	   *pre_next;
	bool		pre_taken;

	/* the current batch (batch_cxt) */
	Tuplestorestate *rows;		/* the evaluation's output */
	TupleDesc	rows_desc;
	int64		nrows;
	TimestampTz next_close;		/* earliest end of an open window, 0: none */
	bool		applying;		/* in WindowApply: an error there is not an event's */
} SgWindow;

/* window.c */
extern bool WindowLoad(struct SgWorker *w);
extern void WindowBeforeFetch(struct SgWorker *w, SgStreamMeta *meta);
extern int64 WindowEval(struct SgWorker *w, Tuplestorestate *store, int64 n);
extern int64 WindowApply(struct SgWorker *w, Tuplestorestate *store, int fetched);
extern void WindowCommitted(struct SgWorker *w);
extern long WindowWaitMs(struct SgWorker *w, long wait_ms);
extern bool WindowApplyFailed(struct SgWorker *w);

#endif							/* SG_WINDOW_H */
