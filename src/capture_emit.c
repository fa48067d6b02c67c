/*-------------------------------------------------------------------------
 *
 * capture_emit.c
 *		Change capture's hot path: the trigger that turns each change of a
 *		captured table into an event, appended in the writer's own
 *		transaction, and the encoder that the backfill worker shares.
 *
 * THE TRIGGER.  capture_table installs an AFTER INSERT OR UPDATE OR DELETE
 * ... FOR EACH ROW trigger, ENABLE ALWAYS, named streamguard_capture_<id>
 * with the capture's id as its argument.  Row level rather than statement
 * level with transition tables, for three reasons (docs/capture.md and
 * docs/benchmarks.md give the measurements):
 *	- order: an AFTER ROW trigger of the user's that changes the same row
 *	  again runs a nested statement whose events fire first.  At row level
 *	  we still have the row version (its header) when our event fires and
 *	  can see that it was superseded (below); a transition table holds
 *	  copies without headers;
 *	- partitions: row triggers on a partitioned table are cloned to every
 *	  partition, present and future, and fire for rows written through the
 *	  partition directly; statement triggers are not;
 *	- cost: a single-row statement pays the same either way.
 *
 * WHAT AN EVENT IS.  key = the key columns' values (the JSON value of a
 * one-column key as text, a JSON array for several), so one key's events
 * share a partition (the partition rule of append); payload = {"op",
 * "table", "key", "row", "changed", "old_key"/"new_key", "xid"}; an UPDATE
 * that changes the key is a delete of the old key and an insert of the
 * new one, each in its key's partition, so per-key order holds for both;
 * an UPDATE that changes no captured column emits nothing.  The dedup key
 * is unique per change: "<capture>:<xid>:<n>" for the writer's n-th
 * change, "<capture>:b<xmin>:<key hash>" for a backfilled row.
 *
 * WHO RUNS WHAT.  Nothing here resolves a name through the writer's
 * search_path or depends on the writer's settings:
 *	- the common built-in types are encoded here (sg_encode_value), in the
 *	  form to_jsonb gives them with the settings below, which none of
 *	  their values depends on here (a timestamptz in UTC, a float in its
 *	  shortest exact form, ...);
 *	- any other type goes through to_jsonb, which may call a cast to json
 *	  of the type owner's: that runs as the table's owner in a
 *	  security-restricted operation (as an index expression does), inside
 *	  a GUC nest level with search_path, TimeZone, DateStyle,
 *	  IntervalStyle, extra_float_digits, bytea_output and lc_monetary
 *	  pinned, so the same row gives the same bytes in every session;
 *	- catalog reads and claims run as the data owner, pinned or with
 *	  pg_catalog operators; events are stored by direct heap insert
 *	  (store.c).
 * The writer needs no privilege on the stream: the capture's owner had
 * append when it captured the table and must still have it (checked at
 * every change, from the stream's cached grants).
 *
 * OUT-OF-ORDER CHANGES.  Events fire in the order PostgreSQL fires AFTER
 * ROW triggers: a statement's events fire after it, and a statement run by
 * another AFTER trigger fires its own events first.  So when our event for
 * a change made by command c fires after an event of a later command was
 * emitted in this transaction, the row may have been changed again since,
 * and that later change emitted already.  Then (and only then) we look: a
 * new row version deleted or updated by our own transaction, or a deleted
 * key that exists again, is superseded and its event is skipped; the
 * later event carries the row's state.
 *
 * CLAIMS.  While a backfill is pending or running, every change that
 * writes a row version records (capture, key hash, xid of the version) in
 * streamguard.capture_claim; the backfill skips a row whose version is
 * claimed (capture_backfill.c has the argument).  An UPDATE that changed
 * no captured column sent nothing: its claim points at the version it
 * replaced, and the backfill follows it.
 *
 * CACHE.  A backend keeps, per (capture, relation), the definition and the
 * descriptors it encodes with, until the relation's relcache entry (or the
 * captured table's) is invalidated; every change to a capture invalidates
 * the captured table (CaptureInvalidate).
 *
 * WHY ONE FILE (about 1,500 lines; to be split next).  The trigger, the
 * relation cache it reads and the encoder it calls are one hot path whose
 * invariants (same bytes in every session, no name resolved through the
 * writer's settings, a stale cache entry never used) are checked here side
 * by side.  The cache and the encoder can move to a file of their own
 * behind capture.h; that cut is planned, not done.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/partition.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/shortest_dec.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_coerce.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/xid8.h"

#include "capture.h"

PG_FUNCTION_INFO_V1(sg_capture_trigger);

const SgWordList SgCaptureOpWords = {
	"capture operation", "operations", {"insert", "update", "delete", NULL}
};

const SgWordList SgBackfillStateWords = {
	"backfill state", "backfill states", {"none", "pending", "running", "done", NULL}
};

/*
 * Settings that change how a value prints, pinned while encoding: the
 * key (and so the partition) of a row must not depend on the session
 * that wrote it.
 */
static const char *const sg_encode_settings[][2] = {
	{"search_path", "pg_catalog, pg_temp"},
	{"TimeZone", "UTC"},
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "1"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
};

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

static HTAB *sg_capture_cache = NULL;

/* the writer's changes in its top-level transaction */
static FullTransactionId sg_emit_fxid;
static uint64 sg_emit_count = 0;	/* changes emitted: the dedup key's n */
static CommandId sg_emit_max_cid = InvalidCommandId;	/* latest command emitted */

/* ------------------------------------------------------------ catalog */

/* a schema renamed: the table names we keep may be stale */
static void
sg_namespace_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS seq;
	SgCaptureRel *e;

	if (sg_capture_cache == NULL)
		return;
	hash_seq_init(&seq, sg_capture_cache);
	while ((e = hash_seq_search(&seq)) != NULL)
		e->valid = false;
}

static void
sg_relcache_callback(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS seq;
	SgCaptureRel *e;

	if (sg_capture_cache == NULL)
		return;
	hash_seq_init(&seq, sg_capture_cache);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (!OidIsValid(relid) || e->key.relid == relid || e->def.relid == relid)
			e->valid = false;
}

/*
 * A change to a capture reaches every backend at its next use of the
 * table: the relcache entry of the captured table is invalidated at
 * commit, which drops our cache entries of the table and its partitions.
 */
void
CaptureInvalidate(Oid relid)
{
	CacheInvalidateRelcacheByRelid(relid);
}

static AttrNumber *
sg_int2_array(Datum d, int *n)
{
	ArrayType  *arr = DatumGetArrayTypeP(d);
	Datum	   *elems;
	bool	   *nulls;
	AttrNumber *out;
	int			i;

	deconstruct_array(arr, INT2OID, 2, true, TYPALIGN_SHORT, &elems, &nulls, n);
	out = palloc(sizeof(AttrNumber) * Max(*n, 1));
	for (i = 0; i < *n; i++)
		out[i] = DatumGetInt16(elems[i]);
	return out;
}

/*
 * A capture's row, read with a fresh snapshot as the data owner, allocated
 * in the current memory context.  SPI connected.  NULL if it does not
 * exist and missing_ok.
 */
SgCaptureDef *
CaptureDefLoad(int32 capture_id, bool missing_ok)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(capture_id)};
	MemoryContext caller = CurrentMemoryContext;
	SgUserSave	save;
	Snapshot	snap;
	SgCaptureDef *def;
	HeapTuple	t;
	TupleDesc	d;
	bool		isnull;
	Datum		v;
	int			ret;

	SgBecomeDataOwner(&save, true);
	snap = SgFreshSnapshot();
	ret = SPI_execute_snapshot(SgPlanCached(NULL,
											"SELECT c.relid::pg_catalog.oid, c.stream_id, s.name, c.owner, "
											"c.key_attnums, c.column_attnums, "
											"c.operations::pg_catalog.text[], c.backfill_state::pg_catalog.text "
											"FROM streamguard.capture c JOIN streamguard.stream s "
											"ON s.id OPERATOR(pg_catalog.=) c.stream_id "
											"WHERE c.id OPERATOR(pg_catalog.=) $1",
											1, types),
							   values, NULL, snap, InvalidSnapshot, true, false, 1);
	UnregisterSnapshot(snap);
	SgRestoreUser(&save);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "capture lookup failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
	{
		if (missing_ok)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("capture %d does not exist", capture_id)));
	}
	t = SPI_tuptable->vals[0];
	d = SPI_tuptable->tupdesc;

	MemoryContextSwitchTo(caller);
	def = palloc0(sizeof(SgCaptureDef));
	def->id = capture_id;
	def->relid = DatumGetObjectId(SPI_getbinval(t, d, 1, &isnull));
	def->stream_id = DatumGetInt32(SPI_getbinval(t, d, 2, &isnull));
	strlcpy(def->stream, TextDatumGetCString(SPI_getbinval(t, d, 3, &isnull)), NAMEDATALEN);
	def->owner = DatumGetObjectId(SPI_getbinval(t, d, 4, &isnull));
	def->key_attnums = sg_int2_array(SPI_getbinval(t, d, 5, &isnull), &def->nkeys);
	v = SPI_getbinval(t, d, 6, &isnull);
	if (isnull)
	{
		def->ncols = -1;
		def->col_attnums = NULL;
	}
	else
		def->col_attnums = sg_int2_array(v, &def->ncols);
	{
		ArrayType  *ops = DatumGetArrayTypeP(SPI_getbinval(t, d, 7, &isnull));
		Datum	   *elems;
		int			n,
					i;

		deconstruct_array(ops, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		for (i = 0; i < n; i++)
			def->ops |= SG_CAPTURE_OP_BIT(SgParseWord(&SgCaptureOpWords, TextDatumGetCString(elems[i])));
	}
	def->backfill = (SgBackfillState) SgParseWord(&SgBackfillStateWords,
												  TextDatumGetCString(SPI_getbinval(t, d, 8, &isnull)));
	return def;
}

/*
 * The unique index whose key columns are exactly `key_attnums` (in any
 * order): valid, immediate, without predicate or expression; the primary
 * key first.  *nullable tells whether a key column may be NULL.
 * InvalidOid if there is none.
 */
Oid
CaptureFindKeyIndex(Relation rel, int nkeys, const AttrNumber *key_attnums, bool *nullable)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;
	int			i;

	*nullable = false;
	for (i = 0; i < nkeys; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), key_attnums[i] - 1);

		if (!att->attnotnull)
			*nullable = true;
	}
	foreach(lc, indexes)
	{
		Oid			indexoid = lfirst_oid(lc);
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(indexoid));
		Form_pg_index idx;
		bool		match;
		int			k;

		if (!HeapTupleIsValid(tup))
			continue;
		idx = (Form_pg_index) GETSTRUCT(tup);
		match = idx->indisunique && idx->indimmediate && idx->indisvalid &&
			idx->indnkeyatts == nkeys &&
			heap_attisnull(tup, Anum_pg_index_indpred, NULL) &&
			heap_attisnull(tup, Anum_pg_index_indexprs, NULL);
		for (k = 0; match && k < nkeys; k++)
		{
			bool		in = false;

			for (i = 0; i < nkeys; i++)
				if (idx->indkey.values[k] == key_attnums[i])
					in = true;
			match = in;
		}
		if (match && (!OidIsValid(found) || idx->indisprimary))
			found = indexoid;
		ReleaseSysCache(tup);
	}
	list_free(indexes);
	return found;
}

/* types whose output function depends on no setting: a JSON string */
static bool
sg_plain_output(Oid typid)
{
	switch (typid)
	{
		case UUIDOID:
		case INETOID:
		case CIDROID:
		case MACADDROID:
		case MACADDR8OID:
		case OIDOID:
		case CHAROID:
		case BITOID:
		case VARBITOID:
		case XIDOID:
		case XID8OID:
		case TIDOID:
			return true;
		default:
			return get_typtype(typid) == TYPTYPE_ENUM;
	}
}

/*
 * Whether to_jsonb would call a cast to json for this type: it looks for
 * one on types that are not built in (an enum, say), and so do we.
 */
static bool
sg_json_cast(Oid typid)
{
	Oid			castfunc = InvalidOid;

	if (typid < FirstNormalObjectId)
		return false;
	return find_coercion_pathway(JSONOID, typid, COERCION_EXPLICIT, &castfunc) == COERCION_PATH_FUNC &&
		OidIsValid(castfunc);
}

static void
sg_init_column(SgCaptureRel *cr, SgColEnc *c, Relation rel, AttrNumber attnum)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);

	c->attnum = attnum;
	c->name = pstrdup(NameStr(att->attname));
	/* to_jsonb treats a domain as its base type */
	c->typid = getBaseType(att->atttypid);
	switch (c->typid)
	{
		case BOOLOID:
			c->kind = SG_ENC_BOOL;
			break;
		case INT2OID:
		case INT4OID:
		case INT8OID:
			c->kind = SG_ENC_INT;
			break;
		case NUMERICOID:
			c->kind = SG_ENC_NUMERIC;
			break;
		case FLOAT4OID:
			c->kind = SG_ENC_FLOAT4;
			break;
		case FLOAT8OID:
			c->kind = SG_ENC_FLOAT8;
			break;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			c->kind = SG_ENC_TEXT;
			break;
		case NAMEOID:
			c->kind = SG_ENC_NAME;
			break;
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			c->kind = SG_ENC_DATETIME;
			break;
		case JSONBOID:
			c->kind = SG_ENC_JSONB;
			break;
		case JSONOID:
			c->kind = SG_ENC_JSON;
			break;
		case BYTEAOID:
			c->kind = SG_ENC_BYTEA;
			break;
		default:
			if (sg_plain_output(c->typid) && !sg_json_cast(c->typid))
			{
				Oid			out;
				bool		varlena;

				c->kind = SG_ENC_OUTPUT;
				getTypeOutputInfo(c->typid, &out, &varlena);
				fmgr_info_cxt(out, &c->fn, cr->cxt);
			}
			else
			{
				/* to_jsonb reads its argument's type from the call's expression */
				c->kind = SG_ENC_GENERIC;
				cr->needs_context = true;
				fmgr_info_cxt(F_TO_JSONB, &c->fn, cr->cxt);
				fmgr_info_set_expr((Node *) makeFuncExpr(F_TO_JSONB, JSONBOID,
														 list_make1(makeNullConst(att->atttypid, -1, InvalidOid)),
														 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL),
								   &c->fn);
			}
			break;
	}
}

/* the number in `rel` of column `attnum` of the captured table, by name */
static AttrNumber
sg_map_attnum(const SgCaptureDef *def, Relation rel, AttrNumber attnum)
{
	char	   *name;
	AttrNumber	mapped;

	if (RelationGetRelid(rel) == def->relid)
		return attnum;
	name = get_attname(def->relid, attnum, false);
	mapped = get_attnum(RelationGetRelid(rel), name);
	if (mapped == InvalidAttrNumber)
		elog(ERROR, "partition \"%s\" has no column \"%s\"", RelationGetRelationName(rel), name);
	return mapped;
}

static void
sg_build_rel(SgCaptureRel *cr, int32 capture_id, Relation rel)
{
	MemoryContext old = MemoryContextSwitchTo(cr->cxt);
	SgCaptureDef *def = CaptureDefLoad(capture_id, false);
	Oid			relid = RelationGetRelid(rel);
	TupleDesc	rdesc = RelationGetDescr(rel);
	bool		nullable;
	int			i;

	/* the trigger is on the captured table or on one of its partitions */
	if (relid != def->relid && !list_member_oid(get_partition_ancestors(relid), def->relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("capture %d is not a capture of table \"%s\"", capture_id,
						RelationGetRelationName(rel)),
				 errhint("Drop the trigger that calls streamguard._capture_trigger() on it.")));

	cr->def = *def;
	cr->relid = relid;
	/* set below if a column needs it; the entry may be a reused one */
	cr->needs_context = false;
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(def->relid));

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for relation %u", def->relid);
		cr->table_owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
		cr->table_name = quote_qualified_identifier(get_namespace_name(((Form_pg_class) GETSTRUCT(tup))->relnamespace),
													NameStr(((Form_pg_class) GETSTRUCT(tup))->relname));
		ReleaseSysCache(tup);
	}

	cr->nkeys = def->nkeys;
	cr->keys = palloc0(sizeof(SgColEnc) * def->nkeys);
	for (i = 0; i < def->nkeys; i++)
		sg_init_column(cr, &cr->keys[i], rel, sg_map_attnum(def, rel, def->key_attnums[i]));

	if (def->ncols >= 0)
	{
		cr->ncols = def->ncols;
		cr->cols = palloc0(sizeof(SgColEnc) * Max(def->ncols, 1));
		for (i = 0; i < def->ncols; i++)
			sg_init_column(cr, &cr->cols[i], rel, sg_map_attnum(def, rel, def->col_attnums[i]));
		/* an UPDATE emits when it changes a captured or a key column */
		cr->cmp_src = palloc(sizeof(AttrNumber) * (def->ncols + def->nkeys));
		cr->ncmp = 0;
		for (i = 0; i < def->ncols; i++)
			cr->cmp_src[cr->ncmp++] = cr->cols[i].attnum;
		for (i = 0; i < def->nkeys; i++)
			cr->cmp_src[cr->ncmp++] = cr->keys[i].attnum;
	}
	else
	{
		cr->cols = palloc0(sizeof(SgColEnc) * Max(rdesc->natts, 1));
		cr->ncols = 0;
		for (i = 0; i < rdesc->natts; i++)
			if (!TupleDescAttr(rdesc, i)->attisdropped)
				sg_init_column(cr, &cr->cols[cr->ncols++], rel, (AttrNumber) (i + 1));
		cr->cmp_src = palloc(sizeof(AttrNumber) * Max(cr->ncols, 1));
		cr->ncmp = cr->ncols;
		for (i = 0; i < cr->ncols; i++)
			cr->cmp_src[i] = cr->cols[i].attnum;
	}
	{
		AttrNumber *key_src = palloc(sizeof(AttrNumber) * def->nkeys);

		for (i = 0; i < def->nkeys; i++)
			key_src[i] = cr->keys[i].attnum;
		cr->probe_index = CaptureFindKeyIndex(rel, def->nkeys, key_src, &nullable);
	}
	MemoryContextSwitchTo(old);
}

/* the cached encoder, or NULL if it must be built */
static SgCaptureRel *
sg_rel_cached(int32 capture_id, Oid relid)
{
	SgCaptureRelKey key;
	SgCaptureRel *cr;

	if (sg_capture_cache == NULL)
		return NULL;
	memset(&key, 0, sizeof(key));
	key.capture_id = capture_id;
	key.relid = relid;
	cr = hash_search(sg_capture_cache, &key, HASH_FIND, NULL);
	return (cr != NULL && cr->valid) ? cr : NULL;
}

/* connect to SPI once, when a step needs it */
static void
sg_need_spi(bool *connected)
{
	if (*connected)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	*connected = true;
}

/*
 * The encoder of capture `capture_id` for rel (the captured table or one
 * of its partitions), from the backend's cache or built.  SPI connected.
 */
SgCaptureRel *
CaptureRelGet(int32 capture_id, Relation rel)
{
	SgCaptureRelKey key;
	SgCaptureRel *cr;
	bool		found;

	if (sg_capture_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(SgCaptureRelKey);
		ctl.entrysize = sizeof(SgCaptureRel);
		ctl.hcxt = CacheMemoryContext;
		sg_capture_cache = hash_create("streamguard captures", 16, &ctl,
									   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(sg_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, sg_namespace_callback, (Datum) 0);
	}
	memset(&key, 0, sizeof(key));
	key.capture_id = capture_id;
	key.relid = RelationGetRelid(rel);
	cr = hash_search(sg_capture_cache, &key, HASH_ENTER, &found);
	if (found && cr->valid)
		return cr;

	/*
	 * A stale entry's memory lives until the transaction ends: a trigger
	 * call further up the stack may still be reading it (it works on a
	 * copy of the entry, see sg_capture_trigger).
	 */
	if (found)
		MemoryContextSetParent(cr->cxt, TopTransactionContext);
	cr->valid = false;
	cr->cxt = AllocSetContextCreate(CacheMemoryContext, "streamguard capture",
									ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		sg_build_rel(cr, capture_id, rel);
	}
	PG_CATCH();
	{
		MemoryContextDelete(cr->cxt);
		hash_search(sg_capture_cache, &key, HASH_REMOVE, NULL);
		PG_RE_THROW();
	}
	PG_END_TRY();
	cr->valid = true;
	return cr;
}


/* ------------------------------------------------------------ encoding */

/*
 * Become the captured table's owner, security-restricted, with the
 * settings that shape a value's text pinned.  An ERROR unwinds both (the
 * (sub)transaction's abort restores user and settings).
 */
void
CaptureEnterTableOwner(Oid owner, SgUserSave *save)
{
	int			i;

	GetUserIdAndSecContext(&save->userid, &save->sec_context);
	SetUserIdAndSecContext(owner, save->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save->guc_nest = NewGUCNestLevel();
	for (i = 0; i < lengthof(sg_encode_settings); i++)
		(void) set_config_option(sg_encode_settings[i][0], sg_encode_settings[i][1],
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

void
CaptureLeaveTableOwner(SgUserSave *save)
{
	AtEOXact_GUC(false, save->guc_nest);
	SetUserIdAndSecContext(save->userid, save->sec_context);
}

Oid
CaptureRelTableOwner(SgCaptureRel *cr)
{
	return cr->table_owner;
}

/* one column's value as a JSON value */
static void
sg_encode_value(SgColEnc *c, Datum v, bool isnull, JsonbValue *out)
{
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];
	int			len;

	if (isnull)
	{
		out->type = jbvNull;
		return;
	}
	out->type = jbvString;
	switch (c->kind)
	{
		case SG_ENC_BOOL:
			out->type = jbvBool;
			out->val.boolean = DatumGetBool(v);
			return;
		case SG_ENC_INT:
			out->type = jbvNumeric;
			out->val.numeric = int64_to_numeric(c->typid == INT2OID ? (int64) DatumGetInt16(v) :
												c->typid == INT4OID ? (int64) DatumGetInt32(v) :
												DatumGetInt64(v));
			return;
		case SG_ENC_NUMERIC:
			{
				Numeric		n = DatumGetNumeric(v);

				/* JSON has no NaN or infinity: to_jsonb makes them strings */
				if (numeric_is_nan(n) || numeric_is_inf(n))
					out->val.string.val = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(n)));
				else
				{
					out->type = jbvNumeric;
					out->val.numeric = n;
					return;
				}
				break;
			}
		case SG_ENC_FLOAT4:
		case SG_ENC_FLOAT8:
			{
				double		d = c->kind == SG_ENC_FLOAT4 ? (double) DatumGetFloat4(v) : DatumGetFloat8(v);

				if (isnan(d))
					out->val.string.val = "NaN";
				else if (isinf(d))
					out->val.string.val = d > 0 ? "Infinity" : "-Infinity";
				else
				{
					/* the shortest text that reads back exactly (extra_float_digits 1) */
					if (c->kind == SG_ENC_FLOAT4)
						float_to_shortest_decimal_buf(DatumGetFloat4(v), buf);
					else
						double_to_shortest_decimal_buf(d, buf);
					out->type = jbvNumeric;
					out->val.numeric = DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(buf),
																		   ObjectIdGetDatum(InvalidOid),
																		   Int32GetDatum(-1)));
					return;
				}
				break;
			}
		case SG_ENC_TEXT:
			{
				text	   *t = DatumGetTextPP(v);

				out->val.string.val = VARDATA_ANY(t);
				out->val.string.len = VARSIZE_ANY_EXHDR(t);
				return;
			}
		case SG_ENC_NAME:
			out->val.string.val = NameStr(*DatumGetName(v));
			break;
		case SG_ENC_DATETIME:
			{
				static const int utc = 0;

				out->val.string.val = JsonEncodeDateTime(NULL, v, c->typid,
														 c->typid == TIMESTAMPTZOID ? &utc : NULL);
				break;
			}
		case SG_ENC_JSON:
			v = DirectFunctionCall1(jsonb_in, CStringGetDatum(TextDatumGetCString(v)));
			/* FALLTHROUGH */
		case SG_ENC_JSONB:
		case SG_ENC_GENERIC:
			{
				Jsonb	   *j = c->kind == SG_ENC_GENERIC ? DatumGetJsonbP(FunctionCall1(&c->fn, v)) :
					DatumGetJsonbP(v);

				if (JB_ROOT_IS_SCALAR(j))
					JsonbExtractScalar(&j->root, out);
				else
				{
					out->type = jbvBinary;
					out->val.binary.data = &j->root;
					out->val.binary.len = VARSIZE(j) - VARHDRSZ;
				}
				return;
			}
		case SG_ENC_BYTEA:
			{
				bytea	   *b = DatumGetByteaPP(v);
				char	   *s;

				/* what byteaout gives with bytea_output = hex */
				len = VARSIZE_ANY_EXHDR(b);
				s = palloc(len * 2 + 3);
				s[0] = '\\';
				s[1] = 'x';
				hex_encode(VARDATA_ANY(b), len, s + 2);
				s[len * 2 + 2] = '\0';
				out->val.string.val = s;
				break;
			}
		case SG_ENC_OUTPUT:
			out->val.string.val = OutputFunctionCall(&c->fn, v);
			break;
	}
	out->val.string.len = strlen(out->val.string.val);
}

/* the columns `cols` of a tuple of the relation, as JSON values */
static JsonbValue *
sg_encode(SgColEnc *cols, int n, TupleDesc rdesc, HeapTuple tuple)
{
	JsonbValue *vals = palloc(sizeof(JsonbValue) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		v = heap_getattr(tuple, cols[i].attnum, rdesc, &isnull);

		sg_encode_value(&cols[i], v, isnull, &vals[i]);
	}
	return vals;
}

/* the text of one JSON value: a string's contents, other values as JSON */
static char *
sg_json_value_text(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvNull:
			return NULL;
		case jbvBinary:
			{
				StringInfoData buf;

				initStringInfo(&buf);
				return JsonbToCString(&buf, v->val.binary.data, v->val.binary.len);
			}
		default:
			elog(ERROR, "unexpected JSON value type %d", (int) v->type);
	}
	return NULL;				/* keep compiler quiet */
}

/*
 * The event key of a row: the text of the value for a one-column key, a
 * JSON array of the values (in key_columns order) for several.  NULL for
 * a one-column key that is NULL.
 */
static char *
sg_key_text(SgCaptureRel *cr, JsonbValue *keys)
{
	JsonbParseState *st = NULL;
	JsonbValue *arr;
	StringInfoData buf;
	int			i;

	if (cr->nkeys == 1)
		return sg_json_value_text(&keys[0]);
	pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < cr->nkeys; i++)
		pushJsonbValue(&st, WJB_ELEM, &keys[i]);
	arr = pushJsonbValue(&st, WJB_END_ARRAY, NULL);
	initStringInfo(&buf);
	return JsonbToCString(&buf, &JsonbValueToJsonb(arr)->root, 0);
}

uint64
CaptureKeyHash(const char *key)
{
	if (key == NULL)
		return 0;
	return hash_bytes_extended((const unsigned char *) key, (int) strlen(key), 0);
}

/*
 * The event key of a tuple of the relation (in the table owner's context:
 * a key column's type may be encoded by its owner's cast to json).
 */
char *
CaptureKeyText(SgCaptureRel *cr, TupleDesc rdesc, HeapTuple tuple)
{
	return sg_key_text(cr, sg_encode(cr->keys, cr->nkeys, rdesc, tuple));
}


/* payload building */
static void
sg_push_key(JsonbParseState **st, const char *k)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) k;
	v.val.string.len = strlen(k);
	pushJsonbValue(st, WJB_KEY, &v);
}

static void
sg_push_string(JsonbParseState **st, const char *s, JsonbIteratorToken tok)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) s;
	v.val.string.len = strlen(s);
	pushJsonbValue(st, tok, &v);
}

/* an object of the columns' values under key k */
static void
sg_push_object(JsonbParseState **st, const char *k, SgColEnc *cols, JsonbValue *vals, int n)
{
	int			i;

	sg_push_key(st, k);
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	for (i = 0; i < n; i++)
	{
		sg_push_key(st, cols[i].name);
		pushJsonbValue(st, WJB_VALUE, &vals[i]);
	}
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

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

static Jsonb *
sg_payload(SgCaptureRel *cr, const SgPayload *p)
{
	JsonbParseState *st = NULL;
	JsonbValue *res;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	sg_push_key(&st, "op");
	sg_push_string(&st, p->op, WJB_VALUE);
	sg_push_key(&st, "table");
	sg_push_string(&st, cr->table_name, WJB_VALUE);
	sg_push_object(&st, "key", cr->keys, p->key, cr->nkeys);
	if (p->row)
		sg_push_object(&st, "row", cr->cols, p->row, cr->ncols);
	if (p->has_changed)
	{
		ListCell   *lc;

		sg_push_key(&st, "changed");
		pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
		foreach(lc, p->changed)
			sg_push_string(&st, lfirst(lc), WJB_ELEM);
		pushJsonbValue(&st, WJB_END_ARRAY, NULL);
	}
	if (p->old_key)
		sg_push_object(&st, "old_key", cr->keys, p->old_key, cr->nkeys);
	if (p->new_key)
		sg_push_object(&st, "new_key", cr->keys, p->new_key, cr->nkeys);
	if (p->has_xid)
	{
		JsonbValue	v;

		sg_push_key(&st, "xid");
		v.type = jbvNumeric;
		v.val.numeric = int64_to_numeric((int64) p->xid);
		pushJsonbValue(&st, WJB_VALUE, &v);
	}
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/* ------------------------------------------------------------ emitting */

/*
 * The 64-bit form of a recent xid: the epoch of the next xid, or the one
 * before for an xid above it.  Exact for every xid that can still appear
 * unfrozen in a table.
 */
FullTransactionId
CaptureWidenXid(TransactionId xid)
{
	FullTransactionId next = ReadNextFullTransactionId();
	uint32		epoch = EpochFromFullTransactionId(next);

	if (!TransactionIdIsNormal(xid))
		return FullTransactionIdFromEpochAndXid(0, xid);
	if (xid > XidFromFullTransactionId(next) && epoch > 0)
		epoch--;
	return FullTransactionIdFromEpochAndXid(epoch, xid);
}

/*
 * Append events to the capture's stream, on behalf of its owner: the
 * stream must still be the one captured into, and the owner must still
 * exist and may still append.
 */
static void
sg_append_events(SgCaptureRel *cr, SgEventRow *ev, int n, bool *spi)
{
	SgStreamMeta *meta;

	meta = StreamLookupReady(cr->def.stream);
	if (meta == NULL)
	{
		sg_need_spi(spi);
		meta = StreamLookup(cr->def.stream, SG_PRIV_NONE);
	}
	/* a change of the partition count committed while we waited: reload */
	if (!StreamLockAppend(meta))
	{
		sg_need_spi(spi);
		meta = StreamLookup(cr->def.stream, SG_PRIV_NONE);
	}
	if (meta->stream_id != cr->def.stream_id)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the stream of capture %d was dropped", cr->def.id)));
	if (!StreamRoleMayAppend(meta, cr->def.owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("capture of table %s into stream \"%s\" is no longer allowed",
						cr->table_name, meta->name),
				 errdetail("The role that captured the table (OID %u) no longer exists or may no longer append to the stream.",
						   cr->def.owner),
				 errhint("Grant it append on the stream again, or run streamguard.uncapture_table.")));
	StreamCheckNotOwnSource(meta);
	StreamAppendEvents(meta, ev, n);
}

static void
sg_event(SgEventRow *ev, const char *key, Jsonb *payload, char *dedup)
{
	ev->key_null = (key == NULL);
	ev->key = key ? CStringGetTextDatum(key) : (Datum) 0;
	ev->payload = JsonbPGetDatum(payload);
	ev->dedup_null = false;
	ev->dedup_key = CStringGetTextDatum(dedup);
	ev->duplicate = false;
}

/* a row version this transaction has updated or deleted since */
static bool
sg_superseded(HeapTupleHeader tup)
{
	if (tup->t_infomask & HEAP_XMAX_INVALID)
		return false;
	if (HEAP_XMAX_IS_LOCKED_ONLY(tup->t_infomask))
		return false;
	return TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetUpdateXid(tup));
}

/* whether the key of `tuple` exists now, as this transaction sees it */
static bool
sg_key_exists(SgCaptureRel *cr, Relation rel, HeapTuple tuple)
{
	Relation	irel;
	ScanKeyData skey[INDEX_MAX_KEYS];
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		found;
	int			nk,
				i;

	if (!OidIsValid(cr->probe_index))
		return false;
	irel = index_open(cr->probe_index, AccessShareLock);
	nk = IndexRelationGetNumberOfKeyAttributes(irel);
	for (i = 0; i < nk; i++)
	{
		bool		isnull;
		Datum		value = heap_getattr(tuple, irel->rd_index->indkey.values[i],
										 RelationGetDescr(rel), &isnull);
		Oid			eq = get_opfamily_member(irel->rd_opfamily[i], irel->rd_opcintype[i],
											 irel->rd_opcintype[i], BTEqualStrategyNumber);

		if (isnull || !OidIsValid(eq))
		{
			index_close(irel, AccessShareLock);
			return false;
		}
		ScanKeyEntryInitialize(&skey[i], 0, (AttrNumber) (i + 1), BTEqualStrategyNumber,
							   irel->rd_opcintype[i], irel->rd_indcollation[i],
							   get_opcode(eq), value);
	}
	scan = index_beginscan(rel, irel, SnapshotSelf, nk, 0);
	index_rescan(scan, skey, nk, NULL, 0);
	slot = table_slot_create(rel, NULL);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(irel, AccessShareLock);
	return found;
}

/* whether an UPDATE left the key columns' bytes as they were */
static bool
sg_same_key(SgCaptureRel *cr, TupleDesc rdesc, HeapTuple oldtup, HeapTuple newtup)
{
	int			i;

	for (i = 0; i < cr->nkeys; i++)
	{
		AttrNumber	a = cr->keys[i].attnum;
		Form_pg_attribute att = TupleDescAttr(rdesc, a - 1);
		bool		n1,
					n2;
		Datum		v1 = heap_getattr(oldtup, a, rdesc, &n1);
		Datum		v2 = heap_getattr(newtup, a, rdesc, &n2);

		if (n1 != n2 || (!n1 && !datum_image_eq(v1, v2, att->attbyval, att->attlen)))
			return false;
	}
	return true;
}

/* the changed captured columns of an UPDATE, by name */
static List *
sg_changed_columns(SgCaptureRel *cr, TupleDesc rdesc, HeapTuple oldtup, HeapTuple newtup)
{
	List	   *changed = NIL;
	int			i;

	for (i = 0; i < cr->ncmp; i++)
	{
		AttrNumber	a = cr->cmp_src[i];
		Form_pg_attribute att = TupleDescAttr(rdesc, a - 1);
		bool		n1,
					n2;
		Datum		v1 = heap_getattr(oldtup, a, rdesc, &n1);
		Datum		v2 = heap_getattr(newtup, a, rdesc, &n2);
		bool		same;

		if (n1 || n2)
			same = (n1 && n2);
		else
			same = datum_image_eq(v1, v2, att->attbyval, att->attlen);
		if (!same && !list_member(changed, makeString(NameStr(att->attname))))
			changed = lappend(changed, makeString(NameStr(att->attname)));
	}
	return changed;
}

static List *
sg_names(List *strings)
{
	List	   *names = NIL;
	ListCell   *lc;

	foreach(lc, strings)
		names = lappend(names, strVal(lfirst(lc)));
	return names;
}

/*
 * Record, while a backfill is pending or running, that this transaction
 * wrote the version of `key` whose xmin is `xmin` (the raw one, as the
 * backfill reads it: COPY FREEZE marks a new row frozen at once): a version an event
 * carried (prev Invalid: the backfill skips it), or one an update changing
 * no captured column wrote (prev: the xmin of the version it replaced, the
 * one whose content it has).  An event's claim wins over the other kind.
 */
static void
sg_claim(SgCaptureRel *cr, const char *key, TransactionId xmin, TransactionId prev, bool *spi)
{
	Oid			types[4] = {INT4OID, INT8OID, XID8OID, XID8OID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	SgUserSave	save;

	values[0] = Int32GetDatum(cr->def.id);
	values[1] = Int64GetDatum((int64) CaptureKeyHash(key));
	values[2] = FullTransactionIdGetDatum(CaptureWidenXid(xmin));
	if (TransactionIdIsValid(prev))
		values[3] = FullTransactionIdGetDatum(CaptureWidenXid(prev));
	else
	{
		values[3] = (Datum) 0;
		nulls[3] = 'n';
	}
	sg_need_spi(spi);
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL, TransactionIdIsValid(prev) ?
									  "INSERT INTO streamguard.capture_claim (capture_id, key_hash, xid, prev_xid) "
									  "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING" :
									  "INSERT INTO streamguard.capture_claim AS c (capture_id, key_hash, xid, prev_xid) "
									  "VALUES ($1, $2, $3, $4) ON CONFLICT (capture_id, key_hash, xid) "
									  "DO UPDATE SET prev_xid = NULL WHERE c.prev_xid IS NOT NULL",
									  4, types),
						 values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "capture claim failed");
	SgRestoreUser(&save);
}

static char *
sg_live_dedup_key(SgCaptureRel *cr, FullTransactionId fxid)
{
	return psprintf("%d:" UINT64_FORMAT ":" UINT64_FORMAT, cr->def.id,
					U64FromFullTransactionId(fxid), ++sg_emit_count);
}

/*
 * streamguard._capture_trigger(capture_id): AFTER INSERT OR UPDATE OR
 * DELETE FOR EACH ROW on a captured table (and its partitions), and
 * BEFORE TRUNCATE FOR EACH STATEMENT, which refuses.
 */
Datum
sg_capture_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Trigger    *trig;
	Relation	rel;
	TupleDesc	rdesc;
	int32		capture_id;
	char		expect[NAMEDATALEN];
	SgCaptureRel *cr;
	SgCaptureRel crcopy;
	SgUserSave	owner;
	FullTransactionId fxid;
	bool		careful;
	bool		backfilling;
	SgEventRow	ev[2];
	int			nev = 0;
	HeapTuple	oldtup = NULL,
				newtup = NULL;
	CommandId	cid;
	SgPayload	p;
	bool		spi = false;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamguard._capture_trigger() can only be called as a trigger")));
	trig = td->tg_trigger;
	rel = td->tg_relation;
	if (trig->tgnargs != 1)
		elog(ERROR, "streamguard._capture_trigger() takes the capture's id as its argument");
	capture_id = pg_strtoint32(trig->tgargs[0]);

	/* only the triggers capture_table made: the name says whose they are */
	snprintf(expect, sizeof(expect),
			 TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) ? SG_CAPTURE_TRUNCATE_FMT : SG_CAPTURE_TRIGGER_FMT,
			 capture_id);
	if (strcmp(trig->tgname, expect) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trigger \"%s\" on \"%s\" is not a trigger of streamguard's change capture",
						trig->tgname, RelationGetRelationName(rel)),
				 errhint("Only streamguard.capture_table installs triggers that call streamguard._capture_trigger().")));

	/* without the library preloaded there is no horizon: refuse, lose nothing */
	StreamguardCheckLoaded();

	/* SPI only when a step needs it: building the cache, a stream to load, a claim */
	cr = sg_rel_cached(capture_id, RelationGetRelid(rel));
	if (cr == NULL)
	{
		sg_need_spi(&spi);
		cr = CaptureRelGet(capture_id, rel);
	}
	/* our own copy: a nested call may rebuild the cache entry meanwhile */
	crcopy = *cr;
	cr = &crcopy;

	if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot truncate table %s because it is captured into stream \"%s\"",
						cr->table_name, cr->def.stream),
				 errdetail("A TRUNCATE would remove rows without an event for each."),
				 errhint("DELETE the rows (each delete is captured), or run streamguard.uncapture_table first.")));
	if (!TRIGGER_FIRED_AFTER(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event))
		elog(ERROR, "streamguard._capture_trigger() must fire AFTER ... FOR EACH ROW");

	rdesc = RelationGetDescr(rel);
	fxid = GetTopFullTransactionId();
	if (!FullTransactionIdEquals(fxid, sg_emit_fxid))
	{
		sg_emit_fxid = fxid;
		sg_emit_count = 0;
		sg_emit_max_cid = InvalidCommandId;
	}
	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
	{
		newtup = td->tg_trigtuple;
		cid = HeapTupleHeaderGetCmin(newtup->t_data);
	}
	else if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
	{
		oldtup = td->tg_trigtuple;
		newtup = td->tg_newtuple;
		cid = HeapTupleHeaderGetCmin(newtup->t_data);
	}
	else
	{
		oldtup = td->tg_trigtuple;
		cid = HeapTupleHeaderGetCmax(oldtup->t_data);
	}
	/* a later command emitted already: this row may have changed since */
	careful = (sg_emit_max_cid != InvalidCommandId && sg_emit_max_cid > cid);
	backfilling = (cr->def.backfill == SG_BACKFILL_PENDING ||
				   cr->def.backfill == SG_BACKFILL_RUNNING);

	memset(&p, 0, sizeof(p));
	p.has_xid = true;
	p.xid = U64FromFullTransactionId(fxid);

	if (cr->needs_context)
		CaptureEnterTableOwner(cr->table_owner, &owner);
	if (oldtup == NULL)
	{
		/* INSERT */
		char	   *key;

		p.key = sg_encode(cr->keys, cr->nkeys, rdesc, newtup);
		key = sg_key_text(cr, p.key);
		if (!(careful && sg_superseded(newtup->t_data)))
		{
			p.op = "insert";
			p.row = sg_encode(cr->cols, cr->ncols, rdesc, newtup);
			sg_event(&ev[nev++], key, sg_payload(cr, &p), sg_live_dedup_key(cr, fxid));
			if (backfilling)
				sg_claim(cr, key, HeapTupleHeaderGetRawXmin(newtup->t_data), InvalidTransactionId, &spi);
		}
	}
	else if (newtup == NULL)
	{
		/* DELETE */
		char	   *key;

		p.key = sg_encode(cr->keys, cr->nkeys, rdesc, oldtup);
		key = sg_key_text(cr, p.key);
		if (!(careful && sg_key_exists(cr, rel, oldtup)))
		{
			p.op = "delete";
			sg_event(&ev[nev++], key, sg_payload(cr, &p), sg_live_dedup_key(cr, fxid));
		}
	}
	else
	{
		/* UPDATE */
		JsonbValue *oldkey;
		char	   *okey;
		char	   *nkey;
		List	   *changed = sg_changed_columns(cr, rdesc, oldtup, newtup);
		bool		keychange;

		p.key = sg_encode(cr->keys, cr->nkeys, rdesc, newtup);
		nkey = sg_key_text(cr, p.key);
		if (sg_same_key(cr, rdesc, oldtup, newtup))
		{
			oldkey = p.key;
			okey = nkey;
		}
		else
		{
			oldkey = sg_encode(cr->keys, cr->nkeys, rdesc, oldtup);
			okey = sg_key_text(cr, oldkey);
		}
		keychange = (okey == NULL) != (nkey == NULL) || (okey != NULL && strcmp(okey, nkey) != 0);
		if (keychange)
		{
			/* a delete of the old key and an insert of the new one */
			SgPayload	d;

			memset(&d, 0, sizeof(d));
			d.op = "delete";
			d.key = oldkey;
			d.new_key = p.key;
			d.has_xid = true;
			d.xid = p.xid;
			if (!(careful && sg_key_exists(cr, rel, oldtup)))
				sg_event(&ev[nev++], okey, sg_payload(cr, &d), sg_live_dedup_key(cr, fxid));
			p.op = "insert";
			p.old_key = oldkey;
		}
		else
			p.op = "update";
		if (changed != NIL && !(careful && sg_superseded(newtup->t_data)))
		{
			p.row = sg_encode(cr->cols, cr->ncols, rdesc, newtup);
			p.has_changed = true;
			p.changed = sg_names(changed);
			sg_event(&ev[nev++], nkey, sg_payload(cr, &p), sg_live_dedup_key(cr, fxid));
			if (backfilling)
				sg_claim(cr, nkey, HeapTupleHeaderGetRawXmin(newtup->t_data), InvalidTransactionId, &spi);
		}
		else if (changed == NIL && backfilling)
		{
			/* no event: the new version has the content of the one it replaced */
			sg_claim(cr, nkey, HeapTupleHeaderGetRawXmin(newtup->t_data),
					 HeapTupleHeaderGetRawXmin(oldtup->t_data), &spi);
		}
	}
	if (nev > 0)
	{
		sg_append_events(cr, ev, nev, &spi);
		if (sg_emit_max_cid == InvalidCommandId || cid > sg_emit_max_cid)
			sg_emit_max_cid = cid;
	}
	if (cr->needs_context)
		CaptureLeaveTableOwner(&owner);
	if (spi)
		SPI_finish();
	return PointerGetDatum(NULL);
}

/*
 * Append one backfill event per row (whole rows of the captured table,
 * and the xmin of each), in the table owner's context when the capture
 * needs it.  Returns the number appended.
 */
int
CaptureEmitBackfill(SgCaptureRel *cr, TupleDesc rdesc, HeapTuple *rows,
					const TransactionId *xmins, int n)
{
	SgEventRow *ev;
	int			i;

	if (n == 0)
		return 0;
	ev = palloc(sizeof(SgEventRow) * n);
	for (i = 0; i < n; i++)
	{
		SgPayload	p;
		char	   *key;

		memset(&p, 0, sizeof(p));
		p.key = sg_encode(cr->keys, cr->nkeys, rdesc, rows[i]);
		key = sg_key_text(cr, p.key);
		p.op = "backfill";
		p.row = sg_encode(cr->cols, cr->ncols, rdesc, rows[i]);
		sg_event(&ev[i], key, sg_payload(cr, &p),
				 psprintf("%d:b" UINT64_FORMAT ":%016llx", cr->def.id,
						  U64FromFullTransactionId(CaptureWidenXid(xmins[i])),
						  (unsigned long long) CaptureKeyHash(key)));
	}
	{
		bool		spi = true;		/* the backfill's caller is connected */

		sg_append_events(cr, ev, n, &spi);
	}
	return n;
}
