/*-------------------------------------------------------------------------
 *
 * capture_emit.c
 *		Change capture's hot path: the trigger that turns each change of a
 *		captured table into an event, appended in the writer's own
 *		transaction, and the emission of backfilled rows.  The cache of
 *		capture definitions is capture_cache.c, the encoder
 *		capture_encode.c.
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
 * claimed (capture_chunk.c has the argument).  An UPDATE that changed
 * no captured column sent nothing: its claim points at the version it
 * replaced, and the backfill follows it.
 *
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/nbtree.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/xid8.h"

#include "capture/capture.h"
#include "capture/capture_int.h"
#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "stream/append.h"
#include "stream/store.h"


PG_FUNCTION_INFO_V1(sg_capture_trigger);

/* the writer's changes in its top-level transaction */
static FullTransactionId sg_emit_fxid;
static uint64 sg_emit_count = 0;	/* changes emitted: the dedup key's n */
static CommandId sg_emit_max_cid = InvalidCommandId;	/* latest command emitted */

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
 * The command that inserted a tuple of this transaction.
 * HeapTupleHeaderGetCmin asserts that the tuple's xmin is the current
 * transaction, which a row written by COPY ... FREEZE (xmin frozen at
 * insertion) does not show; such a row has no combo CID either, so its
 * command ID is the raw one.
 */
static CommandId
sg_insert_cid(HeapTupleHeader tup)
{
	if (HeapTupleHeaderXminFrozen(tup))
		return HeapTupleHeaderGetRawCommandId(tup);
	return HeapTupleHeaderGetCmin(tup);
}

/*
 * The capture's id of a call of streamguard._capture_trigger(), which must
 * be a trigger that capture_table made.
 */
static inline int32
sg_trigger_capture_id(FunctionCallInfo fcinfo)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Trigger    *trig;
	int32		capture_id;
	char		expect[NAMEDATALEN];

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamguard._capture_trigger() can only be called as a trigger")));
	trig = td->tg_trigger;
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
						trig->tgname, RelationGetRelationName(td->tg_relation)),
				 errhint("Only streamguard.capture_table installs triggers that call streamguard._capture_trigger().")));
	return capture_id;
}

/*
 * The row versions of the change (the old one of an UPDATE or DELETE, the
 * new one of an INSERT or UPDATE), and the command that made it.
 */
static inline CommandId
sg_trigger_tuples(TriggerData *td, HeapTuple *oldtup, HeapTuple *newtup)
{
	CommandId	cid;

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
	{
		*newtup = td->tg_trigtuple;
		cid = sg_insert_cid((*newtup)->t_data);
	}
	else if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
	{
		*oldtup = td->tg_trigtuple;
		*newtup = td->tg_newtuple;
		cid = HeapTupleHeaderGetCmin((*newtup)->t_data);
	}
	else
	{
		*oldtup = td->tg_trigtuple;
		cid = HeapTupleHeaderGetCmax((*oldtup)->t_data);
	}
	return cid;
}

/*
 * The events of an UPDATE into ev (how many): an update, or a delete of
 * the old key and an insert of the new one; nothing when no captured
 * column changed.  And its claim while a backfill is pending or running.
 * p has the change's xid.
 */
static inline int
sg_update_events(SgCaptureRel *cr, Relation rel, HeapTuple oldtup, HeapTuple newtup,
				 SgPayload *p, bool careful, bool backfilling, FullTransactionId fxid,
				 SgEventRow *ev, bool *spi)
{
	TupleDesc	rdesc = RelationGetDescr(rel);
	int			nev = 0;
	JsonbValue *oldkey;
	char	   *okey;
	char	   *nkey;
	List	   *changed = sg_changed_columns(cr, rdesc, oldtup, newtup);
	bool		keychange;

	p->key = CaptureEncode(cr->keys, cr->nkeys, rdesc, newtup);
	nkey = CaptureKeyFromValues(cr, p->key);
	if (sg_same_key(cr, rdesc, oldtup, newtup))
	{
		oldkey = p->key;
		okey = nkey;
	}
	else
	{
		oldkey = CaptureEncode(cr->keys, cr->nkeys, rdesc, oldtup);
		okey = CaptureKeyFromValues(cr, oldkey);
	}
	keychange = (okey == NULL) != (nkey == NULL) || (okey != NULL && strcmp(okey, nkey) != 0);
	if (keychange)
	{
		/* a delete of the old key and an insert of the new one */
		SgPayload	d;

		memset(&d, 0, sizeof(d));
		d.op = "delete";
		d.key = oldkey;
		d.new_key = p->key;
		d.has_xid = true;
		d.xid = p->xid;
		if (!(careful && sg_key_exists(cr, rel, oldtup)))
			sg_event(&ev[nev++], okey, CapturePayload(cr, &d), sg_live_dedup_key(cr, fxid));
		p->op = "insert";
		p->old_key = oldkey;
	}
	else
		p->op = "update";
	if (changed != NIL && !(careful && sg_superseded(newtup->t_data)))
	{
		p->row = CaptureEncode(cr->cols, cr->ncols, rdesc, newtup);
		p->has_changed = true;
		p->changed = sg_names(changed);
		sg_event(&ev[nev++], nkey, CapturePayload(cr, p), sg_live_dedup_key(cr, fxid));
		if (backfilling)
			sg_claim(cr, nkey, HeapTupleHeaderGetRawXmin(newtup->t_data), InvalidTransactionId, spi);
	}
	else if (changed == NIL && backfilling)
	{
		/* no event: the new version has the content of the one it replaced */
		sg_claim(cr, nkey, HeapTupleHeaderGetRawXmin(newtup->t_data),
				 HeapTupleHeaderGetRawXmin(oldtup->t_data), spi);
	}
	return nev;
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
	Relation	rel;
	TupleDesc	rdesc;
	int32		capture_id;
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

	capture_id = sg_trigger_capture_id(fcinfo);
	rel = td->tg_relation;

	/* without the library preloaded there is no horizon: refuse, lose nothing */
	StreamguardCheckLoaded();

	/* SPI only when a step needs it: building the cache, a stream to load, a claim */
	cr = CaptureRelCached(capture_id, RelationGetRelid(rel));
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
	cid = sg_trigger_tuples(td, &oldtup, &newtup);
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

		p.key = CaptureEncode(cr->keys, cr->nkeys, rdesc, newtup);
		key = CaptureKeyFromValues(cr, p.key);
		if (!(careful && sg_superseded(newtup->t_data)))
		{
			p.op = "insert";
			p.row = CaptureEncode(cr->cols, cr->ncols, rdesc, newtup);
			sg_event(&ev[nev++], key, CapturePayload(cr, &p), sg_live_dedup_key(cr, fxid));
			if (backfilling)
				sg_claim(cr, key, HeapTupleHeaderGetRawXmin(newtup->t_data), InvalidTransactionId, &spi);
		}
	}
	else if (newtup == NULL)
	{
		/* DELETE */
		char	   *key;

		p.key = CaptureEncode(cr->keys, cr->nkeys, rdesc, oldtup);
		key = CaptureKeyFromValues(cr, p.key);
		if (!(careful && sg_key_exists(cr, rel, oldtup)))
		{
			p.op = "delete";
			sg_event(&ev[nev++], key, CapturePayload(cr, &p), sg_live_dedup_key(cr, fxid));
		}
	}
	else
	{
		/* UPDATE */
		nev = sg_update_events(cr, rel, oldtup, newtup, &p, careful, backfilling, fxid,
							   ev, &spi);
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
		p.key = CaptureEncode(cr->keys, cr->nkeys, rdesc, rows[i]);
		key = CaptureKeyFromValues(cr, p.key);
		p.op = "backfill";
		p.row = CaptureEncode(cr->cols, cr->ncols, rdesc, rows[i]);
		sg_event(&ev[i], key, CapturePayload(cr, &p),
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
