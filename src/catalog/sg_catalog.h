/*-------------------------------------------------------------------------
 *
 * sg_catalog.h
 *		Stream metadata: the backend's metadata cache, privileges and the
 *		stream's locks, the append lock among them (catalog_meta.c); the
 *		plan cache, the data-owner switch, segment tables and the segment
 *		iterator, and the helpers every statement of ours goes through
 *		(SgExec, SgExecCached, SgColumn) (catalog.c).
 *
 * Named sg_catalog.h, not catalog.h: PostgreSQL has a catalog/catalog.h of
 * its own, which its headers include and which src/ on the include path
 * would otherwise hide.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_CATALOG_H
#define SG_CATALOG_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "utils/snapshot.h"

#include "shmem/horizon.h"

/*
 * A change of a stream's partition count (alter_stream), as the metadata
 * cache keeps it: in each partition the stream had before, the last seq
 * appended under the old key-to-partition mapping (repartition.c).
 */
typedef struct SgRepartition
{
	int32		epoch;
	int			old_nparts;
	int64	   *switch_seqs;	/* old_nparts entries, in CacheMemoryContext */
} SgRepartition;

/* a stream's metadata, as the backend's cache keeps it (backend memory) */
typedef struct SgStreamMeta
{
	char		name[NAMEDATALEN];
	int32		stream_id;
	int			nparts;
	Oid			owner;
	int64		dedup_window_us;
	bool		payload_object; /* payload_check 'object': refuse other JSON */
	int			ngrants;
	Oid		   *grant_roles;	/* in CacheMemoryContext */
	bool	   *grant_append;
	bool	   *grant_read;
	SgStreamRef ref;
	uint32		generation;		/* shmem generation this copy matches */
	int32		write_seg;		/* segment whose OID is cached below */
	Oid			write_relid;
	int			nchanges;		/* changes of the partition count, oldest first */
	SgRepartition *changes;		/* in CacheMemoryContext */
} SgStreamMeta;

typedef enum SgPrivilege
{
	SG_PRIV_APPEND,
	SG_PRIV_READ,
	SG_PRIV_OWNER,
	SG_PRIV_NONE				/* internal callers that checked already */
} SgPrivilege;

/* interval settings */
extern int64 SgIntervalUsecs(Interval *iv);
extern void SgCheckInterval(const char *what, Interval *iv);
extern void SgCheckDedupWindow(Interval *iv);
extern void SgCheckSegments(Interval *retention, Interval *segment);

/* metadata and privileges */
extern SgStreamMeta *StreamLookup(const char *name, SgPrivilege priv);
extern SgStreamMeta *StreamLookupReady(const char *name);
extern bool StreamRoleMayAppend(SgStreamMeta *meta, Oid role);
extern void StreamCheckNotOwnSource(SgStreamMeta *meta);
extern void StreamCheckPartition(SgStreamMeta *meta, int32 partition);
extern Oid	StreamDataOwner(void);
extern Oid	StreamCatalogOid(void);
extern bool StreamRepartitionCatalog(void);

/* the data owner and the catalog's session settings */
typedef struct SgUserSave
{
	Oid			userid;
	int			sec_context;
	int			guc_nest;		/* -1: search_path not pinned */
} SgUserSave;

extern void SgBecomeDataOwner(SgUserSave *save, bool pin_search_path);
extern void SgRestoreUser(SgUserSave *save);
extern void SgEnterCatalog(SgUserSave *save);
extern void SgLeaveCatalog(SgUserSave *save);
extern SPIPlanPtr SgPlanCached(const char *key, const char *sql, int nargs, Oid *argtypes);
extern Snapshot SgFreshSnapshot(void);

/* statements of ours: run or raise an internal error; results by column name */
extern void SgExec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect);
extern void SgExecCached(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
						 int expect);
extern void SgLoadPositions(const char *sql, int nargs, Oid *types, Datum *values, int64 *pos, int nparts);
extern int	SgColumn(TupleDesc desc, const char *column);

/* locks */
extern void StreamLockShare(SgStreamMeta *meta);
extern bool StreamLockAppend(SgStreamMeta *meta);
extern void StreamLockAppendExclusive(int32 stream_id);
extern bool StreamAppendLockHeld(int32 stream_id, bool exclusive);

/* segments */
typedef struct SgSegmentScan
{
	int32		stream_id;
	int32		seg;			/* the current segment */
	int32		last;
	int			step;			/* +1 oldest first, -1 newest first */
} SgSegmentScan;

extern void StreamSegmentRelname(int32 stream_id, int32 seg, char *relname);
extern char *StreamSegmentName(int32 stream_id, int32 seg);
extern bool StreamSegmentLock(int32 stream_id, int32 seg);
extern void StreamSegmentRange(SgStreamMeta *meta, int32 *min_seg, int32 *cur_seg);
extern void StreamSegmentScanBegin(SgSegmentScan *scan, int32 stream_id, int32 first, int32 last);
extern bool StreamSegmentScanNext(SgSegmentScan *scan);
extern SPIPlanPtr StreamSegmentScanPlan(SgSegmentScan *scan, const char *fmt, int nargs, Oid *types);
extern bool StreamSegmentProbe(int32 stream_id, int32 first, int32 last, const char *fmt,
							   int nargs, Oid *types, Datum *values, Snapshot snap, Datum *result);
extern Oid	SgCreateSegment(int32 stream_id, int32 seg);
extern void StreamPartitionsAdd(int32 stream_id, int from, int to);
extern int64 StreamMaxSeq(int32 stream_id, int partition, int32 min_seg, int32 cur_seg);
extern void StreamEnsureSeqReady(SgStreamRef ref, int32 stream_id);

#endif							/* SG_CATALOG_H */
