/*-------------------------------------------------------------------------
 *
 * capture_int.h
 *		Internal to change capture: the encoder of a captured relation and
 *		the payload of one event (the hot path: capture_cache.c,
 *		capture_encode.c, capture_emit.c); what the SQL API (capture.c) and
 *		the DDL tracking (capture_ddl.c) share; the backfill's chunk, key
 *		and result (capture_backfill.c, capture_chunk.c,
 *		capture_backfill_key.c).  capture.h is what the rest of the
 *		extension sees.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_CAPTURE_INT_H
#define SG_CAPTURE_INT_H

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "capture/capture.h"

typedef struct SgCaptureRelKey
{
	int32		capture_id;
	Oid			relid;
} SgCaptureRelKey;

/*
 * How one column becomes a JSON value.  The common built-in types are
 * encoded here directly, in a form that depends on no setting (a
 * timestamptz always in UTC, a float always in its shortest exact form);
 * any other type goes through to_jsonb in the table owner's pinned context
 * (CaptureEnterTableOwner), the only case that needs it.
 */
typedef enum SgEncKind
{
	SG_ENC_BOOL,
	SG_ENC_INT,					/* int2, int4, int8 */
	SG_ENC_NUMERIC,
	SG_ENC_FLOAT4,
	SG_ENC_FLOAT8,
	SG_ENC_TEXT,				/* text, varchar, bpchar */
	SG_ENC_NAME,
	SG_ENC_DATETIME,			/* date, timestamp, timestamptz */
	SG_ENC_JSONB,
	SG_ENC_JSON,
	SG_ENC_BYTEA,
	SG_ENC_OUTPUT,				/* a string from an output function no setting affects */
	SG_ENC_GENERIC				/* to_jsonb, in the pinned context */
} SgEncKind;

typedef struct SgColEnc
{
	AttrNumber	attnum;			/* in the relation encoded */
	char	   *name;			/* the key in the JSON object */
	Oid			typid;			/* base type */
	SgEncKind	kind;
	FmgrInfo	fn;				/* SG_ENC_OUTPUT: output; SG_ENC_GENERIC: to_jsonb */
} SgColEnc;

struct SgCaptureRel
{
	SgCaptureRelKey key;		/* hash key */
	bool		valid;
	MemoryContext cxt;			/* everything below */
	SgCaptureDef def;
	Oid			relid;			/* the relation whose tuples we encode */
	Oid			table_owner;	/* owner of the captured table */
	char	   *table_name;		/* the captured table, schema-qualified */
	int			nkeys;
	SgColEnc   *keys;			/* the key columns, in key_columns order */
	int			ncols;
	SgColEnc   *cols;			/* the row's columns */
	bool		needs_context;	/* some column is SG_ENC_GENERIC */
	int			ncmp;			/* columns an UPDATE must change to emit */
	AttrNumber *cmp_src;
	Oid			probe_index;	/* unique index on the key, in relid */
};

/* what one event's payload says (CapturePayload) */
typedef struct SgPayload
{
	const char *op;
	JsonbValue *key;			/* the key columns' values */
	JsonbValue *row;			/* the row's columns' values, or NULL */
	List	   *changed;		/* column names */
	bool		has_changed;	/* "changed" present */
	JsonbValue *old_key;		/* or NULL */
	JsonbValue *new_key;		/* or NULL */
	bool		has_xid;
	uint64		xid;
} SgPayload;

/* capture_cache.c */
extern SgCaptureRel *CaptureRelCached(int32 capture_id, Oid relid);

/* capture_encode.c */
extern JsonbValue *CaptureEncode(SgColEnc *cols, int n, TupleDesc rdesc, HeapTuple tuple);
extern char *CaptureKeyFromValues(SgCaptureRel *cr, JsonbValue *keys);
extern Jsonb *CapturePayload(SgCaptureRel *cr, const SgPayload *p);

/* what one chunk of a backfill did (CaptureBackfillChunk) */
typedef enum SgChunkResult
{
	SG_CHUNK_MORE,				/* a chunk committed; more to do */
	SG_CHUNK_DONE,				/* the backfill is over */
	SG_CHUNK_GONE				/* the capture or its table is gone */
} SgChunkResult;

/* the key columns, in the unique index's order, as SQL pieces */
typedef struct SgKeySql
{
	int			n;
	char	  **col;			/* the column expression */
	char	  **gt;				/* "after" in index order */
	char	  **ge;
	char	  **lt;				/* "before" in index order */
	char	  **le;
	char	  **eq;
	Oid		   *type;			/* parameter types */
	AttrNumber *attnum;
} SgKeySql;

/* capture.c */
extern Datum CaptureAttnumArray(const AttrNumber *a, int n);
extern void CaptureRemove(int32 id, Oid relid);

/* capture_backfill_key.c */
extern SgKeySql *CaptureBackfillKeySql(Relation rel, Oid indexoid);
extern void CaptureBackfillKeyPredicate(StringInfo sql, SgKeySql *k, int first, bool after);
extern void CaptureBackfillKeyOrder(StringInfo sql, SgKeySql *k, bool backward);

/* capture_chunk.c */
extern SgChunkResult CaptureBackfillChunk(int32 capture_id, int chunk, int *covered);

#endif							/* SG_CAPTURE_INT_H */
