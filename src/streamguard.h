/*-------------------------------------------------------------------------
 *
 * streamguard.h
 *		Cross-file API of the streamguard extension.
 *
 * File map:
 *	streamguard.c	module load, GUCs, shared-memory sizing, entry checks
 *	horizon.c		shared memory: per-partition seq counters, in-flight
 *					append registry, readable horizon, xact callbacks
 *	catalog.c		stream metadata: create/drop, backend cache, privileges
 *	append.c		append / append_batch (where offsets are assigned)
 *	consumer.c		poll / seek / drop_consumer (SQL consumers)
 *	group.c			consumer groups: membership, assignment, fence
 *	maintenance.c	launcher and per-database maintenance worker
 *					(segment rotation, retention, dedup expiry)
 *	views.c			set-returning functions behind the progress views
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMGUARD_H
#define STREAMGUARD_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "executor/spi.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/condition_variable.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/tuplestore.h"

#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"

#define SG_MAX_MEMBER_LEN		128 /* bytes of a consumer group member's name */

/* GUCs (streamguard.c) */
extern int	sg_maintenance_naptime_ms;
extern int	sg_launcher_naptime_ms;
extern int	sg_role_max_streams;
extern int	sg_role_max_partitions;
extern int	sg_role_max_pipelines;
extern int	sg_batch_history;
extern int	sg_backfill_chunk_rows;
extern int	sg_backfill_naptime_ms;
extern int	sg_max_backfill_workers;


extern int	sg_database_max_streams;
extern int	sg_database_max_partitions;
extern int	sg_database_max_pipelines;

/* ownership.c */
extern void OwnershipInstallHooks(void);

#include "shmem/horizon.h"

/* launcher.c */
extern Size LauncherShmemSize(void);
extern void LauncherShmemRequest(void);
extern void LauncherShmemInit(void);
extern void LauncherWake(void);
extern void LauncherMarkAbsent(Oid dbid);
extern void LauncherRegisterWorker(Oid dbid, pid_t pid);
extern int	LauncherRunningWorkers(void);

/* worker_units.c: background worker slots, capped per database and role */
typedef enum SgUnitKind
{
	SG_UNIT_PIPELINE,
	SG_UNIT_BACKFILL
} SgUnitKind;

extern int	sg_reserved_worker_processes;
extern int	sg_database_max_workers;
extern int	sg_role_max_workers;
extern Size WorkerUnitsShmemSize(void);
extern void WorkerUnitsShmemRequest(void);
extern void WorkerUnitsShmemInit(void);
extern int	WorkerUnitsReserve(void);
extern int	WorkerUnitsBudget(void);
extern int	WorkerUnitsDatabaseCap(void);
extern int	WorkerUnitsRoleCap(void);
extern void WorkerUnitsCheckCouldRun(Oid owner, int32 workers);
extern bool WorkerUnitClaim(SgUnitKind kind, Oid roleid, int32 object_id, int32 worker,
							char *why, size_t whylen);
extern void WorkerUnitRelease(SgUnitKind kind, int32 object_id, int32 worker);

/* ----------------------------------------------------------------
 * Stream metadata (catalog.c)
 * ----------------------------------------------------------------
 */
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

extern int64 SgIntervalUsecs(Interval *iv);
extern void SgCheckInterval(const char *what, Interval *iv);
extern void SgCheckDedupWindow(Interval *iv);
extern void SgCheckSegments(Interval *retention, Interval *segment);

extern SgStreamMeta *StreamLookup(const char *name, SgPrivilege priv);
extern SgStreamMeta *StreamLookupReady(const char *name);
extern bool StreamRoleMayAppend(SgStreamMeta *meta, Oid role);
extern void StreamCheckNotOwnSource(SgStreamMeta *meta);
extern Oid	StreamDataOwner(void);
extern Oid	StreamCatalogOid(void);
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
extern char *StreamSegmentName(int32 stream_id, int32 seg);
extern bool StreamSegmentLock(int32 stream_id, int32 seg);

typedef struct SgSegmentScan
{
	int32		stream_id;
	int32		seg;			/* the current segment */
	int32		last;
	int			step;			/* +1 oldest first, -1 newest first */
} SgSegmentScan;

extern void StreamSegmentScanBegin(SgSegmentScan *scan, int32 stream_id, int32 first, int32 last);
extern bool StreamSegmentScanNext(SgSegmentScan *scan);
extern SPIPlanPtr StreamSegmentScanPlan(SgSegmentScan *scan, const char *fmt, int nargs, Oid *types);
extern bool StreamSegmentProbe(int32 stream_id, int32 first, int32 last, const char *fmt,
							   int nargs, Oid *types, Datum *values, Snapshot snap, Datum *result);
extern void StreamLockShare(SgStreamMeta *meta);
extern bool StreamLockAppend(SgStreamMeta *meta);
extern bool StreamRepartitionCatalog(void);
extern void StreamLockAppendExclusive(int32 stream_id);
extern void StreamCheckPartition(SgStreamMeta *meta, int32 partition);
extern void StreamSegmentRange(SgStreamMeta *meta, int32 *min_seg, int32 *cur_seg);
extern SPIPlanPtr SgPlanCached(const char *key, const char *sql, int nargs, Oid *argtypes);
extern bool PipelineVisibleToCaller(int32 pipeline_id);
extern Snapshot SgFreshSnapshot(void);
extern int64 StreamMaxSeq(int32 stream_id, int partition, int32 min_seg, int32 cur_seg);
extern Oid	SgCreateSegment(int32 stream_id, int32 seg);

/* repartition.c */
extern void RepartitionCaps(const SgStreamMeta *meta, const int64 *pos, int64 *cap);
extern void RepartitionGrow(const char *name, int32 stream_id, int old_n, int new_n);

/* consumer.c */
extern int	ConsumerFetch(SgStreamMeta *meta, const char *consumer, int max_events,
						  Tuplestorestate *store, TupleDesc desc, bool skip_locked,
						  bool advance, int nshares, int share, int64 *first_seq, int64 *last_seq);
extern void ConsumerSeekSeq(SgStreamMeta *meta, const char *consumer, int partition, int64 seq);
extern void ConsumerSeekTime(SgStreamMeta *meta, const char *consumer, TimestampTz from);
extern void ConsumerAdvance(SgStreamMeta *meta, const char *consumer, const int64 *last_seq);
extern int	ConsumerFetchMember(SgStreamMeta *meta, const char *consumer, const char *member,
								int max_events, Tuplestorestate *store, TupleDesc desc,
								int64 *first_seq, int64 *last_seq);

/* group.c */
extern int	sg_group_lease_ms;
extern int	sg_max_group_members;
extern int	sg_max_group_lease_ms;
extern int	sg_role_max_group_members;
extern int	sg_database_max_group_members;
extern bool GroupCheckLease(int *newval, void **extra, GucSource source);

extern Size GroupShmemSize(void);
extern void GroupShmemRequest(void);
extern void GroupShmemInit(void);
extern void GroupCheckMember(const char *member);
extern void GroupCheckNotGroup(SgStreamMeta *meta, const char *consumer);
extern void GroupHeartbeat(SgStreamMeta *meta, const char *consumer, const char *member,
						   Oid roleid);
extern void GroupRebalance(SgStreamMeta *meta, const char *consumer, const char *member, char **owner);
extern long GroupHeartbeatMs(void);
extern void GroupForget(SgStreamMeta *meta, const char *consumer);

/* batchexec.c */
extern TupleDesc SgEventTupleDesc(void);
extern void PipelineRegisterBatch(Tuplestorestate *store, TupleDesc desc, int64 ntuples);

/* store.c */
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

/* append.c */
extern void StreamAppendEvents(SgStreamMeta *meta, SgEventRow *ev, int n);

#endif							/* STREAMGUARD_H */
