/*-------------------------------------------------------------------------
 *
 * sink_remote.c
 *		A table on a remote PostgreSQL server as a pipeline's sink.
 *
 * The pipeline's SQL is a SELECT; its rows go to the sink table (or, for
 * an upserting sink, through a staging table and INSERT ... ON CONFLICT:
 * sg_remote_sink_setup) in a remote transaction that is
 *	two_phase	prepared before the local COMMIT (which records its gid in
 *				streamguard.remote_prepared), committed after it;
 *	offsets		committed together with the positions, which the sink
 *				keeps in public.streamguard_sink_offsets;
 *	otherwise	simply committed (the weaker guarantees).
 * This file is the routine: the statements built at start, the settling
 * of what a crash or an error left between the two databases before the
 * next batch (sg_remote_sink_settle; twophase.c resolves the prepared transactions),
 * and the steps of a batch, whose remote transaction sink_remote_write.c
 * writes.  Its state (SgRemoteSink, sink_remote.h) holds the connection,
 * the statements, and what a batch leaves for the next.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/md5.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "catalog/pipeline_catalog.h"
#include "pipeline/sink_remote.h"

/*
 * The decision of a two_phase batch: the prepared transaction's gid,
 * recorded in the batch's local transaction, so that it commits with it or
 * never.
 */
static void
sg_record_prepared(SgWorker *w, const char *gid)
{
	Oid			types[3] = {INT4OID, TEXTOID, TEXTOID};
	Datum		values[3] = {Int32GetDatum(w->def.id), CStringGetTextDatum(gid),
	CStringGetTextDatum(w->def.sink_server)};
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "INSERT INTO streamguard.remote_prepared (pipeline_id, gid, server) "
									  "VALUES ($1, $2, $3)", 3, types),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record the prepared remote transaction");
	SgRestoreUser(&save);
}

/*
 * After the local COMMIT: commit the prepared remote transaction.  The
 * statement is sent without waiting for it: the next batch waits for its
 * result just before it needs the sink, and drops the local record then
 * (SinkRemoteForgetCommitted); if we crash before, the settling
 * (sg_remote_sink_settle) finds it committed, or commits it.
 */
static void
sg_commit_prepared(SgWorker *w, const char *gid)
{
	SgRemoteSink *s = RemoteSinkState(w);
	SgRemote   *r;

	WorkerBegin("commit prepared");
	r = WorkerRemote(w, &s->remote, SG_SIDE_SINK);
	HorizonMakeDurable();		/* the decision, whatever synchronous_commit */
	RemoteSend(r, psprintf("COMMIT PREPARED %s", RemoteLiteral(r, gid)));
	s->done_gid = MemoryContextStrdup(TopMemoryContext, gid);
	WorkerCommit();
}

/* a statement of the worker's, kept for its life */
static char *
sg_keep(const char *s)
{
	return MemoryContextStrdup(TopMemoryContext, s);
}

/*
 * The statements of the pipeline's sink, built once at start from the
 * SELECT's output columns `cols` (names), in TopMemoryContext.  A plain sink
 * is a COPY into the sink table.  An upserting sink (sink_on_conflict) COPYs
 * into its staging table on the remote -- an unlogged table of the
 * pipeline's with the SELECT's columns and a row number -- then inserts
 * the last row of each key (in event order) into the sink with ON CONFLICT
 * (the conflict columns) DO UPDATE of the other columns, and empties the
 * staging table, all in the batch's remote transaction.  A temporary table
 * would not do: a transaction that used one cannot be prepared.  Rows
 * with a NULL in a conflict column never conflict; they are all inserted.
 */
static void
sg_remote_sink_setup(SgWorker *w, List *cols)
{
	SgRemoteSink *s = RemoteSinkState(w);
	StringInfoData list,
				conf,
				set,
				nulls;
	ListCell   *lc;
	int			i;
	char	   *stage;

	initStringInfo(&list);
	foreach(lc, cols)
		appendStringInfo(&list, "%s%s", list.len ? ", " : "", quote_identifier(lfirst(lc)));
	if (w->def.sink_nconflict == 0)
	{
		s->copy_sql = MemoryContextStrdup(TopMemoryContext,
										  psprintf("COPY %s (%s) FROM STDIN", w->def.sink_table, list.data));
		return;
	}
	{
		char		hex[33];
		const char *errstr = NULL;
		/* one per worker: their batches run side by side */
		char	   *key = PipelineWorkerKey(w->def.id, w->def.worker);

		if (!pg_md5_hash(key, strlen(key), hex, &errstr))
			elog(ERROR, "could not name the staging table: %s", errstr ? errstr : "md5 failed");
		stage = psprintf("public.%s", quote_identifier(psprintf("streamguard_stage_%s", hex)));
	}
	initStringInfo(&conf);
	initStringInfo(&nulls);
	for (i = 0; i < w->def.sink_nconflict; i++)
	{
		const char *c = quote_identifier(w->def.sink_conflict[i]);

		appendStringInfo(&conf, "%s%s", i ? ", " : "", c);
		appendStringInfo(&nulls, " OR %s IS NULL", c);
	}
	initStringInfo(&set);
	foreach(lc, cols)
	{
		bool		is_key = false;

		for (i = 0; i < w->def.sink_nconflict; i++)
			is_key |= strcmp(lfirst(lc), w->def.sink_conflict[i]) == 0;
		if (!is_key)
			appendStringInfo(&set, "%s%s = excluded.%s", set.len ? ", " : "",
							 quote_identifier(lfirst(lc)), quote_identifier(lfirst(lc)));
	}
	s->stage_ddl[0] = sg_keep(psprintf("CREATE UNLOGGED TABLE IF NOT EXISTS %s AS SELECT %s FROM %s WITH NO DATA",
							   stage, list.data, w->def.sink_table));
	s->stage_ddl[1] = sg_keep(psprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS streamguard_ord bigint "
							   "GENERATED ALWAYS AS IDENTITY", stage));
	s->copy_sql = sg_keep(psprintf("COPY %s (%s) FROM STDIN", stage, list.data));
	s->upsert_sql = sg_keep(psprintf("INSERT INTO %s (%s) SELECT %s FROM "
							 "(SELECT *, pg_catalog.row_number() OVER (PARTITION BY %s "
							 "ORDER BY streamguard_ord DESC) AS streamguard_rn FROM %s) streamguard_s "
							 "WHERE streamguard_rn OPERATOR(pg_catalog.=) 1%s ORDER BY streamguard_ord "
							 "ON CONFLICT (%s) DO %s%s",
							 w->def.sink_table, list.data, list.data, conf.data, stage, nulls.data,
							 conf.data, set.len ? "UPDATE SET " : "NOTHING", set.data));
	s->stage_table = sg_keep(stage);
}

/*
 * offsets mode: the dead letters a batch wrote on the sink (in the remote
 * transaction that committed its rows and positions) that are not here:
 * the batch's local transaction never committed.  Those past the local
 * positions `here` are recorded now, in the transaction that moves the
 * positions up to the sink's.  The sink's rows stay until a later batch
 * knows them recorded here (sink_remote_write.c).
 */
static void
sg_sink_import_dead_letters(SgWorker *w, SgRemote *r, const int64 *here, int nparts)
{
	SgRemoteSink *s = RemoteSinkState(w);
	const char *params[1] = {PipelineSinkKey(w->def.id)};
	SgRemoteResult *res;
	int64		n = 0;
	int			i;
	SgUserSave	save;

	res = RemoteExec(r, "SELECT pg_catalog.to_regclass('public.streamguard_sink_dead_letters') IS NOT NULL",
					 0, NULL);
	i = strcmp(RemoteGetValue(res, 0, 0), "t") == 0;
	RemoteClear(res);
	if (!i)
		return;
	res = RemoteExec(r, psprintf("SELECT partition, seq, key, payload, dedup_key, appended_at, error, sqlstate "
								 "FROM public.streamguard_sink_dead_letters WHERE pipeline OPERATOR(pg_catalog.=) $1%s "
								 "ORDER BY partition, seq", SinkRemoteOwnPartitions(w)),
					 1, params);
	if (RemoteNTuples(res) > 0)
		s->dead_pending = true;
	SgBecomeDataOwner(&save, false);
	for (i = 0; i < RemoteNTuples(res); i++)
	{
		Datum		ev[6];
		bool		isnull[6];
		int			p = atoi(RemoteGetValue(res, i, 0));
		int64		seq = strtoll(RemoteGetValue(res, i, 1), NULL, 10);
		int			c;

		CHECK_FOR_INTERRUPTS();

		if (p < 0 || p >= nparts || seq <= here[p] || !SinkRemoteOwns(w, p))
			continue;			/* recorded here with its batch */
		/* the sink's text, as the event's columns (pipeline_catalog.c) */
		ev[0] = Int32GetDatum(p);
		ev[1] = Int64GetDatum(seq);
		for (c = 2; c < 6; c++)
			isnull[c] = RemoteGetIsNull(res, i, c);
		ev[2] = isnull[2] ? (Datum) 0 : CStringGetTextDatum(RemoteGetValue(res, i, 2));
		ev[3] = isnull[3] ? (Datum) 0 : DirectFunctionCall1(jsonb_in, CStringGetDatum(RemoteGetValue(res, i, 3)));
		ev[4] = isnull[4] ? (Datum) 0 : CStringGetTextDatum(RemoteGetValue(res, i, 4));
		ev[5] = isnull[5] ? (Datum) 0 :
			DirectFunctionCall3(timestamptz_in, CStringGetDatum(RemoteGetValue(res, i, 5)),
								ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
		isnull[0] = isnull[1] = false;
		DeadLetterInsert(w->def.id, w->def.name, ev, isnull,
						 RemoteGetIsNull(res, i, 6) ? "unknown error" : RemoteGetValue(res, i, 6),
						 RemoteGetIsNull(res, i, 7) ? "XX000" : RemoteGetValue(res, i, 7));
		n++;
	}
	RemoteClear(res);
	if (n > 0)
	{
		Oid			types[2] = {INT4OID, INT8OID};
		Datum		values[2] = {Int32GetDatum(w->def.id), Int64GetDatum(n)};

		if (SPI_execute_with_args(SgPipelineStatsCatalog() ?
								  "UPDATE streamguard.pipeline_stats SET dead_letters = dead_letters OPERATOR(pg_catalog.+) $2 "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1" :
								  "UPDATE streamguard.pipeline SET dead_letters = dead_letters OPERATOR(pg_catalog.+) $2 "
								  "WHERE id OPERATOR(pg_catalog.=) $1", 2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not count the dead letters");
	}
	SgRestoreUser(&save);
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
static bool
sg_remote_sink_settle(SgWorker *w, SgBatch *b)
{
	SgRemoteSink *s = RemoteSinkState(w);
	SgRemote   *r = WorkerRemote(w, &s->remote, SG_SIDE_SINK);
	char	   *lost = NULL;

	if (w->def.two_phase)
		lost = PipelineResolveInDoubt(r, w->def.id, w->def.name, w->def.worker, w->def.nworkers);
	else
	{
		const char *params[1];
		SgRemoteResult *res;
		/* the positions kept here: a local stream's, or remote_position's rows */
		int			nparts = b->stream ? b->stream->nparts : w->def.remote_nparts;
		int64	   *pos = palloc(sizeof(int64) * nparts);
		int64	   *here = palloc(sizeof(int64) * nparts);
		int			i;

		params[0] = PipelineSinkKey(w->def.id);
		res = RemoteExec(r, "SELECT partition, position FROM public.streamguard_sink_offsets "
						 "WHERE pipeline OPERATOR(pg_catalog.=) $1", 1, params);
		for (i = 0; i < nparts; i++)
			pos[i] = -1;
		for (i = 0; i < RemoteNTuples(res); i++)	/* bounded: a row per partition */
		{
			int			p = atoi(RemoteGetValue(res, i, 0));

			/* another worker's partition: its fence, its positions */
			if (p >= 0 && p < nparts && SinkRemoteOwns(w, p))
				pos[p] = strtoll(RemoteGetValue(res, i, 1), NULL, 10);
		}
		RemoteClear(res);
		/* the dead letters of batches the sink has and we do not, first */
		SourcePositions(w, b, here, nparts);
		sg_sink_import_dead_letters(w, r, here, nparts);
		SourceAdvance(w, b, pos, nparts);
	}
	s->resolved = true;
	if (s->done_gid)
		pfree(s->done_gid);
	s->done_gid = NULL;
	s->stage_ready = false;		/* after a failure, make sure it is there */
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

/* ------------------------------------------------------------ routine */

/* the state, and the sink's statements from the SELECT's output columns */
static const char *
sg_remote_sink_open(SgWorker *w)
{
	SgRemoteSink *s = MemoryContextAllocZero(TopMemoryContext, sizeof(SgRemoteSink));
	List	   *cols;

	s->need_resolve = true;
	w->sink_state = s;
	WorkerBegin("start");
	cols = PipelineOutputNames(w->def.sql);
	if (cols == NIL)
		elog(ERROR, "the SQL of pipeline \"%s\" must be a single SELECT", w->def.name);
	sg_remote_sink_setup(w, cols);
	WorkerCommit();
	return NULL;
}

/*
 * The batch's first steps on the sink: nothing of it sent yet; and, after
 * a failed batch or at start, what was left between the two databases
 * settled.  False when the sink lost a batch committed here.
 */
static bool
sg_remote_sink_begin(SgWorker *w, SgBatch *b)
{
	SgRemoteSink *s = RemoteSinkState(w);

	s->resolved = false;
	s->end_pending = false;
	s->gid = NULL;
	if (s->need_resolve)
	{
		if (!sg_remote_sink_settle(w, b))
			return false;
		s->need_resolve = false;
	}
	return true;
}

/* an empty batch: the last COMMIT PREPARED waited for before it commits */
static int64
sg_remote_sink_empty(SgWorker *w, SgBatch *b)
{
	SinkRemoteForgetCommitted(w);
	return 0;
}

/*
 * The rows to the sink: the fast path (SinkRemoteWrite), or event by event
 * under the error policy (SinkRemoteRunIsolated).  A two_phase batch's
 * gid is recorded here in the batch's transaction, so that it commits
 * with it or never.
 */
static int64
sg_remote_sink_write(SgWorker *w, SgBatch *b)
{
	SgRemoteSink *s = RemoteSinkState(w);
	int64		rows = 0;
	char	   *gid;

	if (b->isolate)
		rows = SinkRemoteRunIsolated(w, b->store, b->first, b->last, b->nparts, &gid);
	else
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);

		gid = SinkRemoteWrite(w, b->store, b->n, &rows, b->first, b->last, b->nparts);
		MemoryContextSwitchTo(oldcxt);
	}
	if (gid)
	{
		/*
		 * COMMIT PREPARED goes out after the local commit: the gid must
		 * outlive the transaction (the isolated path makes it in the
		 * transaction's memory)
		 */
		s->gid = MemoryContextStrdup(w->batch_cxt, gid);
		sg_record_prepared(w, s->gid);
	}
	return rows;
}

/* the remote end, sent by SinkRemoteWrite, ran meanwhile: confirmed now */
static void
sg_remote_sink_confirm(SgWorker *w, SgBatch *b)
{
	SinkRemoteConfirm(w);
}

/* two_phase: the batch committed here, so it commits on the sink */
static void
sg_remote_sink_committed(SgWorker *w, SgBatch *b)
{
	SgRemoteSink *s = RemoteSinkState(w);

	if (s->gid)
	{
		WorkerFault(w, SG_FAULT_AFTER_LOCAL_COMMIT);
		sg_commit_prepared(w, s->gid);
	}
}

/*
 * After a failed batch: a remote transaction must not outlive it; the next
 * batch connects again and settles.
 */
static void
sg_remote_sink_close(SgWorker *w)
{
	SgRemoteSink *s = RemoteSinkState(w);

	RemoteDisconnect(&s->remote);
	WorkerRemoteStatus(w, SG_SIDE_SINK, &s->remote);
	s->need_resolve = true;
}

const SgSinkRoutine SgRemoteSinkRoutine = {
	.name = "remote table",
	.open = sg_remote_sink_open,
	.begin = sg_remote_sink_begin,
	.empty = sg_remote_sink_empty,
	.write = sg_remote_sink_write,
	.confirm = sg_remote_sink_confirm,
	.committed = sg_remote_sink_committed,
	.close = sg_remote_sink_close,
};
