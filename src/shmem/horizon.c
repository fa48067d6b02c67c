/*-------------------------------------------------------------------------
 *
 * horizon.c
 *		Shared memory for streams, the table: its memory, a stream's slot
 *		found, attached, grown and freed, and what a slot knows (its
 *		catalog OID, generation, segments).
 *
 * The structures, their arrays and the field-by-field contract of who
 * writes what under which lock are in horizon_int.h, with the design of
 * the readable horizon; the seqs and the horizon are in horizon_seq.c, the
 * end of a transaction in horizon_xact.c.
 *
 * LOCKS here:
 *	- SgShared->lock (LWLock, "streamguard") protects slot allocation:
 *	  SgStream.dbid, stream_id and catalog_oid, and SgPartition.owner, are
 *	  written with it held exclusively (sg_attach, sg_free_slot_locked;
 *	  owner also in HorizonGrowStream), and so are nparts and part_base (at
 *	  allocation and in HorizonGrowStream, whose caller also holds the
 *	  stream's append lock exclusively, which keeps every appender out)
 *	  and seq_ready (cleared at allocation and freeing; set by
 *	  StreamEnsureSeqReady, horizon_seq.c).  Lookups (sg_find_slot_locked)
 *	  hold it in either mode; HorizonRaiseSegments holds it shared, so that
 *	  the slot cannot change hands while it raises the segments.  Holders
 *	  of a handle read the identity without it (HorizonRefValid,
 *	  HorizonCatalogOid) and catch a slot that changed hands through the
 *	  incarnation and generation checks of catalog.c.
 *	- SgPartition.mutex (spinlock) protects next_seq: HorizonGrowStream
 *	  reads and copies it under the mutex; sg_attach sets a new entry's
 *	  next_seq under the LWLock alone.
 *	- SgStream.rate_mutex (spinlock): sg_attach clears the rate under it.
 *	- incarnation, generation, current_seg and min_seg are atomics, read
 *	  as they are by holders of a handle (HorizonGeneration,
 *	  HorizonSegments); segment numbers are raised only by a
 *	  compare-and-swap that never lowers them (sg_raise_u32); incarnation
 *	  is bumped only when the slot is freed (the LWLock exclusive).
 *	- seq_ready is read without the lock, then a read barrier
 *	  (HorizonSeqReady).
 * Helpers named *_locked expect the lock held and assert it.
 *
 * Calls up: none.  HorizonCommitWake, the callback through which
 * horizon_xact.c wakes the pipeline slots (this layer too) when appends
 * commit, is defined here.  This file calls no other file of the module.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "core/compat.h"
#include "core/util.h"
#include "shmem/horizon_int.h"

int			sg_max_streams = 256;
int			sg_max_partitions = 4096;
int			sg_max_xact_partitions = 1024;

/*
 * Who to wake when appends to a stream commit: the pipeline slots'
 * PipelineWakeStream (this layer too), installed by _PG_init.
 */
HorizonWakeFn HorizonCommitWake = NULL;

/* the shared memory, attached by HorizonShmemInit (horizon_int.h) */
SgShared   *sg_shared = NULL;
SgStream   *sg_streams = NULL;
SgPartition *sg_parts = NULL;
char	   *sg_backend_area = NULL;
int			sg_total_procs = 0;

static void sg_free_slot_locked(int slot);
static int	sg_find_slot_locked(Oid dbid, int32 stream_id);

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

/* are the partition counters loaded (StreamEnsureSeqReady)? */
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
 * Give a stream `nparts` partition entries (alter_stream growing it), and
 * return in switch_seqs[p], for each partition it had, the last seq handed
 * out so far.  The caller holds the stream's append lock exclusively
 * (StreamLockAppendExclusive): no transaction but its own can take seqs in
 * the stream meanwhile, and its own has none (HorizonHasOwnAppends), so no
 * open-append entry refers to the stream's partition entries and they can
 * move.  The counters must be loaded (StreamEnsureSeqReady).
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
