/*-------------------------------------------------------------------------
 *
 * horizon.c
 *		Shared memory for streams: per-partition sequence counters, the
 *		registry of in-flight appends, and the readable horizon.
 *
 * THE PROBLEM.  Sequence numbers are handed out when an append runs, but
 * transactions commit in any order.  A consumer that reads "seq > my
 * position" could read seq 11 (committed) before seq 10 (still in flight)
 * commits, advance past 10 and never see it.  Producers must not wait for
 * each other's commits either, or a partition is capped at one fsync per
 * event.
 *
 * THE DESIGN (Kafka's "last stable offset", built from PostgreSQL parts).
 * Every partition has a counter next_seq.  Every backend owns a small
 * array of "open append" entries in shared memory: (partition, first seq
 * this transaction took in that partition).  The readable horizon of a
 * partition is
 *
 *		min( next_seq, min(first_seq of open entries for the partition) )
 *
 * and every seq below it belongs to a transaction that has committed or
 * aborted.  Consumers read only seq < horizon, with a snapshot taken
 * after the horizon was computed.  Entries are cleared in the transaction
 * callback at COMMIT/ABORT, which PostgreSQL runs after the transaction
 * has been removed from the proc array, so a snapshot taken after a
 * reader saw an entry disappear sees the transaction's outcome.  PREPARE
 * of a transaction that appended is refused: the horizon would otherwise
 * have to wait for a prepared transaction that has no backend.
 *
 * CONCURRENCY CONTRACT.  The structures (SgStream, SgPartition, the
 * per-backend SgBackendAppends) are private to this file; other files
 * hold a slot number or an SgStreamRef and call the functions of
 * horizon.h.  Field by field, who writes it and what protects it:
 *	- SgShared->lock (LWLock, "streamguard") protects slot allocation.
 *	  SgStream.dbid, stream_id and catalog_oid are written only with it
 *	  held exclusively (sg_attach, sg_free_slot_locked); readers holding a
 *	  handle read them without it (HorizonRefValid, HorizonCatalogOid,
 *	  HorizonListOpenAppends) and catch a slot that changed hands through
 *	  the incarnation and generation checks of catalog.c.
 *	  SgPartition.owner is written and read only with the lock held
 *	  exclusively (sg_attach, sg_first_fit_locked, HorizonGrowStream,
 *	  sg_free_slot_locked).  Appenders never take the lock on the hot path.
 *	- SgStream.nparts and part_base are written with the lock held
 *	  exclusively: at allocation, and after it only in HorizonGrowStream
 *	  (alter_stream adding partitions), whose caller also holds the
 *	  stream's append lock exclusively, which keeps every other appender
 *	  out.  Readers read them without the lock: an appender holds the
 *	  append lock (so they cannot change under it), sg_readable and
 *	  sg_seq_bounds read part_base again afterwards and retry or give up
 *	  when it moved.
 *	- SgStream.seq_ready is written with the lock held exclusively
 *	  (HorizonEnsureSeqReady sets it after a write barrier that follows the
 *	  counters; sg_attach and sg_free_slot_locked clear it); it is read
 *	  without the lock, followed by a read barrier (HorizonSeqReady).
 *	- SgPartition.mutex (spinlock) protects next_seq.  An appender takes
 *	  it for a handful of instructions: read the current segment, take
 *	  seqs, publish its entry's first_seq.  Readers take it only to read
 *	  next_seq.
 *	- An open-append entry (SgBackendAppends) is written only by its
 *	  owning backend.  The owner publishes the entry's partition and bumps
 *	  its count of used entries (nused, atomic, with a write barrier)
 *	  BEFORE taking the partition mutex, and stores first_seq (atomic)
 *	  while holding it.  A reader that acquires the mutex afterwards
 *	  therefore sees every entry whose first_seq is below the next_seq it
 *	  read.  A reader may see a stale partition number on an entry being
 *	  recycled; that can only lower a horizon, never raise it, and the next
 *	  read corrects it.  subid and count are read only by the owner.
 *	- SgStream.rate_mutex (spinlock) protects rate_sec and rate_count.
 *	- SgStream.current_seg, min_seg, generation and incarnation are
 *	  atomics.  Segment numbers only grow: set at allocation, raised by
 *	  HorizonRaiseSegments (the maintenance worker, under the lock in
 *	  shared mode so that the slot cannot change hands meanwhile, with a
 *	  compare-and-swap that never lowers them); current_seg is read under
 *	  the partition mutex so that, per partition, a later seq never lands
 *	  in an earlier segment.  incarnation is bumped only when the slot is
 *	  freed (lock held exclusively); generation by anyone whose change of
 *	  a stream's metadata other backends must reload.
 *	- SgStream.readable is a condition variable (its own spinlock).
 * Helpers named *_locked expect the lock held and assert it.
 *
 * Restart: shared memory starts empty; a stream's counters are loaded on
 * first use from max(seq) in its retained segments and the floor recorded
 * when segments were dropped (so seqs are never reused).
 *
 * Calls up: none.  What this layer needs from above it comes through two
 * callbacks installed by _PG_init (streamguard.c): HorizonCommitWake
 * (pipeline_slots.c wakes the pipeline workers of a stream when appends
 * to it commit) and HorizonSeqLoader (catalog.c loads a partition's
 * highest seq from storage).
 *
 * WHY ONE FILE (about 1,000 lines).  Everything here reads or writes the
 * structures of the contract above, and the contract is only checkable
 * when the code that publishes an entry, the code that computes the
 * horizon from it and the transaction callbacks that clear it sit side by
 * side; split, each half would have to restate the ordering rules of the
 * other.  What is not part of it lives elsewhere: metadata and storage in
 * catalog.c and store.c, the views' use of the horizon in views.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "core/util.h"
#include "shmem/horizon.h"

#define SG_NO_SEQ	0			/* seqs start at 1 */
#define SG_RATE_BUCKETS			16	/* one-second buckets of committed appends */
#define SG_RATE_WINDOW			10	/* seconds averaged by append_rate */

int			sg_max_streams = 256;
int			sg_max_partitions = 4096;
int			sg_max_xact_partitions = 1024;

/* one partition's counter: an entry of the partition array */
typedef struct SgPartition
{
	slock_t		mutex;			/* protects next_seq */
	int64		next_seq;		/* next seq to hand out */
	int32		owner;			/* stream slot using this entry, or -1 */
} SgPartition;

/* one stream: an entry of the stream slot array */
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

/*
 * What this layer needs from the layers above, installed by _PG_init so
 * that shared memory calls no one above it: who to wake when appends to a
 * stream commit (pipeline workers), and how to load a partition's highest
 * seq from storage (the catalog).
 */
HorizonWakeFn HorizonCommitWake = NULL;
HorizonSeqLoaderFn HorizonSeqLoader = NULL;

typedef struct SgOpenAppend
{
	pg_atomic_uint64 first_seq; /* SG_NO_SEQ when unused */
	int32		part_index;		/* global SgPartition index */
	int32		stream_slot;
	SubTransactionId subid;		/* subtransaction that owns the entry */
	int64		count;			/* events appended (for the rate) */
} SgOpenAppend;

typedef struct SgBackendAppends
{
	pg_atomic_uint32 nused;
	SgOpenAppend entries[FLEXIBLE_ARRAY_MEMBER];
} SgBackendAppends;

typedef struct SgShared
{
	LWLock	   *lock;
} SgShared;

static SgShared *sg_shared = NULL;
static SgStream *sg_streams = NULL;
static SgPartition *sg_parts = NULL;
static char *sg_backend_area = NULL;
static int	sg_total_procs = 0;

/* pending actions for this transaction */
typedef enum SgPendingAction
{
	SG_PENDING_BUMP,			/* commit: bump the generation */
	SG_PENDING_BUMP_ALWAYS,		/* commit, abort or abort of its subtransaction: bump */
	SG_PENDING_WAKE,			/* commit: wake the stream's readers */
	SG_PENDING_FREE,			/* commit or abort: free the slot */
	SG_PENDING_FREE_ON_ABORT	/* the stream was created here: free on abort */
} SgPendingAction;

typedef struct SgPending
{
	int32		stream_id;
	SgPendingAction action;
	SubTransactionId subid;		/* (sub)transaction that queued it */
} SgPending;

static List *sg_pending = NIL;

static void sg_free_slot_locked(int slot);
static int	sg_find_slot_locked(Oid dbid, int32 stream_id);
static bool sg_callbacks_registered = false;

static Size
sg_backend_entry_size(void)
{
	return MAXALIGN(offsetof(SgBackendAppends, entries) +
					sizeof(SgOpenAppend) * sg_max_xact_partitions);
}

static SgBackendAppends *
sg_backend(int procno)
{
	return (SgBackendAppends *) (sg_backend_area + procno * sg_backend_entry_size());
}

Size
HorizonShmemSize(void)
{
	Size		size;

	size = MAXALIGN(sizeof(SgShared));
	size = add_size(size, mul_size(sg_max_streams, sizeof(SgStream)));
	size = add_size(size, mul_size(sg_max_partitions, sizeof(SgPartition)));
	size = add_size(size, mul_size(SG_TOTAL_PROCS, sg_backend_entry_size()));
	return size;
}

void
HorizonShmemRequest(void)
{
	RequestAddinShmemSpace(HorizonShmemSize());
	RequestNamedLWLockTranche("streamguard", 1);
}

void
HorizonShmemInit(void)
{
	bool		found;
	char	   *base;

	sg_total_procs = SG_TOTAL_PROCS;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	base = ShmemInitStruct("streamguard", HorizonShmemSize(), &found);
	sg_shared = (SgShared *) base;
	sg_streams = (SgStream *) (base + MAXALIGN(sizeof(SgShared)));
	sg_parts = (SgPartition *) ((char *) sg_streams + sg_max_streams * sizeof(SgStream));
	sg_backend_area = (char *) sg_parts + sg_max_partitions * sizeof(SgPartition);
	if (!found)
	{
		int			i;

		memset(base, 0, HorizonShmemSize());
		sg_shared->lock = &(GetNamedLWLockTranche("streamguard"))->lock;
		for (i = 0; i < sg_max_streams; i++)
		{
			SgStream   *st = &sg_streams[i];

			st->dbid = InvalidOid;
			pg_atomic_init_u32(&st->incarnation, 1);
			pg_atomic_init_u32(&st->generation, 1);
			pg_atomic_init_u32(&st->current_seg, 0);
			pg_atomic_init_u32(&st->min_seg, 0);
			SpinLockInit(&st->rate_mutex);
			ConditionVariableInit(&st->readable);
		}
		for (i = 0; i < sg_max_partitions; i++)
		{
			SpinLockInit(&sg_parts[i].mutex);
			sg_parts[i].owner = -1;
		}
		for (i = 0; i < sg_total_procs; i++)
		{
			SgBackendAppends *b = sg_backend(i);
			int			j;

			pg_atomic_init_u32(&b->nused, 0);
			for (j = 0; j < sg_max_xact_partitions; j++)
				pg_atomic_init_u64(&b->entries[j].first_seq, SG_NO_SEQ);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * What a slot knows, read without the lock by a backend that holds a
 * handle to it (meta->ref, validated by HorizonRefValid when the metadata
 * was looked up): the atomics are read as they are, the identity fields
 * may be stale if the slot was freed meanwhile, which the generation and
 * incarnation checks of catalog.c catch at the next look-up.
 */
Oid
HorizonCatalogOid(int slot)
{
	return sg_streams[slot].catalog_oid;
}

uint32
HorizonGeneration(int slot)
{
	return pg_atomic_read_u32(&sg_streams[slot].generation);
}

/* every backend reloads the stream's metadata at its next look-up */
void
HorizonBumpGeneration(int slot)
{
	pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
}

/* are the partition counters loaded (HorizonEnsureSeqReady)? */
bool
HorizonSeqReady(int slot)
{
	if (!sg_streams[slot].seq_ready)
		return false;
	pg_read_barrier();			/* the counters were written before the flag */
	return true;
}

/* the stream's oldest retained segment and the one receiving appends */
void
HorizonSegments(int slot, int32 *min_seg, int32 *cur_seg)
{
	*min_seg = (int32) pg_atomic_read_u32(&sg_streams[slot].min_seg);
	*cur_seg = (int32) pg_atomic_read_u32(&sg_streams[slot].current_seg);
}

/* raise an atomic segment number to at least `to` (they only grow) */
static void
sg_raise_u32(pg_atomic_uint32 *ptr, int32 to)
{
	uint32		old = pg_atomic_read_u32(ptr);

	while ((int32) old < to)
		if (pg_atomic_compare_exchange_u32(ptr, &old, (uint32) to))
			break;
}

/*
 * The maintenance worker moved the stream's segments (rotation, retention,
 * or the catalog is ahead of shared memory): raise the slot's segment
 * numbers to at least these (0 leaves one as it is).  Under the lock, in
 * shared mode, so that the slot is still this stream's when it is written:
 * a slot changes hands only under the lock in exclusive mode.
 */
void
HorizonRaiseSegments(Oid dbid, int32 stream_id, int32 cur_seg, int32 min_seg)
{
	int			slot;

	LWLockAcquire(sg_shared->lock, LW_SHARED);
	slot = sg_find_slot_locked(dbid, stream_id);
	if (slot >= 0)
	{
		sg_raise_u32(&sg_streams[slot].current_seg, cur_seg);
		sg_raise_u32(&sg_streams[slot].min_seg, min_seg);
	}
	LWLockRelease(sg_shared->lock);
}

/*
 * Is the cached handle still the stream it was taken for?
 */
bool
HorizonRefValid(SgStreamRef ref, Oid dbid, int32 stream_id)
{
	SgStream   *st;

	if (ref.slot < 0 || ref.slot >= sg_max_streams)
		return false;
	st = &sg_streams[ref.slot];
	return pg_atomic_read_u32(&st->incarnation) == ref.incarnation &&
		st->dbid == dbid && st->stream_id == stream_id;
}

static int
sg_find_slot_locked(Oid dbid, int32 stream_id)
{
	int			i;

	Assert(LWLockHeldByMe(sg_shared->lock));
	for (i = 0; i < sg_max_streams; i++)
		if (sg_streams[i].dbid == dbid && sg_streams[i].stream_id == stream_id)
			return i;
	return -1;
}

/* the first run of nparts free partition entries: its first index, or -1 */
static int
sg_first_fit_locked(int nparts)
{
	int			run = 0;
	int			i;

	Assert(LWLockHeldByMeInMode(sg_shared->lock, LW_EXCLUSIVE));
	for (i = 0; i < sg_max_partitions; i++)
	{
		if (sg_parts[i].owner >= 0)
			run = 0;
		else if (++run == nparts)
			return i - nparts + 1;
	}
	return -1;
}

int
HorizonFindSlot(Oid dbid, int32 stream_id)
{
	int			slot;

	LWLockAcquire(sg_shared->lock, LW_SHARED);
	slot = sg_find_slot_locked(dbid, stream_id);
	LWLockRelease(sg_shared->lock);
	return slot;
}

/*
 * Find or allocate the shared slot of a stream of the current database.
 */
static SgStreamRef
sg_attach(int32 stream_id, int nparts, int32 current_seg, int32 min_seg,
		  Oid catalog_oid, bool missing_ok)
{
	SgStreamRef ref;
	int			slot;
	int			i,
				base;
	SgStream   *st;

	LWLockAcquire(sg_shared->lock, LW_SHARED);
	slot = sg_find_slot_locked(MyDatabaseId, stream_id);
	if (slot >= 0 && sg_streams[slot].catalog_oid == catalog_oid)
	{
		ref.slot = slot;
		ref.incarnation = pg_atomic_read_u32(&sg_streams[slot].incarnation);
		LWLockRelease(sg_shared->lock);
		return ref;
	}
	LWLockRelease(sg_shared->lock);

	LWLockAcquire(sg_shared->lock, LW_EXCLUSIVE);
	slot = sg_find_slot_locked(MyDatabaseId, stream_id);
	if (slot >= 0 && sg_streams[slot].catalog_oid != catalog_oid)
	{
		/*
		 * A slot left by an earlier incarnation of the extension in this
		 * database (DROP EXTENSION, CREATE EXTENSION): the ids restart, so
		 * the slot describes another stream.  Retire it.
		 */
		sg_free_slot_locked(slot);
		slot = -1;
	}
	if (slot < 0)
	{
		for (i = 0; i < sg_max_streams; i++)
			if (sg_streams[i].dbid == InvalidOid)
				break;
		if (i >= sg_max_streams)
		{
			LWLockRelease(sg_shared->lock);
			if (missing_ok)
			{
				ref.slot = -1;
				ref.incarnation = 0;
				return ref;
			}
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many active streams"),
					 errdetail("All %d stream slots in shared memory are in use.", sg_max_streams),
					 errhint("Raise streamguard.max_streams and restart the server.")));
		}
		slot = i;

		base = sg_first_fit_locked(nparts);
		if (base < 0)
		{
			LWLockRelease(sg_shared->lock);
			if (missing_ok)
			{
				ref.slot = -1;
				ref.incarnation = 0;
				return ref;
			}
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("no room for %d more partitions in shared memory", nparts),
					 errhint("Raise streamguard.max_partitions and restart the server.")));
		}
		for (i = base; i < base + nparts; i++)
		{
			sg_parts[i].owner = slot;
			sg_parts[i].next_seq = 1;
		}
		st = &sg_streams[slot];
		st->dbid = MyDatabaseId;
		st->stream_id = stream_id;
		st->catalog_oid = catalog_oid;
		st->nparts = nparts;
		st->part_base = base;
		st->seq_ready = false;
		pg_atomic_write_u32(&st->current_seg, (uint32) current_seg);
		pg_atomic_write_u32(&st->min_seg, (uint32) min_seg);
		pg_atomic_fetch_add_u32(&st->generation, 1);
		SpinLockAcquire(&st->rate_mutex);
		memset(st->rate_sec, 0, sizeof(st->rate_sec));
		memset(st->rate_count, 0, sizeof(st->rate_count));
		SpinLockRelease(&st->rate_mutex);
	}
	ref.slot = slot;
	ref.incarnation = pg_atomic_read_u32(&sg_streams[slot].incarnation);
	LWLockRelease(sg_shared->lock);
	return ref;
}

/*
 * Attach a stream to a shared-memory slot (or find its slot).  Fails with
 * 53400 when no slot or no run of partition entries is free.
 */
SgStreamRef
HorizonAttachStream(int32 stream_id, int nparts, int32 current_seg, int32 min_seg,
					Oid catalog_oid)
{
	return sg_attach(stream_id, nparts, current_seg, min_seg, catalog_oid, false);
}

/* The same, but slot -1 instead of an error when shared memory is full. */
SgStreamRef
HorizonTryAttachStream(int32 stream_id, int nparts, int32 current_seg, int32 min_seg,
					   Oid catalog_oid)
{
	return sg_attach(stream_id, nparts, current_seg, min_seg, catalog_oid, true);
}

/*
 * Load the partition counters from storage the first time a stream is used
 * after startup.  Nobody can take a seq before seq_ready is set, so the
 * maxima computed here (outside the lock) cannot be overtaken; the first
 * backend to finish installs its values.
 */
void
HorizonEnsureSeqReady(SgStreamRef ref, int32 stream_id)
{
	SgStream   *st = &sg_streams[ref.slot];
	int64	   *maxima;
	int			p;
	int			nparts;
	int32		min_seg,
				cur_seg;

	if (st->seq_ready)
	{
		pg_read_barrier();
		return;
	}

	min_seg = (int32) pg_atomic_read_u32(&st->min_seg);
	cur_seg = (int32) pg_atomic_read_u32(&st->current_seg);
	/* read once: HorizonGrowStream may raise it (it needs seq_ready, though) */
	nparts = st->nparts;
	maxima = palloc(sizeof(int64) * nparts);
	for (p = 0; p < nparts; p++)
		maxima[p] = HorizonSeqLoader(stream_id, p, min_seg, cur_seg);

	LWLockAcquire(sg_shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u32(&st->incarnation) == ref.incarnation && !st->seq_ready &&
		st->nparts == nparts)
	{
		for (p = 0; p < nparts; p++)
		{
			SgPartition *part = &sg_parts[st->part_base + p];

			SpinLockAcquire(&part->mutex);
			part->next_seq = maxima[p] + 1;
			SpinLockRelease(&part->mutex);
		}
		pg_write_barrier();
		st->seq_ready = true;
	}
	LWLockRelease(sg_shared->lock);
	pfree(maxima);
}

static void sg_xact_callback(XactEvent event, void *arg);
static void sg_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

void
HorizonRegisterCallbacks(void)
{
	if (!sg_callbacks_registered)
	{
		RegisterXactCallback(sg_xact_callback, NULL);
		RegisterSubXactCallback(sg_subxact_callback, NULL);
		sg_callbacks_registered = true;
	}
}

/*
 * A subtransaction's appends die with it, so its entries stop holding the
 * horizon back at once.  Entries of a committed subtransaction pass to its
 * parent.  Subtransaction ids grow, so the entries at or above an aborting
 * subtransaction's id are its own and its children's.  The abort has
 * already been recorded when this runs; its rows can never become visible.
 */
static void
sg_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	SgBackendAppends *mine;
	uint32		n,
				i;
	ListCell   *lc;

	foreach(lc, sg_pending)
	{
		SgPending  *p = lfirst(lc);

		if (event == SUBXACT_EVENT_COMMIT_SUB && p->subid == mySubid)
			p->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB && p->subid >= mySubid &&
				 p->action == SG_PENDING_BUMP_ALWAYS)
		{
			/* this backend cached what the subtransaction changed: reload */
			int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

			if (slot >= 0)
				pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
		}
		else if (event == SUBXACT_EVENT_ABORT_SUB && p->subid >= mySubid)
		{
			/* what the subtransaction created is gone; its changes too */
			if (p->action == SG_PENDING_FREE_ON_ABORT)
				p->action = SG_PENDING_FREE;
			else if (p->action == SG_PENDING_FREE)
				p->action = SG_PENDING_BUMP;
		}
	}
	if (sg_backend_area == NULL || MyProc == NULL)
		return;
	mine = sg_backend(SG_MY_PROC_INDEX);
	n = pg_atomic_read_u32(&mine->nused);
	for (i = 0; i < n; i++)
	{
		SgOpenAppend *e = &mine->entries[i];

		if (pg_atomic_read_u64(&e->first_seq) == SG_NO_SEQ)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB && e->subid == mySubid)
			e->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB && e->subid >= mySubid)
			pg_atomic_write_u64(&e->first_seq, SG_NO_SEQ);
	}
}

/*
 * Take `count` consecutive seqs in a partition for the current transaction
 * and return the first.  *segment receives the segment the events belong
 * in.  This is the only place offsets are assigned.
 */
int64
HorizonAssignSeqs(SgStreamRef ref, int partition, int count, int32 *segment)
{
	SgStream   *st = &sg_streams[ref.slot];
	int			part_index = st->part_base + partition;
	SgPartition *part = &sg_parts[part_index];
	SgBackendAppends *mine = sg_backend(SG_MY_PROC_INDEX);
	uint32		n = pg_atomic_read_u32(&mine->nused);
	SgOpenAppend *entry = NULL;
	uint32		i;
	int64		first;

	Assert(st->seq_ready);
	HorizonRegisterCallbacks();

	for (i = 0; i < n; i++)
		if (mine->entries[i].part_index == part_index &&
			pg_atomic_read_u64(&mine->entries[i].first_seq) != SG_NO_SEQ)
		{
			entry = &mine->entries[i];
			break;
		}

	if (entry != NULL)
	{
		SpinLockAcquire(&part->mutex);
		*segment = (int32) pg_atomic_read_u32(&st->current_seg);
		first = part->next_seq;
		part->next_seq += count;
		SpinLockRelease(&part->mutex);
		entry->count += count;
		return first;
	}

	/* a new entry: one a rolled-back subtransaction left empty, or the next */
	for (i = 0; i < n; i++)
		if (pg_atomic_read_u64(&mine->entries[i].first_seq) == SG_NO_SEQ)
			break;
	if (i == n && n >= (uint32) sg_max_xact_partitions)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("transaction appends to more than %d partitions", sg_max_xact_partitions),
				 errhint("Commit more often, or raise streamguard.max_xact_partitions.")));
	entry = &mine->entries[i];
	entry->part_index = part_index;
	entry->stream_slot = ref.slot;
	entry->subid = GetCurrentSubTransactionId();
	entry->count = count;
	pg_write_barrier();
	if (i == n)
		pg_atomic_write_u32(&mine->nused, n + 1);

	SpinLockAcquire(&part->mutex);
	*segment = (int32) pg_atomic_read_u32(&st->current_seg);
	first = part->next_seq;
	part->next_seq += count;
	pg_atomic_write_u64(&entry->first_seq, (uint64) first);
	SpinLockRelease(&part->mutex);
	return first;
}

/*
 * The readable horizon of a partition: every seq below it has committed
 * or aborted.  Also reports next_seq and the number of open appenders.
 * With skip_mine, the current transaction's own open appends do not hold
 * it back (they commit together with whatever the caller does, or not at
 * all).
 */
static int64
sg_readable(SgStream *st, int partition, int64 *next_seq, int *in_flight, bool skip_mine)
{
	int			part_base;
	int			part_index;
	SgPartition *part;
	int64		next;
	int64		horizon;
	int			open;
	int			procno;

retry:
	part_base = *((volatile int32 *) &st->part_base);
	pg_read_barrier();
	part_index = part_base + partition;
	part = &sg_parts[part_index];
	open = 0;
	SpinLockAcquire(&part->mutex);
	next = part->next_seq;
	SpinLockRelease(&part->mutex);
	pg_memory_barrier();

	horizon = next;
	for (procno = 0; procno < sg_total_procs; procno++)
	{
		SgBackendAppends *b = sg_backend(procno);
		uint32		n = pg_atomic_read_u32(&b->nused);
		uint32		i;

		if (n > (uint32) sg_max_xact_partitions)
			n = sg_max_xact_partitions;
		if (skip_mine && procno == SG_MY_PROC_INDEX)
			continue;
		pg_read_barrier();
		for (i = 0; i < n; i++)
		{
			SgOpenAppend *e = &b->entries[i];
			uint64		s = pg_atomic_read_u64(&e->first_seq);

			if (s == SG_NO_SEQ || (int64) s >= next)
				continue;
			pg_read_barrier();
			if (e->part_index != part_index)
				continue;
			open++;
			if ((int64) s < horizon)
				horizon = (int64) s;
		}
	}

	/*
	 * HorizonGrowStream moved the stream's partitions meanwhile: the entry
	 * read may be another stream's by now.  Read again from the new one.
	 */
	pg_read_barrier();
	if (*((volatile int32 *) &st->part_base) != part_base)
		goto retry;
	if (next_seq)
		*next_seq = next;
	if (in_flight)
		*in_flight = open;
	return horizon;
}

int64
HorizonReadable(int slot, int partition, int64 *next_seq, int *in_flight)
{
	return sg_readable(&sg_streams[slot], partition, next_seq, in_flight, false);
}

/*
 * Where a reader created by the current transaction starts when it starts
 * "at the end": everything below has committed or aborted, or was appended
 * by this transaction itself.
 */
int64
HorizonReadableOwn(int slot, int partition)
{
	return sg_readable(&sg_streams[slot], partition, NULL, NULL, true);
}

/*
 * The open appends of this database's streams: which backend holds which
 * partition's horizon back, and from which seq.  At most `max` entries;
 * returns how many were found (possibly more than `max`).  A snapshot
 * without locks: an entry may be gone by the time it is shown.
 */
int
HorizonListOpenAppends(SgOpenAppendInfo *out, int max)
{
	int			procno,
				n = 0;

	for (procno = 0; procno < sg_total_procs; procno++)
	{
		SgBackendAppends *b = sg_backend(procno);
		uint32		used = pg_atomic_read_u32(&b->nused);
		uint32		i;

		if (used > (uint32) sg_max_xact_partitions)
			used = sg_max_xact_partitions;
		pg_read_barrier();
		for (i = 0; i < used; i++)
		{
			SgOpenAppend *e = &b->entries[i];
			uint64		seq = pg_atomic_read_u64(&e->first_seq);
			SgStream   *st;

			if (seq == SG_NO_SEQ)
				continue;
			pg_read_barrier();
			if (e->stream_slot < 0 || e->stream_slot >= sg_max_streams)
				continue;
			st = &sg_streams[e->stream_slot];
			if (st->dbid != MyDatabaseId ||
				e->part_index < st->part_base || e->part_index >= st->part_base + st->nparts)
				continue;
			if (n < max)
			{
				out[n].stream_id = st->stream_id;
				out[n].partition = e->part_index - st->part_base;
				out[n].pid = ProcGlobal->allProcs[procno].pid;
				out[n].first_seq = (int64) seq;
			}
			n++;
		}
	}
	return n;
}

/*
 * Does this backend's transaction hold open appends on the stream?
 */
bool
HorizonHasOwnAppends(SgStreamRef ref)
{
	SgBackendAppends *mine;
	uint32		n,
				i;

	if (sg_backend_area == NULL || MyProc == NULL)
		return false;
	mine = sg_backend(SG_MY_PROC_INDEX);
	n = pg_atomic_read_u32(&mine->nused);
	for (i = 0; i < n; i++)
		if (mine->entries[i].stream_slot == ref.slot &&
			pg_atomic_read_u64(&mine->entries[i].first_seq) != SG_NO_SEQ)
			return true;
	return false;
}

/*
 * Give a stream `nparts` partition entries (alter_stream growing it), and
 * return in switch_seqs[p], for each partition it had, the last seq handed
 * out so far.  The caller holds the stream's append lock exclusively
 * (StreamLockAppendExclusive): no transaction but its own can take seqs in
 * the stream meanwhile, and its own has none (HorizonHasOwnAppends), so no
 * open-append entry refers to the stream's partition entries and they can
 * move.  The counters must be loaded (HorizonEnsureSeqReady).
 *
 * The entries grow in place when the ones after the stream's run are free,
 * else move to a free run of `nparts` (next_seq copied); readers that read
 * the old part_base notice the move and read again (sg_readable).  Done
 * before the alter commits and kept if it aborts: the slot may have more
 * entries than the catalog has partitions, never fewer.  Fails with 53400
 * when shared memory has no room.
 */
void
HorizonGrowStream(SgStreamRef ref, int nparts, int64 *switch_seqs)
{
	SgStream   *st = &sg_streams[ref.slot];
	int			old_n,
				old_base,
				base = -1,
				i;

	LWLockAcquire(sg_shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u32(&st->incarnation) != ref.incarnation || !st->seq_ready)
	{
		LWLockRelease(sg_shared->lock);
		elog(ERROR, "stream slot %d changed while growing it", ref.slot);
	}
	old_n = st->nparts;
	old_base = st->part_base;
	for (i = 0; i < old_n; i++)
	{
		SgPartition *part = &sg_parts[old_base + i];

		SpinLockAcquire(&part->mutex);
		if (switch_seqs)
			switch_seqs[i] = part->next_seq - 1;
		SpinLockRelease(&part->mutex);
	}
	if (old_n >= nparts)
	{
		/* an earlier alter that aborted grew it already */
		LWLockRelease(sg_shared->lock);
		return;
	}

	/* in place? */
	for (i = old_base + old_n; i < old_base + nparts && i < sg_max_partitions; i++)
		if (sg_parts[i].owner >= 0)
			break;
	if (i == old_base + nparts)
		base = old_base;
	else
		base = sg_first_fit_locked(nparts);
	if (base < 0)
	{
		LWLockRelease(sg_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no room for %d more partitions in shared memory", nparts),
				 errhint("Raise streamguard.max_partitions and restart the server.")));
	}
	for (i = 0; i < nparts; i++)
	{
		SgPartition *part = &sg_parts[base + i];
		int64		next = 1;

		if (base != old_base && i < old_n)
		{
			SpinLockAcquire(&sg_parts[old_base + i].mutex);
			next = sg_parts[old_base + i].next_seq;
			SpinLockRelease(&sg_parts[old_base + i].mutex);
		}
		else if (i < old_n)
			continue;			/* in place: the entry stays as it is */
		SpinLockAcquire(&part->mutex);
		part->next_seq = next;
		SpinLockRelease(&part->mutex);
		part->owner = ref.slot;
	}
	pg_write_barrier();
	st->part_base = base;
	st->nparts = nparts;
	pg_write_barrier();
	if (base != old_base)
		for (i = 0; i < old_n; i++)
			sg_parts[old_base + i].owner = -1;
	LWLockRelease(sg_shared->lock);
}

/*
 * Per partition, the next seq to be handed out; false if the counters are
 * not loaded.  Read right after a segment switch, these bound every seq
 * the sealed segment can ever hold: an appender reads the current segment
 * under the partition mutex together with its seqs.
 */
static bool
sg_seq_bounds(int slot, int64 *bounds, int nparts)
{
	SgStream   *st = &sg_streams[slot];
	int			p;
	int32		base;

	if (!st->seq_ready || st->nparts != nparts)
		return false;
	pg_read_barrier();
	base = *((volatile int32 *) &st->part_base);
	pg_read_barrier();
	for (p = 0; p < nparts; p++)
	{
		SgPartition *part = &sg_parts[base + p];

		SpinLockAcquire(&part->mutex);
		bounds[p] = part->next_seq;
		SpinLockRelease(&part->mutex);
	}
	/* moved meanwhile (HorizonGrowStream): the entries read may be another's */
	pg_read_barrier();
	return *((volatile int32 *) &st->part_base) == base &&
		*((volatile int32 *) &st->nparts) == nparts;
}

/*
 * What every segment sealed so far can hold (the maintenance worker
 * records it): the segment receiving appends, read first, into *cur_seg,
 * and then the next seq of each partition into *bounds (palloc'd).
 * Returns the number of partitions, or -1 when the counters are not loaded
 * or the stream grew meanwhile (a later round tries again).
 */
int
HorizonSealedBounds(int slot, int32 *cur_seg, int64 **bounds)
{
	SgStream   *st = &sg_streams[slot];
	int			nparts;

	*cur_seg = (int32) pg_atomic_read_u32(&st->current_seg);
	pg_memory_barrier();
	nparts = *((volatile int32 *) &st->nparts);
	*bounds = palloc(sizeof(int64) * nparts);
	if (!sg_seq_bounds(slot, *bounds, nparts))
		return -1;
	return nparts;
}

/*
 * Make durable every commit whose events a reader in this backend may have
 * seen, before anything derived from them leaves the server (a read()
 * answer, a remote COMMIT, PREPARE or COMMIT PREPARED).  A producer that
 * committed with synchronous_commit = off has its commit record in the WAL
 * buffers only; a crash would lose the event after a remote holds it.
 *
 * The commit record of every transaction a snapshot sees was inserted
 * before the transaction left the proc array (and before its seqs dropped
 * below the readable horizon), so the insert position read now, after the
 * reader's snapshot, covers all of them.  The write position would not: an
 * asynchronous commit still in the WAL buffers is not written yet.
 * XLogFlush returns at once when that far is already flushed.
 */
void
HorizonMakeDurable(void)
{
	XLogRecPtr	upto;

	if (RecoveryInProgress())
		return;
	upto = GetXLogInsertRecPtr();

	/*
	 * When the last record ended on a page boundary, the insert position
	 * lies past the next page's header, where nothing is inserted yet;
	 * XLogFlush refuses a request beyond what was inserted, and the boundary
	 * covers every record.
	 */
	if (XLogSegmentOffset(upto, wal_segment_size) == SizeOfXLogLongPHD)
		upto -= SizeOfXLogLongPHD;
	else if (upto % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		upto -= SizeOfXLogShortPHD;
	XLogFlush(upto);
}

double
HorizonAppendRate(int slot)
{
	SgStream   *st = &sg_streams[slot];
	int64		now = (int64) (GetCurrentTimestamp() / USECS_PER_SEC);
	int64		total = 0;
	int			i;

	SpinLockAcquire(&st->rate_mutex);
	for (i = 0; i < SG_RATE_BUCKETS; i++)
		if (st->rate_sec[i] < now && st->rate_sec[i] >= now - SG_RATE_WINDOW)
			total += st->rate_count[i];
	SpinLockRelease(&st->rate_mutex);
	return (double) total / SG_RATE_WINDOW;
}

static void
sg_record_rate(SgStream *st, int64 count)
{
	int64		now = (int64) (GetCurrentTimestamp() / USECS_PER_SEC);
	int			b = (int) (now % SG_RATE_BUCKETS);

	SpinLockAcquire(&st->rate_mutex);
	if (st->rate_sec[b] != now)
	{
		st->rate_sec[b] = now;
		st->rate_count[b] = 0;
	}
	st->rate_count[b] += count;
	SpinLockRelease(&st->rate_mutex);
}

static void
sg_release_open_appends(bool committed)
{
	SgBackendAppends *mine;
	uint32		n,
				i,
				j;
	int32		woken[16];
	int			nwoken = 0;

	if (sg_backend_area == NULL || MyProc == NULL)
		return;
	mine = sg_backend(SG_MY_PROC_INDEX);
	n = pg_atomic_read_u32(&mine->nused);
	for (i = 0; i < n; i++)
	{
		SgOpenAppend *e = &mine->entries[i];

		if (committed && e->count > 0 &&
			pg_atomic_read_u64(&e->first_seq) != SG_NO_SEQ)
			sg_record_rate(&sg_streams[e->stream_slot], e->count);
		pg_atomic_write_u64(&e->first_seq, SG_NO_SEQ);
	}
	pg_write_barrier();
	pg_atomic_write_u32(&mine->nused, 0);

	/*
	 * Wake the pipelines reading what we appended, only now that our
	 * entries are gone: a woken worker must find the horizon moved.
	 */
	if (!committed)
		return;
	for (i = 0; i < n; i++)
	{
		SgOpenAppend *e = &mine->entries[i];
		int32		slot = e->stream_slot;

		if (e->count <= 0)
			continue;
		for (j = 0; j < (uint32) nwoken; j++)
			if (woken[j] == slot)
				break;
		if (j < (uint32) nwoken)
			continue;
		if (nwoken < (int) lengthof(woken))
			woken[nwoken++] = slot;
		if (HorizonCommitWake)
			HorizonCommitWake(sg_streams[slot].dbid, sg_streams[slot].stream_id);
		ConditionVariableBroadcast(&sg_streams[slot].readable);
	}
}

/*
 * Long-poll: a reader that found nothing registers on the stream's
 * condition variable BEFORE it looks (HorizonPrepareWait), then sleeps
 * (HorizonWaitReadable) until an append to the stream commits or the
 * timeout passes.  A commit between the look and the sleep is not lost:
 * the broadcast finds the reader registered.  Returns false on timeout.
 */
void
HorizonPrepareWait(SgStreamRef ref)
{
	ConditionVariablePrepareToSleep(&sg_streams[ref.slot].readable);
}

bool
HorizonWaitReadable(SgStreamRef ref, long timeout_ms)
{
	bool		timed_out;

	timed_out = ConditionVariableTimedSleep(&sg_streams[ref.slot].readable, timeout_ms,
											sg_wait_event(SG_WE_POLL));
	ConditionVariableCancelSleep();
	return !timed_out;
}

/*
 * Wake the long-polling readers of a stream now (a consumer group's
 * members when the membership changed, group.c), without waking its
 * pipelines.
 */
void
HorizonWakeReaders(Oid dbid, int32 stream_id)
{
	int			slot = HorizonFindSlot(dbid, stream_id);

	if (slot >= 0)
		ConditionVariableBroadcast(&sg_streams[slot].readable);
}

/*
 * Free a stream's slot and its partition entries.
 */
static void
sg_free_slot_locked(int slot)
{
	SgStream   *st = &sg_streams[slot];
	int			i;

	Assert(LWLockHeldByMeInMode(sg_shared->lock, LW_EXCLUSIVE));
	for (i = st->part_base; i < st->part_base + st->nparts; i++)
		sg_parts[i].owner = -1;
	pg_atomic_fetch_add_u32(&st->incarnation, 1);
	pg_atomic_fetch_add_u32(&st->generation, 1);
	st->dbid = InvalidOid;
	st->stream_id = 0;
	st->seq_ready = false;
}

void
HorizonFreeStream(Oid dbid, int32 stream_id)
{
	int			slot;

	LWLockAcquire(sg_shared->lock, LW_EXCLUSIVE);
	slot = sg_find_slot_locked(dbid, stream_id);
	if (slot >= 0)
		sg_free_slot_locked(slot);
	LWLockRelease(sg_shared->lock);
}

static void
sg_add_pending(int32 stream_id, SgPendingAction action)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	SgPending  *p = palloc(sizeof(SgPending));

	p->stream_id = stream_id;
	p->action = action;
	p->subid = GetCurrentSubTransactionId();
	sg_pending = lappend(sg_pending, p);
	MemoryContextSwitchTo(old);
	HorizonRegisterCallbacks();
}

/* Metadata of a stream changed: other backends reload after we commit. */
void
HorizonBumpGenerationAtCommit(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_BUMP);
}

/*
 * Metadata of a stream changed and this backend may have cached the
 * change already (alter_stream adding partitions): every backend reloads
 * when the transaction ends, committed or not, and when the
 * subtransaction that queued this aborts.
 */
void
HorizonBumpGenerationAtEnd(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_BUMP_ALWAYS);
}

/*
 * A reader moved positions that may let other readers of the stream go on
 * (past a switch point, repartition.c): wake the long-polls and pipeline
 * workers of the stream when this commits, as a committed append does.
 */
void
HorizonWakeReadersAtCommit(int32 stream_id)
{
	ListCell   *lc;

	foreach(lc, sg_pending)
	{
		SgPending  *p = lfirst(lc);

		if (p->stream_id == stream_id && p->action == SG_PENDING_WAKE)
			return;
	}
	sg_add_pending(stream_id, SG_PENDING_WAKE);
}

/* The stream is dropped: free its slot once the drop commits. */
void
HorizonFreeAtCommit(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_FREE);
}

/*
 * The stream was created by this transaction: if it aborts (or the
 * subtransaction that created it does), a slot attached meanwhile
 * describes a stream that never existed and must not stay taken.
 */
void
HorizonFreeOnAbort(int32 stream_id)
{
	sg_add_pending(stream_id, SG_PENDING_FREE_ON_ABORT);
}

/*
 * Free the stream slots of a database that do not belong to the given
 * incarnation of its extension (catalog_oid, the OID of streamguard.stream):
 * all of them with InvalidOid (the database was dropped, or the extension).
 */
int
HorizonFreeDatabase(Oid dbid, Oid catalog_oid)
{
	int			i,
				n = 0;

	LWLockAcquire(sg_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_streams; i++)
		if (sg_streams[i].dbid == dbid && sg_streams[i].catalog_oid != catalog_oid)
		{
			sg_free_slot_locked(i);
			n++;
		}
	LWLockRelease(sg_shared->lock);
	return n;
}

/* databases that hold stream slots, for the launcher's pruning */
int
HorizonSlotDatabases(Oid *dbids, int max)
{
	int			i,
				n = 0;

	LWLockAcquire(sg_shared->lock, LW_SHARED);
	for (i = 0; i < sg_max_streams; i++)
	{
		n = SgAddOid(dbids, n, max, sg_streams[i].dbid);
	}
	LWLockRelease(sg_shared->lock);
	return n;
}

static void
sg_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (sg_backend_area != NULL && MyProc != NULL &&
				pg_atomic_read_u32(&sg_backend(SG_MY_PROC_INDEX)->nused) > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that appended to a stream"),
						 errdetail("The readable horizon of a stream cannot advance past a prepared transaction's appends."),
						 errhint("Append in a transaction that is committed directly.")));
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				if (p->action == SG_PENDING_BUMP_ALWAYS)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that changed the partition count of a stream"),
							 errdetail("Appends to the stream would wait for the prepared transaction, and the new count would reach other sessions only at their next reload."),
							 errhint("Change the partition count in a transaction that is committed directly.")));
			}
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				/*
				 * What must happen when the transaction ends (other sessions
				 * reloading a stream's metadata, a slot freed) would not
				 * happen at COMMIT PREPARED, which runs elsewhere.
				 */
				if (p->action != SG_PENDING_WAKE)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that created, dropped or changed a stream"),
							 errhint("Create, drop or change streams in a transaction that is committed directly.")));
			}
			break;
		case XACT_EVENT_PREPARE:
			/* only wake-ups left (a poll's): the prepared transaction goes without */
			sg_pending = NIL;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			sg_release_open_appends(true);
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				if (p->action == SG_PENDING_FREE)
					HorizonFreeStream(MyDatabaseId, p->stream_id);
				else if (p->action == SG_PENDING_WAKE)
				{
					int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

					if (HorizonCommitWake)
						HorizonCommitWake(MyDatabaseId, p->stream_id);
					if (slot >= 0)
						ConditionVariableBroadcast(&sg_streams[slot].readable);
				}
				else if (p->action == SG_PENDING_BUMP || p->action == SG_PENDING_BUMP_ALWAYS)
				{
					int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

					if (slot >= 0)
						pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
				}
			}
			sg_pending = NIL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			sg_release_open_appends(false);
			foreach(lc, sg_pending)
			{
				SgPending  *p = lfirst(lc);

				if (p->action == SG_PENDING_FREE_ON_ABORT)
					HorizonFreeStream(MyDatabaseId, p->stream_id);
				else if (p->action == SG_PENDING_BUMP_ALWAYS)
				{
					int			slot = HorizonFindSlot(MyDatabaseId, p->stream_id);

					if (slot >= 0)
						pg_atomic_fetch_add_u32(&sg_streams[slot].generation, 1);
				}
			}
			sg_pending = NIL;
			break;
		default:
			break;
	}
}
