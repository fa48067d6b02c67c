/*-------------------------------------------------------------------------
 *
 * sink_remote_write.c
 *		A remote sink's batch: the pipeline's rows written to the sink in
 *		one remote transaction, and that transaction's end.
 *
 * The pipeline's SELECT runs as the owner and its rows are rendered in
 * COPY text format (sg_run_select), then copied into the sink table, or,
 * for an upserting sink, into its staging table and on with the upsert
 * built at start (sink_remote.c).  The remote transaction ends prepared
 * (two_phase), committed with the positions kept on the sink (offsets),
 * or simply committed (the weaker guarantees).
 *	SinkRemoteWrite		the fast path: the whole remote transaction in one
 *						message, the rows streamed as they are rendered, its
 *						end sent without waiting
 *	SinkRemoteConfirm	waits for that end, before the local COMMIT
 *	SinkRemoteRunIsolated	isolation: the batch's events one by one in
 *						remote savepoints, under the error policy, with the
 *						dead letters of offsets mode kept on the sink too
 *	SinkRemoteForgetCommitted	the last batch's COMMIT PREPARED waited for,
 *						its local record dropped
 * The durability order holds here: the source's events are durable before
 * the rows end (HorizonMakeDurable), so before the remote can run the
 * PREPARE or COMMIT that follows them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "pipeline/sink_remote.h"

static void
sg_forget_done_gid(SgRemoteSink *s)
{
	if (s->done_gid)
		pfree(s->done_gid);
	s->done_gid = NULL;
}

/*
 * COMMIT PREPARED sent to the sink (after the local COMMIT, sink_remote.c):
 * wait for it, then drop its local record, in the next batch's
 * transaction.  Called as late in that batch as possible (before its own
 * remote transaction, or before an empty batch commits), so that the
 * remote commit overlaps the batch's fetch and SELECT.  If the commit
 * failed, the error fails this batch and the settling (sink_remote.c)
 * settles the transaction from the record, still there.
 */
void
SinkRemoteForgetCommitted(SgWorker *w)
{
	SgRemoteSink *s = RemoteSinkState(w);
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	SgUserSave	save;

	if (s->done_gid == NULL)
		return;
	RemoteFinish(WorkerRemote(w, &s->remote, SG_SIDE_SINK));
	values[0] = Int32GetDatum(w->def.id);
	values[1] = CStringGetTextDatum(s->done_gid);

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "DELETE FROM streamguard.remote_prepared "
									  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND gid OPERATOR(pg_catalog.=) $2",
									  2, types),
						 values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not forget a committed remote transaction");
	SgRestoreUser(&save);
	sg_forget_done_gid(s);
}

static char *
sg_offsets_key(SgWorker *w)
{
	return PipelineSinkKey(w->def.id);
}

/*
 * The worker's partitions in the sink's offsets and dead-letter tables, a
 * condition to append to a statement on the sink: with several workers
 * each reads and writes only the rows of the partitions it owns (p %
 * nworkers = worker), those whose positions its fence protects.  After a
 * change of the worker count the rows of a partition that moved are the
 * new owner's, whose first batch settles them (sink_remote.c).
 */
const char *
SinkRemoteOwnPartitions(SgWorker *w)
{
	if (w->def.nworkers <= 1)
		return "";
	return psprintf(" AND partition OPERATOR(pg_catalog.%%) %d OPERATOR(pg_catalog.=) %d",
					w->def.nworkers, w->def.worker);
}

/* whether partition p is the worker's (SinkRemoteOwnPartitions) */
bool
SinkRemoteOwns(SgWorker *w, int p)
{
	return w->def.nworkers <= 1 || p % w->def.nworkers == w->def.worker;
}

/* exactly_once through the sink's offsets table */
static bool
sg_offsets_mode(SgWorker *w)
{
	return w->def.guarantee == SG_EXACTLY_ONCE && !w->def.two_phase;
}

/*
 * Rows in COPY text format into the sink, in the open remote transaction:
 * straight into the sink table, or through the staging table (built at
 * start, sink_remote.c).
 */
static void
sg_sink_load(SgWorker *w, SgRemote *r, StringInfo data)
{
	SgRemoteSink *s = RemoteSinkState(w);

	RemoteCopyIn(r, s->copy_sql, data->data, data->len);
	if (s->upsert_sql)
	{
		RemoteExecOk(r, s->upsert_sql);
		RemoteExecOk(r, psprintf("DELETE FROM %s", s->stage_table));
	}
}

/* COPY text format of one value: runs of plain bytes copied at once */
static void
sg_copy_escape(StringInfo buf, const char *v)
{
	const char *run = v;

	for (; *v; v++)
	{
		const char *esc;

		switch (*v)
		{
			case '\\':
				esc = "\\\\";
				break;
			case '\t':
				esc = "\\t";
				break;
			case '\n':
				esc = "\\n";
				break;
			case '\r':
				esc = "\\r";
				break;
			default:
				continue;
		}
		if (v > run)
			appendBinaryStringInfo(buf, run, (int) (v - run));
		appendBinaryStringInfo(buf, esc, 2);
		run = v + 1;
	}
	if (v > run)
		appendBinaryStringInfo(buf, run, (int) (v - run));
}

/*
 * offsets mode: whether this batch's remote transaction removes the dead
 * letters an earlier batch left on the sink (sg_sink_dead_letter): once
 * every batch before this one is known to have committed here too, that
 * is when this batch's transaction did not have to settle anything
 * (the settling, sink_remote.c).
 */
static bool
sg_sink_clears_dead_letters(SgWorker *w)
{
	SgRemoteSink *s = RemoteSinkState(w);

	if (s->dead_pending && !s->resolved)
	{
		s->dead_pending = false;
		return true;
	}
	return false;
}

/*
 * BEGIN the batch's remote transaction, one statement at a time (the
 * isolated path); the dead letters to remove go first.
 */
static SgRemote *
sg_sink_begin(SgWorker *w)
{
	SgRemoteSink *s = RemoteSinkState(w);
	SgRemote   *r = WorkerRemote(w, &s->remote, SG_SIDE_SINK);

	SinkRemoteForgetCommitted(w);		/* the last batch's COMMIT PREPARED, first */
	if (s->upsert_sql && !s->stage_ready)
	{
		RemoteExecOk(r, s->stage_ddl[0]);
		RemoteExecOk(r, s->stage_ddl[1]);
		s->stage_ready = true;
	}
	RemoteExecOk(r, "BEGIN");
	if (sg_sink_clears_dead_letters(w))
	{
		const char *params[1] = {sg_offsets_key(w)};

		RemoteClear(RemoteExec(r, psprintf("DELETE FROM public.streamguard_sink_dead_letters WHERE pipeline OPERATOR(pg_catalog.=) $1%s",
										   SinkRemoteOwnPartitions(w)),
							   1, params));
	}
	return r;
}

/*
 * offsets mode: the statement that moves the positions on the sink, with
 * the rows, and only forward from where this batch began; *moved gets the
 * number of partitions it must move (0: no statement, NULL returned).  If
 * an earlier attempt of the same batch (a session we gave up on) committed
 * after all, the offsets are already past `first`, nothing is updated, and
 * this attempt rolls back (sg_sink_offsets_check); the positions are then
 * taken from the sink.
 */
static char *
sg_sink_offsets_sql(SgWorker *w, SgRemote *r, int64 *first, int64 *last, int nparts, int *moved)
{
	StringInfoData sql;
	StringInfoData firsts;
	char	   *key = RemoteLiteral(r, sg_offsets_key(w));
	int			p;

	*moved = 0;
	initStringInfo(&sql);
	initStringInfo(&firsts);
	appendStringInfoString(&sql, "INSERT INTO public.streamguard_sink_offsets AS o (pipeline, partition, position) "
						   "VALUES ");
	for (p = 0; p < nparts; p++)
	{
		if (first[p] <= 0)
			continue;
		appendStringInfo(&sql, "%s(%s, %d, %lld)", *moved ? ", " : "",
						 key, p, (long long) last[p]);
		appendStringInfo(&firsts, " WHEN %d THEN %lld", p, (long long) first[p]);
		(*moved)++;
	}
	appendStringInfo(&sql, " ON CONFLICT (pipeline, partition) DO UPDATE SET position = excluded.position "
					 "WHERE o.position < CASE excluded.partition%s END RETURNING 1", firsts.data);
	return *moved > 0 ? sql.data : NULL;
}

/* the offsets statement's result: all `moved` partitions moved, or roll back */
static void
sg_sink_offsets_check(SgWorker *w, SgRemote *r, SgRemoteResult *res, int moved)
{
	if (RemoteNTuples(res) != moved)
	{
		RemoteClear(res);
		RemoteExecOk(r, "ROLLBACK");
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the offsets of pipeline \"%s\" on server \"%s\" moved concurrently",
						w->def.name, w->def.sink_server),
				 errdetail("An earlier attempt of this batch committed on the sink; positions are taken from there.")));
	}
	RemoteClear(res);
}

/* offsets mode, one statement at a time (the isolated path) */
static void
sg_sink_offsets(SgWorker *w, SgRemote *r, int64 *first, int64 *last, int nparts)
{
	int			moved;
	char	   *sql = sg_sink_offsets_sql(w, r, first, last, nparts, &moved);

	if (sql)
		sg_sink_offsets_check(w, r, RemoteExec(r, sql, 0, NULL), moved);
}

/*
 * End the batch's remote transaction: prepare it (two_phase), or commit it
 * together with the positions (offsets), or simply commit it (the weaker
 * guarantees).  Returns the global transaction id when one was prepared.
 */
static char *
sg_sink_finish(SgWorker *w, SgRemote *r, int64 *first, int64 *last, int nparts)
{
	SgRemoteSink *s = RemoteSinkState(w);
	char	   *gid = NULL;

	WorkerFault(w, SG_FAULT_MID_COPY);
	/* the batch's events must not be lost here once the remote has them */
	HorizonMakeDurable();
	if (w->def.guarantee == SG_EXACTLY_ONCE && w->def.two_phase)
	{
		/* one id per attempt: a retry never collides with a delayed PREPARE */
		gid = PipelineGid(w->def.id, w->def.worker, w->def.epoch, ++s->attempts);
		PipelineSinkMarker(r, w->def.id, w->def.worker, gid);
		RemoteExecOk(r, psprintf("PREPARE TRANSACTION %s", RemoteLiteral(r, gid)));
		WorkerFault(w, SG_FAULT_AFTER_PREPARE);
	}
	else
	{
		if (w->def.guarantee == SG_EXACTLY_ONCE)
			sg_sink_offsets(w, r, first, last, nparts);
		RemoteExecOk(r, "COMMIT");
		WorkerFault(w, SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	WorkerRemoteStatus(w, SG_SIDE_SINK, r);
	return gid;
}

/*
 * The batch's remote transaction in one message (RemoteCopyStart): BEGIN,
 * the dead letters to forget and the two_phase marker, the COPY of the
 * rows, the upsert, and the end -- PREPARE TRANSACTION (two_phase),
 * COMMIT (the weaker guarantees), or in offsets mode the statement that
 * moves the positions there, whose result decides the COMMIT
 * (SinkRemoteConfirm).  Values are quoted literals: the simple protocol,
 * which takes several statements, has no parameters.
 */
static char *
sg_sink_sql(SgWorker *w, SgRemote *r, const char *gid, int64 *first, int64 *last, int nparts)
{
	SgRemoteSink *s = RemoteSinkState(w);
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "BEGIN; ");
	if (sg_sink_clears_dead_letters(w))
		appendStringInfo(&sql, "DELETE FROM public.streamguard_sink_dead_letters WHERE pipeline OPERATOR(pg_catalog.=) %s%s; ",
						 RemoteLiteral(r, sg_offsets_key(w)), SinkRemoteOwnPartitions(w));
	if (gid)
		appendStringInfo(&sql, "INSERT INTO public.streamguard_sink_marker AS m (pipeline, gid) VALUES (%s, %s) "
						 "ON CONFLICT (pipeline) DO UPDATE SET gid = excluded.gid; ",
						 RemoteLiteral(r, PipelineWorkerKey(w->def.id, w->def.worker)), RemoteLiteral(r, gid));
	appendStringInfoString(&sql, s->copy_sql);
	if (s->upsert_sql)
		appendStringInfo(&sql, "; %s; DELETE FROM %s", s->upsert_sql, s->stage_table);
	s->moved = 0;
	if (gid)
		appendStringInfo(&sql, "; PREPARE TRANSACTION %s", RemoteLiteral(r, gid));
	else if (sg_offsets_mode(w))
	{
		char	   *offsets = sg_sink_offsets_sql(w, r, first, last, nparts, &s->moved);

		if (offsets)
			appendStringInfo(&sql, "; %s", offsets);
	}
	else
		appendStringInfoString(&sql, "; COMMIT");
	return sql.data;
}

/*
 * Run the pipeline's SELECT over the batch as the owner and render its
 * rows in COPY text format for the sink.  With `stream` (the fast path,
 * SinkRemoteWrite): once the SELECT has run, the batch's remote transaction
 * is sent (s->sql, RemoteCopyStart) and the rows go out in chunks as they
 * are rendered, so that the remote parses them while we render the next
 * ones; what is left at the end stays in the returned buffer.  The buffer
 * is the worker's own, reused from batch to batch.
 */
#define SG_COPY_CHUNK 16384

static StringInfo
sg_run_select(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows, SgRemote *stream)
{
	SgRemoteSink *s = RemoteSinkState(w);
	SgOwnerContext ctx;
	SPIPlanPtr	plan;
	int			ret;
	uint64		i;
	int			c;
	StringInfo	buf;
	TupleDesc	desc;
	FmgrInfo   *out;
	bool	   *isvarlena;
	MemoryContext rowcxt;
	MemoryContext oldcxt;

	if (stream)
	{
		if (s->copy_buf == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			s->copy_buf = makeStringInfo();
			enlargeStringInfo(s->copy_buf, SG_COPY_CHUNK + 8192);
			MemoryContextSwitchTo(old);
		}
		buf = s->copy_buf;
		resetStringInfo(buf);
	}
	else
		buf = makeStringInfo();
	plan = BatchOwnerEnter(w, &ctx, store, n);
	ret = SPI_execute_plan(plan, NULL, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "the SQL of pipeline \"%s\" must return rows: %s", w->def.name, SPI_result_code_string(ret));
	if (stream)
		RemoteCopyStart(stream, s->sql);
	desc = SPI_tuptable->tupdesc;
	/* each column's output function looked up once, not per value */
	out = palloc(sizeof(FmgrInfo) * Max(desc->natts, 1));
	isvarlena = palloc(sizeof(bool) * Max(desc->natts, 1));
	for (c = 0; c < desc->natts; c++)
	{
		Oid			fn;

		getTypeOutputInfo(TupleDescAttr(desc, c)->atttypid, &fn, &isvarlena[c]);
		fmgr_info(fn, &out[c]);
	}
	/*
	 * each row's values rendered in a short-lived context, reset per row:
	 * the output functions' scratch memory (detoasted copies, iterators)
	 * does not pile up in the batch's
	 */
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "remote sink row", ALLOCSET_DEFAULT_SIZES);
	oldcxt = MemoryContextSwitchTo(rowcxt);
	for (i = 0; i < SPI_processed; i++)
	{
		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(rowcxt);
		for (c = 0; c < desc->natts; c++)
		{
			bool		isnull;
			Datum		d = heap_getattr(SPI_tuptable->vals[i], c + 1, desc, &isnull);

			if (c > 0)
				appendStringInfoChar(buf, '\t');
			if (isnull)
				appendStringInfoString(buf, "\\N");
			else
			{
				char	   *v;

				if (isvarlena[c])
					d = PointerGetDatum(PG_DETOAST_DATUM(d));
				v = OutputFunctionCall(&out[c], d);
				sg_copy_escape(buf, v);
			}
		}
		appendStringInfoChar(buf, '\n');
		if (stream && buf->len >= SG_COPY_CHUNK)
		{
			RemoteCopyData(stream, buf->data, buf->len);
			resetStringInfo(buf);
		}
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(rowcxt);
	*rows = (int64) SPI_processed;
	BatchLeaveOwner(&ctx);
	return buf;
}

/*
 * Write the batch's output rows to the sink, inside one remote transaction.
 * The fast path: the owner's SELECT runs, then the whole remote transaction
 * goes out in one message with the rows streamed as they are rendered
 * (sg_run_select), and its end is sent without waiting for it.  The caller
 * records the batch here meanwhile (the gid, the counters, the checkpoint
 * log) and then confirms the remote end (SinkRemoteConfirm) before its COMMIT.
 * Nothing is made durable on the remote before this database's facts it
 * depends on are: the source's events are durable here before the rows
 * end (HorizonMakeDurable), as before any PREPARE or COMMIT.  Returns the
 * global transaction id when one is being prepared.
 */
char *
SinkRemoteWrite(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows, int64 *first, int64 *last, int nparts)
{
	SgRemoteSink *s = RemoteSinkState(w);
	SgRemote   *r = WorkerRemote(w, &s->remote, SG_SIDE_SINK);
	char	   *gid = NULL;
	StringInfo	rest;

	SinkRemoteForgetCommitted(w);		/* the last batch's COMMIT PREPARED, first */
	if (s->upsert_sql && !s->stage_ready)
	{
		RemoteExecOk(r, s->stage_ddl[0]);
		RemoteExecOk(r, s->stage_ddl[1]);
		s->stage_ready = true;
	}
	if (w->def.guarantee == SG_EXACTLY_ONCE && w->def.two_phase)
		/* one id per attempt: a retry never collides with a delayed PREPARE */
		gid = PipelineGid(w->def.id, w->def.worker, w->def.epoch, ++s->attempts);
	s->sql = sg_sink_sql(w, r, gid, first, last, nparts);
	rest = sg_run_select(w, store, n, rows, r);
	if (rest->len > 0)
		RemoteCopyData(r, rest->data, rest->len);
	resetStringInfo(rest);
	WorkerFault(w, SG_FAULT_MID_COPY);
	/* the batch's events must not be lost here once the remote has them */
	HorizonMakeDurable();
	s->ticket = RemoteCopyEnd(r);
	s->end_pending = true;
	WorkerFault(w, SG_FAULT_REMOTE_END_SENT);
	return gid;
}

/*
 * Confirm the end of the remote transaction SinkRemoteWrite sent: wait for the
 * PREPARE TRANSACTION or COMMIT (an error fails the batch: nothing was
 * committed here), or, in offsets mode, move the positions there and
 * commit.  Called before the batch's local COMMIT.
 */
void
SinkRemoteConfirm(SgWorker *w)
{
	SgRemoteSink *s = RemoteSinkState(w);
	SgRemote   *r;

	if (!s->end_pending)
		return;
	r = WorkerRemote(w, &s->remote, SG_SIDE_SINK);
	s->end_pending = false;
	if (sg_offsets_mode(w))
	{
		SgRemoteResult *res = RemoteReceive(r, s->ticket);

		if (res == NULL)
			elog(ERROR, "the remote transaction of the batch was not confirmed");
		if (s->moved > 0)
			sg_sink_offsets_check(w, r, res, s->moved);
		else
			RemoteClear(res);
		RemoteExecOk(r, "COMMIT");
		WorkerFault(w, SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	else
	{
		RemoteFinish(r);
		WorkerFault(w, w->def.two_phase && w->def.guarantee == SG_EXACTLY_ONCE ?
					SG_FAULT_AFTER_PREPARE : SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	WorkerRemoteStatus(w, SG_SIDE_SINK, r);
}

/* an event's column in text form (for the sink's dead-letter table) */
static const char *
sg_event_text(SgWorker *w, TupleTableSlot *ev, int attno)
{
	bool		isnull;
	Datum		d = slot_getattr(ev, attno, &isnull);
	Oid			out;
	bool		isvarlena;

	if (isnull)
		return NULL;
	getTypeOutputInfo(TupleDescAttr(w->event_desc, attno - 1)->atttypid, &out, &isvarlena);
	return OidOutputFunctionCall(out, d);
}

/*
 * offsets mode: a dead letter also goes to the sink, in the remote
 * transaction that commits the batch's rows and positions there, so that it
 * is not lost if that commits and the local one does not (the positions are
 * then taken from the sink and the batch is not redone; the settling brings
 * these rows here).
 */
static void
sg_sink_dead_letter(SgWorker *w, SgRemote *r, TupleTableSlot *ev, ErrorData *edata)
{
	SgRemoteSink *s = RemoteSinkState(w);
	const char *params[9];
	int			c;

	params[0] = sg_offsets_key(w);
	for (c = 1; c <= 6; c++)
		params[c] = sg_event_text(w, ev, c);
	params[7] = edata->message ? edata->message : "unknown error";
	params[8] = unpack_sql_state(edata->sqlerrcode);
	RemoteClear(RemoteExec(r, "INSERT INTO public.streamguard_sink_dead_letters (pipeline, partition, seq, "
						   "key, payload, dedup_key, appended_at, error, sqlstate) "
						   "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", 9, params));
	s->dead_pending = true;
}

/*
 * Isolation for a remote sink (a batch that failed max_attempts times): the
 * batch's events one by one, in one remote transaction.  Each event's SELECT
 * runs in a local subtransaction and its rows go to the sink inside a
 * remote savepoint, so an event whose SELECT fails, or whose rows the sink
 * rejects (a constraint, a bad value), is undone on both sides and handed
 * to the error policy while the others' rows stay.  The remote transaction
 * then ends like any batch's (prepared, or committed with the positions):
 * the dead letters, recorded in the batch's local transaction (and, in
 * offsets mode, on the sink too), commit with the effects and the
 * positions.  An error that is not the event's own -- a lost connection,
 * contention, a cancel -- fails the whole batch as before.  Returns rows
 * out and sets *gid as SinkRemoteWrite returns it, or returns -1 when the policy
 * is stop (the remote transaction rolled back, w->stop_error set).
 */
int64
SinkRemoteRunIsolated(SgWorker *w, Tuplestorestate *store, int64 *first, int64 *last, int nparts, char **gid)
{
	SgRemote   *r = sg_sink_begin(w);
	TupleTableSlot *ev = MakeSingleTupleTableSlot(w->event_desc, &TTSOpsMinimalTuple);
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		dead_on_sink = w->def.policy == SG_POLICY_DEAD_LETTER && sg_offsets_mode(w);
	int64		rows = 0;

	*gid = NULL;
	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Tuplestorestate *one = tuplestore_begin_heap(false, false, work_mem);
		ErrorData  *edata = NULL;
		volatile bool in_savepoint = false;
		volatile int64 n = 0;

		CHECK_FOR_INTERRUPTS();

		tuplestore_puttupleslot(one, ev);
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(oldcxt);
		PG_TRY();
		{
			int64		nrows;
			StringInfo	data = sg_run_select(w, one, 1, &nrows, NULL);

			n = nrows;
			if (data->len > 0)
			{
				RemoteExecOk(r, "SAVEPOINT streamguard_event");
				in_savepoint = true;
				sg_sink_load(w, r, data);
				RemoteExecOk(r, "RELEASE SAVEPOINT streamguard_event");
				in_savepoint = false;
			}
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
		{
			rows += n;
			continue;
		}
		/* not this event's fault: the batch fails and is retried */
		if (!RemoteConnected(r) || WorkerTransientError(edata))
			ReThrowError(edata);
		if (in_savepoint)
		{
			RemoteExecOk(r, "ROLLBACK TO SAVEPOINT streamguard_event");
			RemoteExecOk(r, "RELEASE SAVEPOINT streamguard_event");
		}
		if (!BatchApplyPolicy(w, ev, edata))
		{
			RemoteExecOk(r, "ROLLBACK");
			ExecDropSingleTupleTableSlot(ev);
			return -1;
		}
		if (dead_on_sink)
			sg_sink_dead_letter(w, r, ev, edata);
		FreeErrorData(edata);
	}
	ExecDropSingleTupleTableSlot(ev);
	*gid = sg_sink_finish(w, r, first, last, nparts);
	return rows;
}
