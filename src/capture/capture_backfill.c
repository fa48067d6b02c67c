/*-------------------------------------------------------------------------
 *
 * capture_backfill.c
 *		The backfill of a captured table: one event per row that existed
 *		before the capture, from MVCC snapshots, while the table is being
 *		written; and its supervision by the maintenance worker.
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
 * Waits are bounded: lock_timeout and a short deadlock_timeout (so that in
 * a deadlock with a writer the chunk, not the writer, is the one to fail);
 * a failed chunk is retried with half the rows, down to one, and its error
 * shown in streamguard.captures.  The table needs a unique index on the
 * key (capture_table checks); the scan uses its operators, collations and
 * column order, so no operator is looked up by name.
 *
 * SUPERVISION.  The maintenance worker (maintenance.c) calls
 * CaptureSuperviseBackfills every round: one backfill worker per capture
 * whose backfill is pending or running, at most
 * streamguard.max_backfill_workers at a time in the database, restarted
 * after a crash; and it deletes the claims of captures whose backfill is
 * over.  run_backfill_chunk runs the same chunk in the caller's
 * transaction.
 *
 * DDL.  Two things the argument relies on can be changed by DDL while a
 * backfill runs: a row version's xmin (every rewrite of the table, ALTER
 * TABLE ... TYPE or a volatile default, gives every row the rewriter's:
 * rows writers sent would no longer match their claims) and the key's
 * order (ALTER COLUMN ... TYPE or COLLATE of a key column, another unique
 * index taking over: the position, kept as text, would be compared in
 * another order).  capture.c's event triggers refuse both while the
 * backfill is not done; the first chunk records the key's order
 * (backfill_key) and every later chunk checks it, failing rather than
 * skipping or repeating rows should a change get through.  VACUUM FULL and
 * CLUSTER copy each row with its xmin (freezing marks a tuple frozen but
 * keeps the xmin the system column shows) and keep the key: allowed.
 *
 * WHY ONE FILE (about 1,000 lines).  The backfill's argument (chunks under
 * FOR SHARE, claims, the persisted progress) is one proof: the chunk
 * transaction, the claim lookups and the progress record must be read
 * together to see that no row version is emitted twice or missed.  The
 * worker's process code and its supervision are the rest.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/xact.h"
#include "fmgr.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

#include "capture/capture.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "shmem/worker_units.h"

PGDLLEXPORT void CaptureBackfillMain(Datum arg);

#define SG_BACKFILL_MAX_BACKOFF_MS	30000

int			sg_backfill_chunk_rows = 1000;
int			sg_backfill_naptime_ms = 0;
int			sg_max_backfill_workers = 2;

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

static char *
sg_operator(Oid opfamily, Oid type, int16 strategy)
{
	Oid			op = get_opfamily_member(opfamily, type, type, strategy);
	HeapTuple	tup;
	char	   *s;

	if (!OidIsValid(op))
		elog(ERROR, "operator family %u has no operator of strategy %d for type %u",
			 opfamily, strategy, type);
	tup = SearchSysCache1(OPEROID, ObjectIdGetDatum(op));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for operator %u", op);
	s = psprintf("OPERATOR(%s.%s)",
				 quote_identifier(get_namespace_name(((Form_pg_operator) GETSTRUCT(tup))->oprnamespace)),
				 NameStr(((Form_pg_operator) GETSTRUCT(tup))->oprname));
	ReleaseSysCache(tup);
	return s;
}

/*
 * The key as the unique index sees it: its columns in index order, each
 * compared with the index's own operators and collation, in the index's
 * direction.
 */
static SgKeySql *
sg_key_sql(Relation rel, Oid indexoid)
{
	Relation	irel = index_open(indexoid, AccessShareLock);
	int			n = IndexRelationGetNumberOfKeyAttributes(irel);
	SgKeySql   *k = palloc0(sizeof(SgKeySql));
	int			i;

	k->n = n;
	k->col = palloc(sizeof(char *) * n);
	k->gt = palloc(sizeof(char *) * n);
	k->ge = palloc(sizeof(char *) * n);
	k->lt = palloc(sizeof(char *) * n);
	k->le = palloc(sizeof(char *) * n);
	k->eq = palloc(sizeof(char *) * n);
	k->type = palloc(sizeof(Oid) * n);
	k->attnum = palloc(sizeof(AttrNumber) * n);
	for (i = 0; i < n; i++)
	{
		AttrNumber	attnum = irel->rd_index->indkey.values[i];
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
		Oid			opfamily = irel->rd_opfamily[i];
		Oid			opcintype = irel->rd_opcintype[i];
		Oid			coll = irel->rd_indcollation[i];
		bool		desc = (irel->rd_indoption[i] & INDOPTION_DESC) != 0;
		Oid			optype = opcintype;
		StringInfoData col;

		if (irel->rd_rel->relam != BTREE_AM_OID)
			elog(ERROR, "the key index of a captured table must be a btree index");
		initStringInfo(&col);
		appendStringInfo(&col, "t.%s", quote_identifier(NameStr(att->attname)));
		if (get_typtype(opcintype) == TYPTYPE_PSEUDO)
			optype = att->atttypid;
		else if (opcintype != att->atttypid)
			appendStringInfo(&col, "::%s", format_type_be_qualified(opcintype));
		if (OidIsValid(coll) && coll != att->attcollation)
		{
			HeapTuple	ct = SearchSysCache1(COLLOID, ObjectIdGetDatum(coll));

			if (!HeapTupleIsValid(ct))
				elog(ERROR, "cache lookup failed for collation %u", coll);
			appendStringInfo(&col, " COLLATE %s.%s",
							 quote_identifier(get_namespace_name(((Form_pg_collation) GETSTRUCT(ct))->collnamespace)),
							 quote_identifier(NameStr(((Form_pg_collation) GETSTRUCT(ct))->collname)));
			ReleaseSysCache(ct);
		}
		k->col[i] = psprintf("(%s)", col.data);
		k->gt[i] = sg_operator(opfamily, optype, desc ? BTLessStrategyNumber : BTGreaterStrategyNumber);
		k->ge[i] = sg_operator(opfamily, optype, desc ? BTLessEqualStrategyNumber : BTGreaterEqualStrategyNumber);
		k->lt[i] = sg_operator(opfamily, optype, desc ? BTGreaterStrategyNumber : BTLessStrategyNumber);
		k->le[i] = sg_operator(opfamily, optype, desc ? BTGreaterEqualStrategyNumber : BTLessEqualStrategyNumber);
		k->eq[i] = sg_operator(opfamily, optype, BTEqualStrategyNumber);
		k->type[i] = optype;
		k->attnum[i] = attnum;
	}
	index_close(irel, AccessShareLock);
	return k;
}

/*
 * The key as the backfill compares it, one text per column of the key's
 * unique index, in index order: the column (its number: a RENAME changes
 * nothing), its type, the index's collation,
 * operator family and direction, all by qualified name (so that a dump
 * and restore gives the same texts).  The backfill's position is a key in
 * this order; the first chunk records it (backfill_key), and a later chunk
 * and the DDL guard (capture.c) compare: a position kept in one order and
 * compared in another would skip or repeat rows.
 */
Datum
CaptureBackfillKey(Relation rel, Oid indexoid)
{
	Relation	irel = index_open(indexoid, AccessShareLock);
	int			n = IndexRelationGetNumberOfKeyAttributes(irel);
	Datum	   *texts = palloc(sizeof(Datum) * n);
	ArrayType  *arr;
	int			i;

	for (i = 0; i < n; i++)
	{
		AttrNumber	attnum = irel->rd_index->indkey.values[i];
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
		Oid			coll = irel->rd_indcollation[i];
		char	   *collname = "-";
		HeapTuple	tup;
		Form_pg_opfamily opf;
		char	   *text;

		if (OidIsValid(coll))
		{
			tup = SearchSysCache1(COLLOID, ObjectIdGetDatum(coll));
			if (!HeapTupleIsValid(tup))
				elog(ERROR, "cache lookup failed for collation %u", coll);
			collname = quote_qualified_identifier(get_namespace_name(((Form_pg_collation) GETSTRUCT(tup))->collnamespace),
												  NameStr(((Form_pg_collation) GETSTRUCT(tup))->collname));
			ReleaseSysCache(tup);
		}
		tup = SearchSysCache1(OPFAMILYOID, ObjectIdGetDatum(irel->rd_opfamily[i]));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for operator family %u", irel->rd_opfamily[i]);
		opf = (Form_pg_opfamily) GETSTRUCT(tup);
		text = psprintf("%d %s COLLATE %s USING %s %s", (int) attnum,
						format_type_be_qualified(att->atttypid), collname,
						quote_qualified_identifier(get_namespace_name(opf->opfnamespace),
												   NameStr(opf->opfname)),
						(irel->rd_indoption[i] & INDOPTION_DESC) ? "DESC" : "ASC");
		ReleaseSysCache(tup);
		texts[i] = CStringGetTextDatum(text);
	}
	index_close(irel, AccessShareLock);
	arr = construct_array(texts, n, TEXTOID, -1, false, TYPALIGN_INT);
	return PointerGetDatum(arr);
}

/* a key text (a text[] datum) for a message: its elements, comma-separated */
char *
CaptureBackfillKeyText(Datum key)
{
	Datum	   *e;
	int			n,
				i;
	StringInfoData buf;

	initStringInfo(&buf);
	deconstruct_array(DatumGetArrayTypeP(key), TEXTOID, -1, false, TYPALIGN_INT, &e, NULL, &n);
	for (i = 0; i < n; i++)
		appendStringInfo(&buf, "%s%s", i ? ", " : "", TextDatumGetCString(e[i]));
	return buf.data;
}

/* whether two key texts (text[] datums, as CaptureBackfillKey gives) are one */
bool
CaptureBackfillKeySame(Datum a, Datum b)
{
	Datum	   *ea,
			   *eb;
	int			na,
				nb,
				i;

	deconstruct_array(DatumGetArrayTypeP(a), TEXTOID, -1, false, TYPALIGN_INT, &ea, NULL, &na);
	deconstruct_array(DatumGetArrayTypeP(b), TEXTOID, -1, false, TYPALIGN_INT, &eb, NULL, &nb);
	if (na != nb)
		return false;
	for (i = 0; i < na; i++)
		if (strcmp(TextDatumGetCString(ea[i]), TextDatumGetCString(eb[i])) != 0)
			return false;
	return true;
}

/*
 * A predicate over the key and parameters $first..: strictly after them
 * in index order (after = true), or at or before them.
 */
static void
sg_key_predicate(StringInfo sql, SgKeySql *k, int first, bool after)
{
	int			j,
				i;

	appendStringInfo(sql, "%s %s $%d AND (", k->col[0], after ? k->ge[0] : k->le[0], first);
	for (j = 0; j < k->n; j++)
	{
		appendStringInfoString(sql, j ? " OR (" : "(");
		for (i = 0; i < j; i++)
			appendStringInfo(sql, "%s %s $%d AND ", k->col[i], k->eq[i], first + i);
		appendStringInfo(sql, "%s %s $%d)", k->col[j], after ? k->gt[j] : k->lt[j], first + j);
	}
	if (!after)
	{
		/* or equal */
		appendStringInfoString(sql, " OR (");
		for (i = 0; i < k->n; i++)
			appendStringInfo(sql, "%s%s %s $%d", i ? " AND " : "", k->col[i], k->eq[i], first + i);
		appendStringInfoChar(sql, ')');
	}
	appendStringInfoChar(sql, ')');
}

static void
sg_key_order(StringInfo sql, SgKeySql *k, bool backward)
{
	int			i;

	appendStringInfoString(sql, " ORDER BY ");
	for (i = 0; i < k->n; i++)
		appendStringInfo(sql, "%s%s USING %s", i ? ", " : "", k->col[i], backward ? k->gt[i] : k->lt[i]);
}

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
	 * changes that order is refused while the backfill runs (capture.c).
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
	k = sg_key_sql(rel, indexoid);
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
		sg_key_order(&sql, k, true);
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
		sg_key_predicate(&sql, k, 1, true);
		appendStringInfoString(&sql, " AND ");
	}
	sg_key_predicate(&sql, k, nafter + 1, false);
	sg_key_params(k, pos->until, values + nafter, types + nafter);
	sg_key_order(&sql, k, false);
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
		sg_key_predicate(&sql, k, 1, true);
		appendStringInfoString(&sql, " AND ");
	}
	sg_key_predicate(&sql, k, nafter + 1, false);
	sg_key_params(k, c->hi, values + nafter, types + nafter);
	sg_key_order(&sql, k, false);
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
static SgChunkResult
sg_backfill_chunk(int32 capture_id, int chunk, int *covered)
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

/* record a failed chunk's error where streamguard.captures shows it */
static void
sg_record_error(int32 capture_id, const char *message)
{
	MemoryContext oldcxt = CurrentMemoryContext;

	PG_TRY();
	{
		Oid			t[2] = {INT4OID, TEXTOID};
		Datum		v[2] = {Int32GetDatum(capture_id), CStringGetTextDatum(message)};

		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		SgExec("UPDATE streamguard.capture SET backfill_error = $2 WHERE id OPERATOR(pg_catalog.=) $1",
			   2, t, v, NULL, SPI_OK_UPDATE);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
}

static void
sg_nap(long ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
					 sg_wait_event(SG_WE_BACKFILL));
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Name the worker after the table it backfills, as the pipeline and
 * maintenance workers are named (SgSetWorkerTitle): "streamguard backfill
 * public.orders", or "... capture <id>" once the capture is gone.
 */
static void
sg_backfill_title(int32 capture_id)
{
	SgCaptureDef *def;
	char	   *title = NULL;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	def = CaptureDefLoad(capture_id, true);
	if (def != NULL)
	{
		char	   *rel = get_rel_name(def->relid);
		char	   *nsp = get_namespace_name(get_rel_namespace(def->relid));

		if (rel != NULL && nsp != NULL)
			title = MemoryContextStrdup(TopMemoryContext,
										psprintf("streamguard backfill %s",
												 quote_qualified_identifier(nsp, rel)));
	}
	if (title == NULL)
		title = MemoryContextStrdup(TopMemoryContext,
									psprintf("streamguard backfill capture %d", capture_id));
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	SgSetWorkerTitle(title);
}

void
CaptureBackfillMain(Datum arg)
{
	int32		capture_id = DatumGetInt32(arg);
	Oid			dbid;
	MemoryContext chunk_cxt;
	int			chunk = sg_backfill_chunk_rows;
	int			failures = 0;

	memcpy(&dbid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	SgHardenWorkerSession();
	sg_backfill_title(capture_id);
	chunk_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard backfill chunk",
									  ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		volatile SgChunkResult result = SG_CHUNK_MORE;
		volatile bool failed = false;
		int			covered;
		MemoryContext oldcxt;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			chunk = Min(chunk, sg_backfill_chunk_rows);
		}
		MemoryContextReset(chunk_cxt);
		oldcxt = MemoryContextSwitchTo(chunk_cxt);
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PG_TRY();
		{
			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "SPI_connect failed");
			PushActiveSnapshot(GetTransactionSnapshot());
			pgstat_report_activity(STATE_RUNNING, "streamguard backfill chunk");
			/* bounded waits; in a deadlock with a writer, the chunk gives way */
			(void) set_config_option("lock_timeout", "1s", PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
			(void) set_config_option("deadlock_timeout", "100ms", PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
			result = sg_backfill_chunk(capture_id, chunk, &covered);
			SPI_finish();
			PopActiveSnapshot();
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(chunk_cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			ereport(LOG,
					(errmsg("streamguard backfill of capture %d: chunk of %d rows failed: %s",
							capture_id, chunk, edata->message)));
			sg_record_error(capture_id, edata->message);
			failed = true;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(oldcxt);
		pgstat_report_activity(STATE_IDLE, NULL);

		if (failed)
		{
			/* smaller chunks wait on fewer rows; back off exponentially */
			chunk = Max(1, chunk / 2);
			failures++;
			sg_nap(Min(100L << Min(failures, 10), SG_BACKFILL_MAX_BACKOFF_MS));
			continue;
		}
		failures = 0;
		if (result != SG_CHUNK_MORE)
			break;
		chunk = Min(sg_backfill_chunk_rows, chunk * 2);
		if (sg_backfill_naptime_ms > 0)
			sg_nap(sg_backfill_naptime_ms);
	}
	proc_exit(0);
}

/* ------------------------------------------------------------ supervisor */

typedef struct SgBackfillWorker
{
	int32		capture_id;
	BackgroundWorkerHandle *handle;
	int			starts;			/* starts without finishing, for the backoff */
	TimestampTz next_start;
	bool		seen;
	bool		waiting;		/* a worker-unit cap keeps it waiting (logged) */
} SgBackfillWorker;

static List *sg_backfill_workers = NIL;	/* in TopMemoryContext */

/* backfill workers of this database that are still running */
static int
sg_live_backfill_workers(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, sg_backfill_workers)
	{
		SgBackfillWorker *w = lfirst(lc);
		pid_t		pid;

		if (w->handle != NULL && GetBackgroundWorkerPid(w->handle, &pid) != BGWH_STOPPED)
			n++;
	}
	return n;
}

/*
 * One backfill worker per capture whose backfill is pending or running.
 * Runs in the maintenance worker, in a transaction, SPI connected.
 */
void
CaptureSuperviseBackfills(void)
{
	ListCell   *lc;
	uint64		i;
	TimestampTz now = GetCurrentTimestamp();
	List	   *keep = NIL;
	MemoryContext old;

	/* a database still on the 0.1 schema (before ALTER EXTENSION UPDATE) has no captures */
	if (!SgCatalogHas("capture_claim"))
		return;

	/* claims of backfills that are over: writers that had not yet seen it */
	if (SPI_execute("DELETE FROM streamguard.capture_claim WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
					"SELECT cl.ctid FROM streamguard.capture c JOIN streamguard.capture_claim cl "
					"ON cl.capture_id OPERATOR(pg_catalog.=) c.id "
					"WHERE c.backfill_state OPERATOR(pg_catalog.=) ANY ('{none,done}') LIMIT 10000))",
					false, 0) != SPI_OK_DELETE)
		elog(ERROR, "claim cleanup failed");

	if (SPI_execute("SELECT id, owner FROM streamguard.capture "
					"WHERE backfill_state OPERATOR(pg_catalog.=) ANY ('{pending,running}') ORDER BY id",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "capture list failed");
	foreach(lc, sg_backfill_workers)
		((SgBackfillWorker *) lfirst(lc))->seen = false;

	old = MemoryContextSwitchTo(TopMemoryContext);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		Oid			owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		SgBackfillWorker *w = NULL;
		char		why[128];
		pid_t		pid;

		foreach(lc, sg_backfill_workers)
			if (((SgBackfillWorker *) lfirst(lc))->capture_id == id)
				w = lfirst(lc);
		if (w == NULL)
		{
			w = palloc0(sizeof(SgBackfillWorker));
			w->capture_id = id;
			sg_backfill_workers = lappend(sg_backfill_workers, w);
		}
		w->seen = true;
		if (w->handle != NULL && GetBackgroundWorkerPid(w->handle, &pid) != BGWH_STOPPED)
			continue;
		if (w->handle != NULL)
		{
			/* it stopped with work left: crashed or killed */
			pfree(w->handle);
			w->handle = NULL;
			WorkerUnitRelease(SG_UNIT_BACKFILL, id, 0);
			w->next_start = now + Min((int64) 250000 << Min(w->starts, 7), 30 * USECS_PER_SEC);
		}
		if (w->next_start > now)
			continue;
		if (sg_live_backfill_workers() >= sg_max_backfill_workers)
			continue;
		{
			char		name[BGW_MAXLEN];

			snprintf(name, sizeof(name), "streamguard backfill %d", id);
			/* a worker unit first (worker_units.c): the caps are server-wide */
			if (!WorkerUnitClaim(SG_UNIT_BACKFILL, owner, id, 0, why, sizeof(why)))
			{
				if (!w->waiting)
					ereport(LOG,
							(errmsg("%s waits for a worker slot: %s", name, why)));
				w->waiting = true;
				continue;
			}
			w->waiting = false;
			w->handle = SgStartDynamicWorker("CaptureBackfillMain", "streamguard backfill", name,
											 Int32GetDatum(id), MyDatabaseId);
			if (w->handle != NULL)
				w->starts++;
			else
				WorkerUnitRelease(SG_UNIT_BACKFILL, id, 0);
		}
	}

	/* backfills that are over or gone: their workers exit by themselves */
	foreach(lc, sg_backfill_workers)
	{
		SgBackfillWorker *w = lfirst(lc);
		pid_t		pid;

		if (w->seen || (w->handle != NULL && GetBackgroundWorkerPid(w->handle, &pid) != BGWH_STOPPED))
			keep = lappend(keep, w);
		else
		{
			if (w->handle)
			{
				pfree(w->handle);
				WorkerUnitRelease(SG_UNIT_BACKFILL, w->capture_id, 0);
			}
			pfree(w);
		}
	}
	list_free(sg_backfill_workers);
	sg_backfill_workers = keep;
	MemoryContextSwitchTo(old);
}

/* ------------------------------------------------------------ by hand */

PG_FUNCTION_INFO_V1(sg_run_backfill_chunk);

/*
 * run_backfill_chunk(tab, stream, max_rows) -> rows the chunk covered (0:
 * the backfill is over): one chunk of a capture's backfill in the
 * caller's transaction, which must be READ COMMITTED (each statement of
 * the chunk needs a fresh snapshot; the argument at the top of this file
 * depends on it).  For streamguard.max_backfill_workers = 0 (backfills
 * driven from outside), and for tests that interleave a chunk with
 * writers.  The capture's owner, the table's owner or a superuser.
 */
Datum
sg_run_backfill_chunk(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *stream;
	int32		max_rows;
	int32		capture_id;
	Oid			owner;
	SgUserSave	save;
	int			covered = 0;
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	SgTableStreamArgs(fcinfo, "run_backfill_chunk", true, &relid, &stream);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_rows must not be NULL")));
	max_rows = PG_GETARG_INT32(2);
	if (max_rows < 1 || max_rows > SG_MAX_BACKFILL_ROWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be between 1 and %d, got %d", SG_MAX_BACKFILL_ROWS, max_rows)));
	if (XactIsoLevel != XACT_READ_COMMITTED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("run_backfill_chunk must run in a READ COMMITTED transaction"),
				 errdetail("Each statement of a chunk needs a snapshot of its own.")));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(stream);
	SgEnterCatalog(&save);
	SgExec("SELECT c.id, c.owner FROM streamguard.capture c "
		   "JOIN streamguard.stream s ON s.id OPERATOR(pg_catalog.=) c.stream_id "
		   "WHERE c.relid::pg_catalog.oid OPERATOR(pg_catalog.=) $1 AND s.name OPERATOR(pg_catalog.=) $2",
		   2, types, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table \"%s\" is not captured into stream \"%s\"",
						get_rel_name(relid) ? get_rel_name(relid) : "?", stream)));
	capture_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SgRestoreUser(&save);
	if (!superuser() && !has_privs_of_role(GetUserId(), owner) && !pg_class_ownercheck(relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to run the backfill of table \"%s\"", get_rel_name(relid)),
				 errdetail("The owner of the capture or of the table may.")));
	(void) sg_backfill_chunk(capture_id, max_rows, &covered);
	SPI_finish();
	PG_RETURN_INT32(covered);
}
