/*-------------------------------------------------------------------------
 *
 * source_local.c
 *		A stream of this database as a pipeline's source.
 *
 * The stream is read through the pipeline's consumer ("pipeline:<name>"):
 * ConsumerFetch (consumer.c) reads up to batch_size events below the
 * readable horizon, after the consumer's positions, locked for the batch's
 * transaction, and moves them past what it read in the same call when the
 * guarantee wants it (every one but at_least_once, which moves them with
 * ConsumerAdvance after the effects committed).  With several workers each
 * reads and moves only the partitions it owns (p % workers = worker).
 * The owner's privilege to read the stream is checked every batch.  The
 * stream's metadata (SgStreamMeta) is the batch's (b->stream): a window
 * sink reads its horizons and switch points.
 *
 * No state between batches: the positions are the consumer's rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "pipeline/worker.h"

/* the columns of relation "batch": the stream's */
static void
sg_local_source_open(SgWorker *w)
{
	MemoryContext old;

	WorkerBegin("start");
	old = MemoryContextSwitchTo(TopMemoryContext);
	w->event_desc = SgEventTupleDesc();
	MemoryContextSwitchTo(old);
	WorkerCommit();
}

/*
 * The stream, the owner's privilege to read it checked again, its counters
 * ready; false once the stream is gone (nothing can run any more).
 */
static bool
sg_local_source_begin(SgWorker *w, SgBatch *b)
{
	Oid			save_user;
	int			save_sec;

	if (w->def.stream == NULL)
	{
		w->stop_error = MemoryContextStrdup(TopMemoryContext, "the source stream no longer exists");
		return false;
	}
	/* the owner's privilege on the source is checked every batch */
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(w->def.owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	b->stream = StreamLookup(w->def.stream, SG_PRIV_READ);
	SetUserIdAndSecContext(save_user, save_sec);
	StreamEnsureSeqReady(b->stream->ref, b->stream->stream_id);
	b->nparts = b->stream->nparts;
	return true;
}

/*
 * Read up to batch_size events into the batch; first/last get each
 * partition's first and last seq read (first 0: none).  With b->advance
 * the positions move past them in the same transaction -- this is where a
 * local pipeline's offsets advance for exactly_once and at_most_once.
 */
static int
sg_local_source_fetch(SgWorker *w, SgBatch *b)
{
	SgUserSave	save;
	int			fetched;

	SgBecomeDataOwner(&save, false);
	fetched = ConsumerFetch(b->stream, w->consumer_name, w->def.batch_size, b->store, w->event_desc,
							false, b->advance, w->def.nworkers, w->def.worker, b->first, b->last);
	SgRestoreUser(&save);
	return fetched;
}

/* the consumer's committed positions (-1: no position row) */
static void
sg_local_source_positions(SgWorker *w, SgBatch *b, int64 *pos, int nparts)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];

	values[0] = Int32GetDatum(b->stream->stream_id);
	values[1] = CStringGetTextDatum(w->consumer_name);
	SgLoadPositions("SELECT partition, position FROM streamguard.consumer "
					"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
					2, types, values, pos, nparts);
}

/* move the consumer's positions forward */
static void
sg_local_source_advance(SgWorker *w, SgBatch *b, int64 *to, int nparts)
{
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	ConsumerAdvance(b->stream, w->consumer_name, to);
	SgRestoreUser(&save);
}

const SgSourceRoutine SgLocalSourceRoutine = {
	.name = "local stream",
	.idle_ms = 1000,			/* an append's commit wakes the worker */
	.local_events = true,
	.open = sg_local_source_open,
	.begin = sg_local_source_begin,
	.fetch = sg_local_source_fetch,
	.positions = sg_local_source_positions,
	.advance = sg_local_source_advance,
	.close = NULL,
};
