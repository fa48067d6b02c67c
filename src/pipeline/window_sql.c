/*-------------------------------------------------------------------------
 *
 * window_sql.c
 *		The statements a window pipeline runs over its state, generated
 *		once from the definition (sg_build_statements, at WindowLoad), and
 *		the columns of the rows it emits (sg_emit_desc).
 *
 * One builder per statement: the merge of a batch's rows into
 * streamguard.window_state (tumbling and hopping windows; sessions, merged
 * in SQL as gaps and islands), the close of the windows the watermark has
 * passed, and the owner's statements over relation "batch": the insert of
 * emitted windows into the target table, and with on_update the windows a
 * batch changed, their upsert into the target and the deletion of
 * superseded sessions.  Each aggregate keeps an accumulator slot (an avg
 * two: its sum and its count) in the state's numeric[] acc.  Building runs
 * no statement and takes no lock; window_apply.c and window_emit.c run
 * them (window.c's header: the design).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "pipeline/window_int.h"

/* the accumulator of slot j over the rows r (one value per event) */
static void
sg_acc_from_rows(SgWindow *win, StringInfo buf)
{
	int			i,
				j;

	appendStringInfoString(buf, "ARRAY[");
	for (j = 0; j < win->nacc; j++)
	{
		const char *fn = NULL;
		int			agg = j;

		if (j >= win->naggs)
		{
			/* an avg's count slot */
			for (i = 0; i < win->naggs; i++)
				if (win->count_slot[i] == j)
					agg = i;
			fn = "count";
		}
		else
			switch (win->aggs[j])
			{
				case SG_AGG_COUNT:
					fn = "count";
					break;
				case SG_AGG_SUM:
				case SG_AGG_AVG:
					fn = "sum";
					break;
				case SG_AGG_MIN:
					fn = "min";
					break;
				case SG_AGG_MAX:
					fn = "max";
					break;
			}
		appendStringInfo(buf, "%spg_catalog.%s(r.v%d)::pg_catalog.numeric", j ? ", " : "", fn, agg + 1);
	}
	appendStringInfoString(buf, "]::pg_catalog.numeric[]");
}

/* how slot j combines two accumulators a and b */
static void
sg_acc_merge2(SgWindow *win, StringInfo buf, const char *a, const char *b)
{
	int			j;

	appendStringInfoString(buf, "ARRAY[");
	for (j = 0; j < win->nacc; j++)
	{
		SgWindowAgg k = j >= win->naggs ? SG_AGG_COUNT : win->aggs[j];

		if (j)
			appendStringInfoString(buf, ", ");
		switch (k)
		{
			case SG_AGG_COUNT:
				appendStringInfo(buf, "%s[%d]" OP("+") "%s[%d]", a, j + 1, b, j + 1);
				break;
			case SG_AGG_SUM:
			case SG_AGG_AVG:
				appendStringInfo(buf, "coalesce(%s[%d]" OP("+") "%s[%d], %s[%d], %s[%d])",
								 a, j + 1, b, j + 1, a, j + 1, b, j + 1);
				break;
			case SG_AGG_MIN:
				appendStringInfo(buf, "least(%s[%d], %s[%d])", a, j + 1, b, j + 1);
				break;
			case SG_AGG_MAX:
				appendStringInfo(buf, "greatest(%s[%d], %s[%d])", a, j + 1, b, j + 1);
				break;
		}
	}
	appendStringInfoString(buf, "]::pg_catalog.numeric[]");
}

/* slot j over many accumulators (column acc of relation `rel`) */
static void
sg_acc_merge_many(SgWindow *win, StringInfo buf, const char *rel)
{
	int			j;

	appendStringInfoString(buf, "ARRAY[");
	for (j = 0; j < win->nacc; j++)
	{
		SgWindowAgg k = j >= win->naggs ? SG_AGG_COUNT : win->aggs[j];
		const char *fn = (k == SG_AGG_MIN) ? "min" : (k == SG_AGG_MAX) ? "max" : "sum";

		appendStringInfo(buf, "%spg_catalog.%s(%s.acc[%d])", j ? ", " : "", fn, rel, j + 1);
	}
	appendStringInfoString(buf, "]::pg_catalog.numeric[]");
}

/* the final values of the aggregates, from a state row's acc */
static void
sg_finals(SgWindow *win, StringInfo buf)
{
	int			i;

	for (i = 0; i < win->naggs; i++)
	{
		if (win->aggs[i] == SG_AGG_AVG)
			appendStringInfo(buf, ", acc[%d]" OP("/") "nullif(acc[%d], 0)",
							 i + 1, win->count_slot[i] + 1);
		else if (win->aggs[i] == SG_AGG_COUNT)
			appendStringInfo(buf, ", coalesce(acc[%d], 0)", i + 1);
		else
			appendStringInfo(buf, ", acc[%d]", i + 1);
	}
}

/*
 * The accumulator of slot j over the partials r (window_partial.c: a1 ...,
 * one per slot): counts and sums add up, min and max of them
 */
static void
sg_acc_from_partials(SgWindow *win, StringInfo buf)
{
	int			j;

	appendStringInfoString(buf, "ARRAY[");
	for (j = 0; j < win->nacc; j++)
	{
		SgWindowAgg k = j >= win->naggs ? SG_AGG_COUNT : win->aggs[j];
		const char *fn = k == SG_AGG_MIN ? "min" : k == SG_AGG_MAX ? "max" : "sum";

		appendStringInfo(buf, "%spg_catalog.%s(r.a%d)", j ? ", " : "", fn, j + 1);
	}
	appendStringInfoString(buf, "]::pg_catalog.numeric[]");
}

/*
 * The merge of the batch's partials (relation "window_rows", a row per
 * window and key, or more when they were written in parts) into the
 * state, tumbling and hopping windows.
 */
static char *
sg_build_merge_windows(SgWindow *win)
{
	StringInfoData buf;
	char	   *sql;

	initStringInfo(&buf);

	/*
	 * With late 'update', rows of windows closed already ($2: the watermark)
	 * are corrections: a closed window's kept state takes them (its revision
	 * goes up), a closed window without state gets its first row; both come
	 * out of the statement, to be emitted.
	 */
	if (win->late == SG_LATE_UPDATE)
		appendStringInfoString(&buf, "WITH m AS (");
	appendStringInfoString(&buf,
						   "INSERT INTO streamguard.window_state AS s "
						   "(pipeline_id, window_start, window_end, key, events, acc, closed) "
						   "SELECT $1, r.ws, r.we, r.k, pg_catalog.sum(r.events)::pg_catalog.int8, ");
	sg_acc_from_partials(win, &buf);
	appendStringInfoString(&buf,
						   ", r.we" OP("<=") "$2 FROM window_rows r GROUP BY r.ws, r.we, r.k "
						   "ON CONFLICT (pipeline_id, window_start, key) DO UPDATE SET "
						   "events = s.events" OP("+") "excluded.events, "
						   "revision = s.revision" OP("+") "CASE WHEN s.closed THEN 1 ELSE 0 END, acc = ");
	sg_acc_merge2(win, &buf, "s.acc", "excluded.acc");
	if (win->late == SG_LATE_UPDATE)
	{
		appendStringInfoString(&buf, " RETURNING s.*) SELECT window_start, window_end, key");
		if (win->revisions)
			appendStringInfoString(&buf, ", revision");
		sg_finals(win, &buf);
		appendStringInfoString(&buf, " FROM m WHERE closed ORDER BY window_end, window_start, key");
	}
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/* the merge of the batch's rows (relation "window_rows") into the state, sessions */
static char *
sg_build_merge_sessions(SgWindow *win)
{
	StringInfoData buf;
	char	   *sql;
	int			i;

	initStringInfo(&buf);

	/*
	 * Sessions: the batch's events, each a session [t, t + gap) of its
	 * own, and the sessions in the state that overlap one of them (taken
	 * out: open ones, and with late 'update' closed ones kept
	 * keep_closed; the sessions in the state are disjoint, so one that
	 * overlaps none of the events cannot join an island with them),
	 * merged where they overlap (gaps and islands), then put back.
	 * Lateness is judged on the merged session, as Flink does: an event
	 * whose own session would be over by the watermark ($2) is on time
	 * when it joins a session still open, and with late 'update' it
	 * corrects a closed one it joins.  An island of new events only that
	 * ends by $3 (the watermark, or keep_closed before it with late
	 * 'update') is late: not put back.
	 *
	 * The statement returns what the caller emits, by `what`:
	 *	0: a late event (part, seq);
	 *	1: a session that was emitted and is now part of a session that
	 *	   starts elsewhere: superseded, with its last figures (on_update:
	 *	   all were emitted; on_close: the closed ones, and open ones with
	 *	   a revision, which took in a closed session of their start and
	 *	   so carry its emitted row);
	 *	2: a changed session that is closed already: its corrected row.
	 * A merged session's revision is above those of the sessions it took
	 * in, so that a reader taking the highest revision per (window_start,
	 * key) sees it over the row it replaces.
	 */
	appendStringInfoString(&buf,
						   "WITH n AS (SELECT r.k, r.ws, r.we, 1::pg_catalog.int8 AS events, ");
	sg_acc_from_rows(win, &buf);
	appendStringInfoString(&buf,
						   " AS acc, false AS closed, 0::pg_catalog.int4 AS revision, r.part, r.seq "
						   "FROM window_rows r GROUP BY r.k, r.ws, r.we, r.seq, r.part), "
						   "o AS (DELETE FROM streamguard.window_state s "
						   "WHERE s.pipeline_id" OP("=") "$1 "
						   "AND EXISTS (SELECT 1 FROM window_rows r WHERE r.k IS NOT DISTINCT FROM s.key "
						   "AND r.ws" OP("<") "s.window_end AND r.we" OP(">") "s.window_start) "
						   "RETURNING s.key AS k, s.window_start AS ws, s.window_end AS we, s.events, s.acc, "
						   "s.closed, s.revision, NULL::pg_catalog.int4 AS part, NULL::pg_catalog.int8 AS seq), "
						   "a AS (SELECT * FROM n UNION ALL SELECT * FROM o), "
						   "m AS (SELECT a.*, CASE WHEN a.ws" OP("<") "pg_catalog.max(a.we) OVER "
						   "(PARTITION BY a.k ORDER BY a.ws, a.we ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) "
						   "THEN 0 ELSE 1 END AS brk FROM a), "
						   "i AS (SELECT m.*, pg_catalog.sum(m.brk) OVER (PARTITION BY m.k ORDER BY m.ws, m.we "
						   "ROWS UNBOUNDED PRECEDING) AS isl FROM m), "
						   "j AS (SELECT i.*, pg_catalog.min(i.ws) OVER w AS gws, pg_catalog.max(i.we) OVER w AS gwe, "
						   "pg_catalog.bool_or(i.seq IS NOT NULL) OVER w AS gnew, "
						   "pg_catalog.bool_or(i.seq IS NULL) OVER w AS gold, "
						   "pg_catalog.bool_or(i.closed) OVER w AS gclosed, "
						   "coalesce(pg_catalog.max(i.revision) FILTER (WHERE i.seq IS NULL) OVER w, 0) AS grev "
						   "FROM i WINDOW w AS (PARTITION BY i.k, i.isl)), "
						   "g AS (SELECT j.k, j.gws AS ws, j.gwe AS we, j.gnew, j.gclosed, "
						   "j.grev" OP("+") "CASE WHEN j.gnew AND j.gclosed THEN 1 ELSE 0 END AS rev, "
						   "pg_catalog.sum(j.events) AS events, ");
	sg_acc_merge_many(win, &buf, "j");
	appendStringInfoString(&buf, " AS acc FROM j WHERE j.gold OR j.gwe" OP(">") "$3 "
						   "GROUP BY j.k, j.isl, j.gws, j.gwe, j.gnew, j.gold, j.gclosed, j.grev), "
						   "ins AS (INSERT INTO streamguard.window_state "
						   "(pipeline_id, window_start, window_end, key, events, acc, closed, revision) "
						   "SELECT $1, g.ws, g.we, g.k, g.events, g.acc, "
						   "CASE WHEN g.gnew THEN g.we" OP("<=") "$2 ELSE g.gclosed END, g.rev FROM g) "
						   "SELECT 0::pg_catalog.int4, j.part, j.seq, NULL::pg_catalog.timestamptz, "
						   "NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, NULL::pg_catalog.int4, NULL::pg_catalog.bool");
	for (i = 0; i < win->naggs; i++)
		appendStringInfoString(&buf, ", NULL::pg_catalog.numeric");
	appendStringInfoString(&buf, " FROM j WHERE NOT (j.gold OR j.gwe" OP(">") "$3) ");
	appendStringInfo(&buf, "UNION ALL SELECT 1, NULL, NULL, j.ws, j.we, j.k, j.revision" OP("+") "%d, true",
					 win->changelog ? 0 : 1);
	sg_finals(win, &buf);
	appendStringInfo(&buf, " FROM j WHERE j.gnew AND j.seq IS NULL AND j.ws" OP("<>") "j.gws%s ",
					 win->emit == SG_EMIT_ON_CLOSE ? " AND (j.closed OR j.revision" OP(">") "0)" : "");
	appendStringInfoString(&buf, "UNION ALL SELECT 2, NULL, NULL, g.ws, g.we, g.k, g.rev, false");
	sg_finals(win, &buf);
	appendStringInfoString(&buf, " FROM g WHERE g.gnew AND g.we" OP("<=") "$2 ORDER BY 1, 5, 4, 6");
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/* closing: the state rows of windows that end by the watermark, out */
static char *
sg_build_close(SgWindow *win)
{
	StringInfoData buf;
	char	   *sql;

	initStringInfo(&buf);
	/* in window order: the target's rows, or the target stream's events */
	if (win->late == SG_LATE_UPDATE)
		appendStringInfoString(&buf, "WITH d AS (UPDATE streamguard.window_state SET closed = true "
							   "WHERE pipeline_id" OP("=") "$1 AND window_end" OP("<=") "$2 AND NOT closed "
							   "RETURNING window_start, window_end, key");
	else
		appendStringInfoString(&buf, "WITH d AS (DELETE FROM streamguard.window_state "
							   "WHERE pipeline_id" OP("=") "$1 AND window_end" OP("<=") "$2 AND NOT closed "
							   "RETURNING window_start, window_end, key");
	if (win->revisions)
		appendStringInfoString(&buf, ", revision");
	if (win->retractions)
		appendStringInfoString(&buf, ", false");
	sg_finals(win, &buf);
	appendStringInfoString(&buf, ") SELECT * FROM d ORDER BY window_end, window_start, key");
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/* the target table's columns the emitted rows fill, in sg_emit_desc's order */
static void
sg_emit_columns(SgWindow *win, StringInfo cols)
{
	int			i;

	appendStringInfoString(cols, win->revisions ? "window_start, window_end, key, revision" :
						   "window_start, window_end, key");
	if (win->retractions)
		appendStringInfoString(cols, ", retracted");
	for (i = 0; i < win->naggs; i++)
		appendStringInfo(cols, ", %s", quote_identifier(win->agg_names[i]));
}

/* as the owner: the closed windows, relation "batch", into the target */
static char *
sg_build_emit(SgWindow *win, const char *cols)
{
	StringInfoData buf;
	char	   *sql;

	initStringInfo(&buf);
	appendStringInfo(&buf, "INSERT INTO %s (%s) SELECT * FROM batch", win->target ? win->target : "-", cols);
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/*
 * on_update: the windows the batch changed, as they are now (all of them:
 * the ones that close in this batch too, before they are closed).  A
 * changelog numbers each window's events: revision is the next to give.
 */
static char *
sg_build_changed(SgWindow *win)
{
	StringInfoData buf;
	char	   *sql;

	initStringInfo(&buf);
	if (win->changelog)
		appendStringInfoString(&buf, "WITH u AS (UPDATE streamguard.window_state s "
							   "SET revision = s.revision" OP("+") "1 WHERE s.pipeline_id" OP("=") "$1 ");
	else
	{
		appendStringInfoString(&buf, "SELECT window_start, window_end, key");
		sg_finals(win, &buf);
		appendStringInfoString(&buf, " FROM streamguard.window_state s WHERE s.pipeline_id" OP("=") "$1 ");
	}
	appendStringInfoString(&buf, "AND EXISTS (SELECT 1 FROM window_rows r WHERE r.k IS NOT DISTINCT FROM s.key "
						   "AND r.ws" OP("<") "s.window_end AND r.we" OP(">") "s.window_start)");
	if (win->changelog)
	{
		appendStringInfoString(&buf, " RETURNING s.window_start, s.window_end, s.key, "
							   "s.revision" OP("-") "1");
		if (win->retractions)
			appendStringInfoString(&buf, ", false");
		sg_finals(win, &buf);
		appendStringInfoString(&buf, ") SELECT * FROM u ORDER BY 2, 1, 3");
	}
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/* on_update into a table, as the owner: the changed windows, upserted */
static char *
sg_build_update(SgWindow *win, const char *cols)
{
	StringInfoData buf;
	char	   *sql;
	int			i;

	initStringInfo(&buf);
	appendStringInfo(&buf, "INSERT INTO %s (%s) SELECT * FROM batch "
					 "ON CONFLICT (window_start, key) DO UPDATE SET window_end = excluded.window_end",
					 win->target, cols);
	for (i = 0; i < win->naggs; i++)
		appendStringInfo(&buf, ", %s = excluded.%s", quote_identifier(win->agg_names[i]),
						 quote_identifier(win->agg_names[i]));
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/*
 * on_update into a table, sessions, as the owner: the rows of sessions
 * merged into one that starts elsewhere
 */
static char *
sg_build_delete(SgWindow *win)
{
	StringInfoData buf;
	char	   *sql;

	initStringInfo(&buf);
	appendStringInfo(&buf, "DELETE FROM %s t USING batch b WHERE t.window_start" OP("=") "b.window_start "
					 "AND t.key IS NOT DISTINCT FROM b.key", win->target);
	sql = MemoryContextStrdup(TopMemoryContext, buf.data);
	pfree(buf.data);
	return sql;
}

/*
 * Every statement of the window, from its definition (at start, by
 * WindowLoad; TopMemoryContext).
 */
void
sg_build_statements(SgWindow *win)
{
	StringInfoData cols;

	if (win->kind != SG_WINDOW_SESSION)
		win->merge_sql = sg_build_merge_windows(win);
	else
		win->merge_sql = sg_build_merge_sessions(win);
	win->close_sql = sg_build_close(win);
	initStringInfo(&cols);
	sg_emit_columns(win, &cols);
	win->emit_sql = sg_build_emit(win, cols.data);
	if (win->emit == SG_EMIT_ON_UPDATE)
		win->changed_sql = sg_build_changed(win);
	if (win->emit == SG_EMIT_ON_UPDATE && win->target)
	{
		win->update_sql = sg_build_update(win, cols.data);
		win->delete_sql = sg_build_delete(win);
	}
	pfree(cols.data);
}

/*
 * The columns emitted for a window (relation "batch" of the owner's
 * statements): window_start, window_end, key, one numeric per aggregate.
 */
TupleDesc
sg_emit_desc(SgWindow *win)
{
	int			first = 4 + (win->revisions ? 1 : 0) + (win->retractions ? 1 : 0);
	TupleDesc	desc = CreateTemplateTupleDesc(first - 1 + win->naggs);
	int			i;

	TupleDescInitEntry(desc, 1, "window_start", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 2, "window_end", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 3, "key", TEXTOID, -1, 0);
	if (win->revisions)
		TupleDescInitEntry(desc, 4, "revision", INT4OID, -1, 0);
	if (win->retractions)
		TupleDescInitEntry(desc, first - 1, "retracted", BOOLOID, -1, 0);
	for (i = 0; i < win->naggs; i++)
		TupleDescInitEntry(desc, first + i, win->agg_names[i], NUMERICOID, -1, 0);
	TupleDescFinalize(desc);
	return BlessTupleDesc(desc);
}
