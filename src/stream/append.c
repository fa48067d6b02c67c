/*-------------------------------------------------------------------------
 *
 * append.c
 *		append() and append_batch(): writing events into a stream inside
 *		the caller's transaction.
 *
 * An append (1) resolves the stream and checks the caller's append
 * privilege, takes the stream's append lock (which a change of the
 * partition count waits for, repartition.c) and re-reads the metadata if
 * it changed meanwhile, (2) picks the partition (explicit, else a stable hash of the
 * key, else the session spreads round-robin), (3) takes seqs from the
 * readable-horizon tracker (horizon_seq.c), which registers the transaction
 * as in flight on that partition, (4) when a dedup key is given, claims
 * it in streamguard.append_dedup with INSERT ... ON CONFLICT, which makes
 * a concurrent claimant of the same key wait for the first transaction to
 * end, and (5) inserts the event into the stream's current segment.  A
 * duplicate keeps the seqs it took as a gap; gaps are allowed.
 *
 * StreamAppendEvents is the same path for events built in C (change
 * capture, capture_emit.c): partition by key, seqs, store; no dedup claim.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "stream/append.h"
#include "stream/store.h"

PG_FUNCTION_INFO_V1(sg_append);
PG_FUNCTION_INFO_V1(sg_append_batch);

#define SG_MAX_DEDUP_KEY (NAMEDATALEN * 4)

typedef struct OrigEntry
{
	char		key[SG_MAX_DEDUP_KEY];
	int32		part;
	int64		seq;
} OrigEntry;

typedef struct SeenEntry
{
	char		key[SG_MAX_DEDUP_KEY];
	int			index;
} SeenEntry;

static uint32 sg_spread_counter = 0;

static int
sg_choose_partition(SgStreamMeta *meta, bool has_part, int32 part,
					const char *key, int keylen)
{
	if (has_part)
	{
		StreamCheckPartition(meta, part);
		return part;
	}
	if (meta->nparts == 1)
		return 0;
	if (key != NULL)
		return (int) (hash_bytes((const unsigned char *) key, keylen) % (uint32) meta->nparts);
	if (sg_spread_counter == 0)
		sg_spread_counter = (uint32) MyProcPid;
	return (int) (sg_spread_counter++ % (uint32) meta->nparts);
}

/*
 * Claim the dedup keys of the events with claim[i] set (each has a key and
 * took its partition and seq).  On return those whose key was appended
 * within the window already are marked duplicate, with partition and seq
 * replaced by the original position.
 */
static void
sg_claim_dedup(SgStreamMeta *meta, SgEventRow *ev, int n, const bool *claim, TimestampTz now)
{
	Oid			types[6] = {INT4OID, TEXTARRAYOID, INT4ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[6];
	Datum	   *k = palloc(sizeof(Datum) * n);
	Datum	   *p = palloc(sizeof(Datum) * n);
	Datum	   *s = palloc(sizeof(Datum) * n);
	int		   *idx = palloc(sizeof(int) * n);
	int			m = 0,
				i;
	SPIPlanPtr	plan;
	HTAB	   *fresh;
	HASHCTL		ctl;
	int			ret;

	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!claim[i])
			continue;
		k[m] = ev[i].dedup_key;
		p[m] = Int32GetDatum(ev[i].partition);
		s[m] = Int64GetDatum(ev[i].seq);
		idx[m] = i;
		m++;
	}
	if (m == 0)
		return;

	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = PointerGetDatum(construct_array(k, m, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(p, m, INT4OID, 4, true, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(s, m, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(now - meta->dedup_window_us);

	/*
	 * Keys are claimed in key order so that two batches sharing several keys
	 * wait for each other instead of deadlocking.
	 */
	plan = SgPlanCached(NULL,
						"INSERT INTO streamguard.append_dedup AS d "
						"(stream_id, dedup_key, partition, seq, appended_at) "
						"SELECT $1, u.k, u.p, u.s, $5 FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), "
						"pg_catalog.unnest($4)) AS u(k, p, s) "
						"ORDER BY u.k "
						"ON CONFLICT (stream_id, dedup_key) DO UPDATE SET "
						"partition = excluded.partition, seq = excluded.seq, appended_at = excluded.appended_at "
						"WHERE d.appended_at OPERATOR(pg_catalog.<) $6 "
						"RETURNING d.dedup_key",
						6, types);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "dedup claim failed: %s", SPI_result_code_string(ret));
	if ((int) SPI_processed == m)
		return;

	/* some keys were taken already: find which, and their positions */
	ctl.keysize = SG_MAX_DEDUP_KEY;
	ctl.entrysize = ctl.keysize;
	ctl.hcxt = CurrentMemoryContext;
	fresh = hash_create("streamguard fresh keys", Max(m, 16), &ctl,
						HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (i = 0; i < (int) SPI_processed; i++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char		hk[SG_MAX_DEDUP_KEY];

		CHECK_FOR_INTERRUPTS();

		memset(hk, 0, sizeof(hk));
		strlcpy(hk, key, sizeof(hk));
		hash_search(fresh, hk, HASH_ENTER, NULL);
	}
	{
		Oid			ltypes[2] = {INT4OID, TEXTARRAYOID};
		Datum		lvalues[2];
		Snapshot	snap;
		SPIPlanPtr	lplan;
		HTAB	   *orig;

		lplan = SgPlanCached(NULL,
							 "SELECT dedup_key, partition, seq FROM streamguard.append_dedup "
							 "WHERE stream_id OPERATOR(pg_catalog.=) $1 "
							 "AND dedup_key OPERATOR(pg_catalog.=) ANY ($2)",
							 2, ltypes);
		lvalues[0] = values[0];
		lvalues[1] = values[1];
		snap = SgFreshSnapshot();
		ret = SPI_execute_snapshot(lplan, lvalues, NULL, snap, InvalidSnapshot, true, false, 0);
		UnregisterSnapshot(snap);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "dedup lookup failed: %s", SPI_result_code_string(ret));

		ctl.keysize = SG_MAX_DEDUP_KEY;
		ctl.entrysize = sizeof(OrigEntry);
		orig = hash_create("streamguard original keys", Max(m, 16), &ctl,
						   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		for (i = 0; i < (int) SPI_processed; i++)
		{
			HeapTuple	t = SPI_tuptable->vals[i];
			char		hk[SG_MAX_DEDUP_KEY];
			OrigEntry  *e;
			bool		isnull;

			CHECK_FOR_INTERRUPTS();
			memset(hk, 0, sizeof(hk));
			strlcpy(hk, SPI_getvalue(t, SPI_tuptable->tupdesc, 1), sizeof(hk));
			e = hash_search(orig, hk, HASH_ENTER, NULL);
			e->part = DatumGetInt32(SPI_getbinval(t, SPI_tuptable->tupdesc, 2, &isnull));
			e->seq = DatumGetInt64(SPI_getbinval(t, SPI_tuptable->tupdesc, 3, &isnull));
		}
		for (i = 0; i < m; i++)
		{
			char		hk[SG_MAX_DEDUP_KEY];
			OrigEntry  *e;

			memset(hk, 0, sizeof(hk));
			strlcpy(hk, TextDatumGetCString(k[i]), sizeof(hk));
			if (hash_search(fresh, hk, HASH_FIND, NULL) != NULL)
				continue;
			e = hash_search(orig, hk, HASH_FIND, NULL);
			if (e == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access to dedup key \"%s\" of stream \"%s\"",
								hk, meta->name),
						 errdetail("The key was appended by a transaction this snapshot cannot see."),
						 errhint("Retry the transaction.")));
			ev[idx[i]].duplicate = true;
			ev[idx[i]].partition = e->part;
			ev[idx[i]].seq = e->seq;
		}
	}
}

/* write events that all belong in segment `seg` */
static void
sg_store(SgStreamMeta *meta, int32 seg, const SgEventRow *ev, int n, TimestampTz now)
{
	if (meta->write_seg != seg)
	{
		meta->write_seg = seg;
		meta->write_relid = InvalidOid;
	}
	StreamStoreInsert(meta->stream_id, seg, &meta->write_relid, ev, n, now);
}

/*
 * Give events that have their partition one seq range per partition;
 * segs[i] gets the segment event i belongs in.
 */
static void
sg_assign_seqs(SgStreamMeta *meta, SgEventRow *ev, int32 *segs, int n)
{
	int		   *per_part = palloc0(sizeof(int) * meta->nparts);
	int64	   *next_in_part = palloc0(sizeof(int64) * meta->nparts);
	int32	   *seg_of_part = palloc0(sizeof(int32) * meta->nparts);
	int			i;

	/* the partition entries must not move meanwhile (HorizonGrowStream) */
	Assert(StreamAppendLockHeld(meta->stream_id, false));
	for (i = 0; i < n; i++)
		per_part[ev[i].partition]++;
	for (i = 0; i < meta->nparts; i++)
		if (per_part[i] > 0)
			next_in_part[i] = HorizonAssignSeqs(meta->ref, i, per_part[i], &seg_of_part[i]);
	for (i = 0; i < n; i++)
	{
		ev[i].seq = next_in_part[ev[i].partition]++;
		segs[i] = seg_of_part[ev[i].partition];
	}
	pfree(per_part);
	pfree(next_in_part);
	pfree(seg_of_part);
}

/* write the events not marked duplicate, grouped by the segment they belong in */
static void
sg_store_grouped(SgStreamMeta *meta, const SgEventRow *ev, const int32 *segs, int n,
				 TimestampTz now)
{
	bool	   *done;
	SgEventRow *group;
	int			i;

	if (n == 1)
	{
		if (!ev[0].duplicate)
			sg_store(meta, segs[0], ev, 1, now);
		return;
	}
	done = palloc0(sizeof(bool) * n);
	group = palloc(sizeof(SgEventRow) * n);
	for (;;)
	{
		int32		seg = -1;
		int			m = 0;

		for (i = 0; i < n; i++)
		{
			if (done[i] || ev[i].duplicate)
				continue;
			if (seg < 0)
				seg = segs[i];
			if (segs[i] != seg)
				continue;
			done[i] = true;
			group[m++] = ev[i];
		}
		if (m == 0)
			break;
		sg_store(meta, seg, group, m, now);
	}
	pfree(done);
	pfree(group);
}

static void
sg_check_dedup_key(const char *key)
{
	size_t		len = strlen(key);

	if (len == 0 || len >= SG_MAX_DEDUP_KEY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_key must be 1 to %d bytes, got %zu", SG_MAX_DEDUP_KEY - 1, len)));
}

/*
 * A stream created with payload_check => 'object' takes JSON objects only:
 * null, scalars and arrays are refused (consumers that expect objects
 * would otherwise meet them as poison).  index is the event's place in a
 * batch (1-based), 0 for a single append.
 */
static void
sg_check_payload(SgStreamMeta *meta, Datum payload, int index)
{
	Jsonb	   *jb;

	if (!meta->payload_object)
		return;
	jb = DatumGetJsonbP(payload);
	if (JB_ROOT_IS_OBJECT(jb) && !JB_ROOT_IS_SCALAR(jb))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 index > 0 ?
			 errmsg("payloads[%d] must be a JSON object, not %s", index,
					TextDatumGetCString(DirectFunctionCall1(jsonb_typeof, payload))) :
			 errmsg("payload must be a JSON object, not %s",
					TextDatumGetCString(DirectFunctionCall1(jsonb_typeof, payload))),
			 errdetail("Stream \"%s\" takes JSON objects only (streamguard.set_payload_check).", meta->name)));
}

/*
 * append(stream, payload, key, dedup_key, partition) -> position
 */
Datum
sg_append(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgStreamMeta *meta;
	text	   *key = NULL;
	char	   *keystr = NULL;
	int32		part;
	int32		seg;
	int64		seq;
	TimestampTz now;
	SgUserSave	save;
	TupleDesc	tupdesc;
	Datum		result[2];
	bool		rnulls[2] = {false, false};
	SgEventRow	ev;

	SgCheckWritable("append", "it appends an event");
	StreamguardCheckLoaded();
	SgCheckPrimary("append");
	name = SgTextArg(fcinfo, 0, "stream name");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be NULL")));
	if (!PG_ARGISNULL(2))
	{
		key = PG_GETARG_TEXT_PP(2);
		keystr = text_to_cstring(key);
	}
	if (!PG_ARGISNULL(3))
		sg_check_dedup_key(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "append must return a composite type");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_APPEND);
	if (!StreamLockAppend(meta))
		meta = StreamLookup(name, SG_PRIV_APPEND);
	sg_check_payload(meta, PG_GETARG_DATUM(1), 0);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	part = sg_choose_partition(meta, !PG_ARGISNULL(4), PG_ARGISNULL(4) ? 0 : PG_GETARG_INT32(4),
							   keystr, keystr ? (int) strlen(keystr) : 0);
	Assert(StreamAppendLockHeld(meta->stream_id, false));
	seq = HorizonAssignSeqs(meta->ref, part, 1, &seg);
	now = GetCurrentTimestamp();

	ev.partition = part;
	ev.seq = seq;
	ev.key_null = (key == NULL);
	ev.key = key ? PointerGetDatum(key) : (Datum) 0;
	ev.payload = PG_GETARG_DATUM(1);
	ev.dedup_null = PG_ARGISNULL(3);
	ev.dedup_key = ev.dedup_null ? (Datum) 0 : PG_GETARG_DATUM(3);
	ev.duplicate = false;
	if (!ev.dedup_null)
	{
		bool		claim = true;

		SgBecomeDataOwner(&save, false);
		sg_claim_dedup(meta, &ev, 1, &claim, now);
		SgRestoreUser(&save);
	}
	if (!ev.duplicate)
		sg_store(meta, seg, &ev, 1, now);
	SPI_finish();

	result[0] = Int32GetDatum(ev.partition);
	result[1] = Int64GetDatum(ev.seq);
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, result, rnulls)));
}

static void
sg_deconstruct(ArrayType *arr, Oid elemtype, const char *what, int expect,
			   Datum **elems, bool **nulls, int *n)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign, elems, nulls, n);
	if (expect >= 0 && *n != expect)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has %d elements but payloads has %d", what, *n, expect)));
}

/*
 * Dedup keys of one batch: a key repeated inside the batch is claimed once,
 * and its later rows become duplicates pointing at the first row's position;
 * the first rows claim their keys in the dedup table as the data owner.
 */
static void
sg_batch_dedup(SgStreamMeta *meta, SgEventRow *ev, int n, TimestampTz now)
{
	SgUserSave	save;
	HTAB	   *seen;
	HASHCTL		ctl;
	bool	   *claim = palloc(sizeof(bool) * n);
	int		   *first_of = palloc(sizeof(int) * n);
	int			i;

	/* duplicates inside the batch point at their first occurrence */
	ctl.keysize = SG_MAX_DEDUP_KEY;
	ctl.entrysize = sizeof(SeenEntry);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("streamguard batch keys", Max(n, 16), &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (i = 0; i < n; i++)
	{
		char		hk[SG_MAX_DEDUP_KEY];
		SeenEntry  *e;
		bool		found;

		first_of[i] = -1;
		claim[i] = !ev[i].dedup_null;
		if (ev[i].dedup_null)
			continue;
		memset(hk, 0, sizeof(hk));
		strlcpy(hk, TextDatumGetCString(ev[i].dedup_key), sizeof(hk));
		e = hash_search(seen, hk, HASH_ENTER, &found);
		if (found)
		{
			first_of[i] = e->index;
			claim[i] = false;
		}
		else
			e->index = i;
	}
	SgBecomeDataOwner(&save, false);
	sg_claim_dedup(meta, ev, n, claim, now);
	SgRestoreUser(&save);
	for (i = 0; i < n; i++)
		if (first_of[i] >= 0)
		{
			ev[i].duplicate = true;
			ev[i].partition = ev[first_of[i]].partition;
			ev[i].seq = ev[first_of[i]].seq;
		}
}

/*
 * append_batch(stream, payloads, keys, dedup_keys, partitions) -> setof position
 */
Datum
sg_append_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	SgStreamMeta *meta;
	Datum	   *payloads,
			   *keys = NULL,
			   *dkeys = NULL,
			   *pin = NULL;
	bool	   *pnulls,
			   *knulls = NULL,
			   *dnulls = NULL,
			   *pinnulls = NULL;
	int			n,
				nk,
				i;
	SgEventRow *ev;
	int32	   *segs;
	TimestampTz now;

	SgCheckWritable("append_batch", "it appends events");
	StreamguardCheckLoaded();
	SgCheckPrimary("append_batch");
	InitMaterializedSRF(fcinfo, 0);
	name = SgTextArg(fcinfo, 0, "stream name");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payloads must not be NULL")));
	sg_deconstruct(PG_GETARG_ARRAYTYPE_P(1), JSONBOID, "payloads", -1, &payloads, &pnulls, &n);
	for (i = 0; i < n; i++)
		if (pnulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("payloads[%d] must not be NULL", i + 1)));
	if (!PG_ARGISNULL(2))
		sg_deconstruct(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, "keys", n, &keys, &knulls, &nk);
	if (!PG_ARGISNULL(3))
	{
		sg_deconstruct(PG_GETARG_ARRAYTYPE_P(3), TEXTOID, "dedup_keys", n, &dkeys, &dnulls, &nk);
		for (i = 0; i < n; i++)
			if (!dnulls[i])
				sg_check_dedup_key(TextDatumGetCString(dkeys[i]));
	}
	if (!PG_ARGISNULL(4))
		sg_deconstruct(PG_GETARG_ARRAYTYPE_P(4), INT4OID, "partitions", n, &pin, &pinnulls, &nk);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_APPEND);
	if (n == 0)
	{
		SPI_finish();
		return (Datum) 0;
	}
	if (!StreamLockAppend(meta))
		meta = StreamLookup(name, SG_PRIV_APPEND);
	for (i = 0; i < n; i++)
		sg_check_payload(meta, payloads[i], i + 1);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);

	ev = palloc0(sizeof(SgEventRow) * n);
	segs = palloc(sizeof(int32) * n);

	for (i = 0; i < n; i++)
	{
		char	   *k = NULL;
		int			klen = 0;

		CHECK_FOR_INTERRUPTS();

		ev[i].payload = payloads[i];
		ev[i].key_null = (keys == NULL || knulls[i]);
		ev[i].key = ev[i].key_null ? (Datum) 0 : keys[i];
		ev[i].dedup_null = (dkeys == NULL || dnulls[i]);
		ev[i].dedup_key = ev[i].dedup_null ? (Datum) 0 : dkeys[i];
		if (!ev[i].key_null)
		{
			text	   *t = DatumGetTextPP(ev[i].key);

			k = VARDATA_ANY(t);
			klen = VARSIZE_ANY_EXHDR(t);
		}
		ev[i].partition = sg_choose_partition(meta, pin && !pinnulls[i],
											  (pin && !pinnulls[i]) ? DatumGetInt32(pin[i]) : 0,
											  k, klen);
	}
	sg_assign_seqs(meta, ev, segs, n);
	now = GetCurrentTimestamp();

	if (dkeys)
		sg_batch_dedup(meta, ev, n, now);

	sg_store_grouped(meta, ev, segs, n, now);

	/* results go to the tuplestore before SPI_finish frees our arrays */
	for (i = 0; i < n; i++)
	{
		Datum		values[2] = {Int32GetDatum(ev[i].partition), Int64GetDatum(ev[i].seq)};
		bool		nulls[2] = {false, false};

		CHECK_FOR_INTERRUPTS();

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * Append events built in C to a stream the caller looked up and checked,
 * holding its append lock (StreamLockAppend) and the metadata current:
 * each event's partition from its key (the rule append uses, so a key's
 * events share a partition whoever appends them), seqs from the horizon,
 * then the store.  No dedup claim: the dedup key is stored as given.
 * Fills in ev[].partition and ev[].seq.
 */
void
StreamAppendEvents(SgStreamMeta *meta, SgEventRow *ev, int n)
{
	int32	   *segs;
	int			i;

	if (n <= 0)
		return;
	for (i = 0; i < n; i++)
		sg_check_payload(meta, ev[i].payload, n > 1 ? i + 1 : 0);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	segs = palloc(sizeof(int32) * n);
	for (i = 0; i < n; i++)
	{
		char	   *k = NULL;
		int			klen = 0;

		CHECK_FOR_INTERRUPTS();

		if (!ev[i].key_null)
		{
			text	   *t = DatumGetTextPP(ev[i].key);

			k = VARDATA_ANY(t);
			klen = VARSIZE_ANY_EXHDR(t);
		}
		ev[i].partition = sg_choose_partition(meta, false, 0, k, klen);
		ev[i].duplicate = false;
	}
	sg_assign_seqs(meta, ev, segs, n);
	sg_store_grouped(meta, ev, segs, n, GetCurrentTimestamp());
	pfree(segs);
}
