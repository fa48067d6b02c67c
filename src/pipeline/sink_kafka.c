/*-------------------------------------------------------------------------
 *
 * sink_kafka.c
 *		A Kafka topic as a pipeline's sink: the rows of its SELECT over
 *		each batch become messages, exactly once through a transactional
 *		producer and a checkpoint kept in Kafka, or at least once through
 *		an idempotent producer.
 *
 * The SELECT's columns are the message (sink_kafka_messages.c, which
 * produces the rows as they come and checks the SELECT's shape at
 * create_pipeline and when the worker starts).  This file is the routine:
 * the producer, its transactions, the checkpoints and the recovery from
 * them.  Its state (SgKafkaSink) is the producer and what it knows.
 *
 * exactly_once.  The producer's transactional.id is "streamguard-" and the
 * pipeline's sink key (system identifier, installation, database,
 * pipeline: stable across restarts).  Each worker incarnation calls
 * init_transactions once, which makes the transaction coordinator abort
 * whatever an earlier producer of the same id left open and fence that
 * producer (PRODUCER_FENCED), on top of the pipeline's epoch fence here.
 * A batch, inside its local transaction T1 (fenced, positions moved by
 * the fetch):
 *	1. the positions before the fetch are noted (the routine's before_fetch);
 *	2. one Kafka transaction: the rows, then a checkpoint record in the
 *	   topic streamguard_checkpoints, partition 0, key the transactional
 *	   id, value {batch, from, to, events, rows} (batch: the pipeline's
 *	   batch counter after this batch; from/to: the positions before and
 *	   after it, a local consumer's or the remote ones); then the source's
 *	   events are made durable here (HorizonMakeDurable, while the produce
 *	   requests are in flight: nothing becomes visible to a read_committed
 *	   reader before the local facts it depends on are durable; a crash
 *	   before it aborts the transaction; a remote source's events were
 *	   made durable by its read()); Kafka commit;
 *	3. T1 commits (synchronously: the worker forces synchronous_commit).
 * A crash between 2 and 3 leaves a batch committed in Kafka but not here.
 * Before the next batch (the routine's begin, after init_transactions, which
 * settles any transaction left open) the worker reads the last checkpoint
 * read_committed and compares it with the local batch counter B:
 *	checkpoint batch = B + 1, positions = its "from": that batch is
 *		applied here now (positions moved to "to", the batch counted);
 *	... positions moved since (reset_pipeline): left as they are;
 *	checkpoint batch <= B: nothing to do — unless it is < B, or there
 *		is no checkpoint while B > 0: Kafka lost batches committed here
 *		(the topic recreated, a broker failed over without the data):
 *		the pipeline stops with an error;
 *	checkpoint batch > B + 1: Kafka holds batches this database never
 *		had (a database restored from a backup): stops with an error.
 *
 * at_least_once.  An idempotent producer; the rows are produced and every
 * one acknowledged (KafkaFlush) before T1 commits; the positions move in
 * a second transaction (batch.c).  A crash between re-produces the batch.
 *
 * The producer belongs to the worker (TopMemoryContext); after a failed
 * batch it is closed (the routine's close) and the next batch opens a new one,
 * which for exactly_once means a new init_transactions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "core/compat.h"
#include "io/kafka.h"
#include "pipeline/sink_kafka.h"
#include "pipeline/worker.h"

#define SG_KAFKA_CHECKPOINT_TOPIC "streamguard_checkpoints"

/* the Kafka sink's state: w->sink_state */
typedef struct SgKafkaSink
{
	SgKafka    *producer;
	bool		transactional;
	bool		need_resolve;	/* a new producer, settled, before the next batch */
	char	   *txn_id;			/* transactional.id, and the checkpoints' key */
	int64	   *from;			/* positions before this batch's fetch */
	int			nfrom;
} SgKafkaSink;

static uint32 sg_we_produce = 0;


/*
 * create_pipeline with a Kafka sink: the topic's name, the caller's USAGE
 * on the server, the topic (and for exactly_once the checkpoint topic)
 * known to the cluster, within streamguard.remote_timeout.
 */
void
KafkaSinkCheck(const char *server, const char *topic, bool exactly_once)
{
	SgKafka    *k;

	KafkaCheckTopicName(topic);
	k = KafkaConsumerOpen(server, GetUserId(), "streamguard-check");
	PG_TRY();
	{
		(void) KafkaTopicPartitions(k, topic, KafkaDeadline());
		if (exactly_once)
			(void) KafkaTopicPartitions(k, SG_KAFKA_CHECKPOINT_TOPIC, KafkaDeadline());
	}
	PG_FINALLY();
	{
		KafkaClose(k);
	}
	PG_END_TRY();
}

/* ------------------------------------------------------------ producer */

static void
sg_sink_status(SgWorker *w, bool connected, const char *error)
{
	PipelineSlotSetRemote(w->slot, SG_SIDE_SINK, w->def.sink_server, connected, 0, error);
}

static SgKafkaSink *
sg_sink(SgWorker *w)
{
	SgKafkaSink *s = (SgKafkaSink *) w->sink_state;

	if (s->txn_id == NULL)
	{
		s->txn_id = MemoryContextStrdup(TopMemoryContext,
										psprintf("streamguard-%s", PipelineSinkKey(w->def.id)));
		if (sg_we_produce == 0)
			sg_we_produce = SG_WAIT_EVENT("StreamguardKafkaProduce", 6);
	}
	if (s->producer == NULL)
	{
		PG_TRY();
		{
			/* as the owner: its USAGE on the server, its user mapping */
			s->producer = KafkaProducerOpen(w->def.sink_server, w->def.owner,
											s->transactional ? s->txn_id : NULL);
			if (s->transactional)
				KafkaTxnInit(s->producer, KafkaDeadline());
		}
		PG_CATCH();
		{
			if (s->producer)
			{
				char		last[256];

				KafkaLastError(s->producer, last, sizeof(last));
				sg_sink_status(w, false, last[0] ? last : "could not initialize the producer");
				KafkaClose(s->producer);
				s->producer = NULL;
			}
			else
				sg_sink_status(w, false, "could not create the Kafka producer");
			PG_RE_THROW();
		}
		PG_END_TRY();
		sg_sink_status(w, true, NULL);
	}
	return s;
}

/* the producer closed, its last error shown (the next batch opens a new one) */
static void
sg_close_producer(SgWorker *w)
{
	SgKafkaSink *s = (SgKafkaSink *) w->sink_state;

	if (s->producer == NULL)
		return;
	{
		char		last[256];

		KafkaLastError(s->producer, last, sizeof(last));
		sg_sink_status(w, false, last[0] ? last : NULL);
	}
	KafkaClose(s->producer);
	s->producer = NULL;
}

/* ---------------------------------------------------------- checkpoints */

/* the pipeline's batch counter as this transaction sees it */
static int64
sg_local_batches(SgWorker *w)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(w->def.id)};
	SgUserSave	save;
	bool		isnull;
	int64		n;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL, SgPipelineStatsCatalog() ?
									  "SELECT batches FROM streamguard.pipeline_stats WHERE pipeline_id OPERATOR(pg_catalog.=) $1" :
									  "SELECT batches FROM streamguard.pipeline WHERE id OPERATOR(pg_catalog.=) $1",
									  1, types),
						 values, NULL, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the batch counter of pipeline %d", w->def.id);
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SgRestoreUser(&save);
	return n;
}

static void
sg_append_positions(StringInfo buf, const int64 *pos, int n)
{
	int			p;

	appendStringInfoChar(buf, '[');
	for (p = 0; p < n; p++)
		appendStringInfo(buf, "%s%lld", p ? "," : "", (long long) pos[p]);
	appendStringInfoChar(buf, ']');
}

/* exactly_once: the positions before this batch's fetch (in T1, fenced) */
static void
sg_note_from(SgWorker *w, SgBatch *b, int nparts)
{
	SgKafkaSink *s = sg_sink(w);

	if (s->from == NULL || s->nfrom < nparts)
	{
		if (s->from)
			pfree(s->from);
		s->from = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * Max(nparts, 1));
	}
	s->nfrom = nparts;
	SourcePositions(w, b, s->from, nparts);
}

typedef struct SgCheckpoint
{
	int64		batch;
	int64		events;
	int64		rows;
	int64	   *from;
	int64	   *to;
	int			n;
} SgCheckpoint;

/* parse a checkpoint's value (JSON written by sg_checkpoint_value) */
static bool
sg_checkpoint_parse(const char *json, SgCheckpoint *c)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(json)};
	bool		isnull;
	ArrayType  *a;
	Datum	   *e;
	int			n,
				i;

	if (SPI_execute_with_args("SELECT (j->>'batch')::pg_catalog.int8, (j->>'events')::pg_catalog.int8, "
							  "(j->>'rows')::pg_catalog.int8, "
							  "ARRAY(SELECT pg_catalog.jsonb_array_elements_text(j->'from')::pg_catalog.int8), "
							  "ARRAY(SELECT pg_catalog.jsonb_array_elements_text(j->'to')::pg_catalog.int8) "
							  "FROM (SELECT $1::pg_catalog.jsonb AS j) s",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT || SPI_processed != 1)
		return false;
	c->batch = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		return false;
	c->events = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	c->rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	a = DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	deconstruct_array(a, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &e, NULL, &n);
	c->n = n;
	c->from = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
		c->from[i] = DatumGetInt64(e[i]);
	a = DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull));
	deconstruct_array(a, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &e, NULL, &n);
	if (n != c->n)
		return false;
	c->to = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
		c->to[i] = DatumGetInt64(e[i]);
	return true;
}

/*
 * The last committed checkpoint of ours, read_committed, or NULL (none in
 * the topic): partition 0 of the checkpoint topic read from its start to
 * its end, in one assignment (librdkafka 2.0.2 aborts the process on an
 * assertion when a partition is assigned again while its earlier
 * assignment is still being stopped).  On a compacted topic that is about
 * one record per pipeline; each message read moves the deadline
 * (streamguard.remote_timeout without progress fails the batch).
 */
static char *
sg_read_checkpoint(SgWorker *w, SgKafkaSink *s)
{
	SgKafka    *k = KafkaConsumerOpen(w->def.sink_server, w->def.owner,
									  psprintf("%s-checkpoint", s->txn_id));
	char	   *found = NULL;

	PG_TRY();
	{
		int64		lo;
		int64		hi = KafkaPartitionEnd(k, SG_KAFKA_CHECKPOINT_TOPIC, 0, KafkaDeadline(), &lo);

		if (hi > lo)
		{
			SgKafkaStart st;
			TimestampTz deadline = KafkaDeadline();

			st.partition = 0;
			st.offset = lo;
			KafkaAssign(k, SG_KAFKA_CHECKPOINT_TOPIC, &st, 1);
			for (;;)
			{
				rd_kafka_message_t *m;
				int64		pos;

				KafkaPositions(k, SG_KAFKA_CHECKPOINT_TOPIC, 1, &pos);
				if (pos >= hi)
					break;
				if (GetCurrentTimestamp() >= deadline)
					KafkaRaise(k, RD_KAFKA_RESP_ERR__TIMED_OUT,
							   psprintf("reading the checkpoints of pipeline \"%s\" (topic \"%s\", offsets %lld to %lld) within streamguard.remote_timeout",
										w->def.name, SG_KAFKA_CHECKPOINT_TOPIC, (long long) lo, (long long) hi));
				m = KafkaPoll(k, 100, sg_we_produce);
				if (m == NULL)
					continue;
				if (m->err)
				{
					if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
						continue;
					KafkaRaise(k, m->err, psprintf("reading the checkpoints of pipeline \"%s\"", w->def.name));
				}
				deadline = KafkaDeadline();
				if (m->offset >= hi)
					break;
				if (m->key && m->key_len == strlen(s->txn_id) &&
					memcmp(m->key, s->txn_id, m->key_len) == 0 && m->payload)
				{
					if (found)
						pfree(found);
					found = pnstrdup(m->payload, m->len);
				}
				KafkaMessageDone(k);
			}
		}
	}
	PG_FINALLY();
	{
		KafkaClose(k);
	}
	PG_END_TRY();
	return found;
}

/* the pipeline's counters for a batch settled from Kafka's checkpoint */
static void
sg_count_recovered(SgWorker *w, SgCheckpoint *c)
{
	Oid			types[3] = {INT4OID, INT8OID, INT8OID};
	Datum		values[3] = {Int32GetDatum(w->def.id), Int64GetDatum(c->events), Int64GetDatum(c->rows)};
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args(SgPipelineStatsCatalog() ?
							  "UPDATE streamguard.pipeline_stats SET batches = batches OPERATOR(pg_catalog.+) 1, "
							  "events_in = events_in OPERATOR(pg_catalog.+) $2, "
							  "rows_out = rows_out OPERATOR(pg_catalog.+) $3, last_batch_at = pg_catalog.now() "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1" :
							  "UPDATE streamguard.pipeline SET batches = batches OPERATOR(pg_catalog.+) 1, "
							  "events_in = events_in OPERATOR(pg_catalog.+) $2, "
							  "rows_out = rows_out OPERATOR(pg_catalog.+) $3, last_batch_at = pg_catalog.now() "
							  "WHERE id OPERATOR(pg_catalog.=) $1",
							  3, types, values, NULL, false, 0) != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "could not count the recovered batch");
	SgRestoreUser(&save);
}

/*
 * Before the first batch of a producer (and after any failed batch), in
 * the batch's transaction, fenced: a new producer (init_transactions
 * settles what an earlier one left open), then for exactly_once the last
 * checkpoint against the local batch counter (see the file's comment).
 * Returns false when the pipeline must stop (w->stop_error says why).
 */
static bool
sg_kafka_sink_settle(SgWorker *w, SgBatch *b, int nparts)
{
	SgKafkaSink *s;
	char	   *json;
	SgCheckpoint c;
	int64		local;
	int64	   *here;
	int			p;
	bool		same = true;

	/* a new producer: the old one may be inside a transaction */
	sg_close_producer(w);
	s = sg_sink(w);
	if (!s->transactional)
		return true;

	pgstat_report_activity(STATE_RUNNING, "read the Kafka checkpoint");
	json = sg_read_checkpoint(w, s);
	local = sg_local_batches(w);
	if (json == NULL)
	{
		if (local == 0)
			return true;
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
											psprintf("Kafka server \"%s\" has no checkpoint of pipeline \"%s\" in topic \"%s\" although %lld batches were committed: "
													 "the topic lost committed data (recreated, or a broker failed over without it); "
													 "to go on, drop the pipeline and create it again (reset_pipeline then sets where it starts)",
													 w->def.sink_server, w->def.name, SG_KAFKA_CHECKPOINT_TOPIC, (long long) local));
		return false;
	}
	if (!sg_checkpoint_parse(json, &c))
	{
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
											psprintf("the checkpoint of pipeline \"%s\" in topic \"%s\" of Kafka server \"%s\" is not one streamguard wrote: %s",
													 w->def.name, SG_KAFKA_CHECKPOINT_TOPIC, w->def.sink_server, json));
		return false;
	}
	if (c.batch < local)
	{
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
											psprintf("Kafka server \"%s\" lost batches of pipeline \"%s\": its last checkpoint is batch %lld, %lld were committed here; "
													 "to go on, drop the pipeline and create it again (reset_pipeline then sets where it starts)",
													 w->def.sink_server, w->def.name, (long long) c.batch, (long long) local));
		return false;
	}
	if (c.batch > local + 1)
	{
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
											psprintf("Kafka server \"%s\" holds batch %lld of pipeline \"%s\" but this database committed only %lld: "
													 "the database went back in time (restored from a backup?) and the messages of the missing batches are in the topic; "
													 "to go on, drop the pipeline and create it again (reset_pipeline then sets where it starts)",
													 w->def.sink_server, (long long) c.batch, w->def.name, (long long) local));
		return false;
	}
	if (c.batch == local)
		return true;

	/*
	 * Committed in Kafka, not here: apply it here, unless positions moved.
	 * Partitions alter_stream added since the batch read (c.n < nparts)
	 * were not read by it: they keep their positions.
	 */
	here = palloc(sizeof(int64) * Max(nparts, 1));
	SourcePositions(w, b, here, nparts);
	if (c.n > nparts)
		same = false;
	for (p = 0; p < c.n && same; p++)
		if (here[p] != c.from[p])
			same = false;
	if (!same)
	{
		ereport(LOG,
				(errmsg("streamguard pipeline \"%s\": batch %lld is committed in Kafka but not here, and the positions moved since (reset_pipeline?): it is not applied here",
						w->def.name, (long long) c.batch)));
		return true;
	}
	if (c.n < nparts)
	{
		int64	   *to = palloc(sizeof(int64) * nparts);

		for (p = 0; p < nparts; p++)
			to[p] = p < c.n ? c.to[p] : here[p];
		c.to = to;
	}
	SourceAdvance(w, b, c.to, nparts);
	sg_count_recovered(w, &c);
	ereport(LOG,
			(errmsg("streamguard pipeline \"%s\": batch %lld was committed in Kafka but not here: positions moved to its checkpoint",
					w->def.name, (long long) c.batch)));
	return true;
}


/*
 * The batch to Kafka, in T1 (fenced, positions moved unless
 * at_least_once): run the SELECT as the owner, its rows produced as they
 * come, then commit the Kafka transaction with the checkpoint
 * (exactly_once) or wait for every acknowledgement (at_least_once).
 * Returns the rows produced.
 */
static int64
sg_kafka_sink_produce(SgWorker *w, SgBatch *b)
{
	SgKafkaSink *s = sg_sink(w);
	int			nparts = b->nparts;
	int64		rows;

	if (s->transactional)
		KafkaTxnBegin(s->producer);
	else
	{
		/* nothing leaves the server before the events it comes from are durable */
		if (w->source->local_events)
			HorizonMakeDurable();
		KafkaDeliveryReset(s->producer);
	}
	rows = KafkaSinkProduceRows(w, s->producer, b->store, b->n, sg_we_produce);

	if (s->transactional)
	{
		int64	   *to = palloc(sizeof(int64) * Max(nparts, 1));
		StringInfoData ck;

		/* the checkpoint: the last message of the transaction */
		SourcePositions(w, b, to, nparts);
		initStringInfo(&ck);
		appendStringInfo(&ck, "{\"pipeline\": %d, \"epoch\": %lld, \"batch\": %lld, \"events\": %lld, \"rows\": %lld, \"from\": ",
						 w->def.id, (long long) w->def.epoch, (long long) (sg_local_batches(w) + 1),
						 (long long) b->fetched, (long long) rows);
		sg_append_positions(&ck, s->from, Min(s->nfrom, nparts));
		appendStringInfoString(&ck, ", \"to\": ");
		sg_append_positions(&ck, to, nparts);
		appendStringInfoChar(&ck, '}');
		KafkaProduce(s->producer, SG_KAFKA_CHECKPOINT_TOPIC, 0, s->txn_id, strlen(s->txn_id),
					 ck.data, ck.len, NULL, sg_we_produce);

		/*
		 * Nothing becomes visible outside before the events it comes from
		 * are durable here: the WAL flush comes before Kafka's commit, while
		 * the produce requests (and the checkpoint partition's
		 * AddPartitionsToTxn) are in flight.  A crash before it aborts the
		 * open Kafka transaction.  (A remote source's events were made
		 * durable there before its read() answered.)
		 */
		if (w->source->local_events)
			HorizonMakeDurable();
		WorkerFault(w, SG_FAULT_MID_COPY);
		pgstat_report_activity(STATE_RUNNING, "commit the Kafka transaction");
		KafkaTxnCommit(s->producer, KafkaDeadline());
		WorkerFault(w, SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	else
	{
		WorkerFault(w, SG_FAULT_MID_COPY);
		pgstat_report_activity(STATE_RUNNING, "wait for Kafka's acknowledgements");
		(void) KafkaFlush(s->producer, sg_we_produce);
		WorkerFault(w, SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	sg_sink_status(w, true, NULL);
	return rows;
}

/* ------------------------------------------------------------ routine */

/* the state; the rows are the messages: checked again, the SQL may have changed */
static const char *
sg_kafka_sink_open(SgWorker *w)
{
	SgKafkaSink *s = MemoryContextAllocZero(TopMemoryContext, sizeof(SgKafkaSink));

	s->transactional = w->def.guarantee == SG_EXACTLY_ONCE;
	s->need_resolve = true;
	w->sink_state = s;
	WorkerBegin("start");
	KafkaSinkCheckShape(w->def.sql);
	WorkerCommit();
	return NULL;
}

/* a new producer and the checkpoint settled, after a failed batch or at start */
static bool
sg_kafka_sink_begin(SgWorker *w, SgBatch *b)
{
	SgKafkaSink *s = (SgKafkaSink *) w->sink_state;

	if (s->need_resolve)
	{
		if (!sg_kafka_sink_settle(w, b, b->nparts))
			return false;
		s->need_resolve = false;
	}
	return true;
}

/* exactly_once: the checkpoint says where the batch began */
static void
sg_kafka_sink_before_fetch(SgWorker *w, SgBatch *b)
{
	if (w->def.guarantee == SG_EXACTLY_ONCE)
		sg_note_from(w, b, b->nparts);
}

/*
 * No event-by-event isolation into Kafka: a batch that failed
 * max_attempts times (not for a transient reason) stops the pipeline,
 * whatever the error policy.
 */
static int64
sg_kafka_sink_write(SgWorker *w, SgBatch *b)
{
	if (b->isolate)
	{
		w->stop_error = MemoryContextStrdup(TopMemoryContext,
											psprintf("a batch to Kafka failed %d times, last: %s",
													 w->def.max_attempts, w->last_error ? w->last_error : "unknown error"));
		return -1;
	}
	return sg_kafka_sink_produce(w, b);
}

/* after a failed batch: the next one opens a new producer and settles */
static void
sg_kafka_sink_close(SgWorker *w)
{
	SgKafkaSink *s = (SgKafkaSink *) w->sink_state;

	sg_close_producer(w);
	s->need_resolve = true;
}

const SgSinkRoutine SgKafkaSinkRoutine = {
	.name = "Kafka topic",
	.open = sg_kafka_sink_open,
	.begin = sg_kafka_sink_begin,
	.before_fetch = sg_kafka_sink_before_fetch,
	.write = sg_kafka_sink_write,
	.close = sg_kafka_sink_close,
};
