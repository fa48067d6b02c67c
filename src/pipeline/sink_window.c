/*-------------------------------------------------------------------------
 *
 * sink_window.c
 *		A window pipeline's windows as its sink.
 *
 * A window pipeline (create_window_pipeline) reads a local stream,
 * exactly_once, with one worker.  Its SQL, generated from the window's
 * definition, evaluates the user's expressions over each event; window.c
 * and its window_*.c keep the results in the windows' state and emit the
 * closed windows, all in the batch's transaction.  The steps of the routine:
 *	open			the window may not put an event into more windows than
 *					the bound (a window defined before the bound)
 *	before_fetch	the clock and each partition's horizons, before the
 *					fetch (append time: what the watermark may count on)
 *	empty			nothing fetched: windows still close as time passes
 *	write			the evaluation (plain, or event by event under the
 *					error policy), then the state, the watermark and the
 *					emission (WindowApply)
 *	committed		what the batch learnt about the partitions holds
 *	own_error		a failure keeping or emitting the windows is no
 *					event's: the pipeline fails after max_attempts
 *	idle_ms			an idle worker wakes when the next window may close
 * The state is the window (SgWindow, window_int.h), loaded by WindowLoad
 * when the worker chose the routine (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pipeline/window.h"
#include "pipeline/worker.h"

static SgWindow *
sg_window_of(SgWorker *w)
{
	return (SgWindow *) w->sink_state;
}

static const char *
sg_window_sink_open(SgWorker *w)
{
	if (WindowTooWide(sg_window_of(w)))
		return psprintf("its hopping window puts each event into more than %d windows",
						SG_MAX_WINDOWS_PER_EVENT);
	return NULL;
}

static void
sg_window_sink_before_fetch(SgWorker *w, SgBatch *b)
{
	WindowBeforeFetch(w, sg_window_of(w), b->stream);
}

/* the windows that closed meanwhile: rows out */
static int64
sg_window_sink_empty(SgWorker *w, SgBatch *b)
{
	return WindowApply(w, sg_window_of(w), b->store, 0);
}

/* the evaluation over some events, as BatchRunIsolated runs it */
static int64
sg_window_sink_eval(SgWorker *w, Tuplestorestate *store, int64 n)
{
	return WindowEval(w, sg_window_of(w), store, n);
}

/*
 * The evaluation, then the windows (after an empty fetch that emitted,
 * only the rows that emitted).  Rows out: the windows emitted, or -1 when
 * the error policy stops (w->stop_error).
 */
static int64
sg_window_sink_write(SgWorker *w, SgBatch *b)
{
	int64		rows = b->rows_out;

	if (b->n > 0)
		rows = b->isolate ? BatchRunIsolated(w, b->store, sg_window_sink_eval) : sg_window_sink_eval(w, b->store, b->n);
	if (rows < 0)
		return -1;
	if (b->fetched > 0)
		rows = WindowApply(w, sg_window_of(w), b->store, b->fetched);
	return rows;
}

static void
sg_window_sink_committed(SgWorker *w, SgBatch *b)
{
	WindowCommitted(sg_window_of(w));
}

static const char *
sg_window_sink_own_error(SgWorker *w)
{
	return WindowApplyFailed(sg_window_of(w)) ? "could not emit the windows" : NULL;
}

static long
sg_window_sink_idle_ms(SgWorker *w, long ms)
{
	return WindowWaitMs(sg_window_of(w), ms);
}

const SgSinkRoutine SgWindowSinkRoutine = {
	.name = "window",
	.open = sg_window_sink_open,
	.before_fetch = sg_window_sink_before_fetch,
	.empty = sg_window_sink_empty,
	.write = sg_window_sink_write,
	.committed = sg_window_sink_committed,
	.own_error = sg_window_sink_own_error,
	.idle_ms = sg_window_sink_idle_ms,
};
