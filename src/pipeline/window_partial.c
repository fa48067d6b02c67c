/*-------------------------------------------------------------------------
 *
 * window_partial.c
 *		A batch's events of tumbling and hopping windows aggregated per
 *		(window, key) in the worker's memory before the state's merge: the
 *		partial aggregates (SgWindowPartials).
 *
 * Without it every (event, window) pair was a row of relation
 * "window_rows" that the merge statement grouped again: a hopping window
 * of size / slide = 5 wrote five rows per event into a tuplestore before
 * the SQL aggregated them.  Here each pair updates the partial of its
 * (window start, key) in a hash table; the partials become the rows of
 * "window_rows" (ws, we, k, events, a1 ... a_nacc: one accumulator slot
 * each, window_sql.c's layout), which the merge combines (count slots
 * and sums add up, min and max) -- so a partial written early (below)
 * and one written later for the same window merge as the events would.
 *
 * Memory: the partials live in a context of their own under the batch's;
 * when it outgrows work_mem they are written to the tuplestore (which
 * spills to disk past work_mem itself) and the table starts again: a
 * batch of many windows and keys costs no more memory than the rows did.
 * The values of one event are worked on in a context reset per event, so
 * the copies numeric's functions make of packed inputs do not pile up.
 *
 * Aggregates are exact as the SQL's: numeric_add for sums (the result's
 * scale the larger of the two, as sum() gives), numeric_cmp for min and
 * max, counts of the non-NULL values; a sum or a min/max over NULLs only
 * is NULL.  Keys are text compared byte by byte, which is the equality
 * of the database's default collation (always deterministic) used by the
 * state's unique index.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "pipeline/window_int.h"

typedef struct SgPartialKey
{
	TimestampTz ws;
	bool		key_null;
	text	   *key;			/* detoasted; the partials' copy once entered */
} SgPartialKey;

typedef struct SgPartial
{
	SgPartialKey k;				/* first: the hash key */
	int64		events;
	Datum	   *acc;			/* per slot: a numeric (sums, min, max) ... */
	bool	   *isnull;
	int64	   *count;			/* ... or a count */
} SgPartial;

struct SgWindowPartials
{
	SgWindow   *win;
	MemoryContext cxt;			/* the partials */
	MemoryContext row_cxt;		/* one event's work */
	HTAB	   *hash;
	Tuplestorestate *out;
	TupleDesc	desc;
	int64		written;
	int		   *slot_agg;		/* per slot: its aggregate's input (v index) */
	SgWindowAgg *slot_kind;		/* per slot: how it accumulates */
};

static uint32
sg_partial_hash(const void *key, Size keysize)
{
	const SgPartialKey *k = key;
	uint32		h = hash_bytes_uint32((uint32) k->ws) ^ hash_bytes_uint32((uint32) (k->ws >> 32));

	if (!k->key_null)
		h = hash_combine(h, hash_bytes((const unsigned char *) VARDATA_ANY(k->key), VARSIZE_ANY_EXHDR(k->key)));
	return h;
}

static int
sg_partial_match(const void *a, const void *b, Size keysize)
{
	const SgPartialKey *x = a;
	const SgPartialKey *y = b;

	if (x->ws != y->ws || x->key_null != y->key_null)
		return 1;
	if (x->key_null)
		return 0;
	if (VARSIZE_ANY_EXHDR(x->key) != VARSIZE_ANY_EXHDR(y->key))
		return 1;
	return memcmp(VARDATA_ANY(x->key), VARDATA_ANY(y->key), VARSIZE_ANY_EXHDR(x->key)) != 0;
}

static void
sg_partials_table(SgWindowPartials *p)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(SgPartialKey);
	ctl.entrysize = sizeof(SgPartial);
	ctl.hash = sg_partial_hash;
	ctl.match = sg_partial_match;
	ctl.hcxt = p->cxt;
	p->hash = hash_create("streamguard window partials", 256, &ctl,
						  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/* relation "window_rows" of tumbling and hopping windows: (ws, we, k, events, a1 ...) */
TupleDesc
WindowPartialsDesc(SgWindow *win)
{
	TupleDesc	desc = CreateTemplateTupleDesc(4 + win->nacc);
	int			j;

	TupleDescInitEntry(desc, 1, "ws", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 2, "we", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 3, "k", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 4, "events", INT8OID, -1, 0);
	for (j = 0; j < win->nacc; j++)
		TupleDescInitEntry(desc, 5 + j, psprintf("a%d", j + 1), NUMERICOID, -1, 0);
	TupleDescFinalize(desc);
	return BlessTupleDesc(desc);
}

/*
 * Partials that go to `out` (rows of `desc`, WindowPartialsDesc), in
 * contexts under `parent`.
 */
SgWindowPartials *
WindowPartialsBegin(SgWindow *win, MemoryContext parent, Tuplestorestate *out, TupleDesc desc)
{
	SgWindowPartials *p = MemoryContextAllocZero(parent, sizeof(SgWindowPartials));
	int			i,
				j;

	p->win = win;
	p->out = out;
	p->desc = desc;
	p->cxt = AllocSetContextCreate(parent, "streamguard window partials", ALLOCSET_DEFAULT_SIZES);
	p->row_cxt = AllocSetContextCreate(parent, "streamguard window event", ALLOCSET_SMALL_SIZES);
	p->slot_agg = MemoryContextAlloc(parent, sizeof(int) * Max(win->nacc, 1));
	p->slot_kind = MemoryContextAlloc(parent, sizeof(SgWindowAgg) * Max(win->nacc, 1));
	for (j = 0; j < win->nacc; j++)
	{
		p->slot_agg[j] = j;
		p->slot_kind[j] = j < win->naggs ? win->aggs[j] : SG_AGG_COUNT;
		if (j >= win->naggs)
			for (i = 0; i < win->naggs; i++)
				if (win->count_slot[i] == j)
					p->slot_agg[j] = i; /* an avg's count slot counts its input */
	}
	sg_partials_table(p);
	return p;
}

/* the partials so far into the tuplestore; the table starts again */
static void
sg_partials_flush(SgWindowPartials *p)
{
	SgWindow   *win = p->win;
	HASH_SEQ_STATUS seq;
	SgPartial  *e;
	Datum	   *values = palloc(sizeof(Datum) * (4 + win->nacc));
	bool	   *nulls = palloc(sizeof(bool) * (4 + win->nacc));
	int			j;

	hash_seq_init(&seq, p->hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		MemoryContext old;

		CHECK_FOR_INTERRUPTS();
		old = MemoryContextSwitchTo(p->row_cxt);
		values[0] = TimestampTzGetDatum(e->k.ws);
		nulls[0] = false;
		values[1] = TimestampTzGetDatum(e->k.ws + win->size_us);
		nulls[1] = false;
		values[2] = e->k.key_null ? (Datum) 0 : PointerGetDatum(e->k.key);
		nulls[2] = e->k.key_null;
		values[3] = Int64GetDatum(e->events);
		nulls[3] = false;
		for (j = 0; j < win->nacc; j++)
		{
			if (p->slot_kind[j] == SG_AGG_COUNT)
			{
				values[4 + j] = NumericGetDatum(int64_to_numeric(e->count[j]));
				nulls[4 + j] = false;
			}
			else
			{
				values[4 + j] = e->acc[j];
				nulls[4 + j] = e->isnull[j];
			}
		}
		tuplestore_putvalues(p->out, p->desc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(p->row_cxt);
		p->written++;
	}
	pfree(values);
	pfree(nulls);
	/* the table, its keys and values go; the tuplestore holds the rows */
	MemoryContextReset(p->cxt);
	sg_partials_table(p);
}

/*
 * One event (its aggregates' inputs v, vnull) in the window starting at
 * ws, under `key`.
 */
void
WindowPartialsAdd(SgWindowPartials *p, TimestampTz ws, Datum key, bool key_null, Datum *v, bool *vnull)
{
	SgWindow   *win = p->win;
	SgPartialKey k;
	SgPartial  *e;
	bool		found;
	MemoryContext old;
	int			j;

	old = MemoryContextSwitchTo(p->row_cxt);
	memset(&k, 0, sizeof(k));
	k.ws = ws;
	k.key_null = key_null;
	k.key = key_null ? NULL : DatumGetTextPP(key);
	e = hash_search(p->hash, &k, HASH_ENTER, &found);
	if (!found)
	{
		MemoryContextSwitchTo(p->cxt);
		if (!key_null)
			e->k.key = (text *) DatumGetPointer(datumCopy(PointerGetDatum(k.key), false, -1));
		e->events = 0;
		e->acc = palloc0(sizeof(Datum) * Max(win->nacc, 1));
		e->count = palloc0(sizeof(int64) * Max(win->nacc, 1));
		e->isnull = palloc(sizeof(bool) * Max(win->nacc, 1));
		for (j = 0; j < win->nacc; j++)
			e->isnull[j] = true;
		MemoryContextSwitchTo(p->row_cxt);
	}
	e->events++;
	for (j = 0; j < win->nacc; j++)
	{
		int			a = p->slot_agg[j];
		Datum		x = v[a];
		Datum		keep = (Datum) 0;

		if (vnull[a])
			continue;
		switch (p->slot_kind[j])
		{
			case SG_AGG_COUNT:
				e->count[j]++;
				continue;
			case SG_AGG_SUM:
			case SG_AGG_AVG:
				keep = e->isnull[j] ? x : DirectFunctionCall2(numeric_add, e->acc[j], x);
				break;
			case SG_AGG_MIN:
				if (!e->isnull[j] && DatumGetInt32(DirectFunctionCall2(numeric_cmp, x, e->acc[j])) >= 0)
					continue;
				keep = x;
				break;
			case SG_AGG_MAX:
				if (!e->isnull[j] && DatumGetInt32(DirectFunctionCall2(numeric_cmp, x, e->acc[j])) <= 0)
					continue;
				keep = x;
				break;
		}
		/* the new value into the partials' memory, the old one freed */
		MemoryContextSwitchTo(p->cxt);
		keep = PointerGetDatum(DatumGetNumericCopy(keep));
		if (!e->isnull[j])
			pfree(DatumGetPointer(e->acc[j]));
		e->acc[j] = keep;
		e->isnull[j] = false;
		MemoryContextSwitchTo(p->row_cxt);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(p->row_cxt);
	/* the table's context (a child) counted too */
	if (MemoryContextMemAllocated(p->cxt, true) > (Size) work_mem * 1024)
		sg_partials_flush(p);
}

/* the rest of the partials out; the number of rows written in all */
int64
WindowPartialsFinish(SgWindowPartials *p)
{
	sg_partials_flush(p);
	MemoryContextDelete(p->cxt);
	MemoryContextDelete(p->row_cxt);
	p->cxt = p->row_cxt = NULL;
	return p->written;
}
