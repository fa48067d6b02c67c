/*-------------------------------------------------------------------------
 *
 * sink_kafka_messages.c
 *		A Kafka sink's rows as messages.
 *
 * The SELECT's columns are the message: value (jsonb, json, text or bytea;
 * NULL: a tombstone), and optionally key (any type, as text; bytea raw),
 * headers (a jsonb object: name -> a scalar, NULL for a header without a
 * value) and partition (an integer; NULL or absent: librdkafka's
 * partitioner, by key).  KafkaSinkCheckShape checks that at create_pipeline
 * and when the worker starts.  The rows go from the executor straight into
 * the producer through a DestReceiver (KafkaSinkProduceRows): none is
 * materialized, each message is copied into librdkafka's queue as it
 * comes.  What the messages are part of -- a Kafka transaction with a
 * checkpoint, or messages each acknowledged -- is sink_kafka.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "io/kafka.h"
#include "pipeline/sink_kafka.h"

/* which output column is which (-1: absent) */
typedef struct SgKafkaCols
{
	int			key;
	int			value;
	int			headers;
	int			partition;
} SgKafkaCols;


/*
 * The output columns of a Kafka sink's SELECT: value required, key,
 * headers and partition optional, nothing else.  Raises the error.
 */
static void
sg_shape(TupleDesc desc, SgKafkaCols *cols)
{
	int			i;

	cols->key = cols->value = cols->headers = cols->partition = -1;
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);
		const char *name = NameStr(a->attname);
		int		   *slot;

		if (a->attisdropped)
			continue;
		if (strcmp(name, "key") == 0)
			slot = &cols->key;
		else if (strcmp(name, "value") == 0)
			slot = &cols->value;
		else if (strcmp(name, "headers") == 0)
			slot = &cols->headers;
		else if (strcmp(name, "partition") == 0)
			slot = &cols->partition;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
					 errmsg("the SELECT of a Kafka sink returns column \"%s\"", name),
					 errdetail("Its columns are value, and optionally key, headers and partition."),
					 errhint("Name each output column with AS.")));
		if (*slot >= 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("the SELECT of a Kafka sink returns column \"%s\" twice", name)));
		*slot = i;
		if (slot == &cols->value && a->atttypid != JSONBOID && a->atttypid != JSONOID &&
			a->atttypid != TEXTOID && a->atttypid != VARCHAROID && a->atttypid != BYTEAOID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"value\" of a Kafka sink must be jsonb, json, text or bytea, not %s",
							format_type_be(a->atttypid)),
					 errhint("Cast it, or build the JSON with to_jsonb() or jsonb_build_object().")));
		if (slot == &cols->headers && a->atttypid != JSONBOID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"headers\" of a Kafka sink must be jsonb, not %s",
							format_type_be(a->atttypid)),
					 errhint("A jsonb object: header name -> value.")));
		if (slot == &cols->partition && a->atttypid != INT2OID && a->atttypid != INT4OID &&
			a->atttypid != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"partition\" of a Kafka sink must be an integer, not %s",
							format_type_be(a->atttypid))));
	}
	if (cols->value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("the SELECT of a Kafka sink has no column \"value\""),
				 errhint("Return the message as a column named value, e.g. SELECT to_jsonb(b) AS value FROM batch b.")));
}

/* the SQL of a Kafka sink: a single SELECT over the batch of the right shape */
void
KafkaSinkCheckShape(const char *sql)
{
	TupleDesc	desc = PipelineOutputDesc(sql);
	SgKafkaCols cols;

	if (desc == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the SQL of a pipeline with a Kafka sink must be a single SELECT"),
				 errhint("Its rows become the messages: SELECT key, value, headers, partition FROM batch.")));
	sg_shape(desc, &cols);
}

/* a value's bytes: bytea raw, anything else through its output function */
static const char *
sg_bytes(Datum d, Oid type, FmgrInfo *out, size_t *len)
{
	if (type == BYTEAOID)
	{
		bytea	   *b = DatumGetByteaPP(d);

		*len = VARSIZE_ANY_EXHDR(b);
		return VARDATA_ANY(b);
	}
	else
	{
		char	   *s = OutputFunctionCall(out, d);

		*len = strlen(s);
		return s;
	}
}

/* a jsonb object as message headers (NULL when it is empty) */
static rd_kafka_headers_t *
sg_headers(Jsonb *jb)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	rd_kafka_headers_t *hdrs;
	char	   *name = NULL;

	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column \"headers\" of a Kafka sink must be a jsonb object")));
	if (JB_ROOT_COUNT(jb) == 0)
		return NULL;
	hdrs = rd_kafka_headers_new(JB_ROOT_COUNT(jb));
	PG_TRY();
	{
		it = JsonbIteratorInit(&jb->root);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			char	   *value = NULL;
			size_t		len = 0;

			if (tok == WJB_KEY)
			{
				name = pnstrdup(v.val.string.val, v.val.string.len);
				continue;
			}
			if (tok != WJB_VALUE)
				continue;
			switch (v.type)
			{
				case jbvNull:
					break;
				case jbvString:
					value = v.val.string.val;
					len = v.val.string.len;
					break;
				case jbvNumeric:
					value = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v.val.numeric)));
					len = strlen(value);
					break;
				case jbvBool:
					value = v.val.boolean ? "true" : "false";
					len = strlen(value);
					break;
				default:
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("header \"%s\" of a Kafka sink's message is not a scalar", name ? name : "")));
			}
			rd_kafka_header_add(hdrs, name, -1, value, value ? (ssize_t) len : 0);
		}
	}
	PG_CATCH();
	{
		rd_kafka_headers_destroy(hdrs);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return hdrs;
}

/*
 * The SELECT's rows go straight into the producer: a DestReceiver, so
 * that no row is materialized in SPI_tuptable (each message is copied
 * into librdkafka's queue as it comes).
 */
typedef struct SgKafkaDest
{
	DestReceiver pub;
	const char *topic;
	uint32		wait_event;
	SgKafka    *producer;
	SgKafkaCols cols;
	FmgrInfo	out_key;
	FmgrInfo	out_value;
	Oid			key_type;
	Oid			value_type;
	Oid			partition_type;
	MemoryContext row_cxt;		/* reset after each row */
	uint64		rows;
} SgKafkaDest;

static void
sg_dest_startup(DestReceiver *self, int operation, TupleDesc desc)
{
	SgKafkaDest *d = (SgKafkaDest *) self;
	Oid			fn;
	bool		varlena;

	sg_shape(desc, &d->cols);
	d->value_type = TupleDescAttr(desc, d->cols.value)->atttypid;
	getTypeOutputInfo(d->value_type, &fn, &varlena);
	fmgr_info(fn, &d->out_value);
	d->key_type = InvalidOid;
	if (d->cols.key >= 0)
	{
		d->key_type = TupleDescAttr(desc, d->cols.key)->atttypid;
		getTypeOutputInfo(d->key_type, &fn, &varlena);
		fmgr_info(fn, &d->out_key);
	}
	d->partition_type = d->cols.partition >= 0 ? TupleDescAttr(desc, d->cols.partition)->atttypid : InvalidOid;
	d->row_cxt = AllocSetContextCreate(CurrentMemoryContext, "streamguard kafka row", ALLOCSET_SMALL_SIZES);
}

static bool
sg_dest_receive(TupleTableSlot *slot, DestReceiver *self)
{
	SgKafkaDest *d = (SgKafkaDest *) self;
	MemoryContext old = MemoryContextSwitchTo(d->row_cxt);
	bool		isnull;
	Datum		v;
	const char *key = NULL;
	const char *value = NULL;
	size_t		key_len = 0,
				value_len = 0;
	int32		partition = -1;
	rd_kafka_headers_t *hdrs = NULL;

	if (d->cols.key >= 0)
	{
		v = slot_getattr(slot, d->cols.key + 1, &isnull);
		if (!isnull)
			key = sg_bytes(v, d->key_type, &d->out_key, &key_len);
	}
	v = slot_getattr(slot, d->cols.value + 1, &isnull);
	if (!isnull)
		value = sg_bytes(v, d->value_type, &d->out_value, &value_len);
	if (d->cols.partition >= 0)
	{
		v = slot_getattr(slot, d->cols.partition + 1, &isnull);
		if (!isnull)
		{
			int64		p;

			switch (d->partition_type)
			{
				case INT2OID:
					p = DatumGetInt16(v);
					break;
				case INT4OID:
					p = DatumGetInt32(v);
					break;
				default:
					p = DatumGetInt64(v);
					break;
			}
			if (p < 0 || p > PG_INT32_MAX)
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("partition %lld of a Kafka sink's message is out of range", (long long) p)));
			partition = (int32) p;
		}
	}
	if (d->cols.headers >= 0)
	{
		v = slot_getattr(slot, d->cols.headers + 1, &isnull);
		if (!isnull)
			hdrs = sg_headers(DatumGetJsonbP(v));
	}
	KafkaProduce(d->producer, d->topic, partition, key, key_len, value, value_len, hdrs,
				 d->wait_event);
	d->rows++;
	MemoryContextSwitchTo(old);
	MemoryContextReset(d->row_cxt);
	return true;
}

static void
sg_dest_shutdown(DestReceiver *self)
{
}

static void
sg_dest_destroy(DestReceiver *self)
{
}

/*
 * Run the pipeline's SELECT over the batch as the owner; its rows go into
 * `producer` as they come (in the open Kafka transaction, or as
 * idempotent messages).  Returns the rows produced.
 */
int64
KafkaSinkProduceRows(SgWorker *w, SgKafka *producer, Tuplestorestate *store, int64 n, uint32 wait_event)
{
	SgOwnerContext ctx;
	SPIPlanPtr	plan;
	SPIExecuteOptions opts;
	SgKafkaDest dest;
	int64		rows;
	int			ret;

	pgstat_report_activity(STATE_RUNNING, "produce to Kafka");
	memset(&dest, 0, sizeof(dest));
	dest.pub.receiveSlot = sg_dest_receive;
	dest.pub.rStartup = sg_dest_startup;
	dest.pub.rShutdown = sg_dest_shutdown;
	dest.pub.rDestroy = sg_dest_destroy;
	dest.pub.mydest = DestTuplestore;	/* anything but DestNone: a SELECT */
	dest.topic = w->def.sink_table;
	dest.wait_event = wait_event;
	dest.producer = producer;
	memset(&opts, 0, sizeof(opts));
	opts.read_only = true;
	opts.dest = &dest.pub;
	plan = BatchOwnerEnter(w, &ctx, store, n);
	ret = SPI_execute_plan_extended(plan, &opts);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "the SQL of pipeline \"%s\" must return rows: %s", w->def.name, SPI_result_code_string(ret));
	rows = (int64) dest.rows;
	BatchLeaveOwner(&ctx);
	return rows;
}
