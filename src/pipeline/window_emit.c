/*-------------------------------------------------------------------------
 *
 * window_emit.c
 *		Running a window pipeline's statements and emitting its windows,
 *		in the batch's transaction: our statements over a relation of the
 *		batch as the storage owner (sg_exec_with_rel), the emitted rows
 *		appended to the target stream (sg_append_windows) or run through
 *		the owner's statement into the target table (sg_run_as_owner,
 *		sg_emit), and late events stored as dead letters
 *		(sg_dead_letter_late).
 *
 * Every function here is entered as the storage owner and leaves as it;
 * the owner's statements run as the pipeline's owner, under its search
 * path, inside the batch's deadline (BatchEnterOwner, BatchOwnerTimeoutMs:
 * batchexec.c).  The only lock taken here is the target stream's append
 * lock (StreamLockAppend, held to the end of the batch's transaction, as
 * every appender takes it).  Every loop over rows checks for interrupts:
 * how many there are is the user's to decide (window.c's header: the
 * design).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/datum.h"
#include "utils/guc.h"

#include "pipeline/window_int.h"

/* run a statement of ours with relation `name` registered, as the storage owner */
int
sg_exec_with_rel(const char *sql, SPIPlanPtr *cache, const char *name, Tuplestorestate *rel, TupleDesc desc,
				 int64 nrel, int nargs, Oid *types, Datum *values, Tuplestorestate *into)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	int			ret;
	uint64		i;
	int64		processed;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (rel)
	{
		enr->md.name = (char *) name;
		enr->md.reliddesc = InvalidOid;
		enr->md.tupdesc = desc;
		enr->md.enrtype = ENR_NAMED_TUPLESTORE;
		enr->md.enrtuples = (double) nrel;
		enr->reldata = rel;
		tuplestore_rescan(rel);
		if (SPI_register_relation(enr) != SPI_OK_REL_REGISTER)
			elog(ERROR, "could not register relation %s", name);
	}
	if (*cache == NULL)
	{
		/* prepared once (with the relation registered), kept for the worker's life */
		SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

		if (plan == NULL)
			elog(ERROR, "could not prepare a window statement: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		*cache = plan;
	}
	ret = SPI_execute_plan(*cache, values, NULL, false, 0);
	if (ret < 0)
		elog(ERROR, "window statement failed: %s", SPI_result_code_string(ret));
	processed = (int64) SPI_processed;
	if (into && SPI_tuptable)
		for (i = 0; i < SPI_processed; i++)
		{
			CHECK_FOR_INTERRUPTS();
			tuplestore_puttuple(into, SPI_tuptable->vals[i]);
		}
	SPI_finish();
	return (int) processed;
}

/*
 * Append the closed windows to the target stream, one event each (key: the
 * window's key; payload: the row as JSON, times in UTC), in the batch's
 * transaction: a downstream pipeline sees them once this batch commits.
 * Storage owner; the pipeline's owner must (still) be allowed to append.
 */
int64
sg_append_windows(SgWorker *w, SgWindow *win, Tuplestorestate *closed, TupleDesc edesc, int64 nclosed)
{
	SgStreamMeta *meta;
	SgEventRow *ev;
	Tuplestorestate *rows = tuplestore_begin_heap(false, false, work_mem);
	int			nest = NewGUCNestLevel();
	int64		n = 0;
	bool		isnull;

	(void) set_config_option("timezone", "UTC", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) sg_exec_with_rel("SELECT b.key, pg_catalog.to_jsonb(b) FROM batch b", &win->append_plan, "batch",
							closed, edesc, nclosed, 0, NULL, NULL, rows);
	AtEOXact_GUC(false, nest);

	meta = StreamLookup(win->target_stream, SG_PRIV_NONE);
	/* the append lock, as every appender takes it (reload if it changed) */
	if (!StreamLockAppend(meta))
		meta = StreamLookup(win->target_stream, SG_PRIV_NONE);
	if (!StreamRoleMayAppend(meta, w->def.owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the owner of window pipeline \"%s\" may not append to stream \"%s\"",
						w->def.name, meta->name)));
	StreamCheckNotOwnSource(meta);
	ev = palloc0(sizeof(SgEventRow) * nclosed);
	{
		TupleDesc	rdesc = CreateTemplateTupleDesc(2);
		TupleTableSlot *rs;

		TupleDescInitEntry(rdesc, 1, "key", TEXTOID, -1, 0);
		TupleDescInitEntry(rdesc, 2, "payload", JSONBOID, -1, 0);
		TupleDescFinalize(rdesc);
		rs = MakeSingleTupleTableSlot(rdesc, &TTSOpsMinimalTuple);
		tuplestore_rescan(rows);
		while (n < nclosed && tuplestore_gettupleslot(rows, true, false, rs))
		{
			Datum		k;

			CHECK_FOR_INTERRUPTS();
			k = slot_getattr(rs, 1, &ev[n].key_null);

			ev[n].key = ev[n].key_null ? (Datum) 0 : datumCopy(k, false, -1);
			ev[n].payload = datumCopy(slot_getattr(rs, 2, &isnull), false, -1);
			ev[n].dedup_null = true;
			n++;
		}
		ExecDropSingleTupleTableSlot(rs);
	}
	StreamAppendEvents(meta, ev, (int) n);
	tuplestore_end(rows);
	return n;
}

/* a late event's position, sorted for bsearch */
typedef struct SgLatePos
{
	int32		part;
	int64		seq;
} SgLatePos;

static int
sg_late_cmp(const void *a, const void *b)
{
	const SgLatePos *x = a;
	const SgLatePos *y = b;

	if (x->part != y->part)
		return x->part < y->part ? -1 : 1;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return 0;
}

/*
 * Store the late events (partition, seq) of the batch as dead letters.  A
 * batch may hold batch_size late events: they are found by binary search,
 * not by scanning them once per event of the batch.
 */
void
sg_dead_letter_late(SgWorker *w, Tuplestorestate *store, int32 *parts, int64 *seqs, int64 n)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(w->event_desc, &TTSOpsMinimalTuple);
	SgLatePos  *pos = palloc(sizeof(SgLatePos) * n);
	int64		done = 0;
	int64		j;
	bool		isnull;

	for (j = 0; j < n; j++)
	{
		pos[j].part = parts[j];
		pos[j].seq = seqs[j];
	}
	qsort(pos, n, sizeof(SgLatePos), sg_late_cmp);
	tuplestore_rescan(store);
	while (done < n && tuplestore_gettupleslot(store, true, false, ev))
	{
		SgLatePos	key;

		CHECK_FOR_INTERRUPTS();
		key.part = DatumGetInt32(slot_getattr(ev, 1, &isnull));
		key.seq = DatumGetInt64(slot_getattr(ev, 2, &isnull));
		if (bsearch(&key, pos, n, sizeof(SgLatePos), sg_late_cmp) == NULL)
			continue;
		BatchDeadLetter(w, ev, "late event: its window is closed", "SGLAT");
		w->batch_dead++;
		done++;
	}
	ExecDropSingleTupleTableSlot(ev);
	pfree(pos);
}

/*
 * Run one of the owner's statements over relation "batch" (`rows`, of
 * sg_emit_desc) as the owner.  Storage owner on entry and exit.  Returns
 * the rows it processed.
 */
int64
sg_run_as_owner(SgWorker *w, SgUserSave *save, const char *sql, int expect, Tuplestorestate *rows,
				TupleDesc edesc, int64 n)
{
	SgOwnerContext ctx;
	int64		done;

	SgRestoreUser(save);
	BatchEnterOwner(&ctx, w->def.owner, w->def.search_path, BatchOwnerTimeoutMs(w), rows, edesc, n);
	if (SPI_execute(sql, false, 0) != expect)
		elog(ERROR, "could not emit the windows of pipeline \"%s\"", w->def.name);
	done = (int64) SPI_processed;
	BatchLeaveOwner(&ctx);
	SgBecomeDataOwner(save, true);
	return done;
}

/*
 * Emit windows (relation "batch": `rows`, of sg_emit_desc): appended to the
 * target stream, or inserted into the target table as the owner.  Storage
 * owner on entry and exit.  Returns the rows emitted.
 */
int64
sg_emit(SgWorker *w, SgWindow *win, SgUserSave *save, Tuplestorestate *rows, TupleDesc edesc, int64 n)
{

	if (n == 0)
		return 0;
	if (win->target_stream)
		return sg_append_windows(w, win, rows, edesc, n);
	return sg_run_as_owner(w, save, win->emit_sql, SPI_OK_INSERT, rows, edesc, n);
}
