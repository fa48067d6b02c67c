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
 * Where the events come from and what the SQL's effects become is the
 * source's and the sink's (routine.h): this file calls their routines at
 * each step of the batch and never asks which kinds they are.  A sink
 * that leaves the database does its part inside T1 -- it is settled at
 * the sink's begin, written by its write, confirmed just before the local
 * COMMIT, finished in its committed step -- so that its effects and the
 * positions commit together (or, for the weaker guarantees, in the order
 * the guarantee says).
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

/* one run of BatchRun: what the routines see, and the timings */
typedef struct SgRun
{
	SgBatch		b;
	TimestampTz t0;				/* the batch began */
	TimestampTz t1;				/* ... fetched and filtered */
	TimestampTz t2;				/* ... processed */
} SgRun;

/*
 * The batch's first steps, in T1, up to the events it will process: the
 * fence, the source's and the sink's begin, the fetch (positions move with
 * it unless at_least_once), the filters.  Returns true with T1 open and
 * the batch in `run`, or false with *result set and no transaction open.
 */
static bool
sg_batch_fetch(SgWorker *w, SgRun *run, bool isolate, SgBatchResult *result)
{
	SgBatch    *b = &run->b;
	MemoryContext oldcxt;

	MemoryContextReset(w->batch_cxt);
	w->batch_skipped = w->batch_dead = 0;
	memset(run, 0, sizeof(SgRun));
	b->isolate = isolate;

	/* a control call is waiting for the pipeline row: step aside */
	*result = SG_BATCH_FENCED;
	if (PipelineSlotFenceRequested(w->slot))
		return false;
	WorkerFault(w, SG_FAULT_BEFORE_FENCE);

	WorkerBegin("fetch");
	run->t0 = GetCurrentTimestamp();
	if (!sg_fence(w))
	{
		WorkerAbort();
		return false;
	}
	*result = SG_BATCH_STOPPED;
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(w->def.owner)))
	{
		/* dropped from another database, where we could not refuse it */
		WorkerAbort();
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
										 psprintf("the owner of the pipeline (role %u) no longer exists", w->def.owner));
		return false;
	}
	/* connections the catalog may no longer allow: closed, opened again or refused */
	if (WorkerServersChanged(w))
		BatchCloseRoutines(w);
	if (!w->source->begin(w, b))
	{
		/* the source is gone: nothing can run any more */
		WorkerAbort();
		return false;
	}

	/* what a crash may have left between this database and the sink */
	if (w->sink->begin && !w->sink->begin(w, b))
	{
		/* failed with the records dropped, in one transaction */
		WorkerRecordError(w, w->stop_error, true);
		WorkerCommit();
		return false;
	}

	oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	b->store = BatchStore(w, Max(work_mem, 64 * 1024));
	b->first = palloc(sizeof(int64) * b->nparts);
	b->last = palloc(sizeof(int64) * b->nparts);
	MemoryContextSwitchTo(oldcxt);

	/*
	 * Positions move inside this first transaction except for
	 * at_least_once, which moves them only after the sink committed.
	 */
	b->advance = w->def.guarantee != SG_AT_LEAST_ONCE;
	if (w->sink->before_fetch)
		w->sink->before_fetch(w, b);
	b->fetched = w->source->fetch(w, b);
	if (b->fetched < 0)
	{
		/* malformed input under the error policy stop */
		WorkerAbort();
		return false;
	}
	/* a sink may have work with or without new events */
	if (b->fetched == 0 && w->sink->empty)
		b->rows_out = w->sink->empty(w, b);
	if (b->fetched == 0 && b->rows_out == 0)
	{
		/* only malformed input the error policy took (the source's) */
		if (w->batch_skipped > 0 || w->batch_dead > 0)
			sg_count_batch(w, 0, 0, 0);
		WorkerCommit();
		if (w->sink->committed)
			w->sink->committed(w, b);
		*result = SG_BATCH_EMPTY;
		return false;
	}
	b->n = b->fetched;
	if (w->nskips > 0)
	{
		oldcxt = MemoryContextSwitchTo(w->batch_cxt);
		b->store = BatchSkipFilter(w, b->store, &b->n);
		MemoryContextSwitchTo(oldcxt);
	}
	if (w->def.dedup)
	{
		oldcxt = MemoryContextSwitchTo(w->batch_cxt);
		b->store = BatchDedupFilter(w, b->store, &b->n);
		MemoryContextSwitchTo(oldcxt);
	}
	run->t1 = GetCurrentTimestamp();
	WorkerFault(w, SG_FAULT_MID_BATCH);
	return true;
}

/*
 * The batch's effects, in the open transaction, up to its COMMIT: the
 * sink's write, the counters (batches and events_in as the guarantee
 * counts them here), the checkpoint log, the sink's confirmation, the
 * COMMIT and the sink's committed step.  Sets *batch_id, the checkpoint
 * log's; false when the error policy stopped the pipeline (the
 * transaction aborted).
 */
static bool
sg_batch_process(SgWorker *w, SgRun *run, int64 batches, int64 events_in, int64 *batch_id)
{
	SgBatch    *b = &run->b;

	pgstat_report_activity(STATE_RUNNING, "process");
	b->rows_out = w->sink->write(w, b);
	if (b->rows_out < 0)
	{
		WorkerAbort();
		return false;
	}
	run->t2 = GetCurrentTimestamp();
	sg_count_batch(w, batches, events_in, b->rows_out);
	*batch_id = sg_log_batch(w, b->fetched, b->rows_out, b->first, b->last, b->nparts,
							 run->t0, run->t1, run->t2);
	/* what the sink sent meanwhile is confirmed now */
	if (w->sink->confirm)
		w->sink->confirm(w, b);
	WorkerFault(w, SG_FAULT_BEFORE_COMMIT);
	WorkerCommit();
	if (w->sink->committed)
		w->sink->committed(w, b);
	return true;
}

/* the batch is over: its record in shared memory */
static SgBatchResult
sg_batch_done(SgWorker *w, SgRun *run, int64 batch_id)
{
	SgBatch    *b = &run->b;
	TimestampTz t3 = GetCurrentTimestamp();

	WorkerFault(w, SG_FAULT_AFTER_COMMIT);
	sg_record(w, batch_id, w->def.epoch, b->fetched, b->rows_out, b->first, b->last, b->nparts,
			  run->t0, run->t1, run->t2, t3);
	return SG_BATCH_DONE;
}

/* exactly_once: the effects and the positions in T1 */
static SgBatchResult
sg_batch_exactly_once(SgWorker *w, SgRun *run)
{
	int64		batch_id;

	if (!sg_batch_process(w, run, 1, run->b.fetched, &batch_id))
		return SG_BATCH_STOPPED;
	return sg_batch_done(w, run, batch_id);
}

/* at_least_once: the effects in T1, the positions in T2 */
static SgBatchResult
sg_batch_at_least_once(SgWorker *w, SgRun *run)
{
	SgBatch    *b = &run->b;
	int64		batch_id;

	if (!sg_batch_process(w, run, 1, b->fetched, &batch_id))
		return SG_BATCH_STOPPED;

	/* positions after the sink committed */
	WorkerFault(w, SG_FAULT_BETWEEN_COMMITS);
	WorkerBegin("advance");
	if (!sg_fence(w))
	{
		WorkerAbort();
		return SG_BATCH_FENCED; /* redelivered later: at least once */
	}
	w->source->advance(w, b, b->last, b->nparts);
	WorkerCommit();
	return sg_batch_done(w, run, batch_id);
}

/* at_most_once: the positions in T1, the effects in T2 */
static SgBatchResult
sg_batch_at_most_once(SgWorker *w, SgRun *run)
{
	int64		batch_id;

	/* positions first */
	sg_count_batch(w, 1, run->b.fetched, 0);
	WorkerCommit();
	WorkerFault(w, SG_FAULT_BETWEEN_COMMITS);
	WorkerBegin("process");
	if (!sg_fence(w))
	{
		WorkerAbort();
		return SG_BATCH_FENCED; /* the batch is lost: at most once */
	}
	/* the batch counted with the positions */
	if (!sg_batch_process(w, run, 0, 0, &batch_id))
		return SG_BATCH_STOPPED;
	return sg_batch_done(w, run, batch_id);
}

/*
 * One batch: its events fetched, then processed as its guarantee says.
 * `isolate`: the SQL runs event by event under the error policy (the
 * batch failed max_attempts times).
 */
/*
 * The source and the sink drop what they hold open -- after a failed batch
 * (its transaction aborted: a remote transaction must not outlive it), or
 * when a server or user mapping changed -- and their next use opens it
 * afresh.
 */
void
BatchCloseRoutines(SgWorker *w)
{
	if (w->sink->close)
		w->sink->close(w);
	if (w->source->close)
		w->source->close(w);
}

SgBatchResult
BatchRun(SgWorker *w, bool isolate)
{
	SgRun		run;
	SgBatchResult result;

	if (!sg_batch_fetch(w, &run, isolate, &result))
		return result;
	switch (w->def.guarantee)
	{
		case SG_EXACTLY_ONCE:
			return sg_batch_exactly_once(w, &run);
		case SG_AT_LEAST_ONCE:
			return sg_batch_at_least_once(w, &run);
		case SG_AT_MOST_ONCE:
			return sg_batch_at_most_once(w, &run);
	}
	elog(ERROR, "unknown guarantee %d", (int) w->def.guarantee);
	return SG_BATCH_STOPPED;	/* keep the compiler quiet */
}
