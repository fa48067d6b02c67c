/*-------------------------------------------------------------------------
 *
 * batchexec.c
 *		Running a pipeline's SQL as its owner: the execution context shared
 *		by the pipeline worker (every batch) and redrive_dead_letters (in
 *		the caller's transaction).
 *
 * Code that runs on behalf of another role is hostile territory for the
 * code around it, which runs as a superuser (the worker) or as whoever
 * called us.  The SQL therefore runs:
 *	- as the owner, through a local user change with
 *	  SECURITY_RESTRICTED_OPERATION (no SET ROLE, no temporary objects, no
 *	  cursors WITH HOLD), the way PostgreSQL runs index expressions during
 *	  maintenance;
 *	- in its own GUC nest level, with the search_path of the SQL's
 *	  definition; everything it sets, even without LOCAL, is rolled back
 *	  on the way out (AtEOXact_GUC(false, ...));
 *	- without commit-time code of its own: PostgreSQL refuses, inside a
 *	  security-restricted operation, to queue deferred trigger events and
 *	  to declare cursors WITH HOLD (either would run at COMMIT as whoever
 *	  commits: the worker's superuser, or redrive's caller);
 *	- under a timeout, armed here because a background worker has no
 *	  statement timeout of its own;
 *	- in a nested SPI connection that sees the events as the ephemeral
 *	  named relation "batch" (the mechanism of trigger transition tables).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/cmdtag.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/plancache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "pipeline/batchexec.h"
#include "pipeline/pipeline.h"
#include "pipeline/worker.h"

/* the columns of relation "batch" (and of streamguard.event) */
TupleDesc
SgEventTupleDesc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(6);

	SgEventColumns(desc);
	TupleDescFinalize(desc);
	return BlessTupleDesc(desc);
}

/*
 * Make the batch visible to the SPI connection as the relation "batch".
 */
void
PipelineRegisterBatch(Tuplestorestate *store, TupleDesc desc, int64 ntuples)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	int			ret;

	enr->md.name = "batch";
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = (double) ntuples;
	enr->reldata = store;
	ret = SPI_register_relation(enr);
	if (ret != SPI_OK_REL_REGISTER)
		elog(ERROR, "could not register the batch relation: %s", SPI_result_code_string(ret));
}

/*
 * The output column names of a pipeline's SQL over a stream's batch (a
 * list of palloc'd strings), or NIL when the SQL is not a single query
 * returning rows.  SPI connected.  (The SQL API's checks and the worker's
 * remote and Kafka sinks use it and PipelineOutputDesc.)
 */
List *
PipelineOutputNames(const char *sql)
{
	TupleDesc	desc = SgEventTupleDesc();
	Tuplestorestate *store = tuplestore_begin_heap(false, false, work_mem);
	SPIPlanPtr	plan;
	List	   *sources;
	CachedPlanSource *ps;
	List	   *result = NIL;
	bool		select = false;

	PipelineRegisterBatch(store, desc, 0);
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	sources = SPI_plan_get_plan_sources(plan);
	ps = list_length(sources) == 1 ? linitial(sources) : NULL;
	if (ps != NULL && ps->commandTag == CMDTAG_SELECT && ps->resultDesc != NULL)
	{
		int			i;

		select = true;
		for (i = 0; i < ps->resultDesc->natts; i++)
			result = lappend(result, pstrdup(NameStr(TupleDescAttr(ps->resultDesc, i)->attname)));
	}
	SPI_freeplan(plan);
	SPI_unregister_relation("batch");
	tuplestore_end(store);
	/* a SELECT without columns is still a SELECT: one empty-named entry */
	if (select && result == NIL)
		result = list_make1(pstrdup(""));
	return select ? result : NIL;
}

/*
 * The output columns of a pipeline's SQL over a stream's batch (a copy of
 * the SELECT's result descriptor), or NULL when the SQL is not a single
 * query returning rows.  SPI connected.
 */
TupleDesc
PipelineOutputDesc(const char *sql)
{
	TupleDesc	desc = SgEventTupleDesc();
	Tuplestorestate *store = tuplestore_begin_heap(false, false, work_mem);
	SPIPlanPtr	plan;
	List	   *sources;
	CachedPlanSource *ps;
	TupleDesc	result = NULL;

	PipelineRegisterBatch(store, desc, 0);
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	sources = SPI_plan_get_plan_sources(plan);
	ps = list_length(sources) == 1 ? linitial(sources) : NULL;
	if (ps != NULL && ps->commandTag == CMDTAG_SELECT && ps->resultDesc != NULL)
		result = CreateTupleDescCopy(ps->resultDesc);
	SPI_freeplan(plan);
	SPI_unregister_relation("batch");
	tuplestore_end(store);
	return result;
}

void
BatchEnterOwner(SgOwnerContext *ctx, Oid owner, const char *search_path, int timeout_ms,
				Tuplestorestate *store, TupleDesc desc, int64 n)
{
	GetUserIdAndSecContext(&ctx->save_user, &ctx->save_sec);
	SetUserIdAndSecContext(owner, ctx->save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	ctx->nest = NewGUCNestLevel();
	ctx->timeout_ms = timeout_ms;
	if (timeout_ms > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
	(void) set_config_option("search_path", search_path, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("datestyle", "ISO", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	tuplestore_rescan(store);
	PipelineRegisterBatch(store, desc, n);
}

/*
 * Leave the owner's context: the timeout disarmed, the SQL's settings
 * rolled back, the user id restored.
 */
void
BatchLeaveOwner(SgOwnerContext *ctx)
{
	if (ctx->timeout_ms > 0)
		disable_timeout(STATEMENT_TIMEOUT, false);
	SPI_finish();
	AtEOXact_GUC(false, ctx->nest);
	SetUserIdAndSecContext(ctx->save_user, ctx->save_sec);
}

/*
 * The batch's deadline over streamguard's own work whose size the user
 * decides (a window pipeline's windows, window_apply.c): batch_timeout from
 * now, through STATEMENT_TIMEOUT like a run of the SQL, so that the loops'
 * CHECK_FOR_INTERRUPTS() end it.  While it runs, a run of the owner's SQL
 * inside it neither re-arms nor disarms the timeout (BatchOwnerTimeoutMs):
 * the deadline holds for all of it.  An error disarms every timeout
 * (worker.c), and the next batch starts with none.
 */
void
BatchDeadlineArm(SgWorker *w)
{
	if (w->def.batch_timeout_ms <= 0 || w->deadline_armed)
		return;
	enable_timeout_after(STATEMENT_TIMEOUT, w->def.batch_timeout_ms);
	w->deadline_armed = true;
}

void
BatchDeadlineDisarm(SgWorker *w)
{
	if (!w->deadline_armed)
		return;
	disable_timeout(STATEMENT_TIMEOUT, false);
	w->deadline_armed = false;
}

/* the timeout a run of the owner's SQL arms itself: none inside a deadline */
int
BatchOwnerTimeoutMs(SgWorker *w)
{
	return w->deadline_armed ? 0 : w->def.batch_timeout_ms;
}

/*
 * Enter the owner's context for the pipeline's SQL (batchexec.c) and
 * return the prepared (and kept) plan.
 */
SPIPlanPtr
BatchOwnerEnter(SgWorker *w, SgOwnerContext *ctx, Tuplestorestate *store, int64 n)
{
	BatchEnterOwner(ctx, w->def.owner, w->def.search_path, BatchOwnerTimeoutMs(w), store, w->event_desc, n);
	if (w->user_plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(w->def.sql, 0, NULL);

		if (plan == NULL)
			elog(ERROR, "could not prepare the SQL of pipeline \"%s\": %s", w->def.name,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		w->user_plan = plan;
	}
	return w->user_plan;
}

/*
 * Run the pipeline's SQL over `store` as the owner.  Returns rows out.
 */
int64
BatchRunSql(SgWorker *w, Tuplestorestate *store, int64 n)
{
	SgOwnerContext ctx;
	SPIPlanPtr	plan;
	int			ret;
	int64		rows;

	plan = BatchOwnerEnter(w, &ctx, store, n);
	ret = SPI_execute_plan(plan, NULL, NULL, false, 0);
	if (ret < 0)
		elog(ERROR, "the SQL of pipeline \"%s\" failed: %s", w->def.name, SPI_result_code_string(ret));
	rows = (int64) SPI_processed;
	BatchLeaveOwner(&ctx);
	return rows;
}

static void
sg_dead_letter(SgWorker *w, TupleTableSlot *ev, ErrorData *edata);

/* an event set aside by the pipeline itself (a window's late event) */
void
BatchDeadLetter(SgWorker *w, TupleTableSlot *ev, const char *message, const char *sqlstate)
{
	ErrorData	edata;

	memset(&edata, 0, sizeof(edata));
	edata.message = (char *) message;
	edata.sqlerrcode = MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2], sqlstate[3], sqlstate[4]);
	sg_dead_letter(w, ev, &edata);
}

static void
sg_dead_letter(SgWorker *w, TupleTableSlot *ev, ErrorData *edata)
{
	/* the event's six columns, as the slot holds them (pipeline_catalog.c) */
	slot_getsomeattrs(ev, 6);
	DeadLetterInsert(w->def.id, w->def.name, ev->tts_values, ev->tts_isnull,
					 edata->message ? edata->message : "unknown error", unpack_sql_state(edata->sqlerrcode));
}

/*
 * The error policy for one event of an isolated run that failed with
 * `edata`: dead_letter records it (in the caller's transaction, which moves
 * past it), skip counts it.  Returns false for stop, with w->stop_error set.
 * Shared with remote sinks (sink_remote_write.c).
 */
bool
BatchApplyPolicy(SgWorker *w, TupleTableSlot *ev, ErrorData *edata)
{
	if (w->def.policy == SG_POLICY_STOP)
	{
		bool		isnull;

		w->stop_error = MemoryContextStrdup(TopMemoryContext,
										 psprintf("event (partition %d, seq %lld): %s",
												  DatumGetInt32(slot_getattr(ev, 1, &isnull)),
												  (long long) DatumGetInt64(slot_getattr(ev, 2, &isnull)),
												  edata->message));
		return false;
	}
	if (w->def.policy == SG_POLICY_DEAD_LETTER)
	{
		sg_dead_letter(w, ev, edata);
		w->batch_dead++;
	}
	else
		w->batch_skipped++;
	return true;
}

/*
 * Isolation: run the SQL event by event, each in a subtransaction, and
 * apply the error policy to the ones that fail.  `run` runs it over one
 * event: BatchRunSql, or a sink's own run of the SQL (a window's
 * evaluation).  Returns rows out, or -1 when the policy is stop and an
 * event failed (w->stop_error is set).
 */
int64
BatchRunIsolated(SgWorker *w, Tuplestorestate *store, SgRunSql run)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(w->event_desc, &TTSOpsMinimalTuple);
	int64		rows = 0;
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Tuplestorestate *one = tuplestore_begin_heap(false, false, work_mem);
		ErrorData  *edata = NULL;

		CHECK_FOR_INTERRUPTS();

		tuplestore_puttupleslot(one, ev);
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(oldcxt);
		PG_TRY();
		{
			rows += run(w, one, 1);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcxt);
			CurrentResourceOwner = oldowner;
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(oldcxt);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcxt);
			CurrentResourceOwner = oldowner;
		}
		PG_END_TRY();
		tuplestore_end(one);

		if (edata == NULL)
			continue;
		if (!BatchApplyPolicy(w, ev, edata))
		{
			ExecDropSingleTupleTableSlot(ev);
			return -1;
		}
		FreeErrorData(edata);
	}
	ExecDropSingleTupleTableSlot(ev);
	return rows;
}

static void
sg_end_store(void *arg)
{
	tuplestore_end((Tuplestorestate *) arg);
}

/*
 * A store for the batch, in batch_cxt (SPI calls leave CurrentMemoryContext
 * in SPI's procedure context, which dies with the transaction).
 * at_most_once reads the batch in a second transaction, so there the
 * store's temp files must not belong to the first one's resource owner
 * either (they would be closed at its commit); they are closed when
 * w->batch_cxt is reset instead, by a reset callback.  Such a store lives
 * outside batch_cxt: from 18 on a tuplestore keeps its data in a memory
 * context of its own, a child of the current one, and a reset deletes the
 * children before it runs the callbacks.
 */
Tuplestorestate *
BatchStore(SgWorker *w, int max_kbytes)
{
	static MemoryContext inter_xact_cxt = NULL;
	bool		inter_xact = w->def.guarantee == SG_AT_MOST_ONCE;
	MemoryContext oldcxt;
	Tuplestorestate *ts;

	if (inter_xact && inter_xact_cxt == NULL)
		inter_xact_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard inter-transaction batches",
											   ALLOCSET_DEFAULT_SIZES);
	oldcxt = MemoryContextSwitchTo(inter_xact ? inter_xact_cxt : w->batch_cxt);
	ts = tuplestore_begin_heap(false, inter_xact, max_kbytes);
	if (inter_xact)
	{
		MemoryContextCallback *cb = MemoryContextAlloc(w->batch_cxt, sizeof(MemoryContextCallback));

		cb->func = sg_end_store;
		cb->arg = ts;
		MemoryContextRegisterResetCallback(w->batch_cxt, cb);
	}
	MemoryContextSwitchTo(oldcxt);
	return ts;
}

/*
 * Pipeline-level dedup: drop events whose dedup_key this pipeline already
 * processed within its window (and repeats inside the batch), recording
 * the new keys in the same transaction.  Keys are claimed in key order, so
 * that two workers of one pipeline meeting the same keys wait for each
 * other instead of deadlocking.  Returns the filtered store.
 */
Tuplestorestate *
BatchDedupFilter(SgWorker *w, Tuplestorestate *store, int *n)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(w->event_desc, &TTSOpsMinimalTuple);
	Datum	   *keys = palloc(sizeof(Datum) * (*n));
	int			nk = 0,
				i;
	Tuplestorestate *out;
	HTAB	   *fresh;
	HASHCTL		ctl;
	SgUserSave	save;
	bool		isnull;

	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Datum		k = slot_getattr(ev, 5, &isnull);

		CHECK_FOR_INTERRUPTS();

		if (!isnull)
			keys[nk++] = datumCopy(k, false, -1);
	}
	if (nk == 0)
	{
		ExecDropSingleTupleTableSlot(ev);
		return store;
	}

	ctl.keysize = NAMEDATALEN * 4;
	ctl.entrysize = NAMEDATALEN * 4;
	ctl.hcxt = CurrentMemoryContext;
	fresh = hash_create("streamguard pipeline keys", nk, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	{
		Oid			types[4] = {INT4OID, TEXTARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
		Datum		values[4];
		TimestampTz now = GetCurrentTimestamp();

		values[0] = Int32GetDatum(w->def.id);
		values[1] = PointerGetDatum(construct_array(keys, nk, TEXTOID, -1, false, TYPALIGN_INT));
		values[2] = TimestampTzGetDatum(now);
		values[3] = TimestampTzGetDatum(now - w->def.dedup_window_us);
		SgBecomeDataOwner(&save, false);
		if (SPI_execute_plan(SgPlanCached(NULL,
										  "INSERT INTO streamguard.pipeline_dedup AS d (pipeline_id, dedup_key, seen_at) "
										  "SELECT DISTINCT $1, k, $3 FROM pg_catalog.unnest($2) AS k ORDER BY k "
										  "ON CONFLICT (pipeline_id, dedup_key) DO UPDATE SET seen_at = excluded.seen_at "
										  "WHERE d.seen_at OPERATOR(pg_catalog.<) $4 RETURNING d.dedup_key",
										  4, types),
							 values, NULL, false, 0) != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "pipeline dedup failed");
		for (i = 0; i < (int) SPI_processed; i++)
		{
			char		hk[NAMEDATALEN * 4];

			CHECK_FOR_INTERRUPTS();

			memset(hk, 0, sizeof(hk));
			strlcpy(hk, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1), sizeof(hk));
			hash_search(fresh, hk, HASH_ENTER, NULL);
		}
		SgRestoreUser(&save);
	}

	/* keep events without a key, and the first event of each fresh key */
	out = BatchStore(w, work_mem);
	*n = 0;
	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Datum		k = slot_getattr(ev, 5, &isnull);
		char		hk[NAMEDATALEN * 4];

		CHECK_FOR_INTERRUPTS();

		if (!isnull)
		{
			bool		found;

			memset(hk, 0, sizeof(hk));
			strlcpy(hk, TextDatumGetCString(k), sizeof(hk));
			if (hash_search(fresh, hk, HASH_FIND, NULL) == NULL)
				continue;		/* seen before */
			hash_search(fresh, hk, HASH_REMOVE, &found);	/* later repeats drop */
		}
		tuplestore_puttupleslot(out, ev);
		(*n)++;
	}
	ExecDropSingleTupleTableSlot(ev);
	return out;
}

/*
 * Drop the events named by skip_event, counting them as skipped and
 * forgetting the requests in the batch's transaction (one statement per
 * batch, however many of them it met).
 */
Tuplestorestate *
BatchSkipFilter(SgWorker *w, Tuplestorestate *store, int *n)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(w->event_desc, &TTSOpsMinimalTuple);
	Tuplestorestate *out = BatchStore(w, work_mem);
	Datum	   *parts = palloc(sizeof(Datum) * w->nskips);
	Datum	   *seqs = palloc(sizeof(Datum) * w->nskips);
	int			nmet = 0;
	bool		isnull;
	int			i;

	*n = 0;
	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		int32		p = DatumGetInt32(slot_getattr(ev, 1, &isnull));
		int64		seq = DatumGetInt64(slot_getattr(ev, 2, &isnull));

		CHECK_FOR_INTERRUPTS();

		for (i = 0; i < w->nskips; i++)
			if (w->skips[i].partition == p && w->skips[i].seq == seq)
				break;
		if (i < w->nskips && nmet < w->nskips)
		{
			parts[nmet] = Int32GetDatum(p);
			seqs[nmet++] = Int64GetDatum(seq);
			continue;
		}
		tuplestore_puttupleslot(out, ev);
		(*n)++;
	}
	ExecDropSingleTupleTableSlot(ev);

	if (nmet > 0)
	{
		Oid			types[3] = {INT4OID, INT4ARRAYOID, INT8ARRAYOID};
		Datum		values[3];
		SgUserSave	save;

		values[0] = Int32GetDatum(w->def.id);
		values[1] = PointerGetDatum(construct_array(parts, nmet, INT4OID, 4, true, TYPALIGN_INT));
		values[2] = PointerGetDatum(construct_array(seqs, nmet, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		SgBecomeDataOwner(&save, false);
		if (SPI_execute_with_args("DELETE FROM streamguard.pipeline_skip s "
								  "USING ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) AS m(p, q) "
								  "WHERE s.pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND s.partition OPERATOR(pg_catalog.=) m.p "
								  "AND s.seq OPERATOR(pg_catalog.=) m.q",
								  3, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not forget the skipped events");
		SgRestoreUser(&save);
		w->batch_skipped += nmet;
	}
	return out;
}

