/*-------------------------------------------------------------------------
 *
 * capture.h
 *		Change capture: what the triggers' hot path (capture_emit.c, its
 *		cache capture_cache.c and its encoder capture_encode.c), the
 *		backfill (capture_backfill.c, capture_chunk.c,
 *		capture_backfill_key.c), the SQL API (capture.c) and the DDL
 *		tracking (capture_ddl.c) share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_CAPTURE_H
#define SG_CAPTURE_H

#include "postgres.h"

#include "access/htup.h"
#include "access/transam.h"
#include "nodes/parsenodes.h"
#include "utils/relcache.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"

/* the words of streamguard.capture_operation, in enum order */
typedef enum SgCaptureOp
{
	SG_CAPTURE_INSERT,
	SG_CAPTURE_UPDATE,
	SG_CAPTURE_DELETE
} SgCaptureOp;

#define SG_CAPTURE_OP_BIT(op)	(1U << (op))

/* the words of streamguard.backfill_state, in enum order */
typedef enum SgBackfillState
{
	SG_BACKFILL_NONE,
	SG_BACKFILL_PENDING,
	SG_BACKFILL_RUNNING,
	SG_BACKFILL_DONE
} SgBackfillState;

extern const SgWordList SgCaptureOpWords;
extern const SgWordList SgBackfillStateWords;

/* the name of a capture's row trigger, and of its TRUNCATE guard */
#define SG_CAPTURE_TRIGGER_FMT		"streamguard_capture_%d"
#define SG_CAPTURE_TRUNCATE_FMT		"streamguard_capture_%d_truncate"

/* one row of streamguard.capture */
typedef struct SgCaptureDef
{
	int32		id;
	Oid			relid;			/* the captured table */
	int32		stream_id;
	char		stream[NAMEDATALEN];
	Oid			owner;			/* the role that captured it */
	int			nkeys;
	AttrNumber *key_attnums;	/* in relid's numbering */
	int			ncols;			/* -1: every column */
	AttrNumber *col_attnums;
	uint32		ops;			/* SG_CAPTURE_OP_BIT of each operation */
	SgBackfillState backfill;
} SgCaptureDef;

/*
 * What encodes the rows of one relation (the captured table, or one of its
 * partitions) into events of one capture; built from the catalog and the
 * relation, kept by the backend until the relation's relcache entry is
 * invalidated.  Opaque outside the hot path (capture_int.h).
 */
typedef struct SgCaptureRel SgCaptureRel;

/* capture_cache.c */
extern SgCaptureDef *CaptureDefLoad(int32 capture_id, bool missing_ok);
extern SgCaptureRel *CaptureRelGet(int32 capture_id, Relation rel);
extern Oid	CaptureRelTableOwner(SgCaptureRel *cr);
extern Oid	CaptureFindKeyIndex(Relation rel, int nkeys, const AttrNumber *key_attnums,
								bool *nullable);
extern void CaptureEnterTableOwner(Oid owner, SgUserSave *save);
extern void CaptureLeaveTableOwner(SgUserSave *save);
extern void CaptureInvalidate(Oid relid);

/* capture_encode.c */
extern uint64 CaptureKeyHash(const char *key);
extern char *CaptureKeyText(SgCaptureRel *cr, TupleDesc rdesc, HeapTuple tuple);

/* capture_emit.c */
extern FullTransactionId CaptureWidenXid(TransactionId xid);
extern int	CaptureEmitBackfill(SgCaptureRel *cr, TupleDesc rdesc, HeapTuple *rows,
								const TransactionId *xmins, int n);

/* capture_backfill.c */
extern int	sg_backfill_chunk_rows;	/* GUCs (registered by streamguard.c) */
extern int	sg_backfill_naptime_ms;
extern int	sg_max_backfill_workers;
extern void CaptureSuperviseBackfills(void);

/* capture_backfill_key.c */
extern Datum CaptureBackfillKey(Relation rel, Oid indexoid);
extern bool CaptureBackfillKeySame(Datum a, Datum b);
extern char *CaptureBackfillKeyText(Datum key);

/* capture.c */

extern int64 CaptureCountForStream(int32 stream_id);
extern void CaptureDropForStream(int32 stream_id);
extern void CaptureDropOwned(Datum role_oids);
extern const char *CaptureOwnedSql;

/* capture_ddl.c */
extern void CaptureCheckTruncate(List *relations);
extern void CaptureCheckRename(RenameStmt *stmt);

#endif							/* SG_CAPTURE_H */
