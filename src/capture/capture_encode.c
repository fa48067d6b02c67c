/*-------------------------------------------------------------------------
 *
 * capture_encode.c
 *		A captured row as JSON: column values, the event key and the
 *		event payload, the same bytes in every session.
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
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "common/hashfn.h"
#include "common/shortest_dec.h"
#include "utils/builtins.h"
#include "utils/json.h"

#include "capture/capture.h"
#include "capture/capture_int.h"
#include "core/compat.h"


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
			pg_fallthrough;
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
JsonbValue *
CaptureEncode(SgColEnc *cols, int n, TupleDesc rdesc, HeapTuple tuple)
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
char *
CaptureKeyFromValues(SgCaptureRel *cr, JsonbValue *keys)
{
	SgJsonbState st = SG_JSONB_STATE_INIT;
	JsonbValue *arr;
	StringInfoData buf;
	int			i;

	if (cr->nkeys == 1)
		return sg_json_value_text(&keys[0]);
	sg_push_jsonb(&st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < cr->nkeys; i++)
		sg_push_jsonb(&st, WJB_ELEM, &keys[i]);
	arr = sg_push_jsonb(&st, WJB_END_ARRAY, NULL);
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
	return CaptureKeyFromValues(cr, CaptureEncode(cr->keys, cr->nkeys, rdesc, tuple));
}


/* payload building */
static void
sg_push_key(SgJsonbState *st, const char *k)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) k;
	v.val.string.len = strlen(k);
	sg_push_jsonb(st, WJB_KEY, &v);
}

static void
sg_push_string(SgJsonbState *st, const char *s, JsonbIteratorToken tok)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) s;
	v.val.string.len = strlen(s);
	sg_push_jsonb(st, tok, &v);
}

/* an object of the columns' values under key k */
static void
sg_push_object(SgJsonbState *st, const char *k, SgColEnc *cols, JsonbValue *vals, int n)
{
	int			i;

	sg_push_key(st, k);
	sg_push_jsonb(st, WJB_BEGIN_OBJECT, NULL);
	for (i = 0; i < n; i++)
	{
		sg_push_key(st, cols[i].name);
		sg_push_jsonb(st, WJB_VALUE, &vals[i]);
	}
	sg_push_jsonb(st, WJB_END_OBJECT, NULL);
}

Jsonb *
CapturePayload(SgCaptureRel *cr, const SgPayload *p)
{
	SgJsonbState st = SG_JSONB_STATE_INIT;
	JsonbValue *res;

	sg_push_jsonb(&st, WJB_BEGIN_OBJECT, NULL);
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
		sg_push_jsonb(&st, WJB_BEGIN_ARRAY, NULL);
		foreach(lc, p->changed)
			sg_push_string(&st, lfirst(lc), WJB_ELEM);
		sg_push_jsonb(&st, WJB_END_ARRAY, NULL);
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
		sg_push_jsonb(&st, WJB_VALUE, &v);
	}
	res = sg_push_jsonb(&st, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

