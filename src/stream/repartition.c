/*-------------------------------------------------------------------------
 *
 * repartition.c
 *		More partitions online: alter_stream(name, partitions => M) and the
 *		per-key order rule that readers follow across the change.
 *
 * THE PROBLEM.  A key goes to partition hash(key) % count (append.c).
 * When the count grows from N to M a key can move from any old partition
 * to any other one, old or new (N = 2 -> M = 3 sends hash 3 from 1 to 0).
 * A reader that took events of the new partition before the key's last
 * events in its old partition would see that key out of order.
 *
 * THE DESIGN.  The change records a switch point per old partition: the
 * last seq handed out there under the old mapping (a row of
 * streamguard.stream_repartition per change, `epoch` 1, 2, ...).  Every
 * event of the old mapping in partition p has a seq at or below
 * switch[p], every event of the new mapping one above it, because the
 * change and the appends are serialized: appends take the stream's append
 * lock in RowExclusiveLock (StreamLockAppend, catalog.c) before they pick a
 * partition, and re-read the metadata once they have it; the change takes
 * it in ExclusiveLock, so it waits for every transaction that appended to
 * the stream to end, reads the counters with none in flight, and new
 * appends wait until it commits (and then use the new count).
 *
 * The rule for a reader (a consumer of poll, a pipeline's consumer, each
 * of a pipeline's workers): let e be the oldest change that the reader
 * has not passed -- passed means its committed position in every
 * partition e had is at or past switch[p].  Until it has, it reads in
 * those partitions only seqs up to switch[p], and nothing in the
 * partitions e added.  So the events of the mapping before e are all
 * consumed before any of the mapping after e is delivered, whichever
 * partition a key moved to.  A partition whose events up to its switch
 * point have all been read is moved to the switch point even if the last
 * seqs there were aborted or duplicates (ConsumerFetch), so a reader never
 * waits on a gap.  Positions are what the caller's transaction can see, so
 * a reader sharing a consumer name with another session waits until that
 * session's poll commits.
 *
 * Switch points are kept until retention has dropped every event at or
 * below them (maintenance.c prunes them then): a consumer created later,
 * or one that seeks back, follows the same rule.  The counters' loader
 * counts them (StreamMaxSeq), so a seq at or below a switch point is never
 * handed out again after a restart.
 *
 * THE REST.  The stream's shared-memory entries grow before the change
 * commits (HorizonGrowStream, horizon.c: in place, or moved to a free run)
 * and stay grown if it aborts.  Every backend reloads the metadata at once
 * and again when the change's transaction ends, committed or not (this
 * backend may have cached the uncommitted count).  A transaction that
 * appended to the stream cannot change its count (its own open appends
 * would be on the wrong side), and one that changed it cannot be prepared.
 * A reader held back that moves positions wakes the stream's long-polls
 * and workers at commit (HorizonWakeReadersAtCommit), as an append does:
 * another session of the consumer may be past the change then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "shmem/horizon.h"
#include "stream/repartition.h"

/*
 * How far a reader at positions pos[] may read in each partition of the
 * stream: cap[p] is the last seq it may read there, PG_INT64_MAX when
 * there is no limit, and -1 when it must read nothing there yet.
 */
void
RepartitionCaps(const SgStreamMeta *meta, const int64 *pos, int64 *cap)
{
	int			p,
				e;

	for (p = 0; p < meta->nparts; p++)
		cap[p] = PG_INT64_MAX;
	for (e = 0; e < meta->nchanges; e++)
	{
		const SgRepartition *ch = &meta->changes[e];
		int			n = Min(ch->old_nparts, meta->nparts);
		bool		passed = true;

		for (p = 0; p < n; p++)
			if (pos[p] < ch->switch_seqs[p])
				passed = false;
		if (passed)
			continue;
		for (p = 0; p < meta->nparts; p++)
			cap[p] = p < n ? ch->switch_seqs[p] : -1;
		return;
	}
}

/*
 * Grow a stream from old_n to new_n partitions, in alter_stream's
 * transaction (the stream's row locked, SPI connected, as the data owner).
 * Waits for the transactions that appended to the stream to end.
 */
void
RepartitionGrow(const char *name, int32 stream_id, int old_n, int new_n)
{
	SgStreamMeta *meta;
	int64	   *switch_seqs;
	Datum	   *elems;
	int			p;

	/* the 0.1 schema has no alter_stream, so no caller gets here with it */
	if (!StreamRepartitionCatalog())
		elog(ERROR, "streamguard.stream_repartition is missing: run ALTER EXTENSION streamguard UPDATE");
	StreamLockAppendExclusive(stream_id);
	meta = StreamLookup(name, SG_PRIV_NONE);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	if (HorizonHasOwnAppends(meta->ref))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot change the partition count of stream \"%s\" in a transaction that appended to it",
						name),
				 errhint("Change the partition count in a transaction of its own.")));

	/* the stream's entries in shared memory, and the last seq of each */
	switch_seqs = palloc0(sizeof(int64) * SG_MAX_PARTITIONS_PER_STREAM);
	Assert(StreamAppendLockHeld(stream_id, true));
	HorizonGrowStream(meta->ref, new_n, switch_seqs);

	elems = palloc(sizeof(Datum) * old_n);
	for (p = 0; p < old_n; p++)
		elems[p] = Int64GetDatum(switch_seqs[p]);
	{
		Oid			types[4] = {INT4OID, INT4OID, INT4OID, INT8ARRAYOID};
		Datum		values[4];

		values[0] = Int32GetDatum(stream_id);
		values[1] = Int32GetDatum(old_n);
		values[2] = Int32GetDatum(new_n);
		values[3] = PointerGetDatum(construct_array(elems, old_n, INT8OID, 8,
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		if (SPI_execute_with_args("INSERT INTO streamguard.stream_repartition "
								  "(stream_id, epoch, old_partitions, new_partitions, switch_seqs) "
								  "SELECT $1, COALESCE(pg_catalog.max(epoch), 0) OPERATOR(pg_catalog.+) 1, $2, $3, $4 "
								  "FROM streamguard.stream_repartition WHERE stream_id OPERATOR(pg_catalog.=) $1",
								  4, types, values, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not record the new partitions of stream \"%s\"", name);
		StreamPartitionsAdd(stream_id, old_n, new_n);
		if (SPI_execute_with_args("UPDATE streamguard.stream SET partitions = $3 "
								  "WHERE id OPERATOR(pg_catalog.=) $1",
								  3, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not record the new partitions of stream \"%s\"", name);
	}

	/*
	 * Every backend reloads the metadata now (this one sees the new count
	 * at once, for appends later in this transaction) and again when this
	 * ends, committed or rolled back (this backend's copy must not outlive
	 * an abort).
	 */
	HorizonBumpGeneration(meta->ref.slot);
	HorizonBumpGenerationAtEnd(stream_id);
}
