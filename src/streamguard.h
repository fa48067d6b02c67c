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

#define SG_MAX_NAME_LEN			63
#define SG_DATA_SCHEMA			"streamguard_data"
#define SG_RATE_BUCKETS			16	/* one-second buckets of committed appends */
#define SG_RATE_WINDOW			10	/* seconds averaged by append_rate */
#define SG_MAX_MEMBER_LEN		128 /* bytes of a consumer group member's name */

/* GUCs (streamguard.c) */
extern int	sg_max_streams;
extern int	sg_max_partitions;
extern int	sg_max_xact_partitions;
extern int	sg_maintenance_naptime_ms;
extern int	sg_launcher_naptime_ms;
extern int	sg_role_max_streams;
extern int	sg_role_max_partitions;
extern int	sg_role_max_pipelines;
extern int	sg_batch_history;
extern int	sg_backfill_chunk_rows;
extern int	sg_backfill_naptime_ms;
extern int	sg_max_backfill_workers;

/* running.c: the pipeline this process runs (a pipeline worker; none elsewhere) */
extern void SgRunningPipelineSet(int32 pipeline_id, int32 source_stream, bool allow_source_append);
extern bool SgRunningPipelineIs(int32 pipeline_id);
extern bool SgRunningSourceIs(int32 stream_id);
extern bool SgRunningForbidsAppendTo(int32 stream_id);

/* util.c */
extern void SgEventColumns(TupleDesc desc);
extern bool SgLoaded;
extern void SgHardenWorkerSession(void);
extern void SgSetWorkerTitle(const char *title);
extern int	SgAddOid(Oid *set, int n, int max, Oid oid);
extern void SgLockRoleForCreate(Oid roleid);
extern void SgLockDatabaseForCreate(void);
extern int	SgDatabaseCap(int setting, int server_size);
extern void SgCheckDatabaseCap(const char *what, int64 have, int64 adding, int cap, const char *guc);
extern int	sg_database_max_streams;
extern int	sg_database_max_partitions;
extern int	sg_database_max_pipelines;
extern void SgCheckRoleQuota(const char *what, Oid roleid, int64 have, int64 adding, int limit,
							 const char *guc);

/* ownership.c */
extern void OwnershipInstallHooks(void);

/* ----------------------------------------------------------------
 * Shared memory (horizon.c owns it; see the banner there for locking)
 * ----------------------------------------------------------------
 */
typedef struct SgPartition
{
	slock_t		mutex;			/* protects next_seq */
	int64		next_seq;		/* next seq to hand out */
	int32		owner;			/* stream slot using this entry, or -1 */
} SgPartition;

typedef struct SgStream
{
	/* identity: written under SgShared->lock (exclusive) */
	Oid			dbid;			/* InvalidOid = free slot */
	int32		stream_id;
	Oid			catalog_oid;	/* streamguard.stream's OID: the extension's incarnation */
	int32		nparts;
	int32		part_base;		/* first entry in the partition array */
	bool		seq_ready;		/* counters loaded from storage */
	pg_atomic_uint32 incarnation;	/* bumped whenever the slot is freed */
	pg_atomic_uint32 generation;	/* bumped when metadata changes */
	pg_atomic_uint32 current_seg;	/* segment receiving appends */
	pg_atomic_uint32 min_seg;	/* oldest segment not yet dropped */

	/* long-polling readers sleep here; appends broadcast at commit */
	ConditionVariable readable;

	/* committed-append rate, protected by rate_mutex */
	slock_t		rate_mutex;
	int64		rate_sec[SG_RATE_BUCKETS];
	int64		rate_count[SG_RATE_BUCKETS];
} SgStream;

/* a stream handle a backend holds between calls */
typedef struct SgStreamRef
{
	int			slot;
	uint32		incarnation;
} SgStreamRef;

typedef void (*HorizonWakeFn) (Oid dbid, int32 stream_id);
typedef int64 (*HorizonSeqLoaderFn) (int32 stream_id, int partition, int32 min_seg, int32 cur_seg);
extern HorizonWakeFn HorizonCommitWake;
extern HorizonSeqLoaderFn HorizonSeqLoader;
extern void HorizonShmemRequest(void);
extern void HorizonShmemInit(void);
extern Size HorizonShmemSize(void);
extern void HorizonRegisterCallbacks(void);

extern SgStream *HorizonStream(int slot);
extern bool HorizonRefValid(SgStreamRef ref, Oid dbid, int32 stream_id);
extern SgStreamRef HorizonAttachStream(int32 stream_id, int nparts,
									   int32 current_seg, int32 min_seg, Oid catalog_oid);
extern SgStreamRef HorizonTryAttachStream(int32 stream_id, int nparts,
										  int32 current_seg, int32 min_seg, Oid catalog_oid);
extern void HorizonFreeOnAbort(int32 stream_id);

typedef struct SgOpenAppendInfo
{
	int32		stream_id;
	int32		partition;
	int			pid;
	int64		first_seq;
} SgOpenAppendInfo;
extern int	HorizonListOpenAppends(SgOpenAppendInfo *out, int max);
extern bool HorizonWaitReadable(SgStreamRef ref, long timeout_ms);
extern void HorizonPrepareWait(SgStreamRef ref);
extern int	HorizonFreeDatabase(Oid dbid, Oid catalog_oid);
extern int	HorizonSlotDatabases(Oid *dbids, int max);
extern void HorizonEnsureSeqReady(SgStreamRef ref, int32 stream_id);
extern int64 HorizonAssignSeqs(SgStreamRef ref, int partition, int count,
							   int32 *segment);
extern int64 HorizonReadable(SgStream *st, int partition, int64 *next_seq,
							 int *in_flight);
extern int64 HorizonReadableOwn(SgStream *st, int partition);
extern void HorizonBumpGenerationAtCommit(int32 stream_id);
extern void HorizonBumpGenerationAtEnd(int32 stream_id);
extern void HorizonWakeReadersAtCommit(int32 stream_id);
extern void HorizonFreeAtCommit(int32 stream_id);
extern void HorizonFreeStream(Oid dbid, int32 stream_id);
extern int	HorizonFindSlot(Oid dbid, int32 stream_id);
extern double HorizonAppendRate(SgStream *st);
extern void HorizonMakeDurable(void);
extern bool HorizonSeqBounds(int slot, int64 *bounds, int nparts);
extern bool HorizonHasOwnAppends(SgStreamRef ref);
extern void HorizonGrowStream(SgStreamRef ref, int nparts, int64 *switch_seqs);

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
extern struct BackgroundWorkerHandle *SgStartDynamicWorker(const char *function, const char *type,
														   const char *name, Datum arg, Oid dbid);

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

extern void StreamguardCheckLoaded(void);
extern void SgCheckPrimary(const char *function);

/*
 * A closed vocabulary (guarantee, error policy, ...): its words, parsed
 * once into a C enum by SgParseWord, named back by SgWordName.  The SQL
 * script declares the same words as an enum type where a table stores
 * them.
 */
typedef struct SgWordList
{
	const char *what;			/* "guarantee", in "invalid guarantee" */
	const char *plural;			/* "guarantees", in "Valid guarantees are" */
	const char *words[6];		/* NULL-terminated; index = enum value */
} SgWordList;

extern int	SgParseWord(const SgWordList *list, const char *word);
extern const char *SgWordName(const SgWordList *list, int value);
extern Datum SgWordParam(const char *typname, const char *word, Oid *type);

/*
 * The SQL versions (pg_extension.extversion) this library serves: its own
 * and the one before it, which a database keeps from the restart onto a
 * new library until ALTER EXTENSION streamguard UPDATE.  Under any other
 * version no pipeline or backfill worker runs, and the maintenance worker
 * says why (SgCatalogVersionProblem).
 */
#define SG_LIBRARY_VERSION		"0.3"
#define SG_OLDEST_SQL_VERSION	"0.2"
extern char *SgCatalogVersionProblem(const char *extversion, const char *dbname, char **hint);
extern void SgCheckName(const char *what, const char *name);
extern char *SgTextArg(FunctionCallInfo fcinfo, int argno, const char *what);
extern void SgTableStreamArgs(FunctionCallInfo fcinfo, const char *function, bool stream_required,
							  Oid *relid, char **stream);
extern void SgConsumerArgs(FunctionCallInfo fcinfo, const char *function, char **stream,
						   char **consumer);
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
