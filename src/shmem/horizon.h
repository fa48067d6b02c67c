/*-------------------------------------------------------------------------
 *
 * horizon.h
 *		Shared memory of streams (horizon.c, horizon_seq.c,
 *		horizon_xact.c): per-partition seq counters, the in-flight append
 *		registry, the readable horizon.
 *
 * The structures themselves are private to those files (horizon_int.h
 * says who writes what under which lock).  Other files hold a stream's
 * slot number, or an SgStreamRef, and call the functions below.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_HORIZON_H
#define SG_HORIZON_H

#include "postgres.h"

/* GUCs sizing it (registered by streamguard.c) */
extern int	sg_max_streams;
extern int	sg_max_partitions;
extern int	sg_max_xact_partitions;

/* a stream handle a backend holds between calls */
typedef struct SgStreamRef
{
	int			slot;
	uint32		incarnation;
} SgStreamRef;

/*
 * Who is woken when appends commit (the pipeline slots' PipelineWakeStream,
 * of this layer too), installed by _PG_init (streamguard.c).
 */
typedef void (*HorizonWakeFn) (Oid dbid, int32 stream_id);
extern HorizonWakeFn HorizonCommitWake;

extern void HorizonShmemRequest(void);
extern void HorizonShmemInit(void);
extern Size HorizonShmemSize(void);
extern void HorizonRegisterCallbacks(void);	/* horizon_xact.c */

/* slots (horizon.c) */
extern bool HorizonRefValid(SgStreamRef ref, Oid dbid, int32 stream_id);
extern SgStreamRef HorizonAttachStream(int32 stream_id, int nparts,
									   int32 current_seg, int32 min_seg, Oid catalog_oid);
extern SgStreamRef HorizonTryAttachStream(int32 stream_id, int nparts,
										  int32 current_seg, int32 min_seg, Oid catalog_oid);
extern int	HorizonFindSlot(Oid dbid, int32 stream_id);
extern void HorizonFreeStream(Oid dbid, int32 stream_id);
extern int	HorizonFreeDatabase(Oid dbid, Oid catalog_oid);
extern int	HorizonSlotDatabases(Oid *dbids, int max);
extern void HorizonGrowStream(SgStreamRef ref, int nparts, int64 *switch_seqs);

/* what a slot knows: read without the lock, atomics bumped or raised (horizon.c) */
extern Oid	HorizonCatalogOid(int slot);
extern uint32 HorizonGeneration(int slot);
extern void HorizonBumpGeneration(int slot);
extern bool HorizonSeqReady(int slot);
extern void HorizonSegments(int slot, int32 *min_seg, int32 *cur_seg);
extern void HorizonRaiseSegments(Oid dbid, int32 stream_id, int32 cur_seg, int32 min_seg);
extern double HorizonAppendRate(int slot);	/* horizon_xact.c */

/* seqs and the horizon (horizon_seq.c) */
extern bool HorizonSeqToLoad(SgStreamRef ref, int32 *min_seg, int32 *cur_seg, int *nparts);
extern void HorizonInstallSeqs(SgStreamRef ref, int nparts, const int64 *maxima);
extern int64 HorizonAssignSeqs(SgStreamRef ref, int partition, int count,
							   int32 *segment);
extern int64 HorizonReadable(int slot, int partition, int64 *next_seq,
							 int *in_flight);
extern int64 HorizonReadableOwn(int slot, int partition);
extern int	HorizonSealedBounds(int slot, int32 *cur_seg, int64 **bounds);
extern bool HorizonHasOwnAppends(SgStreamRef ref);
extern void HorizonMakeDurable(void);

typedef struct SgOpenAppendInfo
{
	int32		stream_id;
	int32		partition;
	int			pid;
	int64		first_seq;
} SgOpenAppendInfo;
extern int	HorizonListOpenAppends(SgOpenAppendInfo *out, int max);

/* long-polling readers (horizon_seq.c) */
extern void HorizonPrepareWait(SgStreamRef ref);
extern bool HorizonWaitReadable(SgStreamRef ref, long timeout_ms);
extern void HorizonWakeReaders(Oid dbid, int32 stream_id);

/* at the end of the transaction (horizon_xact.c) */
extern void HorizonBumpGenerationAtCommit(int32 stream_id);
extern void HorizonBumpGenerationAtEnd(int32 stream_id);
extern void HorizonWakeReadersAtCommit(int32 stream_id);
extern void HorizonFreeAtCommit(int32 stream_id);
extern void HorizonFreeOnAbort(int32 stream_id);

#endif							/* SG_HORIZON_H */
