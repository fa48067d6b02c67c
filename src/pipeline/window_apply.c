/*-------------------------------------------------------------------------
 *
 * window_apply.c
 *		One batch of a window pipeline after its evaluation (WindowApply),
 *		in the batch's transaction, step by step: what is recorded (the
 *		watermark, event time's partitions), each row into its windows
 *		(late ones set aside), the merge into streamguard.window_state
 *		(sessions: merged in SQL, with their retractions and corrections),
 *		with on_update the windows the batch changed, late events to the
 *		dead letters, the watermark, closing and emitting what it passed,
 *		the counters in streamguard.window_def, and when to look again.
 *
 * The steps run as the storage owner (the owner's statements through
 * window_emit.c, as the owner) under the batch's deadline
 * (BatchDeadlineArm): the work is the user's to size (windows per event,
 * batch_size, keys), so every loop over rows or windows checks for
 * interrupts.  No lock is taken here beyond the row locks of the state's
 * statements and the append lock of a target stream (window_emit.c).  An
 * error here is no event's: win->applying says so to WindowApplyFailed.
 * The design: window.c's header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "pipeline/window_int.h"

/* floor(a / b) for b > 0 */
static int64
sg_floor_div(int64 a, int64 b)
{
	int64		q = a / b;

	if ((a % b) != 0 && a < 0)
		q--;
	return q;
}

typedef struct SgPartState
{
	bool		present;
	TimestampTz max_time;
	TimestampTz seen_at;
	bool		changed;
} SgPartState;

static void
sg_put_row(Tuplestorestate *out, TupleDesc desc, int32 part, int64 seq, TimestampTz ws, TimestampTz we,
		   Datum key, bool key_null, Datum *v, bool *vnull, int naggs)
{
	Datum	   *values = palloc(sizeof(Datum) * (5 + naggs));
	bool	   *nulls = palloc0(sizeof(bool) * (5 + naggs));

	values[0] = TimestampTzGetDatum(ws);
	values[1] = TimestampTzGetDatum(we);
	values[2] = key;
	nulls[2] = key_null;
	values[3] = Int32GetDatum(part);
	values[4] = Int64GetDatum(seq);
	memcpy(values + 5, v, sizeof(Datum) * naggs);
	memcpy(nulls + 5, vnull, sizeof(bool) * naggs);
	tuplestore_putvalues(out, desc, values, nulls);
	pfree(values);
	pfree(nulls);
}

/*
 * Sessions: merge the batch's rows (`wrows`) into the state (the merge
 * statement, see sg_build_statements), set its late events aside (added to
 * late_parts/late_seqs, *late counts them), and emit what the merge
 * changed in sessions that were emitted already: the superseded sessions
 * (on_close: a row marked retracted; on_update: their rows deleted from the
 * target table, or a retracted event in the changelog) and the corrected
 * closed ones (on_close).  Returns the corrections; *superseded the
 * superseded sessions.
 */
static int64
sg_merge_sessions(SgWorker *w, SgWindow *win, SgUserSave *save, Tuplestorestate *wrows, TupleDesc wdesc, int64 nwrows,
				  TimestampTz closed_wm, int32 *late_parts, int64 *late_seqs, int64 *late,
				  int64 *emitted, int64 *superseded)
{
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[3];
	Tuplestorestate *out;
	Tuplestorestate *emit_rows;
	TupleDesc	mdesc;
	TupleDesc	edesc;
	TupleTableSlot *ms;
	MemoryContext old;
	int64		nemit = 0;
	int64		nretract = 0;
	int64		ncorr = 0;
	int			ncols;
	bool		isnull;
	int			i;

	values[0] = Int32GetDatum(w->def.id);
	values[1] = TimestampTzGetDatum(closed_wm);
	/* the state of closed sessions is kept keep_closed past their end */
	values[2] = TimestampTzGetDatum(win->late == SG_LATE_UPDATE && closed_wm != DT_NOBEGIN ?
									closed_wm - win->keep_closed_us : closed_wm);

	old = MemoryContextSwitchTo(w->batch_cxt);
	out = tuplestore_begin_heap(false, false, work_mem);
	emit_rows = tuplestore_begin_heap(false, false, work_mem);
	mdesc = CreateTemplateTupleDesc(8 + win->naggs);
	TupleDescInitEntry(mdesc, 1, "what", INT4OID, -1, 0);
	TupleDescInitEntry(mdesc, 2, "part", INT4OID, -1, 0);
	TupleDescInitEntry(mdesc, 3, "seq", INT8OID, -1, 0);
	TupleDescInitEntry(mdesc, 4, "window_start", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(mdesc, 5, "window_end", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(mdesc, 6, "key", TEXTOID, -1, 0);
	TupleDescInitEntry(mdesc, 7, "revision", INT4OID, -1, 0);
	TupleDescInitEntry(mdesc, 8, "retracted", BOOLOID, -1, 0);
	for (i = 0; i < win->naggs; i++)
		TupleDescInitEntry(mdesc, 9 + i, win->agg_names[i], NUMERICOID, -1, 0);
	TupleDescFinalize(mdesc);
	edesc = sg_emit_desc(win);
	MemoryContextSwitchTo(old);

	(void) sg_exec_with_rel(win->merge_sql, &win->merge_plan, "window_rows", wrows, wdesc, nwrows,
							3, types, values, out);

	ncols = edesc->natts;
	ms = MakeSingleTupleTableSlot(mdesc, &TTSOpsMinimalTuple);
	tuplestore_rescan(out);
	while (tuplestore_gettupleslot(out, true, false, ms))
	{
		int32		what;
		Datum	   *ev;
		bool	   *en;
		int			c = 0;

		CHECK_FOR_INTERRUPTS();
		what = DatumGetInt32(slot_getattr(ms, 1, &isnull));

		if (what == 0)
		{
			late_parts[*late] = DatumGetInt32(slot_getattr(ms, 2, &isnull));
			late_seqs[(*late)++] = DatumGetInt64(slot_getattr(ms, 3, &isnull));
			continue;
		}
		if (what == 1)
			nretract++;
		else
		{
			ncorr++;
			if (win->emit != SG_EMIT_ON_CLOSE)
				continue;		/* on_update writes every changed window */
		}
		/* the row as emitted: window_start, window_end, key, [revision, retracted], aggregates */
		ev = palloc(sizeof(Datum) * ncols);
		en = palloc(sizeof(bool) * ncols);
		for (i = 4; i <= 8 + win->naggs; i++)
		{
			if ((i == 7 && !win->revisions) || (i == 8 && !win->retractions))
				continue;
			ev[c] = slot_getattr(ms, i, &en[c]);
			c++;
		}
		tuplestore_putvalues(emit_rows, edesc, ev, en);
		pfree(ev);
		pfree(en);
		nemit++;
	}
	ExecDropSingleTupleTableSlot(ms);

	if (nemit > 0)
	{
		if (win->emit == SG_EMIT_ON_CLOSE || win->changelog)
			*emitted += sg_emit(w, win, save, emit_rows, edesc, nemit);
		else
			(void) sg_run_as_owner(w, save, win->delete_sql, SPI_OK_DELETE, emit_rows, edesc, nemit);
	}
	*superseded = nretract;
	return ncorr;
}

/* one batch's work in WindowApply, handed from step to step */
typedef struct SgApplyState
{
	SgWorker   *w;
	SgWindow   *win;
	SgUserSave	save;			/* the user before the storage owner */
	Oid			types[4];
	Datum		values[4];		/* $1: the pipeline; $2: a watermark */
	TimestampTz now;
	TimestampTz closed_wm;		/* the watermark recorded, then moved */
	TimestampTz prev_wm;		/* the watermark recorded */
	TimestampTz wm;				/* the watermark now, 0: none yet */
	SgPartState *ps;			/* event time: per partition */
	int			nparts;
	TupleDesc	wdesc;			/* relation "window_rows" */
	Tuplestorestate *wrows;		/* sessions: the batch's rows; tumbling and
								 * hopping: the partials per (window, key) */
	SgWindowPartials *partials; /* tumbling and hopping: filling wrows */
	int64		nwrows;
	TimestampTz min_end;		/* earliest end of a window they are in */
	int32	   *late_parts;		/* the late events: (partition, seq) */
	int64	   *late_seqs;
	int64		late;
	int64		corrections;
	int64		superseded;
	int64		emitted;
	int64		nclosed;
} SgApplyState;

/* what is recorded: the watermark so far, and per partition (event time) */
static void
sg_apply_recorded(SgApplyState *s)
{
	SgWorker   *w = s->w;
	bool		isnull;
	uint64		i;

	if (SPI_execute_plan(SgPlanCached(NULL, "SELECT watermark FROM streamguard.window_def "
									  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1", 1, s->types),
						 s->values, NULL, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "the window of pipeline \"%s\" is gone", w->def.name);
	{
		Datum		v = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			s->closed_wm = DatumGetTimestampTz(v);
	}
	s->prev_wm = s->closed_wm;
	if (!s->win->append_time)
	{
		if (SPI_execute_plan(SgPlanCached(NULL, "SELECT s.partitions FROM streamguard.stream s "
										  "JOIN streamguard.pipeline p ON p.stream_id OPERATOR(pg_catalog.=) s.id "
										  "WHERE p.id OPERATOR(pg_catalog.=) $1", 1, s->types),
							 s->values, NULL, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "the source of pipeline \"%s\" is gone", w->def.name);
		s->nparts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		s->ps = palloc0(sizeof(SgPartState) * s->nparts);
		if (SPI_execute_plan(SgPlanCached(NULL, "SELECT partition, max_event_time, seen_at "
										  "FROM streamguard.window_partition "
										  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1", 1, s->types),
							 s->values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the partitions of window pipeline \"%s\"", w->def.name);
		for (i = 0; i < SPI_processed; i++) /* bounded: a row per partition */
		{
			int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

			if (p < 0 || p >= s->nparts)
				continue;
			s->ps[p].present = true;
			s->ps[p].max_time = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
			s->ps[p].seen_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull));
		}
	}
}

/* relation "window_rows" of sessions: an event (ws, we, k, part, seq, v1...) */
static TupleDesc
sg_window_rows_desc(SgWindow *win)
{
	TupleDesc	wdesc;
	uint64		i;

	wdesc = CreateTemplateTupleDesc(5 + win->naggs);
	TupleDescInitEntry(wdesc, 1, "ws", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(wdesc, 2, "we", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(wdesc, 3, "k", TEXTOID, -1, 0);
	TupleDescInitEntry(wdesc, 4, "part", INT4OID, -1, 0);
	TupleDescInitEntry(wdesc, 5, "seq", INT8OID, -1, 0);
	for (i = 0; i < (uint64) win->naggs; i++)
		TupleDescInitEntry(wdesc, 6 + i, psprintf("v%d", (int) i + 1), NUMERICOID, -1, 0);
	TupleDescFinalize(wdesc);
	return BlessTupleDesc(wdesc);
}

/*
 * One row of the evaluation into its windows (relation "window_rows"), or
 * set aside as late; event time: its partition's maximum moves.
 */
static void
sg_assign_row(SgApplyState *s, TupleTableSlot *slot, Datum *v, bool *vnull)
{
	SgWindow   *win = s->win;
	SgPartState *ps = s->ps;
	int32		part;
	int64		seq;
	TimestampTz t;
	bool		key_null;
	Datum		key;
	bool		any_late = false;
	bool		isnull;
	int			a;

	part = DatumGetInt32(slot_getattr(slot, SG_WEVAL_PARTITION + 1, &isnull));
	seq = DatumGetInt64(slot_getattr(slot, SG_WEVAL_SEQ + 1, &isnull));
	t = DatumGetTimestampTz(slot_getattr(slot, SG_WEVAL_TIME + 1, &isnull));
	key = slot_getattr(slot, SG_WEVAL_KEY + 1, &key_null);

	for (a = 0; a < win->naggs; a++)
		v[a] = slot_getattr(slot, SG_WEVAL_FIRST_AGG + 1 + a, &vnull[a]);
	if (ps && part >= 0 && part < s->nparts)
	{
		if (!ps[part].present || t > ps[part].max_time)
			ps[part].max_time = t;
		ps[part].present = true;
		ps[part].seen_at = s->now;
		ps[part].changed = true;
	}
	if (win->kind == SG_WINDOW_SESSION)
	{
		/* lateness of sessions is judged once merged (the merge) */
		TimestampTz we = t + win->size_us;

		sg_put_row(s->wrows, s->wdesc, part, seq, t, we, key, key_null, v, vnull, win->naggs);
		s->nwrows++;
		if (we > s->closed_wm && (s->min_end == 0 || we < s->min_end))
			s->min_end = we;
	}
	else
	{
		/* the last window that starts at or before t, then back by slide */
		int64		ws = SG_WINDOW_ORIGIN +
		sg_floor_div(t - SG_WINDOW_ORIGIN, win->slide_us) * win->slide_us;

		for (; ws + win->size_us > t; ws -= win->slide_us)
		{
			/* size / slide windows: bounded (bounds.h), and interruptible */
			CHECK_FOR_INTERRUPTS();
			if (ws + win->size_us <= s->closed_wm &&
				(win->late != SG_LATE_UPDATE ||
				 ws + win->size_us <= s->closed_wm - win->keep_closed_us))
			{
				any_late = true;	/* closed (and its state gone) */
				continue;
			}
			WindowPartialsAdd(s->partials, ws, key, key_null, v, vnull);
			if (s->min_end == 0 || ws + win->size_us < s->min_end)
				s->min_end = ws + win->size_us;
		}
	}
	if (any_late)
	{
		s->late_parts[s->late] = part;
		s->late_seqs[s->late++] = seq;
	}
}

/* 1. each row into its windows; late rows set aside */
static void
sg_apply_assign(SgApplyState *s)
{
	SgWorker   *w = s->w;
	SgWindow   *win = s->win;
	MemoryContext old;

	old = MemoryContextSwitchTo(w->batch_cxt);
	s->wdesc = win->kind == SG_WINDOW_SESSION ? sg_window_rows_desc(win) : WindowPartialsDesc(win);
	MemoryContextSwitchTo(old);
	if (win->rows && win->nrows > 0)
	{
		TupleTableSlot *slot = MakeSingleTupleTableSlot(win->rows_desc, &TTSOpsMinimalTuple);
		Datum	   *v = palloc(sizeof(Datum) * Max(win->naggs, 1));
		bool	   *vnull = palloc(sizeof(bool) * Max(win->naggs, 1));

		old = MemoryContextSwitchTo(w->batch_cxt);
		s->wrows = tuplestore_begin_heap(false, false, work_mem);
		s->late_parts = palloc(sizeof(int32) * win->nrows);
		s->late_seqs = palloc(sizeof(int64) * win->nrows);
		MemoryContextSwitchTo(old);
		if (win->kind != SG_WINDOW_SESSION)
			s->partials = WindowPartialsBegin(win, w->batch_cxt, s->wrows, s->wdesc);
		tuplestore_rescan(win->rows);
		while (tuplestore_gettupleslot(win->rows, true, false, slot))
		{
			CHECK_FOR_INTERRUPTS();
			sg_assign_row(s, slot, v, vnull);
		}
		ExecDropSingleTupleTableSlot(slot);
		if (s->partials)
			s->nwrows = WindowPartialsFinish(s->partials);
	}
}

/* 2. merge into the state; late 'update': the corrected windows out */
static void
sg_apply_merge_windows(SgApplyState *s)
{
	SgWorker   *w = s->w;
	SgWindow   *win = s->win;
	MemoryContext old;
	Tuplestorestate *corr = NULL;
	int64		ncorr;

	if (win->late == SG_LATE_UPDATE)
	{
		old = MemoryContextSwitchTo(w->batch_cxt);
		corr = tuplestore_begin_heap(false, false, work_mem);
		MemoryContextSwitchTo(old);
	}
	s->values[1] = TimestampTzGetDatum(s->closed_wm);
	ncorr = sg_exec_with_rel(win->merge_sql, &win->merge_plan, "window_rows", s->wrows, s->wdesc, s->nwrows,
							 2, s->types, s->values, corr);
	if (corr && ncorr > 0 && win->emit == SG_EMIT_ON_CLOSE)
	{
		TupleDesc	edesc;

		old = MemoryContextSwitchTo(w->batch_cxt);
		edesc = sg_emit_desc(win);
		MemoryContextSwitchTo(old);
		s->emitted += sg_emit(w, win, &s->save, corr, edesc, ncorr);
	}
	if (corr)
		s->corrections = ncorr;
}

/*
 * on_update: every window the batch changed, as it is now -- before
 * closing, so that a window that closes in this batch has its last
 * figures written too
 */
static void
sg_apply_changed(SgApplyState *s)
{
	SgWorker   *w = s->w;
	SgWindow   *win = s->win;
	MemoryContext old;
	Tuplestorestate *changed;
	TupleDesc	edesc;
	int64		nchanged;

	old = MemoryContextSwitchTo(w->batch_cxt);
	changed = tuplestore_begin_heap(false, false, work_mem);
	edesc = sg_emit_desc(win);
	MemoryContextSwitchTo(old);
	nchanged = sg_exec_with_rel(win->changed_sql, &win->changed_plan, "window_rows", s->wrows, s->wdesc,
								s->nwrows, 1, s->types, s->values, changed);
	if (nchanged > 0 && win->changelog)
		s->emitted += sg_append_windows(w, win, changed, edesc, nchanged);
	else if (nchanged > 0)
		s->emitted += sg_run_as_owner(w, &s->save, win->update_sql, SPI_OK_INSERT, changed, edesc, nchanged);
}

/*
 * 3. the watermark, event time: the least over the partitions not idle
 * (all idle: the greatest); 0 while a partition never seen stalls it
 */
static TimestampTz
sg_event_watermark(SgApplyState *s)
{
	SgWindow   *win = s->win;
	SgPartState *ps = s->ps;
	bool		any_active = false;
	bool		stalled = false;
	TimestampTz active_min = 0,
				all_max = 0;
	int			p;
	bool		any = false;

	for (p = 0; p < s->nparts; p++)
	{
		TimestampTz pw;

		if (!ps[p].present)
		{
			if (win->idle_us < 0)
				stalled = true;
			continue;
		}
		pw = ps[p].max_time - win->lateness_us;
		if (!any || pw > all_max)
			all_max = pw;
		any = true;
		if (win->idle_us >= 0 && s->now - ps[p].seen_at > win->idle_us)
			continue;			/* idle */
		if (!any_active || pw < active_min)
			active_min = pw;
		any_active = true;
	}
	if (!stalled && any)
		return any_active ? active_min : all_max;
	return 0;
}

/* event time: the partitions seen in this batch */
static void
sg_record_partitions(SgApplyState *s)
{
	int			p;

	for (p = 0; p < s->nparts; p++)
	{
		Oid			ptypes[4] = {INT4OID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID};
		Datum		pvalues[4];

		if (!s->ps[p].changed)
			continue;
		pvalues[0] = s->values[0];
		pvalues[1] = Int32GetDatum(p);
		pvalues[2] = TimestampTzGetDatum(s->ps[p].max_time);
		pvalues[3] = TimestampTzGetDatum(s->ps[p].seen_at);
		if (SPI_execute_plan(SgPlanCached(NULL,
										  "INSERT INTO streamguard.window_partition AS w "
										  "(pipeline_id, partition, max_event_time, seen_at) VALUES ($1, $2, $3, $4) "
										  "ON CONFLICT (pipeline_id, partition) DO UPDATE SET "
										  "max_event_time = greatest(w.max_event_time, excluded.max_event_time), "
										  "seen_at = excluded.seen_at",
										  4, ptypes),
							 pvalues, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not record a partition of window pipeline \"%s\"", s->w->def.name);
	}
}

/* 4. close what ends at or before the watermark (never back) */
static void
sg_apply_close(SgApplyState *s)
{
	SgWorker   *w = s->w;
	SgWindow   *win = s->win;
	MemoryContext old;
	Tuplestorestate *closed;
	TupleDesc	edesc;

	old = MemoryContextSwitchTo(w->batch_cxt);
	closed = tuplestore_begin_heap(false, false, work_mem);
	edesc = sg_emit_desc(win);
	MemoryContextSwitchTo(old);
	s->values[1] = TimestampTzGetDatum(s->wm);
	s->nclosed = sg_exec_with_rel(win->close_sql, &win->close_plan, NULL, NULL, NULL, 0, 2, s->types, s->values,
								  closed);
	s->closed_wm = s->wm;
	if (win->emit == SG_EMIT_ON_CLOSE)
		s->emitted += sg_emit(w, win, &s->save, closed, edesc, s->nclosed);
	if (win->late == SG_LATE_UPDATE)
	{
		/* closed windows beyond keep_closed: no correction any more */
		s->values[1] = TimestampTzGetDatum(s->wm - win->keep_closed_us);
		if (SPI_execute_plan(SgPlanCached(NULL, "DELETE FROM streamguard.window_state "
										  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND closed "
										  "AND window_end OPERATOR(pg_catalog.<=) $2", 2, s->types),
							 s->values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not forget the closed windows of pipeline \"%s\"", w->def.name);
		s->values[1] = TimestampTzGetDatum(s->wm);
	}
}

/* the watermark and the counters into streamguard.window_def, if they moved */
static void
sg_apply_record(SgApplyState *s)
{
	Oid			utypes[6] = {INT4OID, TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID, INT8OID};
	Datum		uvalues[6];
	char		unulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	uvalues[0] = s->values[0];
	uvalues[1] = TimestampTzGetDatum(s->closed_wm);
	unulls[1] = s->closed_wm == DT_NOBEGIN ? 'n' : ' ';
	uvalues[2] = Int64GetDatum(s->nclosed);
	uvalues[3] = Int64GetDatum(s->late);
	uvalues[4] = Int64GetDatum(s->corrections);
	uvalues[5] = Int64GetDatum(s->superseded);
	if (s->nclosed > 0 || s->late > 0 || s->corrections > 0 || s->superseded > 0 || s->closed_wm != s->prev_wm)
		if (SPI_execute_plan(SgPlanCached(NULL, "UPDATE streamguard.window_def SET "
										  "watermark = coalesce($2, watermark), "
										  "windows_closed = windows_closed OPERATOR(pg_catalog.+) $3, "
										  "late_events = late_events OPERATOR(pg_catalog.+) $4, "
										  "corrections = corrections OPERATOR(pg_catalog.+) $5, "
										  "superseded = superseded OPERATOR(pg_catalog.+) $6 "
										  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1", 6, utypes),
							 uvalues, unulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not record the watermark of pipeline \"%s\"", s->w->def.name);
}

/*
 * When to look again without new events: the earliest end of an open
 * window, read from the state when the batch found nothing (the worker
 * is about to sleep), kept up from the batch's rows otherwise.
 */
static void
sg_apply_next_close(SgApplyState *s, int fetched)
{
	SgWindow   *win = s->win;
	bool		isnull;

	if (fetched == 0)
	{
		win->next_close = 0;
		if (SPI_execute_plan(SgPlanCached(NULL, "SELECT pg_catalog.min(window_end) FROM streamguard.window_state "
										  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND NOT closed", 1, s->types),
							 s->values, NULL, false, 0) == SPI_OK_SELECT && SPI_processed == 1)
		{
			Datum		v = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			if (!isnull)
				win->next_close = DatumGetTimestampTz(v);
		}
	}
	else if (s->min_end != 0 && (win->next_close == 0 || s->min_end < win->next_close))
		win->next_close = s->min_end;
}

/*
 * The rest of the batch, in its transaction, after the evaluation (or on an
 * empty fetch): state, watermark, emission.  `store` is the batch (for dead
 * letters), `fetched` what the fetch returned.  Returns the rows emitted.
 */
int64
WindowApply(SgWorker *w, SgWindow *win, Tuplestorestate *store, int fetched)
{
	SgApplyState s;

	memset(&s, 0, sizeof(s));
	s.w = w;
	s.win = win;
	s.types[0] = INT4OID;
	s.types[1] = TIMESTAMPTZOID;
	s.types[2] = INT8OID;
	s.types[3] = INT8OID;
	s.values[0] = Int32GetDatum(w->def.id);
	s.closed_wm = DT_NOBEGIN;
	s.now = GetCurrentTimestamp();
	win->applying = true;		/* cleared on the way out; see WindowApplyFailed */
	/* how many windows, rows and keys is the user's doing: under the timeout */
	BatchDeadlineArm(w);
	SgBecomeDataOwner(&s.save, true);

	sg_apply_recorded(&s);
	sg_apply_assign(&s);
	if (s.nwrows > 0 && win->kind != SG_WINDOW_SESSION)
		sg_apply_merge_windows(&s);
	else if (s.nwrows > 0)
		s.corrections = sg_merge_sessions(w, win, &s.save, s.wrows, s.wdesc, s.nwrows, s.closed_wm,
										  s.late_parts, s.late_seqs, &s.late, &s.emitted, &s.superseded);
	if (win->emit == SG_EMIT_ON_UPDATE && s.nwrows > 0)
		sg_apply_changed(&s);

	/* late events to the dead letters, as they are in the batch */
	if (s.late > 0 && win->late == SG_LATE_DEAD_LETTER)
		sg_dead_letter_late(w, store, s.late_parts, s.late_seqs, s.late);

	/* 3. the watermark */
	if (win->append_time)
		s.wm = sg_append_watermark(win, fetched < w->def.batch_size);
	else
	{
		s.wm = sg_event_watermark(&s);
		sg_record_partitions(&s);
	}
	if (s.wm != 0 && s.wm > s.closed_wm)
		sg_apply_close(&s);
	if (s.wm != 0 || s.late > 0 || s.corrections > 0 || s.superseded > 0)
		sg_apply_record(&s);
	sg_apply_next_close(&s, fetched);
	SgRestoreUser(&s.save);
	BatchDeadlineDisarm(w);
	win->applying = false;
	return s.emitted;
}
