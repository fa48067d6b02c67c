/*-------------------------------------------------------------------------
 *
 * capture_chunk.c
 *		One chunk of the backfill of a captured table: one event per row
 *		that existed before the capture, from MVCC snapshots, while the
 *		table is being written (CaptureBackfillChunk, in the caller's
 *		transaction); where the backfill stands and its progress, which
 *		the chunk commits with its events.  The worker that runs the
 *		chunks is capture_backfill.c, the key's order and its SQL pieces
 *		capture_backfill_key.c.
 *
 * THE GUARANTEE.  A consumer that applies the stream per key (backfill,
 * insert and update rows upserted, deletes removing) ends with every row's
 * latest state, and never receives a row version twice.
 *
 * THE DESIGN.  capture_table installs the trigger and records the capture
 * with backfill_state 'pending' in one transaction, and that transaction
 * takes a lock that no writer of the table can hold at the same time
 * (CREATE TRIGGER's SHARE ROW EXCLUSIVE).  So every transaction that
 * writes the table either ended before the capture committed ("before")
 * or takes its lock after, sees the trigger and emits every change it
 * makes ("live").  A background worker then walks the table in key order,
 * one chunk per READ COMMITTED transaction:
 *	1. lock the table, then the capture's row (FOR UPDATE: one worker at a
 *	   time, and the progress it reads is the committed one);
 *	2. read the keys of the next `chunk` rows after the last key done (no
 *	   lock): the chunk is (after, hi].  The backfill ends at the last key
 *	   its first chunk saw: a row written before the capture committed
 *	   has a key up to it, so rows that writers add beyond it (sent and
 *	   claimed by them) do not hold the backfill back;
 *	3. SELECT the rows of (after, hi] ... FOR SHARE: a writer that holds
 *	   one of them is waited for; a writer that comes later waits for this
 *	   chunk to commit;
 *	4. a row whose version (key, xmin) a live change claimed
 *	   (capture_emit.c) was emitted by that change: skipped.  The lookup is
 *	   a statement of its own, after step 3, so its snapshot sees the
 *	   claims of every writer step 3 waited for.  A version written by an
 *	   UPDATE that changed no captured column (and sent nothing) is
 *	   claimed too, pointing at the version it replaced: it is skipped if
 *	   that one was sent, and sent otherwise;
 *	5. one 'backfill' event per remaining row, the chunk's progress, and in
 *	   the last chunk backfill_state 'done', all committed together.
 * Why that is exact, for a row of key K:
 *	- K never changed after the capture: its version is "before", nobody
 *	  claimed it, and exactly one chunk covers K (chunks are disjoint, and
 *	  a committed chunk's progress is never redone): one backfill event;
 *	- a live change to K committed before step 3 locked K: it appended its
 *	  event (in its own transaction, before its commit) and claimed the
 *	  version step 3 then reads, so the row is skipped and the live event
 *	  is K's latest state; if it deleted K, step 3 does not return K;
 *	- a live change to K after step 3 locked K waits for the chunk to
 *	  commit, so its event gets a later seq in K's partition than the
 *	  backfill event: the consumer applies the backfill, then the change;
 *	- a row inserted, or moved to a new key, by a live change after step 3
 *	  took its snapshot is not seen by this chunk; its version is claimed,
 *	  so a later chunk that sees it skips it; a key moved into a range
 *	  already done was emitted live.  Step 3's re-check of the range (it
 *	  runs without LIMIT) drops a row whose key moved out of (after, hi].
 * An UPDATE that changes no captured column emits nothing; following its
 * claim to the version it replaced, the backfill sends the row once if
 * and only if no event carried that content.
 *
 * Waits are bounded (capture_backfill.c: lock_timeout and a short
 * deadlock_timeout, a failed chunk retried with half the rows).  The
 * table needs a unique index on the key (capture_table checks); the scan
 * uses its operators, collations and column order, so no operator is
 * looked up by name.
 *
 * DDL.  Two things the argument relies on can be changed by DDL while a
 * backfill runs: a row version's xmin (every rewrite of the table, ALTER
 * TABLE ... TYPE or a volatile default, gives every row the rewriter's:
 * rows writers sent would no longer match their claims) and the key's
 * order (ALTER COLUMN ... TYPE or COLLATE of a key column, another unique
 * index taking over: the position, kept as text, would be compared in
 * another order).  capture_ddl.c's event triggers refuse both while the
 * backfill is not done; the first chunk records the key's order
 * (backfill_key) and every later chunk checks it, failing rather than
 * skipping or repeating rows should a change get through.  VACUUM FULL and
 * CLUSTER copy each row with its xmin (freezing marks a tuple frozen but
 * keeps the xmin the system column shows) and keep the key: allowed.
 *
 * WHY ONE FILE.  The backfill's argument (chunks under FOR SHARE, claims,
 * the persisted progress) is one proof: the chunk transaction, the claim
 * lookups and the progress record are here, to be read together to see
 * that no row version is emitted twice or missed.
 *
 * Locking: the table (ROW SHARE), then the capture's row (FOR UPDATE),
 * then the chunk's rows (FOR SHARE), all held to the chunk's commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/xid8.h"

#include "capture/capture.h"
#include "capture/capture_int.h"
#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"

/* a text[] datum as a C array of k->n strings, or NULL */
static char **
sg_text_array(Datum d, bool isnull)
{
	Datum	   *elems;
	char	  **out;
	int			n,
				i;

	if (isnull)
		return NULL;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	out = palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
		out[i] = TextDatumGetCString(elems[i]);
	return out;
}

static Datum
sg_text_array_datum(char **texts, int n)
{
	Datum	   *e = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		e[i] = CStringGetTextDatum(texts[i]);
	return PointerGetDatum(construct_array(e, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* the key columns of SPI result row `row`, as text */
static char **
sg_result_key(SgKeySql *k, int row)
{
	char	  **out = palloc(sizeof(char *) * k->n);
	int			i;

	for (i = 0; i < k->n; i++)
		out[i] = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, i + 1);
	return out;
}

/* text[] of a key (SPI result row, key columns from `first`) as parameters */
static void
sg_key_params(SgKeySql *k, char **texts, Datum *values, Oid *types)
{
	int			i;

	for (i = 0; i < k->n; i++)
	{
		Oid			typinput,
					typioparam;

		getTypeInputInfo(k->type[i], &typinput, &typioparam);
		values[i] = OidInputFunctionCall(typinput, texts[i], typioparam, -1);
		types[i] = k->type[i];
	}
}

/* the claims of a chunk's keys, by (key hash, xid of the version) */
typedef struct SgClaimKey
{
	int64		key_hash;
	uint64		xid;
} SgClaimKey;

typedef struct SgClaim
{
	SgClaimKey	key;
	bool		sent;			/* an event carried this version */
	uint64		prev;			/* else: the version whose content it has */
} SgClaim;

/*
 * Whether a live event carried the content of version (key hash, xid): its
 * own claim says so, or it was written by an update that changed no
 * captured column and the version it replaced was carried (and so on back).
 * A version nobody claimed is one the backfill must send.
 */
static bool
sg_version_sent(HTAB *claims, int64 key_hash, uint64 xid)
{
	int			steps;

	for (steps = 0; steps < 100000; steps++)
	{
		SgClaimKey	key;
		SgClaim    *claim;

		memset(&key, 0, sizeof(key));
		key.key_hash = key_hash;
		key.xid = xid;
		claim = hash_search(claims, &key, HASH_FIND, NULL);
		if (claim == NULL)
			return false;
		if (claim->sent)
			return true;
		if (claim->prev == xid)
			return false;
		xid = claim->prev;
	}
	return false;
}

/* the estimated rows of the table (of its partitions), or NULL */
static Datum
sg_estimate(Oid relid, bool *isnull)
{
	Oid			types[1] = {REGCLASSOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};

	SgExec("SELECT NULLIF(pg_catalog.sum(GREATEST(c.reltuples, 0)), 0)::pg_catalog.int8 "
		   "FROM pg_catalog.pg_class c WHERE c.relkind OPERATOR(pg_catalog.=) 'r' "
		   "AND (c.oid OPERATOR(pg_catalog.=) $1 OR c.oid OPERATOR(pg_catalog.=) ANY "
		   "(ARRAY(SELECT p.relid FROM pg_catalog.pg_partition_tree($1) p)))",
		   1, types, values, NULL, SPI_OK_SELECT);
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
}

/* where a backfill stands, as its capture's row says */
typedef struct SgBackfillPos
{
	bool		pending;		/* no chunk ran yet */
	char	  **after;			/* last key done, or NULL: from the start */
	char	  **until;			/* last key when the backfill began */
	int64		rows_done;
	Datum		stored_key;		/* backfill_key, or 0 before the first chunk */
	bool		key_column;		/* the catalog has backfill_key */
} SgBackfillPos;

/* one chunk's rows */
typedef struct SgBackfillRows
{
	char	  **hi;				/* last key of this chunk */
	bool		last;			/* this chunk ends the backfill */
	int			nrows;			/* rows of the chunk ... */
	int			nemit;			/* ... of which no live change carried */
	HeapTuple  *rows;			/* the rows to emit (nemit of them) */
	TransactionId *xmins;
} SgBackfillRows;

/*
 * The capture's row, locked: SG_CHUNK_MORE with *pos filled if its
 * backfill is pending or running, else SG_CHUNK_GONE or SG_CHUNK_DONE.
 * As the data owner.
 */
static SgChunkResult
sg_backfill_position(int32 capture_id, SgBackfillPos *pos)
{
	Oid			t[1] = {INT4OID};
	Datum		v[1] = {Int32GetDatum(capture_id)};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	SgBackfillState state;
	Datum		a;

	memset(pos, 0, sizeof(*pos));
	/* a 0.2 catalog (served until ALTER EXTENSION UPDATE) has no backfill_key */
	pos->key_column = get_attnum(get_relname_relid("capture", get_namespace_oid("streamguard", false)),
								 "backfill_key") != InvalidAttrNumber;
	SgExec(pos->key_column ?
		   "SELECT backfill_state::pg_catalog.text, backfill_after, backfill_rows, backfill_until, "
		   "backfill_key FROM streamguard.capture WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE" :
		   "SELECT backfill_state::pg_catalog.text, backfill_after, backfill_rows, backfill_until, "
		   "NULL::pg_catalog.text[] AS backfill_key FROM streamguard.capture "
		   "WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
		   1, t, v, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return SG_CHUNK_GONE;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	state = (SgBackfillState) SgParseWord(&SgBackfillStateWords,
										  SPI_getvalue(tup, desc, SgColumn(desc, "backfill_state")));
	if (state != SG_BACKFILL_PENDING && state != SG_BACKFILL_RUNNING)
		return SG_CHUNK_DONE;
	pos->pending = (state == SG_BACKFILL_PENDING);
	a = SPI_getbinval(tup, desc, SgColumn(desc, "backfill_after"), &isnull);
	pos->after = sg_text_array(a, isnull);
	pos->rows_done = DatumGetInt64(SPI_getbinval(tup, desc, SgColumn(desc, "backfill_rows"), &isnull));
	a = SPI_getbinval(tup, desc, SgColumn(desc, "backfill_until"), &isnull);
	pos->until = sg_text_array(a, isnull);
	a = SPI_getbinval(tup, desc, SgColumn(desc, "backfill_key"), &isnull);
	pos->stored_key = isnull ? (Datum) 0 : datumCopy(a, false, -1);
	return SG_CHUNK_MORE;
}

/*
 * The key the backfill walks the table by: a unique index on the key
 * columns, NOT NULL, in the order the backfill began with (*key_now: the
 * order now).
 */
static SgKeySql *
sg_backfill_key(SgCaptureDef *def, Relation rel, const SgBackfillPos *pos, Datum *key_now)
{
	Oid			indexoid;
	bool		nullable;
	SgKeySql   *k;

	indexoid = CaptureFindKeyIndex(rel, def->nkeys, def->key_attnums, &nullable);
	if (!OidIsValid(indexoid) || nullable)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the key of captured table \"%s\" is no longer unique and NOT NULL",
						RelationGetRelationName(rel)),
				 errdetail("The backfill walks the table in the order of a unique index on the key columns."),
				 errhint("Restore the unique index and NOT NULL constraints, or run streamguard.uncapture_table.")));

	/*
	 * The position is a key in the order the backfill began with; DDL that
	 * changes that order is refused while the backfill runs (capture_ddl.c).
	 * Should one get through anyway (event triggers off), fail rather than
	 * skip or repeat rows.
	 */
	*key_now = CaptureBackfillKey(rel, indexoid);
	if (pos->stored_key != (Datum) 0 && !CaptureBackfillKeySame(pos->stored_key, *key_now))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the key of captured table \"%s\" changed while its backfill ran",
						RelationGetRelationName(rel)),
				 errdetail("The backfill's position is a key in the order it began with (%s), not in the key's order now (%s).",
						   CaptureBackfillKeyText(pos->stored_key), CaptureBackfillKeyText(*key_now)),
				 errhint("Run streamguard.uncapture_table and capture the table again.")));
	k = CaptureBackfillKeySql(rel, indexoid);
	if (pos->after != NULL && def->nkeys != k->n)
		elog(ERROR, "backfill position has the wrong number of columns");
	return k;
}

/*
 * The chunk's rows, as the table's owner: the end of the backfill fixed by
 * the first chunk (pos->until), the chunk's last key (c->hi), then the
 * rows of (after, hi], locked, left in SPI_tuptable (xmin, row).
 */
static void
sg_backfill_select(Relation rel, SgKeySql *k, SgBackfillPos *pos, int chunk, SgBackfillRows *c)
{
	StringInfoData keys;
	StringInfoData sql;
	char	   *from = psprintf(" FROM %s%s t",
								rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE ? "" : "ONLY ",
								quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
														   RelationGetRelationName(rel)));
	int			nafter = pos->after ? k->n : 0;
	Datum	   *values = palloc(sizeof(Datum) * 2 * k->n);
	Oid		   *types = palloc(sizeof(Oid) * 2 * k->n);
	int			i;

	initStringInfo(&keys);
	appendStringInfoString(&keys, "SELECT ");
	for (i = 0; i < k->n; i++)
		appendStringInfo(&keys, "%st.%s", i ? ", " : "",
						 quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), k->attnum[i] - 1)->attname)));
	appendStringInfoString(&keys, from);
	if (pos->after != NULL)
		sg_key_params(k, pos->after, values, types);

	/*
	 * The first chunk fixes the end: the last key now.  Every row that was
	 * written before the capture committed and still exists has a key up
	 * to it (this snapshot sees them all); a row above it was written
	 * since, by a writer that sent and claimed it.  So the backfill ends,
	 * however fast writers add rows at the end.
	 */
	if (pos->pending)
	{
		initStringInfo(&sql);
		appendStringInfoString(&sql, keys.data);
		CaptureBackfillKeyOrder(&sql, k, true);
		appendStringInfoString(&sql, " LIMIT 1");
		SgExec(sql.data, 0, NULL, NULL, NULL, SPI_OK_SELECT);
		pos->until = SPI_processed > 0 ? sg_result_key(k, 0) : NULL;
	}
	if (pos->until == NULL)
	{
		/* nothing to send: the table was empty when the backfill began */
		c->last = true;
		c->nrows = 0;
		return;
	}

	/* step 2: the chunk's last key: the chunk-th after `after`, or the end */
	initStringInfo(&sql);
	appendStringInfoString(&sql, keys.data);
	appendStringInfoString(&sql, " WHERE ");
	if (pos->after != NULL)
	{
		CaptureBackfillKeyPredicate(&sql, k, 1, true);
		appendStringInfoString(&sql, " AND ");
	}
	CaptureBackfillKeyPredicate(&sql, k, nafter + 1, false);
	sg_key_params(k, pos->until, values + nafter, types + nafter);
	CaptureBackfillKeyOrder(&sql, k, false);
	appendStringInfo(&sql, " LIMIT %d", chunk);
	SgExec(sql.data, nafter + k->n, types, values, NULL, SPI_OK_SELECT);
	c->hi = (int) SPI_processed == chunk ? sg_result_key(k, chunk - 1) : pos->until;
	c->last = true;
	for (i = 0; i < k->n; i++)
		if (strcmp(c->hi[i], pos->until[i]) != 0)
			c->last = false;

	/* step 3: the rows of (after, hi], locked */
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT t.xmin, t%s WHERE ", from);
	if (pos->after != NULL)
	{
		CaptureBackfillKeyPredicate(&sql, k, 1, true);
		appendStringInfoString(&sql, " AND ");
	}
	CaptureBackfillKeyPredicate(&sql, k, nafter + 1, false);
	sg_key_params(k, c->hi, values + nafter, types + nafter);
	CaptureBackfillKeyOrder(&sql, k, false);
	appendStringInfoString(&sql, " FOR SHARE OF t");
	SgExec(sql.data, nafter + k->n, types, values, NULL, SPI_OK_SELECT);
	c->nrows = (int) SPI_processed;
}

/* the rows sg_backfill_select left in SPI_tuptable, with their keys' text */
static char **
sg_backfill_collect(Relation rel, SgCaptureRel *cr, SgBackfillRows *c)
{
	char	  **keys = palloc(sizeof(char *) * Max(c->nrows, 1));
	int			col_xmin = c->nrows > 0 ? SgColumn(SPI_tuptable->tupdesc, "xmin") : 0;
	int			col_row = c->nrows > 0 ? SgColumn(SPI_tuptable->tupdesc, "t") : 0;
	int			i;

	c->rows = palloc(sizeof(HeapTuple) * Max(c->nrows, 1));
	c->xmins = palloc(sizeof(TransactionId) * Max(c->nrows, 1));
	for (i = 0; i < c->nrows; i++)
	{
		bool		isnull;
		HeapTupleHeader th;

		CHECK_FOR_INTERRUPTS();

		c->xmins[i] = DatumGetTransactionId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
														  col_xmin, &isnull));
		th = DatumGetHeapTupleHeader(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
												   col_row, &isnull));
		c->rows[i] = palloc(sizeof(HeapTupleData));
		c->rows[i]->t_len = HeapTupleHeaderGetDatumLength(th);
		ItemPointerSetInvalid(&c->rows[i]->t_self);
		c->rows[i]->t_tableOid = RelationGetRelid(rel);
		c->rows[i]->t_data = th;
		keys[i] = CaptureKeyText(cr, RelationGetDescr(rel), c->rows[i]);
	}
	c->nemit = c->nrows;
	return keys;
}

/*
 * Step 4: leave out the versions a live change claimed (its event carried
 * them); a statement of its own, after the locks.
 */
static void
sg_backfill_unclaimed(int32 capture_id, SgBackfillRows *c, char **keys)
{
	Datum	   *hashes = palloc(sizeof(Datum) * c->nrows);
	Oid			t[2] = {INT4OID, INT8ARRAYOID};
	Datum		v[2];
	SgUserSave	dsave;
	HTAB	   *claims;
	HASHCTL		ctl;
	uint64		n;
	int			col_hash,
				col_xid,
				col_prev;
	int			i;
	int			m = 0;

	for (i = 0; i < c->nrows; i++)
		hashes[i] = Int64GetDatum((int64) CaptureKeyHash(keys[i]));
	v[0] = Int32GetDatum(capture_id);
	v[1] = PointerGetDatum(construct_array(hashes, c->nrows, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	SgBecomeDataOwner(&dsave, false);
	SgExec("SELECT key_hash, xid, prev_xid FROM streamguard.capture_claim "
		   "WHERE capture_id OPERATOR(pg_catalog.=) $1 AND key_hash OPERATOR(pg_catalog.=) ANY ($2)",
		   2, t, v, NULL, SPI_OK_SELECT);
	SgRestoreUser(&dsave);

	ctl.keysize = sizeof(SgClaimKey);
	ctl.entrysize = sizeof(SgClaim);
	ctl.hcxt = CurrentMemoryContext;
	claims = hash_create("streamguard backfill claims", Max(SPI_processed, 16), &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	col_hash = SgColumn(SPI_tuptable->tupdesc, "key_hash");
	col_xid = SgColumn(SPI_tuptable->tupdesc, "xid");
	col_prev = SgColumn(SPI_tuptable->tupdesc, "prev_xid");
	for (n = 0; n < SPI_processed; n++)
	{
		HeapTuple	tup = SPI_tuptable->vals[n];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		SgClaimKey	key;
		SgClaim    *claim;
		bool		isnull;
		Datum		prev;

		memset(&key, 0, sizeof(key));
		key.key_hash = DatumGetInt64(SPI_getbinval(tup, desc, col_hash, &isnull));
		key.xid = U64FromFullTransactionId(DatumGetFullTransactionId(SPI_getbinval(tup, desc, col_xid,
																				   &isnull)));
		claim = hash_search(claims, &key, HASH_ENTER, NULL);
		prev = SPI_getbinval(tup, desc, col_prev, &isnull);
		claim->sent = isnull;
		claim->prev = isnull ? 0 : U64FromFullTransactionId(DatumGetFullTransactionId(prev));
	}
	for (i = 0; i < c->nrows; i++)
		if (sg_version_sent(claims, (int64) CaptureKeyHash(keys[i]),
							U64FromFullTransactionId(CaptureWidenXid(c->xmins[i]))))
		{
			c->rows[i] = NULL;
			c->nemit--;
		}
	/* close the gaps */
	for (i = 0; i < c->nrows; i++)
		if (c->rows[i] != NULL)
		{
			c->rows[m] = c->rows[i];
			c->xmins[m] = c->xmins[i];
			m++;
		}
}

/*
 * The backfill's progress, in the chunk's transaction: the new position,
 * the counts, done after the last chunk (the claims then go: writers stop
 * claiming once they see the state, at their next lock of the table).  As
 * the data owner.
 */
static void
sg_backfill_progress(int32 capture_id, SgCaptureDef *def, SgKeySql *k, const SgBackfillPos *pos,
					 const SgBackfillRows *c, Datum key_now)
{
	Oid			t[9] = {INT4OID, TEXTARRAYOID, INT8OID, INT8OID, BOOLOID, BOOLOID, INT8OID, TEXTARRAYOID,
	TEXTARRAYOID};
	Datum		v[9];
	char		n[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		isnull = true;

	v[0] = Int32GetDatum(capture_id);
	if (c->hi != NULL)
		v[1] = sg_text_array_datum(c->hi, k->n);
	else
		n[1] = 'n';
	v[2] = Int64GetDatum(c->nemit);
	v[3] = Int64GetDatum(c->nrows - c->nemit);
	v[4] = BoolGetDatum(c->last);
	v[5] = BoolGetDatum(pos->pending);
	v[6] = pos->pending ? sg_estimate(def->relid, &isnull) : (Datum) 0;
	if (isnull)
		n[6] = 'n';
	if (pos->until != NULL)
		v[7] = sg_text_array_datum(pos->until, k->n);
	else
		n[7] = 'n';
	v[8] = key_now;
	SgExec(psprintf("UPDATE streamguard.capture SET %s"
					"backfill_after = $2, "
					"backfill_until = $8, "
					"backfill_rows = backfill_rows OPERATOR(pg_catalog.+) $3, "
					"backfill_skipped = backfill_skipped OPERATOR(pg_catalog.+) $4, "
					"backfill_state = CASE WHEN $5 THEN 'done'::streamguard.backfill_state "
					"ELSE 'running'::streamguard.backfill_state END, "
					"backfill_started_at = CASE WHEN $6 THEN pg_catalog.now() ELSE backfill_started_at END, "
					"backfill_total = CASE WHEN $6 THEN $7 ELSE backfill_total END, "
					"backfill_done_at = CASE WHEN $5 THEN pg_catalog.now() END, "
					"backfill_error = NULL "
					"WHERE id OPERATOR(pg_catalog.=) $1",
					pos->key_column ? "backfill_key = $9, " : ""),
		   pos->key_column ? 9 : 8, t, v, n, SPI_OK_UPDATE);
	if (c->last)
	{
		SgExec("DELETE FROM streamguard.capture_claim WHERE capture_id OPERATOR(pg_catalog.=) $1",
			   1, t, v, NULL, SPI_OK_DELETE);
		CaptureInvalidate(def->relid);
	}
}

/*
 * One chunk, in its own transaction (already started, SPI connected).
 */
SgChunkResult
CaptureBackfillChunk(int32 capture_id, int chunk, int *covered)
{
	SgCaptureDef *def;
	Relation	rel;
	SgCaptureRel *cr;
	SgUserSave	save;
	SgKeySql   *k;
	SgBackfillPos pos;
	SgBackfillRows c;
	SgChunkResult result;
	char	  **keys;
	Datum		key_now;

	*covered = 0;
	def = CaptureDefLoad(capture_id, true);
	if (def == NULL)
		return SG_CHUNK_GONE;
	if (def->backfill != SG_BACKFILL_PENDING && def->backfill != SG_BACKFILL_RUNNING)
		return SG_CHUNK_DONE;

	/* the table first, then the capture's row: the order DROP TABLE takes */
	LockRelationOid(def->relid, RowShareLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(def->relid)))
		return SG_CHUNK_GONE;
	SgBecomeDataOwner(&save, true);
	result = sg_backfill_position(capture_id, &pos);
	SgRestoreUser(&save);
	if (result != SG_CHUNK_MORE)
		return result;

	rel = table_open(def->relid, NoLock);
	k = sg_backfill_key(def, rel, &pos, &key_now);
	cr = CaptureRelGet(capture_id, rel);

	CaptureEnterTableOwner(CaptureRelTableOwner(cr), &save);
	/* a policy that hid rows from the owner would make the backfill incomplete: fail instead */
	(void) set_config_option("row_security", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	memset(&c, 0, sizeof(c));
	sg_backfill_select(rel, k, &pos, chunk, &c);
	keys = sg_backfill_collect(rel, cr, &c);
	if (c.nrows > 0)
		sg_backfill_unclaimed(capture_id, &c, keys);

	/* step 5: the events */
	CaptureEmitBackfill(cr, RelationGetDescr(rel), c.rows, c.xmins, c.nemit);
	CaptureLeaveTableOwner(&save);

	/* ... and the progress, in the same transaction */
	SgBecomeDataOwner(&save, true);
	sg_backfill_progress(capture_id, def, k, &pos, &c, key_now);
	SgRestoreUser(&save);
	table_close(rel, NoLock);
	*covered = c.nrows;
	elog(DEBUG1, "streamguard backfill of capture %d: %d rows, %d emitted, %lld before",
		 capture_id, c.nrows, c.nemit, (long long) pos.rows_done);
	return c.last ? SG_CHUNK_DONE : SG_CHUNK_MORE;
}
