/*-------------------------------------------------------------------------
 *
 * consumer_read.c
 *		The event read of the read path (consumer.c): one partition's
 *		events in a seq range, segment by segment, streamed straight into
 *		the caller's tuplestore (ConsumerReadPartition), and the cache of
 *		sealed segments' seq bounds that lets a read skip the segments
 *		that end below its position.
 *
 * The read runs as the data owner, SPI connected, with the snapshot the
 * caller took after computing the horizon (consumer.c: the ordering of a
 * read).  It takes no lock of its own but each segment table's, for
 * reading, as the segment iterator plans its statement
 * (StreamSegmentScanPlan), so that retention cannot drop it under the
 * read; a fetch holds the consumer's position row of the partition
 * meanwhile (consumer.c).  The bounds cache is the backend's own, in
 * CacheMemoryContext: a sealed segment's bounds never change, and an
 * unknown one is asked again next time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tstoreReceiver.h"
#include "miscadmin.h"
#include "nodes/params.h"
#include "utils/array.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog/sg_catalog.h"
#include "shmem/horizon.h"
#include "stream/consumer_int.h"

/* sealed segments' seq bounds, per backend (known ones never change) */
typedef struct SgBoundsKey
{
	Oid			catalog_oid;
	int32		stream_id;
	int32		seg;
} SgBoundsKey;

typedef struct SgBoundsEntry
{
	SgBoundsKey key;
	int			nparts;			/* 0: unknown (dropped at the next look-up) */
	int64	   *bounds;
} SgBoundsEntry;

static HTAB *sg_bounds_cache = NULL;

/*
 * The bound below which every seq of `partition` in sealed segment `seg`
 * lies, or 0 if unknown.  Runs as the data owner, SPI connected.
 */
static int64
sg_segment_bound(SgStreamMeta *meta, int32 seg, int partition)
{
	SgBoundsKey key;
	SgBoundsEntry *e;
	bool		found;

	if (sg_bounds_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(SgBoundsKey);
		ctl.entrysize = sizeof(SgBoundsEntry);
		ctl.hcxt = CacheMemoryContext;
		sg_bounds_cache = hash_create("streamguard segment bounds", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memset(&key, 0, sizeof(key));
	/* the slot knows the extension's incarnation: no catalog look-up per read */
	key.catalog_oid = HorizonCatalogOid(meta->ref.slot);
	key.stream_id = meta->stream_id;
	key.seg = seg;
	e = hash_search(sg_bounds_cache, &key, HASH_ENTER, &found);
	if (!found)
	{
		/* an error below leaves the entry unknown: dropped next time */
		Oid			types[2] = {INT4OID, INT4OID};
		Datum		values[2] = {Int32GetDatum(meta->stream_id), Int32GetDatum(seg)};
		Snapshot	snap = SgFreshSnapshot();
		int			ret;

		e->nparts = 0;
		e->bounds = NULL;
		ret = SPI_execute_snapshot(SgPlanCached(NULL,
												"SELECT seq_bounds FROM streamguard.segment "
												"WHERE stream_id OPERATOR(pg_catalog.=) $1 "
												"AND seg OPERATOR(pg_catalog.=) $2",
												2, types),
								   values, NULL, snap, InvalidSnapshot, true, false, 1);
		UnregisterSnapshot(snap);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "segment bounds lookup failed");
		if (SPI_processed == 1)
		{
			bool		isnull;
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			if (!isnull)
			{
				ArrayType  *arr = DatumGetArrayTypeP(d);
				Datum	   *elems;
				bool	   *nulls;
				int			n,
							i;

				deconstruct_array(arr, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &n);
				/* fewer: sealed before the partition count grew */
				if (n >= 1)
				{
					e->bounds = MemoryContextAlloc(CacheMemoryContext, sizeof(int64) * n);
					for (i = 0; i < n; i++)
						e->bounds[i] = nulls[i] ? 0 : DatumGetInt64(elems[i]);
					e->nparts = n;
				}
			}
		}
	}
	if (e->nparts == 0)
	{
		/*
		 * Unknown: the bounds are recorded after the rotation, in a later
		 * transaction.  Do not remember that; ask again next time.
		 */
		hash_search(sg_bounds_cache, &key, HASH_REMOVE, NULL);
		return 0;
	}
	if (partition < 0)
		return 0;
	/*
	 * A partition added after the bounds were taken had no entry when the
	 * segment was sealed (the bounds step reads the entries of the slot),
	 * so no event of it is there: every seq is at or above 1.
	 */
	if (partition >= e->nparts)
		return 1;
	return e->bounds[partition];
}

/*
 * A receiver that streams the rows of an event read straight into the
 * caller's tuplestore (no intermediate SPI result) and notes the seqs.
 */
typedef struct SgEventReceiver
{
	DestReceiver pub;
	DestReceiver *store;		/* tuplestore receiver, or NULL */
	int64		first;
	int64		last;
	int			count;
} SgEventReceiver;

static bool
sg_event_receive(TupleTableSlot *slot, DestReceiver *self)
{
	SgEventReceiver *r = (SgEventReceiver *) self;
	bool		isnull;

	r->last = DatumGetInt64(slot_getattr(slot, 2, &isnull));
	if (r->count++ == 0)
		r->first = r->last;
	return r->store ? r->store->receiveSlot(slot, r->store) : true;
}

static void
sg_event_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
	SgEventReceiver *r = (SgEventReceiver *) self;

	if (r->store)
		r->store->rStartup(r->store, operation, typeinfo);
}

static void
sg_event_shutdown(DestReceiver *self)
{
	SgEventReceiver *r = (SgEventReceiver *) self;

	if (r->store)
		r->store->rShutdown(r->store);
}

static void
sg_event_destroy(DestReceiver *self)
{
}

/*
 * Read events of one partition with seq in (after, before), at most
 * `limit`, oldest segment first, into the tuplestore, with the given
 * snapshot.  Returns the number read; *first and *last get the first and
 * last seq read.
 */
int
ConsumerReadPartition(SgStreamMeta *meta, int partition, int64 after, int64 before,
					  int limit, Snapshot snap, Tuplestorestate *store, TupleDesc desc,
					  int64 *last, int64 *first)
{
	int32		min_seg,
				cur_seg;
	SgSegmentScan scan;
	int			got = 0;
	Oid			types[4] = {INT4OID, INT8OID, INT8OID, INT8OID};
	SgEventReceiver recv;
	ParamListInfo params = makeParamList(4);
	SPIExecuteOptions options;
	int			i;

	memset(&recv, 0, sizeof(recv));
	recv.pub.receiveSlot = sg_event_receive;
	recv.pub.rStartup = sg_event_startup;
	recv.pub.rShutdown = sg_event_shutdown;
	recv.pub.rDestroy = sg_event_destroy;
	recv.pub.mydest = DestNone;
	if (store)
	{
		recv.store = CreateDestReceiver(DestTuplestore);
		SetTuplestoreDestReceiverParams(recv.store, store, CurrentMemoryContext, false, NULL, NULL);
	}
	for (i = 0; i < 4; i++)
	{
		params->params[i].isnull = false;
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = types[i];
	}
	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = true;
	options.dest = (DestReceiver *) &recv;

	StreamSegmentRange(meta, &min_seg, &cur_seg);
	PushActiveSnapshot(snap);
	StreamSegmentScanBegin(&scan, meta->stream_id, min_seg, cur_seg);
	while (got < limit && StreamSegmentScanNext(&scan))
	{
		SPIPlanPtr	plan;
		int			ret;
		int32		seg = scan.seg;

		CHECK_FOR_INTERRUPTS();

		/* a sealed segment that ends below our position holds nothing for us */
		if (seg < cur_seg)
		{
			int64		bound = sg_segment_bound(meta, seg, partition);

			if (bound > 0 && after >= bound - 1)
				continue;
		}
		plan = StreamSegmentScanPlan(&scan,
									 "SELECT partition, seq, key, payload, dedup_key, appended_at FROM %s "
									 "WHERE partition OPERATOR(pg_catalog.=) $1 "
									 "AND seq OPERATOR(pg_catalog.>) $2 AND seq OPERATOR(pg_catalog.<) $3 "
									 "ORDER BY seq LIMIT $4", 4, types);
		if (plan == NULL)
			continue;			/* dropped by retention */
		params->params[0].value = Int32GetDatum(partition);
		params->params[1].value = Int64GetDatum(after);
		params->params[2].value = Int64GetDatum(before);
		params->params[3].value = Int64GetDatum(limit - got);
		recv.count = 0;
		ret = SPI_execute_plan_extended(plan, &options);
		/* with our own receiver SPI reports a SELECT as SPI_OK_UTILITY */
		if (ret < 0)
			elog(ERROR, "event read failed: %s", SPI_result_code_string(ret));
		if (recv.count > 0)
		{
			if (got == 0)
				*first = recv.first;
			*last = recv.last;
			after = recv.last;
			got += recv.count;
		}
	}
	PopActiveSnapshot();
	if (recv.store)
		recv.store->rDestroy(recv.store);
	return got;
}
