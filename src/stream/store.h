/*-------------------------------------------------------------------------
 *
 * store.h
 *		Writing events into a segment table (store.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_STORE_H
#define SG_STORE_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* one event as append writes it */
typedef struct SgEventRow
{
	int32		partition;
	int64		seq;
	Datum		key;			/* text; (Datum) 0 when key_null */
	bool		key_null;
	Datum		payload;		/* jsonb */
	Datum		dedup_key;		/* text; (Datum) 0 when dedup_null */
	bool		dedup_null;
	bool		duplicate;		/* its dedup key was appended already */
} SgEventRow;

extern void StreamStoreInsert(int32 stream_id, int32 seg, Oid *relid_cache,
							  const SgEventRow *ev, int n, TimestampTz appended_at);

#endif							/* SG_STORE_H */
