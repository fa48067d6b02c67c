/*-------------------------------------------------------------------------
 *
 * capture_backfill_key.c
 *		The key a backfill walks a captured table by.  As SQL pieces
 *		(CaptureBackfillKeySql): the columns of the key's unique index, in
 *		index order, each compared with the index's own operators and
 *		collation, in the index's direction, for the predicates "after a
 *		key" and "at or before a key" and the ORDER BY of a chunk's
 *		statements (capture_chunk.c); no operator is looked up by name.  As
 *		the key's order (CaptureBackfillKey): one text per column, which the
 *		first chunk records as backfill_key and every later chunk and the
 *		DDL guard (capture_ddl.c) compare with the order now.
 *
 * Locking: the index is read under ACCESS SHARE; the caller holds a lock
 * on the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "capture/capture.h"
#include "capture/capture_int.h"

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
SgKeySql *
CaptureBackfillKeySql(Relation rel, Oid indexoid)
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
 * and the DDL guard (capture_ddl.c) compare: a position kept in one order and
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
void
CaptureBackfillKeyPredicate(StringInfo sql, SgKeySql *k, int first, bool after)
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

void
CaptureBackfillKeyOrder(StringInfo sql, SgKeySql *k, bool backward)
{
	int			i;

	appendStringInfoString(sql, " ORDER BY ");
	for (i = 0; i < k->n; i++)
		appendStringInfo(sql, "%s%s USING %s", i ? ", " : "", k->col[i], backward ? k->gt[i] : k->lt[i]);
}
