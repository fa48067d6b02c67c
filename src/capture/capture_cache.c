/*-------------------------------------------------------------------------
 *
 * capture_cache.c
 *		What a backend knows about a capture: the definition read from
 *		streamguard.capture, and per (capture, relation) the encoder of its
 *		rows (SgCaptureRel, capture_int.h), kept until the relation changes.
 *
 * CACHE.  A backend keeps, per (capture, relation), the definition and the
 * descriptors it encodes with, until the relation's relcache entry (or the
 * captured table's) is invalidated; every change to a capture invalidates
 * the captured table (CaptureInvalidate).
 *
 *
 * Building an entry chooses how each column is encoded (capture_encode.c
 * does the encoding) and finds the unique index on the key that the
 * trigger probes for a key deleted and inserted again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/nbtree.h"
#include "catalog/partition.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_coerce.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "capture/capture.h"
#include "capture/capture_int.h"
#include "catalog/sg_catalog.h"
#include "core/util.h"


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

static HTAB *sg_capture_cache = NULL;

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
SgCaptureRel *
CaptureRelCached(int32 capture_id, Oid relid)
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
