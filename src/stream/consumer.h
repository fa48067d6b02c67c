/*-------------------------------------------------------------------------
 *
 * consumer.h
 *		The read path (consumer.c): fetching events and moving positions,
 *		shared by poll, read and the pipelines.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_CONSUMER_H
#define SG_CONSUMER_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "utils/tuplestore.h"

#include "catalog/sg_catalog.h"

extern int	ConsumerFetch(SgStreamMeta *meta, const char *consumer, int max_events,
						  Tuplestorestate *store, TupleDesc desc, bool skip_locked,
						  bool advance, int nshares, int share, int64 *first_seq, int64 *last_seq);
extern void ConsumerAdvance(SgStreamMeta *meta, const char *consumer, const int64 *last_seq);
extern int	ConsumerFetchMember(SgStreamMeta *meta, const char *consumer, const char *member,
								int max_events, Tuplestorestate *store, TupleDesc desc,
								int64 *first_seq, int64 *last_seq);

#endif							/* SG_CONSUMER_H */
