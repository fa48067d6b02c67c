/*-------------------------------------------------------------------------
 *
 * horizon_seq.c
 *		Seqs and the readable horizon: the counters loaded on first use,
 *		seqs handed out (the only place offsets are assigned), the
 *		horizon computed from the open-append entries, the bounds of a
 *		sealed segment, the WAL flush before what a reader saw leaves the
 *		server, and the long-poll on a stream's condition variable.
 *
 * The structures and the contract are in horizon_int.h.  The code that
 * publishes an open-append entry (HorizonAssignSeqs) and the code that
 * computes the horizon from the entries (sg_readable) sit side by side
 * here, under the ordering rules of that contract: the owner publishes
 * the entry's partition and its count of used entries (nused, with a
 * write barrier) BEFORE taking the partition mutex, and stores first_seq
 * while holding it; a reader takes the mutex to read next_seq, then reads
 * the entries, so it sees every entry whose first_seq is below that
 * next_seq.  The entries are cleared in horizon_xact.c.
 *
 * LOCKS here:
 *	- SgPartition.mutex (spinlock) around next_seq: taken by an appender
 *	  for a handful of instructions (current segment, seqs, first_seq), by
 *	  readers only to read next_seq.
 *	- SgShared->lock (LWLock, "streamguard") held exclusively only by
 *	  StreamEnsureSeqReady, to install the counters and set seq_ready
 *	  (after a write barrier); seq_ready is read without it, then a read
 *	  barrier.
 *	- nparts and part_base are read without the lock: an appender holds
 *	  the stream's append lock, sg_readable and sg_seq_bounds read
 *	  part_base again afterwards and retry or give up when it moved
 *	  (HorizonGrowStream, horizon.c).
 *	- an entry is written only by its owning backend; others read
 *	  part_index and stream_slot after first_seq.
 *	- SgStream.readable is a condition variable (its own spinlock).
 *
 * Calls: horizon.c (HorizonFindSlot), horizon_xact.c
 * (HorizonRegisterCallbacks, before the first seq is taken).  The
 * counters' first values come from above, given: the catalog layer reads
 * them from storage (StreamEnsureSeqReady) and installs them here
 * (HorizonInstallSeqs).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/spin.h"

#include "core/compat.h"
#include "shmem/horizon_int.h"

/*
 * What loading a stream's partition counters needs (the catalog layer
 * reads the highest seqs from storage: StreamEnsureSeqReady, catalog.c):
 * false when they are loaded already; else the retained segments and the
 * partition count, read once (HorizonGrowStream may raise the count, but
 * it needs the counters loaded first).
 */
bool
HorizonSeqToLoad(SgStreamRef ref, int32 *min_seg, int32 *cur_seg, int *nparts)
{
	SgStream   *st = &sg_streams[ref.slot];

	if (st->seq_ready)
	{
		pg_read_barrier();
		return false;
	}
	*min_seg = (int32) pg_atomic_read_u32(&st->min_seg);
	*cur_seg = (int32) pg_atomic_read_u32(&st->current_seg);
	*nparts = st->nparts;
	return true;
}

/*
 * Install the partition counters loaded from storage, the first time a
 * stream is used after startup: maxima[p] is partition p's highest seq.
 * Nobody can take a seq before seq_ready is set, so maxima computed
 * outside the lock cannot be overtaken; the first backend to finish
 * installs its values, and a stream whose slot or partition count changed
 * meanwhile is left to the next caller.
 */
void
HorizonInstallSeqs(SgStreamRef ref, int nparts, const int64 *maxima)
{
	SgStream   *st = &sg_streams[ref.slot];
	int			p;

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
