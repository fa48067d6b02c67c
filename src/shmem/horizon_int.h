/*-------------------------------------------------------------------------
 *
 * horizon_int.h
 *		What the files of stream shared memory share, and only they: the
 *		structures (SgStream, SgPartition, the per-backend
 *		SgBackendAppends), their arrays and the contract of who writes
 *		which field under which lock.  Included by src/shmem/horizon*.c
 *		only; the API is shmem/horizon.h.
 *
 *		horizon.c		the shared table: its memory, slots found,
 *						attached, grown and freed, what a slot knows
 *		horizon_seq.c	seqs handed out, the readable horizon and the
 *						sealed bounds computed from them, the long-poll
 *		horizon_xact.c	at the end of a (sub)transaction: open appends
 *						released, the committed-append rate, pending
 *						actions, PREPARE refused
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
 * per-backend SgBackendAppends) are private to the files above; other
 * files hold a slot number or an SgStreamRef and call the functions of
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
 *	  (StreamEnsureSeqReady sets it after a write barrier that follows the
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
 * Calls up: none.  HorizonCommitWake, installed by _PG_init
 * (streamguard.c), lets pipeline_slots.c (this layer) wake the pipeline
 * workers of a stream when appends to it commit.  The partition counters'
 * first values come from above, given: the catalog layer reads them from
 * storage and installs them (StreamEnsureSeqReady, HorizonInstallSeqs).
 *
 * THE FILES.  The ordering rules of the open-append entries are stated
 * once, above, for the code that publishes an entry and computes the
 * horizon from it (horizon_seq.c, side by side) and for the transaction
 * callbacks that clear it (horizon_xact.c); each file's banner names the
 * locks and rules of the contract it relies on.  The files call each
 * other one way only: horizon_seq.c calls horizon_xact.c (the callbacks
 * registered at the first seq taken) and horizon.c, horizon_xact.c calls
 * horizon.c.  What is not part of it lives elsewhere: metadata and
 * storage in catalog.c and store.c, the views' use of the horizon in
 * views.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_HORIZON_INT_H
#define SG_HORIZON_INT_H

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#include "shmem/horizon.h"

#define SG_NO_SEQ	0			/* seqs start at 1 */
#define SG_RATE_BUCKETS			16	/* one-second buckets of committed appends */

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

/* the shared memory (horizon.c attaches it) */
extern SgShared *sg_shared;
extern SgStream *sg_streams;
extern SgPartition *sg_parts;
extern char *sg_backend_area;
extern int	sg_total_procs;

static inline Size
sg_backend_entry_size(void)
{
	return MAXALIGN(offsetof(SgBackendAppends, entries) +
					sizeof(SgOpenAppend) * sg_max_xact_partitions);
}

static inline SgBackendAppends *
sg_backend(int procno)
{
	return (SgBackendAppends *) (sg_backend_area + procno * sg_backend_entry_size());
}

#endif							/* SG_HORIZON_INT_H */
