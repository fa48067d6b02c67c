/*-------------------------------------------------------------------------
 *
 * source_kafka_messages.c
 *		A Kafka source's messages as rows of relation "batch".
 *
 * The relation "batch" of a Kafka source has the stream's six columns —
 * partition, seq (the Kafka offset), key, payload (jsonb), dedup_key
 * (NULL), appended_at (the message's timestamp) — and two more: topic and
 * headers (a jsonb object, the last value of a repeated header name).  A
 * message whose key, headers or value is not valid JSON text (or not
 * UTF-8) is malformed: it never reaches the SQL and meets the error policy
 * at once — stop fails the pipeline, skip counts it, dead_letter stores it
 * (the value as a JSON string) in the batch's transaction, which moves the
 * offsets past it (source_kafka.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog/pipeline_catalog.h"
#include "core/compat.h"
#include "io/kafka.h"
#include "pipeline/source_kafka.h"
#include "pipeline/worker.h"

/* NUL-terminated text in the database encoding, or NULL if it is not valid UTF-8 */
static char *
sg_text(const void *data, size_t len)
{
	char	   *copy;

	if (len > MaxAllocSize - 1 || !pg_verify_mbstr(PG_UTF8, data, (int) len, true))
		return NULL;
	copy = palloc(len + 1);
	memcpy(copy, data, len);
	copy[len] = '\0';
	return pg_any_to_server(copy, (int) len, PG_UTF8);
}

/* why `json` is not valid JSON, or NULL */
static char *
sg_json_error(char *json)
{
	JsonLexContext *lex = makeJsonLexContextCstringLen(json, strlen(json), GetDatabaseEncoding(), true);
	JsonParseErrorType err = pg_parse_json(lex, &nullSemAction);

	if (err == JSON_SUCCESS)
		return NULL;
	return json_errdetail(err, lex);
}

static char *
sg_headers_json(rd_kafka_message_t *m, bool *bad)
{
	rd_kafka_headers_t *hdrs;
	StringInfoData buf;
	size_t		i;
	const char *name;
	const void *value;
	size_t		size;

	*bad = false;
	if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR || rd_kafka_header_cnt(hdrs) == 0)
		return NULL;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
	{
		char	   *n = sg_text(name, strlen(name));
		char	   *v = value ? sg_text(value, size) : NULL;

		if (n == NULL || (value && v == NULL))
		{
			*bad = true;
			return NULL;
		}
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, n);
		appendStringInfoString(&buf, ": ");
		if (v)
			escape_json(&buf, v);
		else
			appendStringInfoString(&buf, "null");
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static Datum
sg_timestamp(rd_kafka_message_t *m, bool *isnull)
{
	rd_kafka_timestamp_type_t type;
	int64		ms = rd_kafka_message_timestamp(m, &type);

	*isnull = ms < 0 || type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
	if (*isnull)
		return (Datum) 0;
	return TimestampTzGetDatum(ms * 1000 -
							   ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC));
}

/* a text as a jsonb string, as to_jsonb(text) makes it */
static Datum
sg_json_string(const char *s)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) s;
	v.val.string.len = strlen(s);
	return JsonbPGetDatum(JsonbValueToJsonb(&v));
}

static void
sg_kafka_dead_letter(SgWorker *w, rd_kafka_message_t *m, const char *key, const char *raw, const char *error)
{
	Datum		ev[6];
	bool		isnull[6] = {false, false, key == NULL, raw == NULL, true, false};

	ev[0] = Int32GetDatum(m->partition);
	ev[1] = Int64GetDatum(m->offset);
	ev[2] = key ? CStringGetTextDatum(key) : (Datum) 0;
	/* the value as a JSON string (what to_jsonb makes of a text): the SQL never saw it as JSON */
	ev[3] = raw ? sg_json_string(raw) : (Datum) 0;
	ev[4] = (Datum) 0;
	ev[5] = sg_timestamp(m, &isnull[5]);
	DeadLetterInsert(w->def.id, w->def.name, ev, isnull, error, "22P02");
}

/*
 * One message into the batch: 1 when it went in, 0 when it is malformed
 * and the error policy took it (skip, dead_letter); raises nothing for
 * malformed input except under stop, where w->stop_error is set and -1
 * returned.
 */
int
KafkaSourcePutMessage(SgWorker *w, rd_kafka_message_t *m, Tuplestorestate *store)
{
	Datum		v[8];
	bool		n[8];
	char	   *key = NULL;
	char	   *payload = NULL;
	char	   *headers;
	char	   *why = NULL;
	bool		bad_headers;

	memset(n, 0, sizeof(n));
	if (m->key)
	{
		key = sg_text(m->key, m->key_len);
		if (key == NULL)
			why = "the key is not valid UTF-8 text";
	}
	headers = sg_headers_json(m, &bad_headers);
	if (bad_headers && why == NULL)
		why = "a header is not valid UTF-8 text";
	if (m->payload)
	{
		payload = sg_text(m->payload, m->len);
		if (payload == NULL && why == NULL)
			why = "the value is not valid UTF-8 text";
		else if (payload && why == NULL)
		{
			char	   *detail = sg_json_error(payload);

			if (detail)
				why = psprintf("the value is not valid JSON: %s", detail);
		}
	}
	if (why)
	{
		char	   *error = psprintf("malformed message at offset %lld of partition %d of topic \"%s\": %s",
									 (long long) m->offset, (int) m->partition, w->def.remote_stream, why);

		switch (w->def.policy)
		{
			case SG_POLICY_STOP:
				w->stop_error = MemoryContextStrdup(TopMemoryContext, error);
				return -1;
			case SG_POLICY_SKIP:
				ereport(LOG, (errmsg("streamguard pipeline \"%s\": skipped %s", w->def.name, error)));
				w->batch_skipped++;
				return 0;
			case SG_POLICY_DEAD_LETTER:
				sg_kafka_dead_letter(w, m, key, payload, error);
				w->batch_dead++;
				return 0;
		}
	}
	v[0] = Int32GetDatum(m->partition);
	v[1] = Int64GetDatum(m->offset);
	v[2] = key ? CStringGetTextDatum(key) : (Datum) 0;
	n[2] = key == NULL;
	v[3] = payload ? DirectFunctionCall1(jsonb_in, CStringGetDatum(payload)) : (Datum) 0;
	n[3] = payload == NULL;		/* a tombstone */
	n[4] = true;
	v[5] = sg_timestamp(m, &n[5]);
	v[6] = CStringGetTextDatum(w->def.remote_stream);
	v[7] = headers ? DirectFunctionCall1(jsonb_in, CStringGetDatum(headers)) : (Datum) 0;
	n[7] = headers == NULL;
	tuplestore_putvalues(store, w->event_desc, v, n);
	return 1;
}

