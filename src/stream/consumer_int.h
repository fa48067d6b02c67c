/*-------------------------------------------------------------------------
 *
 * consumer_int.h
 *		What the files of the read path share, and only they: the event
 *		read of one partition (consumer_read.c), which the fetch, poll and
 *		read of consumer.c call.  Included by src/stream/consumer*.c only;
 *		the API is stream/consumer.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_CONSUMER_INT_H
#define SG_CONSUMER_INT_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "utils/snapshot.h"
#include "utils/tuplestore.h"

#include "catalog/sg_catalog.h"

extern int	ConsumerReadPartition(SgStreamMeta *meta, int partition, int64 after, int64 before,
								  int limit, Snapshot snap, Tuplestorestate *store, TupleDesc desc,
								  int64 *last, int64 *first);

#endif							/* SG_CONSUMER_INT_H */
