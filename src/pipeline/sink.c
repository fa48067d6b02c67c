/*-------------------------------------------------------------------------
 *
 * sink.c
 *		Remote sinks: writing a batch's rows to another server.
 *
 * The pipeline's SELECT runs as the owner and its rows are rendered in
 * COPY text format, then copied into the sink table (or, for an upserting
 * sink, through a staging table and INSERT ... ON CONFLICT: SinkSetup) in a
 * remote transaction that is
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

#include "access/htup_details.h"
#include "access/xact.h"
#include "common/md5.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "pipeline/worker.h"

static void
sg_forget_done_gid(SgWorker *w)
{
	if (w->done_gid)
		pfree(w->done_gid);
	w->done_gid = NULL;
}

/*
 * COMMIT PREPARED sent to the sink (SinkCommitPrepared): wait for it, then
 * drop its local record, in the next batch's transaction.  Called as late
 * in that batch as possible (before its own remote transaction, or before
 * an empty batch commits), so that the remote commit overlaps the batch's
 * fetch and SELECT.  If the commit failed, the error fails this batch and
 * SinkResolve settles the transaction from the record, still there.
 */
void
SinkForgetCommitted(SgWorker *w)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	SgUserSave	save;

	if (w->done_gid == NULL)
		return;
	RemoteFinish(WorkerRemote(w, SG_SIDE_SINK));
	values[0] = Int32GetDatum(w->def.id);
	values[1] = CStringGetTextDatum(w->done_gid);

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "DELETE FROM streamguard.remote_prepared "
									  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND gid OPERATOR(pg_catalog.=) $2",
									  2, types),
						 values, NULL, false, 0) != SPI_OK_DELETE)
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
 * (SinkForgetCommitted); if we crash before, SinkResolve finds it
 * committed, or commits it.
 */
void
SinkCommitPrepared(SgWorker *w, const char *gid)
{
	SgRemote   *r;

	WorkerBegin("commit prepared");
	r = WorkerRemote(w, SG_SIDE_SINK);
	HorizonMakeDurable();		/* the decision, whatever synchronous_commit */
	RemoteSend(r, psprintf("COMMIT PREPARED %s", RemoteLiteral(r, gid)));
	w->done_gid = MemoryContextStrdup(TopMemoryContext, gid);
	WorkerCommit();
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
 * new owner's, whose first batch settles them (SinkResolve).
 */
static const char *
sg_own_partitions(SgWorker *w)
{
	if (w->def.nworkers <= 1)
		return "";
	return psprintf(" AND partition OPERATOR(pg_catalog.%%) %d OPERATOR(pg_catalog.=) %d",
					w->def.nworkers, w->def.worker);
}

/* whether partition p is the worker's (sg_own_partitions) */
static bool
sg_owns(SgWorker *w, int p)
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
/* a statement of the worker's, kept for its life */
static char *
sg_keep(const char *s)
{
	return MemoryContextStrdup(TopMemoryContext, s);
}

void
SinkSetup(SgWorker *w, List *cols)
{
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
		w->copy_sql = MemoryContextStrdup(TopMemoryContext,
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
	w->stage_ddl[0] = sg_keep(psprintf("CREATE UNLOGGED TABLE IF NOT EXISTS %s AS SELECT %s FROM %s WITH NO DATA",
							   stage, list.data, w->def.sink_table));
	w->stage_ddl[1] = sg_keep(psprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS streamguard_ord bigint "
							   "GENERATED ALWAYS AS IDENTITY", stage));
	w->copy_sql = sg_keep(psprintf("COPY %s (%s) FROM STDIN", stage, list.data));
	w->upsert_sql = sg_keep(psprintf("INSERT INTO %s (%s) SELECT %s FROM "
							 "(SELECT *, pg_catalog.row_number() OVER (PARTITION BY %s "
							 "ORDER BY streamguard_ord DESC) AS streamguard_rn FROM %s) streamguard_s "
							 "WHERE streamguard_rn OPERATOR(pg_catalog.=) 1%s ORDER BY streamguard_ord "
							 "ON CONFLICT (%s) DO %s%s",
							 w->def.sink_table, list.data, list.data, conf.data, stage, nulls.data,
							 conf.data, set.len ? "UPDATE SET " : "NOTHING", set.data));
	w->stage_table = sg_keep(stage);
}

/*
 * Rows in COPY text format into the sink, in the open remote transaction:
 * straight into the sink table, or through the staging table (SinkSetup).
 */
static void
sg_sink_load(SgWorker *w, SgRemote *r, StringInfo data)
{
	RemoteCopyIn(r, w->copy_sql, data->data, data->len);
	if (w->upsert_sql)
	{
		RemoteExecOk(r, w->upsert_sql);
		RemoteExecOk(r, psprintf("DELETE FROM %s", w->stage_table));
	}
}

/*
 * offsets mode: the dead letters a batch wrote on the sink (in the remote
 * transaction that committed its rows and positions) that are not here:
 * the batch's local transaction never committed.  Those past the local
 * positions `here` are recorded now, in the transaction that moves the
 * positions up to the sink's.  The sink's rows stay until a later batch
 * knows them recorded here (sg_sink_begin).
 */
static void
sg_sink_import_dead_letters(SgWorker *w, SgRemote *r, const int64 *here, int nparts)
{
	const char *params[1] = {sg_offsets_key(w)};
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
								 "ORDER BY partition, seq", sg_own_partitions(w)),
					 1, params);
	if (RemoteNTuples(res) > 0)
		w->sink_dead_pending = true;
	SgBecomeDataOwner(&save, false);
	for (i = 0; i < RemoteNTuples(res); i++)
	{
		Oid			types[10] = {INT4OID, TEXTOID, INT4OID, INT8OID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, TEXTOID, TEXTOID};
		Datum		values[10];
		char		nulls[10];
		int			p = atoi(RemoteGetValue(res, i, 0));
		int64		seq = strtoll(RemoteGetValue(res, i, 1), NULL, 10);
		int			c;

		CHECK_FOR_INTERRUPTS();

		if (p < 0 || p >= nparts || seq <= here[p] || !sg_owns(w, p))
			continue;			/* recorded here with its batch */
		memset(nulls, ' ', sizeof(nulls));
		values[0] = Int32GetDatum(w->def.id);
		values[1] = CStringGetTextDatum(w->def.name);
		values[2] = Int32GetDatum(p);
		values[3] = Int64GetDatum(seq);
		for (c = 2; c < 8; c++)
		{
			if (RemoteGetIsNull(res, i, c))
				nulls[c + 2] = 'n';
			else
				values[c + 2] = CStringGetTextDatum(RemoteGetValue(res, i, c));
		}
		if (SPI_execute_with_args("INSERT INTO streamguard.dead_letter (pipeline_id, pipeline, partition, seq, "
								  "key, payload, dedup_key, appended_at, error, sqlstate) "
								  "VALUES ($1, $2, $3, $4, $5, $6::pg_catalog.jsonb, $7, $8::pg_catalog.timestamptz, "
								  "COALESCE($9, 'unknown error'), COALESCE($10, 'XX000'))",
								  10, types, values, nulls, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not record a dead letter");
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
bool
SinkResolve(SgWorker *w, SgStreamMeta *meta)
{
	SgRemote   *r = WorkerRemote(w, SG_SIDE_SINK);
	char	   *lost = NULL;

	if (w->def.two_phase)
		lost = PipelineResolveInDoubt(r, w->def.id, w->def.name, w->def.worker, w->def.nworkers);
	else
	{
		const char *params[1];
		SgRemoteResult *res;
		int			nparts = meta ? meta->nparts : w->def.remote_nparts;
		int64	   *pos = palloc(sizeof(int64) * nparts);
		int64	   *here = palloc(sizeof(int64) * nparts);
		int			i;

		params[0] = sg_offsets_key(w);
		res = RemoteExec(r, "SELECT partition, position FROM public.streamguard_sink_offsets "
						 "WHERE pipeline OPERATOR(pg_catalog.=) $1", 1, params);
		for (i = 0; i < nparts; i++)
			pos[i] = -1;
		for (i = 0; i < RemoteNTuples(res); i++)	/* bounded: a row per partition */
		{
			int			p = atoi(RemoteGetValue(res, i, 0));

			/* another worker's partition: its fence, its positions */
			if (p >= 0 && p < nparts && sg_owns(w, p))
				pos[p] = strtoll(RemoteGetValue(res, i, 1), NULL, 10);
		}
		RemoteClear(res);
		/* the dead letters of batches the sink has and we do not, first */
		SourcePositions(w, meta, here, nparts);
		sg_sink_import_dead_letters(w, r, here, nparts);
		SourceAdvance(w, meta, pos, nparts);
	}
	w->sink_resolved = true;
	sg_forget_done_gid(w);
	w->stage_ready = false;		/* after a failure, make sure it is there */
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
 * (SinkResolve).
 */
static bool
sg_sink_clears_dead_letters(SgWorker *w)
{
	if (w->sink_dead_pending && !w->sink_resolved)
	{
		w->sink_dead_pending = false;
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
	SgRemote   *r = WorkerRemote(w, SG_SIDE_SINK);

	SinkForgetCommitted(w);		/* the last batch's COMMIT PREPARED, first */
	if (w->upsert_sql && !w->stage_ready)
	{
		RemoteExecOk(r, w->stage_ddl[0]);
		RemoteExecOk(r, w->stage_ddl[1]);
		w->stage_ready = true;
	}
	RemoteExecOk(r, "BEGIN");
	if (sg_sink_clears_dead_letters(w))
	{
		const char *params[1] = {sg_offsets_key(w)};

		RemoteClear(RemoteExec(r, psprintf("DELETE FROM public.streamguard_sink_dead_letters WHERE pipeline OPERATOR(pg_catalog.=) $1%s",
										   sg_own_partitions(w)),
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
	char	   *gid = NULL;

	WorkerFault(w, SG_FAULT_MID_COPY);
	/* the batch's events must not be lost here once the remote has them */
	HorizonMakeDurable();
	if (w->def.guarantee == SG_EXACTLY_ONCE && w->def.two_phase)
	{
		/* one id per attempt: a retry never collides with a delayed PREPARE */
		gid = PipelineGid(w->def.id, w->def.worker, w->def.epoch, ++w->sink_attempts);
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
 * moves the positions there, whose result decides the COMMIT (SinkConfirm).  Values are quoted literals: the
 * simple protocol, which takes several statements, has no parameters.
 */
static char *
sg_sink_sql(SgWorker *w, SgRemote *r, const char *gid, int64 *first, int64 *last, int nparts)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "BEGIN; ");
	if (sg_sink_clears_dead_letters(w))
		appendStringInfo(&sql, "DELETE FROM public.streamguard_sink_dead_letters WHERE pipeline OPERATOR(pg_catalog.=) %s%s; ",
						 RemoteLiteral(r, sg_offsets_key(w)), sg_own_partitions(w));
	if (gid)
		appendStringInfo(&sql, "INSERT INTO public.streamguard_sink_marker AS m (pipeline, gid) VALUES (%s, %s) "
						 "ON CONFLICT (pipeline) DO UPDATE SET gid = excluded.gid; ",
						 RemoteLiteral(r, PipelineWorkerKey(w->def.id, w->def.worker)), RemoteLiteral(r, gid));
	appendStringInfoString(&sql, w->copy_sql);
	if (w->upsert_sql)
		appendStringInfo(&sql, "; %s; DELETE FROM %s", w->upsert_sql, w->stage_table);
	w->sink_moved = 0;
	if (gid)
		appendStringInfo(&sql, "; PREPARE TRANSACTION %s", RemoteLiteral(r, gid));
	else if (sg_offsets_mode(w))
	{
		char	   *offsets = sg_sink_offsets_sql(w, r, first, last, nparts, &w->sink_moved);

		if (offsets)
			appendStringInfo(&sql, "; %s", offsets);
	}
	else
		appendStringInfoString(&sql, "; COMMIT");
	return sql.data;
}

/*
 * Write the batch's output rows to the sink, inside one remote transaction.
 * The fast path: the owner's SELECT runs, then the whole remote transaction
 * goes out in one message with the rows streamed as they are rendered
 * (SinkRunSelect), and its end is sent without waiting for it.  The caller
 * records the batch here meanwhile (the gid, the counters, the checkpoint
 * log) and then confirms the remote end (SinkConfirm) before its COMMIT.
 * Nothing is made durable on the remote before this database's facts it
 * depends on are: the source's events are durable here before the rows
 * end (HorizonMakeDurable), as before any PREPARE or COMMIT.  Returns the
 * global transaction id when one is being prepared.
 */
char *
SinkWrite(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows, int64 *first, int64 *last, int nparts)
{
	SgRemote   *r = WorkerRemote(w, SG_SIDE_SINK);
	char	   *gid = NULL;
	StringInfo	rest;

	SinkForgetCommitted(w);		/* the last batch's COMMIT PREPARED, first */
	if (w->upsert_sql && !w->stage_ready)
	{
		RemoteExecOk(r, w->stage_ddl[0]);
		RemoteExecOk(r, w->stage_ddl[1]);
		w->stage_ready = true;
	}
	if (w->def.guarantee == SG_EXACTLY_ONCE && w->def.two_phase)
		/* one id per attempt: a retry never collides with a delayed PREPARE */
		gid = PipelineGid(w->def.id, w->def.worker, w->def.epoch, ++w->sink_attempts);
	w->sink_sql = sg_sink_sql(w, r, gid, first, last, nparts);
	rest = SinkRunSelect(w, store, n, rows, r);
	if (rest->len > 0)
		RemoteCopyData(r, rest->data, rest->len);
	resetStringInfo(rest);
	WorkerFault(w, SG_FAULT_MID_COPY);
	/* the batch's events must not be lost here once the remote has them */
	HorizonMakeDurable();
	w->sink_ticket = RemoteCopyEnd(r);
	w->sink_end_pending = true;
	WorkerFault(w, SG_FAULT_REMOTE_END_SENT);
	return gid;
}

/*
 * Confirm the end of the remote transaction SinkWrite sent: wait for the
 * PREPARE TRANSACTION or COMMIT (an error fails the batch: nothing was
 * committed here), or, in offsets mode, move the positions there and
 * commit.  Called before the batch's local COMMIT.
 */
void
SinkConfirm(SgWorker *w)
{
	SgRemote   *r;

	if (!w->sink_end_pending)
		return;
	r = WorkerRemote(w, SG_SIDE_SINK);
	w->sink_end_pending = false;
	if (sg_offsets_mode(w))
	{
		SgRemoteResult *res = RemoteReceive(r, w->sink_ticket);

		if (res == NULL)
			elog(ERROR, "the remote transaction of the batch was not confirmed");
		if (w->sink_moved > 0)
			sg_sink_offsets_check(w, r, res, w->sink_moved);
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

/*
 * Run the pipeline's SELECT over the batch as the owner and render its
 * rows in COPY text format for the sink.  With `stream` (the fast path,
 * SinkWrite): once the SELECT has run, the batch's remote transaction is
 * sent (w->sink_sql, RemoteCopyStart) and the rows go out in chunks as they
 * are rendered, so that the remote parses them while we render the next
 * ones; what is left at the end stays in the returned buffer.  The buffer
 * is the worker's own, reused from batch to batch.
 */
#define SG_COPY_CHUNK 16384

StringInfo
SinkRunSelect(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows, SgRemote *stream)
{
	SgOwnerContext ctx;
	SPIPlanPtr	plan;
	int			ret;
	uint64		i;
	int			c;
	StringInfo	buf;
	TupleDesc	desc;
	FmgrInfo   *out;
	bool	   *isvarlena;

	if (stream)
	{
		if (w->copy_buf == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			w->copy_buf = makeStringInfo();
			enlargeStringInfo(w->copy_buf, SG_COPY_CHUNK + 8192);
			MemoryContextSwitchTo(old);
		}
		buf = w->copy_buf;
		resetStringInfo(buf);
	}
	else
		buf = makeStringInfo();
	plan = BatchOwnerEnter(w, &ctx, store, n);
	ret = SPI_execute_plan(plan, NULL, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "the SQL of pipeline \"%s\" must return rows: %s", w->def.name, SPI_result_code_string(ret));
	if (stream)
		RemoteCopyStart(stream, w->sink_sql);
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
	for (i = 0; i < SPI_processed; i++)
	{
		CHECK_FOR_INTERRUPTS();
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
				pfree(v);
			}
		}
		appendStringInfoChar(buf, '\n');
		if (stream && buf->len >= SG_COPY_CHUNK)
		{
			RemoteCopyData(stream, buf->data, buf->len);
			resetStringInfo(buf);
		}
	}
	*rows = (int64) SPI_processed;
	BatchLeaveOwner(&ctx);
	return buf;
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
 * then taken from the sink and the batch is not redone; SinkResolve brings
 * these rows here).
 */
static void
sg_sink_dead_letter(SgWorker *w, SgRemote *r, TupleTableSlot *ev, ErrorData *edata)
{
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
	w->sink_dead_pending = true;
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
 * out and sets *gid as SinkWrite returns it, or returns -1 when the policy
 * is stop (the remote transaction rolled back, w->stop_error set).
 */
int64
SinkRunIsolated(SgWorker *w, Tuplestorestate *store, int64 *first, int64 *last, int nparts, char **gid)
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
			StringInfo	data = SinkRunSelect(w, one, 1, &nrows, NULL);

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
