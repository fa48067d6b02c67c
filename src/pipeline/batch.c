/*-------------------------------------------------------------------------
 *
 * batch.c
 *		One batch of a pipeline, by guarantee.
 *
 * Every transaction begins with the fence: lock the pipeline row, check
 * our epoch and state (sg_fence).  By guarantee:
 *	exactly_once	T1: fetch (positions advance), dedup, user SQL,
 *					counters, checkpoint log, COMMIT.
 *	at_least_once	T1: fetch (positions stay), dedup, user SQL, counters,
 *					COMMIT; T2: advance positions, COMMIT.  A crash between
 *					redelivers the batch.
 *	at_most_once	T1: fetch (positions advance), counters, COMMIT;
 *					T2: user SQL over the batch kept in memory, COMMIT.
 *					A crash between loses the batch.
 * With a remote sink the rows go to the sink inside T1 (sink.c): the
 * remote transaction is prepared before the local COMMIT and committed
 * after it (two_phase), or committed with the positions (offsets).  With
 * a Kafka sink (kafka_sink.c) the Kafka transaction, holding the rows and
 * a checkpoint, commits inside T1, before the local COMMIT.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pipeline/worker.h"

/*
 * The fence: lock the pipeline row and check that we still own it.
 */
static bool
sg_fence(SgWorker *w)
{
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		values[2] = {Int32GetDatum(w->def.id), Int32GetDatum(w->def.worker)};
	SgUserSave	save;
	bool		isnull;
	bool		ok;

	/*
	 * The pipeline row in KEY SHARE mode: our workers' batches run side by
	 * side, a control call (FOR UPDATE) waits for them and then fences them
	 * all through the generation.  Our own worker row FOR UPDATE: a newer
	 * incarnation of this worker (another epoch) waits for this batch and
	 * fences us from then on.
	 */
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "SELECT p.generation, p.state, w.epoch FROM streamguard.pipeline p "
									  "JOIN streamguard.pipeline_worker w ON w.pipeline_id OPERATOR(pg_catalog.=) p.id "
									  "AND w.worker OPERATOR(pg_catalog.=) $2 "
									  "WHERE p.id OPERATOR(pg_catalog.=) $1 FOR KEY SHARE OF p FOR UPDATE OF w",
									  2, types),
						 values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "fence check failed");
	ok = SPI_processed == 1 &&
		DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) == w->def.generation &&
		strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), "running") == 0 &&
		DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)) == w->def.epoch;
	SgRestoreUser(&save);
	return ok;
}

static void
sg_count_batch(SgWorker *w, int64 batches, int64 events_in, int64 rows_out)
{
	Oid			types[9] = {INT4OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT4OID, INT8OID};
	Datum		values[9];
	SgUserSave	save;

	values[6] = Int64GetDatum(batches);
	values[7] = Int32GetDatum(w->def.worker);
	values[8] = Int64GetDatum(w->def.epoch);
	values[0] = Int32GetDatum(w->def.id);
	values[1] = Int64GetDatum(events_in);
	values[2] = Int64GetDatum(rows_out);
	values[3] = Int64GetDatum(w->batch_skipped);
	values[4] = Int64GetDatum(w->batch_dead);
	values[5] = Int64GetDatum(w->def.generation);
	SgBecomeDataOwner(&save, false);
	/*
	 * The counters' row, while the generation (the pipeline row's, which the
	 * fence holds in KEY SHARE) and our epoch are ours; a 0.2 catalog has
	 * the counters in the pipeline's row.
	 */
	if (SPI_execute_plan(SgPlanCached(NULL, SgPipelineStatsCatalog() ?
									  "UPDATE streamguard.pipeline_stats SET batches = batches OPERATOR(pg_catalog.+) $7, "
									  "events_in = events_in OPERATOR(pg_catalog.+) $2, "
									  "rows_out = rows_out OPERATOR(pg_catalog.+) $3, "
									  "skipped = skipped OPERATOR(pg_catalog.+) $4, "
									  "dead_letters = dead_letters OPERATOR(pg_catalog.+) $5, "
									  "last_batch_at = pg_catalog.now() "
									  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
									  "AND EXISTS (SELECT 1 FROM streamguard.pipeline p WHERE p.id OPERATOR(pg_catalog.=) $1 "
									  "AND p.generation OPERATOR(pg_catalog.=) $6) "
									  "AND EXISTS (SELECT 1 FROM streamguard.pipeline_worker w "
									  "WHERE w.pipeline_id OPERATOR(pg_catalog.=) $1 AND w.worker OPERATOR(pg_catalog.=) $8 "
									  "AND w.epoch OPERATOR(pg_catalog.=) $9)" :
									  "UPDATE streamguard.pipeline SET batches = batches OPERATOR(pg_catalog.+) $7, "
									  "events_in = events_in OPERATOR(pg_catalog.+) $2, "
									  "rows_out = rows_out OPERATOR(pg_catalog.+) $3, "
									  "skipped = skipped OPERATOR(pg_catalog.+) $4, "
									  "dead_letters = dead_letters OPERATOR(pg_catalog.+) $5, "
									  "last_batch_at = pg_catalog.now() "
									  "WHERE id OPERATOR(pg_catalog.=) $1 AND generation OPERATOR(pg_catalog.=) $6 "
									  "AND EXISTS (SELECT 1 FROM streamguard.pipeline_worker w "
									  "WHERE w.pipeline_id OPERATOR(pg_catalog.=) $1 AND w.worker OPERATOR(pg_catalog.=) $8 "
									  "AND w.epoch OPERATOR(pg_catalog.=) $9)",
									  9, types),
						 values, NULL, false, 0) != SPI_OK_UPDATE || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("pipeline \"%s\" lost ownership of its batch", w->def.name)));
	SgRestoreUser(&save);
}

/*
 * The batch's first and last seq over all partitions, and how many
 * partitions it read.
 */
static void
sg_seq_range(int64 *first, int64 *last, int nparts, int64 *lo, int64 *hi, int32 *nread)
{
	int			p;

	*lo = *hi = 0;
	*nread = 0;
	for (p = 0; p < nparts; p++)
	{
		if (first[p] <= 0)
			continue;
		(*nread)++;
		if (*lo == 0 || first[p] < *lo)
			*lo = first[p];
		if (last[p] > *hi)
			*hi = last[p];
	}
}

/*
 * The durable checkpoint log: one row per batch, written in the transaction
 * that commits the batch's effects (so it survives exactly what the batch
 * survives).  Its id is the pipeline's batch counter, just incremented in
 * the same transaction.  Returns the id.
 */
static int64
sg_log_batch(SgWorker *w, int events_in, int64 rows_out, int64 *first, int64 *last, int nparts,
			 TimestampTz t0, TimestampTz t1, TimestampTz t2)
{
	Oid			types[10] = {INT4OID, INT8OID, INT4OID, INT8OID, INT4OID, INT8OID, INT8OID,
	FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID};
	Datum		values[10];
	SgUserSave	save;
	int64		lo,
				hi,
				id;
	int32		nread;
	bool		isnull;

	sg_seq_range(first, last, nparts, &lo, &hi, &nread);
	values[0] = Int32GetDatum(w->def.id);
	values[1] = Int64GetDatum(w->def.epoch);
	values[2] = Int32GetDatum(events_in);
	values[3] = Int64GetDatum(rows_out);
	values[4] = Int32GetDatum(nread);
	values[5] = Int64GetDatum(lo);
	values[6] = Int64GetDatum(hi);
	values[7] = Float8GetDatum((t1 - t0) / 1000.0);
	values[8] = Float8GetDatum((t2 - t1) / 1000.0);
	values[9] = TimestampTzGetDatum(GetCurrentTimestamp());
	SgBecomeDataOwner(&save, false);
	/* the counter is in the pipeline's row in a 0.2 catalog */
	if (SPI_execute_plan(SgPlanCached(NULL, SgPipelineStatsCatalog() ?
									  "INSERT INTO streamguard.pipeline_batch (pipeline_id, batch_id, epoch, "
									  "events_in, rows_out, partitions, first_seq, last_seq, fetch_ms, process_ms, "
									  "committed_at) "
									  "SELECT s.pipeline_id, s.batches, $2, $3, $4, $5, $6, $7, $8, $9, $10 "
									  "FROM streamguard.pipeline_stats s WHERE s.pipeline_id OPERATOR(pg_catalog.=) $1 "
									  "RETURNING batch_id" :
									  "INSERT INTO streamguard.pipeline_batch (pipeline_id, batch_id, epoch, "
									  "events_in, rows_out, partitions, first_seq, last_seq, fetch_ms, process_ms, "
									  "committed_at) "
									  "SELECT p.id, p.batches, $2, $3, $4, $5, $6, $7, $8, $9, $10 "
									  "FROM streamguard.pipeline p WHERE p.id OPERATOR(pg_catalog.=) $1 "
									  "RETURNING batch_id",
									  10, types),
						 values, NULL, false, 0) != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
		elog(ERROR, "could not record the batch in the checkpoint log");
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SgRestoreUser(&save);
	return id;
}

static void
sg_record(SgWorker *w, int64 batch_id, int64 epoch, int events_in, int64 rows_out, int64 *first, int64 *last,
		  int nparts, TimestampTz t0, TimestampTz t1, TimestampTz t2, TimestampTz t3)
{
	SgBatchRecord r;

	memset(&r, 0, sizeof(r));
	r.batch_id = batch_id;
	r.epoch = epoch;
	r.committed_at = t3;
	r.events_in = events_in;
	r.rows_out = rows_out;
	sg_seq_range(first, last, nparts, &r.first_seq, &r.last_seq, &r.partitions);
	r.fetch_us = (int32) (t1 - t0);
	r.process_us = (int32) (t2 - t1);
	r.commit_us = (int32) (t3 - t2);

	PipelineSlotRecordBatch(w->slot, &r, (t3 - t0) / 1e6);
}

SgBatchResult
BatchRun(SgWorker *w, bool isolate)
{
	SgStreamMeta *meta = NULL;
	Tuplestorestate *store;
	int			fetched,
				n;
	int64	   *first,
			   *last;
	int64		rows_out = 0;
	TimestampTz t0,
				t1,
				t2,
				t3;
	MemoryContext oldcxt;
	int			nparts;
	char	   *gid = NULL;
	bool		advance_in_fetch;
	int64		batch_id;

	MemoryContextReset(w->batch_cxt);
	w->batch_skipped = w->batch_dead = 0;
	w->sink_resolved = false;
	w->sink_end_pending = false;

	/* a control call is waiting for the pipeline row: step aside */
	if (PipelineSlotFenceRequested(w->slot))
		return SG_BATCH_FENCED;
	WorkerFault(w, SG_FAULT_BEFORE_FENCE);

	WorkerBegin("fetch");
	t0 = GetCurrentTimestamp();
	if (!sg_fence(w))
	{
		WorkerAbort();
		return SG_BATCH_FENCED;
	}
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(w->def.owner)))
	{
		/* dropped from another database, where we could not refuse it */
		WorkerAbort();
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
										 psprintf("the owner of the pipeline (role %u) no longer exists", w->def.owner));
		return SG_BATCH_STOPPED;
	}
	if (!w->def.source_server)
	{
		if (w->def.stream == NULL)
		{
			/* the source stream is gone: nothing can run any more */
			WorkerAbort();
			w->stop_error = MemoryContextStrdup(TopMemoryContext, "the source stream no longer exists");
			return SG_BATCH_STOPPED;
		}
		meta = SourceOpen(w);
		nparts = meta->nparts;
	}
	else
		nparts = SourcePartitions(w);

	/* what a crash may have left between this database and the sink */
	if (w->def.sink_server && w->need_resolve)
	{
		if (!(w->def.sink_kafka ? KafkaSinkResolve(w, meta, nparts) : SinkResolve(w, meta)))
		{
			/* failed with the records dropped, in one transaction */
			WorkerRecordError(w, w->stop_error, true);
			WorkerCommit();
			return SG_BATCH_STOPPED;
		}
		w->need_resolve = false;
	}

	oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	store = BatchStore(w, Max(work_mem, 64 * 1024));
	first = palloc(sizeof(int64) * nparts);
	last = palloc(sizeof(int64) * nparts);
	MemoryContextSwitchTo(oldcxt);

	/*
	 * Positions move inside this first transaction except for
	 * at_least_once, which moves them only after the sink committed.
	 */
	advance_in_fetch = w->def.guarantee != SG_AT_LEAST_ONCE;
	if (w->window)
		WindowBeforeFetch(w, meta);
	/* a Kafka sink's checkpoint says where the batch began */
	if (w->def.sink_kafka && w->def.guarantee == SG_EXACTLY_ONCE)
		KafkaSinkNoteFrom(w, meta, nparts);
	fetched = SourceFetch(w, meta, store, first, last, advance_in_fetch);
	if (fetched < 0)
	{
		/* a malformed message under the error policy stop */
		WorkerAbort();
		return SG_BATCH_STOPPED;
	}
	/* a window pipeline closes windows with or without new events */
	if (fetched == 0 && w->window)
		rows_out = WindowApply(w, store, 0);
	if (fetched == 0 && rows_out == 0)
	{
		SinkForgetCommitted(w);
		/* only malformed input the error policy took (a Kafka source) */
		if (w->batch_skipped > 0 || w->batch_dead > 0)
			sg_count_batch(w, 0, 0, 0);
		WorkerCommit();
		if (w->window)
			WindowCommitted(w);
		return SG_BATCH_EMPTY;
	}
	n = fetched;
	if (w->nskips > 0)
	{
		oldcxt = MemoryContextSwitchTo(w->batch_cxt);
		store = BatchSkipFilter(w, store, &n);
		MemoryContextSwitchTo(oldcxt);
	}
	if (w->def.dedup)
	{
		oldcxt = MemoryContextSwitchTo(w->batch_cxt);
		store = BatchDedupFilter(w, store, &n);
		MemoryContextSwitchTo(oldcxt);
	}
	t1 = GetCurrentTimestamp();
	WorkerFault(w, SG_FAULT_MID_BATCH);

	if (w->def.guarantee == SG_AT_MOST_ONCE)
	{
		/* positions first */
		sg_count_batch(w, 1, fetched, 0);
		WorkerCommit();
		WorkerFault(w, SG_FAULT_BETWEEN_COMMITS);
		WorkerBegin("process");
		if (!sg_fence(w))
		{
			WorkerAbort();
			return SG_BATCH_FENCED;		/* the batch is lost: at most once */
		}
	}

	pgstat_report_activity(STATE_RUNNING, "process");
	if (w->def.sink_kafka)
	{
		/*
		 * No event-by-event isolation into Kafka: a batch that failed
		 * max_attempts times (not for a transient reason) stops the
		 * pipeline, whatever the error policy.
		 */
		if (isolate)
		{
			WorkerAbort();
			w->stop_error = MemoryContextStrdup(TopMemoryContext,
												psprintf("a batch to Kafka failed %d times, last: %s",
														 w->def.max_attempts, w->last_error ? w->last_error : "unknown error"));
			return SG_BATCH_STOPPED;
		}
		rows_out = KafkaSinkWrite(w, meta, store, n, nparts, fetched);
	}
	else if (w->def.sink_server)
	{
		if (isolate)
			rows_out = SinkRunIsolated(w, store, first, last, nparts, &gid);
		else
		{
			oldcxt = MemoryContextSwitchTo(w->batch_cxt);
			gid = SinkWrite(w, store, n, &rows_out, first, last, nparts);
			MemoryContextSwitchTo(oldcxt);
		}
		if (gid)
		{
			/*
			 * COMMIT PREPARED goes out after the local commit: the gid must
			 * outlive the transaction (the isolated path makes it in the
			 * transaction's memory)
			 */
			gid = MemoryContextStrdup(w->batch_cxt, gid);
			SinkRecordPrepared(w, gid);
		}
	}
	else if (n > 0)
		rows_out = isolate ? BatchRunIsolated(w, store) : BatchRunSql(w, store, n);
	if (rows_out < 0)
	{
		WorkerAbort();
		return SG_BATCH_STOPPED;
	}
	if (w->window && fetched > 0)
		rows_out = WindowApply(w, store, fetched);
	t2 = GetCurrentTimestamp();

	if (w->def.guarantee != SG_AT_MOST_ONCE)
		sg_count_batch(w, 1, fetched, rows_out);
	else
		sg_count_batch(w, 0, 0, rows_out);	/* the batch counted with the positions */
	batch_id = sg_log_batch(w, fetched, rows_out, first, last, nparts, t0, t1, t2);
	/* the remote end, sent by SinkWrite, ran meanwhile: confirmed now */
	if (w->def.sink_server && !w->def.sink_kafka)
		SinkConfirm(w);
	WorkerFault(w, SG_FAULT_BEFORE_COMMIT);
	WorkerCommit();
	if (w->window)
		WindowCommitted(w);

	if (gid)
	{
		WorkerFault(w, SG_FAULT_AFTER_LOCAL_COMMIT);
		SinkCommitPrepared(w, gid);
	}

	if (w->def.guarantee == SG_AT_LEAST_ONCE)
	{
		/* positions after the sink committed */
		WorkerFault(w, SG_FAULT_BETWEEN_COMMITS);
		WorkerBegin("advance");
		if (!sg_fence(w))
		{
			WorkerAbort();
			return SG_BATCH_FENCED;		/* redelivered later: at least once */
		}
		SourceAdvance(w, meta, last, nparts);
		WorkerCommit();
	}
	t3 = GetCurrentTimestamp();
	WorkerFault(w, SG_FAULT_AFTER_COMMIT);
	sg_record(w, batch_id, w->def.epoch, fetched, rows_out, first, last, nparts, t0, t1, t2, t3);
	return SG_BATCH_DONE;
}

