/*-------------------------------------------------------------------------
 *
 * window.h
 *		Windowed aggregation of a pipeline: tumbling, hopping and session
 *		windows over append time or event time (docs/windows.md).
 *
 *	window_api.c	create_window_pipeline: checks, the generated SQL, the
 *					definition row
 *	window.c		the worker's part: the definition, the evaluation of
 *					the user's expressions as the owner, the append-time
 *					watermark; with window_sql.c (the statements),
 *					window_apply.c (a batch's state, watermark and closing)
 *					and window_emit.c (the emission of closed windows), all
 *					in the batch's transaction (window_int.h: what they
 *					share)
 *	sink_window.c	the window as the pipeline's sink (routine.h): the steps
 *					of a batch that call window.c and window_apply.c
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

/* a window pipeline's window: its definition and state (window_int.h) */
typedef struct SgWindow SgWindow;

/* window.c, WindowApply in window_apply.c (the window sink's work) */
extern SgWindow *WindowLoad(struct SgWorker *w);
extern bool WindowTooWide(SgWindow *win);
extern void WindowBeforeFetch(struct SgWorker *w, SgWindow *win, SgStreamMeta *meta);
extern int64 WindowEval(struct SgWorker *w, SgWindow *win, Tuplestorestate *store, int64 n);
extern int64 WindowApply(struct SgWorker *w, SgWindow *win, Tuplestorestate *store, int fetched);
extern void WindowCommitted(SgWindow *win);
extern long WindowWaitMs(SgWindow *win, long wait_ms);
extern bool WindowApplyFailed(SgWindow *win);

#endif							/* SG_WINDOW_H */
