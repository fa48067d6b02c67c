/*-------------------------------------------------------------------------
 *
 * store.c
 *		The stream store: writing events into a segment table.
 *
 * Appends are the hot path, so events are written the way COPY writes
 * rows: straight into the heap (one tuple, or table_multi_insert for a
 * batch) followed by the index entries, without planning or running an
 * INSERT statement.  That is safe because a segment table is ours alone:
 * created by catalog.c with plain columns, a primary key on
 * (partition, seq), no triggers, no defaults, no constraints other than
 * NOT NULL (checked here).  Access control happened in StreamLookup.
 *
 * Locking: the segment is locked RowExclusiveLock by OID and its
 * existence rechecked, as the executor would; maintenance can therefore
 * not drop it under us, and a segment it did drop is reported, not
 * written to.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "stream/store.h"

#define SG_NATTS 6
#define SG_CHUNK 1000			/* tuples per multi-insert, like COPY */

/*
 * Open a segment for writing, by the OID cached in *relid if any.
 */
static Relation
sg_open_segment(int32 stream_id, int32 seg, Oid *relid, bool retry)
{
	if (!OidIsValid(*relid))
	{
		char		relname[NAMEDATALEN];

		/* no ACL check on the schema: the caller's privilege was checked */
		StreamSegmentRelname(stream_id, seg, relname);
		*relid = get_relname_relid(relname, get_namespace_oid(SG_DATA_SCHEMA, false));
		if (!OidIsValid(*relid))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("segment %d of stream %d was dropped concurrently", seg, stream_id),
					 errhint("Retry the transaction.")));
	}
	LockRelationOid(*relid, RowExclusiveLock);
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(*relid)))
	{
		Relation	rel = table_open(*relid, NoLock);
		char		expect[NAMEDATALEN];

		/* the OID is still the segment we cached (OIDs can be reused) */
		StreamSegmentRelname(stream_id, seg, expect);
		if (strcmp(RelationGetRelationName(rel), expect) == 0 &&
			RelationGetNamespace(rel) == get_namespace_oid(SG_DATA_SCHEMA, false))
			return rel;
		table_close(rel, NoLock);
	}
	UnlockRelationOid(*relid, RowExclusiveLock);
	if (retry)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("segment %d of stream %d was dropped concurrently", seg, stream_id),
				 errhint("Retry the transaction.")));
	*relid = InvalidOid;
	return sg_open_segment(stream_id, seg, relid, true);
}

/*
 * Write n events into segment `seg`, all appended at `appended_at`.
 */
void
StreamStoreInsert(int32 stream_id, int32 seg, Oid *relid_cache,
				  const SgEventRow *ev, int n, TimestampTz appended_at)
{
	Relation	rel;
	TupleDesc	desc;
	List	   *indexes;
	ListCell   *lc;
	int			nidx,
				i,
				j,
				base;
	Relation   *idxrels;
	IndexInfo **idxinfo;
	TupleTableSlot **slots;
	CommandId	cid = GetCurrentCommandId(true);
	BulkInsertState bistate = NULL;

	rel = sg_open_segment(stream_id, seg, relid_cache, false);
	desc = RelationGetDescr(rel);
	if (desc->natts != SG_NATTS)
		elog(ERROR, "segment %s has %d columns, expected %d",
			 RelationGetRelationName(rel), desc->natts, SG_NATTS);

	indexes = RelationGetIndexList(rel);
	nidx = list_length(indexes);
	idxrels = palloc(sizeof(Relation) * Max(nidx, 1));
	idxinfo = palloc(sizeof(IndexInfo *) * Max(nidx, 1));
	j = 0;
	foreach(lc, indexes)
	{
		idxrels[j] = index_open(lfirst_oid(lc), RowExclusiveLock);
		idxinfo[j] = BuildIndexInfo(idxrels[j]);
		if (idxinfo[j]->ii_Expressions != NIL || idxinfo[j]->ii_Predicate != NIL)
			elog(ERROR, "segment index %s has expressions", RelationGetRelationName(idxrels[j]));
		j++;
	}

	slots = palloc(sizeof(TupleTableSlot *) * SG_CHUNK);
	for (i = 0; i < SG_CHUNK && i < n; i++)
		slots[i] = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
	if (n > 1)
		bistate = GetBulkInsertState();

	/* chunks of at most SG_CHUNK tuples, as COPY buffers them */
	for (base = 0; base < n; base += SG_CHUNK)
	{
		int			m = Min(SG_CHUNK, n - base);

		for (i = 0; i < m; i++)
		{
			Datum		values[SG_NATTS];
			bool		nulls[SG_NATTS];
			HeapTuple	tup;
			int			e = base + i;

			values[0] = Int32GetDatum(ev[e].partition);
			nulls[0] = false;
			values[1] = Int64GetDatum(ev[e].seq);
			nulls[1] = false;
			nulls[2] = ev[e].key_null;
			values[2] = ev[e].key;
			values[3] = ev[e].payload;
			nulls[3] = false;
			nulls[4] = ev[e].dedup_null;
			values[4] = ev[e].dedup_key;
			values[5] = TimestampTzGetDatum(appended_at);
			nulls[5] = false;
			tup = heap_form_tuple(desc, values, nulls);
			ExecStoreHeapTuple(tup, slots[i], true);
		}

		if (m == 1 && bistate == NULL)
			table_tuple_insert(rel, slots[0], cid, 0, NULL);
		else
			table_multi_insert(rel, slots, m, cid, 0, bistate);

		for (i = 0; i < m; i++)
		{
			for (j = 0; j < nidx; j++)
			{
				Datum		ivalues[INDEX_MAX_KEYS];
				bool		inulls[INDEX_MAX_KEYS];
				int			k;

				for (k = 0; k < idxinfo[j]->ii_NumIndexAttrs; k++)
				{
					AttrNumber	att = idxinfo[j]->ii_IndexAttrNumbers[k];

					ivalues[k] = slot_getattr(slots[i], att, &inulls[k]);
				}
				index_insert(idxrels[j], ivalues, inulls, &slots[i]->tts_tid, rel,
							 idxinfo[j]->ii_Unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
							 false, idxinfo[j]);
			}
			ExecClearTuple(slots[i]);
		}
	}
	for (i = 0; i < SG_CHUNK && i < n; i++)
		ExecDropSingleTupleTableSlot(slots[i]);
	if (bistate)
		FreeBulkInsertState(bistate);

	for (j = 0; j < nidx; j++)
		index_close(idxrels[j], NoLock);
	table_close(rel, NoLock);
	CommandCounterIncrement();
}
