/*-------------------------------------------------------------------------
 *
 * window_int.h
 *		What the files of a window pipeline's windows share, and only they:
 *		the window (SgWindow, its definition, statements and state) and the
 *		helpers between the files.  Included by src/pipeline/window*.c
 *		only; the API, for the window sink (sink_window.c), is window.h.
 *
 *		window.c		the definition, the append-time marks and watermark,
 *						the evaluation as the owner, the entry points
 *						around a batch (the design: its header)
 *		window_sql.c	the generated statements over the state, and the
 *						columns of the emitted rows
 *		window_apply.c	one batch's windows (WindowApply) step by step:
 *						assignment, the state merge, the watermark, closing,
 *						the counters
 *		window_emit.c	running our statements over a relation, emitting
 *						windows (the target table as the owner, or the
 *						target stream), late events as dead letters
 *		window_partial.c	a batch's events of tumbling and hopping
 *						windows aggregated per (window, key) before the
 *						merge
 *
 * In this order from the bottom up: window_sql.c, window_emit.c and
 * window_partial.c call no other of them, window.c calls window_sql.c,
 * window_apply.c the others.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_WINDOW_INT_H
#define SG_WINDOW_INT_H

#include "pipeline/window.h"
#include "pipeline/worker.h"

#define OP(o) " OPERATOR(pg_catalog." o ") "

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
extern TimestampTz sg_append_watermark(SgWindow *win, bool complete);

/* window_sql.c */
extern void sg_build_statements(SgWindow *win);
extern TupleDesc sg_emit_desc(SgWindow *win);

/* window_partial.c */
typedef struct SgWindowPartials SgWindowPartials;
extern TupleDesc WindowPartialsDesc(SgWindow *win);
extern SgWindowPartials *WindowPartialsBegin(SgWindow *win, MemoryContext parent, Tuplestorestate *out,
											 TupleDesc desc);
extern void WindowPartialsAdd(SgWindowPartials *p, TimestampTz ws, Datum key, bool key_null, Datum *v,
							  bool *vnull);
extern int64 WindowPartialsFinish(SgWindowPartials *p);

/* window_emit.c */
extern int	sg_exec_with_rel(const char *sql, SPIPlanPtr *cache, const char *name, Tuplestorestate *rel,
							 TupleDesc desc, int64 nrel, int nargs, Oid *types, Datum *values,
							 Tuplestorestate *into);
extern int64 sg_append_windows(SgWorker *w, SgWindow *win, Tuplestorestate *closed, TupleDesc edesc,
							   int64 nclosed);
extern void sg_dead_letter_late(SgWorker *w, Tuplestorestate *store, int32 *parts, int64 *seqs, int64 n);
extern int64 sg_run_as_owner(SgWorker *w, SgUserSave *save, const char *sql, int expect,
							 Tuplestorestate *rows, TupleDesc edesc, int64 n);
extern int64 sg_emit(SgWorker *w, SgWindow *win, SgUserSave *save, Tuplestorestate *rows, TupleDesc edesc,
					 int64 n);

#endif							/* SG_WINDOW_INT_H */
