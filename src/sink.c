/*-------------------------------------------------------------------------
 *
 * sink.c
 *		Remote sinks: writing a batch's rows to another server.
 *
 * The pipeline's SELECT runs as the owner and its rows are rendered in
 * COPY text format, then copied into the sink table in a remote
 * transaction that is
 *	two_phase	prepared before the local COMMIT (which records its gid in
 *				streamguard.remote_prepared), committed after it;
 *	offsets		committed together with the positions, which the sink
 *				keeps in public.streamguard_sink_offsets;
 *	otherwise	simply committed (the weaker guarantees).
 * After a crash or an error SinkResolve settles what was left between the
 * two databases before the next batch (twophase.c resolves the prepared
 * transactions).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/memutils.h"

#include "worker.h"

static void
sg_forget_done_gid(SgWorker *w)
{
	if (w->done_gid)
		pfree(w->done_gid);
	w->done_gid = NULL;
}

/*
 * COMMIT PREPARED done on the sink: drop its local record, in the batch's
 * transaction (the next one after the commit).
 */
void
SinkForgetCommitted(SgWorker *w)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2] = {Int32GetDatum(w->def.id), CStringGetTextDatum(w->done_gid)};
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("DELETE FROM streamguard.remote_prepared "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND gid OPERATOR(pg_catalog.=) $2",
							  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not forget a committed remote transaction");
	SgRestoreUser(&save);
	sg_forget_done_gid(w);
}

/*
 * The decision of a two_phase batch: the prepared transaction's gid,
 * recorded in the batch's local transaction, so that it commits with it or
 * never.
 */
void
SinkRecordPrepared(SgWorker *w, const char *gid)
{
	Oid			types[3] = {INT4OID, TEXTOID, TEXTOID};
	Datum		values[3] = {Int32GetDatum(w->def.id), CStringGetTextDatum(gid),
	CStringGetTextDatum(w->def.sink_server)};
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("INSERT INTO streamguard.remote_prepared (pipeline_id, gid, server) "
							  "VALUES ($1, $2, $3)", 3, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record the prepared remote transaction");
	SgRestoreUser(&save);
}

/*
 * After the local COMMIT: commit the prepared remote transaction.  Its
 * local record goes in the next batch's transaction (SinkForgetCommitted);
 * if we crash before, SinkResolve finds it committed.
 */
void
SinkCommitPrepared(SgWorker *w, const char *gid)
{
	SgRemote   *r;

	WorkerBegin("commit prepared");
	r = WorkerRemote(w, SG_SIDE_SINK);
	HorizonMakeDurable();		/* the decision, whatever synchronous_commit */
	RemoteExecOk(r, psprintf("COMMIT PREPARED %s", RemoteLiteral(r, gid)));
	w->done_gid = MemoryContextStrdup(TopMemoryContext, gid);
	WorkerRemoteStatus(w, SG_SIDE_SINK, r);
	WorkerCommit();
}

static char *
sg_offsets_key(SgWorker *w)
{
	return PipelineSinkKey(w->def.id);
}

/*
 * Settle what a crash or error may have left between the two databases.
 * two_phase: a prepared remote transaction whose batch committed locally
 * (recorded in remote_prepared) is committed, any other one of ours is
 * rolled back.  offsets: positions move up to what the sink recorded in
 * the same remote transaction as the rows.  Runs fenced, in a local
 * transaction, before the next batch.  Returns false when the sink lost a
 * batch committed here (w->stop_error says which).
 */
bool
SinkResolve(SgWorker *w, SgStreamMeta *meta)
{
	SgRemote   *r = WorkerRemote(w, SG_SIDE_SINK);
	SgUserSave	save;
	char	   *lost = NULL;

	if (w->def.two_phase)
		lost = PipelineResolveInDoubt(r, w->def.id, w->def.name);
	else
	{
		const char *params[1];
		SgRemoteResult *res;
		int64	   *pos = palloc(sizeof(int64) * meta->nparts);
		int			i;

		params[0] = sg_offsets_key(w);
		res = RemoteExec(r, "SELECT partition, position FROM public.streamguard_sink_offsets "
						 "WHERE pipeline = $1", 1, params);
		for (i = 0; i < meta->nparts; i++)
			pos[i] = -1;
		for (i = 0; i < RemoteNTuples(res); i++)
		{
			int			p = atoi(RemoteGetValue(res, i, 0));

			if (p >= 0 && p < meta->nparts)
				pos[p] = strtoll(RemoteGetValue(res, i, 1), NULL, 10);
		}
		RemoteClear(res);
		SgBecomeDataOwner(&save, false);
		ConsumerAdvance(meta, w->consumer_name, pos);
		SgRestoreUser(&save);
	}
	sg_forget_done_gid(w);
	WorkerRemoteStatus(w, SG_SIDE_SINK, r);
	if (lost)
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
										 psprintf("remote server \"%s\" lost the committed batch of pipeline \"%s\" "
												  "(prepared transaction %s): it is neither prepared nor marked committed there; "
												  "was the server restored or failed over?  Resume to accept the loss, "
												  "or reset_pipeline to replay before resuming",
												  w->def.sink_server, w->def.name, lost));
	return lost == NULL;
}

/* COPY text format of one value */
static void
sg_copy_escape(StringInfo buf, const char *v)
{
	for (; *v; v++)
	{
		switch (*v)
		{
			case '\\':
				appendStringInfoString(buf, "\\\\");
				break;
			case '\t':
				appendStringInfoString(buf, "\\t");
				break;
			case '\n':
				appendStringInfoString(buf, "\\n");
				break;
			case '\r':
				appendStringInfoString(buf, "\\r");
				break;
			default:
				appendStringInfoChar(buf, *v);
		}
	}
}

/*
 * Write the batch's output rows to the sink, inside a remote transaction
 * that is prepared (two_phase), or committed together with the positions
 * (offsets), or simply committed (the weaker guarantees).  Returns the
 * global transaction id when one was prepared.
 */
char *
SinkWrite(SgWorker *w, StringInfo data, int64 *first, int64 *last, int nparts)
{
	SgRemote   *r = WorkerRemote(w, SG_SIDE_SINK);
	char	   *gid = NULL;

	RemoteExecOk(r, "BEGIN");
	if (data->len > 0)
		RemoteCopyIn(r, w->copy_sql, data->data, data->len);
	WorkerFault(w, SG_FAULT_MID_COPY);
	/* the batch's events must not be lost here once the remote has them */
	HorizonMakeDurable();
	if (w->def.guarantee == SG_EXACTLY_ONCE && w->def.two_phase)
	{
		/* one id per attempt: a retry never collides with a delayed PREPARE */
		gid = psprintf("%s%lld:%lld", PipelineGidPrefix(w->def.id), (long long) w->def.epoch,
					   (long long) ++w->sink_attempts);
		PipelineSinkMarker(r, w->def.id, gid);
		RemoteExecOk(r, psprintf("PREPARE TRANSACTION %s", RemoteLiteral(r, gid)));
		WorkerFault(w, SG_FAULT_AFTER_PREPARE);
	}
	else
	{
		if (w->def.guarantee == SG_EXACTLY_ONCE)
		{
			/*
			 * The positions go with the rows, and only forward from where
			 * this batch began: if an earlier attempt of the same batch
			 * (a session we gave up on) committed after all, the offsets
			 * are already past `first`, nothing is updated, and this attempt
			 * rolls back; the positions are then taken from the sink.
			 */
			StringInfoData sql;
			int			p,
						moved = 0;
			char	   *key = RemoteLiteral(r, sg_offsets_key(w));
			SgRemoteResult *res;
			StringInfoData firsts;

			initStringInfo(&sql);
			initStringInfo(&firsts);
			appendStringInfoString(&sql, "INSERT INTO public.streamguard_sink_offsets AS o (pipeline, partition, position) "
								   "VALUES ");
			for (p = 0; p < nparts; p++)
			{
				if (first[p] <= 0)
					continue;
				appendStringInfo(&sql, "%s(%s, %d, %lld)", moved ? ", " : "",
								 key, p, (long long) last[p]);
				appendStringInfo(&firsts, " WHEN %d THEN %lld", p, (long long) first[p]);
				moved++;
			}
			appendStringInfo(&sql, " ON CONFLICT (pipeline, partition) DO UPDATE SET position = excluded.position "
							 "WHERE o.position < CASE excluded.partition%s END RETURNING 1", firsts.data);
			if (moved > 0)
			{
				res = RemoteExec(r, sql.data, 0, NULL);
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
		}
		RemoteExecOk(r, "COMMIT");
		WorkerFault(w, SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	WorkerRemoteStatus(w, SG_SIDE_SINK, r);
	return gid;
}

/*
 * Run the pipeline's SELECT over the batch as the owner and render its
 * rows in COPY text format for the sink.
 */
StringInfo
SinkRunSelect(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows)
{
	SgOwnerContext ctx;
	SPIPlanPtr	plan;
	int			ret;
	uint64		i;
	int			c;
	StringInfo	buf = makeStringInfo();

	plan = BatchOwnerEnter(w, &ctx, store, n);
	ret = SPI_execute_plan(plan, NULL, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "the SQL of pipeline \"%s\" must return rows: %s", w->def.name, SPI_result_code_string(ret));
	for (i = 0; i < SPI_processed; i++)
	{
		for (c = 1; c <= SPI_tuptable->tupdesc->natts; c++)
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, c);

			if (c > 1)
				appendStringInfoChar(buf, '\t');
			if (v == NULL)
				appendStringInfoString(buf, "\\N");
			else
				sg_copy_escape(buf, v);
		}
		appendStringInfoChar(buf, '\n');
	}
	*rows = (int64) SPI_processed;
	BatchLeaveOwner(&ctx);
	return buf;
}

